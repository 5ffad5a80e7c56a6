//! Rendering a [`Synopsis`] into the stub text that replaces a tool output
//! in the conversation.
//!
//! Architecture invariant: rendering is a pure layout of its inputs. The same
//! synopsis and header give the same bytes, in every process.

use crate::synopsis::{clip, Kind, Synopsis};
use std::borrow::Cow;

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

impl RecallToolNames {
    /// The names the recall tools are offered under beside the client's
    /// own tools: these, unless the client already has a tool of that
    /// name; then `toolstub_<name>`, then `toolstub_<name>_2`, and so on.
    /// Deterministic in the client's tool list.
    pub fn offered_beside(&self, client: &[Cow<'_, str>]) -> RecallToolNames {
        // A set, not a scan per candidate: the client chooses how many
        // tools it sends, and a scan of each `_n` would be quadratic in it.
        let names: std::collections::BTreeSet<&str> = client.iter().map(|c| c.as_ref()).collect();
        let taken = |name: &str| names.contains(name);
        let pick = |name: &str| -> String {
            if !taken(name) {
                return name.to_string();
            }
            let base = format!("toolstub_{name}");
            if !taken(&base) {
                return base;
            }
            (2..)
                .map(|n| format!("{base}_{n}"))
                .find(|candidate| !taken(candidate))
                .unwrap_or(base)
        };
        RecallToolNames {
            read: pick(&self.read),
            search: pick(&self.search),
            list: pick(&self.list),
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

/// The stub of an output the model has already read in full (the aging
/// rule, `reason: aged`): one line. The model saw the output verbatim when
/// it came, and its own answers since carry what it took from it, so the
/// synopsis sections would repeat what it knows at the price of a stub
/// several times longer, paid again on every later request; the line says
/// what the output was and how to read it again. Without a ref (the store
/// failed) there is nothing to read back, and the aging rule does not run.
pub fn render_aged(kind: Kind, header: &StubHeader<'_>, tools: &RecallToolNames) -> String {
    let mut out = format!(
        "[toolstub: tool output shown in full earlier] kind: {kind}, original_chars: {}",
        header.original_chars
    );
    if let Some(r) = header.result_ref {
        out.push_str(&format!(
            ", ref: {r}. {} with this ref reads it again.",
            tools.read
        ));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recall_tool_takes_the_first_name_no_client_tool_has() {
        let defaults = RecallToolNames::default();
        let mut client: Vec<Cow<'_, str>> = vec!["tool_result_read".into()];
        client.push("toolstub_tool_result_read".into());
        client.extend((2..5_000).map(|n| Cow::Owned(format!("toolstub_tool_result_read_{n}"))));
        client.push("tool_result_list".into());
        let offered = defaults.offered_beside(&client);
        assert_eq!(offered.read, "toolstub_tool_result_read_5000");
        assert_eq!(offered.search, "tool_result_search");
        assert_eq!(offered.list, "toolstub_tool_result_list");
    }

    #[test]
    fn an_aged_stub_is_one_line_naming_its_ref_and_the_read_tool() {
        let header = StubHeader {
            tool_name: Some("bash"),
            original_chars: 10_613,
            preview_budget: 2000,
            result_ref: Some("tr_call_2_5caaaf3ef9b4b866"),
            sha256: Some("5caaaf3ef9b4b866ffff"),
            reason: Some("aged"),
        };
        let names = RecallToolNames {
            read: "toolstub_tool_result_read".to_string(),
            ..RecallToolNames::default()
        };
        let stub = render_aged(Kind::Code, &header, &names);
        assert_eq!(
            stub,
            "[toolstub: tool output shown in full earlier] kind: code, original_chars: 10613, \
             ref: tr_call_2_5caaaf3ef9b4b866. toolstub_tool_result_read with this ref reads it again."
        );
        assert!(!stub.contains('\n'));
        let full = render(
            &crate::synopsis::synopsize(
                &"def f():\n    return 1\n".repeat(400),
                Default::default(),
            ),
            &header,
            &names,
        );
        assert!(
            stub.len() * 3 < full.len(),
            "{} vs {}",
            stub.len(),
            full.len()
        );
    }
}
