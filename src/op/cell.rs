//! The typed op record: one allocation holding the header, the body until it
//! runs, and the result until the handle takes it.

use std::any::Any;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::FutureExt;

use super::access::{Item, OpToken};
use super::handle::Completion;
use super::slot::{Published, ResultSlot};
use super::{DepList, Meta};
use super::{Header, Shell, Task, TaskRef, release_body};
use crate::engine::{EpochRef, Shared};
use crate::error::{BoxError, Error, Kind, panic_message};
use crate::loom::cell::UnsafeCell;

/// An op's body, typed.
pub(crate) trait Job: Send + 'static {
    type Output: Send + 'static;

    /// A small sync body, run to completion by `start`: it may join a bulk
    /// segment.
    const FUSES: bool = false;

    /// Starts the body. It must lead to exactly one store of its result:
    /// [`Running::store`] before returning, or [`OpSlot::store_owned`] on
    /// [`Running::to_owned`] from a [`Completion`] or a spawned task.
    fn start(self, op: Running<'_, Self::Output>);

    /// The op will not run (`err` says why); called instead of `start`.
    fn vetoed(self, _err: &Error)
    where
        Self: Sized,
    {
    }
}

/// The handle-facing side of a typed op.
pub(crate) trait OpSlot<R>: Task {
    /// Stores the body's result; the first call wins. Releases the body's
    /// live count, so the op may complete inside this call. `this` is a
    /// reference to this very record, held until the call returns.
    fn store(&self, this: &TaskRef, result: Result<R, Error>);

    /// [`store`](Self::store) for the holder of an owned reference.
    fn store_owned(self: Arc<Self>, result: Result<R, Error>);

    /// An owned, typed reference to this record, given `this`, a reference
    /// to it.
    fn to_owned(&self, this: &TaskRef) -> SlotRef<R>;

    /// Takes the result once the op has completed.
    fn poll_result(&self, cx: &mut Context<'_>) -> Poll<Result<R, Error>>;

    /// Whether the op has completed.
    fn is_complete(&self) -> bool;
}

pub(crate) type SlotRef<R> = Arc<dyn OpSlot<R>>;

/// A running op, as its body's [`Job::start`] sees it: borrowed from the
/// thread that runs it, which holds a reference for the call.
pub(crate) struct Running<'a, R> {
    /// A reference to the record (guards are made of it).
    pub(crate) task: &'a TaskRef,
    slot: &'a dyn OpSlot<R>,
}

impl<R: 'static> Running<'_, R> {
    pub(crate) fn header(&self) -> &Header {
        self.task.header()
    }

    /// Stores the body's result (see [`OpSlot::store`]).
    pub(crate) fn store(&self, result: Result<R, Error>) {
        self.slot.store(self.task, result);
    }

    /// An owned reference, for a body that stores its result after
    /// `start` returns.
    pub(crate) fn to_owned(&self) -> SlotRef<R> {
        self.slot.to_owned(self.task)
    }
}

#[cfg(all(test, not(depengine_loom)))]
thread_local! {
    /// Ops this thread built in a shell.
    pub(crate) static REBUILT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The header first (`repr(C)`): its hot prefix must follow the record's
/// reference counts (see [`Header`]).
#[repr(C)]
pub(crate) struct OpCell<J: Job> {
    header: Header,
    /// The result, the handle's waker, and the claims on `job` and `epoch`.
    slot: ResultSlot<Result<J::Output, Error>>,
    /// The body, until the op starts.
    job: UnsafeCell<Option<J>>,
    /// The op's count in its `wait_for_all` epoch, held until it completes.
    epoch: UnsafeCell<Option<EpochRef>>,
}

// SAFETY: besides the header and the slot (both `Sync`), an op shared
// between threads gives access to `job` only to the `execute` that claimed
// the slot's start, and to `epoch` only to the `publish` that published
// first; `strip` has `&mut self`. So only `Send` values move across.
#[allow(unsafe_code)]
unsafe impl<J: Job> Sync for OpCell<J> {}

impl<J: Job> OpCell<J> {
    /// A new op record of the engine `shared`; built in `shell` (a
    /// stripped record of that engine nobody else holds) if that is a
    /// record of this type, else freshly allocated, after `shell` is freed.
    pub(crate) fn new(
        shell: Option<Shell>,
        shared: &Arc<Shared>,
        meta: Meta,
        deps: DepList,
        job: J,
        epoch: EpochRef,
    ) -> Arc<Self> {
        // A shell of another type is freed here, before `Arc::new` allocates.
        if let Some(mut record) = shell.and_then(Shell::downcast::<Self>) {
            let place = record.get_mut();
            debug_assert!(Arc::ptr_eq(&place.header.shared, shared), "a shell of another engine");
            // Field by field: the engine reference stays, and nothing is
            // built on the stack to be copied in.
            place.header.rebuild(meta, deps);
            place.slot = ResultSlot::new();
            place.job = UnsafeCell::new(Some(job));
            place.epoch = UnsafeCell::new(Some(epoch));
            #[cfg(all(test, not(depengine_loom)))]
            REBUILT.with(|n| n.set(n.get() + 1));
            return record.into_arc();
        }
        Arc::new(Self {
            header: Header::new(meta, deps, shared.clone()),
            slot: ResultSlot::new(),
            job: UnsafeCell::new(Some(job)),
            epoch: UnsafeCell::new(Some(epoch)),
        })
    }
}

#[allow(unsafe_code)]
impl<J: Job> Task for OpCell<J> {
    fn header(&self) -> &Header {
        &self.header
    }

    fn execute(&self, this: &TaskRef) {
        debug_assert!(std::ptr::addr_eq(Arc::as_ptr(this), self), "`this` is this record");
        // SAFETY: the start is claimed once; only its claimer reads `job`.
        let job = self.slot.start().then(|| self.job.with_mut(|job| unsafe { (*job).take() }));
        let Some(Some(job)) = job else {
            debug_assert!(false, "op executed twice");
            return;
        };
        let span = self.header.span().cloned();
        let _entered = span.as_ref().map(tracing::Span::enter);
        tracing::debug!(target: "depengine::op", "started");
        match self.header.veto() {
            Some(err) => {
                // Dropping the body runs user destructors: a panic there must
                // not keep the op from completing.
                let _ = catch_unwind(AssertUnwindSafe(|| job.vetoed(&err)));
                self.store(this, Err(err));
            }
            None => job.start(Running { task: this, slot: self }),
        }
    }

    fn publish(&self) {
        // Nobody reads a detached op's result: the slot is left alone.
        let waker = if self.header.meta.detached {
            None
        } else {
            let Published::First(waker) = self.slot.publish() else {
                debug_assert!(false, "op published twice");
                return;
            };
            waker
        };
        // SAFETY: `publish` is called once per op, by the `finalize` whose
        // release of the live count reached zero (a `Countdown` reports zero
        // exactly once); of an op with a handle, it is also the one that
        // published first. So only this call reads `epoch`.
        let epoch = self.epoch.with_mut(|epoch| unsafe { (*epoch).take() });
        if let Some(waker) = waker {
            waker.wake();
        }
        drop(epoch);
    }

    fn abandon(&self, this: &TaskRef, err: Error) {
        // SAFETY: the start is claimed once; only its claimer reads `job`.
        let job = self.slot.start().then(|| self.job.with_mut(|job| unsafe { (*job).take() }));
        let Some(Some(job)) = job else {
            debug_assert!(false, "op abandoned after it started");
            return;
        };
        let _ = catch_unwind(AssertUnwindSafe(|| job.vetoed(&err)));
        self.store(this, Err(err));
    }

    fn strip(&mut self) {
        self.header.strip();
        self.slot.clear();
        // SAFETY: `&mut self`: no other access.
        self.job.with_mut(|job| unsafe { *job = None });
        // SAFETY: as above.
        self.epoch.with_mut(|epoch| unsafe { *epoch = None });
    }
}

impl<J: Job> OpSlot<J::Output> for OpCell<J> {
    fn store(&self, this: &TaskRef, result: Result<J::Output, Error>) {
        let outcome = result.as_ref().map(|_| ()).map_err(Clone::clone);
        // A detached op is a sync op (one store, made by its body) whose
        // result nobody reads: only its outcome is kept, and an error (a
        // user's type, whose drop may panic) is stored all the same, so that
        // it is dropped with the record, where such a panic is contained.
        if !(self.header.meta.detached && result.is_ok()) {
            if let Err(ignored) = self.slot.store(result) {
                drop(ignored);
                return;
            }
        }
        self.header.record_outcome(outcome.as_ref().map(|_| ()));
        if let Err(err) = outcome {
            if !self.header.meta.clears_error {
                self.header.shared.note_error(err);
            }
        }
        release_body(this);
    }

    fn store_owned(self: Arc<Self>, result: Result<J::Output, Error>) {
        let this: TaskRef = self;
        let me = (&*this as &dyn Any).downcast_ref::<Self>().expect("a record of its own type");
        me.store(&this, result);
    }

    fn to_owned(&self, this: &TaskRef) -> SlotRef<J::Output> {
        debug_assert!(std::ptr::addr_eq(Arc::as_ptr(this), self), "`this` is this record");
        (this.clone() as Arc<dyn Any + Send + Sync>).downcast::<Self>().expect("a record of its own type")
    }

    fn poll_result(&self, cx: &mut Context<'_>) -> Poll<Result<J::Output, Error>> {
        self.slot.poll(cx)
    }

    fn is_complete(&self) -> bool {
        self.slot.is_published()
    }
}

/// Maps a body's outcome, panics included, to the op's result.
fn op_result<R>(name: &Header, caught: std::thread::Result<Result<R, BoxError>>) -> Result<R, Error> {
    let op = || name.meta.name.clone();
    match caught {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(source)) => Err(Error::new(Kind::Failed { op: op(), source })),
        Err(payload) => Err(Error::new(Kind::Panicked { op: op(), message: panic_message(&*payload) })),
    }
}

/// A closure run to completion on a worker.
pub(crate) struct SyncJob<Rd, Wr, F> {
    pub(crate) reads: Rd,
    pub(crate) writes: Wr,
    pub(crate) body: F,
}

impl<Rd, Wr, F, R> Job for SyncJob<Rd, Wr, F>
where
    Rd: Item,
    Wr: Item,
    F: FnOnce(Rd::Guard, Wr::Guard) -> Result<R, BoxError> + Send + 'static,
    R: Send + 'static,
{
    type Output = R;

    const FUSES: bool = true;

    fn start(self, op: Running<'_, R>) {
        let Self { reads, writes, body } = self;
        let caught = catch_unwind(AssertUnwindSafe(|| {
            let reads = reads.guard(OpToken(op.task));
            let writes = writes.guard(OpToken(op.task));
            crate::pool::in_body(|| body(reads, writes))
        }));
        let result = op_result(op.header(), caught);
        op.store(result);
    }
}

/// A closure that receives a [`Completion`] to signal, now or later.
pub(crate) struct AsyncJob<Rd, Wr, F, R> {
    pub(crate) reads: Rd,
    pub(crate) writes: Wr,
    pub(crate) body: F,
    pub(crate) output: PhantomData<fn(R)>,
}

impl<Rd, Wr, F, R> Job for AsyncJob<Rd, Wr, F, R>
where
    Rd: Item,
    Wr: Item,
    F: FnOnce(Rd::Guard, Wr::Guard, Completion<R>) + Send + 'static,
    R: Send + 'static,
{
    type Output = R;

    fn start(self, op: Running<'_, R>) {
        let done = Completion::new(op.to_owned());
        let Self { reads, writes, body, .. } = self;
        let caught = catch_unwind(AssertUnwindSafe(|| {
            let reads = reads.guard(OpToken(op.task));
            let writes = writes.guard(OpToken(op.task));
            crate::pool::in_body(|| body(reads, writes, done));
        }));
        if let Err(payload) = caught {
            // If the token was dropped by the unwinding, it has already
            // stored a panic error; this store is then ignored.
            let name = op.header().meta.name.clone();
            op.store(Err(Error::new(Kind::Panicked { op: name, message: panic_message(&*payload) })));
        }
    }
}

/// A future run on the engine's Tokio runtime.
pub(crate) struct FutureJob<Rd, Wr, F> {
    pub(crate) reads: Rd,
    pub(crate) writes: Wr,
    pub(crate) body: F,
    pub(crate) runtime: tokio::runtime::Handle,
}

impl<Rd, Wr, F, Fut, R> Job for FutureJob<Rd, Wr, F>
where
    Rd: Item,
    Wr: Item,
    F: FnOnce(Rd::Guard, Wr::Guard) -> Fut + Send + 'static,
    Fut: Future<Output = Result<R, BoxError>> + Send + 'static,
    R: Send + 'static,
{
    type Output = R;

    fn start(self, op: Running<'_, R>) {
        let Self { reads, writes, body, runtime } = self;
        let caught = catch_unwind(AssertUnwindSafe(|| {
            (reads.guard(OpToken(op.task)), writes.guard(OpToken(op.task)))
        }));
        let (reads, writes) = match caught {
            Ok(guards) => guards,
            Err(payload) => return op.store(op_result(op.header(), Err(payload))),
        };
        let on_drop = StoreOnDrop(Some(op.to_owned()));
        runtime.spawn(async move {
            let on_drop = on_drop;
            let caught = AssertUnwindSafe(async move { body(reads, writes).await }).catch_unwind().await;
            if let Some(slot) = on_drop.disarm() {
                let result = op_result(slot.header(), caught);
                slot.store_owned(result);
            }
        });
    }
}

/// Stores an error if a future op's task is dropped unfinished (its runtime
/// shut down), so that the op still completes.
struct StoreOnDrop<R: 'static>(Option<SlotRef<R>>);

impl<R: 'static> StoreOnDrop<R> {
    fn disarm(mut self) -> Option<SlotRef<R>> {
        self.0.take()
    }
}

impl<R: 'static> Drop for StoreOnDrop<R> {
    fn drop(&mut self) {
        if let Some(slot) = self.0.take() {
            let op = slot.header().meta.name.clone();
            let reason = "its tokio runtime shut down before it finished";
            slot.store_owned(Err(Error::new(Kind::Cancelled { op, reason })));
        }
    }
}

#[cfg(all(test, not(depengine_loom), target_pointer_width = "64"))]
mod size_tests {
    /// The per-op memory budget (README, performance): the erased header of
    /// an op record stays small (its inbox link included: an op queued
    /// behind a var's write then takes no room in the var's queue);
    /// declarations of up to four vars are inline.
    #[test]
    fn op_header_stays_small() {
        assert!(std::mem::size_of::<super::Header>() <= 200, "{}", std::mem::size_of::<super::Header>());
        assert!(std::mem::size_of::<super::super::DepList>() <= 72);
    }

    /// The record of `workloads memory`'s op (one typed write, a body that
    /// captures a `u64`), counts included, fits the 288-byte chunks of the
    /// system allocator (what it hands out for 265 to 280 bytes): 8 bytes
    /// more and each pending op takes 16 more.
    #[test]
    fn a_one_var_write_record_fits_its_allocator_chunk() {
        use super::{OpCell, SyncJob};
        use crate::BoxError;
        use crate::access::Writing;

        fn record_size<F>(_: &F) -> usize
        where
            F: FnOnce((), (crate::WriteGuard<u64>,)) -> Result<(), BoxError> + Send + 'static,
        {
            2 * std::mem::size_of::<usize>()
                + std::mem::size_of::<OpCell<SyncJob<(), (Writing<crate::Var<u64>>,), F>>>()
        }
        let i = 7u64;
        let size = record_size(&move |(), (mut w,): (crate::WriteGuard<u64>,)| {
            *w = i;
            Ok(())
        });
        assert!(size <= 280, "{size}");
    }
}
