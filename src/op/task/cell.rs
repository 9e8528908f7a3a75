//! The typed record: a [`Header`] followed by the body part (the op's
//! name, its stage: the body, then its output, and the handle's waker),
//! in one slab slot; its [`Vtable`] is a static per body type. With the
//! handle ([`Handle`], a `Future` of the output) and the completion token
//! ([`Token`]) of an async op, each a `TaskRef` with a phantom type.
//!
//! Who may touch which cell, by the state word (`state.rs`):
//!
//! * `stage`: the body, by the runner that claimed `STARTED`; the output,
//!   by the one that stored it (the body's end, or the token that claimed
//!   `STORED`) until `COMPLETE`, then by the handle that claimed `TAKEN`,
//!   or, nobody wanting it, by the completion (`JOIN_INTEREST` clear) or
//!   the handle's drop (`COMPLETE` seen, untaken);
//! * `waker`: written by the handle while `JOIN_WAKER` is clear and the op
//!   not complete; read (shared) by the completion that found
//!   `JOIN_WAKER`, and by the handle while it is set; dropped with the
//!   record.

#![allow(unsafe_code)]

use std::alloc::Layout;
use std::borrow::Cow;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll, Waker};

use super::state::{BodyEnd, Claim, HandleDrop};
use super::{ColdPtr, EngineCore, Header, Meta, State, TaskRef, Vtable};
use crate::error::{Error, Kind};
use crate::sync::atomic::AtomicPtr;
use crate::sync::cell::UnsafeCell;
use crate::sync::slab;

/// An op's body, typed.
pub(crate) trait Body: Send + 'static {
    type Output: Send + 'static;
    /// Whether a completion token stores the result (and holds the body's
    /// live count until then) instead of the body's return.
    const TOKEN: bool;

    /// Runs the body: its result, or (with `TOKEN`) `None`, a token it
    /// made from `task` storing the result now or later.
    fn run(self, task: &TaskRef) -> Option<Result<Self::Output, Error>>;
}

/// Where an op's body stands.
enum Stage<B: Body> {
    Body(B),
    Output(Result<B::Output, Error>),
    Consumed,
}

#[repr(C)]
struct Cell<B: Body> {
    header: Header,
    name: Cow<'static, str>,
    stage: UnsafeCell<Stage<B>>,
    waker: UnsafeCell<Option<Waker>>,
}

/// The vtable of body type `B`: a static, promoted from the constant.
fn vtable<B: Body>() -> &'static Vtable {
    &Vtable {
        run: run::<B>,
        read_output: read_output::<B>,
        store_output: store_output::<B>,
        complete: complete::<B>,
        drop_stage: drop_stage::<B>,
        dealloc: dealloc::<B>,
    }
}

/// Reaches the typed record behind `ptr`.
///
/// # Safety
///
/// `ptr` is a live record made by [`new`] for body type `B`.
unsafe fn cell<'a, B: Body>(ptr: NonNull<Header>) -> &'a Cell<B> {
    // SAFETY: the header is the cell's first field (`repr(C)`), and the
    // record is a `Cell<B>` (the contract).
    unsafe { ptr.cast::<Cell<B>>().as_ref() }
}

/// A new record of `body`, named `name`, in a slab slot: its reference,
/// and its handle if `handle`. `pending` gates (and the caller's own hold,
/// released by [`TaskRef::let_through`] as its push ends) stand before it
/// runs.
pub(crate) fn new<B: Body>(
    core: &EngineCore,
    meta: Meta,
    name: Cow<'static, str>,
    body: B,
    pending: usize,
    handle: bool,
) -> (TaskRef, Option<Handle<B::Output>>) {
    // The caller's reference, the live count's (dropped by the
    // completion), and the handle's.
    let refs = 2 + usize::from(handle);
    let cell = Cell {
        header: Header {
            state: State::new(pending, refs, handle),
            vtable: vtable::<B>(),
            core: NonNull::from(core),
            next: AtomicPtr::new(std::ptr::null_mut()),
            epoch: UnsafeCell::new(None),
            cold: ColdPtr::none(),
            meta,
        },
        name,
        stage: UnsafeCell::new(Stage::Body(body)),
        waker: UnsafeCell::new(None),
    };
    let slot = slab::alloc(Layout::new::<Cell<B>>()).cast::<Cell<B>>();
    // SAFETY: a fresh slot of the cell's layout (size and alignment).
    unsafe { slot.as_ptr().write(cell) };
    let ptr = slot.cast::<Header>();
    // SAFETY: `refs` counted one reference for the caller.
    let task = unsafe { TaskRef::from_raw(ptr) };
    let handle = handle.then(|| {
        // SAFETY: and one for the handle.
        let task = unsafe { TaskRef::from_raw(ptr) };
        Handle { task, _output: PhantomData }
    });
    (task, handle)
}

impl TaskRef {
    /// A gate let the op through (or its push released its own hold):
    /// true if it is ready now (the caller dispatches it).
    pub(crate) fn let_through(&self) -> bool {
        self.header().state.let_through()
    }

    /// The op's name.
    pub(crate) fn name(&self) -> &str {
        // Every record's body part starts with its name: `Cell` is
        // `repr(C)` and the name comes right after the header, whatever
        // the body type.
        let at = std::mem::offset_of!(Cell<Unit>, name);
        // SAFETY: the record lives (a reference is held), and at `at` past
        // its header is its name, initialised as it was made.
        unsafe { &*self.as_ptr().cast::<u8>().add(at).cast::<Cow<'static, str>>().as_ptr() }
    }
}

/// A body type only for reaching the name, the same for every body.
struct Unit;

impl Body for Unit {
    type Output = ();
    const TOKEN: bool = false;
    fn run(self, _: &TaskRef) -> Option<Result<(), Error>> {
        Some(Ok(()))
    }
}

unsafe fn run<B: Body>(ptr: NonNull<Header>) {
    // SAFETY: `run` is this record's vtable's.
    let cell = unsafe { cell::<B>(ptr) };
    if cell.header.state.claim_start() != Claim::Won {
        return;
    }
    // SAFETY: this call claimed `STARTED`: the stage is its alone.
    let stage = cell.stage.with_mut(|s| unsafe { std::mem::replace(&mut *s, Stage::Consumed) });
    let Stage::Body(body) = stage else { unreachable!("a record runs once, with its body") };
    // The body may make a token of the op: the caller's reference, lent.
    // SAFETY: the caller holds a reference for as long as `run` runs.
    let task = std::mem::ManuallyDrop::new(unsafe { TaskRef::from_raw(ptr) });
    let result = catch_unwind(AssertUnwindSafe(|| body.run(&task)));
    let state = &cell.header.state;
    if B::TOKEN {
        // The token stores and releases the live count; a panic fails the
        // op unless the token (signalled, or dropped by the unwinding)
        // stored first.
        if let Err(payload) = result
            && state.claim_store()
        {
            let err = Error::panicked(cell.name.clone(), payload);
            // SAFETY: this call claimed `STORED`: the stage is its own.
            cell.stage.with_mut(|s| unsafe { *s = Stage::Output(Err(err)) });
        }
        return;
    }
    let output = match result {
        Ok(output) => output.expect("a body without a token returns its result"),
        Err(payload) => Err(Error::panicked(cell.name.clone(), payload)),
    };
    // SAFETY: the runner holds the stage until it stores (no token).
    cell.stage.with_mut(|s| unsafe { *s = Stage::Output(output) });
    // Stored and the body's live count released in one step.
    if state.end_body() == BodyEnd::Last {
        // SAFETY: the body's end left no live count: this call completes.
        unsafe { complete::<B>(ptr) };
    }
}

unsafe fn complete<B: Body>(ptr: NonNull<Header>) {
    // SAFETY: `complete` is this record's vtable's.
    let cell = unsafe { cell::<B>(ptr) };
    // SAFETY: the one completion reads the epoch (no other access).
    let epoch = cell.header.epoch.with_mut(|e| unsafe { (*e).take() });
    // SAFETY: the engine outlives its records.
    unsafe { cell.header.core.as_ref() }.counts.completed.add_one();
    let done = cell.header.state.complete();
    if done.drop_output {
        // SAFETY: nobody will read the output: it is the completion's.
        unsafe { drop_stage::<B>(ptr) };
    }
    if done.wake {
        // SAFETY: `JOIN_WAKER` was set as the op completed: the waker is
        // written and only read from now on.
        cell.waker.with_mut(|w| unsafe { (*w).as_ref().map(Waker::wake_by_ref) });
    }
    drop(epoch);
    // The live count's reference.
    // SAFETY: counted at the record's making, dropped once, here.
    drop(unsafe { TaskRef::from_raw(ptr) });
}

unsafe fn read_output<B: Body>(ptr: NonNull<Header>, dst: *mut (), waker: &Waker) {
    // SAFETY: `read_output` is this record's vtable's.
    let cell = unsafe { cell::<B>(ptr) };
    let state = &cell.header.state;
    let now = state.load();
    if !now.has(super::state::COMPLETE) {
        let kept = now.has(super::state::JOIN_WAKER);
        // SAFETY: while `JOIN_WAKER` is set the waker is only read.
        let same =
            kept && cell.waker.with_mut(|w| unsafe { (*w).as_ref().is_some_and(|k| k.will_wake(waker)) });
        if same {
            return;
        }
        if !kept || state.unset_waker() {
            // SAFETY: `JOIN_WAKER` clear and not complete: the waker is
            // the handle's to write.
            cell.waker.with_mut(|w| unsafe { *w = Some(waker.clone()) });
            if state.set_waker() {
                return;
            }
        }
        // Completed meanwhile: read the output.
    }
    if state.take_output() {
        // SAFETY: this call claimed `TAKEN` after `COMPLETE`: the output
        // is its alone.
        let stage = cell.stage.with_mut(|s| unsafe { std::mem::replace(&mut *s, Stage::Consumed) });
        let Stage::Output(output) = stage else { unreachable!("a completed op has its output") };
        // SAFETY: `dst` is the handle's `Poll` of this body's output type
        // (`Handle::poll`).
        unsafe { *dst.cast::<Poll<Result<B::Output, Error>>>() = Poll::Ready(output) };
    }
}

unsafe fn store_output<B: Body>(ptr: NonNull<Header>, src: *mut ()) {
    // SAFETY: `store_output` is this record's vtable's.
    let cell = unsafe { cell::<B>(ptr) };
    // SAFETY: `src` is the token's output of this body's type (`finish`).
    let output = unsafe { (*src.cast::<Option<Result<B::Output, Error>>>()).take() };
    if let Some(output) = output {
        // SAFETY: the caller claimed `STORED`: the stage is its own.
        cell.stage.with_mut(|s| unsafe { *s = Stage::Output(output) });
    }
}

unsafe fn drop_stage<B: Body>(ptr: NonNull<Header>) {
    // SAFETY: `drop_stage` is this record's vtable's.
    let cell = unsafe { cell::<B>(ptr) };
    // SAFETY: the caller owns the stage (see the module docs).
    let stage = cell.stage.with_mut(|s| unsafe { std::mem::replace(&mut *s, Stage::Consumed) });
    drop(stage);
}

unsafe fn dealloc<B: Body>(ptr: NonNull<Header>) {
    let cell = ptr.cast::<Cell<B>>();
    // SAFETY: the last reference is gone: the record is this call's to
    // drop, in place, and its slot to give back (made by `new` with this
    // layout).
    unsafe {
        std::ptr::drop_in_place(cell.as_ptr());
        slab::free(cell.cast(), Layout::new::<Cell<B>>());
    }
}

/// The handle of an op: a `Future` of its output, as `JoinHandle` is of
/// a task's. Dropping it detaches the op.
pub(crate) struct Handle<R> {
    task: TaskRef,
    _output: PhantomData<fn() -> R>,
}

impl<R> Handle<R> {
    pub(crate) fn task(&self) -> &TaskRef {
        &self.task
    }
}

impl<R: Send + 'static> std::future::Future for Handle<R> {
    type Output = Result<R, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut out: Poll<Result<R, Error>> = Poll::Pending;
        let header = self.task.header();
        // SAFETY: the handle was made for this record's body type, whose
        // output is `R` (`new`): `out` is what `read_output` writes.
        unsafe { (header.vtable.read_output)(self.task.as_ptr(), (&raw mut out).cast(), cx.waker()) };
        out
    }
}

impl<R> Drop for Handle<R> {
    fn drop(&mut self) {
        let header = self.task.header();
        if header.state.drop_interest() == HandleDrop::DropOutput {
            // SAFETY: complete and untaken as the handle let go: the
            // output is its to drop.
            unsafe { (header.vtable.drop_stage)(self.task.as_ptr()) };
        }
    }
}

/// The completion token of an async op: the op completes once it is
/// signalled ([`complete`](Self::complete)) or dropped (an error).
pub(crate) struct Token<R: Send + 'static> {
    task: Option<TaskRef>,
    _output: PhantomData<fn(R)>,
}

impl<R: Send + 'static> Token<R> {
    /// The token of the op `task` refers to.
    ///
    /// # Safety
    ///
    /// `task`'s body type has output `R`, and its body returns `None`:
    /// this token alone stores the result.
    pub(crate) unsafe fn new(task: &TaskRef) -> Self {
        Self { task: Some(task.clone()), _output: PhantomData }
    }

    /// Signals the op's result.
    pub(crate) fn complete(mut self, result: Result<R, Error>) {
        if let Some(task) = self.task.take() {
            finish(&task, result);
        }
    }
}

/// Stores `result` unless a result was stored, and releases the body's
/// live count: the op completes if it was the last.
fn finish<R: Send + 'static>(task: &TaskRef, result: Result<R, Error>) {
    let header = task.header();
    if header.state.claim_store() {
        let mut src = Some(result);
        // SAFETY: this call claimed `STORED`; the token's `R` is the body's
        // output (`Token::new`).
        unsafe { (header.vtable.store_output)(task.as_ptr(), (&raw mut src).cast()) };
    }
    if header.state.end_body_stored() == BodyEnd::Last {
        // SAFETY: no live count is left: this call completes the op.
        unsafe { (header.vtable.complete)(task.as_ptr()) };
    }
}

/// A token dropped unsignalled completes its op with an error.
impl<R: Send + 'static> Drop for Token<R> {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            let err = Error::new(Kind::CompletionDropped { op: task.name().to_owned().into() });
            finish::<R>(&task, Err(err));
        }
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;
