//! The synopsis engine: one tool output in, one typed, deterministic [`Synopsis`] out.
//!
//! Detection lives here and only here: [`synopsize`] tries the kinds in the
//! order SPEC section 3 fixes (empty, binary-like, json, xml, tsv, csv, yaml,
//! code, text) and the first that accepts the text wins. Each kind has its own
//! module behind one signature, `fn summarize(&Input) -> Option<Synopsis>`;
//! `None` means "not me, try the next kind". The engine never fails: anything
//! it cannot structure ends as `text` or `unknown`.
//!
//! Architecture invariant: this module knows nothing of HTTP, OpenAI or
//! SQLite, does no I/O, and its output depends only on the input text, the
//! MIME hint and the preview budget (no time, no randomness, no hash-map
//! iteration order), so the same output always yields the same stub bytes.

mod ansi;
mod code;
mod json;
mod lines;
mod table;
mod text;
mod unknown;
mod xml;
mod yaml;

use serde::{Deserialize, Serialize};
use std::borrow::Cow;

pub use lines::{clip, clip_line, one_line, LINE_CAP};

/// The closed set of output kinds a synopsis can have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Json,
    Csv,
    Tsv,
    Yaml,
    Xml,
    Code,
    Text,
    Unknown,
}

impl Kind {
    /// Every kind, in a fixed order (used by reports and benchmarks).
    pub const ALL: [Kind; 8] = [
        Kind::Json,
        Kind::Csv,
        Kind::Tsv,
        Kind::Yaml,
        Kind::Xml,
        Kind::Code,
        Kind::Text,
        Kind::Unknown,
    ];

    /// The lowercase name used in stubs, metadata and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Json => "json",
            Kind::Csv => "csv",
            Kind::Tsv => "tsv",
            Kind::Yaml => "yaml",
            Kind::Xml => "xml",
            Kind::Code => "code",
            Kind::Text => "text",
            Kind::Unknown => "unknown",
        }
    }

    /// Parses a kind name as written by [`Kind::as_str`].
    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the model is told about one tool output instead of its full text.
///
/// Every line is already clipped to its cap; rendering only lays the lines
/// out (see [`crate::stub`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Synopsis {
    pub kind: Kind,
    pub title: String,
    pub summary: Vec<String>,
    pub structure: Vec<String>,
    pub notable_items: Vec<String>,
    /// Only the `unknown` kind carries a sample (head/tail within the preview budget).
    pub sample: String,
}

impl Synopsis {
    fn new(kind: Kind, title: &str) -> Synopsis {
        Synopsis {
            kind,
            title: title.to_string(),
            summary: Vec::new(),
            structure: Vec::new(),
            notable_items: Vec::new(),
            sample: String::new(),
        }
    }
}

/// Everything detection may look at besides the text itself.
#[derive(Clone, Copy, Debug, Default)]
pub struct Hints<'a> {
    /// A MIME type, when one is known (per-tool configuration or the CLI's `--mime`).
    pub mime: Option<&'a str>,
    /// The effective preview budget in characters (only `unknown` samples use it).
    pub preview_chars: usize,
}

/// The text a kind's summarizer sees: already stripped of ANSI escapes and of a
/// leading byte-order mark, plus the lowercased MIME hint.
pub(crate) struct Input<'a> {
    pub text: &'a str,
    /// The MIME hint, lowercased; empty when there is none.
    pub mime: &'a str,
    pub preview_chars: usize,
    /// The code scan, shared by the YAML heuristic and the code kind.
    code_scan: std::cell::OnceCell<code::Scan>,
    /// Known to hold no NUL byte (so the binary check need not look).
    nul_free: bool,
}

impl<'a> Input<'a> {
    pub fn new(text: &'a str, mime: &'a str, preview_chars: usize) -> Input<'a> {
        Input {
            text,
            mime,
            preview_chars,
            code_scan: std::cell::OnceCell::new(),
            nul_free: false,
        }
    }

    pub fn mime_says(&self, what: &str) -> bool {
        self.mime.contains(what)
    }

    /// The one pass over the lines that both YAML and code detection need.
    pub fn code_scan(&self) -> &code::Scan {
        self.code_scan.get_or_init(|| code::Scan::of(self.text))
    }
}

/// Summarizes one tool output. Never fails and never panics.
pub fn synopsize(raw: &str, hints: Hints<'_>) -> Synopsis {
    if raw.is_empty() {
        return unknown::empty();
    }
    // One pass over the text finds both an escape (ANSI sequences to strip)
    // and a NUL (binary-like): most outputs have neither, and on a large one
    // each pass comes from memory.
    let plain = memchr::memchr2(0x1b, 0, raw.as_bytes()).is_none();
    let (text, ansi_stripped) = match if plain {
        Cow::Borrowed(raw)
    } else {
        ansi::strip(raw)
    } {
        Cow::Borrowed(t) => (Cow::Borrowed(t), false),
        Cow::Owned(t) => (Cow::Owned(t), true),
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let mime = hints.mime.unwrap_or("").to_ascii_lowercase();
    let mut input = Input::new(text, &mime, hints.preview_chars);
    input.nul_free = plain;
    let mut synopsis = detect(&input);
    if ansi_stripped {
        synopsis
            .summary
            .push("ANSI escape sequences were stripped before analysis.".to_string());
    }
    synopsis
}

/// The detection order of SPEC section 3; the first kind that accepts wins.
fn detect(input: &Input<'_>) -> Synopsis {
    if input.text.is_empty() {
        // Only escape sequences or a BOM: nothing readable is left.
        return unknown::empty();
    }
    let binary = if input.nul_free {
        unknown::looks_binary_without_nul(input.text)
    } else {
        unknown::looks_binary(input.text)
    };
    if binary {
        return unknown::binary(input);
    }
    let kinds: [fn(&Input<'_>) -> Option<Synopsis>; 6] = [
        json::summarize,
        xml::summarize,
        table::summarize_tsv,
        table::summarize_csv,
        yaml::summarize,
        code::summarize,
    ];
    kinds
        .iter()
        .find_map(|summarize| summarize(input))
        .unwrap_or_else(|| text::summarize(input))
}

/// Detects the kind only (same rules as [`synopsize`]).
pub fn detect_kind(raw: &str, hints: Hints<'_>) -> Kind {
    synopsize(raw, hints).kind
}
