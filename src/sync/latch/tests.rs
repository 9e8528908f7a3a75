use super::*;

#[test]
fn a_count_latch_is_set_when_the_owner_and_every_one_counted_are_gone() {
    let c = CountLatch::default();
    c.add();
    c.add();
    c.release();
    let done = c.close().clone();
    assert!(!done.is_set(), "one is still counted");
    assert!(Arc::ptr_eq(&done, c.close()) && !done.is_set(), "closing twice gives up one count");
    c.release();
    assert!(done.is_set());
    let idle = CountLatch::default();
    assert!(idle.close().is_set(), "nothing counted: set at close");
}
