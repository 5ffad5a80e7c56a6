//! The `text` kind, the final fallback: logs, prose, man pages, tracebacks,
//! diffs. Counts, section headers, and an opening and a closing excerpt;
//! never the full text, and no LLM.

use super::lines::{clip, collapse_whitespace, count_lines, split_lines};
use super::{Input, Kind, Synopsis};

/// Section headers listed at most.
const HEADER_LIMIT: usize = 18;
/// Each header is shown with at most this many characters.
const HEADER_CHARS: usize = 160;
/// The headers line as a whole stays under this many characters, so that
/// with default settings a text stub stays under 5,000 characters.
const HEADERS_LINE_CHARS: usize = 2400;
/// The opening and closing excerpts cover this many characters each.
const EXCERPT_CHARS: usize = 500;

pub fn summarize(input: &Input<'_>) -> Synopsis {
    let text = input.text;
    let headers = section_headers(text);
    let chars = text.chars().count();
    let words = text.split_whitespace().count();
    let lines = count_lines(text);

    let head_end = text
        .char_indices()
        .nth(EXCERPT_CHARS)
        .map_or(text.len(), |(i, _)| i);
    let tail_start = if chars > EXCERPT_CHARS {
        text.char_indices()
            .rev()
            .nth(EXCERPT_CHARS - 1)
            .map_or(0, |(i, _)| i)
    } else {
        0
    };
    let opening = collapse_whitespace(&text[..head_end], EXCERPT_CHARS);
    let closing = collapse_whitespace(&text[tail_start..], EXCERPT_CHARS);
    let or_empty = |s: String| {
        if s.is_empty() {
            "(empty)".to_string()
        } else {
            s
        }
    };

    let headers_line = if headers.is_empty() {
        "none detected".to_string()
    } else {
        clip(&headers.join(" | "), HEADERS_LINE_CHARS)
    };
    let mut s = Synopsis::new(Kind::Text, "Text output");
    s.summary = vec![
        "Text exploration summary:".to_string(),
        format!("Characters: {chars}."),
        format!("Words: {words}."),
        format!("Lines: {lines}."),
        format!("Detected section headers: {headers_line}."),
        format!("Opening excerpt: {}.", or_empty(opening)),
        format!("Closing excerpt: {}.", or_empty(closing)),
    ];
    s
}

/// Markdown headings and capitalised title lines, de-duplicated, in order of
/// first occurrence, at most [`HEADER_LIMIT`].
fn section_headers(text: &str) -> Vec<String> {
    let mut headers: Vec<String> = Vec::new();
    for line in split_lines(text) {
        let line = line.trim();
        if line.len() <= 1 || !(is_markdown_heading(line) || is_title_line(line)) {
            continue;
        }
        let header = collapse_whitespace(line, HEADER_CHARS);
        if !headers.contains(&header) {
            headers.push(header);
            if headers.len() >= HEADER_LIMIT {
                break;
            }
        }
    }
    headers
}

/// `#` to `######` followed by whitespace.
fn is_markdown_heading(line: &str) -> bool {
    let hashes = line.bytes().take_while(|&b| b == b'#').count();
    (1..=6).contains(&hashes) && line[hashes..].starts_with(char::is_whitespace)
}

/// `^[A-Z0-9][A-Z0-9\s:_-]{6,}$`: upper-case titles such as `SYSTEM STATUS`.
fn is_title_line(line: &str) -> bool {
    let mut chars = line.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    if !(first.is_ascii_uppercase() || first.is_ascii_digit()) {
        return false;
    }
    let mut rest = 0usize;
    for c in chars {
        if !(c.is_ascii_uppercase()
            || c.is_ascii_digit()
            || c.is_whitespace()
            || matches!(c, ':' | '_' | '-'))
        {
            return false;
        }
        rest += 1;
    }
    rest >= 6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_markdown_and_title_lines() {
        let s = summarize(&Input::new(
            "# Heading\n\nSYSTEM STATUS\n\nThis is a paragraph.\n\n# Heading\nSHORT\n",
            "",
            10,
        ));
        assert_eq!(
            s.summary[4],
            "Detected section headers: # Heading | SYSTEM STATUS."
        );
    }

    #[test]
    fn excerpts_cover_500_characters_each() {
        let text = format!(
            "{}\n\nmiddle section\n\n{}",
            "A".repeat(600),
            "Z".repeat(600)
        );
        let s = summarize(&Input::new(&text, "", 10));
        assert_eq!(
            s.summary[5],
            format!("Opening excerpt: {}.", "A".repeat(500))
        );
        assert_eq!(
            s.summary[6],
            format!("Closing excerpt: {}.", "Z".repeat(500))
        );
    }

    #[test]
    fn counts() {
        let s = summarize(&Input::new("one two\nthree\n", "", 10));
        assert_eq!(
            &s.summary[1..4],
            ["Characters: 14.", "Words: 3.", "Lines: 2."]
        );
    }
}
