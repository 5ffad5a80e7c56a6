//! Giving freed heap memory back to the operating system.
//!
//! glibc's malloc keeps freed memory in its arenas (one per thread, up to
//! eight per core) and returns only what sits at the top of each. A proxy
//! allocates request bodies and decoded outputs of every size on many
//! threads, so freed pages pile up in the middle of arenas and RSS creeps up
//! for many minutes under steady traffic (the soak measured +14% over ten
//! minutes with nothing leaking). `malloc_trim(0)` hands every whole free
//! page of every arena back; run every few seconds on the blocking pool, it
//! keeps RSS at what is in use. Arenas are also limited to one per core
//! (glibc's default is eight per core): with more arenas than cores, each
//! keeps its own high-water mark of freed memory. Together they lowered the
//! ten-minute soak's peak RSS from 45.7-46.8 to 42.5-43.1 MiB; a slow climb
//! of about 5 MiB over the run remains (RELIABILITY.md, "Soak").
//! Elsewhere than glibc both are no-ops.

use std::time::Duration;

/// How often freed memory is handed back.
pub const TRIM_EVERY: Duration = Duration::from_secs(5);

/// Limits glibc to one malloc arena per core. Call before the runtime
/// starts its threads (arenas are created as threads first allocate).
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
        let cores = libc::c_int::try_from(cores).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt sets a process-wide malloc parameter; glibc
        // documents M_ARENA_MAX as settable at any time.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, cores) };
    }
}

/// Starts the periodic trim on the current runtime (glibc only).
pub fn spawn_trimmer() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    tokio::spawn(async {
        let mut ticks = tokio::time::interval(TRIM_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await; // the first tick is immediate
        loop {
            ticks.tick().await;
            let trimmed = tokio::task::spawn_blocking(|| {
                let started = std::time::Instant::now();
                // SAFETY: malloc_trim only walks glibc's own arenas under
                // their locks; it is documented as safe to call at any time
                // from any thread.
                let released = unsafe { libc::malloc_trim(0) };
                (released, started.elapsed())
            })
            .await;
            if let Ok((released, took)) = trimmed {
                tracing::debug!(
                    released = released != 0,
                    took_us = took.as_micros() as u64,
                    "returned freed heap memory"
                );
            }
        }
    });
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
