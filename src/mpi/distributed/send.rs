//! The owner's side of a transfer of at most [`STAGED_MAX`] bytes: the
//! send op copies the var's elements and, mostly, completes at once, so
//! that the var is free for its next write while MPI sends the copy.
//!
//! Its `unsafe` block starts MPI's immediate sends on the copies (`raw.rs`
//! says why the raw calls).

#![allow(unsafe_code)]

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

use mpi::datatype::Equivalence;
use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;

use super::super::flight::Transfer;
use super::super::raw::{self, Code, Request, test_all};
use super::error::TransferError;
use super::header::{Header, one_message, tag};
use super::slice::DistSlice;
use super::{Plain, buffers};
use crate::engine::Completion;
use crate::var::ReadGuard;

/// The largest send taken for eager (see `Transfer::eager`): well under
/// the eager limits of MPI's transports (Open MPI's shared memory: 4 KiB).
const EAGER: usize = 1024;

/// Bytes of copies whose send ops completed before MPI was done with them,
/// in this process: bounded (by [`EARLY_BYTES`]), so that a rank that runs
/// ahead neither holds its program's data twice nor leaves MPI thousands
/// of sends to carry.
static EARLY: AtomicUsize = AtomicUsize::new(0);

/// The most bytes of [`EARLY`] (eager sends aside, which are not counted).
const EARLY_BYTES: usize = 1 << 20;

/// Why the owner cannot send `data` as `header` says: the error it
/// carries, or a length other than the var's.
pub(super) fn sending_failure<T: Plain>(header: &Header, data: &ReadGuard<DistSlice<T>>) -> Option<String> {
    let seen = data.op_seen_error().map(|err| format!("{err:#}"));
    seen.or_else(|| {
        (data.len() as u64 != header.count)
            .then(|| format!("the var holds {} elements, registered with {}", data.len(), header.count))
    })
}

/// What goes on the wire for `header`: the header, then the elements of
/// `data` (or, in their place, `refused` or the error `data` carries, in
/// the header, and no elements) in the same message if
/// [`one_message`], else in a second one.
pub(super) fn copy<T: Plain>(
    header: &Header,
    data: Option<&ReadGuard<DistSlice<T>>>,
    refused: Option<String>,
) -> (Vec<u8>, Option<Vec<u8>>) {
    let bytes = header.count as usize * std::mem::size_of::<T>();
    let failure = refused.or_else(|| sending_failure(header, data?));
    let elements: &[u8] = match (data, &failure) {
        (Some(data), None) => bytemuck::cast_slice::<T, u8>(data),
        _ => &[],
    };
    let head = header.encode(failure.as_deref(), 0);
    if !one_message(bytes) {
        let mut copy = buffers::take(elements.len());
        copy.copy_from_slice(elements);
        return (head, Some(copy));
    }
    let mut packed = buffers::take(head.len() + elements.len());
    packed[..head.len()].copy_from_slice(&head);
    packed[head.len()..].copy_from_slice(elements);
    (packed, None)
}

/// A send of copies. Its op completes at once if the send is eager or the
/// bytes sent early allow it, and else once MPI is done with the copies: a
/// wait of its own, never a block on others (nothing queues behind it).
pub(super) struct Copied {
    header: Header,
    /// The header (with the elements, if they go in one message).
    head: Vec<u8>,
    /// The elements, if they go in a second message.
    elements: Option<Vec<u8>>,
    to: usize,
    requests: Vec<Request>,
    /// The op, not completed yet.
    done: Option<Completion<()>>,
    /// Bytes it counts in [`EARLY`].
    early: usize,
}

impl Copied {
    /// The send of `wire` (see [`copy`]), completing `done` at once if it
    /// may.
    pub(super) fn new(
        header: Header,
        (head, elements): (Vec<u8>, Option<Vec<u8>>),
        to: usize,
        done: Option<Completion<()>>,
    ) -> Self {
        let len = head.len() + elements.as_ref().map_or(0, Vec::len);
        let eager = elements.is_none() && len <= EAGER;
        let mut send = Self { header, head, elements, to, requests: Vec::new(), done, early: 0 };
        let early = eager
            || EARLY
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n + len <= EARLY_BYTES).then_some(n + len)
                })
                .is_ok();
        if early {
            send.early = if eager { 0 } else { len };
            if let Some(done) = send.done.take() {
                done.succeed(());
            }
        }
        send
    }
}

impl Drop for Copied {
    fn drop(&mut self) {
        EARLY.fetch_sub(self.early, Ordering::Relaxed);
    }
}

impl Transfer for Copied {
    fn turn(&self) -> (u32, u32) {
        (self.header.slot, self.header.dist)
    }

    fn eager(&self) -> bool {
        self.elements.is_none() && self.head.len() <= EAGER
    }

    fn start(&mut self, comm: &SimpleCommunicator, shift: u64) -> Result<(), Code> {
        let (to, tag) = (self.to as c_int, tag(self.header.slot, self.header.seq.wrapping_add(shift)));
        let u8s = u8::equivalent_datatype().as_raw();
        for part in std::iter::once(&self.head).chain(&self.elements) {
            let count = c_int::try_from(part.len()).map_err(|_| Code(-1))?;
            // SAFETY: the copies are owned here, their buffers unmoved (a
            // move of a vector does not move its buffer) and unwritten
            // until `test` says the requests are done, or forgotten with
            // them (`abandon`).
            let request = unsafe { raw::send(comm, part.as_ptr().cast(), count, u8s, to, tag) }?;
            self.requests.push(request);
        }
        Ok(())
    }

    fn test(&mut self) -> Result<bool, Code> {
        test_all(&mut self.requests)
    }

    fn finish(mut self: Box<Self>, result: Result<(), Code>) {
        let what = || self.header.to_string();
        match (self.done.take(), result) {
            (Some(done), Ok(())) => done.succeed(()),
            (Some(done), Err(code)) => done.fail(TransferError::Mpi { what: what(), code: code.0 }),
            // The op completed when it copied: the receiver's op fails
            // instead, by MPI's error on its side.
            (None, Err(code)) => {
                tracing::error!(target: "depengine", "{}: MPI error {} sending it", what(), code.0)
            }
            (None, Ok(())) => {}
        }
        buffers::give(std::mem::take(&mut self.head));
        if let Some(elements) = self.elements.take() {
            buffers::give(elements);
        }
    }

    fn close(mut self: Box<Self>) {
        if let Some(done) = self.done.take() {
            done.fail(TransferError::Closed { what: self.header.to_string() });
        }
    }

    fn abandon(mut self: Box<Self>, why: &str) -> Option<Box<dyn Transfer>> {
        let started = !self.requests.is_empty();
        match self.test() {
            Ok(true) if started => self.finish(Ok(())),
            Err(code) => self.finish(Err(code)),
            Ok(_) => {
                if let Some(done) = self.done.take() {
                    let what = self.header.to_string();
                    done.fail(TransferError::Abandoned { what, why: why.to_owned() });
                }
                // A send cannot be cancelled: MPI may still read the
                // copies, which are left to it for good (its count of
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
