//! Tiles across ranks: every rank submits the same program of ops on
//! distributed vars; each op runs once, on the rank that owns what it
//! writes, and the engine moves what it reads from the vars' owners.
//!
//! ```no_run
//! use depengine::mpi::Collectives;
//! use depengine::mpi::distributed::{Distribution, block_cyclic};
//!
//! let engine = depengine::Engine::new();
//! let world = Collectives::new(&engine)?;
//! let dist = Distribution::new(&world)?;
//! // Two tiles of 4 elements, on ranks 0 and 1 % size.
//! let a = dist.var("a", 0, 4, || vec![1.0f64; 4])?;
//! let b = dist.var("b", 1 % dist.size(), 4, || vec![0.0f64; 4])?;
//! // Runs on b's owner; a's elements are sent there first.
//! dist.op("copy").read(&a).write(&b).run(|(a,), (mut b,)| {
//!     b.copy_from_slice(&a);
//!     Ok(())
//! })?;
//! dist.wait().blocking_wait()?; // or `.await` in async code
//! drop(dist); // never blocks: see `Distribution`'s drop
//! # let _ = block_cyclic(0, 0, 2, 2);
//! # Ok::<(), depengine::Error>(())
//! ```
//!
//! **The model**:
//!
//! * a [`DistVar`] has an owner rank, where its data lives; it is made in
//!   the same order on every rank, and only the owner runs its initialiser;
//! * an op writes vars of one owner, and runs there; an op that writes
//!   nothing runs on the owner of its first read (rank 0 if it reads
//!   nothing). An op that writes vars of two owners is refused at push,
//!   on every rank alike;
//! * for each var the op reads that another rank owns, the engine sends
//!   the owner's current version unless the executing rank holds it
//!   already: a send op on the owner (reading the var) and a receive op on
//!   the executing rank (writing its cached copy), both engine ops on the
//!   comm thread of [`Collectives`], so transfers overlap compute as
//!   collectives do. A later write on the owner makes the copies stale;
//!   the next read elsewhere receives the new version;
//! * every rank keeps the same books (versions, copies, the next
//!   transfer's number, a hash of the program so far) from the same
//!   pushes, so no rank asks another what to send. Each transfer's header
//!   carries the sender's books; a receiver whose books differ fails the
//!   reading op with [`TransferError::Mismatch`], naming both sides;
//! * an op that fails on its rank leaves its error on the vars it writes;
//!   a transfer of such a var carries the error, and the op that reads it
//!   on another rank fails with it ([`TransferError::FailedOnOwner`]).

// For maintainers: `README.md` beside this file has the model's argument.

mod buffers;
mod error;
mod grid;
mod header;
mod moves;
mod op;
mod send;
mod slice;
mod staged;
mod transfer;
mod var;
mod wait;

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use super::Collectives;
use super::comm_thread::Msg;
use crate::engine::Engine;
use crate::engine::OpHandle;
use crate::error::Error;
use header::Header;
use moves::{Moved, Mover};

pub use error::TransferError;
pub use grid::{block_cyclic, grid};
pub use op::DistOp;
pub use slice::DistSlice;
pub use var::DistVar;
pub use wait::DistWait;

pub use header::MAX_LIVE;
pub(super) use header::Slots;

/// What a distributed var holds: plain bytes (`bytemuck::Pod`), sent as
/// they are between ranks of one program (the same binary everywhere, so
/// the same layout).
pub trait Plain: bytemuck::Pod + Send + Sync {}

impl<T: bytemuck::Pod + Send + Sync> Plain for T {}

/// The element type's mark in a transfer's header: a hash of its name and
/// size, the same on every rank of one program.
fn elem_mark<T: Plain>() -> u64 {
    mix(std::mem::size_of::<T>() as u64, &std::any::type_name::<T>())
}

/// A program of ops on distributed vars, submitted in the same order on
/// every rank (see the [module](self)).
///
/// Its [`wait`](Self::wait) is a future (or
/// [`blocking_wait`](DistWait::blocking_wait)). Dropping it never blocks,
/// on a runtime's worker or elsewhere: the drop compares the ranks'
/// programs once more (a collective, as [`wait`](Self::wait)'s), and its
/// transfers in flight run on. If the programs differ, every rank gives
/// them up (so that no transfer waits for ever for a message that never
/// comes) and its world's engine reports
/// [`TransferError::ProgramsDiffer`] from
/// [`Engine::wait_for_all`]; the comm thread starts the transfers of a
/// later distribution that reuses its tags only after those of this one
/// (`README.md` beside the source has the argument). Dropped by a panic's
/// unwinding, it does none of this: the [`Collectives`]' drop ends the
/// job.
pub struct Distribution<'c> {
    world: &'c Collectives,
    /// Its number among the world's distributions, in the order they were
    /// made (the same on every rank).
    id: u32,
    /// Its transfers' tag slot (see [`Slots`]).
    slot: u32,
    engine: Engine,
    tx: Sender<Msg>,
    books: Mutex<Books>,
}

/// What every rank knows alike, from the same pushes.
#[derive(Default)]
struct Books {
    vars: Vec<Book>,
    transfers: u64,
    program: u64,
    /// This rank's transfer ops, waited for by `wait`.
    in_flight: Vec<OpHandle<()>>,
    /// Why the ranks' programs were found to differ: every later var and
    /// op is refused with it.
    diverged: Option<Error>,
    stats: Stats,
}

impl Books {
    /// Keeps a transfer's handle for the wait. Those already finished are
    /// let go now and then, so that a long program does not keep one per
    /// transfer (a failure among them still reaches the engine's
    /// `wait_for_all`, which `Distribution::wait` reports).
    fn keep(&mut self, handle: OpHandle<()>) {
        if self.in_flight.len() >= 1024 && self.in_flight.len().is_power_of_two() {
            self.in_flight.retain(|h| !h.is_finished());
        }
        self.in_flight.push(handle);
    }
}

struct Book {
    owner: usize,
    name: Arc<str>,
    /// Why this rank could not make the var's current version (the
    /// engine refused the op that writes it): sent in place of its
    /// elements until an op that repairs it is pushed.
    refused: Option<String>,
    /// How many ops have written it.
    version: u64,
    /// The version each rank holds a copy of (the owner: the current one).
    copies: Vec<Option<u64>>,
}

/// What this rank did for a distribution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Ops it ran (of the program's, those it owns).
    pub ops_run: u64,
    /// Transfers it sent.
    pub sent: u64,
    /// Transfers it received.
    pub received: u64,
    /// Bytes of elements it sent.
    pub bytes_sent: u64,
    /// Bytes of elements it received.
    pub bytes_received: u64,
}

impl<'c> Distribution<'c> {
    /// A distribution over `world`'s ranks, its ops and transfers pushed on
    /// `world`'s engine.
    ///
    /// # Errors
    ///
    /// [`MAX_LIVE`] distributions of `world` are alive on this rank (their
    /// transfers' tags tell them apart): drop one first. Every rank of one
    /// program holds as many at the same point, so every rank refuses alike.
    pub fn new(world: &'c Collectives) -> Result<Self, Error> {
        Self::with_engine(world, world.engine())
    }

    /// A distribution over `world`'s ranks whose ops and transfers are
    /// pushed on `engine` (the comm thread is still `world`'s).
    ///
    /// # Errors
    ///
    /// As for [`new`](Self::new).
    pub fn with_engine(world: &'c Collectives, engine: &Engine) -> Result<Self, Error> {
        let (id, slot) = world.distributions().open()?;
        Ok(Self { world, id, slot, engine: engine.clone(), tx: world.sender(), books: Mutex::default() })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.world.rank()
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.world.size()
    }

    /// The engine the ops run on.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// What this rank did so far.
    pub fn stats(&self) -> Stats {
        self.lock().stats
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A var of `len` elements owned by rank `owner`, whose data `init`
    /// makes there (only there: elsewhere the var holds at most a cached
    /// copy). Every rank makes the same vars in the same order.
    ///
    /// # Errors
    ///
    /// The ranks' programs were found to differ at an earlier
    /// [`wait`](Self::wait), `owner` is not a rank of the world, or the
    /// var holds more than
    /// 2³¹ − 1 bytes (on every rank alike). If `init` makes a vector of
    /// another length, the var is made all the same, carrying that error,
    /// so that every rank's program goes on alike: the ops that use it fail
    /// with it, here and on the ranks it is sent to.
    pub fn var<T: Plain>(
        &self,
        name: &str,
        owner: usize,
        len: usize,
        init: impl FnOnce() -> Vec<T>,
    ) -> Result<DistVar<T>, Error> {
        if let Some(err) = &self.lock().diverged {
            return Err(err.clone());
        }
        if owner >= self.size() {
            return Err(Error::invalid(format!("var `{name}`: owner {owner} in a world of {}", self.size())));
        }
        if len.checked_mul(std::mem::size_of::<T>()).is_none_or(|bytes| bytes > i32::MAX as usize) {
            return Err(Error::invalid(format!(
                "var `{name}`: {len} elements of {} bytes: a transfer holds at most 2^31 - 1 bytes (split it into tiles)",
                std::mem::size_of::<T>()
            )));
        }
        let mut data = if owner == self.rank() { init() } else { Vec::new() };
        // A wrong length is the owner's alone to see: the var is made on
        // every rank all the same (the books stay the same everywhere), and
        // carries the error, which every op that uses it meets.
        let wrong = (owner == self.rank() && data.len() != len)
            .then(|| format!("var `{name}`: its initialiser made {} elements, declared {len}", data.len()));
        if wrong.is_some() {
            data = vec![T::zeroed(); len];
        }
        let mut books = self.lock();
        let id =
            u32::try_from(books.vars.len()).map_err(|_| Error::invalid("more than 2^32 distributed vars"))?;
        let mut copies = vec![None; self.size()];
        copies[owner] = Some(0);
        books.vars.push(Book { owner, name: name.into(), refused: None, version: 0, copies });
        books.program = mix(books.program, &("var", id, owner, len, elem_mark::<T>(), name));
        let local = self.engine.var_named(format!("{name}@{owner}"), slice::DistSlice(data));
        if let Some(wrong) = wrong {
            let init = self.engine.op(format!("init {name}")).write(&local);
            let _ = init.run_detached(move |(), _| Err(wrong.into()));
        }
        Ok(DistVar { id, owner, len, local })
    }

    /// The transfers `reads` need to reach rank `at`, pushed on this rank
    /// where it takes part, and the books brought up to date.
    fn move_reads(&self, books: &mut Books, reads: &[&dyn Moved], at: usize) {
        let rank = self.rank();
        let mover = Mover { engine: &self.engine, tx: &self.tx, rank };
        for var in reads {
            let book = &books.vars[var.id() as usize];
            if book.owner == at || book.copies[at] == Some(book.version) {
                continue;
            }
            let header = Header {
                dist: self.id,
                slot: self.slot,
                seq: books.transfers,
                var: var.id(),
                version: book.version,
                count: var.count() as u64,
                elem: var.elem(),
                program: books.program,
                name: Arc::clone(&book.name),
            };
            let owner = book.owner;
            books.transfers += 1;
            books.vars[var.id() as usize].copies[at] = Some(header.version);
            let bytes = var.bytes() as u64;
            if rank == owner {
                books.stats.sent += 1;
                books.stats.bytes_sent += bytes;
                let refused = books.vars[var.id() as usize].refused.clone();
                if let Some(handle) = var.send(&mover, header, refused, at) {
                    books.keep(handle);
                }
            } else if rank == at {
                books.stats.received += 1;
                books.stats.bytes_received += bytes;
                if let Some(handle) = var.receive(&mover, header, owner) {
                    books.keep(handle);
                }
            }
        }
    }
}

/// The program's hash, one more step along: every rank hashes the same
/// steps alike, and a difference anywhere changes every hash after it.
/// Not a keyed hash (no rank is an adversary), but a cheap one, taken
/// twice per op.
fn mix(program: u64, step: &impl Hash) -> u64 {
    let mut h = Mixer(program ^ 0x9E37_79B9_7F4A_7C15);
    step.hash(&mut h);
    h.finish()
}

/// A 64-bit multiply-rotate hash of the bytes written to it.
struct Mixer(u64);

impl Hasher for Mixer {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(23) ^ n).wrapping_mul(0xA076_1D64_78BD_642F);
    }

    fn finish(&self) -> u64 {
        let z = (self.0 ^ (self.0 >> 32)).wrapping_mul(0xE703_7ED1_A0B4_28DB);
        z ^ (z >> 29)
    }
}

impl fmt::Debug for Distribution<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Distribution")
            .field("rank", &self.rank())
            .field("size", &self.size())
            .finish_non_exhaustive()
    }
}
