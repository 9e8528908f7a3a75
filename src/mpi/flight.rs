//! One collective on its way through the comm thread: its signature, the
//! guards of its vars (held until it is done), its completion, and the
//! buffers MPI reads and writes, which it owns until MPI is done with them.
//!
//! Its `unsafe` blocks start MPI's immediate collectives on those buffers
//! (`raw.rs` says why the raw calls: rsmpi's scoped requests cannot hand
//! a buffer back when its own collective ends).

#![allow(unsafe_code)]

use std::any::{Any, TypeId};
use std::collections::HashMap;

use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;

use super::raw::{self, Buffers, Code, FloatReductions, Request};
use super::sig::{self, Signature};
use super::{CollectiveError, Element, RankFailure, Reduce, mpi_count};
use crate::engine::Completion;
use crate::var::{ReadGuard, WriteGuard};

/// A collective as the comm thread sees it, whatever its element type.
pub(super) trait Flight: Send {
    fn signature(&self) -> &Signature;

    /// Why this rank cannot take part with data, if it cannot (its
    /// signature then says `failed`).
    fn local_error(&self) -> Option<CollectiveError>;

    /// Starts its data collective on `comm`.
    fn start(
        &mut self,
        comm: &SimpleCommunicator,
        floats: &FloatReductions,
        pool: &mut Pool,
    ) -> Result<Request, CollectiveError>;

    /// This rank's data for its signature exchange, if the collective is
    /// small enough to be done by it (`sig::done_by_exchange`); empty
    /// otherwise.
    fn inline(&self) -> Vec<u8>;

    /// Done by the signature exchange: `parts` holds every rank's inline
    /// data, in rank order. Hands the vars back and completes the op.
    fn finish_inline(self: Box<Self>, parts: &[&[u8]]);

    /// Done (or failed on every rank): hands its vars back and completes
    /// its op.
    fn finish(self: Box<Self>, result: Result<(), CollectiveError>, pool: &mut Pool);

    /// The comm thread is gone: fails the op without MPI.
    fn close(self: Box<Self>);
}

/// A point-to-point transfer of a distribution (`distributed/`): started as soon
/// as its op hands it over (a send and a receive match by source and tag,
/// not by the order of the calls), then tested with the rest.
pub(super) trait Transfer: Send {
    /// Its distribution's tag slot and number: the comm thread starts a
    /// slot's transfers one distribution after another (`turns.rs`).
    fn turn(&self) -> (u32, u32);

    /// A small send that MPI completes once it holds the message, whether
    /// or not the receiver has posted its receive (MPI's eager protocol):
    /// the comm thread starts a bounded number of these at once.
    fn eager(&self) -> bool {
        false
    }

    /// A receive posted ahead of its op, pushed with it, and the bytes it
    /// posts: the comm thread posts a bounded number of these at once, the
    /// earliest first.
    fn ahead(&self) -> Option<usize> {
        None
    }

    /// Starts its requests on `comm`, its number moved on by `shift` in
    /// its tag (see `turns.rs`).
    fn start(&mut self, comm: &SimpleCommunicator, shift: u64) -> Result<(), Code>;

    /// Whether every request it started is done.
    fn test(&mut self) -> Result<bool, Code>;

    /// Done, or failed in MPI: hands its var back and completes its op.
    fn finish(self: Box<Self>, result: Result<(), Code>);

    /// The comm thread is gone: fails the op without MPI.
    fn close(self: Box<Self>);

    /// The ranks' programs differ, so this transfer may never be matched:
    /// a receive is cancelled (it stays in flight until `test` says the
    /// cancellation is done); a send, which MPI cannot take back, fails
    /// its op and gives up its memory to MPI for good. Returns the
    /// transfer if it is still in flight.
    fn abandon(self: Box<Self>, why: &str) -> Option<Box<dyn Transfer>>;
}

/// What a collective does, with the guards of its vars.
pub(super) enum What<T: Element> {
    AllReduce { data: WriteGuard<Vec<T>>, recv: Vec<T>, op: Reduce },
    Broadcast { data: WriteGuard<Vec<T>>, root: usize },
    AllGather { input: ReadGuard<Vec<T>>, output: WriteGuard<Vec<T>> },
    ReduceScatter { input: ReadGuard<Vec<T>>, output: WriteGuard<Vec<T>>, op: Reduce },
    Barrier,
}

/// A collective on elements of type `T`.
pub(super) struct Typed<T: Element> {
    sig: Signature,
    size: usize,
    what: What<T>,
    done: Completion<()>,
    local: Option<CollectiveError>,
}

impl<T: Element> Typed<T> {
    /// The collective, checked: a buffer MPI cannot count, or a
    /// reduce-scatter's input that the ranks cannot share evenly, makes it
    /// take part as failed.
    pub(super) fn flight(
        mut sig: Signature,
        size: usize,
        what: What<T>,
        done: Completion<()>,
    ) -> Box<dyn Flight> {
        let what_str = sig.to_string();
        let len = sig.count as usize;
        let local = match &what {
            What::AllGather { .. } if len.checked_mul(size).and_then(mpi_count).is_none() => {
                Some(CollectiveError::TooLarge { what: what_str, len: len.saturating_mul(size) })
            }
            What::ReduceScatter { .. } if !len.is_multiple_of(size) => {
                Some(CollectiveError::Uneven { what: what_str, len, size })
            }
            _ if mpi_count(len).is_none() => Some(CollectiveError::TooLarge { what: what_str, len }),
            _ => None,
        };
        if let (0, Some(local)) = (sig.failure, &local) {
            sig.failure = RankFailure::of_local(local).code();
        }
        Box::new(Self { sig, size, what, done, local })
    }
}

fn datatype<T: Element>() -> mpi::ffi::MPI_Datatype {
    T::equivalent_datatype().as_raw()
}

fn reduction<T: Element>(op: Reduce, floats: &FloatReductions) -> mpi::ffi::MPI_Op {
    use mpi::collective::SystemOperation;
    if let Some(own) = floats.get::<T>(op) {
        return own;
    }
    match op {
        Reduce::Sum | Reduce::Mean => SystemOperation::sum().as_raw(),
        Reduce::Min => SystemOperation::min().as_raw(),
        Reduce::Max => SystemOperation::max().as_raw(),
    }
}

impl<T: Element> Flight for Typed<T> {
    fn signature(&self) -> &Signature {
        &self.sig
    }

    fn local_error(&self) -> Option<CollectiveError> {
        self.local.clone()
    }

    fn start(
        &mut self,
        comm: &SimpleCommunicator,
        floats: &FloatReductions,
        pool: &mut Pool,
    ) -> Result<Request, CollectiveError> {
        let len = self.sig.count as usize;
        let count = |n: usize| mpi_count(n).expect("counts are checked when the collective is made");
        let started = match &mut self.what {
            What::AllReduce { data, recv, op } => {
                *recv = pool.take::<T>(len);
                let b = Buffers {
                    send: data.as_ptr().cast(),
                    recv: recv.as_mut_ptr().cast(),
                    count: count(len),
                    datatype: datatype::<T>(),
                };
                // SAFETY: `data` (the var's vector, held by its guard) and
                // `recv` (owned here) hold `len` elements each, are two
                // allocations, and neither is touched nor moved in memory
                // until the comm thread finds the request done: both live
                // in this flight, which it keeps beside the request.
                unsafe { raw::all_reduce(comm, &b, reduction::<T>(*op, floats)) }
            }
            What::Broadcast { data, root } => {
                let b = Buffers {
                    send: std::ptr::null(),
                    recv: data.as_mut_ptr().cast(),
                    count: count(len),
                    datatype: datatype::<T>(),
                };
                // SAFETY: as above, for the var's vector alone.
                unsafe { raw::broadcast(comm, &b, *root as i32) }
            }
            What::AllGather { input, output } => {
                output.clear();
                output.resize(len * self.size, T::default());
                let b = Buffers {
                    send: input.as_ptr().cast(),
                    recv: output.as_mut_ptr().cast(),
                    count: count(len),
                    datatype: datatype::<T>(),
                };
                // SAFETY: `input` holds `len` elements and `output` the
                // world's size times as many (resized just above), two
                // vars' vectors held by their guards in this flight, kept
                // as above.
                unsafe { raw::all_gather(comm, &b) }
            }
            What::ReduceScatter { input, output, op } => {
                let block = len / self.size;
                output.clear();
                output.resize(block, T::default());
                let b = Buffers {
                    send: input.as_ptr().cast(),
                    recv: output.as_mut_ptr().cast(),
                    count: count(block),
                    datatype: datatype::<T>(),
                };
                // SAFETY: `input` holds the world's size times `block`
                // elements (checked when made) and `output` `block`, kept
                // as above.
                unsafe { raw::reduce_scatter(comm, &b, reduction::<T>(*op, floats)) }
            }
            What::Barrier => raw::barrier(comm),
        };
        started.map_err(|code| CollectiveError::Mpi { what: self.sig.to_string(), code: code.0 })
    }

    fn inline(&self) -> Vec<u8> {
        match &self.what {
            What::AllReduce { data, .. } if self.local.is_none() && sig::done_by_exchange(&self.sig) => {
                bytemuck::cast_slice::<T, u8>(data).to_vec()
            }
            _ => Vec::new(),
        }
    }

    fn finish_inline(self: Box<Self>, parts: &[&[u8]]) {
        let Self { what, done, size, .. } = *self;
        match what {
            What::AllReduce { mut data, op, .. } => {
                let bytes = data.len() * std::mem::size_of::<T>();
                let elems = |part: &[u8]| -> Vec<T> {
                    part[..bytes]
                        .chunks_exact(std::mem::size_of::<T>())
                        .map(bytemuck::pod_read_unaligned)
                        .collect()
                };
                // Every rank folds the same parts in the same order, so
                // every rank holds the same result.
                let mut acc = elems(parts[0]);
                for part in &parts[1..] {
                    acc.iter_mut().zip(elems(part)).for_each(|(a, x)| *a = T::combine(op, *a, x));
                }
                if op == Reduce::Mean {
                    T::divide(&mut acc, size);
                }
                data.copy_from_slice(&acc);
            }
            What::Barrier => {}
            _ => unreachable!("only an all-reduce and a barrier are done by their signature exchange"),
        }
        done.succeed(());
    }

    fn finish(self: Box<Self>, result: Result<(), CollectiveError>, pool: &mut Pool) {
        let Self { what, done, size, .. } = *self;
        if let Err(err) = result {
            drop(what);
            done.fail(err);
            return;
        }
        match what {
            What::AllReduce { mut data, mut recv, op } => {
                std::mem::swap(&mut *data, &mut recv);
                if op == Reduce::Mean {
                    T::divide(&mut data, size);
                }
                pool.give(recv);
            }
            What::ReduceScatter { mut output, op: Reduce::Mean, .. } => T::divide(&mut output, size),
            _ => {}
        }
        done.succeed(());
    }

    fn close(self: Box<Self>) {
        let what = self.sig.to_string();
        self.done.fail(CollectiveError::Closed { what });
    }
}

/// The place of a collective whose op never ran on this rank: it takes
/// part in the signature exchange as failed, so every rank fails it.
pub(super) struct Gone(pub(super) Signature);

impl Flight for Gone {
    fn signature(&self) -> &Signature {
        &self.0
    }

    fn local_error(&self) -> Option<CollectiveError> {
        None
    }

    fn start(
        &mut self,
        _: &SimpleCommunicator,
        _: &FloatReductions,
        _: &mut Pool,
    ) -> Result<Request, CollectiveError> {
        unreachable!("a collective that never ran fails at its signature")
    }

    fn inline(&self) -> Vec<u8> {
        Vec::new()
    }

    fn finish_inline(self: Box<Self>, _: &[&[u8]]) {
        unreachable!("a collective that never ran fails at its signature")
    }

    fn finish(self: Box<Self>, _: Result<(), CollectiveError>, _: &mut Pool) {}

    fn close(self: Box<Self>) {}
}

/// Receive buffers of all-reduces, kept for the next all-reduce of the
/// same type and length (a fresh buffer per collective costs page faults
/// on every one): the var's old vector is kept when the result is swapped
/// in.
#[derive(Default)]
pub(super) struct Pool {
    free: HashMap<(TypeId, usize), Vec<Box<dyn Any + Send>>>,
}

/// Buffers kept per type and length.
const KEEP: usize = 4;

impl Pool {
    fn take<T: Element>(&mut self, len: usize) -> Vec<T> {
        let kept = self.free.get_mut(&(TypeId::of::<T>(), len)).and_then(Vec::pop);
        match kept.map(|b| b.downcast::<Vec<T>>()) {
            Some(Ok(buffer)) => *buffer,
            _ => vec![T::default(); len],
        }
    }

    fn give<T: Element>(&mut self, buffer: Vec<T>) {
        let kept = self.free.entry((TypeId::of::<T>(), buffer.len())).or_default();
        if kept.len() < KEEP {
            kept.push(Box::new(buffer));
        }
    }
}
