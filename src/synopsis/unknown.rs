//! The `unknown` kind: empty output, binary-like bytes, and structured output
//! whose declared MIME type did not parse. The only kind with a sample: a
//! head/tail excerpt within the effective preview budget, control characters
//! escaped so that the sample itself stays printable.

use super::lines::push_escaped;
use super::{Input, Kind, Synopsis};

/// How many leading characters the binary-like check looks at.
const BINARY_WINDOW: usize = 1000;

pub fn empty() -> Synopsis {
    let mut s = Synopsis::new(Kind::Unknown, "Empty output");
    s.summary.push("Output is empty.".to_string());
    s
}

/// NUL anywhere, or more than 5% of the first 1000 characters are control
/// characters other than `\n`, `\r`, `\t`. The replacement character U+FFFD
/// counts too: it is what invalid UTF-8 bytes become after lossy decoding, so
/// raw binary data is recognised even when it holds few control bytes.
pub fn looks_binary(text: &str) -> bool {
    memchr::memchr(0, text.as_bytes()).is_some() || looks_binary_without_nul(text)
}

/// [`looks_binary`] for a text known to hold no NUL byte: only the share of
/// control characters and replacement characters near the start is checked.
pub fn looks_binary_without_nul(text: &str) -> bool {
    let mut seen = 0usize;
    let mut suspicious = 0usize;
    for c in text.chars().take(BINARY_WINDOW) {
        seen += 1;
        let control = (c as u32) < 32 && !matches!(c, '\n' | '\r' | '\t');
        if control || c == '\u{fffd}' {
            suspicious += 1;
        }
    }
    // suspicious / seen > 5%
    suspicious * 20 > seen
}

pub fn binary(input: &Input<'_>) -> Synopsis {
    let chars = input.text.chars().count();
    let mut s = Synopsis::new(Kind::Unknown, "Binary-like output");
    s.summary.push(format!(
        "Binary-like output: {chars} characters including non-text control bytes."
    ));
    s.sample = head_tail_sample(input.text, input.preview_chars);
    s
}

/// Structured output (per its MIME type) that failed to parse.
pub fn unparsed(input: &Input<'_>, format: &str) -> Synopsis {
    let mut s = Synopsis::new(Kind::Unknown, &format!("Unparsed {format}-like output"));
    s.summary
        .push(format!("{format}-like output failed to parse as {format}."));
    s.sample = head_tail_sample(input.text, input.preview_chars);
    s
}

/// A head/tail excerpt of at most `budget` characters (after escaping), or
/// the whole text, escaped, when it fits.
pub fn head_tail_sample(text: &str, budget: usize) -> String {
    if budget == 0 {
        return String::new();
    }
    let whole = escape_up_to(text.chars(), budget + 1);
    if whole.chars().count() <= budget {
        return whole;
    }
    let half = (budget / 2).max(1);
    let head = escape_up_to(text.chars(), half);
    let tail_rev = escape_up_to_rev(text, half);
    format!(
        "--- BEGIN SAMPLE HEAD ---\n{head}\n--- END SAMPLE HEAD ---\n\n--- BEGIN SAMPLE TAIL ---\n{tail_rev}\n--- END SAMPLE TAIL ---"
    )
}

/// Escapes characters from `chars` until the escaped text would exceed `cap`.
fn escape_up_to(chars: impl Iterator<Item = char>, cap: usize) -> String {
    let mut out = String::new();
    let mut len = 0;
    let mut piece = String::new();
    for c in chars {
        piece.clear();
        push_sample_char(&mut piece, c);
        let n = piece.chars().count();
        if len + n > cap {
            break;
        }
        out.push_str(&piece);
        len += n;
    }
    out
}

/// The same from the end of the text, returned in reading order.
fn escape_up_to_rev(text: &str, cap: usize) -> String {
    let mut pieces: Vec<String> = Vec::new();
    let mut len = 0;
    for c in text.chars().rev() {
        let mut piece = String::new();
        push_sample_char(&mut piece, c);
        let n = piece.chars().count();
        if len + n > cap {
            break;
        }
        len += n;
        pieces.push(piece);
    }
    pieces.iter().rev().map(String::as_str).collect()
}

/// In a sample, line breaks and tabs stay as they are (the sample is a block of
/// text); every other control character is escaped.
fn push_sample_char(out: &mut String, c: char) {
    match c {
        '\n' | '\r' | '\t' => out.push(c),
        c => push_escaped(out, c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_fits_budget_after_escaping() {
        let nuls = "\0".repeat(5000);
        let s = head_tail_sample(&nuls, 100);
        let body: usize = s
            .lines()
            .filter(|l| !l.starts_with("---"))
            .map(|l| l.chars().count())
            .sum();
        assert!(body <= 100, "{body}");
        assert!(s.contains("\\u{0}"));
    }

    #[test]
    fn short_text_is_shown_whole() {
        assert_eq!(head_tail_sample("ab\u{1}", 30), "ab\\u{1}");
    }

    #[test]
    fn binary_check_follows_the_five_percent_rule() {
        assert!(looks_binary("a\0b"));
        let mut s = "x".repeat(95);
        s.push_str(&"\u{2}".repeat(5));
        assert!(!looks_binary(&s), "exactly 5% is not more than 5%");
        s.push('\u{2}');
        assert!(looks_binary(&s));
        assert!(!looks_binary("line\n\tindented\r\n"));
    }
}
