//! The reference count of the code that ships, under loom: two threads
//! drop the last two references to a record at once; exactly one frees it,
//! and after the other's last use (its release, then the acquire fence):
//! with a relaxed decrement and no fence, loom finds the free racing with
//! that use.
//!
//! The word's counts racing each other and its flags, as they do in an
//! engine (the slot's own protocol is modelled in `../slot/loom_tests.rs`):
//! a step meant to happen once happens once, and no transition of one part
//! of the word disturbs another, whatever the interleaving.

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;

use super::super::{Header, test_header};
use super::*;

/// Counts its drops, and reads what the record's users wrote.
struct Dropped(Arc<AtomicUsize>, Arc<UnsafeCell<u32>>);

// SAFETY: the cell is written by a holder of a reference to the record
// before it lets go, and read by the record's drop, after every reference
// went: what the count's orderings order (the model's point).
unsafe impl Send for Dropped {}

impl Drop for Dropped {
    fn drop(&mut self) {
        // SAFETY: see above.
        let seen = self.1.with(|v| unsafe { *v });
        assert!(seen <= 1);
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

fn header() -> Header {
    test_header("modelled")
}

#[test]
fn two_racing_last_drops_free_the_record_once() {
    loom::model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let used = Arc::new(UnsafeCell::new(0u32));
        let held = Dropped(drops.clone(), used.clone());
        let task = TaskRef::continuation(header(), Box::new(move || drop(held)));
        let other = task.clone();
        let t = loom::thread::spawn(move || {
            // A use through this reference before it goes.
            // SAFETY: see `Dropped`.
            used.with_mut(|v| unsafe { *v = 1 });
            drop(other);
        });
        drop(task);
        t.join().unwrap();
        assert_eq!(drops.load(Ordering::Relaxed), 1, "freed once, its closure dropped unrun");
    });
}

#[test]
fn two_gates_and_the_push_dispatch_once() {
    loom::model(|| {
        let s = Arc::new(State::new(3));
        let gate = {
            let s = s.clone();
            thread::spawn(move || s.let_through(1))
        };
        // The push lets through the two deps it was granted at once.
        let mine = s.let_through(2);
        let theirs = gate.join().unwrap();
        assert!(mine ^ theirs, "exactly one dispatches");
        assert_eq!(s.pending(), 0);
    });
}

#[test]
fn a_body_and_a_guard_complete_once() {
    loom::model(|| {
        let s = Arc::new(State::new(0));
        s.acquire_live();
        let guard = {
            let s = s.clone();
            thread::spawn(move || s.release_live())
        };
        let body = s.release_live();
        let dropped = guard.join().unwrap();
        assert!(body ^ dropped, "exactly one completes");
    });
}

/// Flags set by compare-and-swap (a poll's registration) and by `fetch_or`
/// (a start's claim) while the counts move on other threads: every count
/// ends where its own steps leave it, every flag is kept.
#[test]
fn flags_and_counts_race_without_loss() {
    loom::model(|| {
        let s = Arc::new(State::new(1));
        s.ref_inc();
        let other = {
            let s = s.clone();
            thread::spawn(move || {
                assert!(s.let_through(1));
                assert!(!s.ref_dec());
            })
        };
        let _ = s.update(Ordering::AcqRel, |w| Some(w | WAKER));
        assert_eq!(s.set(STARTED, Ordering::Relaxed) & STARTED, 0);
        other.join().unwrap();
        assert!(s.has(WAKER) && s.has(STARTED));
        assert_eq!((s.pending(), s.live(), s.refs()), (0, 1, 1));
    });
}
