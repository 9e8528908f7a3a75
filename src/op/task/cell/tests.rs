//! The typed record through its vtable, under Miri too (CI): a body runs
//! once, its output reaches the handle once, an unread output is dropped
//! once, a token completes from another thread, a panic becomes the op's
//! error, and the record's memory goes back when its last reference does.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use super::*;
use crate::op::record::EngineRef;
use crate::op::record::engine_core::test_engine;
use crate::op::task::Meta;

/// An engine of nothing but its core; a ready op runs on the thread
/// that let it through.
fn core() -> EngineRef {
    test_engine()
}

fn meta() -> Meta {
    Meta { device: 0, priority: 0, lane: 0, exec: 0, flags: 0, deps: 0 }
}

/// Counts its drops.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A sync body returning `f()`.
struct Sync<F>(F);

impl<F: FnOnce() -> R + Send + 'static, R: Send + 'static> Body for Sync<F> {
    type Output = R;
    const TOKEN: bool = false;
    fn run(self, _: &TaskRef) -> Option<Result<R, Error>> {
        Some(Ok((self.0)()))
    }
}

/// An async body that hands its token to `to`.
struct WithToken<R: Send + 'static>(mpsc::Sender<Token<R>>);

impl<R: Send + 'static> Body for WithToken<R> {
    type Output = R;
    const TOKEN: bool = true;
    fn run(self, task: &TaskRef) -> Option<Result<R, Error>> {
        // SAFETY: this body's output is `R`, and it returns `None`.
        let _ = self.0.send(unsafe { Token::new(task) });
        None
    }
}

/// Pushes `body` with no gates: dispatched (run here) as the push ends.
fn push<B: Body>(core: &EngineCore, body: B, handle: bool) -> Option<Handle<B::Output>> {
    let (task, handle) = new(core, meta(), "op".into(), body, 0, handle);
    if task.let_through() {
        task.run();
    }
    handle
}

fn wait<R: Send + 'static>(handle: Handle<R>) -> Result<R, Error> {
    crate::sync::block_on::block_on(handle)
}

#[test]
fn a_body_runs_once_and_its_output_reaches_the_handle() {
    let core = core();
    let drops = Arc::new(AtomicUsize::new(0));
    let output = Counted(drops.clone());
    let handle = push(&core, Sync(move || output), true).unwrap();
    let got = wait(handle).unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 0, "taken, not dropped");
    drop(got);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    assert_eq!(core.counts.completed.get(), 1);
}

#[test]
fn an_output_nobody_reads_is_dropped_once() {
    let core = core();
    let drops = Arc::new(AtomicUsize::new(0));
    let d = drops.clone();
    assert!(push(&core, Sync(move || Counted(d)), false).is_none());
    assert_eq!(drops.load(Ordering::SeqCst), 1, "detached: dropped by the completion");
    // A handle dropped after the completion drops it.
    let d = drops.clone();
    let handle = push(&core, Sync(move || Counted(d)), true).unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    drop(handle);
    assert_eq!(drops.load(Ordering::SeqCst), 2);
}

#[test]
fn a_handle_dropped_before_the_completion_leaves_the_output_to_it() {
    let core = core();
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel();
    let handle = push(&core, WithToken::<Counted>(tx), true).unwrap();
    let token = rx.recv().unwrap();
    drop(handle);
    token.complete(Ok(Counted(drops.clone())));
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn a_token_completes_the_op_from_another_thread_and_wakes_the_handle() {
    let core = core();
    let (tx, rx) = mpsc::channel();
    let handle = push(&core, WithToken::<u32>(tx), true).unwrap();
    let token = rx.recv().unwrap();
    let signaller = std::thread::spawn(move || token.complete(Ok(42)));
    assert_eq!(wait(handle).unwrap(), 42);
    signaller.join().unwrap();
    assert_eq!(core.counts.completed.get(), 1);
}

#[test]
fn a_token_dropped_unsignalled_fails_the_op() {
    let core = core();
    let (tx, rx) = mpsc::channel();
    let handle = push(&core, WithToken::<u32>(tx), true).unwrap();
    drop(rx.recv().unwrap());
    assert!(wait(handle).unwrap_err().is_completion_dropped());
}

#[test]
fn a_panicking_body_completes_with_the_panic() {
    let core = core();
    let handle = push(&core, Sync(|| -> u32 { panic!("boom") }), true).unwrap();
    let err = wait(handle).unwrap_err();
    assert!(err.is_panic() && err.to_string().contains("boom"), "{err}");
}

#[test]
fn a_pending_op_runs_once_its_gates_let_it_through_and_its_memory_goes_back() {
    let core = core();
    let (task, handle) = new(&core, meta(), "gated".into(), Sync(|| 7u8), 2, true);
    assert!(!task.let_through());
    assert!(!task.let_through());
    assert_eq!(task.name(), "gated");
    let extra = task.clone();
    assert!(task.let_through(), "the push's own hold was the last");
    task.run();
    drop(task);
    // Claimed once: a second run does nothing.
    extra.run();
    assert_eq!(wait(handle.unwrap()).unwrap(), 7);
    let state = extra.header().state.load();
    assert_eq!(state.refs(), 1, "only `extra` is left");
    drop(extra);
}

#[test]
fn a_large_body_lives_in_the_allocator_s_memory() {
    let core = core();
    let big = [7u8; 4096];
    let handle = push(&core, Sync(move || big.iter().map(|&b| u32::from(b)).sum::<u32>()), true).unwrap();
    assert_eq!(wait(handle).unwrap(), 7 * 4096);
}

#[test]
fn a_waker_replaced_before_completion_is_the_one_woken() {
    let core = core();
    let (tx, rx) = mpsc::channel();
    let handle = push(&core, WithToken::<u32>(tx), true).unwrap();
    let token = rx.recv().unwrap();
    let mut handle = tokio_test::task::spawn(handle);
    tokio_test::assert_pending!(handle.poll());
    let mut again = tokio_test::task::spawn(async {});
    let _ = again.poll();
    tokio_test::assert_pending!(handle.poll());
    token.complete(Ok(5));
    assert!(handle.is_woken());
    assert_eq!(tokio_test::assert_ready!(handle.poll()).unwrap(), 5);
}

#[test]
fn every_record_s_name_sits_right_after_its_header() {
    type Small = Sync<fn() -> u8>;
    type Big = Sync<Box<dyn FnOnce() -> [u64; 64] + Send>>;
    assert_eq!(std::mem::offset_of!(Cell<Small>, name), 64);
    assert_eq!(std::mem::offset_of!(Cell<Big>, name), 64);
    assert_eq!(std::mem::offset_of!(Cell<WithToken<String>>, name), 64);
    assert_eq!(std::mem::offset_of!(Cell<Unit>, name), 64);
}
