//! Asking the CPU to fetch memory ahead of use, with intent to write.
//!
//! An op record is rebuilt by the pushing thread in memory that a worker
//! wrote last. Touched one line at a time, each line is a cross-core round
//! trip that the next atomic instruction waits for; asked for at once, and
//! a push ahead, the lines travel while the pusher does other work.
//!
//! Why `unsafe`: the prefetch instruction is an intrinsic. Measured:
//! PERFORMANCE.md, *Records rebuilt where they are, fetched ahead*.

#![allow(unsafe_code)]

/// Asks for the cache lines of `bytes` bytes at `ptr` in a writable state.
/// A hint: it never faults and has no effect on what the program computes
/// (none at all under Miri, which runs no inline assembly).
#[inline]
pub(crate) fn for_write(ptr: *const u8, bytes: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        const LINE: usize = 64;
        let skip = ptr as usize % LINE;
        let mut line = ptr.wrapping_sub(skip);
        let mut left = bytes + skip;
        while left > 0 {
            // SAFETY: `prefetchw` only hints the cache: it does not fault on
            // any address, and changes no register, flag or memory contents
            // (on processors without it, the opcode is a no-op).
            unsafe {
                core::arch::asm!("prefetchw [{0}]", in(reg) line, options(nostack, preserves_flags, readonly));
            }
            line = line.wrapping_add(LINE);
            left = left.saturating_sub(LINE);
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = (ptr, bytes);
}
