//! Pure text helpers of the store: cutting an original into chunks, code-point
//! arithmetic on byte slices, the FTS5 query builder and snippet cutting.
//! No SQLite here; everything is unit-tested at the bottom.

/// Target length of one stored chunk, in code points.
pub const CHUNK_CHARS: usize = 4096;
/// A chunk ends after the last whitespace within this many code points of the
/// target, so words are not cut across two FTS rows.
pub const BOUNDARY_WINDOW: usize = 256;
/// Chunk ids are `(blob_id << CHUNK_BITS) | seq`. The ranked-search SQL in
/// `reader.rs` spells this `rowid >> 20`: change both together.
pub const CHUNK_BITS: u32 = 20;
/// Most chunks one original may have.
pub const MAX_CHUNKS: usize = 1 << CHUNK_BITS;
/// Most query terms kept from a session-search query.
pub const MAX_TERMS: usize = 32;
/// At most this many of a session's matching passages are ranked, on both
/// backends: the newest ones (the newest original first, each from its
/// end). Ranking reads every candidate's term positions: on PostgreSQL
/// each chunk's ~4 KB tsvector (its text search keeps no positions in the
/// index), so ranking every match of a common word over 100 MB (~27k
/// chunks) took 600 ms; 1000 candidates (~4 MB of text) keep a search
/// under 50 ms on either. When fewer passages match, all are ranked: the
/// bound only matters for words found nearly everywhere, where recency is
/// the better prior for an agent anyway.
pub const RANK_CANDIDATES: usize = 1000;

/// One chunk of an original: its first code point's offset, its length in
/// code points and its text.
#[derive(Debug, PartialEq, Eq)]
pub struct Chunk<'a> {
    pub start_char: u64,
    pub chars: u64,
    pub text: &'a str,
}

/// Where a chunk may end when its window has no whitespace (minified JSON,
/// one long line of a log): punctuation both indexes split words at. Not
/// `.`, `/`, `-`, `_`, `:`, `@` or `=`, which PostgreSQL's parser keeps
/// inside one token of a host, path, address or URL.
const SEPARATORS: &[u8] = b",;\"'{}[]()<>|";

/// Cuts `text` into chunks of [`CHUNK_CHARS`] code points, ending a chunk
/// after ASCII whitespace when there is some in the last [`BOUNDARY_WINDOW`]
/// code points, else after one of [`SEPARATORS`] there, so that no word is
/// cut across two indexed rows (and found by neither). The chunks
/// concatenate back to `text` exactly; empty text has none. Works on bytes (an all-ASCII window is skipped in one step), as
/// it runs on the put path over every byte of every original.
pub fn chunks(text: &str) -> Vec<Chunk<'_>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len() / CHUNK_CHARS + 1);
    let mut start = 0usize;
    let mut start_char = 0u64;
    while start < bytes.len() {
        let (end, n) = advance(bytes, start, CHUNK_CHARS);
        let (cut, k) = if end == bytes.len() {
            (end, n)
        } else {
            let window = back(bytes, end, BOUNDARY_WINDOW).max(start);
            let region = &bytes[window..end];
            match region
                .iter()
                .rposition(u8::is_ascii_whitespace)
                .or_else(|| region.iter().rposition(|b| SEPARATORS.contains(b)))
            {
                Some(p) if window + p + 1 > start => {
                    let cut = window + p + 1;
                    (cut, n - count(&bytes[cut..end]))
                }
                _ => (end, n),
            }
        };
        out.push(Chunk {
            start_char,
            chars: k as u64,
            // `cut` and `start` are always on character boundaries.
            text: &text[start..cut],
        });
        start = cut;
        start_char += k as u64;
    }
    out
}

/// Width of the UTF-8 sequence starting with `lead`.
fn width(lead: u8) -> usize {
    match lead {
        0..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        _ => 4,
    }
}

/// Byte index `n` code points after `from` (or the end) and how many code
/// points that is.
fn advance(bytes: &[u8], from: usize, n: usize) -> (usize, usize) {
    let fast = (from + n).min(bytes.len());
    if bytes[from..fast].is_ascii() {
        return (fast, fast - from);
    }
    let (mut i, mut k) = (from, 0);
    while i < bytes.len() && k < n {
        i += width(bytes[i]);
        k += 1;
    }
    (i.min(bytes.len()), k)
}

/// Byte index `n` code points before `at` (or 0).
fn back(bytes: &[u8], at: usize, n: usize) -> usize {
    let (mut i, mut k) = (at, 0);
    while i > 0 && k < n {
        i -= 1;
        if bytes[i] & 0xc0 != 0x80 {
            k += 1;
        }
    }
    i
}

/// Code points in valid UTF-8 bytes.
fn count(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b & 0xc0 != 0x80).count()
}

/// Byte index of the `n`-th code point of `s` (or `s.len()` past the end).
pub fn byte_at_char(s: &str, n: usize) -> usize {
    s.char_indices().nth(n).map_or(s.len(), |(i, _)| i)
}

/// Byte index `n` code points before `byte` (or 0).
pub fn back_chars(s: &str, byte: usize, n: usize) -> usize {
    if n == 0 {
        return byte;
    }
    s[..byte]
        .char_indices()
        .rev()
        .nth(n - 1)
        .map_or(0, |(i, _)| i)
}

/// Byte index `n` code points after `byte` (or `s.len()`).
pub fn fwd_chars(s: &str, byte: usize, n: usize) -> usize {
    byte + byte_at_char(&s[byte..], n)
}

/// Code points in `s`.
pub fn char_len(s: &str) -> u64 {
    s.chars().count() as u64
}

/// The searchable terms of a free-text query: runs of letters and digits (as
/// FTS5's unicode61 tokenizer sees them), lowercased, de-duplicated, at most
/// [`MAX_TERMS`]. Operators, quotes, `*`, parentheses and the like vanish.
pub fn query_terms(query: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    for word in query.split(|c: char| !c.is_alphanumeric()) {
        if word.is_empty() {
            continue;
        }
        let word = word.to_lowercase();
        if !terms.contains(&word) {
            terms.push(word);
            if terms.len() == MAX_TERMS {
                break;
            }
        }
    }
    terms
}

/// An FTS5 MATCH expression made only of quoted strings joined by `op`
/// (`AND` or `OR`): whatever the user typed cannot be FTS syntax.
pub fn fts_expression(terms: &[String], op: &str) -> String {
    let quoted: Vec<String> = terms
        .iter()
        .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
        .collect();
    quoted.join(&format!(" {op} "))
}

/// Byte index of the first token of `text` equal (case-insensitively) to one
/// of `terms`, tokens being runs of letters and digits.
pub fn first_term(text: &str, terms: &[String]) -> Option<usize> {
    let mut start: Option<usize> = None;
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        if c.is_alphanumeric() && i < text.len() {
            start.get_or_insert(i);
        } else if let Some(s) = start.take() {
            let token = &text[s..i];
            if terms.iter().any(|t| token.to_lowercase() == *t) {
                return Some(s);
            }
        }
    }
    None
}

/// The snippet around a match at `[byte, byte + len)`: up to `context`
/// code points on each side.
pub fn snippet(text: &str, byte: usize, len: usize, context: usize) -> &str {
    let start = back_chars(text, byte, context);
    let end = fwd_chars(text, byte + len, context);
    &text[start..end]
}

/// Validates read arguments: returns the offset and the exclusive end
/// (`None`: to the end).
pub fn check_window(offset: i64, limit: i64) -> Result<(u64, Option<u64>), super::StoreError> {
    let Ok(start) = u64::try_from(offset) else {
        return Err(super::StoreError::InvalidArgument(format!(
            "offset must be 0 or more, got {offset}"
        )));
    };
    let end = match limit {
        -1 => None,
        l if l < -1 => {
            return Err(super::StoreError::InvalidArgument(format!(
                "limit must be -1 (to the end) or 0 or more, got {limit}"
            )))
        }
        l => Some(start.saturating_add(l.unsigned_abs())),
    };
    Ok((start, end))
}

/// Validates an exact search's query: it must not be empty.
pub fn check_query(query: &str) -> Result<(), super::StoreError> {
    if query.is_empty() {
        return Err(super::StoreError::InvalidArgument(
            "query must not be empty".to_string(),
        ));
    }
    Ok(())
}

/// Reassembles characters `[start, end)` of an original from its chunks,
/// fed in offset order starting with the chunk holding `start`: both
/// backends read a window this way, so a gap or a short read is reported
/// the same on each.
pub struct Window {
    start: u64,
    end: u64,
    out: String,
    /// Where the next chunk must start.
    next: Option<u64>,
}

impl Window {
    pub fn new(start: u64, end: u64) -> Window {
        Window {
            start,
            end,
            out: String::new(),
            next: None,
        }
    }

    /// Adds the chunk starting at character `chunk_start`; an error (a
    /// message) if it does not follow the previous one.
    pub fn push(&mut self, chunk_start: u64, chunk: &str) -> Result<(), String> {
        if self.next.is_some_and(|p| p != chunk_start)
            || (self.next.is_none() && chunk_start > self.start)
        {
            return Err(format!("a gap before character {chunk_start}"));
        }
        let from = byte_at_char(
            chunk,
            usize::try_from(self.start.saturating_sub(chunk_start)).unwrap_or(usize::MAX),
        );
        let want = usize::try_from(self.end.saturating_sub(chunk_start.max(self.start)))
            .unwrap_or(usize::MAX);
        let to = fwd_chars(chunk, from, want);
        self.out.push_str(&chunk[from..to]);
        self.next = Some(chunk_start + char_len(chunk));
        Ok(())
    }

    /// The window; an error (a message) if the chunks fell short of it.
    pub fn finish(self) -> Result<String, String> {
        let got = char_len(&self.out);
        let want = self.end.saturating_sub(self.start);
        if got != want {
            return Err(format!(
                "read {got} characters of {want} at offset {}",
                self.start
            ));
        }
        Ok(self.out)
    }
}

/// Exact, non-overlapping matches of `query` in `text`: the first `limit`
/// with `context_chars` on each side (offsets in code points), and the
/// number of all matches.
pub fn find_matches(
    text: &str,
    query: &str,
    limit: usize,
    context_chars: usize,
) -> (Vec<super::Match>, u64) {
    let mut matches = Vec::new();
    let mut total = 0u64;
    let (mut byte, mut chars) = (0usize, 0u64);
    for pos in memchr::memmem::find_iter(text.as_bytes(), query.as_bytes()) {
        total += 1;
        if matches.len() < limit {
            chars += char_len(&text[byte..pos]);
            byte = pos;
            matches.push(super::Match {
                offset: chars,
                snippet: snippet(text, pos, query.len(), context_chars).to_string(),
            });
        }
    }
    (matches, total)
}

/// Where a ranked hit points in a passage starting at `chunk_start`: the
/// code-point offset of its first query word and that word's length; the
/// passage start (length 0) if the index matched something this scan does
/// not see (folded diacritics).
pub fn hit_at(chunk: &str, chunk_start: u64, terms: &[String]) -> (u64, u64) {
    match first_term(chunk, terms) {
        Some(b) => {
            let word_len = chunk[b..]
                .chars()
                .take_while(|c| c.is_alphanumeric())
                .count() as u64;
            (chunk_start + char_len(&chunk[..b]), word_len)
        }
        None => (chunk_start, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(cs: &[Chunk<'_>]) -> String {
        cs.iter().map(|c| c.text).collect()
    }

    #[test]
    fn chunks_concatenate_back_and_offsets_add_up() {
        let words: String = (0..5000)
            .map(|i| format!("wörd{i} 日本 {}", "x".repeat(i % 200)))
            .collect();
        let cs = chunks(&words);
        assert!(cs.len() > 5);
        assert_eq!(joined(&cs), words);
        let mut expect = 0u64;
        for (i, c) in cs.iter().enumerate() {
            assert_eq!(c.start_char, expect);
            let n = char_len(c.text) as usize;
            assert_eq!(n as u64, c.chars);
            assert!(n <= CHUNK_CHARS);
            assert!(
                i == cs.len() - 1 || n >= CHUNK_CHARS - BOUNDARY_WINDOW,
                "chunk {i}: {n}"
            );
            expect += n as u64;
        }
        // Every chunk but the last ends right after whitespace.
        for c in &cs[..cs.len() - 1] {
            assert!(c.text.ends_with(' '), "{:?}", &c.text[c.text.len() - 10..]);
        }
    }

    #[test]
    fn chunks_without_whitespace_are_cut_hard() {
        let s = "😀".repeat(CHUNK_CHARS * 2 + 3);
        let cs = chunks(&s);
        assert_eq!(cs.len(), 3);
        assert_eq!(char_len(cs[0].text), CHUNK_CHARS as u64);
        assert_eq!(cs[2].start_char, 2 * CHUNK_CHARS as u64);
        assert_eq!(joined(&cs), s);
        assert!(chunks("").is_empty());
        assert_eq!(
            chunks("abc"),
            vec![Chunk {
                start_char: 0,
                chars: 3,
                text: "abc"
            }]
        );
    }

    #[test]
    fn minified_json_is_cut_between_words() {
        // No whitespace anywhere: each chunk ends after a separator, so no
        // id is split across two indexed rows.
        let s: String = (0..2000)
            .map(|i| format!("{{\"request_id\":\"req_{i:08x}abcdef\",\"ok\":true}},"))
            .collect();
        let cs = chunks(&s);
        assert!(cs.len() > 10);
        assert_eq!(joined(&cs), s);
        for c in &cs[..cs.len() - 1] {
            let last = c.text.as_bytes()[c.text.len() - 1];
            assert!(
                SEPARATORS.contains(&last),
                "{:?}",
                &c.text[c.text.len() - 20..]
            );
            assert!(c.chars as usize >= CHUNK_CHARS - BOUNDARY_WINDOW);
        }
    }

    #[test]
    fn whitespace_far_back_is_not_used() {
        let s = format!("a {}", "b".repeat(CHUNK_CHARS * 2));
        let cs = chunks(&s);
        assert_eq!(char_len(cs[0].text), CHUNK_CHARS as u64);
        assert_eq!(joined(&cs), s);
    }

    #[test]
    fn char_arithmetic_on_multibyte_text() {
        let s = "a日😀b";
        assert_eq!(byte_at_char(s, 0), 0);
        assert_eq!(byte_at_char(s, 2), 4);
        assert_eq!(byte_at_char(s, 9), s.len());
        assert_eq!(back_chars(s, 8, 2), 1);
        assert_eq!(back_chars(s, 8, 9), 0);
        assert_eq!(fwd_chars(s, 1, 2), 8);
        assert_eq!(snippet(s, 4, 4, 1), "日😀b");
    }

    #[test]
    fn queries_become_quoted_terms() {
        let t = query_terms(r#"  "Foo bar" AND baz* NEAR(x y) -neg (( ) ' foo "#);
        assert_eq!(t, ["foo", "bar", "and", "baz", "near", "x", "y", "neg"]);
        assert_eq!(fts_expression(&t[..2], "AND"), r#""foo" AND "bar""#);
        assert!(query_terms("*** () \" -").is_empty());
        assert_eq!(query_terms(&"w ".repeat(100)).len(), 1);
        assert_eq!(query_terms("東京 café").len(), 2);
    }

    #[test]
    fn first_term_finds_whole_tokens_case_insensitively() {
        let terms = vec!["error".to_string()];
        assert_eq!(first_term("terror; Error here", &terms), Some(8));
        assert_eq!(first_term("errors", &terms), None);
        assert_eq!(first_term("x ERROR", &terms), Some(2));
    }
}
