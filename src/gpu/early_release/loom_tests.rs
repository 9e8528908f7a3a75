//! Model checks of early release (`gpu/README.md`): a GPU op fences its
//! vars, then lets them go; the GPU runs its work, the poller observes the
//! event and the fence goes; a consumer let through by the release looks
//! the fences up. Whatever the interleaving, a consumer that finds nothing
//! to wait for, or has waited for what it found, sees the GPU work done.
//! The gate's own release and acquire are a flag here (the gate is checked
//! by its own models, `var/var_cell/loom_tests.rs`).

use std::sync::{Arc, Mutex, OnceLock};

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;

use super::{FenceWait, Fences, InFlight};
use crate::gpu::backend::RawEvent;
use crate::gpu::event::Event;

const VAR: u64 = 7;

fn flight(stream: usize) -> InFlight {
    let pool = Arc::new(Mutex::new(Vec::new()));
    let event = Event::new(RawEvent::Sim(Arc::default()), &pool);
    InFlight { device: 0, fault: Arc::new(OnceLock::new()), stream, event }
}

/// The GPU runs the work behind `flight` (`done` counts it), the poller
/// sees the event complete, and the fence goes.
fn gpu_completes(fences: &Fences, flight: &InFlight, done: &AtomicUsize) {
    done.fetch_add(1, Ordering::Relaxed);
    flight.event.set_done();
    fences.remove([VAR].into_iter(), &flight.event);
}

/// Waits, as the poller or a stream would, for every event.
fn wait_all(events: &[Event]) {
    while !events.iter().all(Event::is_done) {
        thread::yield_now();
    }
}

#[test]
fn loom_a_cpu_reader_let_through_by_an_early_release_sees_the_gpu_write_done() {
    loom::model(|| {
        let fences = Arc::new(Fences::default());
        let done = Arc::new(AtomicUsize::new(0));
        let released = Arc::new(AtomicUsize::new(0));
        let write = flight(0);
        // The GPU op, once its work is enqueued: the fence, the poller's
        // registration (after which the event may be seen complete), then
        // the release.
        let op = {
            let (fences, released, write, done) =
                (fences.clone(), released.clone(), write.clone(), done.clone());
            thread::spawn(move || {
                fences.add([(VAR, true)].into_iter(), &write);
                let gpu = {
                    let (fences, write) = (fences.clone(), write.clone());
                    thread::spawn(move || gpu_completes(&fences, &write, &done))
                };
                released.store(1, Ordering::Release);
                gpu.join().unwrap();
            })
        };
        while released.load(Ordering::Acquire) == 0 {
            thread::yield_now();
        }
        match fences.held([(VAR, false)].into_iter(), None) {
            FenceWait::Free => {}
            FenceWait::Wait(_, events) => wait_all(&events),
            FenceWait::Fault(..) => panic!("no fault was injected"),
        }
        assert_eq!(done.load(Ordering::Relaxed), 1, "the reader ran before the GPU write");
        op.join().unwrap();
    });
}

#[test]
fn loom_a_cpu_writer_after_two_gpu_reads_sees_both_done() {
    loom::model(|| {
        let fences = Arc::new(Fences::default());
        let done = Arc::new(AtomicUsize::new(0));
        let reads = [flight(0), flight(1)];
        // Both reads let the var go (the writer is let through after both).
        for read in &reads {
            fences.add([(VAR, false)].into_iter(), read);
        }
        let gpus: Vec<_> = reads
            .iter()
            .map(|read| {
                let (fences, done, read) = (fences.clone(), done.clone(), read.clone());
                thread::spawn(move || gpu_completes(&fences, &read, &done))
            })
            .collect();
        match fences.held([(VAR, true)].into_iter(), None) {
            FenceWait::Free => {}
            FenceWait::Wait(_, events) => wait_all(&events),
            FenceWait::Fault(..) => panic!("no fault was injected"),
        }
        assert_eq!(done.load(Ordering::Relaxed), 2, "the writer ran before a GPU read");
        gpus.into_iter().for_each(|g| g.join().unwrap());
    });
}

#[test]
fn loom_a_gpu_consumer_on_another_stream_waits_on_the_gpu_for_the_write() {
    loom::model(|| {
        let fences = Arc::new(Fences::default());
        let done = Arc::new(AtomicUsize::new(0));
        let write = flight(0);
        fences.add([(VAR, true)].into_iter(), &write);
        let gpu = {
            let (fences, done, write) = (fences.clone(), done.clone(), write.clone());
            thread::spawn(move || gpu_completes(&fences, &write, &done))
        };
        // Same device, stream 1: not held on the host...
        assert!(matches!(fences.held([(VAR, false)].into_iter(), Some(0)), FenceWait::Free));
        // ...but ordered on the GPU: its stream waits for what it is told.
        let waits = fences.gpu_waits([(VAR, false)].into_iter(), 0, 1);
        wait_all(&waits);
        assert_eq!(done.load(Ordering::Relaxed), 1, "the consumer's work ran before the write");
        // On the writer's own stream nothing is waited for: order is free.
        assert!(fences.gpu_waits([(VAR, false)].into_iter(), 0, 0).is_empty());
        gpu.join().unwrap();
    });
}
