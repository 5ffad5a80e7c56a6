//! The `toolstub` binary: parse the command line, run, print the error chain.

use std::process::ExitCode;

/// Freed buffers of 32 KiB and more are kept for reuse instead of being
/// unmapped (`src/proxy/large_buffers.rs`); everything else is glibc's malloc.
#[global_allocator]
static ALLOCATOR: toolstub::proxy::large_buffers::Recycling =
    toolstub::proxy::large_buffers::Recycling;

fn main() -> ExitCode {
    toolstub::cli::main()
}
