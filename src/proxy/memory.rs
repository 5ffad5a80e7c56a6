//! Keeping the heap's resident memory at what is in use.
//!
//! glibc's malloc keeps freed memory in its arenas and returns only what
//! sits at the top of each. A proxy allocates request bodies, decoded
//! outputs and store writes of every size on many threads, so freed memory
//! piles up between live chunks and RSS creeps up for many minutes under
//! steady traffic with nothing leaking. Three settings hold it:
//!
//! - A fixed mmap threshold of 32 KiB ([`MMAP_THRESHOLD`]). By default glibc
//!   raises its threshold to the size of every mmapped chunk freed (up to
//!   32 MiB), so after the first large body every buffer below that size
//!   comes from the arenas, where the next smaller allocation lands in the
//!   middle of it and pins the pages. Fixed, a buffer of 32 KiB and more
//!   gets its own mapping (unless free space in an arena already fits it),
//!   returned whole on free. In the ten-minute soak the heap's free memory
//!   stopped growing (1-3.4 MiB from start to end, where it climbed from 9
//!   to 17 MiB) and the peak RSS per minute stopped climbing: 30-32 MiB
//!   with the threshold alone, 40-42 MiB with the recycled buffers below
//!   (RELIABILITY.md, "Session 5").
//! - One arena per core (glibc's default is eight per core): with more
//!   arenas than cores, each keeps its own high-water mark of freed memory.
//! - `malloc_trim(0)` every few seconds on the blocking pool, which hands
//!   every whole free page of every arena back.
//!
//! Elsewhere than glibc all three are no-ops. The price of the fixed
//! threshold is a fresh mapping, faulted in page by page, for every large
//! buffer: about 2 ms on a request carrying a 1 MB tool output, against a
//! model call of seconds (BENCHMARKS.md, "Memory").
//!
//! Why the system's malloc, tuned, rather than a maintained allocator of
//! its own: mimalloc 3, in the same 30-minute soak, kept its resident
//! memory 60% higher and let it climb 13.9% (RELIABILITY.md, "Soak"); the
//! soak's goal is 10%.

use std::time::Duration;

/// How often freed memory is handed back.
pub const TRIM_EVERY: Duration = Duration::from_secs(5);

/// Allocations of this size and more get their own mapping (see the module
/// documentation). Below it sit the small and medium objects of a request
/// (headers, JSON keys, synopsis lines), which the arenas serve faster than
/// a system call would. Tool outputs worth externalizing (20,000 characters
/// and more by default) are mostly above it.
pub const MMAP_THRESHOLD: usize = 32 * 1024;

/// Sets glibc's malloc up for a long-running server: one arena per core
/// and a fixed mmap threshold. Call before the runtime starts its threads
/// (arenas are created as threads first allocate).
pub fn configure_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
        let cores = libc::c_int::try_from(cores).unwrap_or(libc::c_int::MAX);
        let threshold = libc::c_int::try_from(MMAP_THRESHOLD).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt sets a process-wide malloc parameter; glibc
        // documents M_ARENA_MAX and M_MMAP_THRESHOLD as settable at any time
        // (setting the threshold also turns off its dynamic adjustment).
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, cores);
            libc::mallopt(libc::M_MMAP_THRESHOLD, threshold);
        }
    }
}

/// Starts the periodic trim on the current runtime: glibc hands back its
/// arenas' free pages.
pub fn spawn_trimmer() {
    tokio::spawn(async {
        let mut ticks = tokio::time::interval(TRIM_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await; // the first tick is immediate
        loop {
            ticks.tick().await;
            let trimmed = tokio::task::spawn_blocking(|| {
                let started = std::time::Instant::now();
                (trim_arenas(), started.elapsed())
            })
            .await;
            if let Ok((trimmed, took)) = trimmed {
                tracing::debug!(
                    arenas_trimmed = trimmed,
                    took_us = took.as_micros() as u64,
                    "returned freed heap memory"
                );
            }
        }
    });
}

/// `malloc_trim(0)`: whether glibc gave any memory back (`false` elsewhere).
fn trim_arenas() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only walks glibc's own arenas under their
        // locks; it is documented as safe to call at any time from any thread.
        unsafe { libc::malloc_trim(0) != 0 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

/// Heap bytes in use and held free by the allocator (glibc's `mallinfo2`,
/// all arenas); `None` elsewhere. Free bytes that grow while in-use bytes
/// stay flat are fragmentation; in-use bytes that grow are something held.
pub fn heap() -> Option<(u64, u64)> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 walks glibc's arenas under their locks and
        // returns a plain struct; documented as callable at any time.
        let info = unsafe { libc::mallinfo2() };
        let in_use = info.uordblks.saturating_add(info.hblkhd);
        Some((in_use as u64, info.fordblks as u64))
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
}

/// Appends the memory gauges to a Prometheus text exposition: the heap
/// (in use, held free), SQLite's allocations and the memo's entries.
pub fn render_gauges(out: &mut String, memo_bytes: usize) {
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "# HELP toolstub_memory_bytes Memory by part: heap_in_use and heap_free (glibc malloc), sqlite (page caches, statements), memo (digests and synopses).\n# TYPE toolstub_memory_bytes gauge"
    );
    let mut gauge = |part: &str, value: u64| {
        let _ = writeln!(out, "toolstub_memory_bytes{{part=\"{part}\"}} {value}");
    };
    if let Some((in_use, free)) = heap() {
        gauge("heap_in_use", in_use);
        gauge("heap_free", free);
    }
    gauge("sqlite", crate::store::sqlite_memory_in_use());
    gauge("memo", memo_bytes as u64);
}
