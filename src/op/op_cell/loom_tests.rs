//! The completion of the code that ships (`op_cell.rs`, `life.rs`), under loom (and a
//! group's cancel racing an op's start, `../group.rs`): the
//! body's store and the drop of a guard that outlives it race to release
//! the live count; the op must complete exactly once, after both, and the
//! body's reference that passes to the guard must be dropped exactly once.

use std::borrow::Cow;
use std::sync::Arc;

use super::OpCell;
use crate::device::{Device, Lane};
use crate::op::LiveRef;
use crate::op::engine_core::test_engine;
use crate::op::job::{Job, Running};
use crate::op::{DepList, Exec, Flags, HandleKind, Meta, PackedDevice};
use crate::sync::epoch::Tracker;

/// A body the test stands in for: it stores through the slot itself.
struct Body;

impl Job for Body {
    type Output = u32;

    fn start(self, _: Running<'_, u32>) {
        unreachable!("the model stores the result itself")
    }
}

fn meta() -> Meta {
    Meta {
        device: PackedDevice::new(Device::Cpu(0)).expect("CPU 0 packs"),
        priority: 0,
        lane: Lane::Normal,
        exec: Exec::Pool,
        flags: Flags::default(),
        handle: HandleKind::Handle,
        repairs: false,
        profiled: false,
        name: Cow::Borrowed("modelled"),
    }
}

#[test]
fn the_body_and_its_last_guard_complete_the_op_once() {
    loom::model(|| {
        let engine = test_engine();
        let tracker = Tracker::<()>::new();
        let (epoch, ()) = tracker.enter(|_| ()).expect("the tracker is open");
        let record = OpCell::place(engine.clone(), meta(), DepList::new(), Body, epoch);
        let (cell, task) = (record.cell(), record.task().clone());
        // The body has started and handed out a guard.
        assert!(crate::op::slot::start(&cell.header.state));
        let guard = LiveRef::new(&task);
        let other = loom::thread::spawn(move || drop(guard));
        cell.store(&task, Ok(7));
        other.join().unwrap();
        assert_eq!(engine.counts.completed.get(), 1, "completed once");
        assert!(crate::op::slot::is_published(&cell.header.state), "published");
        // `record` and `task`, no more: the reference the body passed to
        // the live count was taken back and dropped exactly once.
        assert_eq!(task.count(), 2);
    });
}

/// A body that stores its result as it starts.
struct Stores;

impl Job for Stores {
    type Output = u32;

    fn start(self, op: Running<'_, u32>) {
        op.store(Ok(7));
    }
}

/// A group's cancel races its op's start (`group.rs`): the op either
/// runs or is resolved as cancelled, never both; it is published once, and
/// the group counts it in once and out once, as what it became.
#[test]
fn a_groups_cancel_and_its_ops_start_count_the_op_once() {
    loom::model(|| {
        let engine = test_engine();
        let anchor: Arc<dyn std::any::Any + Send + Sync> = Arc::new(());
        let group = crate::op::GroupCore::new(Cow::Borrowed("g"), Arc::downgrade(&anchor));
        let tracker = Tracker::<()>::new();
        let (epoch, ()) = tracker.enter(|_| ()).expect("the tracker is open");
        let meta = Meta { flags: Flags::new(Flags::WATCHED), ..meta() };
        let record = OpCell::place(engine.clone(), meta, DepList::new(), Stores, epoch);
        let task = record.task().clone();
        group.enter(record.header()).expect("the group is not cancelled");
        record.header().group_submitted(&task);
        let cancelling = group.clone();
        let other = loom::thread::spawn(move || assert!(cancelling.cancel()));
        // The worker the op was sent to (it has no vars: ready at once).
        task.execute();
        other.join().unwrap();
        assert_eq!(engine.counts.completed.get(), 1, "published once");
        let counts = group.counts();
        assert_eq!((counts.pending, counts.running), (0, 0), "counted out");
        assert_eq!(counts.done + counts.cancelled, 1, "counted once, as what it became");
        let waker = std::task::Waker::noop().clone();
        // Cancelled, the group is done once its op is counted out.
        let waited = group.poll_done(&mut None, &waker).expect("the group's wait ends");
        assert_eq!(waited.is_err(), counts.cancelled == 1);
    });
}
