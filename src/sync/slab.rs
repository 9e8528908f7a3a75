//! The memory of op records: slots in size classes of 64 bytes up to 1 KiB
//! (larger records come from the allocator), each slot aligned to a cache
//! line so that a record's header is one line.
//!
//! Slots are carved from chunks of [`MAGAZINE`] slots of one class. Free
//! slots travel in magazines: each thread keeps two per class (a loaded
//! one it takes from and gives to, and the one before), so that a push and
//! a completion on the same thread take and give back a slot with no
//! atomic operation; a thread whose magazines are both full or both empty
//! trades a whole magazine with the depot, under its lock, once per
//! [`MAGAZINE`] slots (Bonwick's magazines). A thread's first takes of a
//! class are small (1, 2, 4… slots, up to a magazine), so that a thread
//! that pushes a few ops and then idles holds about as many free slots as
//! it took. Any record whose layout falls
//! in a class reuses a slot of that class, whatever its body.
//!
//! A slot's memory goes back to the allocator only with its whole chunk,
//! and only when [`trim`] finds every slot of the chunk in the depot's
//! magazines: a slot there is free, reachable by no record reference. So
//! the memory a `TaskRef` points to is never handed back under it.
//!
//! An engine that goes idle gives memory back through [`idle`]: once no
//! thread has taken a magazine from the depot for [`IDLE_RETURN`], the
//! depot keeps [`IDLE_KEEP`] magazines per class and trims the rest.
//!
//! Why `unsafe`: the slab hands out raw memory, which the op records
//! (`op::task_ref`) initialise and drop in place. Measured: PERFORMANCE.md,
//! *The lean record*; checked by Miri (`slab/tests.rs`).

#![allow(unsafe_code)]

use std::alloc::Layout;
use std::cell::RefCell;
use std::ptr::NonNull;
// The depot is a static shared by every engine of the process: std's lock
// (a static cannot hold loom's), which no model reaches.
use std::sync::Mutex;

/// A slot's alignment: a cache line.
pub(crate) const SLOT_ALIGN: usize = 64;
/// Size classes: 64, 128, … 1,024 bytes.
pub(crate) const CLASSES: usize = 16;
/// The largest slot.
pub(crate) const MAX_SLOT: usize = CLASSES * SLOT_ALIGN;
/// Slots per magazine, and per chunk.
pub(crate) const MAGAZINE: usize = 32;

/// Where a layout's memory comes from: a slab class, or the allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SizeClass(u8);

const HEAP: u8 = u8::MAX;

impl SizeClass {
    /// The class of `layout` (a `const fn`, for a record's static vtable).
    pub(crate) const fn of(layout: Layout) -> Self {
        if layout.align() > SLOT_ALIGN || layout.size() > MAX_SLOT {
            return Self(HEAP);
        }
        let size = if layout.size() == 0 { 1 } else { layout.size() };
        Self((size.div_ceil(SLOT_ALIGN) - 1) as u8)
    }

    /// A slot's size in this class; `None` for the allocator's.
    pub(crate) const fn slot_size(self) -> Option<usize> {
        if self.0 == HEAP { None } else { Some((self.0 as usize + 1) * SLOT_ALIGN) }
    }

    fn index(self) -> Option<usize> {
        (self.0 != HEAP).then_some(self.0 as usize)
    }
}

/// Free slots of one class, owned by whoever holds the magazine.
struct Magazine(Vec<NonNull<u8>>);

// SAFETY: a magazine holds free memory and nothing else: no other thread
// reaches it while one holds the magazine, so it may move between threads.
unsafe impl Send for Magazine {}

impl Magazine {
    /// An empty magazine with room for [`MAGAZINE`] slots.
    fn empty() -> Self {
        Self(Vec::with_capacity(MAGAZINE))
    }

    /// An empty magazine that allocates nothing until it is given a slot
    /// (a thread's, before it frees a record).
    const fn none() -> Self {
        Self(Vec::new())
    }

    fn is_full(&self) -> bool {
        self.0.len() >= MAGAZINE
    }
}

/// A chunk: `MAGAZINE` slots of one class in one allocation.
struct Chunk {
    base: NonNull<u8>,
    class: usize,
}

// SAFETY: the depot's record of an allocation it owns; nothing reaches the
// memory through it but `trim`, under the depot's lock.
unsafe impl Send for Chunk {}

impl Chunk {
    fn layout(class: usize) -> Layout {
        let slot = SizeClass(class as u8).slot_size().expect("a slab class");
        Layout::from_size_align(slot * MAGAZINE, SLOT_ALIGN).expect("a chunk's layout")
    }

    fn holds(&self, slot: NonNull<u8>) -> bool {
        let (base, slot) = (self.base.as_ptr().addr(), slot.as_ptr().addr());
        slot >= base && slot < base + Self::layout(self.class).size()
    }
}

/// Full magazines the depot keeps per class once the slab has gone idle
/// ([`idle`]): enough for a trickle of pushes, little memory.
pub(crate) const IDLE_KEEP: usize = 2;

/// How long no thread may have taken a magazine from the depot before
/// [`idle`] trims it: long enough that an engine used in bursts keeps its
/// memory from one burst to the next.
pub(crate) const IDLE_RETURN: std::time::Duration = std::time::Duration::from_secs(1);

/// What the threads share: magazines of free slots, and the chunks.
struct Depot {
    full: [Vec<Magazine>; CLASSES],
    /// Every chunk allocated and not yet given back, by base address.
    chunks: Vec<Chunk>,
    /// Magazines taken so far: how [`idle`] tells a quiet slab.
    taken: u64,
    /// What the last look of [`idle`] saw.
    quiet: Option<Quiet>,
}

/// `Depot::taken` at the last look of [`idle`], since when it has not
/// changed, and whether the depot was trimmed since.
#[derive(Clone, Copy)]
struct Quiet {
    taken: u64,
    since: std::time::Instant,
    trimmed: bool,
}

static DEPOT: Mutex<Depot> =
    Mutex::new(Depot { full: [const { Vec::new() }; CLASSES], chunks: Vec::new(), taken: 0, quiet: None });

fn depot() -> std::sync::MutexGuard<'static, Depot> {
    DEPOT.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Depot {
    /// A magazine of at most `want` free slots of `class` (at least one):
    /// one given back, else a new chunk's; what is left of either stays.
    fn take(&mut self, class: usize, want: usize) -> Magazine {
        self.taken += 1;
        if let Some(mut magazine) = self.full[class].pop() {
            if magazine.0.len() > want {
                let rest = magazine.0.split_off(want);
                self.full[class].push(Magazine(rest));
            }
            return magazine;
        }
        let layout = Chunk::layout(class);
        // SAFETY: the layout's size is above zero.
        let base = unsafe { std::alloc::alloc(layout) };
        let Some(base) = NonNull::new(base) else { std::alloc::handle_alloc_error(layout) };
        let at = self.chunks.partition_point(|c| c.base < base);
        self.chunks.insert(at, Chunk { base, class });
        let slot = layout.size() / MAGAZINE;
        // SAFETY: each offset is within the chunk just allocated.
        let mut slots: Vec<NonNull<u8>> = (0..MAGAZINE).map(|k| unsafe { base.add(k * slot) }).collect();
        // The caller takes what it wants; the rest waits in the depot.
        let rest = slots.split_off(want.clamp(1, MAGAZINE));
        if !rest.is_empty() {
            self.full[class].push(Magazine(rest));
        }
        Magazine(slots)
    }
}

/// A thread's magazines, two per class.
struct Cache {
    loaded: [Magazine; CLASSES],
    previous: [Magazine; CLASSES],
    /// Refills from the depot so far, per class (saturating): the size of
    /// the next ([`Cache::want`]).
    refills: [u8; CLASSES],
}

impl Cache {
    const fn new() -> Self {
        Self {
            loaded: [const { Magazine::none() }; CLASSES],
            previous: [const { Magazine::none() }; CLASSES],
            refills: [0; CLASSES],
        }
    }

    /// Slots the next refill of `class` takes: 1, 2, 4… then a magazine.
    fn want(&mut self, class: usize) -> usize {
        let n = self.refills[class];
        self.refills[class] = n.saturating_add(1);
        1usize.checked_shl(n.into()).unwrap_or(MAGAZINE).min(MAGAZINE)
    }

    /// A slot from the loaded magazine: the common case, inlined.
    #[inline]
    fn take(&mut self, class: usize) -> NonNull<u8> {
        match self.loaded[class].0.pop() {
            Some(slot) => slot,
            None => self.refill(class),
        }
    }

    /// The loaded magazine is empty: the one before, else the depot's.
    #[cold]
    #[inline(never)]
    fn refill(&mut self, class: usize) -> NonNull<u8> {
        if self.previous[class].0.is_empty() {
            let want = self.want(class);
            self.loaded[class] = depot().take(class, want);
        } else {
            std::mem::swap(&mut self.loaded[class], &mut self.previous[class]);
        }
        self.loaded[class].0.pop().expect("a magazine with slots")
    }

    /// A slot into the loaded magazine: the common case, inlined.
    #[inline]
    fn give(&mut self, class: usize, slot: NonNull<u8>) {
        let loaded = &mut self.loaded[class].0;
        if loaded.len() < MAGAZINE && loaded.len() < loaded.capacity() {
            loaded.push(slot);
        } else {
            self.give_slow(class, slot);
        }
    }

    /// The loaded magazine is full (or has no room yet): the one before
    /// takes its place, the full one going to the depot.
    #[cold]
    #[inline(never)]
    fn give_slow(&mut self, class: usize, slot: NonNull<u8>) {
        if self.loaded[class].is_full() {
            if self.previous[class].is_full() {
                let full = std::mem::replace(&mut self.previous[class], Magazine::empty());
                depot().full[class].push(full);
            }
            std::mem::swap(&mut self.loaded[class], &mut self.previous[class]);
        }
        let loaded = &mut self.loaded[class].0;
        loaded.reserve_exact(MAGAZINE - loaded.len());
        loaded.push(slot);
    }
}

/// A thread that ends gives its free slots back to the depot.
impl Drop for Cache {
    fn drop(&mut self) {
        let mut depot = depot();
        for class in 0..CLASSES {
            for magazine in [&mut self.loaded[class], &mut self.previous[class]] {
                let magazine = std::mem::replace(magazine, Magazine(Vec::new()));
                if !magazine.0.is_empty() {
                    depot.full[class].push(magazine);
                }
            }
        }
    }
}

thread_local! {
    static CACHE: RefCell<Cache> = const { RefCell::new(Cache::new()) };
}

/// Memory for a record of `layout`: a slot of its class, or the
/// allocator's for a larger one. Never null; aborts as the allocator does
/// when memory runs out. Inlined, so that a record type's class is a
/// constant.
#[inline]
pub(crate) fn alloc(layout: Layout) -> NonNull<u8> {
    let Some(class) = SizeClass::of(layout).index() else {
        return alloc_large(layout);
    };
    match CACHE.try_with(|cache| cache.borrow_mut().take(class)) {
        Ok(slot) => slot,
        Err(_) => alloc_ending(class),
    }
}

/// A record larger than the largest slot: the allocator's.
#[cold]
fn alloc_large(layout: Layout) -> NonNull<u8> {
    // SAFETY: a record's layout has a size above zero (its header).
    let p = unsafe { std::alloc::alloc(layout) };
    NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout))
}

/// A thread whose cache is gone (it is ending) takes from the depot.
#[cold]
fn alloc_ending(class: usize) -> NonNull<u8> {
    depot().take(class, 1).0.pop().expect("a new magazine has slots")
}

/// Gives back the memory of a record of `layout`.
///
/// # Safety
///
/// `slot` came from [`alloc`] with the same `layout`, its record is
/// dropped, and nothing reaches it any more.
#[inline]
pub(crate) unsafe fn free(slot: NonNull<u8>, layout: Layout) {
    let Some(class) = SizeClass::of(layout).index() else {
        // SAFETY: the allocator's memory of this layout (the contract).
        unsafe { std::alloc::dealloc(slot.as_ptr(), layout) };
        return;
    };
    if CACHE.try_with(|cache| cache.borrow_mut().give(class, slot)).is_err() {
        free_ending(class, slot);
    }
}

/// A thread whose cache is gone (it is ending) gives to the depot.
#[cold]
fn free_ending(class: usize, slot: NonNull<u8>) {
    depot().full[class].push(Magazine(vec![slot]));
}

/// Gives back to the allocator every chunk all of whose slots wait in the
/// depot, keeping up to `keep` magazines of each class there; returns the
/// chunks given back. For an engine gone idle: the slots in threads'
/// magazines stay theirs.
pub(crate) fn trim(keep: usize) -> usize {
    (0..CLASSES).map(|class| trim_class(class, keep)).sum()
}

/// [`trim`] for one class.
fn trim_class(class: usize, keep: usize) -> usize {
    let mut depot = depot();
    if depot.full[class].len() <= keep {
        return 0;
    }
    let mut slots: Vec<NonNull<u8>> = depot.full[class].drain(keep..).flat_map(|m| m.0).collect();
    slots.sort_unstable();
    let (mut kept, mut freed, mut at) = (Vec::with_capacity(slots.len()), 0, 0);
    while at < slots.len() {
        let first = slots[at];
        let chunk = depot.chunks.partition_point(|c| c.base <= first).checked_sub(1);
        let Some(k) = chunk.filter(|&k| depot.chunks[k].holds(first) && depot.chunks[k].class == class)
        else {
            kept.push(slots[at]);
            at += 1;
            continue;
        };
        let run = slots[at..].iter().take_while(|&&s| depot.chunks[k].holds(s)).count();
        if run == MAGAZINE {
            let gone = depot.chunks.remove(k);
            // SAFETY: every slot of the chunk is free (it is in the depot,
            // sorted, all `MAGAZINE` of them), so no record is in it: the
            // chunk is the allocator's again.
            unsafe { std::alloc::dealloc(gone.base.as_ptr(), Chunk::layout(class)) };
            freed += 1;
        } else {
            kept.extend_from_slice(&slots[at..at + run]);
        }
        at += run;
    }
    for magazine in kept.chunks(MAGAZINE) {
        depot.full[class].push(Magazine(magazine.to_vec()));
    }
    freed
}

/// Called now and then by a worker with nothing to do: once no thread has
/// taken a magazine from the depot for [`IDLE_RETURN`], trims it to
/// [`IDLE_KEEP`] magazines per class (once per quiet spell). Whether to
/// ask again later: the depot holds more than that, untrimmed.
pub(crate) fn idle() -> bool {
    let mut depot = depot();
    let taken = depot.taken;
    match look(&mut depot.quiet, taken, std::time::Instant::now()) {
        Look::Trimmed => false,
        Look::Quiet => depot.full.iter().any(|magazines| magazines.len() > IDLE_KEEP),
        Look::Trim => {
            drop(depot);
            trim(IDLE_KEEP);
            false
        }
    }
}

/// What [`idle`] finds.
#[derive(Debug, PartialEq, Eq)]
enum Look {
    /// Not quiet for long enough yet.
    Quiet,
    /// Quiet for long enough: to be trimmed (marked trimmed).
    Trim,
    /// Trimmed in this quiet spell already.
    Trimmed,
}

/// The look of [`idle`] at `now`, with `taken` magazines taken so far and
/// `quiet` what the last look saw (updated).
fn look(quiet: &mut Option<Quiet>, taken: u64, now: std::time::Instant) -> Look {
    match quiet {
        Some(q) if q.taken == taken && q.trimmed => Look::Trimmed,
        Some(q) if q.taken == taken && now.duration_since(q.since) >= IDLE_RETURN => {
            q.trimmed = true;
            Look::Trim
        }
        Some(q) if q.taken == taken => Look::Quiet,
        _ => {
            *quiet = Some(Quiet { taken, since: now, trimmed: false });
            Look::Quiet
        }
    }
}

/// Chunks allocated and not given back, of every class.
#[cfg(test)]
pub(crate) fn chunks() -> usize {
    depot().chunks.len()
}

/// Chunks of `class` allocated and not given back.
#[cfg(test)]
fn chunks_of(class: usize) -> usize {
    depot().chunks.iter().filter(|c| c.class == class).count()
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;
