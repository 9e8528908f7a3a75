#![allow(unsafe_code)]

use super::*;
use crate::var::inbox::Link;
use std::sync::Arc;
use std::sync::Mutex as StdMutex;

/// A token that records the error it saw and whether it clears errors.
#[derive(Clone)]
struct Token {
    name: &'static str,
    /// Its access when pushed alone (through the inbox).
    access: Access,
    link: Arc<Link<Token>>,
    clears: bool,
    seen: Arc<StdMutex<Option<Error>>>,
    /// Times it was announced next in line.
    announced: Arc<std::sync::atomic::AtomicUsize>,
}

impl Token {
    fn new(name: &'static str, clears: bool) -> Self {
        let access = Access::Read;
        Self { name, access, link: Arc::default(), clears, seen: Arc::default(), announced: Arc::default() }
    }
    fn writing(mut self) -> Self {
        self.access = Access::Write;
        self
    }
    fn announced(&self) -> usize {
        self.announced.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn seen(&self) -> Option<String> {
        self.seen.lock().unwrap().as_ref().map(|e| e.to_string())
    }
}

impl Grant for Token {
    fn on_grant(&self, _var: u64, error: &mut Option<Error>) {
        let e = if self.clears { error.take() } else { error.clone() };
        *self.seen.lock().unwrap() = e;
    }

    fn next_in_line(&self) {
        self.announced.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn name(&self) -> &str {
        self.name
    }

    type Holder = usize;

    fn held(&self) -> usize {
        Arc::as_ptr(&self.seen) as usize
    }

    unsafe fn from_held(_: usize) -> Self {
        unreachable!("the unit tests do not ask for holders")
    }
}

impl Linked for Token {
    fn link(&self) -> &Link<Self> {
        &self.link
    }
    fn sole_access(&self) -> Access {
        self.access
    }
}

fn names(ready: &[Token]) -> Vec<&'static str> {
    ready.iter().map(|t| t.name).collect()
}

#[test]
fn write_error_is_seen_by_successors_until_a_wait_clears_it() {
    let cell = VarCell::new(1, None);
    let w = Token::new("w", false);
    let r1 = Token::new("r1", false);
    let wait = Token::new("wait", true);
    let r2 = Token::new("r2", false);
    for t in [&w, &r1, &wait, &r2] {
        let access = if t.name == "w" { Access::Write } else { Access::Read };
        append_all([(&cell, access)].into_iter(), t, &mut |_| ()).unwrap();
    }
    let boom = Error::invalid("boom");
    let mut ready = Vec::new();
    cell.complete(0, Access::Write, Some(&boom), &mut |op| ready.push(op));
    assert_eq!(names(&ready), ["r1", "wait", "r2"]);
    assert_eq!(r1.seen().as_deref(), Some("invalid argument: boom"));
    assert_eq!(wait.seen().as_deref(), Some("invalid argument: boom"));
    assert_eq!(r2.seen(), None, "the wait cleared the error in push order");
    assert!(cell.lock().error.is_none());
}

/// A completion that lets ops through announces the op that then heads
/// the queue (the next to be let through), and only that one.
#[test]
fn completion_announces_the_next_in_line() {
    let cell = VarCell::new(1, None);
    let toks = ["w1", "w2", "r1", "r2", "w3"].map(|name| Token::new(name, false));
    for t in &toks {
        let access = if t.name.starts_with('w') { Access::Write } else { Access::Read };
        append_all([(&cell, access)].into_iter(), t, &mut |_| ()).unwrap();
    }
    let counts = || toks.iter().map(Token::announced).collect::<Vec<_>>();
    let mut ready = Vec::new();
    cell.complete(0, Access::Write, None, &mut |op| ready.push(op));
    assert_eq!(names(&ready), ["w2"]);
    assert_eq!(counts(), [0, 0, 1, 0, 0], "r1 heads the queue");
    cell.complete(0, Access::Write, None, &mut |op| ready.push(op));
    assert_eq!(names(&ready), ["w2", "r1", "r2"]);
    assert_eq!(counts(), [0, 0, 1, 0, 1], "w3 heads the queue");
    cell.complete(0, Access::Read, None, &mut |op| ready.push(op));
    cell.complete(0, Access::Read, None, &mut |op| ready.push(op));
    assert_eq!(names(&ready), ["w2", "r1", "r2", "w3"]);
    assert_eq!(counts(), [0, 0, 1, 0, 1], "completions that let nothing through announce nobody");
    cell.complete(0, Access::Write, None, &mut |op| ready.push(op));
    assert_eq!(counts(), [0, 0, 1, 0, 1], "an empty queue announces nobody");
}

/// Pushes `t` alone on `cell`; true if it was let through at once.
fn push_one(cell: &VarCell<Token>, t: &Token, ready: &mut Vec<Token>) -> bool {
    // SAFETY: `cell` outlives the call.
    let granted = unsafe { VarCell::append_one(cell, t.access, t.clone(), &mut |op| ready.push(op)) };
    granted.unwrap().is_some()
}

/// One-var ops pushed while a write runs wait in the inbox, and reach
/// the gate in push order; once the var is idle again, pushes take the
/// lock and are let through at once.
#[test]
fn ops_left_in_the_inbox_keep_their_order() {
    let cell = VarCell::new(1, None);
    let mut ready = Vec::new();
    assert!(push_one(&cell, &Token::new("w1", false).writing(), &mut ready));
    let queued = [Token::new("r1", false), Token::new("r2", false), Token::new("w2", false).writing()];
    for t in &queued {
        assert!(!push_one(&cell, t, &mut ready), "{} is queued behind the write", t.name);
    }
    assert!(ready.is_empty());
    cell.complete(0, Access::Write, None, &mut |op| ready.push(op));
    assert_eq!(names(&ready), ["r1", "r2"]);
    cell.complete(0, Access::Read, None, &mut |op| ready.push(op));
    cell.complete(0, Access::Read, None, &mut |op| ready.push(op));
    assert_eq!(names(&ready), ["r1", "r2", "w2"]);
    cell.complete(0, Access::Write, None, &mut |op| ready.push(op));
    assert!(cell.lock().gate.is_idle());
    assert!(push_one(&cell, &Token::new("r3", false), &mut ready), "an idle var lets a read through");
    assert!(push_one(&cell, &Token::new("r4", false), &mut ready), "and reads alongside it");
    assert!(!push_one(&cell, &Token::new("w3", false).writing(), &mut ready), "a write waits for them");
    assert_eq!(cell.lock().gate.queued().count(), 1);
}

/// The inbox is drained before a multi-var append and before a
/// deletion: ops pushed alone come first; after the deletion a push is
/// refused, through the inbox as through the lock.
#[test]
fn appends_under_the_lock_come_after_the_inbox() {
    let (a, b) = (VarCell::new(1, None), VarCell::new(2, None));
    let mut ready = Vec::new();
    assert!(push_one(&a, &Token::new("w1", false).writing(), &mut ready));
    assert!(!push_one(&a, &Token::new("r1", false), &mut ready));
    let both = Token::new("both", false);
    let granted =
        append_all([(&a, Access::Write), (&b, Access::Read)].into_iter(), &both, &mut |_| ()).unwrap();
    assert_eq!(granted, 1, "b only");
    assert!(!push_one(&a, &Token::new("r2", false), &mut ready));
    assert!(!a.append_delete(Token::new("del", false), &mut |op| ready.push(op)).unwrap());
    let queued: Vec<_> = a.lock().gate.queued().map(|(_, t)| t.name).collect();
    assert_eq!(queued, ["r1", "both", "r2", "del"]);
    let late = Token::new("late", false);
    // SAFETY: `a` outlives the call.
    let refused = unsafe { VarCell::append_one(&a, Access::Read, late, &mut |_| ()) };
    assert!(refused.is_err_and(|e| e.is_var_deleted()), "a sealed inbox refuses");
    for access in [Access::Write, Access::Read, Access::Write, Access::Read, Access::Write] {
        a.complete(0, access, None, &mut |op| ready.push(op));
    }
    assert_eq!(names(&ready), ["r1", "both", "r2", "del"]);
    let late = Token::new("late", false);
    // SAFETY: as above.
    let refused = unsafe { VarCell::append_one(&a, Access::Read, late, &mut |_| ()) };
    assert!(refused.is_err_and(|e| e.is_var_deleted()), "an idle deleted var refuses under the lock");
}

#[test]
fn append_all_is_all_or_nothing_on_deleted_var() {
    let a = VarCell::new(1, None);
    let b = VarCell::new(2, None);
    assert!(a.append_delete(Token::new("del", false), &mut |_| ()).unwrap());
    let t = Token::new("t", false);
    let err = append_all([(&a, Access::Read), (&b, Access::Write)].into_iter(), &t, &mut |_| ()).unwrap_err();
    assert!(err.is_var_deleted());
    assert!(b.lock().gate.is_idle(), "nothing appended to b");
    assert!(a.append_delete(Token::new("again", false), &mut |_| ()).unwrap_err().is_var_deleted());
}

#[test]
fn append_all_counts_grants() {
    let a = VarCell::new(1, None);
    let b = VarCell::new(2, None);
    let t1 = Token::new("t1", false);
    assert_eq!(
        append_all([(&a, Access::Write), (&b, Access::Read)].into_iter(), &t1, &mut |_| ()).unwrap(),
        2
    );
    let t2 = Token::new("t2", false);
    // a is written by t1: queued; b is only read: granted.
    assert_eq!(
        append_all([(&a, Access::Read), (&b, Access::Read)].into_iter(), &t2, &mut |_| ()).unwrap(),
        1
    );
}
