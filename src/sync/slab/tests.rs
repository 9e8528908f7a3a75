//! The slab under Miri too (CI): slots are aligned, disjoint while live,
//! reused by their class after a free, cross threads, and go back to the
//! allocator only as whole chunks of free slots.

use std::alloc::Layout;
use std::collections::HashSet;
use std::ptr::NonNull;

use super::*;

/// A slot sent to another thread.
struct Sent(NonNull<u8>);

// SAFETY: a test's slot, used by one thread at a time.
unsafe impl Send for Sent {}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 64).unwrap()
}

/// Fills a slot with `byte` and reads it back (Miri checks the access is
/// in bounds of live memory).
fn scribble(slot: NonNull<u8>, size: usize, byte: u8) {
    // SAFETY: a live slot of at least `size` bytes.
    unsafe {
        slot.as_ptr().write_bytes(byte, size);
        assert_eq!(*slot.as_ptr().add(size - 1), byte);
    }
}

#[test]
fn layouts_map_to_classes_of_whole_cache_lines() {
    assert_eq!(SizeClass::of(layout(1)).slot_size(), Some(64));
    assert_eq!(SizeClass::of(layout(64)).slot_size(), Some(64));
    assert_eq!(SizeClass::of(layout(65)).slot_size(), Some(128));
    assert_eq!(SizeClass::of(layout(1024)).slot_size(), Some(1024));
    assert_eq!(SizeClass::of(layout(1025)).slot_size(), None);
    let over_aligned = Layout::from_size_align(64, 128).unwrap();
    assert_eq!(SizeClass::of(over_aligned).slot_size(), None);
}

#[test]
fn a_slot_is_aligned_whole_and_reused_after_its_free() {
    let l = layout(128);
    let a = alloc(l);
    assert_eq!(a.as_ptr() as usize % SLOT_ALIGN, 0);
    scribble(a, 128, 0xA5);
    // SAFETY: from `alloc` with `l`, not used again.
    unsafe { free(a, l) };
    let b = alloc(l);
    assert_eq!(a, b, "the thread's magazine hands its last free slot back first");
    scribble(b, 128, 0x5A);
    // SAFETY: as above.
    unsafe { free(b, l) };
}

#[test]
fn live_slots_never_overlap_and_cross_threads() {
    let l = layout(192);
    let n = if cfg!(miri) { 80 } else { 1_000 };
    let slots: Vec<Sent> = (0..n)
        .map(|k| {
            let s = alloc(l);
            scribble(s, 192, k as u8);
            Sent(s)
        })
        .collect();
    let distinct: HashSet<NonNull<u8>> = slots.iter().map(|s| s.0).collect();
    assert_eq!(distinct.len(), n);
    let mut sorted: Vec<usize> = slots.iter().map(|s| s.0.as_ptr().addr()).collect();
    sorted.sort_unstable();
    assert!(sorted.windows(2).all(|w| w[1] - w[0] >= 192), "slots overlap");
    // Freed by another thread: its magazines take them, and give them to
    // the depot as it ends.
    std::thread::spawn(move || {
        let slots = slots;
        for s in slots {
            // SAFETY: each came from `alloc` with `l` and is not used again.
            unsafe { free(s.0, l) };
        }
    })
    .join()
    .unwrap();
    let again: Vec<NonNull<u8>> = (0..n).map(|_| alloc(l)).collect();
    for s in again {
        scribble(s, 192, 1);
        // SAFETY: as above.
        unsafe { free(s, l) };
    }
}

#[test]
fn a_large_record_comes_from_the_allocator() {
    let l = layout(4096);
    let s = alloc(l);
    scribble(s, 4096, 7);
    // SAFETY: from `alloc` with `l`.
    unsafe { free(s, l) };
}

#[test]
fn only_chunks_whose_every_slot_is_free_go_back() {
    // A class no other test uses (896 bytes), on a thread of its own.
    let l = layout(896);
    let class = SizeClass::of(l).index().unwrap();
    let before = chunks_of(class);
    let held = std::thread::spawn(move || {
        let slots: Vec<NonNull<u8>> = (0..2 * MAGAZINE).map(|_| alloc(l)).collect();
        for s in &slots[1..] {
            // SAFETY: from `alloc` with `l`, not used again.
            unsafe { free(*s, l) };
        }
        Sent(slots[0])
    })
    .join()
    .unwrap();
    assert_eq!(chunks_of(class), before + 2);
    // One slot of one chunk is still held: that chunk stays.
    assert_eq!(trim_class(class, 0), 1);
    assert_eq!(chunks_of(class), before + 1);
    scribble(held.0, 896, 3);
    // SAFETY: the held slot, from `alloc` with `l`.
    std::thread::spawn(move || {
        let held = held;
        // SAFETY: as above.
        unsafe { free(held.0, l) }
    })
    .join()
    .unwrap();
    assert_eq!(trim_class(class, 0), 1);
    assert_eq!(chunks_of(class), before);
    assert!(chunks() >= before);
}

/// An idle look trims once per quiet spell, after `IDLE_RETURN` without a
/// magazine taken; a magazine taken starts a new spell.
#[test]
fn an_idle_slab_is_trimmed_once_per_quiet_spell() {
    let t0 = std::time::Instant::now();
    let mut quiet = None;
    assert_eq!(look(&mut quiet, 7, t0), Look::Quiet, "the first look starts a spell");
    assert_eq!(look(&mut quiet, 7, t0 + IDLE_RETURN / 2), Look::Quiet);
    assert_eq!(look(&mut quiet, 8, t0 + IDLE_RETURN), Look::Quiet, "a magazine taken: a new spell");
    assert_eq!(look(&mut quiet, 8, t0 + IDLE_RETURN * 3 / 2), Look::Quiet);
    assert_eq!(look(&mut quiet, 8, t0 + IDLE_RETURN * 2), Look::Trim);
    assert_eq!(look(&mut quiet, 8, t0 + IDLE_RETURN * 3), Look::Trimmed, "once per spell");
    assert_eq!(look(&mut quiet, 9, t0 + IDLE_RETURN * 4), Look::Quiet);
    assert_eq!(look(&mut quiet, 9, t0 + IDLE_RETURN * 5), Look::Trim);
}
