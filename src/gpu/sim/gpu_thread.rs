//! The simulated GPU's thread: it moves every stream on as far as it can,
//! runs the effects of the work items that ended, and sleeps until the
//! next one ends or new work comes.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::clock::{check_hazards, join};
use super::{Item, KEPT_CLOCKS, SimGpu, State, Work, lock};
use crate::error::GpuFault;
use crate::gpu::blocking;

/// The GPU thread: runs stream heads until stopped and every stream is empty.
pub(super) fn run(gpu: &Weak<SimGpu>) {
    blocking::mark_engine_thread();
    loop {
        let Some(gpu) = gpu.upgrade() else { return };
        let mut state = lock(&gpu.state);
        let Step { finished, next, moved } = step(&mut state);
        if finished.is_empty() && !moved {
            let idle = state.streams.iter().all(|q| q.items.is_empty());
            if state.stopping && (idle || state.fault.is_some()) {
                return;
            }
            let wait =
                next.map_or(Duration::from_millis(50), |t| t.saturating_duration_since(Instant::now()));
            drop(gpu.cv.wait_timeout(state, wait).unwrap_or_else(|e| e.into_inner()));
            continue;
        }
        drop(state);
        for Work { name, touches, run, .. } in finished {
            // A kernel that panics is a device fault, as a kernel's trap is on
            // a real device: the GPU thread goes on, and every pending op of
            // the device fails.
            let ran = catch_unwind(AssertUnwindSafe(run));
            touches.iter().for_each(|t| {
                t.buffer.pending.fetch_sub(t.weight(), Ordering::AcqRel);
            });
            if let Err(payload) = ran {
                let message = crate::error::panic_message(&*payload);
                lock(&gpu.state).fault.get_or_insert(GpuFault::Simulated {
                    error: "CUDA_ERROR_LAUNCH_FAILED",
                    why: format!("the work item `{name}` panicked: {message}"),
                });
            }
        }
        gpu.cv.notify_all();
    }
}

/// What one look at the streams found.
#[derive(Default)]
struct Step {
    /// Work items that ended: their effects are to be run.
    finished: Vec<Work>,
    /// The earliest time a running work item ends.
    next: Option<Instant>,
    /// A record or a wait passed (which may let another stream go on).
    moved: bool,
}

/// What the head of a stream did.
enum Head {
    /// Passed: look at the next item.
    Passed,
    /// The stream waits (or is empty, or its work item's effect is due).
    Stop,
    /// A work item failed: the device has a sticky fault.
    Fault,
}

/// Moves every stream on as far as it can now: passes records and satisfied
/// waits, starts head work items (checking hazards), and collects the work
/// items that ended.
fn step(state: &mut State) -> Step {
    let now = Instant::now();
    let mut step = Step::default();
    if state.fault.is_some() {
        return step;
    }
    'streams: for s in 0..state.streams.len() {
        loop {
            match head(state, s, now, &mut step) {
                Head::Passed => {}
                Head::Stop => break,
                Head::Fault => break 'streams,
            }
        }
    }
    let busy = state.streams.iter().filter(|q| q.busy_until.is_some()).count();
    state.overlap = state.overlap.max(busy);
    step
}

/// Moves the head of stream `s` on, if it can go.
fn head(state: &mut State, s: usize, now: Instant, step: &mut Step) -> Head {
    let queue = &mut state.streams[s];
    match queue.items.front() {
        None => Head::Stop,
        Some(Item::Record { event, seq }) => {
            let mut seqs = lock(&event.seqs);
            seqs.passed = seqs.passed.max(*seq);
            seqs.clocks.push_back((*seq, queue.clock.clone()));
            if seqs.clocks.len() > KEPT_CLOCKS {
                seqs.clocks.pop_front();
            }
            drop(seqs);
            queue.items.pop_front();
            step.moved = true;
            Head::Passed
        }
        Some(Item::Wait { event, seq }) => {
            let seqs = lock(&event.seqs);
            if seqs.passed < *seq {
                return Head::Stop;
            }
            let clock = seqs.clock(*seq);
            drop(seqs);
            join(&mut queue.clock, &clock);
            queue.items.pop_front();
            step.moved = true;
            Head::Passed
        }
        Some(Item::Work(work)) => match queue.busy_until {
            None => {
                let (touches, name) = (work.touches.clone(), work.name.clone());
                queue.busy_until = Some(now + work.duration);
                let host = work.host.clone();
                join(&mut queue.clock, &host);
                let clock = queue.clock.clone();
                check_hazards(&mut state.history, &mut state.hazards, &clock, s, &name, &touches);
                Head::Passed
            }
            Some(end) if end <= now => end_work(state, s, step),
            Some(end) => {
                step.next = Some(step.next.map_or(end, |n: Instant| n.min(end)));
                Head::Stop
            }
        },
    }
}

/// Ends the work item at the head of stream `s`: its effect is run after
/// the look (then what follows it, a record, passes), or it fails.
fn end_work(state: &mut State, s: usize, step: &mut Step) -> Head {
    let queue = &mut state.streams[s];
    queue.busy_until = None;
    let Some(Item::Work(work)) = queue.items.pop_front() else { unreachable!("the head is a work item") };
    queue.clock[s] += 1;
    state.done += 1;
    if state.fail_next.as_ref().is_some_and(|n| work.name.contains(n.as_str())) {
        state.fail_next = None;
        state.fault = Some(GpuFault::Simulated {
            error: "CUDA_ERROR_ILLEGAL_ADDRESS",
            why: format!("fault in `{}` on stream {s}", work.name),
        });
        step.moved = true;
        return Head::Fault;
    }
    step.finished.push(work);
    Head::Stop
}
