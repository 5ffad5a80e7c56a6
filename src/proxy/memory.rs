//! The process's memory: the allocators' settings and the gauges.
//!
//! Rust allocations go to jemalloc (the global allocator, `src/lib.rs`):
//! under glibc's malloc the ten-minute soak's RSS crept up by 10-14% with
//! nothing leaking, as freed memory piled up in the middle of fragmented
//! arenas (RELIABILITY.md, "Soak"); jemalloc's size classes and its
//! time-based purging of freed pages hold it flat. jemalloc is tuned by
//! `_RJEM_MALLOC_CONF` (its `MALLOC_CONF`), with defaults set in
//! [`JEMALLOC_CONF`].
//!
//! SQLite (C code) still allocates with glibc's malloc: its arenas are
//! limited to one per core, and every 5 s `malloc_trim` hands their freed
//! pages back. Elsewhere than glibc both are no-ops.

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

/// jemalloc's heap: bytes allocated by Rust code, and the resident bytes
/// it holds beyond those (freed pages not yet purged, metadata, slack in
/// partly used slabs); `None` where jemalloc is not the allocator. Held
/// bytes that grow while allocated bytes stay flat are fragmentation;
/// allocated bytes that grow are something kept.
pub fn heap() -> Option<(u64, u64)> {
    #[cfg(target_os = "linux")]
    {
        use tikv_jemalloc_ctl::{epoch, stats};
        // The statistics are cached; advancing the epoch refreshes them.
        epoch::advance().ok()?;
        let allocated = stats::allocated::read().ok()? as u64;
        let resident = stats::resident::read().ok()? as u64;
        Some((allocated, resident.saturating_sub(allocated)))
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// Appends the memory gauges to a Prometheus text exposition: the heap
/// (in use, held free), SQLite's allocations and the memo's entries.
pub fn render_gauges(out: &mut String, memo_bytes: usize) {
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "# HELP toolstub_memory_bytes Memory by part: heap_in_use and heap_free (jemalloc: allocated, and resident beyond that), sqlite (page caches, statements), memo (digests and synopses).\n# TYPE toolstub_memory_bytes gauge"
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
