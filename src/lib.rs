//! toolstub: a reverse proxy for LLM APIs that replaces oversized tool
//! outputs with typed, deterministic synopsis stubs, keeps the originals, and
//! answers the model's recall calls itself.
//!
//! See `ARCHITECTURE.md` at the repository root for the map of the modules
//! and the path a request takes through them.

/// jemalloc serves every Rust allocation on Linux: glibc's malloc let a
/// long-running proxy's RSS creep up as its arenas fragmented (the soak in
/// RELIABILITY.md); jemalloc's size classes and time-based purging hold it
/// flat. In the library, not only the binary, so the tests and benchmarks
/// run on the allocator that ships. SQLite's own allocations (C code) stay
/// on the system malloc.
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

pub mod cli;
pub mod config;
pub mod metrics;
pub mod parallel;
pub mod protocol;
pub mod proxy;
pub mod recall;
pub mod refs;
pub mod rewrite;
pub mod store;
pub mod stub;
pub mod synopsis;
