//! Fuzz target: the synopsis engine on any text, with any MIME hint.
//!
//! Input layout: byte 0 picks the MIME hint (low 4 bits) and the preview
//! budget (high bits, always at most the default); the rest is the tool
//! output, decoded lossily as UTF-8.
//!
//! Invariants: no panic; every summary, structure and notable line is one
//! line of at most 200 characters (the text kind's excerpts and headers line excepted); only `unknown` carries a sample; the
//! stub, at a preview budget no larger than the default, stays within the
//! 5,000-character cap on a stub.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolstub::refs::{result_ref, sha256_hex};
use toolstub::stub::{render, RecallToolNames, StubHeader};
use toolstub::synopsis::{synopsize, Hints, Kind, LINE_CAP};

const MIMES: [Option<&str>; 16] = [
    None,
    None,
    None,
    None,
    Some("application/json"),
    Some("text/csv"),
    Some("text/tab-separated-values"),
    Some("application/xml"),
    Some("text/xml; charset=utf-8"),
    Some("application/yaml"),
    Some("text/x-python"),
    Some("text/plain"),
    Some("application/octet-stream"),
    Some("APPLICATION/JSON-SEQ"),
    Some("image/svg+xml"),
    Some(""),
];

const PREVIEWS: [usize; 4] = [2_000, 0, 1, 1_000];

/// "Opening excerpt: " + 500 characters + ".".
const EXCERPT_LINE_CAP: usize = 17 + 500 + 1;

/// "Detected section headers: " + 2,400 characters + ".".
const HEADERS_LINE_CAP: usize = 26 + 2_400 + 1;

/// The stub cap with default settings.
const STUB_CAP: usize = 5_000;

fuzz_target!(|data: &[u8]| {
    let Some((&choice, rest)) = data.split_first() else {
        return;
    };
    let mime = MIMES[usize::from(choice & 0x0f)];
    let preview = PREVIEWS[usize::from(choice >> 4) % PREVIEWS.len()];
    let text = String::from_utf8_lossy(rest);

    let synopsis = synopsize(
        &text,
        Hints {
            mime,
            preview_chars: preview,
        },
    );
    for line in synopsis
        .summary
        .iter()
        .chain(&synopsis.structure)
        .chain(&synopsis.notable_items)
    {
        assert!(
            !line.contains(['\n', '\r']),
            "multi-line synopsis line: {line:?}"
        );
        // The text kind's excerpts (500 characters each)
        // and its headers line (at most 2,400) are the exceptions to the
        // line cap, by design.
        let text = synopsis.kind == Kind::Text;
        let cap = if text
            && (line.starts_with("Opening excerpt: ") || line.starts_with("Closing excerpt: "))
        {
            EXCERPT_LINE_CAP
        } else if text && line.starts_with("Detected section headers: ") {
            HEADERS_LINE_CAP
        } else {
            LINE_CAP
        };
        let n = line.chars().count();
        assert!(n <= cap, "synopsis line of {n} chars: {line:?}");
    }
    assert!(
        synopsis.sample.is_empty() || synopsis.kind == Kind::Unknown,
        "a {} synopsis carries a sample",
        synopsis.kind
    );

    let sha = sha256_hex(&text);
    let original_chars = text.chars().count();
    let r = result_ref(Some("call_fuzz_0123456789"), &sha);
    let stub = render(
        &synopsis,
        &StubHeader {
            tool_name: Some("read_file"),
            original_chars,
            preview_budget: preview,
            result_ref: Some(&r),
            sha256: Some(&sha),
            reason: Some("single_threshold"),
        },
        &RecallToolNames::default(),
    );
    let n = stub.chars().count();
    assert!(n <= STUB_CAP, "stub of {n} chars (kind {})", synopsis.kind);
    assert!(!stub.ends_with('\n'), "stub ends with a newline");
});
