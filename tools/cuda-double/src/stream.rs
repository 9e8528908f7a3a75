//! Streams: one thread each, running its commands in order. A wait holds
//! the stream until its event's record is reached; a command that touches
//! memory is checked, as a GPU would fault, when it runs, not when it is
//! enqueued.

use crate::kernels;
use crate::state::{self, Cmd, Handle, State, code};

/// The device memory `cmd` touches, as (address, bytes).
pub fn ranges(cmd: &Cmd, state: &State) -> Vec<(usize, usize)> {
    match cmd {
        Cmd::Copy { dst, src, len, dst_device, src_device } => {
            let mut r = Vec::with_capacity(2);
            for (p, device) in [(*dst, *dst_device), (*src, *src_device)] {
                if device || state.pinned(p, *len) {
                    r.push((p, *len));
                }
            }
            r
        }
        Cmd::Memset { dst, len, .. } => vec![(*dst, *len)],
        Cmd::Kernel { name, args, .. } => kernels::ranges(name, args),
        Cmd::Free { ptr } => state.memory.get(ptr).map(|b| vec![(*ptr, b.len)]).unwrap_or_default(),
        Cmd::Record { .. } | Cmd::Wait { .. } => Vec::new(),
    }
}

/// Starts the thread of stream `handle`.
pub fn spawn(handle: Handle) {
    std::thread::Builder::new()
        .name(format!("cuda-double-stream-{handle:#x}"))
        .spawn(move || run(handle))
        .expect("a stream thread");
}

fn run(handle: Handle) {
    let mut st = state::lock();
    loop {
        let Some(stream) = st.streams.get_mut(&handle) else { return };
        let ready = match stream.queue.front() {
            None if stream.destroyed => {
                st.streams.remove(&handle);
                state::notify();
                return;
            }
            None => false,
            Some(Cmd::Wait { event, generation }) => {
                let (event, generation) = (*event, *generation);
                if st.events.get(&event).is_none_or(|e| e.completed >= generation) {
                    st.streams.get_mut(&handle).expect("present").queue.pop_front();
                    state::notify();
                    continue;
                }
                false
            }
            Some(_) => true,
        };
        if !ready {
            st = state::wait(st);
            continue;
        }
        let cmd = st.streams.get_mut(&handle).expect("present").queue.pop_front().expect("a command");
        st = execute(st, handle, cmd);
        state::notify();
    }
}

/// Runs one command, outside the lock where it touches memory.
fn execute(
    mut st: std::sync::MutexGuard<'static, State>,
    handle: Handle,
    cmd: Cmd,
) -> std::sync::MutexGuard<'static, State> {
    let ctx = st.streams[&handle].ctx;
    let faulted = st.contexts.get(&ctx).and_then(|c| c.fault).is_some();
    match cmd {
        Cmd::Record { event, generation } => {
            // A faulted device reaches no more records: its events stay
            // pending and their queries return the fault.
            if !faulted && let Some(e) = st.events.get_mut(&event) {
                e.completed = e.completed.max(generation);
            }
            st
        }
        Cmd::Wait { .. } => st,
        Cmd::Free { ptr } => {
            st.free(ptr, Some(handle), "cuMemFreeAsync (reached on its stream)");
            st
        }
        cmd => {
            if faulted {
                return st;
            }
            let touched = ranges(&cmd, &st);
            for &(p, n) in &touched {
                if let Err(why) = st.check_range(p, n, None) {
                    st.violation(format!("stream {handle:#x}: {}: {why}", describe(&cmd)));
                    st.contexts.get_mut(&ctx).expect("a stream's context").fault =
                        Some(code::ILLEGAL_ADDRESS);
                    return st;
                }
            }
            if let Cmd::Kernel { name, .. } = &cmd
                && let Some((fault, _)) = st.injected(&format!("kernel:{name}"))
            {
                st.contexts.get_mut(&ctx).expect("a stream's context").fault = Some(fault);
                return st;
            }
            st.streams.get_mut(&handle).expect("present").running = touched;
            let delay = st.delay_us;
            drop(st);
            if delay > 0 {
                std::thread::sleep(std::time::Duration::from_micros(delay));
            }
            let problem = run_cmd(&cmd);
            let mut st = state::lock();
            if let Some(why) = problem {
                st.violation(format!("stream {handle:#x}: {}: {why}", describe(&cmd)));
            }
            if let Some(s) = st.streams.get_mut(&handle) {
                s.running.clear();
            }
            st
        }
    }
}

fn describe(cmd: &Cmd) -> String {
    match cmd {
        Cmd::Copy { len, .. } => format!("a copy of {len} bytes"),
        Cmd::Memset { len, .. } => format!("a memset of {len} bytes"),
        Cmd::Kernel { name, .. } => format!("kernel `{name}`"),
        Cmd::Record { .. } => "an event record".to_owned(),
        Cmd::Wait { .. } => "an event wait".to_owned(),
        Cmd::Free { .. } => "a free".to_owned(),
    }
}

/// Does the work of a checked command; a problem the double finds in it.
fn run_cmd(cmd: &Cmd) -> Option<String> {
    match cmd {
        Cmd::Copy { dst, src, len, .. } => {
            // SAFETY: both ranges were checked against live blocks (device
            // or pinned) or are the caller's host memory, which the API's
            // contract keeps alive until the copy has run.
            unsafe { std::ptr::copy(*src as *const u8, *dst as *mut u8, *len) };
            None
        }
        Cmd::Memset { dst, value, len } => {
            // SAFETY: the range was checked against a live device block.
            unsafe { std::ptr::write_bytes(*dst as *mut u8, *value, *len) };
            None
        }
        Cmd::Kernel { name, args, threads } => kernels::run(name, args, *threads),
        _ => None,
    }
}
