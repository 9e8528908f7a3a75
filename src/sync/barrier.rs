//! Asymmetric fences: a *light* barrier for a path taken on every op, and a
//! *heavy* one for a path taken rarely, which together order memory as a
//! pair of sequentially consistent fences does.
//!
//! The store-buffering handshake (each side writes, then reads what the
//! other wrote; at least one must see the other's write) needs a full fence
//! on both sides. A full fence on the path of every push waits until the
//! push's stores have left the core, a cross-core round trip per op. With
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` the rare side pays for
//! both: the kernel makes every running thread of the process pass a full
//! barrier before the call returns, so the frequent side needs only a
//! compiler fence (that its accesses are issued in program order). This is
//! folly's `asymmetricLightBarrier` / `asymmetricHeavyBarrier` pair.
//!
//! Why the pair works, for a light side that writes `a` then reads `b`
//! and a heavy side that writes `b`, calls the heavy barrier, then reads
//! `a`: the light side's thread passes a full barrier at some point during
//! the heavy call. If its read of `b` comes after that point, it comes
//! after the heavy side's write of `b` (which precedes the call) and sees
//! it. Otherwise its write of `a`, which precedes the read in program
//! order, came before that point, was visible to all before the call
//! returned, and the heavy side's read sees it.
//!
//! Where the kernel lacks the command (or refuses it), the light barrier
//! is a full fence: the same handshake, paid on both sides. Under loom and
//! Miri both barriers are full fences: the models check the handshake with
//! the pair's guarantee, which is what either realisation gives.

use crate::sync::atomic::{Ordering, fence};

/// The two barriers of a handshake. All handshakes of a process use the
/// same mode: the kernel's registration is per process.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Barriers {
    /// The heavy barrier is the kernel's, and the light one a compiler fence.
    asymmetric: bool,
}

impl Barriers {
    /// The barriers of this process: asymmetric where the kernel offers
    /// them (registered on first use).
    pub(crate) fn new() -> Self {
        Self { asymmetric: kernel::registered() }
    }

    /// A full fence on each side, whatever the kernel offers.
    #[cfg(all(test, not(depengine_loom)))]
    pub(crate) fn symmetric() -> Self {
        Self { asymmetric: false }
    }

    /// Whether the heavy barrier is the kernel's.
    #[cfg(all(test, not(depengine_loom)))]
    pub(crate) fn is_asymmetric(self) -> bool {
        self.asymmetric
    }

    /// The frequent side's barrier, between its write and its read.
    #[inline]
    pub(crate) fn light(self) {
        if self.asymmetric {
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
    }

    /// The rare side's barrier, between its write and its read.
    pub(crate) fn heavy(self) {
        fence(Ordering::SeqCst);
        if self.asymmetric {
            kernel::barrier();
        }
    }
}

#[cfg(all(target_os = "linux", not(depengine_loom), not(miri)))]
mod kernel {
    use std::sync::OnceLock;

    use rustix::thread::{MembarrierCommand, MembarrierQuery, membarrier, membarrier_query};

    /// Registers the process for private expedited barriers, once; whether
    /// they can be used.
    pub(super) fn registered() -> bool {
        static REGISTERED: OnceLock<bool> = OnceLock::new();
        *REGISTERED.get_or_init(|| {
            let needed = MembarrierQuery::PRIVATE_EXPEDITED | MembarrierQuery::REGISTER_PRIVATE_EXPEDITED;
            membarrier_query().contains(needed)
                && membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok()
        })
    }

    /// A full barrier on every running thread of the process.
    pub(super) fn barrier() {
        // Once the process is registered, the kernel refuses the command
        // for no reason but a missing registration.
        membarrier(MembarrierCommand::PrivateExpedited)
            .expect("membarrier(PRIVATE_EXPEDITED) failed although the process is registered");
    }
}

#[cfg(not(all(target_os = "linux", not(depengine_loom), not(miri))))]
mod kernel {
    pub(super) fn registered() -> bool {
        false
    }

    pub(super) fn barrier() {
        unreachable!("no asymmetric barriers on this platform")
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;
