//! Every transition of the word, one thread at a time: what each returns
//! and what it leaves.

use super::*;

#[test]
fn a_new_word_holds_the_counts_it_was_given() {
    let s = State::new(3, 2, true).load();
    assert_eq!((s.pending(), s.live(), s.refs()), (4, 1, 2));
    assert!(s.has(JOIN_INTEREST) && !s.has(STARTED));
    assert!(!State::new(0, 1, false).load().has(JOIN_INTEREST));
}

#[test]
#[should_panic(expected = "exceed 16 bits")]
fn more_deps_than_the_count_holds_are_refused() {
    let _ = State::new(MAX_COUNT, 1, false);
}

#[test]
fn the_last_gate_and_only_it_dispatches() {
    let s = State::new(2, 1, false);
    assert!(!s.let_through());
    assert!(!s.let_through());
    assert!(s.let_through(), "the push's own hold was the last");
    assert_eq!(s.load().pending(), 0);
}

#[test]
fn a_start_is_claimed_once_and_a_resolution_is_told_apart() {
    let s = State::new(0, 1, false);
    assert_eq!(s.claim_start(), Claim::Won);
    assert_eq!(s.claim_start(), Claim::Started);
    assert!(!s.claim_resolution(), "too late to resolve a started op");
    let r = State::new(0, 1, false);
    assert!(r.claim_resolution());
    assert_eq!(r.claim_start(), Claim::Resolved);
    assert!(r.load().has(RESOLVING));
}

#[test]
fn a_body_alone_completes_at_its_end_and_guards_defer_it() {
    let alone = State::new(0, 1, true);
    assert_eq!(alone.end_body(), BodyEnd::Last);
    let s = alone.load();
    assert!(s.has(STORED) && s.live() == 0);
    let guarded = State::new(0, 1, true);
    guarded.acquire_live();
    guarded.acquire_live();
    assert_eq!(guarded.end_body(), BodyEnd::GuardsLeft);
    assert!(!guarded.release_live());
    assert!(guarded.release_live(), "the last guard completes");
    assert!(guarded.load().has(STORED));
}

#[test]
fn a_token_claims_the_store_before_the_body_ends() {
    let s = State::new(0, 1, true);
    assert!(s.claim_store());
    assert!(!s.claim_store(), "stored once");
    assert_eq!(s.end_body_stored(), BodyEnd::Last);
}

#[test]
fn a_completion_wakes_a_registered_waker_and_drops_an_unwanted_output() {
    let watched = State::new(0, 1, true);
    assert!(watched.set_waker());
    assert_eq!(watched.complete(), Completed { wake: true, drop_output: false });
    assert!(!watched.unset_waker(), "complete: the handle reads instead");
    assert!(watched.take_output());
    assert!(!watched.take_output(), "taken once");
    assert_eq!(watched.drop_interest(), HandleDrop::Nothing);
    let unwatched = State::new(0, 1, true);
    assert_eq!(unwatched.complete(), Completed { wake: false, drop_output: false });
    assert_eq!(unwatched.drop_interest(), HandleDrop::DropOutput, "completed, untaken: the handle drops it");
    let detached = State::new(0, 1, false);
    assert_eq!(detached.complete(), Completed { wake: false, drop_output: true });
    let dropped_first = State::new(0, 1, true);
    assert!(dropped_first.set_waker());
    assert_eq!(dropped_first.drop_interest(), HandleDrop::Nothing);
    assert_eq!(dropped_first.complete(), Completed { wake: false, drop_output: true });
}

#[test]
fn output_is_taken_only_once_complete() {
    let s = State::new(0, 1, true);
    assert!(!s.take_output());
    s.end_body();
    assert!(!s.take_output(), "stored is not complete");
    s.complete();
    assert!(s.take_output());
}

#[test]
fn references_count_up_and_the_last_drop_says_so() {
    let s = State::new(0, 1, false);
    s.ref_inc();
    s.ref_inc();
    assert_eq!(s.load().refs(), 3);
    assert!(!s.ref_dec());
    assert!(!s.ref_dec());
    assert!(s.ref_dec());
}

#[test]
fn of_the_resolution_s_end_and_the_let_through_the_second_completes() {
    let a = State::new(0, 1, false);
    assert!(!a.mark_early());
    assert!(a.mark_through());
    let b = State::new(0, 1, false);
    assert!(!b.mark_through());
    assert!(b.mark_early());
}

#[test]
fn flags_that_only_grow_stay_set_and_leave_the_counts() {
    let s = State::new(1, 1, false);
    s.set(SAW_ERROR);
    s.set(VARS_GONE);
    s.set(SAW_ERROR);
    let w = s.load();
    assert!(w.has(SAW_ERROR) && w.has(VARS_GONE));
    assert_eq!((w.pending(), w.live(), w.refs()), (2, 1, 1));
}
