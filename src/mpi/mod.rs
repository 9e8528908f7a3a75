//! Collectives across processes as engine ops (feature `mpi`).
//!
//! A [`Collectives`] owns one thread that owns MPI: it initialises it,
//! starts each collective as an immediate (non-blocking) MPI call, keeps
//! testing those in flight (MPI makes progress only inside its calls),
//! and sleeps on its queue when none is. A collective is pushed as an
//! async engine op on the vars it reads and writes: compute that does not
//! touch them runs meanwhile, and its handle, `wait_for_var` and
//! `wait_for_all` behave as for any op. No engine worker and no Tokio
//! thread ever waits in MPI. A collective's op only hands its guards to
//! the comm thread, so it runs on the thread that makes it ready
//! ([`Lane::Inline`]): no worker is woken for it.
//!
//! **The rule.** MPI matches collectives by their order, not by name:
//! every rank must push the same collectives, on vars of the same sizes,
//! in the same order (the order of the calls on [`Collectives`]; calls
//! from several threads are ordered as they take its lock). Before its
//! data, each collective's signature (kind, element type, size, root,
//! reduction, the var's name if it has one) goes to every rank: where the
//! ranks disagree, the collective fails on every rank with
//! [`CollectiveError::Mismatch`], naming both sides, instead of swapping
//! data or hanging. Priorities order compute ops, never the collectives
//! among themselves.
//!
//! **Failure.** A collective whose input carries an error (an op before
//! it failed on one rank) still takes part, and fails on every rank
//! together ([`CollectiveError::FailedOnRanks`], which names each failing
//! rank and its [`RankFailure`]). A collective refused at push, or pushed
//! but never run (a cancelling shutdown), takes part as failed, saying
//! why. A rank that
//! exits makes `mpirun` end the others. Dropping the [`Collectives`]
//! waits for the collectives in flight.
//!
//! **Tiles across ranks.** [`distributed`] runs one tiled program on every rank,
//! each op on the owner of what it writes, the vars it reads moved by the
//! engine; its transfers go through the same comm thread.

// For maintainers: `README.md` beside this file has the protocol and its
// argument.

mod comm_thread;
pub mod distributed;
mod error;
mod flight;
#[cfg(feature = "nccl")]
mod nccl;
mod raw;
mod sig;
mod transfers;
mod turns;

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use crate::device::Lane;
use crate::engine::OpHandle;
use crate::engine::{Engine, OpBuilder};
use crate::error::Error;
use crate::var::{ReadGuard, Var, WriteGuard};
use comm_thread::Msg;
use flight::{Flight, Typed, What};
use sig::Signature;

pub use error::{CollectiveError, RankFailure};
#[cfg(feature = "nccl")]
pub use nccl::{GpuCollectiveElement, GpuCollectives};

mod sealed {
    /// Only the element types MPI knows (rsmpi's equivalence).
    pub trait Sealed: mpi::datatype::Equivalence {}
}

/// An element type of a collective's buffers: `f32`, `f64`, `i32`, `i64`,
/// `u32`, `u64`, `u8`.
pub trait Element: sealed::Sealed + bytemuck::Pod + Default + Send + Sync + 'static {
    /// Its code in a signature.
    #[doc(hidden)]
    const CODE: u8;
    /// Whether [`Reduce::Mean`] applies.
    #[doc(hidden)]
    const FLOAT: bool;
    /// Divides each element by `n` (floats only).
    #[doc(hidden)]
    fn divide(xs: &mut [Self], n: usize);
    /// `a` and `b` combined by `op` (a mean sums: the division comes
    /// after), as a small all-reduce done by its signature exchange does.
    #[doc(hidden)]
    fn combine(op: Reduce, a: Self, b: Self) -> Self;
}

macro_rules! element {
    ($t:ty, $code:expr, float) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const CODE: u8 = $code;
            const FLOAT: bool = true;
            fn divide(xs: &mut [Self], n: usize) {
                let by = n as $t;
                xs.iter_mut().for_each(|x| *x /= by);
            }
            fn combine(op: Reduce, a: Self, b: Self) -> Self {
                match op {
                    Reduce::Sum | Reduce::Mean => a + b,
                    // One rule, commutative and associative, so that every
                    // order of folding gives every rank the same bits: a
                    // NaN wins (as the quiet NaN), and −0 is below +0.
                    _ if a.is_nan() || b.is_nan() => <$t>::NAN,
                    Reduce::Min if a < b || (a == b && a.is_sign_negative()) => a,
                    Reduce::Max if a > b || (a == b && a.is_sign_positive()) => a,
                    Reduce::Min | Reduce::Max => b,
                }
            }
        }
    };
    ($t:ty, $code:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const CODE: u8 = $code;
            const FLOAT: bool = false;
            fn divide(_: &mut [Self], _: usize) {
                unreachable!("a mean of integers is refused at push")
            }
            fn combine(op: Reduce, a: Self, b: Self) -> Self {
                match op {
                    // MPI's integer sums wrap on every implementation.
                    Reduce::Sum | Reduce::Mean => a.wrapping_add(b),
                    Reduce::Min => a.min(b),
                    Reduce::Max => a.max(b),
                }
            }
        }
    };
}
element!(f32, 1, float);
element!(f64, 2, float);
element!(i32, 3);
element!(i64, 4);
element!(u32, 5);
element!(u64, 6);
element!(u8, 7);

/// How an all-reduce or a reduce-scatter combines the ranks' elements.
///
/// Over floats, `Min` and `Max` follow one rule whatever the size and the
/// number of ranks (small all-reduces, folded in the signature exchange,
/// and MPI's path alike): a NaN among the elements gives NaN (the quiet
/// `f32::NAN`/`f64::NAN`), and −0.0 is below +0.0 (IEEE 754-2019's
/// `minimum`/`maximum`). Every rank gets the same bits. A float `Sum`
/// (and `Mean`) is rounded in the order the path folds in, which MPI does
/// not fix: the last bit may differ between sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
#[non_exhaustive]
pub enum Reduce {
    /// The sum.
    Sum = 1,
    /// The sum divided by the number of ranks (floats only).
    Mean = 2,
    /// The smallest.
    Min = 3,
    /// The largest.
    Max = 4,
}

impl Reduce {
    fn code(self) -> u8 {
        self as u8
    }

    /// The reduction of a code from [`code`](Self::code).
    fn of_code(code: u8) -> Self {
        match code {
            1 => Self::Sum,
            2 => Self::Mean,
            3 => Self::Min,
            _ => Self::Max,
        }
    }
}

/// An MPI count for `len` elements, or why there is none.
fn mpi_count(len: usize) -> Option<i32> {
    i32::try_from(len).ok()
}

/// The collectives of one process's MPI world, pushed as ops of `engine`.
///
/// MPI is initialised when this is made (once per process) and finalised
/// when it is dropped, after the collectives in flight. Dropped while its
/// thread unwinds from a panic (a rank whose program panicked), it ends the
/// whole job instead (`MPI_Abort`, exit code 101), so that `mpirun` reports
/// the failure rather than waiting for ever for the ranks that wait for
/// this one.
pub struct Collectives {
    engine: Engine,
    /// The next collective's number, held while it is pushed: numbers and
    /// push order agree, so a collective never waits on its vars for one
    /// numbered after it.
    order: Mutex<(u64, Sender<Msg>)>,
    rank: usize,
    size: usize,
    /// The distributions (`distributed`): how many were made, and which tag
    /// slots the live ones hold.
    distributions: Mutex<distributed::Slots>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Collectives {
    /// Initialises MPI on a thread of its own and joins its world. From
    /// then on, a trace written to `DEPENGINE_PROFILE` goes to a file of
    /// this rank's (`trace.json` becomes `trace.rank1.json` on rank 1).
    ///
    /// # Errors
    ///
    /// MPI was initialised already in this process, or could not be.
    pub fn new(engine: &Engine) -> Result<Self, Error> {
        let (tx, thread, rank, size) = comm_thread::start()?;
        crate::engine::name_profiles_by_rank(rank);
        Ok(Self {
            engine: engine.clone(),
            order: Mutex::new((0, tx)),
            rank,
            size,
            distributions: Mutex::default(),
            thread: Some(thread),
        })
    }

    /// This process's rank in the world.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes in the world.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The engine its collectives are ops of.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The distributions' numbers and tag slots.
    fn distributions(&self) -> std::sync::MutexGuard<'_, distributed::Slots> {
        self.distributions.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A way to the comm thread, for a distribution's transfers.
    fn sender(&self) -> Sender<Msg> {
        self.order.lock().unwrap_or_else(std::sync::PoisonError::into_inner).1.clone()
    }

    /// Combines every rank's `var` element by element, leaving the result
    /// in every rank's `var` (an all-reduce). Every rank's `var` holds as
    /// many elements.
    pub fn all_reduce<T: Element>(&self, var: &Var<Vec<T>>, op: Reduce) -> OpHandle<()> {
        if let Err(err) = reducible::<T>(op) {
            return OpHandle::refused(err);
        }
        let (size, tag) = (self.size, tag(var));
        self.push(format!("all_reduce {}", var.label()), |seq, ticket| {
            self.op(&ticket).write(var).run_async(move |(), (data,), done| {
                let failed = data.op_seen_error().is_some();
                let sig = signature::<T>(seq, sig::ALL_REDUCE, op.code(), 0, data.len(), tag, failed);
                ticket.send(Typed::flight(sig, size, What::AllReduce { data, recv: Vec::new(), op }, done));
            })
        })
    }

    /// Copies `root`'s `var` into every rank's `var` (a broadcast). Every
    /// rank's `var` holds as many elements as the root's.
    pub fn broadcast<T: Element>(&self, var: &Var<Vec<T>>, root: usize) -> OpHandle<()> {
        if root >= self.size {
            let err = Error::invalid(format!("broadcast root {root} in a world of {}", self.size));
            return OpHandle::refused(err);
        }
        let (size, tag) = (self.size, tag(var));
        self.push(format!("broadcast {}", var.label()), |seq, ticket| {
            self.op(&ticket).write(var).run_async(move |(), (data,), done| {
                let failed = data.op_seen_error().is_some();
                let sig = signature::<T>(seq, sig::BROADCAST, 0, root as u32, data.len(), tag, failed);
                ticket.send(Typed::flight(sig, size, What::Broadcast { data, root }, done));
            })
        })
    }

    /// Every rank's `input`, concatenated in rank order, into every rank's
    /// `output` (an all-gather). Every rank's `input` holds as many
    /// elements; `output` is resized to the world's size times that.
    pub fn all_gather<T: Element>(&self, input: &Var<Vec<T>>, output: &Var<Vec<T>>) -> OpHandle<()> {
        self.push_pair("all_gather", sig::ALL_GATHER, 0, input, output, |input, output| What::AllGather {
            input,
            output,
        })
    }

    /// Combines every rank's `input` element by element and leaves block
    /// `rank` of the result in this rank's `output` (a reduce-scatter):
    /// `input` holds the world's size times the block's length, `output`
    /// is resized to one block.
    pub fn reduce_scatter<T: Element>(
        &self,
        input: &Var<Vec<T>>,
        output: &Var<Vec<T>>,
        op: Reduce,
    ) -> OpHandle<()> {
        if let Err(err) = reducible::<T>(op) {
            return OpHandle::refused(err);
        }
        self.push_pair(
            "reduce_scatter",
            sig::REDUCE_SCATTER,
            op.code(),
            input,
            output,
            move |input, output| What::ReduceScatter { input, output, op },
        )
    }

    /// Completes once every rank has reached it (a barrier).
    pub fn barrier(&self) -> OpHandle<()> {
        let size = self.size;
        self.push("barrier".to_owned(), |seq, ticket| {
            self.op(&ticket).run_async(move |(), (), done| {
                let sig = signature::<u8>(seq, sig::BARRIER, 0, 0, 0, String::new(), false);
                ticket.send(Typed::flight(sig, size, What::<u8>::Barrier, done));
            })
        })
    }

    /// A collective that reads `input` and writes `output` (two vars).
    fn push_pair<T: Element>(
        &self,
        kind_name: &str,
        kind: u8,
        op: u8,
        input: &Var<Vec<T>>,
        output: &Var<Vec<T>>,
        what: impl FnOnce(ReadGuard<Vec<T>>, WriteGuard<Vec<T>>) -> What<T> + Send + 'static,
    ) -> OpHandle<()> {
        if input.id() == output.id() {
            return OpHandle::refused(Error::invalid(format!(
                "{kind_name} needs two vars: its input and its output"
            )));
        }
        let (size, tag) = (self.size, tag(input));
        self.push(format!("{kind_name} {}", input.label()), |seq, ticket| {
            self.op(&ticket).read(input).write(output).run_async(move |(input,), (output,), done| {
                let failed = input.op_seen_error().is_some() || output.op_seen_error().is_some();
                let sig = signature::<T>(seq, kind, op, 0, input.len(), tag, failed);
                ticket.send(Typed::flight(sig, size, what(input, output), done));
            })
        })
    }

    /// A collective's op: it runs whatever its vars carry (it must take
    /// part), on the thread that makes it ready (its body only hands it
    /// to the comm thread).
    fn op(&self, ticket: &Ticket) -> OpBuilder<'_> {
        self.engine.op(ticket.name().to_owned()).lane(Lane::Inline).no_skip(true)
    }

    /// Numbers a collective and pushes it, under the order lock.
    fn push(&self, name: String, push: impl FnOnce(u64, Ticket) -> OpHandle<()>) -> OpHandle<()> {
        let mut order = self.order.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let seq = order.0;
        // The name says what it waits for, in the explainer and the
        // watchdog's reports: a collective in flight waits for other ranks.
        let name = format!("{name} (collective #{seq}: with every rank)");
        let ticket = Ticket(Arc::new(TicketInner {
            seq,
            name,
            tx: Mutex::new(Some(order.1.clone())),
            why: AtomicU8::new(RankFailure::NeverRan.code()),
        }));
        // A refused push still takes its number: its ticket's drop tells
        // the thread, which takes part in the collective as failed, so that
        // a rank where the engine refused it (closed, full) does not leave
        // the others waiting. This reference keeps the ticket until the
        // refusal's reason is written in it, for the other ranks to read.
        let kept = ticket.clone();
        order.0 += 1;
        match push(seq, ticket).pushed() {
            Ok(handle) => handle,
            Err(err) => {
                kept.0.why.store(RankFailure::of_refusal(&err).code(), Ordering::Relaxed);
                OpHandle::refused(err)
            }
        }
    }
}

/// Refuses a mean of integers.
fn reducible<T: Element>(op: Reduce) -> Result<(), Error> {
    if op == Reduce::Mean && !T::FLOAT {
        return Err(Error::invalid("Reduce::Mean applies to f32 and f64 only"));
    }
    Ok(())
}

/// A var's name for its collectives' signatures (empty: not compared).
fn tag<T: Send + Sync + 'static>(var: &Var<T>) -> String {
    var.name().unwrap_or_default().to_owned()
}

/// A signature for this rank's collective `seq`.
fn signature<T: Element>(
    seq: u64,
    kind: u8,
    op: u8,
    root: u32,
    len: usize,
    tag: String,
    failed: bool,
) -> Signature {
    let failure = if failed { RankFailure::InputError.code() } else { 0 };
    Signature { seq, kind, elem: T::CODE, op, failure, root, count: len as u64, tag }
}

/// A collective's place in the order, carried by its op's body to the
/// comm thread. Dropped without being sent (the body never ran: a refused
/// push, a cancelling shutdown), it tells the thread why, and the thread
/// takes part in the collective as failed, so that the other ranks are not
/// left waiting and know the reason.
#[derive(Clone)]
struct Ticket(Arc<TicketInner>);

struct TicketInner {
    seq: u64,
    name: String,
    /// Taken by the send; still here when the last reference goes, the
    /// collective never ran.
    tx: Mutex<Option<Sender<Msg>>>,
    /// Why it never ran, if it does not (a `RankFailure` code).
    why: AtomicU8,
}

impl Ticket {
    fn name(&self) -> &str {
        &self.0.name
    }

    fn send(self, flight: Box<dyn Flight>) {
        let tx = self.0.tx.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        let tx = tx.expect("a ticket is sent once");
        if let Err(std::sync::mpsc::SendError(Msg::Run(flight))) = tx.send(Msg::Run(flight)) {
            flight.close();
        }
    }
}

impl Drop for TicketInner {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            let why = RankFailure::of_code(*self.why.get_mut()).unwrap_or(RankFailure::NeverRan);
            let _ = tx.send(Msg::Gone(self.seq, why));
        }
    }
}

impl Drop for Collectives {
    fn drop(&mut self) {
        let (pushed, tx) = self.order.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Dropped by a panic's unwinding (out of the rank's program): the
        // other ranks may wait in a collective or a transfer this rank will
        // never reach, and finalising would wait for them. The comm thread
        // ends the whole job instead, and never returns to be joined.
        let stop = if std::thread::panicking() { Msg::Abort } else { Msg::Stop(*pushed) };
        let _ = tx.send(stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl fmt::Debug for Collectives {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Collectives").field("rank", &self.rank).field("size", &self.size).finish()
    }
}

#[cfg(test)]
mod tests;
