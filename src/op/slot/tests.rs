use super::counting::waker as counting_waker;
use super::*;

#[test]
fn first_store_wins_and_publish_wakes_the_last_registered_waker() {
    let slot = ResultSlot::new();
    let (first, w1) = counting_waker();
    let (second, w2) = counting_waker();
    assert!(slot.poll(&mut Context::from_waker(&w1)).is_pending());
    assert!(slot.poll(&mut Context::from_waker(&w2)).is_pending());
    assert!(slot.start() && !slot.start());
    assert!(slot.store(1).is_ok());
    assert_eq!(slot.store(2), Err(2));
    let Published::First(Some(waker)) = slot.publish() else { panic!("the registered waker is returned") };
    waker.wake();
    assert!(matches!(slot.publish(), Published::Again));
    assert_eq!(first.get(), 0);
    assert_eq!(second.get(), 1);
    assert_eq!(slot.poll(&mut Context::from_waker(&w2)), Poll::Ready(1));
}

#[test]
#[should_panic(expected = "polled after it returned its result")]
fn taking_twice_panics() {
    let slot = ResultSlot::new();
    slot.store(()).unwrap();
    let _ = slot.publish();
    let waker = Waker::noop();
    let _ = slot.poll(&mut Context::from_waker(waker));
    let _ = slot.poll(&mut Context::from_waker(waker));
}
