//! The reference count of the code that ships, under loom: two threads
//! drop the last two references to a record at once; exactly one frees it,
//! and after the other's last use (its release, then the acquire fence):
//! with a relaxed decrement and no fence, loom finds the free racing with
//! that use.

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};

use super::super::{Header, test_header};
use super::TaskRef;

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
