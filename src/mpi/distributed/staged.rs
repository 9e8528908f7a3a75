//! The reader's side of a transfer of at most [`STAGED_MAX`] bytes: its
//! receive is posted into buffers of its own when the op that needs it is
//! pushed, not when the receive op runs, so that the message may be in by
//! then. Whoever comes second of the message and the receive op lands the
//! elements in the cached copy and completes the op: the op itself, on its
//! worker, when the message was in first (the common case in a stream,
//! where the owner runs ahead), or else the comm thread.
//!
//! The message is one part, the header then the elements
//! (`header::one_message`), received into a pooled buffer (`buffers.rs`)
//! and copied into the copy. (Receiving the elements, without that copy,
//! into a vector that took the copy's place, measured no faster at 64 KiB,
//! as a second message or through a datatype of two blocks: PERFORMANCE.md,
//! *Tiles across ranks*.)
//!
//! Its `unsafe` blocks start MPI's immediate receives on the buffers
//! (`raw.rs` says why the raw calls).

#![allow(unsafe_code)]

use std::ffi::c_int;
use std::sync::{Arc, Mutex, PoisonError};

use mpi::datatype::Equivalence;
use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;

use super::super::flight::Transfer;
use super::super::raw::{self, Code, Request};
use super::error::TransferError;
use super::header::{HEADER_MAX, Header, one_message, tag};
use super::slice::DistSlice;
use super::transfer::{Receive, abandon_receive};
use super::{Plain, buffers};
use crate::engine::Completion;
use crate::var::WriteGuard;

/// A message that arrived, and where its elements start.
type Payload = (Vec<u8>, usize);

/// A staged receive, shared by the comm thread and the receive op.
pub(super) struct Landing<T> {
    stage: Mutex<Stage<T>>,
}

enum Stage<T> {
    /// Posted; neither the message nor the op is in.
    Posted,
    /// The op ran first: the copy's guard and the op's completion.
    Claimed(WriteGuard<DistSlice<T>>, Completion<()>),
    /// The message (or the transfer's failure) came first.
    Arrived(Result<Payload, TransferError>),
    Landed,
}

impl<T: Plain> Landing<T> {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self { stage: Mutex::new(Stage::Posted) })
    }

    /// The receive op's body: lands the message if it is in, or leaves the
    /// copy to the comm thread.
    pub(super) fn claim(&self, mut copy: WriteGuard<DistSlice<T>>, done: Completion<()>) {
        let mut stage = self.stage.lock().unwrap_or_else(PoisonError::into_inner);
        match std::mem::replace(&mut *stage, Stage::Landed) {
            Stage::Arrived(outcome) => {
                drop(stage);
                self.land(&mut copy, outcome, done);
            }
            _ => *stage = Stage::Claimed(copy, done),
        }
    }

    /// The comm thread's side: the message is in (or failed).
    fn arrive(&self, outcome: Result<Payload, TransferError>) {
        let mut stage = self.stage.lock().unwrap_or_else(PoisonError::into_inner);
        match std::mem::replace(&mut *stage, Stage::Landed) {
            Stage::Claimed(mut copy, done) => {
                drop(stage);
                self.land(&mut copy, outcome, done);
            }
            _ => *stage = Stage::Arrived(outcome),
        }
    }

    /// Copies the elements into the cached copy (sized to them) and
    /// completes the receive op, or fails it.
    fn land(
        &self,
        copy: &mut WriteGuard<DistSlice<T>>,
        outcome: Result<Payload, TransferError>,
        done: Completion<()>,
    ) {
        match outcome {
            Ok((packed, at)) => {
                let copy = &mut copy.0;
                let bytes = &packed[at..];
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
}

/// The comm thread's side of a staged receive.
pub(super) struct Staged<T: Plain> {
    expect: Header,
    from: usize,
    /// Made when it is posted: a program pushed far ahead holds little for
    /// the receives not posted yet.
    packed: Vec<u8>,
    request: Option<Request>,
    landing: Arc<Landing<T>>,
    abandoned: Option<String>,
}

impl<T: Plain> Staged<T> {
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

    fn ahead(&self) -> Option<usize> {
        Some(HEADER_MAX + self.expect.count as usize * std::mem::size_of::<T>())
    }

    fn start(&mut self, comm: &SimpleCommunicator, shift: u64) -> Result<(), Code> {
        let bytes = self.expect.count as usize * std::mem::size_of::<T>();
        debug_assert!(one_message(bytes), "a staged receive is of one part");
        self.packed = buffers::take(HEADER_MAX + bytes);
        let count = c_int::try_from(self.packed.len()).map_err(|_| Code(-1))?;
        let (from, tag) = (self.from as c_int, tag(self.expect.slot, self.expect.seq.wrapping_add(shift)));
        let u8s = u8::equivalent_datatype().as_raw();
        // SAFETY: the buffer is owned here (moved with it, its heap memory
        // unmoved), untouched until `test` says the request is done (a
        // cancelled one included).
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
            let mut packed = std::mem::take(&mut self.packed);
            packed.truncate(at + self.expect.count as usize * std::mem::size_of::<T>());
            (packed, at)
        });
        self.landing.arrive(outcome);
    }

    fn close(self: Box<Self>) {
        let what = self.expect.to_string();
        self.landing.arrive(Err(TransferError::Closed { what }));
    }

    fn abandon(self: Box<Self>, why: &str) -> Option<Box<dyn Transfer>> {
        abandon_receive(self, why)
    }
}

impl<T: Plain> Receive for Staged<T> {
    fn requests(&mut self) -> &mut [Request] {
        self.request.as_mut_slice()
    }

    fn give_up(&mut self, why: &str) {
        self.abandoned = Some(why.to_owned());
    }
}
