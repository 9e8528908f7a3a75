//! The word's transitions racing each other, as they do in an engine:
//! each model checks that a step meant to happen once happens once,
//! whatever the interleaving (`LOOM_MAX_PREEMPTIONS=2`, as CI runs them).

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;

use super::*;

/// Counts how many threads a racing step picked.
fn picked(n: &AtomicUsize, won: bool) {
    if won {
        n.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn two_gates_letting_through_dispatch_once() {
    loom::model(|| {
        let s = Arc::new(State::new(2, 1, false));
        let n = Arc::new(AtomicUsize::new(0));
        let gate = {
            let (s, n) = (s.clone(), n.clone());
            thread::spawn(move || picked(&n, s.let_through()))
        };
        picked(&n, s.let_through());
        picked(&n, s.let_through());
        gate.join().unwrap();
        assert_eq!(n.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn a_runner_and_a_resolution_claim_the_start_once() {
    loom::model(|| {
        let s = Arc::new(State::new(0, 1, false));
        let resolver = {
            let s = s.clone();
            thread::spawn(move || s.claim_resolution())
        };
        let ran = s.claim_start();
        let resolved = resolver.join().unwrap();
        match ran {
            Claim::Won => assert!(!resolved),
            Claim::Resolved => assert!(resolved),
            Claim::Started => panic!("nobody else runs it"),
        }
    });
}

#[test]
fn a_body_end_racing_a_guard_drop_completes_once() {
    loom::model(|| {
        let s = Arc::new(State::new(0, 1, true));
        s.acquire_live();
        let n = Arc::new(AtomicUsize::new(0));
        let guard = {
            let (s, n) = (s.clone(), n.clone());
            thread::spawn(move || picked(&n, s.release_live()))
        };
        picked(&n, s.end_body() == BodyEnd::Last);
        guard.join().unwrap();
        assert_eq!(n.load(Ordering::SeqCst), 1);
        assert!(s.load().has(STORED));
    });
}

#[test]
fn a_token_racing_the_body_s_end_stores_once() {
    loom::model(|| {
        let s = Arc::new(State::new(0, 1, true));
        let token = {
            let s = s.clone();
            thread::spawn(move || s.claim_store())
        };
        let body = s.claim_store();
        let token = token.join().unwrap();
        assert!(body ^ token);
        assert_eq!(s.end_body_stored(), BodyEnd::Last);
    });
}

#[test]
fn a_completion_racing_the_handle_s_drop_drops_the_output_once() {
    loom::model(|| {
        let s = Arc::new(State::new(0, 1, true));
        let n = Arc::new(AtomicUsize::new(0));
        let handle = {
            let (s, n) = (s.clone(), n.clone());
            thread::spawn(move || picked(&n, s.drop_interest() == HandleDrop::DropOutput))
        };
        picked(&n, s.complete().drop_output);
        handle.join().unwrap();
        assert_eq!(n.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn a_waker_set_racing_the_completion_is_woken_or_sees_it_complete() {
    loom::model(|| {
        let s = Arc::new(State::new(0, 1, true));
        let completer = {
            let s = s.clone();
            thread::spawn(move || s.complete().wake)
        };
        // The handle's poll: clear, write the waker, hand it over.
        let handed = s.unset_waker() && s.set_waker();
        let woken = completer.join().unwrap();
        if handed {
            // Handed before the completion's step, or the completion came
            // first and `set_waker` said so.
            assert!(woken, "a waker handed over is woken");
        } else {
            assert!(!woken && s.take_output(), "not handed: the handle reads the output");
        }
    });
}

#[test]
fn the_last_of_two_references_dropped_frees_once() {
    loom::model(|| {
        let s = Arc::new(State::new(0, 1, false));
        s.ref_inc();
        let n = Arc::new(AtomicUsize::new(0));
        let other = {
            let (s, n) = (s.clone(), n.clone());
            thread::spawn(move || picked(&n, s.ref_dec()))
        };
        picked(&n, s.ref_dec());
        other.join().unwrap();
        assert_eq!(n.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn an_early_resolution_s_end_racing_its_let_through_completes_once() {
    loom::model(|| {
        let s = Arc::new(State::new(0, 1, false));
        assert!(s.claim_resolution());
        let n = Arc::new(AtomicUsize::new(0));
        let gate = {
            let (s, n) = (s.clone(), n.clone());
            thread::spawn(move || picked(&n, s.mark_through()))
        };
        picked(&n, s.mark_early());
        gate.join().unwrap();
        assert_eq!(n.load(Ordering::SeqCst), 1);
    });
}
