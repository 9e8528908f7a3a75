use super::*;

#[test]
fn a_new_word_holds_its_deps_the_body_and_one_reference() {
    let s = State::new(3);
    assert_eq!((s.pending(), s.live(), s.refs()), (3, 1, 1));
    assert_eq!(s.load(Ordering::Relaxed) & 0xFFFF, 0, "no flag set");
}

#[test]
fn counts_and_flags_leave_each_other_alone() {
    let s = State::new(2);
    assert!(!s.let_through(0), "no gate passed");
    assert!(!s.let_through(1));
    s.ref_inc();
    s.acquire_live();
    assert_eq!(s.set(STARTED | SAW_ERROR, Ordering::Relaxed) & (STARTED | SAW_ERROR), 0);
    assert!(s.has(STARTED) && s.has(SAW_ERROR) && !s.has(STORED));
    assert_eq!((s.pending(), s.live(), s.refs()), (1, 2, 2));
    assert!(s.let_through(1), "the last gate dispatches");
    assert!(!s.release_live());
    assert!(s.release_live(), "the last live count completes");
    assert!(!s.ref_dec());
    assert!(s.ref_dec(), "the last reference frees");
    assert_eq!(s.update(Ordering::Relaxed, |w| Some(w & !STARTED)).map(|w| w & STARTED), Ok(STARTED));
    assert!(!s.has(STARTED) && s.has(SAW_ERROR));
}

#[test]
fn the_most_deps_fit_and_one_more_is_refused() {
    let s = State::new(MAX_DECLS);
    assert_eq!(s.pending(), MAX_DECLS);
    assert!(s.let_through(MAX_DECLS));
    assert_eq!((s.live(), s.refs()), (1, 1), "the neighbours kept their counts");
    let refused = std::panic::catch_unwind(|| State::new(MAX_DECLS + 1));
    assert!(refused.is_err());
}

#[test]
#[should_panic(expected = "more often than it has deps")]
fn letting_through_more_than_pending_panics() {
    State::new(1).let_through(2);
}

#[test]
#[should_panic(expected = "released twice")]
fn releasing_the_live_count_twice_panics() {
    let s = State::new(0);
    s.release_live();
    s.release_live();
}
