//! The word's counts racing each other and its flags, as they do in an
//! engine (the slot's own protocol is modelled in `../../slot/loom_tests.rs`):
//! a step meant to happen once happens once, and no transition of one part
//! of the word disturbs another, whatever the interleaving.

use loom::sync::Arc;
use loom::thread;

use super::*;

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
