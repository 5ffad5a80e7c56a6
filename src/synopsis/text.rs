//! The `text` kind, the final fallback: logs, prose, man pages, tracebacks,
//! diffs. Counts, section headers, and an opening and a closing excerpt;
//! never the full text, and no LLM.

use super::lines::{clip, collapse_whitespace, count_words, line_breaks, split_lines};
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

/// The counts and headers are gathered a block of lines at a time, every
/// pass over a block while it is still in cache: on a 10 MB output, five
/// passes over the whole text each came from memory, and 10x the input took
/// 13-15x the time.
const BLOCK_BYTES: usize = 256 * 1024;

pub fn summarize(input: &Input<'_>) -> Synopsis {
    let text = input.text;
    let mut headers = Vec::new();
    let (mut chars, mut words, mut breaks) = (0, 0, 0);
    for block in line_blocks(text, BLOCK_BYTES) {
        section_headers(block, &mut headers);
        chars += block.chars().count();
        // Blocks end after a `\n`, so no word and no `\r\n` spans two.
        words += count_words(block);
        breaks += line_breaks(block);
    }
    // As `count_lines`: a last line without a break counts too.
    let lines = breaks + usize::from(!text.is_empty() && !text.ends_with(['\n', '\r']));

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

/// `text` cut into pieces of about `size` bytes, each ending just after a
/// `\n` (the last one where the text ends), so no line and no `\r\n` is cut.
fn line_blocks(text: &str, size: usize) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = rest
            .as_bytes()
            .get(size..)
            .and_then(|tail| memchr::memchr(b'\n', tail))
            .map_or(rest.len(), |i| size + i + 1);
        let (block, tail) = rest.split_at(end);
        rest = tail;
        Some(block)
    })
}

/// Adds the Markdown headings and capitalised title lines of `text` to
/// `headers`, de-duplicated, in order of first occurrence, up to
/// [`HEADER_LIMIT`].
fn section_headers(text: &str, headers: &mut Vec<String>) {
    if headers.len() >= HEADER_LIMIT {
        return;
    }
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
    fn blocks_end_after_a_newline_and_cover_the_text() {
        let text = "ab\r\ncd\n\nef\rgh\nij";
        for size in 0..text.len() + 2 {
            let blocks: Vec<&str> = line_blocks(text, size).collect();
            assert_eq!(blocks.concat(), text, "size {size}");
            for b in &blocks[..blocks.len() - 1] {
                assert!(b.ends_with('\n'), "size {size}: {blocks:?}");
            }
        }
    }

    /// Counted a block at a time or all at once, the summary is the same.
    #[test]
    fn block_counts_match_whole_text_counts() {
        let mut text = String::new();
        for i in 0..20_000 {
            text.push_str(&format!("line {i} caf\u{e9}\u{a0}word  tab\tend\r\n"));
            if i % 500 == 0 {
                text.push_str(&format!("SECTION NUMBER {i}\n# Heading {}\n", i % 3));
            }
        }
        let s = summarize(&Input::new(&text, "", 10));
        let mut headers = Vec::new();
        section_headers(&text, &mut headers);
        assert_eq!(
            s.summary[1],
            format!("Characters: {}.", text.chars().count())
        );
        assert_eq!(
            s.summary[2],
            format!("Words: {}.", text.split_whitespace().count())
        );
        assert_eq!(
            s.summary[3],
            format!("Lines: {}.", super::super::lines::count_lines(&text))
        );
        assert_eq!(
            s.summary[4],
            format!("Detected section headers: {}.", headers.join(" | "))
        );
        assert!(text.len() > 2 * BLOCK_BYTES);
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
