//! The guard that no engine thread blocks on the GPU: GPU workers and
//! pollers mark themselves, and every blocking call of the device layer
//! checks the mark first. In debug builds a marked thread that would block
//! panics (an op body doing it fails with that panic); release builds do
//! not check. CPU workers carry a mark of their own: the engine keeps its
//! own blocking calls (freeing page-locked memory) off them too, but a CPU
//! op's body may make such calls.
//!
//! Page-locked memory dropped on an engine thread (`cuMemFreeHost` may
//! synchronize the device) is freed by one thread of its own, made on
//! first use, which drops what it is sent.

use std::cell::Cell;

thread_local! {
    static ENGINE_GPU_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread as one that must never block on the GPU (and as one
/// of the engine's own).
pub(crate) fn mark_engine_thread() {
    ENGINE_GPU_THREAD.with(|m| m.set(true));
    crate::may_block::mark_engine_thread();
}

/// Whether this thread is a GPU worker or a poller, or any thread of the
/// engine's own: where the engine makes none of its own blocking calls.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn is_engine_thread() -> bool {
    crate::may_block::is_engine_thread()
}

/// Panics, in a debug build, if this thread is a GPU worker or a poller:
/// `what` would block it on the GPU.
pub(crate) fn check(what: &str) {
    if cfg!(debug_assertions) && ENGINE_GPU_THREAD.with(Cell::get) {
        panic!("{what} would block an engine thread on the GPU: GPU work completes by polled events");
    }
}

/// Runs `free` on the thread that frees page-locked memory; on this
/// thread where the OS gives none.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn run_off_engine_threads(free: Box<dyn FnOnce() + Send>) {
    type Sender = std::sync::mpsc::Sender<Box<dyn FnOnce() + Send>>;
    static FREER: std::sync::OnceLock<Option<std::sync::Mutex<Sender>>> = std::sync::OnceLock::new();
    let freer = FREER.get_or_init(|| {
        let (send, receive) = std::sync::mpsc::channel::<Box<dyn FnOnce() + Send>>();
        let thread = std::thread::Builder::new().name("gpu-host-free".to_owned());
        let run = move || receive.into_iter().for_each(|free| free());
        thread.spawn(run).ok().map(|_| std::sync::Mutex::new(send))
    });
    let refused = match freer {
        Some(send) => send.lock().unwrap_or_else(|e| e.into_inner()).send(free).err().map(|e| e.0),
        None => Some(free),
    };
    if let Some(free) = refused {
        free();
    }
}
