//! A `TaskRef`'s counts and its record's memory, on continuation records
//! (Miri too: the record is dropped once, in its slab slot).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};

use super::super::{Header, test_header};
use super::*;

/// Counts its drops; panics in its drop if asked to.
struct Dropped(Arc<AtomicUsize>, bool);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.fetch_add(1, StdOrdering::Relaxed);
        assert!(!self.1, "a record's destructor panics");
    }
}

fn header() -> Header {
    test_header("probe")
}

/// A continuation that counts its runs, holding a value that counts its
/// drops.
fn probe(panics_on_drop: bool) -> (TaskRef, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let (runs, drops) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (r, held) = (runs.clone(), Dropped(drops.clone(), panics_on_drop));
    let task = TaskRef::continuation(
        header(),
        Box::new(move || {
            let _held = &held;
            r.fetch_add(1, StdOrdering::Relaxed);
        }),
    );
    (task, runs, drops)
}

#[test]
fn a_record_is_dropped_once_with_its_last_reference() {
    let (task, runs, drops) = probe(false);
    assert_eq!(task.count(), 1);
    let other = task.clone();
    assert_eq!(task.count(), 2);
    other.execute();
    other.execute();
    assert_eq!(runs.load(StdOrdering::Relaxed), 1, "run once, through its vtable");
    assert_eq!(drops.load(StdOrdering::Relaxed), 1, "what it ran was dropped as it ran");
    let raw = other.into_raw();
    // SAFETY: `raw` came from `into_raw`, taken back once.
    let back = unsafe { TaskRef::from_raw(raw) };
    // SAFETY: `back` holds a count meanwhile.
    let third = unsafe { TaskRef::clone_from_raw(back.as_ptr()) };
    assert_eq!(task.count(), 3);
    drop((back, third));
    assert_eq!(task.count(), 1);
    std::thread::spawn(move || drop(task)).join().unwrap();
}

#[test]
fn an_abandoned_continuation_drops_what_it_holds_unrun() {
    let (task, runs, drops) = probe(false);
    task.abandon(crate::error::Error::invalid("abandoned"));
    assert_eq!((runs.load(StdOrdering::Relaxed), drops.load(StdOrdering::Relaxed)), (0, 1));
    task.execute();
    assert_eq!(runs.load(StdOrdering::Relaxed), 0, "nothing left to run");
}

#[test]
fn a_panicking_destructor_is_contained_and_its_slot_given_back() {
    let (task, runs, drops) = probe(true);
    // The last reference, never run: the record's drop drops the closure.
    let_go(task);
    assert_eq!((runs.load(StdOrdering::Relaxed), drops.load(StdOrdering::Relaxed)), (0, 1));
    // The slot went back: the next record of the class may take it.
    let (again, _, _) = probe(false);
    drop(again);
}

// The state word.

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
