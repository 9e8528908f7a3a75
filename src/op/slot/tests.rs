use super::counting::waker as counting_waker;
use super::*;

#[test]
fn first_store_wins_and_publish_wakes_the_last_registered_waker() {
    let (slot, state) = (ResultSlot::new(), State::new(0));
    let (first, w1) = counting_waker();
    let (second, w2) = counting_waker();
    assert!(slot.poll(&state, &mut Context::from_waker(&w1)).is_pending());
    assert!(slot.poll(&state, &mut Context::from_waker(&w2)).is_pending());
    assert!(start(&state) && !start(&state));
    assert!(slot.store(&state, 1).is_ok());
    assert_eq!(slot.store(&state, 2), Err(2));
    let Published::First(Some(waker)) = slot.publish(&state) else {
        panic!("the registered waker is returned")
    };
    waker.wake();
    assert!(matches!(slot.publish(&state), Published::Again));
    assert_eq!(first.get(), 0);
    assert_eq!(second.get(), 1);
    assert_eq!(slot.poll(&state, &mut Context::from_waker(&w2)), Poll::Ready(1));
}

#[test]
#[should_panic(expected = "polled after it returned its result")]
fn taking_twice_panics() {
    let (slot, state) = (ResultSlot::new(), State::new(0));
    slot.store(&state, ()).unwrap();
    let _ = slot.publish(&state);
    let waker = Waker::noop();
    let _ = slot.poll(&state, &mut Context::from_waker(waker));
    let _ = slot.poll(&state, &mut Context::from_waker(waker));
}
