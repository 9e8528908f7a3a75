//! One large transfer of a distributed var's version (more than
//! `header::STAGED_MAX` bytes) from its owner to a rank that reads it, from
//! the var's memory to the copy's: a header (what every rank's program says this transfer
//! is, and whether the owner's copy carries an error) and the elements,
//! two messages with the same tag, so MPI's non-overtaking rule keeps them
//! in order. The sender holds the var's read guard and the receiver the
//! cached copy's write guard until MPI is done with their memory.
//!
//! Its `unsafe` blocks start MPI's immediate sends and receives on that
//! memory (`raw.rs` says why the raw calls).

#![allow(unsafe_code)]

use std::ffi::c_int;

use mpi::datatype::Equivalence;
use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;

use super::super::flight::Transfer;
use super::super::raw::{self, Code, Request, test_all};
use super::Plain;
use super::error::TransferError;
use super::header::{HEADER_MAX, Header, tag};
use super::send::sending_failure;
use super::slice::DistSlice;
use crate::engine::Completion;
use crate::var::{ReadGuard, WriteGuard};

/// The owner's side: the var's elements, held by its read guard.
pub(super) struct Outgoing<T: Plain> {
    header: Header,
    data: ReadGuard<DistSlice<T>>,
    /// Why the elements cannot be sent, known before the start.
    failure: Option<String>,
    to: usize,
    done: Option<Completion<()>>,
    /// The header on the wire.
    wire: Option<Vec<u8>>,
    requests: Vec<Request>,
}

impl<T: Plain> Outgoing<T> {
    /// The send of `data` to rank `to`; `failure`, if some, sent in place
    /// of the elements.
    pub(super) fn new(
        header: Header,
        data: ReadGuard<DistSlice<T>>,
        failure: Option<String>,
        to: usize,
        done: Completion<()>,
    ) -> Self {
        Self { header, data, failure, to, done: Some(done), wire: None, requests: Vec::new() }
    }
}

impl<T: Plain> Transfer for Outgoing<T> {
    fn turn(&self) -> (u32, u32) {
        (self.header.slot, self.header.dist)
    }

    fn start(&mut self, comm: &SimpleCommunicator, shift: u64) -> Result<(), Code> {
        let failure = self.failure.take().or_else(|| sending_failure(&self.header, &self.data));
        // A copy that carries an error sends no elements: the header says
        // why, and the receiver fails its op with it.
        let bytes: &[u8] = match &failure {
            None => bytemuck::cast_slice::<T, u8>(&self.data[..]),
            Some(_) => &[],
        };
        let header = self.header.encode(failure.as_deref(), 0);
        let len = c_int::try_from(header.len()).map_err(|_| Code(-1))?;
        let (to, tag) = (self.to as c_int, tag(self.header.slot, self.header.seq.wrapping_add(shift)));
        let u8s = u8::equivalent_datatype().as_raw();
        // SAFETY: the header is a vector this transfer keeps, its buffer
        // unmoved and unwritten, until `test` says both requests are done.
        let head = unsafe { raw::send(comm, header.as_ptr().cast(), len, u8s, to, tag) }?;
        self.wire = Some(header);
        self.requests.push(head);
        let count = c_int::try_from(bytes.len()).map_err(|_| Code(-1))?;
        // SAFETY: the var's vector, held by the read guard this transfer
        // keeps until `test` says the request is done (no op writes the
        // var meanwhile), holds these bytes (or none are sent).
        let body = unsafe { raw::send(comm, bytes.as_ptr().cast(), count, u8s, to, tag) }?;
        self.requests.push(body);
        Ok(())
    }

    fn test(&mut self) -> Result<bool, Code> {
        test_all(&mut self.requests)
    }

    fn finish(self: Box<Self>, result: Result<(), Code>) {
        let Self { header, data, done, .. } = *self;
        drop(data);
        let Some(done) = done else { return };
        match result {
            Ok(()) => done.succeed(()),
            Err(code) => done.fail(TransferError::Mpi { what: header.to_string(), code: code.0 }),
        }
    }

    fn close(self: Box<Self>) {
        let what = self.header.to_string();
        if let Some(done) = self.done {
            done.fail(TransferError::Closed { what });
        }
    }

    fn abandon(mut self: Box<Self>, why: &str) -> Option<Box<dyn Transfer>> {
        let started = !self.requests.is_empty();
        match self.test() {
            Ok(true) if started => self.finish(Ok(())),
            Err(code) => self.finish(Err(code)),
            Ok(_) => {
                let what = self.header.to_string();
                if let Some(done) = self.done.take() {
                    done.fail(TransferError::Abandoned { what, why: why.to_owned() });
                }
                // MPI may still read the header and the var's elements (a
                // send cannot be cancelled): they are left to it for good,
                // the var read-held, which a program that found its ranks
                // disagree ends anyway. One not started is only dropped.
                if started {
                    std::mem::forget(self);
                }
            }
        }
        None
    }
}

/// Where a receive puts the elements: the cached copy, held by its write
/// guard; or, when the engine refused the receive's op on this rank, a
/// buffer dropped once the sender's message is in, so that the sender is
/// not left waiting.
enum Landing<T> {
    Copy(WriteGuard<DistSlice<T>>),
    Drain(Vec<u8>),
}

/// The reader's side.
pub(super) struct Incoming<T: Plain> {
    expect: Header,
    into: Landing<T>,
    from: usize,
    done: Option<Completion<()>>,
    wire: Box<[u8; HEADER_MAX]>,
    requests: Vec<Request>,
    /// Given up, and why: the requests are cancelled.
    abandoned: Option<String>,
}

impl<T: Plain> Incoming<T> {
    /// The receive from rank `from` into the cached copy `data`.
    pub(super) fn new(
        expect: Header,
        data: WriteGuard<DistSlice<T>>,
        from: usize,
        done: Completion<()>,
    ) -> Self {
        Self::landing(expect, Landing::Copy(data), from, Some(done))
    }

    /// The receive of a transfer this rank has no op for: taken, then
    /// dropped.
    pub(super) fn drain(expect: Header, from: usize) -> Self {
        let bytes = expect.count as usize * std::mem::size_of::<T>();
        Self::landing(expect, Landing::Drain(vec![0u8; bytes]), from, None)
    }

    fn landing(expect: Header, into: Landing<T>, from: usize, done: Option<Completion<()>>) -> Self {
        let wire = Box::new([0u8; HEADER_MAX]);
        Self { expect, into, from, done, wire, requests: Vec::new(), abandoned: None }
    }
}

impl<T: Plain> Transfer for Incoming<T> {
    fn turn(&self) -> (u32, u32) {
        (self.expect.slot, self.expect.dist)
    }

    fn start(&mut self, comm: &SimpleCommunicator, shift: u64) -> Result<(), Code> {
        let (from, tag) = (self.from as c_int, tag(self.expect.slot, self.expect.seq.wrapping_add(shift)));
        let u8s = u8::equivalent_datatype().as_raw();
        // SAFETY: the header buffer is a boxed array this transfer keeps,
        // unmoved and untouched, until `test` says the request is done.
        let head = unsafe {
            raw::receive(comm, self.wire.as_mut_ptr().cast(), HEADER_MAX as c_int, u8s, from, tag)
        }?;
        self.requests.push(head);
        let bytes: &mut [u8] = match &mut self.into {
            Landing::Copy(data) => {
                // Sized once: a copy that holds a version already is
                // overwritten, not cleared first.
                let data = &mut data.0;
                let count = self.expect.count as usize;
                if data.len() != count {
                    data.clear();
                    data.resize(count, T::zeroed());
                }
                bytemuck::cast_slice_mut::<T, u8>(data)
            }
            Landing::Drain(buffer) => buffer,
        };
        let count = c_int::try_from(bytes.len()).map_err(|_| Code(-1))?;
        // SAFETY: the cached copy's vector (resized just above, held by
        // the write guard this transfer keeps) or the drain buffer (owned
        // here) is not moved or touched until `test` says the request is
        // done.
        let body = unsafe { raw::receive(comm, bytes.as_mut_ptr().cast(), count, u8s, from, tag) }?;
        self.requests.push(body);
        Ok(())
    }

    fn test(&mut self) -> Result<bool, Code> {
        test_all(&mut self.requests)
    }

    fn finish(self: Box<Self>, result: Result<(), Code>) {
        let Self { expect, into, from, done, wire, abandoned, .. } = *self;
        drop(into);
        let Some(done) = done else { return };
        if let Some(why) = abandoned {
            done.fail(TransferError::Abandoned { what: expect.to_string(), why });
            return;
        }
        if let Err(code) = result {
            // A header that arrived and differs says why (a sender that
            // sent more than was posted, say), better than MPI's code.
            let err = match Header::decode(&wire[..]) {
                Some(theirs) if theirs.header != expect => TransferError::Mismatch {
                    mine: expect.to_string(),
                    rank: from,
                    theirs: theirs.header.to_string(),
                },
                _ => TransferError::Mpi { what: expect.to_string(), code: code.0 },
            };
            done.fail(err);
            return;
        }
        match Header::decode(&wire[..]) {
            Some(theirs) if theirs.header != expect => done.fail(TransferError::Mismatch {
                mine: expect.to_string(),
                rank: from,
                theirs: theirs.header.to_string(),
            }),
            Some(theirs) => match theirs.failure {
                Some(message) => {
                    done.fail(TransferError::FailedOnOwner { what: expect.to_string(), rank: from, message })
                }
                None => done.succeed(()),
            },
            None => done.fail(TransferError::Mismatch {
                mine: expect.to_string(),
                rank: from,
                theirs: "a message that is not a transfer's header".to_owned(),
            }),
        }
    }

    fn close(self: Box<Self>) {
        let what = self.expect.to_string();
        if let Some(done) = self.done {
            done.fail(TransferError::Closed { what });
        }
    }

    fn abandon(self: Box<Self>, why: &str) -> Option<Box<dyn Transfer>> {
        abandon_receive(self, why)
    }
}

/// What [`abandon_receive`] needs of a receive.
pub(super) trait Receive: Transfer + Sized + 'static {
    /// Its requests started (none before it starts).
    fn requests(&mut self) -> &mut [Request];
    /// Marks it given up, and why: its op fails so once it finishes.
    fn give_up(&mut self, why: &str);
}

/// A receive given up (the ranks' programs differ): finished if MPI is
/// done with it; else cancelled and kept in flight, its memory with it,
/// until `test` says the cancellation is done; one not started is
/// finished at once.
pub(super) fn abandon_receive<R: Receive>(mut receive: Box<R>, why: &str) -> Option<Box<dyn Transfer>> {
    let started = !receive.requests().is_empty();
    match receive.test() {
        Ok(true) if started => receive.finish(Ok(())),
        Err(code) => receive.finish(Err(code)),
        Ok(_) => {
            receive.give_up(why);
            if !started {
                receive.finish(Ok(()));
                return None;
            }
            for request in receive.requests() {
                let _ = request.cancel();
            }
            return Some(receive);
        }
    }
    None
}

impl<T: Plain> Receive for Incoming<T> {
    fn requests(&mut self) -> &mut [Request] {
        &mut self.requests
    }

    fn give_up(&mut self, why: &str) {
        self.abandoned = Some(why.to_owned());
    }
}
