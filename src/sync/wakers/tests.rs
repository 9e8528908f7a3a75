use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Wake, Waker};

use super::WakerSet;

struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_key_keeps_one_waker_and_a_removed_key_none() {
    let count = Arc::new(Count(AtomicUsize::new(0)));
    let waker = Waker::from(count.clone());
    let mut set = WakerSet::default();
    let (mut a, mut b) = (None, None);
    set.register(&mut a, &waker);
    set.register(&mut a, &waker);
    set.register(&mut b, &waker);
    assert_eq!(set.len(), 2);
    // `count`, `waker` and the two kept.
    assert_eq!(Arc::strong_count(&count), 4);
    drop(set.remove(a));
    assert_eq!((set.len(), Arc::strong_count(&count)), (1, 3));
    assert!(set.remove(None).is_none());
    set.take().into_iter().for_each(Waker::wake);
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
    assert_eq!((set.len(), Arc::strong_count(&count)), (0, 2));
}

#[test]
fn a_new_waker_for_a_key_replaces_the_old() {
    let (one, two) = (Arc::new(Count(AtomicUsize::new(0))), Arc::new(Count(AtomicUsize::new(0))));
    let mut set = WakerSet::default();
    let mut key = None;
    set.register(&mut key, &Waker::from(one.clone()));
    set.register(&mut key, &Waker::from(two.clone()));
    assert_eq!((Arc::strong_count(&one), Arc::strong_count(&two)), (1, 2));
    set.take().into_iter().for_each(Waker::wake);
    assert_eq!((one.0.load(Ordering::SeqCst), two.0.load(Ordering::SeqCst)), (0, 1));
}
