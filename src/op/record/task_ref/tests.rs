//! A `TaskRef`'s counts and its record's memory, on a record type of the
//! test's own (Miri too: the record is dropped once, in its slab slot).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};

use super::super::engine_core::test_engine;
use super::super::{DepList, Flags, HandleKind, Header, Meta, PackedDevice, Task};
use super::{TaskRef, let_go};
use crate::device::{Device, Lane};
use crate::error::Error;
use crate::op::Exec;

/// A record that counts what is called on it and its drops.
#[repr(C)]
struct Probe {
    header: Header,
    calls: Arc<AtomicUsize>,
    drops: Arc<AtomicUsize>,
    panics_on_drop: bool,
}

impl Task for Probe {
    fn header(&self) -> &Header {
        &self.header
    }
    fn execute(&self, this: &TaskRef) {
        assert_eq!(this.as_ptr().cast::<Self>().as_ptr().cast_const(), std::ptr::from_ref(self));
        self.calls.fetch_add(1, StdOrdering::Relaxed);
    }
    fn try_execute(&self, _: &TaskRef) -> bool {
        false
    }
    fn is_started(&self) -> bool {
        true
    }
    fn publish(&self) {}
    fn complete(&self, _: &TaskRef) {}
    fn abandon(&self, _: &TaskRef, _: Error) {}
    fn resolve_early(&self, _: &TaskRef, _: Error, _: bool) -> bool {
        false
    }
    fn is_resolved_early(&self) -> bool {
        false
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.drops.fetch_add(1, StdOrdering::Relaxed);
        assert!(!self.panics_on_drop, "a record's destructor panics");
    }
}

fn meta() -> Meta {
    Meta {
        device: PackedDevice::new(Device::Cpu(0)).unwrap(),
        priority: 0,
        lane: Lane::Normal,
        exec: Exec::Inline,
        flags: Flags::new(0),
        handle: HandleKind::Detached,
        repairs: false,
        profiled: false,
        name: "probe".into(),
    }
}

fn probe(panics_on_drop: bool) -> (TaskRef, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let (calls, drops) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let task = TaskRef::new(Probe {
        header: Header::new(meta(), DepList::new(), test_engine()),
        calls: calls.clone(),
        drops: drops.clone(),
        panics_on_drop,
    });
    (task, calls, drops)
}

#[test]
fn a_record_is_dropped_once_with_its_last_reference() {
    let (task, calls, drops) = probe(false);
    assert_eq!(task.count(), 1);
    let other = task.clone();
    assert_eq!(task.count(), 2);
    other.execute();
    assert_eq!(calls.load(StdOrdering::Relaxed), 1, "called through the vtable, on its own record");
    let raw = other.into_raw();
    // SAFETY: `raw` came from `into_raw`, taken back once.
    let back = unsafe { TaskRef::from_raw(raw) };
    // SAFETY: `back` holds a count meanwhile.
    let third = unsafe { TaskRef::clone_from_raw(back.as_ptr()) };
    assert_eq!(task.count(), 3);
    drop((back, third));
    assert_eq!(drops.load(StdOrdering::Relaxed), 0);
    let handle = std::thread::spawn(move || drop(task));
    handle.join().unwrap();
    assert_eq!(drops.load(StdOrdering::Relaxed), 1, "the last reference, on another thread");
}

#[test]
fn a_panicking_destructor_is_contained_and_its_slot_given_back() {
    let (task, _, drops) = probe(true);
    let_go(task);
    assert_eq!(drops.load(StdOrdering::Relaxed), 1);
    // The slot went back: the next record of the class may take it.
    let (again, _, _) = probe(false);
    drop(again);
}
