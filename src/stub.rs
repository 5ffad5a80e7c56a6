//! Rendering a [`Synopsis`] into the stub text that replaces a tool output
//! in the conversation (SPEC section 5).
//!
//! Architecture invariant: rendering is a pure layout of its inputs. The same
//! synopsis and header give the same bytes, in every process.

use crate::synopsis::{clip, Synopsis};

/// The recall tools the Explore section points to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecallToolNames {
    pub read: String,
    pub search: String,
    pub list: String,
}

impl Default for RecallToolNames {
    fn default() -> Self {
        RecallToolNames {
            read: "tool_result_read".to_string(),
            search: "tool_result_search".to_string(),
            list: "tool_result_list".to_string(),
        }
    }
}

/// A tool name is shown with at most this many characters (OpenAI allows 64).
const TOOL_NAME_CHARS: usize = 64;

/// The header fields of a stub; `None` fields are left out.
#[derive(Clone, Copy, Debug, Default)]
pub struct StubHeader<'a> {
    pub tool_name: Option<&'a str>,
    pub original_chars: usize,
    /// The effective preview budget; the header shows min(original, budget).
    pub preview_budget: usize,
    pub result_ref: Option<&'a str>,
    /// The hex SHA-256 (full or prefix); the header shows its first 16 digits.
    pub sha256: Option<&'a str>,
    pub reason: Option<&'a str>,
}

/// Lays out the stub. No trailing newline.
pub fn render(synopsis: &Synopsis, header: &StubHeader<'_>, tools: &RecallToolNames) -> String {
    let mut out = String::with_capacity(1024);
    out.push_str("[toolstub: tool output externalized]\n");
    let tool_name = header.tool_name.filter(|n| !n.is_empty()).map_or_else(
        || "tool".to_string(),
        |n| crate::synopsis::one_line(n, TOOL_NAME_CHARS),
    );
    push_line(&mut out, &format!("tool_name: {tool_name}"));
    push_line(&mut out, &format!("kind: {}", synopsis.kind));
    push_line(
        &mut out,
        &format!("original_chars: {}", header.original_chars),
    );
    push_line(
        &mut out,
        &format!(
            "preview_chars: {}",
            header.original_chars.min(header.preview_budget)
        ),
    );
    if let Some(r) = header.result_ref {
        push_line(&mut out, &format!("ref: {r}"));
    }
    if let Some(sha) = header.sha256 {
        let short = sha.get(..crate::refs::SHA_PREFIX_HEX).unwrap_or(sha);
        push_line(&mut out, &format!("sha256: {short}"));
    }
    if let Some(reason) = header.reason {
        push_line(&mut out, &format!("reason: {}", clip(reason, 80)));
    }
    push_section(&mut out, "Synopsis", &synopsis.summary);
    push_section(&mut out, "Structure", &synopsis.structure);
    push_section(&mut out, "Notable items", &synopsis.notable_items);
    if !synopsis.sample.is_empty() {
        out.push_str("\nSample:\n");
        out.push_str(&synopsis.sample);
        out.push('\n');
    }
    if let Some(r) = header.result_ref {
        let explore = [
            format!(
                "Use {} with ref={r} to find relevant raw snippets.",
                tools.search
            ),
            format!(
                "Use {} with ref={r} and offset/limit to read the raw output.",
                tools.read
            ),
            format!(
                "Use {} to see the other externalized outputs of this session.",
                tools.list
            ),
        ];
        push_section(&mut out, "Explore", &explore);
    }
    while out.ends_with('\n') {
        out.pop();
    }
    out
}

fn push_line(out: &mut String, line: &str) {
    out.push_str(line);
    out.push('\n');
}

fn push_section(out: &mut String, title: &str, lines: &[String]) {
    if lines.is_empty() {
        return;
    }
    out.push('\n');
    out.push_str(title);
    out.push_str(":\n");
    for line in lines {
        out.push_str("- ");
        out.push_str(line);
        out.push('\n');
    }
}
