//! Integration tests of the synopsis engine, the stub renderer and the
//! `toolstub synopsis` command: one test binary, a module per area
//! (`wrappers`: agents' wrappers around tool outputs; `mcp`: MCP content
//! blocks, cut JSON, identifying values, accessibility snapshots).

mod determinism;
mod fidelity;
mod mcp;
mod properties;
mod spec_examples;
mod wrappers;

use toolstub::refs::{result_ref, sha256_hex};
use toolstub::stub::{render, RecallToolNames, StubHeader};
use toolstub::synopsis::{synopsize, Hints, Synopsis};

/// The synopsis with no MIME hint.
pub fn syn(text: &str, preview_chars: usize) -> Synopsis {
    synopsize(
        text,
        Hints {
            mime: None,
            preview_chars,
        },
    )
}

/// The stub as the proxy renders it, with a ref, so every section shows.
pub fn stub(text: &str, preview_chars: usize) -> String {
    let synopsis = syn(text, preview_chars);
    let sha = sha256_hex(text);
    let r = result_ref(Some("call_1"), &sha);
    render(
        &synopsis,
        &StubHeader {
            tool_name: Some("t"),
            original_chars: text.chars().count(),
            preview_budget: preview_chars,
            result_ref: Some(&r),
            sha256: Some(&sha),
            reason: Some("single_threshold"),
        },
        &RecallToolNames::default(),
    )
}
