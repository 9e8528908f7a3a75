use super::counting::waker as counting_waker;
use super::*;
use std::sync::Arc;

/// An early resolution racing the op's let-through (`execute` or a
/// segment's `abandon`): exactly one side claims the start, and when the
/// resolver claimed it, exactly one side completes the op; the value the
/// resolver stored is published.
#[test]
fn early_resolution_and_let_through_complete_once() {
    loom::model(|| {
        let slot = Arc::new((ResultSlot::new(), State::new(0)));
        let through = {
            let slot = slot.clone();
            loom::thread::spawn(
                move || if start(&slot.1) { (true, false) } else { (false, mark_through(&slot.1)) },
            )
        };
        let (resolved, completes) = if start_early(&slot.1) {
            slot.0.store(&slot.1, 1u32).unwrap();
            let _ = slot.0.publish(&slot.1);
            (true, mark_early(&slot.1))
        } else {
            (false, false)
        };
        let (ran, through_completes) = through.join().unwrap();
        assert!(resolved != ran, "one side claims the start");
        if resolved {
            assert!(completes != through_completes, "exactly one side completes the op");
            assert!(is_published(&slot.1));
        } else {
            assert!(!through_completes);
        }
    });
}

/// A handle polling (twice, with different wakers) while another thread
/// stores and publishes: in every interleaving, a poll that returned
/// `Pending` last has its waker woken, and the value arrives intact.
#[test]
fn no_lost_wake_up() {
    loom::model(|| {
        let slot = Arc::new((ResultSlot::new(), State::new(0)));
        let completer = {
            let slot = slot.clone();
            loom::thread::spawn(move || {
                slot.0.store(&slot.1, 7u32).unwrap();
                if let Published::First(Some(waker)) = slot.0.publish(&slot.1) {
                    waker.wake();
                }
            })
        };
        let (first, w1) = counting_waker();
        let (second, w2) = counting_waker();
        let mut last = (&second, &w2);
        let mut got = slot.0.poll(&slot.1, &mut Context::from_waker(&w1));
        if got.is_pending() {
            got = slot.0.poll(&slot.1, &mut Context::from_waker(&w2));
        } else {
            last = (&first, &w1);
        }
        completer.join().unwrap();
        if got.is_pending() {
            assert_eq!(last.0.get(), 1, "the last registered waker was not woken");
            got = slot.0.poll(&slot.1, &mut Context::from_waker(last.1));
        }
        assert_eq!(got, Poll::Ready(7));
    });
}

/// Two stores racing (a completion token and an unwinding body): one
/// wins, the other gets its value back, and the winner's is published.
#[test]
fn one_store_wins() {
    loom::model(|| {
        let slot = Arc::new((ResultSlot::new(), State::new(0)));
        let other = {
            let slot = slot.clone();
            loom::thread::spawn(move || slot.0.store(&slot.1, 2u32).is_ok())
        };
        let mine = slot.0.store(&slot.1, 1u32).is_ok();
        let theirs = other.join().unwrap();
        assert!(mine ^ theirs);
        assert!(matches!(slot.0.publish(&slot.1), Published::First(None)));
        let got = slot.0.poll(&slot.1, &mut Context::from_waker(Waker::noop()));
        assert_eq!(got, Poll::Ready(if mine { 1 } else { 2 }));
    });
}
