//! The immediate collectives, called on buffers that the comm thread owns
//! until they complete.
//!
//! rsmpi's safe immediate collectives tie every buffer to a
//! `request::scope`, whose borrow lasts until the scope ends: a thread
//! that keeps many collectives of many ops in flight, each finishing at
//! its own time and handing its buffer back to its op, cannot express
//! that with one scope (SCALEOUT's pitfall 9). So the calls are made
//! here, on the raw bindings rsmpi exposes, and the invariant the scopes
//! would check is kept by construction: a [`Request`] is made only by
//! the functions below, from buffers that its owner keeps, unmoved and
//! untouched, until [`Request::test`] says the collective is done; the
//! owner (`flight.rs`) holds the buffers in the same struct as the
//! request and drops neither before that.

#![allow(unsafe_code)]

use std::ffi::{c_int, c_void};

use mpi::collective::UnsafeUserOperation;
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;

use super::{Element, Reduce};

/// A collective in flight. Never dropped unfinished (MPI cannot cancel a
/// collective): its owner tests it until done.
#[derive(Debug)]
pub(super) struct Request(ffi::MPI_Request);

// SAFETY: an MPI request is a handle into the library, used here only by
// the comm thread that started it (the process asked for `Funneled`); it
// moves with the struct that owns its buffers, never between threads.
unsafe impl Send for Request {}

/// An MPI return code that is not `MPI_SUCCESS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Code(pub(super) c_int);

fn check(code: c_int, request: ffi::MPI_Request) -> Result<Request, Code> {
    // MPI_SUCCESS is 0 in every implementation (the standard fixes it).
    if code == 0 { Ok(Request(request)) } else { Err(Code(code)) }
}

/// A null request, for the start calls to fill in.
fn null() -> ffi::MPI_Request {
    // SAFETY: a static initialised by the MPI library's headers (a plain
    // handle value), read after MPI is initialised on this thread.
    unsafe { ffi::RSMPI_REQUEST_NULL }
}

impl Request {
    /// Whether the collective is done; once it is, its buffers are the
    /// owner's again.
    pub(super) fn test(&mut self) -> Result<bool, Code> {
        let mut flag: c_int = 0;
        // SAFETY: `self.0` is a live request made by a start call below
        // (or completed already, which MPI_Test accepts: it is then null),
        // and the status is ignored.
        let code = unsafe { ffi::MPI_Test(&mut self.0, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
        if code != 0 {
            return Err(Code(code));
        }
        Ok(flag != 0)
    }
}

/// Tests `requests` in order, up to the first not done; whether all are.
/// In order, so that a transfer's elements that fail (more was sent than
/// posted: ranks whose programs differ) are seen only once its header is
/// in, which then explains them, instead of MPI's code alone. Until the
/// first is in, its test still makes MPI progress on all.
pub(super) fn test_all(requests: &mut [Request]) -> Result<bool, Code> {
    for request in requests {
        if !request.test()? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Where a collective reads and writes: raw parts of buffers its caller
/// owns. `count` elements of `datatype` each.
pub(super) struct Buffers {
    pub(super) send: *const c_void,
    pub(super) recv: *mut c_void,
    pub(super) count: c_int,
    pub(super) datatype: ffi::MPI_Datatype,
}

/// Starts an allreduce of `b.count` elements from `b.send` into `b.recv`.
///
/// # Safety
///
/// Both buffers hold `b.count` elements of `b.datatype`, do not overlap,
/// and stay valid, unmoved and untouched until the request tests done.
pub(super) unsafe fn all_reduce(
    comm: &SimpleCommunicator,
    b: &Buffers,
    op: ffi::MPI_Op,
) -> Result<Request, Code> {
    let mut request = null();
    // SAFETY: the caller's contract covers the buffers; the communicator
    // and the op are live handles of this process.
    let code =
        unsafe { ffi::MPI_Iallreduce(b.send, b.recv, b.count, b.datatype, op, comm.as_raw(), &mut request) };
    check(code, request)
}

/// Starts a broadcast of `b.count` elements of `b.recv` from `root`.
///
/// # Safety
///
/// `b.recv` holds `b.count` elements of `b.datatype` and stays valid,
/// unmoved and untouched until the request tests done.
pub(super) unsafe fn broadcast(comm: &SimpleCommunicator, b: &Buffers, root: c_int) -> Result<Request, Code> {
    let mut request = null();
    // SAFETY: as the caller's contract says; `root` is a rank of `comm`
    // (checked when the op was pushed).
    let code = unsafe { ffi::MPI_Ibcast(b.recv, b.count, b.datatype, root, comm.as_raw(), &mut request) };
    check(code, request)
}

/// Starts an allgather: `b.count` elements of `b.send` from each rank,
/// into `b.recv` in rank order.
///
/// # Safety
///
/// `b.send` holds `b.count` elements and `b.recv` `b.count` times the
/// communicator's size, of `b.datatype`; they do not overlap and stay
/// valid, unmoved and untouched until the request tests done.
pub(super) unsafe fn all_gather(comm: &SimpleCommunicator, b: &Buffers) -> Result<Request, Code> {
    let mut request = null();
    // SAFETY: as the caller's contract says.
    let code = unsafe {
        ffi::MPI_Iallgather(
            b.send,
            b.count,
            b.datatype,
            b.recv,
            b.count,
            b.datatype,
            comm.as_raw(),
            &mut request,
        )
    };
    check(code, request)
}

/// Starts a reduce-scatter: `b.send` holds the communicator's size times
/// `b.count` elements; each rank receives the reduction of its block.
///
/// # Safety
///
/// As for [`all_gather`], with the sizes the other way round.
pub(super) unsafe fn reduce_scatter(
    comm: &SimpleCommunicator,
    b: &Buffers,
    op: ffi::MPI_Op,
) -> Result<Request, Code> {
    let mut request = null();
    // SAFETY: as the caller's contract says.
    let code = unsafe {
        ffi::MPI_Ireduce_scatter_block(b.send, b.recv, b.count, b.datatype, op, comm.as_raw(), &mut request)
    };
    check(code, request)
}

/// Starts a barrier.
pub(super) fn barrier(comm: &SimpleCommunicator) -> Result<Request, Code> {
    let mut request = null();
    // SAFETY: no buffers; the communicator is a live handle.
    let code = unsafe { ffi::MPI_Ibarrier(comm.as_raw(), &mut request) };
    check(code, request)
}

/// Starts a send of `count` elements of `datatype` at `buf` to rank `dest`
/// with `tag` (a point-to-point transfer of `dist`).
///
/// # Safety
///
/// `buf` holds `count` elements of `datatype` and stays valid, unmoved and
/// unwritten until the request tests done.
pub(super) unsafe fn send(
    comm: &SimpleCommunicator,
    buf: *const c_void,
    count: c_int,
    datatype: ffi::MPI_Datatype,
    dest: c_int,
    tag: c_int,
) -> Result<Request, Code> {
    let mut request = null();
    // SAFETY: as the caller's contract says; `dest` is a rank of `comm`
    // (the distribution's owners are checked against the world's size).
    let code = unsafe { ffi::MPI_Isend(buf, count, datatype, dest, tag, comm.as_raw(), &mut request) };
    check(code, request)
}

/// Starts a receive of up to `count` elements of `datatype` into `buf`
/// from rank `source` with `tag`.
///
/// # Safety
///
/// `buf` holds room for `count` elements of `datatype` and stays valid,
/// unmoved and untouched until the request tests done.
pub(super) unsafe fn receive(
    comm: &SimpleCommunicator,
    buf: *mut c_void,
    count: c_int,
    datatype: ffi::MPI_Datatype,
    source: c_int,
    tag: c_int,
) -> Result<Request, Code> {
    let mut request = null();
    // SAFETY: as the caller's contract says.
    let code = unsafe { ffi::MPI_Irecv(buf, count, datatype, source, tag, comm.as_raw(), &mut request) };
    check(code, request)
}

impl Request {
    /// Asks MPI to cancel the request (a receive that will never be
    /// matched); it is done once `test` says so.
    pub(super) fn cancel(&mut self) -> Result<(), Code> {
        if self.0 == null() {
            // Done already: MPI_Test set it to the null request.
            return Ok(());
        }
        // SAFETY: `self.0` is a live request made by a start call above;
        // a cancelled request still completes (as cancelled) through
        // MPI_Test, and its buffers stay with their owner until then.
        let code = unsafe { ffi::MPI_Cancel(&mut self.0) };
        if code == 0 { Ok(()) } else { Err(Code(code)) }
    }
}

/// The largest tag `comm` takes (`MPI_TAG_UB`; at least 32767 by the
/// standard, which is the answer if the attribute cannot be read).
pub(super) fn tag_upper_bound(comm: &SimpleCommunicator) -> c_int {
    let mut value: *mut c_int = std::ptr::null_mut();
    let mut flag: c_int = 0;
    // SAFETY: MPI_TAG_UB is an attribute every communicator has; MPI
    // writes into `value` a pointer to the attribute's int, which it keeps
    // for the communicator's life, and sets `flag` if it did.
    let code = unsafe {
        ffi::MPI_Comm_get_attr(
            comm.as_raw(),
            ffi::MPI_TAG_UB as c_int,
            (&mut value as *mut *mut c_int).cast(),
            &mut flag,
        )
    };
    if code != 0 || flag == 0 || value.is_null() {
        return 32_767;
    }
    // SAFETY: as above: a live int of MPI's.
    unsafe { *value }
}

/// Makes MPI return errors on `comm` to the caller instead of ending the
/// job (the default): a transfer whose sender sent more than its receiver
/// posted (ranks whose programs differ) then fails its op, named.
pub(super) fn errors_return(comm: &SimpleCommunicator) -> Result<(), Code> {
    // SAFETY: a live communicator of this process and the predefined
    // handler, a static initialised by the MPI library (read after MPI is
    // initialised).
    let code = unsafe { ffi::MPI_Comm_set_errhandler(comm.as_raw(), ffi::RSMPI_ERRORS_RETURN) };
    if code == 0 { Ok(()) } else { Err(Code(code)) }
}

/// The minimum and maximum of floats as MPI reductions of the crate's own,
/// so that MPI's path folds by the rule a small all-reduce's signature
/// exchange folds by ([`Element::combine`]: a NaN wins, −0 is below +0).
/// MPI's own `MPI_MIN`/`MPI_MAX` compare with `<`, which makes the result
/// depend on the operands' order (NaN and signed zeros), and so on the
/// algorithm MPI picks for a size. Made by the comm thread after MPI
/// starts, freed before it finalises.
pub(super) struct FloatReductions {
    ops: [UnsafeUserOperation; 4],
}

impl FloatReductions {
    pub(super) fn new() -> Self {
        // SAFETY: each function is called by MPI only for the reductions
        // it is used in below (`get`), on buffers of the element type it
        // reads; it reads and writes `*len` elements, unaligned, and never
        // panics.
        let ops = unsafe {
            [
                UnsafeUserOperation::commutative(fold::<f32, { Reduce::Min as u8 }>),
                UnsafeUserOperation::commutative(fold::<f32, { Reduce::Max as u8 }>),
                UnsafeUserOperation::commutative(fold::<f64, { Reduce::Min as u8 }>),
                UnsafeUserOperation::commutative(fold::<f64, { Reduce::Max as u8 }>),
            ]
        };
        Self { ops }
    }

    /// The op for `reduce` over `T`, if it is a float's minimum or maximum.
    pub(super) fn get<T: Element>(&self, reduce: Reduce) -> Option<ffi::MPI_Op> {
        let of_type = match T::CODE {
            c if c == f32::CODE => 0,
            c if c == f64::CODE => 2,
            _ => return None,
        };
        let which = match reduce {
            Reduce::Min => 0,
            Reduce::Max => 1,
            Reduce::Sum | Reduce::Mean => return None,
        };
        Some(self.ops[of_type + which].as_raw())
    }
}

/// `inout[i] = combine(input[i], inout[i])` over `*len` elements of `T`,
/// as MPI calls a user reduction.
///
/// # Safety
///
/// `input` and `inout` point to `*len` elements of `T` each (MPI calls it
/// only for reductions over `T`: see `FloatReductions::get`).
unsafe extern "C" fn fold<T: Element, const OP: u8>(
    input: *mut c_void,
    inout: *mut c_void,
    len: *mut c_int,
    _datatype: *mut ffi::MPI_Datatype,
) {
    let op = Reduce::of_code(OP);
    // SAFETY: as the caller's contract says; MPI's own buffers need not
    // be aligned for `T`, so every access is unaligned.
    unsafe {
        let (input, inout) = (input.cast::<T>(), inout.cast::<T>());
        for i in 0..usize::try_from(*len).unwrap_or(0) {
            let folded = T::combine(op, input.add(i).read_unaligned(), inout.add(i).read_unaligned());
            inout.add(i).write_unaligned(folded);
        }
    }
}
