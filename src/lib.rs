//! toolstub: a reverse proxy for LLM APIs that replaces oversized tool
//! outputs with typed, deterministic synopsis stubs, keeps the originals, and
//! answers the model's recall calls itself.
//!
//! See `ARCHITECTURE.md` at the repository root for the map of the modules
//! and the path a request takes through them.

pub mod auth;
pub mod cli;
pub mod config;
pub mod logging;
pub mod metrics;
pub mod parallel;
pub mod percent;
pub mod pricing;
pub mod protocol;
pub mod proxy;
pub mod recall;
pub mod refs;
pub mod replay;
pub mod rewrite;
pub mod stats;
pub mod store;
pub mod stub;
pub mod synopsis;
pub mod tokens;
pub mod usage;
pub mod wrap;
