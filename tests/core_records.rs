//! Op records are reused, not allocated, once a program's pushes reach
//! their steady state: a thread that pushes far ahead of the workers waits
//! at the soft bound on ops in flight, and the records the workers give
//! back meanwhile serve its next pushes. Counted with an allocator that
//! counts, over every thread of the process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use depengine::{Engine, Var};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The count is the whole process's: the tests of this file take turns, so
/// that none counts another's allocations.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Allocations per op over `n` pushes of `push`, after as many to reach
/// the steady state, each run waited for.
fn allocations_per_op(engine: &Engine, n: u64, push: impl Fn(u64)) -> f64 {
    for i in 0..n {
        push(i);
    }
    engine.wait_for_all().blocking_wait().unwrap();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for i in 0..n {
        push(i);
    }
    engine.wait_for_all().blocking_wait().unwrap();
    (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / n as f64
}

fn write(engine: &Engine, var: &Var<u64>, i: u64) {
    engine
        .op("write")
        .write(var)
        .run_detached(move |(), (mut v,)| {
            *v = v.wrapping_mul(31) ^ i;
            Ok(())
        })
        .unwrap();
}

#[test]
fn a_chain_reuses_its_records() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let engine = Engine::builder().cpu_workers(2).build().unwrap();
    let v = engine.var(0u64);
    let per_op = allocations_per_op(&engine, 100_000, |i| write(&engine, &v, i));
    assert!(per_op < 0.1, "{per_op:.3} allocations per op");
}

#[test]
fn independent_writes_reuse_their_records() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let engine = Engine::builder().cpu_workers(2).build().unwrap();
    let vars: Vec<Var<u64>> = (0..1024).map(|i| engine.var(i)).collect();
    let per_op = allocations_per_op(&engine, 100_000, |i| write(&engine, &vars[(i % 1024) as usize], i));
    assert!(per_op < 0.1, "{per_op:.3} allocations per op");
}

#[test]
fn ops_without_vars_reuse_their_records() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let engine = Engine::builder().cpu_workers(2).build().unwrap();
    let per_op = allocations_per_op(&engine, 100_000, |i| {
        engine
            .op("none")
            .run_detached(move |(), ()| {
                std::hint::black_box(i);
                Ok(())
            })
            .unwrap();
    });
    assert!(per_op < 0.1, "{per_op:.3} allocations per op");
}
