//! The double's one world: contexts, streams, events, memory, modules,
//! the violations seen and the faults asked for, under one lock. Stream
//! threads and API calls wait on one condition variable, signalled at
//! every change.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard};

/// CUDA's result codes, those the double returns.
pub mod code {
    pub const SUCCESS: u32 = 0;
    pub const INVALID_VALUE: u32 = 1;
    pub const NOT_INITIALIZED: u32 = 3;
    pub const INVALID_DEVICE: u32 = 101;
    pub const INVALID_IMAGE: u32 = 200;
    pub const INVALID_CONTEXT: u32 = 201;
    pub const INVALID_HANDLE: u32 = 400;
    pub const NOT_FOUND: u32 = 500;
    pub const NOT_READY: u32 = 600;
    pub const ILLEGAL_ADDRESS: u32 = 700;
}

/// Handles are numbers from one counter, never reused, never null.
pub type Handle = usize;

pub struct Ctx {
    pub retained: usize,
    /// The sticky fault: every later call on the context returns it.
    pub fault: Option<u32>,
}

/// What a stream runs, in order.
pub enum Cmd {
    /// Host sides are pinned memory here: a copy from or to pageable
    /// memory runs at the call, as the driver's does.
    Copy {
        dst: usize,
        src: usize,
        len: usize,
        dst_device: bool,
        src_device: bool,
    },
    Memset {
        dst: usize,
        value: u8,
        len: usize,
    },
    Kernel {
        name: &'static str,
        args: Vec<u64>,
        threads: u64,
    },
    Record {
        event: Handle,
        generation: u64,
    },
    Wait {
        event: Handle,
        generation: u64,
    },
    Free {
        ptr: usize,
    },
}

pub struct Stream {
    pub ctx: Handle,
    pub queue: VecDeque<Cmd>,
    /// The device memory the command running now touches.
    pub running: Vec<(usize, usize)>,
    pub priority: i32,
    /// Destroyed: its thread ends once its queue is empty.
    pub destroyed: bool,
}

pub struct Event {
    pub ctx: Handle,
    /// Records made (`cuEventRecord` calls) and those their stream reached.
    pub recorded: u64,
    pub completed: u64,
    pub destroyed: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Device,
    Pinned,
}

pub struct Block {
    pub len: usize,
    pub kind: Kind,
    pub freed: bool,
}

pub struct Injection {
    pub call: String,
    pub code: u32,
    pub sticky: bool,
    pub skip: u32,
}

#[derive(Default)]
pub struct State {
    pub initialized: bool,
    pub devices: usize,
    /// The primary context of each device, made at its first retain.
    pub primary: HashMap<usize, Handle>,
    pub contexts: HashMap<Handle, Ctx>,
    pub streams: HashMap<Handle, Stream>,
    pub events: HashMap<Handle, Event>,
    pub memory: BTreeMap<usize, Block>,
    /// Modules and the kernel names each defines; functions by handle.
    pub modules: HashMap<Handle, (Handle, Vec<String>)>,
    pub functions: HashMap<Handle, &'static str>,
    pub violations: Vec<String>,
    pub injections: Vec<Injection>,
    /// Microseconds each copy, memset or kernel takes.
    pub delay_us: u64,
    /// Calls made, by name (those that go through `with`).
    pub calls: HashMap<String, u64>,
    next: Handle,
}

pub struct World {
    pub state: Mutex<State>,
    pub changed: Condvar,
}

pub static WORLD: LazyLock<World> = LazyLock::new(|| {
    let devices =
        std::env::var("DEPENGINE_CUDA_DOUBLE_DEVICES").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let delay_us =
        std::env::var("DEPENGINE_CUDA_DOUBLE_DELAY_US").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    World {
        state: Mutex::new(State { devices, delay_us, next: 0x10, ..State::default() }),
        changed: Condvar::new(),
    }
});

pub fn lock() -> MutexGuard<'static, State> {
    WORLD.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub fn wait(guard: MutexGuard<'static, State>) -> MutexGuard<'static, State> {
    WORLD.changed.wait(guard).unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub fn notify() {
    WORLD.changed.notify_all();
}

thread_local! {
    /// The context current on this thread (0: none).
    pub static CURRENT: Cell<Handle> = const { Cell::new(0) };
}

/// This thread's name, as the OS keeps it (at most 15 bytes on Linux).
/// Not `std::thread::current().name()`: this library has a standard
/// library of its own, which never learns the names that the program's
/// standard library gives its threads.
pub fn thread_name() -> String {
    std::fs::read_to_string("/proc/thread-self/comm")
        .map(|name| name.trim_end().to_owned())
        .unwrap_or_else(|_| "unnamed".to_owned())
}

impl State {
    pub fn handle(&mut self) -> Handle {
        self.next += 0x10;
        self.next
    }

    pub fn violation(&mut self, what: String) {
        self.violations.push(what);
    }

    /// The injected result of this call of `call`, if one was asked for.
    pub fn injected(&mut self, call: &str) -> Option<(u32, bool)> {
        let k = self.injections.iter().position(|i| i.call == call)?;
        if self.injections[k].skip > 0 {
            self.injections[k].skip -= 1;
            return None;
        }
        let i = self.injections.remove(k);
        Some((i.code, i.sticky))
    }

    /// The current context of this thread for `call`: an error (and a
    /// violation) where none is, or where it has a sticky fault.
    pub fn current(&mut self, call: &str) -> Result<Handle, u32> {
        let ctx = CURRENT.with(Cell::get);
        if ctx == 0 || !self.contexts.contains_key(&ctx) {
            self.violation(format!("{call} on thread `{}` with no current context", thread_name()));
            return Err(code::INVALID_CONTEXT);
        }
        self.usable(ctx, call)
    }

    /// `ctx`, unless it has a sticky fault or a fault is injected here.
    pub fn usable(&mut self, ctx: Handle, call: &str) -> Result<Handle, u32> {
        if let Some(fault) = self.contexts.get(&ctx).and_then(|c| c.fault) {
            return Err(fault);
        }
        if let Some((code, sticky)) = self.injected(call) {
            if sticky {
                self.contexts.get_mut(&ctx).expect("checked").fault = Some(code);
            }
            return Err(code);
        }
        Ok(ctx)
    }

    /// A stream for `call`, which must belong to the current context.
    pub fn stream(&mut self, stream: Handle, call: &str) -> Result<Handle, u32> {
        let ctx = self.current(call)?;
        match self.streams.get(&stream) {
            Some(s) if !s.destroyed && s.ctx == ctx => Ok(ctx),
            Some(s) if !s.destroyed => {
                self.violation(format!("{call} on a stream of another context than the current one"));
                Err(code::INVALID_CONTEXT)
            }
            _ => {
                self.violation(format!("{call} on an unknown or destroyed stream {stream:#x}"));
                Err(code::INVALID_HANDLE)
            }
        }
    }

    /// Checks `len` bytes at `ptr` against the allocations: the violation,
    /// if the range is not inside one live block.
    pub fn check_range(&self, ptr: usize, len: usize, kind: Option<Kind>) -> Result<(), String> {
        let Some((&start, block)) = self.memory.range(..=ptr).next_back() else {
            return Err(format!("{ptr:#x} is not memory the driver allocated"));
        };
        if ptr + len > start + block.len {
            return Err(format!("{len} bytes at {ptr:#x} run past a block of {} at {start:#x}", block.len));
        }
        if block.freed {
            return Err(format!("{ptr:#x} was freed"));
        }
        if kind.is_some_and(|k| k != block.kind) {
            return Err(format!("{ptr:#x} is {:?} memory, not {:?}", block.kind, kind.expect("some")));
        }
        Ok(())
    }

    /// Whether `ptr` is pinned host memory of the driver.
    pub fn pinned(&self, ptr: usize, len: usize) -> bool {
        self.check_range(ptr, len, Some(Kind::Pinned)).is_ok()
    }

    /// Whether work still queued or running on a stream other than
    /// `except` touches `block`.
    pub fn touched_elsewhere(&self, start: usize, len: usize, except: Option<Handle>) -> Option<Handle> {
        let overlaps = |(p, n): (usize, usize)| p < start + len && start < p + n;
        self.streams.iter().find_map(|(&h, s)| {
            if Some(h) == except {
                return None;
            }
            let queued = s.queue.iter().flat_map(|c| crate::stream::ranges(c, self)).any(overlaps);
            (queued || s.running.iter().copied().any(overlaps)).then_some(h)
        })
    }

    /// Frees `ptr` (device memory, in stream order when `on` is given).
    pub fn free(&mut self, ptr: usize, on: Option<Handle>, call: &str) {
        let Some(block) = self.memory.get(&ptr) else {
            self.violation(format!("{call} of {ptr:#x}, which the driver did not allocate"));
            return;
        };
        if block.freed {
            self.violation(format!("{call} of {ptr:#x}, freed already"));
            return;
        }
        let len = block.len;
        if let Some(stream) = self.touched_elsewhere(ptr, len, on) {
            self.violation(format!(
                "{call} of {ptr:#x} ({len} bytes) while stream {stream:#x} still has work on it"
            ));
        }
        self.memory.get_mut(&ptr).expect("present").freed = true;
    }

    /// Whether every stream of `ctx` (all contexts: `None`) is idle.
    pub fn idle(&self, ctx: Option<Handle>) -> bool {
        self.streams
            .values()
            .filter(|s| ctx.is_none_or(|c| s.ctx == c))
            .all(|s| s.queue.is_empty() && s.running.is_empty())
    }

    /// Records a blocking call made from an engine thread.
    pub fn blocking(&mut self, call: &str) {
        let name = thread_name();
        if name.starts_with("depengine-") {
            self.violation(format!("{call} blocks engine thread `{name}`"));
        }
    }
}
