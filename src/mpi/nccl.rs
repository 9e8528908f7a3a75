//! Collectives across GPUs with NCCL (feature `nccl`): the GPU side of
//! [`Collectives`], for buffers in device memory.
//!
//! Each collective is a GPU op on the device's [`Lane::Collective`]: its
//! body enqueues the NCCL call on that lane's stream (one per device, so
//! no compute queues behind a collective that waits for other ranks), an
//! event is recorded behind it, and the device's poller completes the op
//! like any GPU op; no thread waits on the GPU or on the network.
//!
//! **Order.** NCCL matches collectives by their order on a communicator,
//! as MPI does. Every collective also writes one var of its own
//! [`GpuCollectives`], so they reach NCCL in push order whatever their
//! buffers' readiness; every rank must push the same collectives, of the
//! same sizes, in the same order. Unlike the MPI collectives, these are
//! not checked across ranks before their data: a rank that pushes another
//! collective or another size leaves NCCL waiting (or reading past a
//! buffer on the other side), as with NCCL alone.
//!
//! **Failure.** A collective whose input carries an error still takes
//! part (with whatever its buffer holds), then fails on this rank; the
//! other ranks' collectives succeed with that rank's data. Checking the
//! ranks against each other would cost an MPI exchange per collective,
//! which the MPI collectives pay and these, meant for bandwidth, do not.
//!
//! The NCCL id goes from rank 0 to the others over MPI, with a broadcast
//! of [`Collectives`]. Ranks on one machine must use distinct GPUs (NCCL
//! refuses two ranks on one device).

// The NCCL calls are foreign functions on raw device pointers and a raw
// communicator: there is no safe form that enqueues on the engine's stream.
#![allow(unsafe_code)]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};

use cudarc::driver::DevicePtrMut;
use cudarc::nccl::{NcclType, result, sys};

use super::{Collectives, Element, Reduce};
use crate::device::{Device, Lane};
use crate::engine::OpHandle;
use crate::engine::{Engine, OpBuilder};
use crate::error::{BoxError, Error};
use crate::gpu::{Gpu, GpuBuffer, GpuContext, GpuElement};
use crate::var::Var;

/// What a GPU collective's buffers may hold: the element types of the MPI
/// collectives, which NCCL knows too.
pub trait GpuCollectiveElement: Element + GpuElement + NcclType {}
impl<T: Element + GpuElement + NcclType> GpuCollectiveElement for T {}

/// An NCCL communicator, destroyed with its last user.
struct Comm(sys::ncclComm_t);

// SAFETY: NCCL communicators may be used from any thread, one call at a
// time; here every call on it comes from the device's one collective
// worker, in the order the order var imposes, or from the last drop.
unsafe impl Send for Comm {}
// SAFETY: as for `Send`: shared references only reach the handle, and
// the calls through it are serialised by the order var.
unsafe impl Sync for Comm {}

impl Drop for Comm {
    fn drop(&mut self) {
        // SAFETY: the handle came from `ncclCommInitRank` and is destroyed
        // once, here; `ncclCommDestroy` first finalises (waits for the
        // collectives enqueued on it).
        let _ = catch_unwind(|| unsafe { result::comm_destroy(self.0) });
    }
}

/// The GPU collectives of one rank: an NCCL communicator over one GPU per
/// rank, its collectives pushed as GPU ops of the engine.
pub struct GpuCollectives {
    engine: Engine,
    device: Device,
    comm: Arc<Comm>,
    /// Written by every collective, held while one is pushed: NCCL sees
    /// them in push order.
    order: Mutex<Var<()>>,
    rank: usize,
    size: usize,
}

impl std::fmt::Debug for GpuCollectives {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuCollectives")
            .field("device", &self.device)
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// Bytes of an NCCL id, behind a flag byte that says whether rank 0 made one.
const ID_BYTES: usize = 128;

impl GpuCollectives {
    /// Joins every rank's `gpu` in one NCCL communicator: rank 0 makes the
    /// id and broadcasts it with `mpi`. Every rank calls this, in the same
    /// place of its collectives' order; it blocks until NCCL has set up.
    ///
    /// # Errors
    ///
    /// A simulated GPU ([`Error::is_invalid_argument`]); NCCL missing on
    /// rank 0 (every rank gets the error); NCCL failing to set up on this
    /// rank. A rank that fails after the id was shared leaves the others
    /// waiting in NCCL's set-up.
    pub fn new(mpi: &Collectives, gpu: &Gpu) -> Result<Self, Error> {
        let ordinal = gpu.ordinal();
        // Every rank takes part in the id's broadcast, whatever its GPU,
        // so that the ranks' MPI collectives stay in step.
        let id = shared_id(mpi, gpu.cuda().is_some());
        let Some(ctx) = gpu.cuda() else {
            return Err(Error::invalid(format!(
                "gpu({ordinal}) is simulated: NCCL collectives need a CUDA device"
            )));
        };
        let id = id?;
        let unavailable = |what: String| Error::gpu_unavailable(ordinal, what);
        catch_unwind(AssertUnwindSafe(|| ctx.bind_to_thread()))
            .map_err(|_| unavailable("the CUDA driver could not be used".to_owned()))?
            .map_err(|e| unavailable(format!("cuCtxSetCurrent: {e:?}")))?;
        let (rank, size) = (mpi.rank(), mpi.size());
        let mut comm: sys::ncclComm_t = std::ptr::null_mut();
        let (n, r) = (i32::try_from(size).unwrap_or(i32::MAX), i32::try_from(rank).unwrap_or(i32::MAX));
        // SAFETY: `comm` is a live local NCCL writes its handle into; the
        // id is the one rank 0 made; this device's context is current.
        let made =
            catch_unwind(AssertUnwindSafe(|| unsafe { result::comm_init_rank(&raw mut comm, n, id, r) }));
        match made {
            Ok(Ok(_)) => {}
            Ok(Err(err)) => return Err(unavailable(format!("ncclCommInitRank: {:?}", err.0))),
            Err(_) => return Err(unavailable("ncclCommInitRank: NCCL could not be loaded".to_owned())),
        }
        let engine = mpi.engine.clone();
        let order = Mutex::new(engine.var(()));
        Ok(Self { engine, device: Device::Gpu(ordinal), comm: Arc::new(Comm(comm)), order, rank, size })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Combines every rank's `var` element by element, in place (an
    /// all-reduce); [`Reduce::Mean`] is NCCL's average.
    pub fn all_reduce<T: GpuCollectiveElement>(&self, var: &Var<GpuBuffer<T>>, op: Reduce) -> OpHandle<()> {
        if let Err(err) = super::reducible::<T>(op) {
            return OpHandle::refused(err);
        }
        let comm = self.comm.clone();
        self.push(&format!("nccl all_reduce {}", var.label()), |b, order| {
            b.write(var).write(order).run_gpu(move |(), (mut data, _), ctx| {
                let failed = data.op_seen_error();
                let (ptr, len) = device_ptr(&mut data, ctx)?;
                let stream = raw_stream(ctx)?;
                // SAFETY: in place on a buffer of `len` elements this op
                // writes; the stream is the lane's, current context bound.
                called("ncclAllReduce", || unsafe {
                    result::all_reduce(ptr as _, ptr as _, len, T::as_nccl_type(), red(op), comm.0, stream)
                })?;
                upstream(failed)
            })
        })
    }

    /// Copies `root`'s `var` into every rank's `var`, in place (a
    /// broadcast); every rank's buffer holds as many elements.
    pub fn broadcast<T: GpuCollectiveElement>(&self, var: &Var<GpuBuffer<T>>, root: usize) -> OpHandle<()> {
        let Ok(root) =
            i32::try_from(root).map_err(drop).and_then(|r| (root < self.size).then_some(r).ok_or(()))
        else {
            return OpHandle::refused(Error::invalid(format!(
                "broadcast root {root} in a world of {}",
                self.size
            )));
        };
        let comm = self.comm.clone();
        self.push(&format!("nccl broadcast {}", var.label()), |b, order| {
            b.write(var).write(order).run_gpu(move |(), (mut data, _), ctx| {
                let failed = data.op_seen_error();
                let (ptr, len) = device_ptr(&mut data, ctx)?;
                let stream = raw_stream(ctx)?;
                // SAFETY: in place on a buffer of `len` elements this op
                // writes, on the lane's stream.
                called("ncclBroadcast", || unsafe {
                    result::broadcast(ptr as _, ptr as _, len, T::as_nccl_type(), root, comm.0, stream)
                })?;
                upstream(failed)
            })
        })
    }

    /// Every rank's `input`, in rank order, into every rank's `output` (an
    /// all-gather): `output` holds the world's size times `input`'s length.
    pub fn all_gather<T: GpuCollectiveElement>(
        &self,
        input: &Var<GpuBuffer<T>>,
        output: &Var<GpuBuffer<T>>,
    ) -> OpHandle<()> {
        let (comm, size) = (self.comm.clone(), self.size);
        self.push(&format!("nccl all_gather {}", input.label()), |b, order| {
            b.read(input).write(output).write(order).run_gpu(move |(input,), (mut output, _), ctx| {
                let failed = input.op_seen_error().or(output.op_seen_error());
                let (src, len) = (const_ptr(&input, ctx)?, input.len());
                sized("all_gather", output.len(), len * size)?;
                let (dst, _) = device_ptr(&mut output, ctx)?;
                let stream = raw_stream(ctx)?;
                // SAFETY: `len` elements from `input`, `size * len` into
                // `output` (checked just above), on the lane's stream.
                called("ncclAllGather", || unsafe {
                    result::all_gather(src, dst as _, len, T::as_nccl_type(), comm.0, stream)
                })?;
                upstream(failed)
            })
        })
    }

    /// Combines every rank's `input` and leaves block `rank` of the result
    /// in `output` (a reduce-scatter): `input` holds the world's size times
    /// `output`'s length.
    pub fn reduce_scatter<T: GpuCollectiveElement>(
        &self,
        input: &Var<GpuBuffer<T>>,
        output: &Var<GpuBuffer<T>>,
        op: Reduce,
    ) -> OpHandle<()> {
        if let Err(err) = super::reducible::<T>(op) {
            return OpHandle::refused(err);
        }
        let (comm, size) = (self.comm.clone(), self.size);
        self.push(&format!("nccl reduce_scatter {}", input.label()), |b, order| {
            b.read(input).write(output).write(order).run_gpu(move |(input,), (mut output, _), ctx| {
                let failed = input.op_seen_error().or(output.op_seen_error());
                let src = const_ptr(&input, ctx)?;
                let (dst, len) = device_ptr(&mut output, ctx)?;
                sized("reduce_scatter", input.len(), len * size)?;
                let stream = raw_stream(ctx)?;
                // SAFETY: `size * len` elements from `input` (checked just
                // above), `len` into `output`, on the lane's stream.
                called("ncclReduceScatter", || unsafe {
                    result::reduce_scatter(src, dst as _, len, T::as_nccl_type(), red(op), comm.0, stream)
                })?;
                upstream(failed)
            })
        })
    }

    /// Pushes a collective on the collective lane, writing the order var,
    /// under the order lock.
    fn push(&self, name: &str, push: impl FnOnce(OpBuilder<'_>, &Var<()>) -> OpHandle<()>) -> OpHandle<()> {
        let order = self.order.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let name = format!("{name} (GPU collective: with every rank)");
        push(self.engine.op(name).device(self.device).lane(Lane::Collective).no_skip(true), &order)
    }
}

/// Rank 0's NCCL id, broadcast to every rank over MPI; on every rank the
/// same error where rank 0 could not make one.
fn shared_id(mpi: &Collectives, make: bool) -> Result<sys::ncclUniqueId, Error> {
    let mut bytes = vec![0u8; ID_BYTES + 1];
    if mpi.rank() == 0 && make {
        match catch_unwind(result::get_uniqueid) {
            Ok(Ok(id)) => {
                bytes[0] = 1;
                bytes[1..].iter_mut().zip(id.internal).for_each(|(b, c)| *b = c.to_ne_bytes()[0]);
            }
            Ok(Err(err)) => tracing::error!(target: "depengine", "ncclGetUniqueId: {:?}", err.0),
            Err(_) => tracing::error!(target: "depengine", "ncclGetUniqueId: NCCL could not be loaded"),
        }
    }
    let var = mpi.engine.var(bytes);
    mpi.broadcast(&var, 0).blocking_wait()?;
    let bytes = crate::sync::block_on::block_on(var.read())?.clone();
    if bytes[0] != 1 {
        return Err(Error::gpu_unavailable(
            0,
            "rank 0 could not make an NCCL id (is libnccl installed?)".to_owned(),
        ));
    }
    let mut id = sys::ncclUniqueId { internal: [0; ID_BYTES] };
    id.internal.iter_mut().zip(&bytes[1..]).for_each(|(c, b)| *c = std::ffi::c_char::from_ne_bytes([*b]));
    Ok(id)
}

fn red(op: Reduce) -> sys::ncclRedOp_t {
    match op {
        Reduce::Sum => sys::ncclRedOp_t::ncclSum,
        Reduce::Mean => sys::ncclRedOp_t::ncclAvg,
        Reduce::Min => sys::ncclRedOp_t::ncclMin,
        Reduce::Max => sys::ncclRedOp_t::ncclMax,
    }
}

/// The lane's CUDA stream, as NCCL takes it.
fn raw_stream(ctx: &GpuContext<'_>) -> Result<sys::cudaStream_t, BoxError> {
    let stream = ctx.cuda_stream().ok_or("an NCCL collective on a simulated stream")?;
    Ok(stream.cu_stream() as sys::cudaStream_t)
}

/// The device address and length of a buffer this op writes.
fn device_ptr<T: GpuCollectiveElement>(
    buffer: &mut GpuBuffer<T>,
    ctx: &GpuContext<'_>,
) -> Result<(u64, usize), BoxError> {
    let stream = ctx.cuda_stream().ok_or("an NCCL collective on a simulated stream")?;
    let slice = buffer.cuda_mut().ok_or("an NCCL collective on a simulated buffer")?;
    let len = slice.len();
    // The engine turned cudarc's event tracking off: the returned guard
    // records nothing, and the engine's fences order the buffer's users.
    let (ptr, _unrecorded) = slice.device_ptr_mut(stream);
    Ok((ptr, len))
}

/// The device address of a buffer this op reads.
fn const_ptr<T: GpuCollectiveElement>(
    buffer: &GpuBuffer<T>,
    ctx: &GpuContext<'_>,
) -> Result<*const std::ffi::c_void, BoxError> {
    use cudarc::driver::DevicePtr;
    let stream = ctx.cuda_stream().ok_or("an NCCL collective on a simulated stream")?;
    let slice = buffer.cuda().ok_or("an NCCL collective on a simulated buffer")?;
    let (ptr, _unrecorded) = slice.device_ptr(stream);
    Ok(ptr as *const std::ffi::c_void)
}

/// Refuses a buffer of the wrong length, before NCCL reads or writes past it.
fn sized(what: &str, len: usize, want: usize) -> Result<(), BoxError> {
    if len == want {
        return Ok(());
    }
    Err(format!("{what}: a buffer of {len} elements where the world's size asks for {want}").into())
}

/// Runs an NCCL call, turning its error (or a panic of a missing symbol)
/// into the op's error.
fn called(
    what: &str,
    f: impl FnOnce() -> Result<result::NcclStatus, result::NcclError>,
) -> Result<(), BoxError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(format!("{what}: {:?}", err.0).into()),
        Err(_) => Err(format!("{what}: NCCL could not be used").into()),
    }
}

/// The op's result once it has taken part: its input's error, if any.
fn upstream(failed: Option<Error>) -> Result<(), BoxError> {
    failed.map_or(Ok(()), |err| Err(Box::new(err)))
}
