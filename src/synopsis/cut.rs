//! Outputs cut short by the harness that ran the tool: what the harness says
//! of the cut, and a JSON text read as far as it goes.
//!
//! Agent harnesses cap what a tool returns and cut the rest, often in the
//! middle of a JSON string or number, sometimes with a marker after the cut.
//! Whole, such a text is no JSON and was described as prose, its field names
//! lost. Here:
//!
//! - **Trailing markers** ([`strip_marker`]): the text ends, after optional
//!   whitespace, with one of `...[truncated]`, `... [truncated]`,
//!   `[truncated]`, `... (truncated)`, `(truncated)`, `[Output truncated]`,
//!   `[output truncated]`, `... [output truncated]` (compared exactly). The
//!   json kind and the MCP content blocks take the marker off a JSON text
//!   that does not parse and look again.
//! - **Toolathlon's overlong-output note** ([`harness_note`]): the harness
//!   keeps the first N characters, writes ` ...`, a blank line and
//!   `(The output of the tool call (shortuuid identifier: ID) is too long!
//!   Only the first N characters are shown here. The original output length
//!   is M characters. The full output has been saved to the file PATH.
//!   Please check this file carefully, as it may be very long!)`. The note is
//!   taken off like an agent's wrapper, and said: the content is what was
//!   kept.
//! - **A JSON prefix closed** ([`close_json_prefix`]): the longest prefix of
//!   a cut JSON text that ends after a whole value (before a `,`, after a
//!   `{`, `[`, `}` or `]`), with the brackets still open closed after it, so
//!   the ordinary JSON reader describes what was complete before the cut. A
//!   string value cut open may be kept and closed instead (for a wrapper
//!   whose payload is that string). One pass over the bytes, jumping through
//!   strings with `memchr`.

use super::lines::clip_line;
use super::wrapper::{OffsetOf, Unwrapped};
use std::borrow::Cow;

/// The markers a harness writes after a cut, longest first so that
/// `... [truncated]` is taken whole rather than as `[truncated]`.
const MARKERS: [&str; 8] = [
    "... [output truncated]",
    "... [truncated]",
    "...[truncated]",
    "... (truncated)",
    "[Output truncated]",
    "[output truncated]",
    "[truncated]",
    "(truncated)",
];

/// The text before a trailing truncation marker, and the marker.
pub(crate) fn strip_marker(text: &str) -> Option<(&str, &'static str)> {
    let trimmed = text.trim_end();
    MARKERS
        .iter()
        .find_map(|m| trimmed.strip_suffix(m).map(|before| (before, *m)))
}

/// Toolathlon's note is looked for in this many bytes at the end.
const NOTE_BYTES: usize = 2048;
const NOTE_START: &str = "(The output of the tool call (shortuuid identifier: ";
const NOTE_END: &str = "Please check this file carefully, as it may be very long!)";

/// Toolathlon's note after an output it cut (see the module comment): the
/// part kept, and one line saying how much it is of the whole.
pub(crate) fn harness_note<'a>(text: &'a str, offset_of: OffsetOf<'_>) -> Option<Unwrapped<'a>> {
    let end = text.trim_end();
    if !end.ends_with(NOTE_END) {
        return None;
    }
    let from = end.len().saturating_sub(NOTE_BYTES);
    let from = (from..end.len()).find(|&i| end.is_char_boundary(i))?;
    let window = &end[from..];
    let at = from + window.rfind(&format!("\n\n{NOTE_START}"))?;
    let note = &end[at + 2..];
    let rest = note.strip_prefix(NOTE_START)?;
    let (id, rest) = rest.split_once(") is too long! Only the first ")?;
    let (kept, rest) =
        rest.split_once(" characters are shown here. The original output length is ")?;
    let (whole, rest) =
        rest.split_once(" characters. The full output has been saved to the file ")?;
    let (path, rest) = rest.split_once(". Please check this file")?;
    let digits = |s: &str| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(kept)
        || !digits(whole)
        || id.is_empty()
        || id.len() > 64
        || !id.bytes().all(|b| b.is_ascii_alphanumeric())
        || path.contains('\n')
        || rest != " carefully, as it may be very long!)"
    {
        return None;
    }
    // The harness writes ` ...` right after the characters it kept.
    let inner = &text[..at];
    let inner = inner.strip_suffix(" ...").unwrap_or(inner);
    let line = clip_line(format!(
        "The harness cut this output: only its first {kept} of {whole} characters were sent, followed by its note (saved as {}); the part sent is described below.",
        super::lines::one_line(path, 100)
    ));
    Some(Unwrapped {
        inner: Cow::Borrowed(inner),
        notes: vec![line],
        may_nest: true,
        offset: offset_of(0),
    })
}

/// The longest prefix of `text`, a JSON value cut before its end, that is
/// whole JSON once its open brackets are closed and that holds no array item
/// left open (see the module comment).
/// With `keep_open_string`, a string value open at the cut is kept (less a
/// cut escape) and closed. `None` when `text` opens no array or object, or
/// closes its first value (then it was not cut). What is returned is the
/// prefix kept, then the closing quote (when a string was kept open) and
/// brackets.
pub(crate) fn close_json_prefix(text: &str, keep_open_string: bool) -> Option<String> {
    let bytes = text.as_bytes();
    let mut stack: Vec<u8> = Vec::new();
    // For each open bracket, the safe point before it.
    let mut before: Vec<Option<(usize, usize)>> = Vec::new();
    // In an object, whether the next string is a key.
    let mut key_next = false;
    // Where the last whole value ended (exclusive) and the brackets open there.
    let mut safe: Option<(usize, usize)> = None;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let is_key = key_next && stack.last() == Some(&b'{');
                match string_end(bytes, i + 1) {
                    Some(end) => i = end + 1,
                    None => {
                        if keep_open_string && !is_key && !stack.is_empty() {
                            let mut json = String::with_capacity(text.len() + stack.len() + 1);
                            json.push_str(without_cut_escape(text));
                            json.push('"');
                            push_closers(&mut json, &stack);
                            return Some(json);
                        }
                        break;
                    }
                }
                continue;
            }
            b'{' | b'[' => {
                before.push(safe);
                stack.push(bytes[i]);
                key_next = bytes[i] == b'{';
                safe = Some((i + 1, stack.len()));
            }
            b'}' | b']' => {
                stack.pop();
                before.pop();
                if stack.is_empty() {
                    // The first value is whole: nothing was cut.
                    return None;
                }
                key_next = false;
                safe = Some((i + 1, stack.len()));
            }
            b',' => {
                safe = Some((i, stack.len()));
                key_next = stack.last() == Some(&b'{');
            }
            b':' => key_next = false,
            _ => {}
        }
        i += 1;
    }
    // An array item left open is not kept: the counts are of whole items.
    // The outermost such item goes with everything in it.
    let open_item = (1..stack.len()).find(|&k| stack[k - 1] == b'[');
    if let Some(k) = open_item {
        safe = before[k];
    }
    // After the last safe point only strings, scalars and colons came: the
    // brackets open there are the ones open now (the first `depth`).
    let (end, depth) = safe?;
    let mut json = String::with_capacity(end + depth);
    json.push_str(&text[..end]);
    push_closers(&mut json, &stack[..depth]);
    Some(json)
}

/// The index of the quote closing a string whose content starts at `from`.
fn string_end(bytes: &[u8], mut from: usize) -> Option<usize> {
    loop {
        let at = from + memchr::memchr2(b'"', b'\\', bytes.get(from..)?)?;
        if bytes[at] == b'"' {
            return Some(at);
        }
        // An escape: the byte after the backslash is never the end.
        from = at + 2;
    }
}

/// `text` (ending inside a JSON string) less an escape the cut left
/// unfinished: a lone backslash, `\u` with fewer than four hex digits, or a
/// leading surrogate whose pair was cut off.
fn without_cut_escape(text: &str) -> &str {
    // A leading surrogate may come before a cut escape: taken off in turn.
    let mut text = text;
    loop {
        let shorter = without_one_cut_escape(text);
        if shorter.len() == text.len() {
            return text;
        }
        text = shorter;
    }
}

fn without_one_cut_escape(text: &str) -> &str {
    let bytes = text.as_bytes();
    let backslashes = bytes.iter().rev().take_while(|&&b| b == b'\\').count();
    if backslashes % 2 == 1 {
        return &text[..text.len() - 1];
    }
    // `\u` and up to four hex digits at the very end.
    let tail = &bytes[bytes.len().saturating_sub(6)..];
    if let Some(u) = tail.windows(2).rposition(|w| w == b"\\u") {
        let start = bytes.len() - tail.len() + u;
        let preceding = bytes[..start]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        let hex = &bytes[start + 2..];
        if preceding % 2 == 0 && hex.iter().all(u8::is_ascii_hexdigit) {
            let lone_lead = hex.len() == 4
                && matches!(hex[0], b'd' | b'D')
                && matches!(hex[1], b'8' | b'9' | b'a' | b'b' | b'A' | b'B');
            if hex.len() < 4 || lone_lead {
                return &text[..start];
            }
        }
    }
    text
}

fn push_closers(json: &mut String, open: &[u8]) {
    for &b in open.iter().rev() {
        json.push(if b == b'{' { '}' } else { ']' });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closed(text: &str, keep: bool) -> Option<String> {
        close_json_prefix(text, keep)
    }

    #[test]
    fn a_prefix_closes_after_its_last_whole_value() {
        assert_eq!(
            closed(r#"[{"a":1},{"b":2"#, false).as_deref(),
            Some(r#"[{"a":1}]"#)
        );
        assert_eq!(
            closed(r#"{"a": [1, 2, 3"#, false).as_deref(),
            Some(r#"{"a": [1, 2]}"#)
        );
        assert_eq!(closed(r#"{"a": {"#, false).as_deref(), Some(r#"{"a": {}}"#));
        // An item left open goes, however deep the cut.
        assert_eq!(
            closed(r#"{"d": [{"id":1}, {"id":2, "t": [1"#, false).as_deref(),
            Some(r#"{"d": [{"id":1}]}"#)
        );
        assert_eq!(
            closed(r#"[[1, 2], [3, "#, false).as_deref(),
            Some("[[1, 2]]")
        );
        assert_eq!(closed(r#"[{"id": 1"#, false).as_deref(), Some("[]"));
        assert_eq!(
            closed(r#"{"a": 1, "b": {"c": [1, 2"#, false).as_deref(),
            Some(r#"{"a": 1, "b": {"c": [1]}}"#)
        );
        assert_eq!(
            closed(r#"{"a": 1, "b"#, false).as_deref(),
            Some(r#"{"a": 1}"#)
        );
        assert_eq!(closed(r#"{"a": "x, y"#, false).as_deref(), Some("{}"));
        assert_eq!(
            closed(r#"[{"a":"}]"},"#, false).as_deref(),
            Some(r#"[{"a":"}]"}]"#)
        );
        assert_eq!(closed(r#"["\"", "\\"#, false).as_deref(), Some(r#"["\""]"#));
        // Whole values are not cut; scalars alone open nothing.
        assert_eq!(closed(r#"{"a": 1}"#, false), None);
        assert_eq!(closed(r#"{"a": 1} {"#, false), None);
        assert_eq!(closed("12", false), None);
        assert_eq!(closed("\"abc", true), None);
    }

    #[test]
    fn an_open_string_value_is_kept_when_asked() {
        assert_eq!(
            closed(r#"{"type":"text","text":"[{\"id\": 1"#, true).as_deref(),
            Some(r#"{"type":"text","text":"[{\"id\": 1"}"#)
        );
        // A cut escape is dropped; a key is never kept open.
        for (text, want) in [
            (r#"{"t":"ab\"#, r#"{"t":"ab"}"#),
            (r#"{"t":"ab\\"#, r#"{"t":"ab\\"}"#),
            (r#"{"t":"ab\u00"#, r#"{"t":"ab"}"#),
            (r#"{"t":"ab\ud83d"#, r#"{"t":"ab"}"#),
            (r#"{"t":"ab\ud83d\ude0"#, r#"{"t":"ab"}"#),
            (r#"{"t":"ab\ud83d\ude00"#, r#"{"t":"ab\ud83d\ude00"}"#),
            (r#"{"t":"ab\\u00"#, r#"{"t":"ab\\u00"}"#),
            (r#"{"t":1,"ke"#, r#"{"t":1}"#),
        ] {
            let got = closed(text, true).expect(text);
            assert_eq!(got, want, "{text}");
            serde_json::from_str::<serde_json::Value>(&got).expect(text);
        }
    }

    #[test]
    fn markers_are_taken_off_exactly() {
        assert_eq!(
            strip_marker("[1, 2...[truncated]"),
            Some(("[1, 2", "...[truncated]"))
        );
        assert_eq!(
            strip_marker("[1, 2 ... [truncated]\n"),
            Some(("[1, 2 ", "... [truncated]"))
        );
        assert_eq!(
            strip_marker("{\"a\n[Output truncated]"),
            Some(("{\"a\n", "[Output truncated]"))
        );
        assert_eq!(
            strip_marker("[1, 2 ... (truncated)"),
            Some(("[1, 2 ", "... (truncated)"))
        );
        assert_eq!(strip_marker("[1, 2 (TRUNCATED)"), None);
        assert_eq!(strip_marker("[1, 2]"), None);
    }

    #[test]
    fn toolathlon_note_is_taken_off_and_said() {
        let kept = r#"{"type":"text","text":"[\n  {\n    \"id\": 153,\n    \"na"#;
        let text = format!(
            "{kept} ...\n\n(The output of the tool call (shortuuid identifier: 62X4ijTzv9PiQhtmB8X7aN) is too long! Only the first 100000 characters are shown here. The original output length is 149463 characters. The full output has been saved to the file /workspace/dumps/workspace/.overlong_tool_outputs/62X4ijTzv9PiQhtmB8X7aN.json. Please check this file carefully, as it may be very long!)"
        );
        let u = harness_note(&text, &|at| Some(at)).expect("note");
        assert_eq!(u.inner, kept);
        assert_eq!(u.offset, Some(0));
        assert!(
            u.notes[0].contains("first 100000 of 149463 characters"),
            "{:?}",
            u.notes
        );
        // Another sentence, another number form: not the note.
        let other = text.replace("149463 characters.", "many characters.");
        assert!(harness_note(&other, &|at| Some(at)).is_none());
        assert!(harness_note("plain text", &|at| Some(at)).is_none());
    }
}
