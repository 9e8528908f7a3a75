//! The reader's side of a transfer of at most [`STAGED_MAX`] bytes: its
//! receive is posted into buffers of its own when the op that needs it is
//! pushed, not when the receive op runs, so that the message may be in by
//! then. Whoever comes second of the message and the receive op lands the
//! elements in the cached copy and completes the op: the op itself, on its
//! worker, when the message was in first (the common case in a stream,
//! where the owner runs ahead), or else the comm thread.
//!
//! A message of one part (`header::one_message`) is copied into the copy;
//! the elements of two parts were received into a vector of the copy's
//! type, which takes the copy's place, and the copy's old vector is kept
//! for the var's next receive: no copy, no allocation.
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
use super::tile::Tile;
use super::transfer::test_all;
use super::{Plain, buffers};
use crate::op::op_handle::Completion;
use crate::var::WriteGuard;

/// A vector the var's copy held before a receive took its place, kept for
/// its next receive (shared by the var's receives on this rank).
pub(super) type Spare<T> = Arc<Mutex<Option<Vec<T>>>>;

/// The elements of a message that arrived.
enum Payload<T> {
    /// A message of one part, and where its elements start.
    Packed(Vec<u8>, usize),
    /// The second part of a message of two.
    Elements(Vec<T>),
}

/// A staged receive, shared by the comm thread and the receive op.
pub(super) struct Landing<T> {
    stage: Mutex<Stage<T>>,
    spare: Spare<T>,
}

enum Stage<T> {
    /// Posted; neither the message nor the op is in.
    Posted,
    /// The op ran first: the copy's guard and the op's completion.
    Claimed(WriteGuard<Tile<T>>, Completion<()>),
    /// The message (or the transfer's failure) came first.
    Arrived(Result<Payload<T>, TransferError>),
    Landed,
}

impl<T: Plain> Landing<T> {
    pub(super) fn new(spare: Spare<T>) -> Arc<Self> {
        Arc::new(Self { stage: Mutex::new(Stage::Posted), spare })
    }

    /// The receive op's body: lands the message if it is in, or leaves the
    /// copy to the comm thread.
    pub(super) fn claim(&self, mut copy: WriteGuard<Tile<T>>, done: Completion<()>) {
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
    fn arrive(&self, outcome: Result<Payload<T>, TransferError>) {
        let mut stage = self.stage.lock().unwrap_or_else(PoisonError::into_inner);
        match std::mem::replace(&mut *stage, Stage::Landed) {
            Stage::Claimed(mut copy, done) => {
                drop(stage);
                self.land(&mut copy, outcome, done);
            }
            _ => *stage = Stage::Arrived(outcome),
        }
    }

    /// Puts the elements in the cached copy and completes the receive op,
    /// or fails it.
    fn land(
        &self,
        copy: &mut WriteGuard<Tile<T>>,
        outcome: Result<Payload<T>, TransferError>,
        done: Completion<()>,
    ) {
        let copy = &mut copy.0;
        match outcome {
            Ok(Payload::Packed(packed, at)) => {
                let bytes = &packed[at..];
                let count = bytes.len() / std::mem::size_of::<T>().max(1);
                if copy.len() != count {
                    copy.clear();
                    copy.resize(count, T::zeroed());
                }
                bytemuck::cast_slice_mut::<T, u8>(copy).copy_from_slice(bytes);
                buffers::give(packed);
            }
            Ok(Payload::Elements(elements)) => {
                let old = std::mem::replace(copy, elements);
                if old.len() == copy.len() {
                    *self.spare.lock().unwrap_or_else(PoisonError::into_inner) = Some(old);
                }
            }
            Err(err) => return done.fail(err),
        }
        done.succeed(());
    }
}

/// Where a staged receive's message goes.
enum Into<T> {
    /// Not posted yet: a program pushed far ahead holds little for the
    /// receives not posted yet.
    Nothing,
    /// One part.
    Packed(Vec<u8>),
    /// Two: the header, and the elements.
    Split(Vec<u8>, Vec<T>),
}

/// The comm thread's side of a staged receive.
pub(super) struct Staged<T: Plain> {
    expect: Header,
    from: usize,
    into: Into<T>,
    requests: Vec<Request>,
    landing: Arc<Landing<T>>,
    abandoned: Option<String>,
}

impl<T: Plain> Staged<T> {
    pub(super) fn new(expect: Header, from: usize, landing: Arc<Landing<T>>) -> Self {
        Self { expect, from, into: Into::Nothing, requests: Vec::new(), landing, abandoned: None }
    }

    /// The header's bytes, once in.
    fn head(&self) -> &[u8] {
        match &self.into {
            Into::Nothing => &[],
            Into::Packed(head) | Into::Split(head, _) => head,
        }
    }

    /// What the message says, checked against this rank's books: where
    /// its elements start, or why it fails the op.
    fn outcome(&self, result: Result<(), Code>) -> Result<usize, TransferError> {
        let what = || self.expect.to_string();
        if let Some(why) = &self.abandoned {
            return Err(TransferError::Abandoned { what: what(), why: why.clone() });
        }
        match (result, Header::decode(self.head())) {
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
        let count = self.expect.count as usize;
        let bytes = count * std::mem::size_of::<T>();
        self.into = if one_message(bytes) {
            Into::Packed(buffers::take(HEADER_MAX + bytes))
        } else {
            let spare = self.landing.spare.lock().unwrap_or_else(PoisonError::into_inner).take();
            let elements = spare.filter(|v| v.len() == count).unwrap_or_else(|| vec![T::zeroed(); count]);
            Into::Split(buffers::take(HEADER_MAX), elements)
        };
        let (from, tag) = (self.from as c_int, tag(self.expect.slot, self.expect.seq));
        let u8s = u8::equivalent_datatype().as_raw();
        let (first, second): (&mut [u8], Option<&mut [u8]>) = match &mut self.into {
            Into::Nothing => unreachable!("just made"),
            Into::Packed(packed) => (packed, None),
            Into::Split(head, elements) => (head, Some(bytemuck::cast_slice_mut::<T, u8>(elements))),
        };
        for part in std::iter::once(first).chain(second) {
            let count = c_int::try_from(part.len()).map_err(|_| Code(-1))?;
            // SAFETY: the buffers are owned here (moved with it, their heap
            // memory unmoved), untouched until `test` says the requests are
            // done (a cancelled one included).
            let request = unsafe { raw::receive(comm, part.as_mut_ptr().cast(), count, u8s, from, tag) }?;
            self.requests.push(request);
        }
        Ok(())
    }

    fn test(&mut self) -> Result<bool, Code> {
        test_all(&mut self.requests)
    }

    fn finish(mut self: Box<Self>, result: Result<(), Code>) {
        let outcome = self.outcome(result).map(|at| match std::mem::replace(&mut self.into, Into::Nothing) {
            Into::Packed(mut packed) => {
                // The elements end where the var's count of them does.
                packed.truncate(at + self.expect.count as usize * std::mem::size_of::<T>());
                Payload::Packed(packed, at)
            }
            Into::Split(head, elements) => {
                buffers::give(head);
                Payload::Elements(elements)
            }
            Into::Nothing => Payload::Packed(Vec::new(), 0),
        });
        self.landing.arrive(outcome);
    }

    fn close(self: Box<Self>) {
        let what = self.expect.to_string();
        self.landing.arrive(Err(TransferError::Closed { what }));
    }

    fn abandon(mut self: Box<Self>, why: &str) -> Option<Box<dyn Transfer>> {
        let started = !self.requests.is_empty();
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
                // buffers stay here until then.
                for request in &mut self.requests {
                    let _ = request.cancel();
                }
                Some(self)
            }
        }
    }
}
