//! Recycling the large buffers a request frees, away from malloc's arenas.
//!
//! With glibc's mmap threshold fixed at [`MIN_BYTES`] (see `memory.rs`),
//! buffers of 32 KiB and more (request bodies, decoded tool outputs, hyper's
//! read buffers) get their own mapping (unless free space in an arena
//! already fits them) and leave nothing behind in the arenas when freed: the
//! heap stops fragmenting and RSS stays flat. But a fresh mapping is paid
//! for again page by page: a request carrying a 1 MB tool output touches
//! three to four MB of new pages, and on this machine the faults cost about
//! 2 ms per such request.
//!
//! Every recycled buffer is allocated from the system at its class size and
//! [`SYSTEM_ALIGN`], whatever the request's own (smaller) alignment, so a
//! buffer can serve any request of its class and goes back to the system
//! with the layout it came with. A `realloc` that crosses a class boundary
//! allocates and copies (glibc would `mremap` a mapped chunk): a growing
//! `Vec` (which doubles its capacity) is copied once per doubling, as it
//! would be in an arena, which costs far less than the faults it saves.
//!
//! [`LargeBuffers`] keeps freed large buffers, by size class, for the next
//! request to reuse (their pages are already resident), up to
//! [`MAX_CACHED_BYTES`] in all, and gives back whatever sat unused for a
//! whole trim period ([`LargeBuffers::release_idle`], called by the memory
//! trimmer). Small allocations go straight to the system allocator, so
//! nothing small is ever placed between them: the cache can hold at most its
//! cap, and holds nothing once traffic stops.
//!
//! Only the binary installs it ([`Recycling`], in `main.rs`); the library's
//! tests and benchmarks run on the system allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

/// The smallest buffer recycled: the mmap threshold `memory.rs` sets.
pub const MIN_BYTES: usize = super::memory::MMAP_THRESHOLD;
/// The largest buffer recycled; larger ones are rare and go to the system.
pub const MAX_BYTES: usize = 16 * 1024 * 1024;
/// The most the cache holds, all classes together.
pub const MAX_CACHED_BYTES: usize = 24 * 1024 * 1024;
/// Buffers kept per size class.
const SLOTS: usize = 16;
/// Size classes per power of two (a buffer is at most 25% larger than asked).
const STEPS: usize = 4;
/// Powers of two from [`MIN_BYTES`] to [`MAX_BYTES`].
const CLASSES: usize =
    STEPS * (MAX_BYTES.trailing_zeros() - MIN_BYTES.trailing_zeros()) as usize + 1;
/// The alignment every recycled buffer is allocated with (and so the most a
/// request may ask for to be recycled): glibc's malloc alignment on 64-bit.
pub const SYSTEM_ALIGN: usize = 16;
const _: () = assert!(SYSTEM_ALIGN <= MIN_BYTES && SYSTEM_ALIGN.is_power_of_two());

/// The layout a buffer of a class is allocated and freed with.
fn system_layout(size: usize) -> Layout {
    // SAFETY: `size` is a class size (at most MAX_BYTES, far below
    // isize::MAX) and SYSTEM_ALIGN is a power of two.
    unsafe { Layout::from_size_align_unchecked(size, SYSTEM_ALIGN) }
}

/// The size class of `size` bytes: (index, the size actually allocated).
fn class_of(size: usize) -> Option<(usize, usize)> {
    if !(MIN_BYTES..=MAX_BYTES).contains(&size) {
        return None;
    }
    // 2^p < size <= 2^(p+1), cut into STEPS classes of 2^p / STEPS bytes;
    // the class is the k-th step (1..=STEPS) above 2^p (exact powers of two
    // are the last class of the range below them, MIN_BYTES is class 0).
    let p = (usize::BITS - 1 - (size - 1).leading_zeros()) as usize;
    let step = (1usize << p) / STEPS;
    let rounded = size.div_ceil(step) * step;
    let k = (rounded - (1 << p)) / step;
    let index = (p + 1 - MIN_BYTES.trailing_zeros() as usize) * STEPS + k - STEPS;
    Some((index, rounded))
}

/// Whether an allocation of this layout is recycled (and so allocated at
/// its class size).
fn recycled(layout: Layout) -> Option<(usize, usize)> {
    if layout.align() > SYSTEM_ALIGN {
        return None;
    }
    class_of(layout.size())
}

struct Class {
    /// Freed buffers, oldest first.
    slots: [usize; SLOTS],
    len: usize,
    /// The fewest buffers held since the last [`LargeBuffers::release_idle`]:
    /// that many sat unused for a whole period.
    low_water: usize,
}

struct Cache {
    classes: [Class; CLASSES],
}

/// The cache of freed large buffers (see the module documentation).
pub struct LargeBuffers {
    cache: Mutex<Cache>,
    /// Bytes held, all classes together (read without the lock by gauges).
    cached_bytes: AtomicUsize,
}

impl Default for LargeBuffers {
    fn default() -> Self {
        LargeBuffers::new()
    }
}

impl LargeBuffers {
    pub const fn new() -> LargeBuffers {
        const EMPTY: Class = Class {
            slots: [0; SLOTS],
            len: 0,
            low_water: 0,
        };
        LargeBuffers {
            cache: Mutex::new(Cache {
                classes: [EMPTY; CLASSES],
            }),
            cached_bytes: AtomicUsize::new(0),
        }
    }

    /// Bytes held for reuse.
    pub fn cached_bytes(&self) -> usize {
        self.cached_bytes.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        // Nothing under the lock can panic; a poisoned lock is still consistent.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn take(&self, index: usize, size: usize) -> Option<*mut u8> {
        let mut cache = self.lock();
        let class = &mut cache.classes[index];
        if class.len == 0 {
            return None;
        }
        class.len -= 1;
        class.low_water = class.low_water.min(class.len);
        let ptr = class.slots[class.len] as *mut u8;
        self.cached_bytes.fetch_sub(size, Ordering::Relaxed);
        Some(ptr)
    }

    /// Keeps `ptr` if there is room; `false` if the caller must free it.
    fn keep(&self, index: usize, size: usize, ptr: *mut u8) -> bool {
        let mut cache = self.lock();
        let class = &mut cache.classes[index];
        if class.len == SLOTS || self.cached_bytes() + size > MAX_CACHED_BYTES {
            return false;
        }
        class.slots[class.len] = ptr as usize;
        class.len += 1;
        self.cached_bytes.fetch_add(size, Ordering::Relaxed);
        true
    }

    /// Gives back to the system every buffer that sat unused since the last
    /// call (the oldest of each class); returns the bytes given back.
    pub fn release_idle(&self) -> usize {
        // Collected on the stack: allocating under the lock could call
        // back into this cache and wait on the lock it holds.
        let mut idle = [(0usize, 0usize); CLASSES * SLOTS];
        let mut count = 0;
        {
            let mut cache = self.lock();
            for (index, class) in cache.classes.iter_mut().enumerate() {
                let n = class.low_water;
                if n > 0 {
                    let size = class_size(index);
                    for &ptr in &class.slots[..n] {
                        idle[count] = (ptr, size);
                        count += 1;
                    }
                    class.slots.copy_within(n..class.len, 0);
                    class.len -= n;
                }
                class.low_water = class.len;
            }
        }
        let mut released = 0;
        for &(ptr, size) in &idle[..count] {
            self.cached_bytes.fetch_sub(size, Ordering::Relaxed);
            released += size;
            // SAFETY: the buffer came from `System.alloc` with this layout
            // (class size, system alignment) and has left the cache.
            unsafe { System.dealloc(ptr as *mut u8, system_layout(size)) };
        }
        released
    }

    /// [`GlobalAlloc::alloc`] over the system allocator.
    ///
    /// # Safety
    /// As [`GlobalAlloc::alloc`].
    pub unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match recycled(layout) {
            Some((index, size)) => match self.take(index, size) {
                Some(ptr) => ptr,
                // SAFETY: a valid, non-zero layout.
                None => unsafe { System.alloc(system_layout(size)) },
            },
            // SAFETY: the caller's layout, as GlobalAlloc requires.
            None => unsafe { System.alloc(layout) },
        }
    }

    /// [`GlobalAlloc::alloc_zeroed`]: a reused buffer is cleared here; a new
    /// one comes zeroed from the system (fresh mappings need no clearing).
    ///
    /// # Safety
    /// As [`GlobalAlloc::alloc_zeroed`].
    pub unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match recycled(layout) {
            Some((index, size)) => match self.take(index, size) {
                Some(ptr) => {
                    // SAFETY: the buffer is at least `layout.size()` bytes.
                    unsafe { std::ptr::write_bytes(ptr, 0, layout.size()) };
                    ptr
                }
                // SAFETY: as in `alloc`.
                None => unsafe { System.alloc_zeroed(system_layout(size)) },
            },
            // SAFETY: the caller's layout.
            None => unsafe { System.alloc_zeroed(layout) },
        }
    }

    /// [`GlobalAlloc::dealloc`].
    ///
    /// # Safety
    /// As [`GlobalAlloc::dealloc`].
    pub unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match recycled(layout) {
            Some((index, size)) => {
                if !self.keep(index, size, ptr) {
                    // SAFETY: allocated by `alloc` with this layout.
                    unsafe { System.dealloc(ptr, system_layout(size)) }
                }
            }
            // SAFETY: allocated by the system with this layout.
            None => unsafe { System.dealloc(ptr, layout) },
        }
    }

    /// [`GlobalAlloc::realloc`]: within one class the buffer stays; between
    /// two sizes neither of which is recycled, the system's `realloc` (which
    /// can grow in place); otherwise a new buffer and a copy.
    ///
    /// # Safety
    /// As [`GlobalAlloc::realloc`].
    pub unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: GlobalAlloc's contract: `new_size`, rounded to the
        // alignment, does not overflow isize.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (recycled(layout), recycled(new_layout)) {
            // SAFETY: the system allocated `ptr` with `layout`.
            (None, None) => unsafe { System.realloc(ptr, layout, new_size) },
            (Some((old, _)), Some((new, _))) if old == new => ptr,
            _ => {
                // SAFETY: a valid layout, per the contract above.
                let fresh = unsafe { self.alloc(new_layout) };
                if !fresh.is_null() {
                    // SAFETY: both are valid for the smaller of the two sizes
                    // and do not overlap (`ptr` is still allocated).
                    unsafe {
                        std::ptr::copy_nonoverlapping(ptr, fresh, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                }
                fresh
            }
        }
    }
}

/// The size of class `index`, the inverse of [`class_of`].
fn class_size(index: usize) -> usize {
    // Class i is step k = j % STEPS + 1 above 2^p, p = log2(MIN_BYTES) - 1 + j / STEPS,
    // with j = i + STEPS - 1.
    let j = index + STEPS - 1;
    let p = MIN_BYTES.trailing_zeros() as usize - 1 + j / STEPS;
    (1 << p) + (j % STEPS + 1) * ((1usize << p) / STEPS)
}

/// The process-wide cache the binary's allocator uses.
pub static GLOBAL: LargeBuffers = LargeBuffers::new();

/// The binary's global allocator: [`GLOBAL`] over the system allocator.
pub struct Recycling;

// SAFETY: every method forwards to `LargeBuffers`, which hands out either
// memory from the system allocator with a layout at least as large and as
// aligned as asked (a recycled request asks for at most SYSTEM_ALIGN, and
// every recycled buffer has it), or such memory freed earlier and not
// handed out since.
unsafe impl GlobalAlloc for Recycling {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        unsafe { GLOBAL.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        unsafe { GLOBAL.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { GLOBAL.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        unsafe { GLOBAL.realloc(ptr, layout, new_size) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn classes_cover_the_range_in_order_and_round_up_by_at_most_a_quarter() {
        // Every class's edges (and one past them), every power of two, and
        // a sample in between, in increasing order.
        let mut sizes: Vec<usize> = (0..CLASSES)
            .map(class_size)
            .chain((15..=24).map(|p| 1usize << p))
            .flat_map(|edge| [edge - 1, edge, edge + 1])
            .chain((MIN_BYTES..=MAX_BYTES).step_by(997))
            .filter(|s| (MIN_BYTES..=MAX_BYTES).contains(s))
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        let mut used = [false; CLASSES];
        let mut last = (0, 0);
        for size in sizes {
            let (index, rounded) = class_of(size).expect("in range");
            assert!(
                rounded >= size && rounded - size <= size / 4,
                "{size} -> {rounded}"
            );
            assert_eq!(class_size(index), rounded, "class {index}");
            assert!(index < CLASSES);
            used[index] = true;
            if size > last.0 {
                assert!(index >= last.1, "{size}");
            }
            last = (size, index);
        }
        assert!(used.iter().all(|&u| u), "every class is reached");
        // A size one past a class's edge starts the next class.
        for i in 0..CLASSES - 1 {
            assert_eq!(class_of(class_size(i) + 1).map(|c| c.0), Some(i + 1));
        }
        assert_eq!(class_of(MIN_BYTES), Some((0, MIN_BYTES)));
        assert_eq!(class_of(MAX_BYTES), Some((CLASSES - 1, MAX_BYTES)));
        assert_eq!(class_of(MIN_BYTES - 1), None);
        assert_eq!(class_of(MAX_BYTES + 1), None);
    }

    #[test]
    fn a_freed_large_buffer_is_reused_and_an_idle_one_given_back() {
        let cache = LargeBuffers::new();
        let layout = Layout::from_size_align(100_000, 8).unwrap();
        unsafe {
            let a = cache.alloc(layout);
            assert!(!a.is_null());
            a.write_bytes(7, layout.size());
            cache.dealloc(a, layout);
            assert_eq!(cache.cached_bytes(), class_of(100_000).unwrap().1);
            // Another size of the same class gets the same buffer back.
            let smaller = Layout::from_size_align(99_000, 8).unwrap();
            let b = cache.alloc(smaller);
            assert_eq!(a, b);
            assert_eq!(cache.cached_bytes(), 0);
            // Zeroed, even though it held sevens.
            cache.dealloc(b, smaller);
            let z = cache.alloc_zeroed(layout);
            assert_eq!(z, a);
            assert!(std::slice::from_raw_parts(z, layout.size())
                .iter()
                .all(|&x| x == 0));
            cache.dealloc(z, layout);
        }
        // Used since the last release: kept once, given back the next time.
        assert_eq!(cache.release_idle(), 0);
        assert_eq!(cache.release_idle(), class_of(100_000).unwrap().1);
        assert_eq!(cache.cached_bytes(), 0);
    }

    #[test]
    fn the_cache_stops_at_its_cap_and_leaves_small_and_overaligned_alone() {
        let cache = LargeBuffers::new();
        let big = Layout::from_size_align(MAX_BYTES, 16).unwrap();
        let held: Vec<*mut u8> = (0..3).map(|_| unsafe { cache.alloc(big) }).collect();
        for &p in &held {
            unsafe { cache.dealloc(p, big) };
        }
        assert_eq!(
            cache.cached_bytes(),
            MAX_BYTES,
            "one 16 MiB buffer fits under 24 MiB"
        );
        let small = Layout::from_size_align(1000, 8).unwrap();
        let aligned = Layout::from_size_align(64 * 1024, 4096).unwrap();
        unsafe {
            let s = cache.alloc(small);
            cache.dealloc(s, small);
            let a = cache.alloc(aligned);
            assert_eq!(a as usize % 4096, 0);
            cache.dealloc(a, aligned);
        }
        assert_eq!(cache.cached_bytes(), MAX_BYTES);
        cache.release_idle();
        cache.release_idle();
        assert_eq!(cache.cached_bytes(), 0);
    }

    #[test]
    fn a_class_keeps_at_most_its_slots() {
        let cache = LargeBuffers::new();
        let layout = Layout::from_size_align(MIN_BYTES, 8).unwrap();
        let held: Vec<*mut u8> = (0..SLOTS + 3)
            .map(|_| unsafe { cache.alloc(layout) })
            .collect();
        for &p in &held {
            unsafe { cache.dealloc(p, layout) };
        }
        assert_eq!(cache.cached_bytes(), SLOTS * MIN_BYTES);
        cache.release_idle();
        cache.release_idle();
        assert_eq!(cache.cached_bytes(), 0);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Alloc(usize, usize),
        AllocZeroed(usize, usize),
        Realloc(usize, usize),
        Free(usize),
        Release,
    }

    fn op() -> impl Strategy<Value = Op> {
        // Sizes below, across and above the recycled range (untouched pages
        // of a large buffer cost nothing), and alignments on both sides of
        // SYSTEM_ALIGN.
        let size = prop_oneof![
            1usize..40_000,
            30_000usize..300_000,
            1usize..2_000_000,
            MAX_BYTES - 4..MAX_BYTES + 1_000_000,
        ];
        let align = prop::sample::select(vec![1usize, 8, 16, 32, 4096]);
        prop_oneof![
            (size.clone(), align.clone()).prop_map(|(s, a)| Op::Alloc(s, a)),
            (size.clone(), align).prop_map(|(s, a)| Op::AllocZeroed(s, a)),
            (any::<usize>(), size).prop_map(|(i, s)| Op::Realloc(i, s)),
            any::<usize>().prop_map(Op::Free),
            Just(Op::Release),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Whatever the sequence, every live buffer keeps its own contents:
        /// no buffer is handed out twice, and a realloc keeps the prefix.
        #[test]
        fn live_buffers_never_share_memory(ops in prop::collection::vec(op(), 1..60)) {
            let cache = LargeBuffers::new();
            let mut live: Vec<(*mut u8, Layout, u8)> = Vec::new();
            let fill = |p: *mut u8, len: usize, tag: u8| unsafe {
                // The first and last bytes and one in the middle carry the tag.
                for at in [0, len / 2, len - 1] {
                    p.add(at).write(tag);
                }
            };
            let check = |p: *mut u8, len: usize, tag: u8| unsafe {
                [0, len / 2, len - 1].iter().all(|&at| p.add(at).read() == tag)
            };
            for (n, op) in ops.into_iter().enumerate() {
                let tag = (n % 251) as u8;
                match op {
                    Op::Alloc(size, align) | Op::AllocZeroed(size, align) => {
                        let layout = Layout::from_size_align(size, align).unwrap();
                        let zeroed = matches!(op, Op::AllocZeroed(..));
                        let p = unsafe {
                            if zeroed { cache.alloc_zeroed(layout) } else { cache.alloc(layout) }
                        };
                        prop_assert!(!p.is_null());
                        prop_assert_eq!(p as usize % align, 0);
                        if zeroed {
                            prop_assert!(check(p, size, 0), "a zeroed buffer held old bytes");
                        }
                        fill(p, size, tag);
                        live.push((p, layout, tag));
                    }
                    Op::Realloc(i, size) if !live.is_empty() => {
                        let (p, layout, old_tag) = live.swap_remove(i % live.len());
                        let q = unsafe { cache.realloc(p, layout, size) };
                        prop_assert!(!q.is_null());
                        let kept = layout.size().min(size);
                        // The old contents survive up to the smaller size.
                        for at in [0, layout.size() / 2, layout.size() - 1] {
                            if at < kept {
                                prop_assert_eq!(unsafe { q.add(at).read() }, old_tag);
                            }
                        }
                        fill(q, size, tag);
                        prop_assert_eq!(q as usize % layout.align(), 0);
                        live.push((q, Layout::from_size_align(size, layout.align()).unwrap(), tag));
                    }
                    Op::Free(i) if !live.is_empty() => {
                        let (p, layout, _) = live.swap_remove(i % live.len());
                        unsafe { cache.dealloc(p, layout) };
                    }
                    Op::Release => {
                        cache.release_idle();
                    }
                    _ => {}
                }
                for &(p, layout, tag) in &live {
                    prop_assert!(check(p, layout.size(), tag));
                }
            }
            for (p, layout, _) in live {
                unsafe { cache.dealloc(p, layout) };
            }
            cache.release_idle();
            cache.release_idle();
            prop_assert_eq!(cache.cached_bytes(), 0);
        }
    }
}
