//! Wrappers that coding agents put around a tool's real output, recognised
//! strictly and taken off so that the synopsis describes what is inside.
//!
//! A wrapper hides the content's kind: Claude Code's `Read` numbers every
//! line of a file (a pretty-printed JSON file became `text` with an excerpt of
//! numbers and braces, a Python file or a CSV a two-column `tsv`), and Codex
//! puts a header of its own before a command's output (a `curl | jq` result
//! was not `json`). Here a wrapper is recognised from its exact form only,
//! its inner content is taken out, and the caller describes that content with
//! the normal detection; the wrapper is said in the synopsis's first summary
//! lines (exit code and token count included), never lost.
//!
//! The forms, as the agents write them (checked against Claude Code 2.1.328
//! and openai/codex's sources, see the tests):
//!
//! - **Numbered listing** (Claude Code's `Read`, `cat -n`): every line is
//!   `<number><separator><line>`. The numbers count up by one from any start
//!   (a `Read` with an offset starts past 1), all written alike: either
//!   unpadded (`1\t`, Claude Code 2.1) or right-aligned in 6 columns
//!   (`     1\t`, `cat -n` and older Claude Code), wider numbers unpadded. The
//!   separator is one TAB, or one `→` (older Claude Code), the same on every
//!   line; Claude Code writes `:` instead when the file has lines starting
//!   with a TAB, so `:` is taken only then (a `grep -n` of one file is not a
//!   listing). The listing may be preceded by `<system-reminder>` blocks or
//!   `[...]` notes and followed, after a blank line, by such notes; those are
//!   said apart, not taken for the file. Anything else (a header row, a
//!   missing or repeated number, another padding or separator) means the text
//!   is not a listing: a real table whose first column counts 1, 2, 3 keeps
//!   its header row, so it stays a table; without a header it reads as a
//!   listing of the rest, which is still the same table minus that column.
//! - **Codex `exec_command` / `write_stdin`**: `[Command: ...]`, `[Chunk ID:
//!   x]`, `Wall time: N seconds`, `[Process exited with code N]`, `[Process
//!   running with session ID N]`, `[Original token count: N]`, then
//!   `Output:` and the output, in that order, one header per line.
//! - **Codex freeform shell**: `Exit code: N`, `Wall time: N seconds`,
//!   `[Total output lines: N]`, `Output:`, then the output.
//! - **Codex structured shell**: exactly `{"output": "...", "metadata":
//!   {"exit_code": N, "duration_seconds": N}}` (compact JSON, no other keys
//!   but an optional `hint`).
//! - **Claude Code `Bash` failure**: a first line `Exit code N`, then the
//!   command's stderr and stdout.
//!
//! Codex's own truncation header at the start of an output (`Total output
//! lines: N` and a blank line) is said and skipped too.
//!
//! Recognising costs a look at the first bytes for any other text; taking a
//! wrapper off copies nothing but a listing (its lines without their numbers,
//! one pass) and a JSON-escaped output (decoded once).

use super::lines::{clip_line, collapse_whitespace};
use std::borrow::Cow;

/// A `<system-reminder>` or `[...]` note before or after a listing is at most
/// this long; a longer one means the text is something else.
const NOTE_BYTES: usize = 8 * 1024;
/// At most this many notes precede a listing.
const PREAMBLE_NOTES: usize = 4;
/// A note is quoted in the synopsis with at most this many characters.
const NOTE_EXCERPT_CHARS: usize = 100;
/// A Codex `Command:` line (which may hold line breaks) is looked for in
/// this many bytes at most.
const COMMAND_BYTES: usize = 8 * 1024;
/// A Codex command is quoted with at most this many characters.
const COMMAND_CHARS: usize = 160;
/// Cat -n right-aligns line numbers in this many columns.
const CAT_N_WIDTH: usize = 6;

/// A wrapper taken off: the content inside and what the synopsis says of the
/// wrapper.
#[derive(Debug)]
pub(crate) struct Unwrapped<'a> {
    pub inner: Cow<'a, str>,
    /// Summary lines to put first, each within the line cap.
    pub notes: Vec<String>,
    /// Whether the content may itself be wrapped (a command's output may be a
    /// `cat -n` listing; a listed file is described as it is).
    pub may_nest: bool,
    /// Where the content starts in the original as sent, in characters, when
    /// it is a verbatim part of it (a command's output; not a listing's lines
    /// without their numbers, nor a JSON-escaped output).
    pub offset: Option<usize>,
}

/// Where byte `at` of the text being unwrapped sits in the original as sent,
/// in characters; `None` when that is not known exactly (ANSI escapes were
/// taken out before it).
pub(crate) type OffsetOf<'f> = &'f dyn Fn(usize) -> Option<usize>;

/// The wrapper around `text`, if it has one of the forms above.
pub(crate) fn unwrap<'a>(text: &'a str, offset_of: OffsetOf<'_>) -> Option<Unwrapped<'a>> {
    let first = *text.as_bytes().first()?;
    match first {
        b'{' => codex_structured(text),
        b'C' | b'W' => codex_exec(text, offset_of),
        b'E' => codex_freeform(text, offset_of).or_else(|| claude_bash_failure(text, offset_of)),
        b' ' | b'1'..=b'9' | b'<' | b'[' => numbered_listing(text),
        _ => None,
    }
}

// ------------------------------------------------------------ numbered listing

/// How a listing writes its numbers, fixed by its first line.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Style {
    /// Right-aligned in [`CAT_N_WIDTH`] columns (else unpadded).
    padded: bool,
    separator: char,
}

/// How one numbered line writes its number.
struct Numbered {
    number: u64,
    spaces: usize,
    digits: usize,
    separator: char,
}

/// `<spaces><digits><separator>` at the start of `line` (only these bytes
/// are read).
fn numbered(line: &str) -> Option<Numbered> {
    let bytes = line.as_bytes();
    let spaces = bytes.iter().take_while(|&&b| b == b' ').count();
    if spaces >= CAT_N_WIDTH {
        return None;
    }
    let digits = bytes[spaces..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    // No leading zero; at most 12 digits (a trillion lines is no listing).
    if digits == 0 || digits > 12 || bytes[spaces] == b'0' {
        return None;
    }
    let number = line[spaces..spaces + digits].parse().ok()?;
    let after = &line[spaces + digits..];
    let separator = after.chars().next()?;
    if !matches!(separator, '\t' | '\u{2192}' | ':') {
        return None;
    }
    Some(Numbered {
        number,
        spaces,
        digits,
        separator,
    })
}

impl Style {
    fn of(line: &Numbered) -> Style {
        Style {
            padded: line.spaces > 0,
            separator: line.separator,
        }
    }

    /// Whether `line` writes its number the way this listing does.
    fn fits(self, line: &Numbered) -> bool {
        let spaces = if self.padded {
            CAT_N_WIDTH.saturating_sub(line.digits)
        } else {
            0
        };
        line.spaces == spaces && line.separator == self.separator
    }
}

/// Claude Code's `Read` result or `cat -n` output (see the module comment).
fn numbered_listing(text: &str) -> Option<Unwrapped<'_>> {
    let (before, body) = preamble(text)?;
    let bytes = body.as_bytes();
    let head = numbered(body)?;
    let style = Style::of(&head);
    if !style.fits(&head) {
        return None;
    }
    let first = head.number;
    let mut prefix = Prefix::new(style, &bytes[head.spaces..head.spaces + head.digits])?;
    let mut inner = String::with_capacity(body.len());
    let mut count = 0u64;
    let mut tab_led = false;
    let mut after = None;
    let mut newlines = memchr::memchr_iter(b'\n', bytes);
    let mut pos = 0;
    while pos < body.len() {
        let start = pos + prefix.len;
        let fits = prefix.starts(&bytes[pos..]);
        if !fits {
            // A blank line ends the listing (an empty line of the file is
            // numbered); only notes may follow it.
            if bytes[pos] != b'\n' {
                return None;
            }
            let rest = body[pos..].trim_start_matches(['\n', '\r']);
            if !rest.is_empty() {
                if rest.len() > NOTE_BYTES || !rest.starts_with(['<', '[']) {
                    return None;
                }
                // The line break before the blank line separates; it is
                // not the file's.
                inner.pop();
                after = Some(rest);
            }
            break;
        }
        // The prefix holds no line break, so the next one ends this line.
        // `start` follows ASCII digits and a whole separator: a boundary.
        let end = newlines.next().unwrap_or(body.len());
        tab_led |= bytes.get(start) == Some(&b'\t');
        // The line with its line break, in one copy.
        inner.push_str(&body[start..(end + 1).min(body.len())]);
        prefix.count_up()?;
        count += 1;
        pos = end + 1;
    }
    // One line is a listing only from line 1 (`4\t./dir` is `du`).
    if count == 0 || (count == 1 && first != 1) {
        return None;
    }
    // Claude Code writes `:` only for files with TAB-led lines.
    if style.separator == ':' && (style.padded || !tab_led) {
        return None;
    }
    let last = first + count - 1;
    let span = if count == 1 {
        format!("line {first}")
    } else {
        format!("lines {first} to {last}")
    };
    let mut notes = vec![clip_line(format!(
        "Numbered listing (cat -n style) of {span}; the file inside is described below."
    ))];
    if let Some(note) = before {
        notes.push(note_line("Before the listing", note));
    }
    if let Some(note) = after {
        notes.push(note_line("After the listing", note));
    }
    Some(Unwrapped {
        inner: Cow::Owned(inner),
        notes,
        may_nest: false,
        offset: None,
    })
}

/// What the next line of a listing must start with: its padding, its
/// number and the separator, as one little-endian 16-byte word compared at
/// once and counted up in place: a listing has a line every 20 to 40 bytes,
/// and parsing each number (or comparing three slices) cost as much as the
/// rest of the pass. The number is counted up in the word itself; writing
/// bytes and reading them back as a word stalled on every line.
struct Prefix {
    /// The prefix's bytes, zero past `len`.
    word: u128,
    mask: u128,
    len: usize,
    digits: usize,
    style: Style,
}

impl Prefix {
    fn new(style: Style, digits: &[u8]) -> Option<Prefix> {
        let pad = if style.padded {
            CAT_N_WIDTH.saturating_sub(digits.len())
        } else {
            0
        };
        let mut separator = [0u8; 4];
        let separator = style.separator.encode_utf8(&mut separator).as_bytes();
        let len = pad + digits.len() + separator.len();
        if len > 16 {
            return None;
        }
        let mut bytes = [0u8; 16];
        bytes[..pad].fill(b' ');
        bytes[pad..pad + digits.len()].copy_from_slice(digits);
        bytes[pad + digits.len()..len].copy_from_slice(separator);
        let mask = if len == 16 {
            u128::MAX
        } else {
            (1u128 << (8 * len)) - 1
        };
        Some(Prefix {
            word: u128::from_le_bytes(bytes),
            mask,
            len,
            digits: digits.len(),
            style,
        })
    }

    /// Whether `text` starts with this prefix.
    fn starts(&self, text: &[u8]) -> bool {
        match text.get(..16) {
            Some(chunk) => {
                let mut word = [0u8; 16];
                word.copy_from_slice(chunk);
                u128::from_le_bytes(word) & self.mask == self.word
            }
            None => text.get(..self.len) == self.word.to_le_bytes().get(..self.len),
        }
    }

    /// The prefix of the line after: the number plus one (a number that
    /// gains a digit loses a space of padding).
    fn count_up(&mut self) -> Option<()> {
        let end = self.len - self.style.separator.len_utf8();
        for i in (end - self.digits..end).rev() {
            let shift = 8 * i as u32;
            if (self.word >> shift) as u8 == b'9' {
                // '9' becomes '0', and the carry goes on.
                self.word -= 9u128 << shift;
            } else {
                self.word += 1u128 << shift;
                return Some(());
            }
        }
        let mut digits = vec![b'0'; self.digits + 1];
        digits[0] = b'1';
        *self = Prefix::new(self.style, &digits)?;
        Some(())
    }
}

/// The notes before a listing (`<system-reminder>...</system-reminder>`
/// blocks, `[...]` lines followed by a blank line) and the text after them.
fn preamble(text: &str) -> Option<(Option<&str>, &str)> {
    let mut rest = text;
    for _ in 0..PREAMBLE_NOTES {
        let end = if rest.starts_with("<system-reminder>") {
            let window = &rest.as_bytes()[..rest.len().min(NOTE_BYTES)];
            memchr::memmem::find(window, b"</system-reminder>")? + "</system-reminder>".len()
        } else if rest.starts_with('[') {
            let window = &rest.as_bytes()[..rest.len().min(NOTE_BYTES)];
            let end = memchr::memchr(b'\n', window)?;
            if !rest[..end].ends_with(']') || !rest[end..].starts_with("\n\n") {
                return None;
            }
            end
        } else {
            break;
        };
        rest = rest[end..].strip_prefix('\n').unwrap_or(&rest[end..]);
        rest = rest.strip_prefix('\n').unwrap_or(rest);
    }
    let before = text[..text.len() - rest.len()].trim_end();
    if before.len() > NOTE_BYTES {
        return None;
    }
    Some(((!before.is_empty()).then_some(before), rest))
}

/// `Before the listing: a note of 312 characters, not part of the file: ...`.
fn note_line(place: &str, note: &str) -> String {
    let chars = note.chars().count();
    clip_line(format!(
        "{place}: a note of {chars} characters, not part of the file: {}",
        collapse_whitespace(note, NOTE_EXCERPT_CHARS)
    ))
}

// ------------------------------------------------------------ command outputs

/// What a command wrapper says of the command, in its summary line.
#[derive(Default)]
struct Command<'a> {
    exit_code: Option<&'a str>,
    session: Option<&'a str>,
    tokens: Option<&'a str>,
    duration: Option<String>,
    command: Option<&'a str>,
}

impl Command<'_> {
    /// The wrapper's notes for an output that starts at `offset` characters
    /// into the text (`None` when the output was JSON-escaped).
    fn notes(&self, what: &str, offset: Option<usize>) -> Vec<String> {
        let mut facts = Vec::new();
        if let Some(code) = self.exit_code {
            facts.push(format!("exit code {code}"));
        }
        if let Some(session) = self.session {
            facts.push(format!("still running as session {session}"));
        }
        if let Some(duration) = &self.duration {
            facts.push(format!("duration {duration} seconds"));
        }
        if let Some(tokens) = self.tokens {
            facts.push(format!("original token count {tokens}"));
        }
        let facts = if facts.is_empty() {
            String::new()
        } else {
            format!(" ({})", facts.join(", "))
        };
        let place = offset.map_or(String::new(), |o| format!(", from character {o} on,"));
        let mut notes = vec![clip_line(format!(
            "{what}{facts}; the output inside{place} is described below."
        ))];
        if let Some(command) = self.command {
            notes.push(clip_line(format!(
                "Command: {}",
                collapse_whitespace(command, COMMAND_CHARS)
            )));
        }
        notes
    }
}

/// Codex's `exec_command` / `write_stdin` result.
fn codex_exec<'a>(text: &'a str, offset_of: OffsetOf<'_>) -> Option<Unwrapped<'a>> {
    let mut rest = text;
    let mut c = Command::default();
    if let Some(after) = rest.strip_prefix("Command: ") {
        // A quoted command may hold line breaks: it ends before the next header.
        let window = &after.as_bytes()[..after.len().min(COMMAND_BYTES)];
        let end = [&b"\nChunk ID: "[..], b"\nWall time: "]
            .iter()
            .filter_map(|h| memchr::memmem::find(window, h))
            .min()?;
        c.command = Some(&after[..end]);
        rest = &after[end + 1..];
    }
    if let Some((id, after)) = header(rest, "Chunk ID: ") {
        if id.is_empty()
            || id.len() > 64
            || !id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return None;
        }
        rest = after;
    }
    let (wall, after) = header(rest, "Wall time: ")?;
    seconds(wall.strip_suffix(" seconds")?)?;
    rest = after;
    if let Some((code, after)) = header(rest, "Process exited with code ") {
        c.exit_code = Some(integer(code)?);
        rest = after;
    }
    if let Some((session, after)) = header(rest, "Process running with session ID ") {
        if session.is_empty()
            || !session
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return None;
        }
        c.session = Some(session);
        rest = after;
    }
    if let Some((tokens, after)) = header(rest, "Original token count: ") {
        c.tokens = Some(count(tokens)?);
        rest = after;
    }
    let output = output_section(rest)?;
    Some(command_output(text, output, &c, offset_of))
}

/// Codex's freeform shell result: `Exit code: N`, `Wall time: N seconds`,
/// optionally `Total output lines: N`, `Output:`.
fn codex_freeform<'a>(text: &'a str, offset_of: OffsetOf<'_>) -> Option<Unwrapped<'a>> {
    let mut c = Command::default();
    let (code, rest) = header(text, "Exit code: ")?;
    c.exit_code = Some(integer(code)?);
    let (wall, mut rest) = header(rest, "Wall time: ")?;
    seconds(wall.strip_suffix(" seconds")?)?;
    let mut total = None;
    if let Some((lines, after)) = header(rest, "Total output lines: ") {
        total = Some(count(lines)?);
        rest = after;
    }
    let output = output_section(rest)?;
    let mut unwrapped = command_output(text, output, &c, offset_of);
    if let Some(lines) = total {
        unwrapped.notes.push(truncated_note(lines));
    }
    Some(unwrapped)
}

/// Claude Code's `Bash` result for a failed command: `Exit code N`, then the
/// command's stderr and stdout.
fn claude_bash_failure<'a>(text: &'a str, offset_of: OffsetOf<'_>) -> Option<Unwrapped<'a>> {
    let (code, output) = header(text, "Exit code ")?;
    let c = Command {
        exit_code: Some(integer(code)?),
        ..Command::default()
    };
    (!output.is_empty()).then(|| command_output(text, output, &c, offset_of))
}

/// Codex's structured shell result, compact JSON with exactly these fields.
fn codex_structured(text: &str) -> Option<Unwrapped<'_>> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Structured<'a> {
        #[serde(borrow)]
        output: Cow<'a, str>,
        metadata: Metadata,
        #[serde(default, rename = "hint")]
        _hint: Option<serde::de::IgnoredAny>,
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Metadata {
        exit_code: i64,
        duration_seconds: f64,
    }
    if !text.starts_with("{\"output\":\"") {
        return None;
    }
    let s: Structured<'_> = serde_json::from_str(text).ok()?;
    let exit_code = s.metadata.exit_code.to_string();
    let c = Command {
        exit_code: Some(&exit_code),
        duration: Some(s.metadata.duration_seconds.to_string()),
        ..Command::default()
    };
    let mut notes = c.notes("Command output as Codex JSON", None);
    let (skip, truncated) = {
        let (inner, total) = codex_truncation(&s.output);
        (s.output.len() - inner.len(), total.map(truncated_note))
    };
    notes.extend(truncated);
    let inner = match s.output {
        Cow::Borrowed(output) => Cow::Borrowed(&output[skip..]),
        Cow::Owned(mut output) => {
            output.drain(..skip);
            Cow::Owned(output)
        }
    };
    Some(Unwrapped {
        inner,
        notes,
        may_nest: true,
        offset: None,
    })
}

/// The wrapper of a command's `output` inside `text`, Codex's truncation
/// header taken off and said; where the output starts is said when known.
fn command_output<'a>(
    text: &'a str,
    output: &'a str,
    c: &Command<'_>,
    offset_of: OffsetOf<'_>,
) -> Unwrapped<'a> {
    let (inner, truncated) = codex_truncation(output);
    let offset = offset_of(text.len() - inner.len());
    let mut notes = c.notes("Command output", offset);
    if let Some(lines) = truncated {
        notes.push(truncated_note(lines));
    }
    Unwrapped {
        inner: Cow::Borrowed(inner),
        notes,
        may_nest: true,
        offset,
    }
}

/// Codex's header on an output it cut to its head and tail: `Total output
/// lines: N` (after `Warning: truncated output (original token count: N)` in
/// some versions), then a blank line. The output after it, and N.
fn codex_truncation(output: &str) -> (&str, Option<&str>) {
    let rest = match header(output, "Warning: truncated output (original token count: ") {
        Some((tokens, after)) if tokens.strip_suffix(')').and_then(count).is_some() => after,
        Some(_) => return (output, None),
        None => output,
    };
    match header(rest, "Total output lines: ") {
        Some((lines, after)) if count(lines).is_some() && after.starts_with('\n') => {
            (&after[1..], Some(lines))
        }
        _ => (output, None),
    }
}

fn truncated_note(lines: &str) -> String {
    clip_line(format!(
        "Codex kept only the head and tail of this output ({lines} lines in full); the middle is missing."
    ))
}

/// The rest of `text` after `Output:` and its line break (or its end).
fn output_section(text: &str) -> Option<&str> {
    let rest = text.strip_prefix("Output:")?;
    if rest.is_empty() {
        return Some(rest);
    }
    rest.strip_prefix('\n')
}

/// A header line `prefix` + value: the value and the text after the line.
fn header<'a>(text: &'a str, prefix: &str) -> Option<(&'a str, &'a str)> {
    let rest = text.strip_prefix(prefix)?;
    // Headers are short; a missing line break within 256 bytes means no header.
    let window = &rest.as_bytes()[..rest.len().min(256)];
    let end = memchr::memchr(b'\n', window)?;
    Some((&rest[..end], &rest[end + 1..]))
}

/// `-?[0-9]{1,20}`.
fn integer(s: &str) -> Option<&str> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    count(digits).map(|_| s)
}

/// `[0-9]{1,20}`.
fn count(s: &str) -> Option<&str> {
    (!s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit())).then_some(s)
}

/// `[0-9]+(\.[0-9]+)?`.
fn seconds(s: &str) -> Option<&str> {
    let (whole, fraction) = s.split_once('.').unwrap_or((s, "0"));
    (count(whole).is_some() && count(fraction).is_some()).then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `unwrap` of a text that is the original as sent.
    fn unwrap(text: &str) -> Option<Unwrapped<'_>> {
        super::unwrap(text, &|at| Some(text[..at].chars().count()))
    }

    fn inner(text: &str) -> Option<String> {
        unwrap(text).map(|u| u.inner.into_owned())
    }

    fn notes(text: &str) -> Vec<String> {
        unwrap(text).map(|u| u.notes).unwrap_or_default()
    }

    /// Claude Code 2.1.328's `Read` of a JSON file, as captured through a mock
    /// upstream: unpadded numbers, a TAB, no trailing line break.
    #[test]
    fn claude_code_read_listing() {
        let text = "1\t{\n2\t  \"users\": [\n3\t    {\"id\": 0}\n4\t  ],\n5\t  \"meta\": {\"count\": 3}\n6\t}";
        assert_eq!(
            inner(text).as_deref(),
            Some("{\n  \"users\": [\n    {\"id\": 0}\n  ],\n  \"meta\": {\"count\": 3}\n}")
        );
        assert_eq!(
            notes(text),
            ["Numbered listing (cat -n style) of lines 1 to 6; the file inside is described below."]
        );
    }

    /// A file ending in a line break: Claude Code numbers the empty last line.
    #[test]
    fn empty_last_line_is_the_final_line_break() {
        assert_eq!(
            inner("1\tname\tscore\n2\tAda\t99\n3\t").as_deref(),
            Some("name\tscore\nAda\t99\n")
        );
    }

    #[test]
    fn cat_n_and_arrow_listings() {
        let cat = "     1\timport os\n     2\t\n     3\tdef main():\n     4\t    pass\n";
        assert_eq!(
            inner(cat).as_deref(),
            Some("import os\n\ndef main():\n    pass\n")
        );
        let arrow = "     9\u{2192}a\n    10\u{2192}b\n    11\u{2192}c";
        assert_eq!(inner(arrow).as_deref(), Some("a\nb\nc"));
        assert!(notes(arrow)[0].contains("lines 9 to 11"));
        // Past six digits the numbers are not padded.
        let wide = "999999\ta\n1000000\tb";
        assert_eq!(inner(wide).as_deref(), Some("a\nb"));
    }

    #[test]
    fn notes_before_and_after_are_said_apart() {
        let text = "<system-reminder>This memory is 3 days old.</system-reminder>\n1\tx = 1\n2\ty = 2\n\n<system-reminder>\nWhenever you read a file, consider whether it is malware.\n</system-reminder>\n";
        let u = unwrap(text).expect("listing");
        assert_eq!(u.inner, "x = 1\ny = 2");
        assert_eq!(u.notes.len(), 3);
        assert!(
            u.notes[1].starts_with("Before the listing: a note of 61 characters"),
            "{:?}",
            u.notes
        );
        assert!(
            u.notes[2].starts_with("After the listing: a note of"),
            "{:?}",
            u.notes
        );
        assert!(
            u.notes[2].contains("Whenever you read a file"),
            "{:?}",
            u.notes
        );
        let bracket = "[This file is in a connector-downloads folder.]\n\n1\ta\n2\tb";
        assert_eq!(inner(bracket).as_deref(), Some("a\nb"));
    }

    #[test]
    fn colon_separator_only_for_tab_led_files() {
        assert_eq!(
            inner("1:\tindented\n2:plain").as_deref(),
            Some("\tindented\nplain")
        );
        // `grep -n pattern file` with consecutive matches is not a listing.
        assert!(unwrap("12:fn a() {\n13:fn b() {").is_none());
    }

    /// Texts that look numbered but are not listings.
    #[test]
    fn strict_numbering() {
        for text in [
            "id\tname\n1\tAda\n2\tLin",       // a header row
            "1\ta\n3\tb",                     // a gap
            "1\ta\n1\tb",                     // a repeat
            "     1\ta\n2\tb",                // padding changes
            "    1\ta\n    2\tb",             // padded to 5
            "1\ta\n2\u{2192}b",               // separator changes
            "1 a\n2 b",                       // a space is no separator
            "01\ta\n02\tb",                   // leading zeros
            "4\t./dir",                       // `du`: one line not from 1
            "1\ta\n2\tb\n\nplain text after", // a trailer that is no note
            "1\ta\n2\tb\nunnumbered",         // an unnumbered line
            "\t1\ta",                         // TAB-led
            "[1, 2]\n3\tx",                   // a bracket line without a blank line
        ] {
            assert!(unwrap(text).is_none(), "{text:?}");
        }
        // A headerless table numbered from 1 reads as a listing of the rest.
        assert_eq!(
            inner("1\tAda\t99\n2\tLin\t98").as_deref(),
            Some("Ada\t99\nLin\t98")
        );
    }

    /// The form of openai/codex `ExecCommandToolOutput::response_text`.
    #[test]
    fn codex_exec_command() {
        let text = "Chunk ID: 7dcbe2\nWall time: 0.0000 seconds\nProcess exited with code 0\nOriginal token count: 8\nOutput:\n{\"a\": 1}\n";
        let u = unwrap(text).expect("codex");
        assert_eq!(u.inner, "{\"a\": 1}\n");
        assert_eq!(
            u.notes,
            ["Command output (exit code 0, original token count 8); the output inside, from character 102 on, is described below."]
        );
        assert_eq!(&text[102..], "{\"a\": 1}\n");
        let running = "Command: bash -lc 'echo 1\necho 2'\nChunk ID: ab12\nWall time: 5.0019 seconds\nProcess running with session ID 55249\nOriginal token count: 2\nOutput:\n500/700\n";
        let u = unwrap(running).expect("codex");
        assert_eq!(u.inner, "500/700\n");
        assert!(
            u.notes[0].contains("still running as session 55249"),
            "{:?}",
            u.notes
        );
        assert_eq!(u.notes[1], "Command: bash -lc 'echo 1 echo 2'");
        assert_eq!(
            inner("Wall time: 1.5 seconds\nOutput:\n").as_deref(),
            Some("")
        );
        let cut = "Chunk ID: 1\nWall time: 0.1 seconds\nProcess exited with code 1\nOutput:\nTotal output lines: 4378\n\nhead\n…9 tokens truncated…\ntail\n";
        let u = unwrap(cut).expect("codex");
        assert_eq!(u.inner, "head\n…9 tokens truncated…\ntail\n");
        assert!(u.notes[1].contains("4378 lines in full"), "{:?}", u.notes);
    }

    #[test]
    fn codex_freeform_and_structured() {
        let free =
            "Exit code: 2\nWall time: 0.3 seconds\nTotal output lines: 900\nOutput:\nerror: x\n";
        let u = unwrap(free).expect("freeform");
        assert_eq!(u.inner, "error: x\n");
        assert!(
            u.notes[0].starts_with("Command output (exit code 2)"),
            "{:?}",
            u.notes
        );
        assert!(u.notes[1].contains("900 lines"), "{:?}", u.notes);
        let json =
            r#"{"output":"{\"k\": [1, 2]}\n","metadata":{"exit_code":0,"duration_seconds":0.1}}"#;
        let u = unwrap(json).expect("structured");
        assert_eq!(u.inner, "{\"k\": [1, 2]}\n");
        assert_eq!(
            u.notes,
            ["Command output as Codex JSON (exit code 0, duration 0.1 seconds); the output inside is described below."]
        );
        for not in [
            r#"{"output":"x","metadata":{"exit_code":0,"duration_seconds":0.1},"extra":1}"#,
            r#"{"output":"x","metadata":{"exit_code":0}}"#,
            r#"{"output":"x"}"#,
            r#"{"output":"x","metadata":{"exit_code":0,"duration_seconds":0.1}} trailing"#,
        ] {
            assert!(unwrap(not).is_none(), "{not}");
        }
    }

    /// Claude Code's `Bash` result for a failing command, as captured.
    #[test]
    fn claude_bash_failure_output() {
        let u = unwrap("Exit code 3\n1\n2\nerr").expect("bash");
        assert_eq!(u.inner, "1\n2\nerr");
        assert_eq!(
            u.notes,
            ["Command output (exit code 3); the output inside, from character 12 on, is described below."]
        );
    }

    #[test]
    fn ordinary_texts_have_no_wrapper() {
        for text in [
            "Exit code: see below\nWall time: 1 second\nOutput:\nx",
            "Wall time: 0.1 seconds\nno output section\n",
            "Chunk ID: x y\nWall time: 0.1 seconds\nOutput:\nz",
            "Exit codes are documented below.\n",
            "Exit code 3",
            "Command: ls\nsomething else",
            "{\"a\": 1}",
            "<root/>",
            "2026-11-30 INFO start",
            "",
        ] {
            assert!(unwrap(text).is_none(), "{text:?}");
        }
    }
}
