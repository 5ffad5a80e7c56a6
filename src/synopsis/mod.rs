//! The synopsis engine: one tool output in, one typed, deterministic [`Synopsis`] out.
//!
//! Detection lives here and only here: [`synopsize`] tries the kinds in a
//! fixed order (empty, binary-like, json, xml, snapshot, tsv, csv, yaml,
//! code, text) and the first that accepts the text wins. Each kind has its own
//! module behind one signature, `fn summarize(&Input) -> Option<Synopsis>`;
//! `None` means "not me, try the next kind". The engine never fails: anything
//! it cannot structure ends as `text` or `unknown`. Before detection, what
//! wraps the real output is taken off, so the kind is the content's and the
//! wrapper is said in the first summary lines: an agent's wrapper (Claude
//! Code's numbered `Read` listings, Codex's command headers: [`wrapper`]), a
//! harness's note after an output it cut ([`cut`]), and MCP content blocks
//! (a block, a list of them, a whole `CallToolResult`: [`mcp`]).
//!
//! Architecture invariant: this module knows nothing of HTTP, OpenAI or
//! SQLite, does no I/O, and its output depends only on the input text, the
//! MIME hint and the preview budget (no time, no randomness, no hash-map
//! iteration order), so the same output always yields the same stub bytes.

mod ansi;
mod code;
mod cut;
mod ids;
mod json;
mod lines;
mod mcp;
mod snapshot;
mod table;
mod text;
mod unknown;
mod wrapper;
mod xml;
mod yaml;

use serde::{Deserialize, Serialize};
use std::borrow::Cow;

pub use lines::{clip, clip_line, one_line, LINE_CAP};
pub(crate) use mcp::python_string;

/// The closed set of output kinds a synopsis can have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Json,
    Csv,
    Tsv,
    Yaml,
    Xml,
    Snapshot,
    Code,
    Text,
    Unknown,
}

impl Kind {
    /// Every kind, in a fixed order (used by reports and benchmarks).
    pub const ALL: [Kind; 9] = [
        Kind::Json,
        Kind::Csv,
        Kind::Tsv,
        Kind::Yaml,
        Kind::Xml,
        Kind::Snapshot,
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
            Kind::Snapshot => "snapshot",
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
    synopsize_within(raw, hints, WRAPPER_DEPTH, WRAPPER_NOTES_CHARS, Some(0))
}

/// How many wrappers deep the content is looked for: a command's output
/// (Codex) may be a numbered listing (`cat -n`), and no further.
const WRAPPER_DEPTH: usize = 2;
/// What the wrappers' lines may add to a synopsis, in characters: each
/// wrapper's first line (at most [`LINE_CAP`]) always, its other lines (notes
/// around a listing, a command, a truncation) while they fit, room kept for
/// the first line of a wrapper nested inside. The content's
/// synopsis keeps its own caps, and with default settings a stub stays under
/// 5,000 characters with this on top.
const WRAPPER_NOTES_CHARS: usize = 600;

/// [`synopsize`], taking off at most `wrappers` agent wrappers (see
/// [`wrapper`]): a wrapped output is described by its content, the wrapper
/// said in the first summary lines, within `notes_budget` characters.
/// `offset` is where `raw` starts in the original as sent, in characters,
/// when it is a verbatim part of it: offsets the synopsis mentions are the
/// original's, as recall reads it.
fn synopsize_within(
    raw: &str,
    hints: Hints<'_>,
    wrappers: usize,
    notes_budget: usize,
    offset: Option<usize>,
) -> Synopsis {
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
    // Byte `at` of `text` in the original: known while what precedes it is
    // the original's own bytes (a BOM aside), escapes not taken out.
    let lead = raw.len() - text.len();
    let offset_of = |at: usize| -> Option<usize> {
        let before = text.get(..at)?;
        let verbatim = match ansi_stripped {
            false => raw.get(lead..)?,
            true => raw.strip_prefix('\u{feff}').unwrap_or(raw),
        };
        verbatim.starts_with(before).then(|| {
            let bom = usize::from(raw.starts_with('\u{feff}'));
            offset.map(|o| o + bom + before.chars().count())
        })?
    };
    let unwrapped = if wrappers > 0 {
        wrapper::unwrap(text, &offset_of)
            .or_else(|| cut::harness_note(text, &offset_of))
            .or_else(|| mcp::unwrap(text))
    } else {
        None
    };
    let mut synopsis = match unwrapped {
        Some(w) => {
            let depth = if w.may_nest { wrappers - 1 } else { 0 };
            // Room is kept for the first line of a wrapper inside this one.
            let reserve = if depth > 0 { LINE_CAP } else { 0 };
            let mut budget = notes_budget;
            let mut notes = Vec::with_capacity(w.notes.len());
            for (i, note) in w.notes.into_iter().enumerate() {
                let n = note.chars().count();
                if i == 0 || n + reserve <= budget {
                    budget = budget.saturating_sub(n);
                    notes.push(note);
                }
            }
            // Past escapes taken out, offsets inside the content are not the
            // original's.
            let offset = w.offset.filter(|_| !ansi_stripped);
            let mut inner = synopsize_within(&w.inner, hints, depth, budget, offset);
            inner.summary.splice(0..0, notes);
            inner
        }
        None => {
            let mime = hints.mime.unwrap_or("").to_ascii_lowercase();
            let mut input = Input::new(text, &mime, hints.preview_chars);
            input.nul_free = plain;
            detect(&input)
        }
    };
    if ansi_stripped {
        synopsis
            .summary
            .push("ANSI escape sequences were stripped before analysis.".to_string());
    }
    synopsis
}

/// The detection order (see the module comment); the first kind that accepts wins.
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
    let kinds: [fn(&Input<'_>) -> Option<Synopsis>; 7] = [
        json::summarize,
        xml::summarize,
        snapshot::summarize,
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
