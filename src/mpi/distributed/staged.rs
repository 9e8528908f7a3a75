//! Small transfers: one message, the header and the elements packed
//! together, through buffers of their own, so that neither side's op waits
//! for the comm thread.
//!
//! * The owner's send op packs the var's elements behind the header and
//!   completes at once: the var is free for its next write while MPI sends
//!   the packed copy ([`Packed`]).
//! * The reader posts its receive into a buffer of its own when the op that
//!   needs it is pushed, not when the receive op runs ([`Staged`]). Whoever
//!   comes second of the message and the receive op lands the elements in
//!   the cached copy and completes the op: the op itself, on its worker,
//!   when the message was in first (the common case in a stream, where the
//!   owner runs ahead), or the comm thread.
//!
//! The copies cost what MPI's own eager protocol costs again; the hand-offs
//! they save cost more up to [`STAGED_MAX`] (PERFORMANCE.md, *Transfers*).
//!
//! Its `unsafe` blocks start MPI's immediate send and receive on the packed
//! buffers (`raw.rs` says why the raw calls).

#![allow(unsafe_code)]

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use mpi::datatype::Equivalence;
use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;

use super::super::flight::Transfer;
use super::super::raw::{self, Code, Request};
use super::error::TransferError;
use super::header::{HEADER_MAX, Header, tag};
use super::tile::Tile;
use super::{Plain, buffers};
use crate::op::op_handle::Completion;
use crate::var::{ReadGuard, WriteGuard};

/// The most bytes of elements a transfer moves through staged buffers;
/// larger ones go from the var's memory to the copy's (`transfer.rs`).
pub(super) const STAGED_MAX: usize = 64 * 1024;

/// The largest packed send taken for eager (see `Transfer::eager`): well
/// under the eager limits of MPI's transports (Open MPI's shared memory:
/// 4 KiB).
const EAGER: usize = 1024;

/// The owner's elements behind `header`, or `failure` in the header with
/// no elements: one message.
pub(super) fn pack<T: Plain>(header: &Header, data: &ReadGuard<Tile<T>>, refused: Option<String>) -> Vec<u8> {
    let failure = refused.or_else(|| sending_failure(header, data));
    let bytes: &[u8] = if failure.is_some() { &[] } else { bytemuck::cast_slice::<T, u8>(data) };
    let head = header.encode(failure.as_deref(), 0);
    let mut packed = buffers::take(head.len() + bytes.len());
    packed[..head.len()].copy_from_slice(&head);
    packed[head.len()..].copy_from_slice(bytes);
    packed
}

/// Why the owner cannot send `data` as `header` says: the error it
/// carries, or a length other than the var's.
pub(super) fn sending_failure<T: Plain>(header: &Header, data: &ReadGuard<Tile<T>>) -> Option<String> {
    let seen = data.op_seen_error().map(|err| format!("{err:#}"));
    seen.or_else(|| {
        (data.len() as u64 != header.count)
            .then(|| format!("the var holds {} elements, registered with {}", data.len(), header.count))
    })
}

/// Bytes of packed sends whose ops completed before MPI was done with
/// them, in this process: bounded (by [`EARLY_BYTES`]), so that a rank that
/// runs ahead neither holds its program's data twice nor leaves MPI
/// thousands of sends to carry.
static EARLY: AtomicUsize = AtomicUsize::new(0);

/// The most bytes of [`EARLY`] (eager sends aside, which are not counted).
const EARLY_BYTES: usize = 1 << 20;

/// A packed send. Its op completes at once if the send is eager or the
/// bytes sent early allow it, and else once MPI is done with the buffer:
/// a wait of its own, never a block on others (nothing queues behind it).
pub(super) struct Packed {
    header: Header,
    packed: Vec<u8>,
    to: usize,
    request: Option<Request>,
    /// The op, not completed yet.
    done: Option<Completion<()>>,
    /// Bytes it counts in [`EARLY`].
    early: usize,
}

impl Packed {
    /// The send of `packed`, completing `done` at once if it may.
    pub(super) fn new(header: Header, packed: Vec<u8>, to: usize, done: Option<Completion<()>>) -> Self {
        let len = packed.len();
        let mut send = Self { header, packed, to, request: None, done, early: 0 };
        let early = len <= EAGER
            || EARLY
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n + len <= EARLY_BYTES).then_some(n + len)
                })
                .is_ok();
        if early {
            send.early = if len <= EAGER { 0 } else { len };
            if let Some(done) = send.done.take() {
                done.succeed(());
            }
        }
        send
    }
}

impl Drop for Packed {
    fn drop(&mut self) {
        EARLY.fetch_sub(self.early, Ordering::Relaxed);
    }
}

impl Transfer for Packed {
    fn turn(&self) -> (u32, u32) {
        (self.header.slot, self.header.dist)
    }

    fn eager(&self) -> bool {
        self.packed.len() <= EAGER
    }

    fn start(&mut self, comm: &SimpleCommunicator) -> Result<(), Code> {
        let count = c_int::try_from(self.packed.len()).map_err(|_| Code(-1))?;
        let (to, tag) = (self.to as c_int, tag(self.header.slot, self.header.seq));
        let u8s = u8::equivalent_datatype().as_raw();
        // SAFETY: the packed buffer is owned here, unmoved (a move of the
        // vector does not move its heap buffer) and unwritten until `test`
        // says the request is done, or forgotten with it (`abandon`).
        let request = unsafe { raw::send(comm, self.packed.as_ptr().cast(), count, u8s, to, tag) }?;
        self.request = Some(request);
        Ok(())
    }

    fn test(&mut self) -> Result<bool, Code> {
        self.request.as_mut().map_or(Ok(true), Request::test)
    }

    fn finish(mut self: Box<Self>, result: Result<(), Code>) {
        let what = || self.header.to_string();
        match (self.done.take(), result) {
            (Some(done), Ok(())) => done.succeed(()),
            (Some(done), Err(code)) => done.fail(TransferError::Mpi { what: what(), code: code.0 }),
            // The op completed when it packed: the receiver's op fails
            // instead, by MPI's error on its side.
            (None, Err(code)) => {
                tracing::error!(target: "depengine", "{}: MPI error {} sending it", what(), code.0)
            }
            (None, Ok(())) => {}
        }
        buffers::give(std::mem::take(&mut self.packed));
    }

    fn close(mut self: Box<Self>) {
        if let Some(done) = self.done.take() {
            done.fail(TransferError::Closed { what: self.header.to_string() });
        }
    }

    fn abandon(mut self: Box<Self>, why: &str) -> Option<Box<dyn Transfer>> {
        let started = self.request.is_some();
        match self.test() {
            Ok(true) if started => self.finish(Ok(())),
            Err(code) => self.finish(Err(code)),
            Ok(_) => {
                if let Some(done) = self.done.take() {
                    let what = self.header.to_string();
                    done.fail(TransferError::Abandoned { what, why: why.to_owned() });
                }
                // A send cannot be cancelled: MPI may still read the
                // buffer, which is left to it for good (its count of
                // early bytes given back first). One not started is only
                // dropped.
                if started {
                    EARLY.fetch_sub(std::mem::take(&mut self.early), Ordering::Relaxed);
                    std::mem::forget(self);
                }
            }
        }
        None
    }
}

/// A staged receive, shared by the comm thread and the receive op.
pub(super) struct Landing<T> {
    stage: Mutex<Stage<T>>,
}

enum Stage<T> {
    /// Posted; neither the message nor the op is in.
    Posted,
    /// The op ran first: the copy's guard and the op's completion.
    Claimed(WriteGuard<Tile<T>>, Completion<()>),
    /// The message (or the transfer's failure) came first: the message and
    /// where its elements start.
    Arrived(Result<(Vec<u8>, usize), TransferError>),
    Landed,
}

impl<T: Plain> Landing<T> {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self { stage: Mutex::new(Stage::Posted) })
    }

    /// The receive op's body: lands the message if it is in, or leaves the
    /// copy to the comm thread.
    pub(super) fn claim(&self, mut copy: WriteGuard<Tile<T>>, done: Completion<()>) {
        let mut stage = self.stage.lock().unwrap_or_else(PoisonError::into_inner);
        match std::mem::replace(&mut *stage, Stage::Landed) {
            Stage::Arrived(outcome) => {
                drop(stage);
                land(&mut copy, outcome, done);
            }
            _ => *stage = Stage::Claimed(copy, done),
        }
    }

    /// The comm thread's side: the message is in (or failed).
    fn arrive(&self, outcome: Result<(Vec<u8>, usize), TransferError>) {
        let mut stage = self.stage.lock().unwrap_or_else(PoisonError::into_inner);
        match std::mem::replace(&mut *stage, Stage::Landed) {
            Stage::Claimed(mut copy, done) => {
                drop(stage);
                land(&mut copy, outcome, done);
            }
            _ => *stage = Stage::Arrived(outcome),
        }
    }
}

/// Copies the elements into the cached copy (sized to them) and completes
/// the receive op, or fails it.
fn land<T: Plain>(
    copy: &mut WriteGuard<Tile<T>>,
    outcome: Result<(Vec<u8>, usize), TransferError>,
    done: Completion<()>,
) {
    match outcome {
        Ok((packed, at)) => {
            let bytes = &packed[at..];
            let copy = &mut copy.0;
            let count = bytes.len() / std::mem::size_of::<T>().max(1);
            if copy.len() != count {
                copy.clear();
                copy.resize(count, T::zeroed());
            }
            bytemuck::cast_slice_mut::<T, u8>(copy).copy_from_slice(bytes);
            buffers::give(packed);
            done.succeed(());
        }
        Err(err) => done.fail(err),
    }
}

/// The comm thread's side of a staged receive.
pub(super) struct Staged<T: Plain> {
    expect: Header,
    from: usize,
    packed: Vec<u8>,
    request: Option<Request>,
    landing: Arc<Landing<T>>,
    abandoned: Option<String>,
}

impl<T: Plain> Staged<T> {
    /// Its buffer is made when it is posted: a program pushed far ahead
    /// holds little for the receives not posted yet.
    pub(super) fn new(expect: Header, from: usize, landing: Arc<Landing<T>>) -> Self {
        Self { expect, from, packed: Vec::new(), request: None, landing, abandoned: None }
    }

    /// What the message says, checked against this rank's books: where
    /// its elements start, or why it fails the op.
    fn outcome(&self, result: Result<(), Code>) -> Result<usize, TransferError> {
        let what = || self.expect.to_string();
        if let Some(why) = &self.abandoned {
            return Err(TransferError::Abandoned { what: what(), why: why.clone() });
        }
        match (result, Header::decode(&self.packed)) {
            (_, Some(theirs)) if theirs.header != self.expect => Err(TransferError::Mismatch {
                mine: what(),
                rank: self.from,
                theirs: theirs.header.to_string(),
            }),
            (Err(code), _) => Err(TransferError::Mpi { what: what(), code: code.0 }),
            (Ok(()), Some(theirs)) => match theirs.failure {
                Some(message) => Err(TransferError::FailedOnOwner { what: what(), rank: self.from, message }),
                None => Ok(theirs.len),
            },
            (Ok(()), None) => Err(TransferError::Mismatch {
                mine: what(),
                rank: self.from,
                theirs: "a message that is not a transfer's header".to_owned(),
            }),
        }
    }
}

impl<T: Plain> Transfer for Staged<T> {
    fn turn(&self) -> (u32, u32) {
        (self.expect.slot, self.expect.dist)
    }

    fn ahead(&self) -> bool {
        true
    }

    fn start(&mut self, comm: &SimpleCommunicator) -> Result<(), Code> {
        let bytes = self.expect.count as usize * std::mem::size_of::<T>();
        self.packed = buffers::take(HEADER_MAX + bytes);
        let count = c_int::try_from(self.packed.len()).map_err(|_| Code(-1))?;
        let (from, tag) = (self.from as c_int, tag(self.expect.slot, self.expect.seq));
        let u8s = u8::equivalent_datatype().as_raw();
        // SAFETY: the buffer is owned here, unmoved and untouched until
        // `test` says the request is done (a cancelled one included).
        let request = unsafe { raw::receive(comm, self.packed.as_mut_ptr().cast(), count, u8s, from, tag) }?;
        self.request = Some(request);
        Ok(())
    }

    fn test(&mut self) -> Result<bool, Code> {
        self.request.as_mut().map_or(Ok(true), Request::test)
    }

    fn finish(mut self: Box<Self>, result: Result<(), Code>) {
        let outcome = self.outcome(result).map(|at| {
            // The elements end where the var's count of them does.
            let end = at + self.expect.count as usize * std::mem::size_of::<T>();
            let mut packed = std::mem::take(&mut self.packed);
            packed.truncate(end);
            (packed, at)
        });
        self.landing.arrive(outcome);
    }

    fn close(self: Box<Self>) {
        let what = self.expect.to_string();
        self.landing.arrive(Err(TransferError::Closed { what }));
    }

    fn abandon(mut self: Box<Self>, why: &str) -> Option<Box<dyn Transfer>> {
        let started = self.request.is_some();
        match self.test() {
            Ok(true) if started => {
                self.finish(Ok(()));
                None
            }
            Err(code) => {
                self.finish(Err(code));
                None
            }
            Ok(_) => {
                self.abandoned = Some(why.to_owned());
                if !started {
                    self.finish(Ok(()));
                    return None;
                }
                // A cancelled receive still completes, through `test`; its
                // buffer stays here until then.
                if let Some(request) = &mut self.request {
                    let _ = request.cancel();
                }
                Some(self)
            }
        }
    }
}
