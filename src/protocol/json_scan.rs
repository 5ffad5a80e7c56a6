//! A validating pull scanner over a JSON document, for adapters that read a
//! few fields of a large request body.
//!
//! A chat request's bulk is its tool outputs: long JSON strings that often
//! hold JSON themselves, with a backslash every few bytes. serde_json scans
//! such a string one escape at a time (about 1.5 ms per MB); this scanner
//! finds the quotes, backslashes and control characters of 64 bytes at once
//! as bit masks and only stops at escapes, validating each (about three
//! times faster). It accepts exactly the documents serde_json accepts
//! (RFC 8259 with serde_json's choices: no depth limit for skipped values,
//! `\u` escapes not paired up inside skipped strings); differential tests in
//! `openai_chat` hold it to serde_json.
//!
//! Values nobody asked for are skipped without building anything; strings
//! come back as raw literals (quotes included) for the caller to decode when
//! it needs the text ([`super::json_text::decode`]).

use super::json_text;
use std::borrow::Cow;

/// A cursor over a JSON text. Every method returns `None` when the text is
/// not valid JSON at that point (or not of the type asked for); the cursor
/// is then left somewhere undefined and the document should be given up.
pub struct Scanner<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Scanner<'a> {
    pub fn new(text: &'a str) -> Scanner<'a> {
        Scanner { text, pos: 0 }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// The next byte after whitespace, not consumed.
    pub fn peek(&mut self) -> Option<u8> {
        let bytes = self.bytes();
        while let Some(&b) = bytes.get(self.pos) {
            if !matches!(b, b' ' | b'\n' | b'\t' | b'\r') {
                return Some(b);
            }
            self.pos += 1;
        }
        None
    }

    /// The byte offset of the next value, after whitespace.
    pub fn position(&mut self) -> Option<usize> {
        self.peek().map(|_| self.pos)
    }

    /// The byte offset just after what was consumed last.
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// The text from `start` (a [`Scanner::position`]) to what was
    /// consumed last: the raw value a caller read piece by piece.
    pub fn text_between(&self, start: usize) -> Option<&'a str> {
        self.text.get(start..self.pos)
    }

    /// Consumes a `,` after whitespace, if one comes next (values of a
    /// comma-separated run that is not an array).
    pub fn comma(&mut self) -> bool {
        self.eat(b',').is_some()
    }

    /// Consumes `byte` after whitespace.
    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.pos += 1)
    }

    /// Succeeds when only whitespace is left.
    pub fn finish(mut self) -> Option<()> {
        self.peek().is_none().then_some(())
    }

    /// A string literal, quotes included, validated but not decoded.
    #[inline]
    pub fn string(&mut self) -> Option<&'a str> {
        self.string_plain().map(|(raw, _)| raw)
    }

    /// A string literal, quotes included, and whether it is known to hold
    /// no escape (its first sixteen bytes settled it: it is its own text).
    #[inline]
    fn string_plain(&mut self) -> Option<(&'a str, bool)> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.pos;
        let (close, plain) = match first_window_end(self.bytes(), start + 1) {
            Some(close) => (close, true),
            None => (string_end_scanned(self.bytes(), start + 1)?, false),
        };
        self.pos = close + 1;
        Some((self.text.get(start..self.pos)?, plain))
    }

    /// An object's key, decoded (borrowed when it has no escape).
    #[inline]
    fn key(&mut self) -> Option<Cow<'a, str>> {
        match self.string_plain()? {
            (raw, true) => raw.get(1..raw.len() - 1).map(Cow::Borrowed),
            (raw, false) => json_text::decode(raw),
        }
    }

    /// A string decoded, or `None` for `null`; fails on any other value (and
    /// on a string with a lone surrogate, which has no text).
    pub fn optional_text(&mut self) -> Option<Option<Cow<'a, str>>> {
        if self.null()? {
            return Some(None);
        }
        json_text::decode(self.string()?).map(Some)
    }

    /// Consumes a `null` if one comes next: `Some(true)`; `Some(false)` when
    /// another value follows (left unconsumed).
    pub fn null(&mut self) -> Option<bool> {
        if self.peek()? != b'n' {
            return Some(false);
        }
        self.literal(b"null")?;
        Some(true)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.pos.checked_add(word.len())?;
        (self.bytes().get(self.pos..end)? == word).then(|| self.pos = end)
    }

    /// Any value, skipped, as its raw text. Nesting is followed with a stack
    /// on the heap, not by recursion, so depth is bounded only by the body.
    pub fn value(&mut self) -> Option<&'a str> {
        self.peek()?;
        let start = self.pos;
        // The closing bracket each open container waits for.
        let mut open = OpenBrackets::default();
        loop {
            // A value starts here.
            match self.peek()? {
                b'"' => {
                    self.string()?;
                }
                b'{' => {
                    self.pos += 1;
                    if self.peek()? == b'}' {
                        self.pos += 1;
                    } else {
                        open.push(b'}');
                        self.string()?;
                        self.eat(b':')?;
                        continue;
                    }
                }
                b'[' => {
                    self.pos += 1;
                    if self.peek()? == b']' {
                        self.pos += 1;
                    } else {
                        open.push(b']');
                        continue;
                    }
                }
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                b'-' | b'0'..=b'9' => self.number()?,
                _ => return None,
            }
            // A value ended: close containers until one takes another element.
            loop {
                let Some(close) = open.last() else {
                    return self.text.get(start..self.pos);
                };
                let next = self.peek()?;
                self.pos += 1;
                if next == close {
                    open.pop();
                } else if next == b',' {
                    if close == b'}' {
                        self.string()?;
                        self.eat(b':')?;
                    }
                    break;
                } else {
                    return None;
                }
            }
        }
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn number(&mut self) -> Option<()> {
        let bytes = self.bytes();
        let digits = |from: usize| {
            bytes.get(from..).map_or(0, |rest| {
                rest.iter().take_while(|b| b.is_ascii_digit()).count()
            })
        };
        let mut i = self.pos;
        if bytes.get(i) == Some(&b'-') {
            i += 1;
        }
        match bytes.get(i)? {
            b'0' => i += 1,
            b'1'..=b'9' => i += digits(i),
            _ => return None,
        }
        if bytes.get(i) == Some(&b'.') {
            let n = digits(i + 1);
            if n == 0 {
                return None;
            }
            i += 1 + n;
        }
        if matches!(bytes.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(bytes.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            let n = digits(i);
            if n == 0 {
                return None;
            }
            i += n;
        }
        self.pos = i;
        Some(())
    }

    /// An object: `member` is called with each key (decoded) and must consume
    /// its value.
    pub fn object(&mut self, mut member: impl FnMut(&mut Self, &str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.pos += 1;
            return Some(());
        }
        loop {
            let key = self.key()?;
            self.eat(b':')?;
            member(self, &key)?;
            if self.closes(b'}')? {
                return Some(());
            }
        }
    }

    /// An array: `element` is called for each element and must consume it.
    pub fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.pos += 1;
            return Some(());
        }
        loop {
            element(self)?;
            if self.closes(b']')? {
                return Some(());
            }
        }
    }

    /// After a member or element: consumes a `,` (`Some(false)`: another
    /// follows) or `close` (`Some(true)`); anything else is not JSON.
    fn closes(&mut self, close: u8) -> Option<bool> {
        let next = self.peek()?;
        self.pos += 1;
        match next {
            b',' => Some(false),
            b if b == close => Some(true),
            _ => None,
        }
    }
}

/// The closing brackets of the containers open in a skipped value, a bit
/// per level (set: `}`): the first 128 levels in a `u128`, so skipping a
/// small object allocates nothing, deeper levels on the heap.
#[derive(Default)]
struct OpenBrackets {
    depth: usize,
    near: u128,
    far: Vec<bool>,
}

impl OpenBrackets {
    fn push(&mut self, close: u8) {
        let brace = close == b'}';
        if self.depth < 128 {
            self.near = self.near & !(1 << self.depth) | u128::from(brace) << self.depth;
        } else {
            self.far.push(brace);
        }
        self.depth += 1;
    }

    fn pop(&mut self) {
        self.depth = self.depth.saturating_sub(1);
        if self.depth >= 128 {
            self.far.pop();
        }
    }

    fn last(&self) -> Option<u8> {
        let top = self.depth.checked_sub(1)?;
        let brace = if top < 128 {
            self.near >> top & 1 == 1
        } else {
            *self.far.last()?
        };
        Some(if brace { b'}' } else { b']' })
    }
}

/// Bytes looked at together.
pub(super) const BLOCK: usize = 64;

/// A string whose closing quote comes within this many bytes, with no
/// escape before it, is read a byte at a time.
const SHORT: usize = 24;

/// The block of `bytes` at `at`: borrowed when whole, else the rest copied
/// into `padded` (NULs after it). `None` past the end.
pub(super) fn block_at<'a>(
    bytes: &'a [u8],
    at: usize,
    padded: &'a mut [u8; BLOCK],
) -> Option<&'a [u8; BLOCK]> {
    match bytes.get(at..at + BLOCK) {
        Some(block) => block.try_into().ok(),
        None => {
            let rest = bytes.get(at..)?;
            padded.get_mut(..rest.len())?.copy_from_slice(rest);
            Some(padded)
        }
    }
}

/// The index of the closing quote of a string whose inside starts at
/// `start`; `None` if the string is unterminated, holds a control character
/// or an invalid escape.
///
/// Per 64-byte block: masks of quotes, backslashes and control characters;
/// which characters are escaped, from the backslash runs, without a loop;
/// the first quote not escaped ends the string. Before it there must be no
/// control character, and every escaped character must be one JSON allows:
/// `"` and `\` (most of them) pass by mask, the others are looked up one by
/// one, and `\u` must be followed by four hex digits.
#[cfg(test)]
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    first_window_end(bytes, start).or_else(|| string_end_scanned(bytes, start))
}

/// The closing quote of a string whose inside starts at `start`, when the
/// thirty-two bytes from there settle it: the first quote, backslash or
/// control character among them is a quote. Most strings of a document are
/// short keys and values; this settles them inline, before any block is
/// built. Near the end of the text the window is padded with NULs (control
/// characters: a stop that is not a quote).
#[inline]
fn first_window_end(bytes: &[u8], start: usize) -> Option<usize> {
    const WINDOW: usize = 32;
    let mut padded = [0u8; WINDOW];
    let window = match bytes.get(start..start + WINDOW) {
        Some(window) => window,
        None => {
            let rest = bytes.get(start..)?;
            padded.get_mut(..rest.len())?.copy_from_slice(rest);
            &padded[..]
        }
    };
    let (low, high) = window.split_at(16);
    let mut stops = stops16(low);
    if stops == 0 {
        stops = stops16(high) << 16;
    }
    let first = stops.trailing_zeros() as usize;
    (stops != 0 && window[first] == b'"').then_some(start + first)
}

/// [`string_end`] past its first window: a few bytes one by one near the
/// end of the text, then blocks.
#[inline(never)]
fn string_end_scanned(bytes: &[u8], start: usize) -> Option<usize> {
    for (i, &b) in bytes.get(start..)?.iter().take(SHORT).enumerate() {
        match b {
            b'"' => return Some(start + i),
            b'\\' | 0..=0x1f => break,
            _ => {}
        }
    }
    let mut at = start;
    let mut escapes = Escapes::default();
    loop {
        // The last block is padded with NULs: a control character past the
        // end is the end of the input.
        let mut padded = [0u8; BLOCK];
        let block = block_at(bytes, at, &mut padded)?;
        let (quotes, backslashes, controls) = masks(block);
        let (escaped, _) = escapes.next(backslashes);
        let closing = quotes & !escaped;
        // The bits before the closing quote (all of them if there is none).
        let inside = closing.wrapping_sub(1) & !closing;
        if controls & inside != 0 {
            return None;
        }
        let mut others = escaped & !(quotes | backslashes) & inside;
        while others != 0 {
            let k = others.trailing_zeros() as usize;
            others &= others - 1;
            match ESCAPE_LEN[usize::from(block[k])] {
                2 => {}
                6 => {
                    let hex = bytes.get(at + k + 1..at + k + 5)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return None;
                    }
                }
                _ => return None,
            }
        }
        if closing != 0 {
            return Some(at + closing.trailing_zeros() as usize);
        }
        at += BLOCK;
    }
}

/// Finds the escaped characters of consecutive blocks (after simdjson's
/// escape scanner): a backslash escapes the next character unless it is
/// itself escaped, so in a run of backslashes every second one escapes.
#[derive(Default)]
pub(super) struct Escapes {
    /// The first character of the next block is escaped (1) or not (0).
    next_is_escaped: u64,
}

impl Escapes {
    /// The escaped characters of the next block, given its backslashes,
    /// and the backslashes that escape them.
    pub(super) fn next(&mut self, backslashes: u64) -> (u64, u64) {
        const ODD_BITS: u64 = 0xAAAA_AAAA_AAAA_AAAA;
        let potential = backslashes & !self.next_is_escaped;
        // Adding a run of backslashes to its start carries through the run;
        // with the odd bits mixed in, what remains marks every backslash
        // that escapes (and the character after each run of odd length).
        let maybe_escaped = potential << 1;
        let series = (maybe_escaped | ODD_BITS).wrapping_sub(potential);
        let escape_and_terminal = series ^ ODD_BITS;
        let escaped = escape_and_terminal ^ (backslashes | self.next_is_escaped);
        let escape = escape_and_terminal & backslashes;
        self.next_is_escaped = escape >> 63;
        (escaped, escape)
    }
}

/// The length of an escape by the byte after its backslash (0: invalid). A
/// table, not a `match`: the match compiles to an indirect jump per escape.
const ESCAPE_LEN: [u8; 256] = {
    let mut table = [0u8; 256];
    let simple = *b"\"\\/bfnrt";
    let mut i = 0;
    while i < simple.len() {
        table[simple[i] as usize] = 2;
        i += 1;
    }
    table[b'u' as usize] = 6;
    table
};

const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// Bit `i` of each mask says whether byte `i` is a quote, a backslash, or
/// below 0x20.
#[cfg(target_arch = "x86_64")]
pub(super) fn masks(block: &[u8; BLOCK]) -> (u64, u64, u64) {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
        _mm_setzero_si128, _mm_subs_epu8,
    };
    let (mut quotes, mut backslashes, mut controls) = (0u64, 0u64, 0u64);
    // SAFETY: SSE2 is part of the x86_64 baseline; each load reads 16 bytes
    // at offsets 0, 16, 32 and 48 of a 64-byte array (no alignment needed).
    unsafe {
        let quote = _mm_set1_epi8(b'"' as i8);
        let backslash = _mm_set1_epi8(b'\\' as i8);
        let below = _mm_set1_epi8(0x1f);
        let zero = _mm_setzero_si128();
        for i in 0..BLOCK / 16 {
            let x = _mm_loadu_si128(block.as_ptr().add(16 * i).cast::<__m128i>());
            let bits = |m| u64::from(_mm_movemask_epi8(m) as u16) << (16 * i);
            quotes |= bits(_mm_cmpeq_epi8(x, quote));
            backslashes |= bits(_mm_cmpeq_epi8(x, backslash));
            // x - 0x1f saturates to zero exactly when x <= 0x1f.
            controls |= bits(_mm_cmpeq_epi8(_mm_subs_epu8(x, below), zero));
        }
    }
    (quotes, backslashes, controls)
}

/// The bytes of a 16-byte window that stop a string's scan (a quote, a
/// backslash or a control character), a bit each.
#[cfg(target_arch = "x86_64")]
fn stops16(window: &[u8]) -> u32 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
        _mm_setzero_si128, _mm_subs_epu8,
    };
    if window.len() < 16 {
        return 0;
    }
    // SAFETY: SSE2 is part of the x86_64 baseline; the load reads the 16
    // bytes just checked to be there (no alignment needed).
    unsafe {
        let x = _mm_loadu_si128(window.as_ptr().cast::<__m128i>());
        let quote = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'"' as i8));
        let backslash = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'\\' as i8));
        let control = _mm_cmpeq_epi8(_mm_subs_epu8(x, _mm_set1_epi8(0x1f)), _mm_setzero_si128());
        _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control)) as u32 & 0xffff
    }
}

/// [`stops16`] without SIMD: the bytewise loop after it settles the string.
#[cfg(not(target_arch = "x86_64"))]
fn stops16(_window: &[u8]) -> u32 {
    0
}

/// [`masks`] without SIMD: eight bytes at a time in a `u64`.
#[cfg(not(target_arch = "x86_64"))]
pub(super) fn masks(block: &[u8; BLOCK]) -> (u64, u64, u64) {
    masks_in_words(block)
}

/// [`masks`] without SIMD: eight bytes at a time in a `u64` (used where
/// SSE2 is not available, and tested against it where it is).
#[cfg_attr(all(target_arch = "x86_64", not(test)), allow(dead_code))]
fn masks_in_words(block: &[u8; BLOCK]) -> (u64, u64, u64) {
    let (words, _) = block.as_chunks::<8>();
    let (mut quotes, mut backslashes, mut controls) = (0, 0, 0);
    for (i, word) in words.iter().enumerate() {
        let word = u64::from_le_bytes(*word);
        let shift = 8 * i;
        quotes |= pack(equal_bytes(word, b'"')) << shift;
        backslashes |= pack(equal_bytes(word, b'\\')) << shift;
        controls |= pack(below_0x20(word)) << shift;
    }
    (quotes, backslashes, controls)
}

/// The high bit of each byte of `word` that equals `b` (exact: no carries
/// between bytes).
#[cfg_attr(all(target_arch = "x86_64", not(test)), allow(dead_code))]
fn equal_bytes(word: u64, b: u8) -> u64 {
    let x = word ^ (0x0101_0101_0101_0101 * u64::from(b));
    !(((x & LOW7) + LOW7) | x) & HIGH
}

/// The high bit of each byte of `word` below 0x20.
#[cfg_attr(all(target_arch = "x86_64", not(test)), allow(dead_code))]
fn below_0x20(word: u64) -> u64 {
    !(((word & LOW7) + 0x6060_6060_6060_6060) | word) & HIGH
}

/// Gathers the high bits of a word's bytes into the low 8 bits.
#[cfg_attr(all(target_arch = "x86_64", not(test)), allow(dead_code))]
fn pack(high_bits: u64) -> u64 {
    ((high_bits >> 7).wrapping_mul(0x0102_0408_1020_4080)) >> 56
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::de::IgnoredAny;

    fn skips(text: &str) -> Option<&str> {
        let mut s = Scanner::new(text);
        let raw = s.value()?;
        s.finish()?;
        Some(raw)
    }

    fn serde_accepts(text: &str) -> bool {
        serde_json::from_str::<IgnoredAny>(text).is_ok()
    }

    #[test]
    fn masks_are_exact() {
        let mut block = [0u8; BLOCK];
        for (i, b) in block.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37).wrapping_add(3);
        }
        block[5] = b'"';
        block[63] = b'\\';
        let (q, b, c) = masks(&block);
        assert_eq!(masks_in_words(&block), (q, b, c));
        for (i, &byte) in block.iter().enumerate() {
            assert_eq!(q >> i & 1 == 1, byte == b'"', "quote at {i}");
            assert_eq!(b >> i & 1 == 1, byte == b'\\', "backslash at {i}");
            assert_eq!(c >> i & 1 == 1, byte < 0x20, "control at {i}");
        }
    }

    #[test]
    fn strings_at_every_length_and_alignment() {
        for len in 0..200 {
            for escape in ["", "\\\"", "\\\\", "\\n", "\\u00e9", "\\/"] {
                for at in [0, len / 2, len] {
                    let mut inner = "x".repeat(len);
                    inner.insert_str(at, escape);
                    let text = format!("\"{inner}\"");
                    assert_eq!(skips(&text), Some(text.as_str()), "{text}");
                    let cut = &text[..text.len() - 1];
                    assert_eq!(skips(cut), None, "unterminated {cut}");
                }
            }
        }
        // An escape whose end crosses a block boundary.
        for pad in 55..70 {
            let text = format!("\"{}\\u0041{}\"", "a".repeat(pad), "b".repeat(70));
            assert_eq!(skips(&text), Some(text.as_str()));
        }
    }

    #[test]
    fn rejects_what_serde_json_rejects() {
        for text in [
            "",
            " ",
            "\"\\x\"",
            "\"\\u12G4\"",
            "\"a\u{1}b\"",
            "01",
            "-",
            "1.",
            "1e",
            "1e+",
            ".5",
            "[1,]",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{1:2}",
            "[1 2]",
            "tru",
            "nul",
            "[",
            "{",
            "]",
            "\"\\",
            "\"\\u12",
            "[]]",
            "{}x",
            "+1",
        ] {
            assert!(!serde_accepts(text), "serde accepts {text:?}");
            assert_eq!(skips(text), None, "{text:?}");
        }
        for text in [
            "0",
            "-0.5e+10",
            "1E5",
            "[]",
            "{}",
            " [ 1 , {\"a\" : [ null , true ] } ] ",
            "\"\\ud800\"",
            "\"é\\\\\"",
        ] {
            assert!(serde_accepts(text), "{text}");
            assert_eq!(skips(text), Some(text.trim()), "{text}");
        }
    }

    #[test]
    fn deep_nesting_is_skipped_without_recursion() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(skips(&deep).map(str::len), Some(deep.len()));
        let open = "[".repeat(100_000);
        assert_eq!(skips(&open), None);
        // Objects and arrays alternating past the 128 levels kept in a u128.
        for depth in [127, 128, 129, 300] {
            let text = format!("{}1{}", "[{\"a\":".repeat(depth), "}]".repeat(depth));
            assert!(serde_accepts(&text));
            assert_eq!(skips(&text), Some(text.as_str()), "depth {depth}");
            let crossed = format!("{}1{}", "[{\"a\":".repeat(depth), "]}".repeat(depth));
            assert_eq!(skips(&crossed), None, "depth {depth}");
        }
    }

    fn json_soup() -> impl Strategy<Value = String> {
        let atom = prop::sample::select(vec![
            "\"",
            "\\",
            "\\\"",
            "\\u",
            "\\ud83d\\ude00",
            "\\n",
            "{",
            "}",
            "[",
            "]",
            ":",
            ",",
            " ",
            "\n",
            "0",
            "-",
            "1",
            ".",
            "e",
            "+",
            "null",
            "true",
            "fals",
            "a",
            "é",
            "\u{1}",
            "\"k\":",
            "\"v\"",
            "0041",
        ]);
        prop::collection::vec(atom, 0..40).prop_map(|parts| parts.concat())
    }

    /// The closing quote's index, one byte at a time: the reference.
    fn string_end_bytewise(bytes: &[u8], start: usize) -> Option<usize> {
        let mut i = start;
        loop {
            match *bytes.get(i)? {
                b'"' => return Some(i),
                b'\\' => {
                    i += match bytes.get(i + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
                        b'u' if bytes.get(i + 2..i + 6)?.iter().all(u8::is_ascii_hexdigit) => 6,
                        _ => return None,
                    }
                }
                0..=0x1f => return None,
                _ => i += 1,
            }
        }
    }

    #[test]
    fn the_first_window_agrees_with_a_bytewise_walk_at_every_length_and_stop() {
        // Strings of every length around the window's two halves, closed
        // or cut off, with a quote, backslash, escape or control character
        // placed at every position, and text after them or none.
        for len in 0..70 {
            for stop in [
                None,
                Some(&b"\""[..]),
                Some(b"\\n"),
                Some(b"\\q"),
                Some(b"\x01"),
            ] {
                for at in 0..=len {
                    for tail in [&b""[..], b"\"", b"\",1]"] {
                        let mut text = vec![b'"'];
                        text.extend(std::iter::repeat_n(b'a', len));
                        if let Some(stop) = stop {
                            text.splice(1 + at..1 + at, stop.iter().copied());
                        }
                        text.extend_from_slice(tail);
                        prop_assert_eq_plain(&text);
                    }
                }
            }
        }
    }

    fn prop_assert_eq_plain(text: &[u8]) {
        assert_eq!(
            string_end(text, 1),
            string_end_bytewise(text, 1),
            "{:?}",
            String::from_utf8_lossy(text)
        );
        if let Ok(text) = std::str::from_utf8(text) {
            let mut scanner = Scanner::new(text);
            let expected =
                string_end_bytewise(text.as_bytes(), 1).and_then(|close| text.get(..=close));
            assert_eq!(scanner.string(), expected, "{text:?}");
        }
    }

    fn escape_soup() -> impl Strategy<Value = Vec<u8>> {
        let atom = prop::sample::select(vec![
            &b"\\"[..],
            b"\\",
            b"\\",
            b"\"",
            b"a",
            b"aaaaaaaaaaaaaaaaaaaaaa",
            b"u",
            b"0",
            b"F",
            b"n",
            b"/",
            b"x",
            b"\x01",
            "é".as_bytes(),
        ]);
        prop::collection::vec(atom, 0..120).prop_map(|parts| parts.concat())
    }

    proptest! {
        #[test]
        fn escapes_match_a_bytewise_walk(bytes in prop::collection::vec(
            prop::sample::select(vec![b'\\', b'\\', b'a', b'"']), 0..300)
        ) {
            let mut expected = vec![false; bytes.len() + 1];
            for i in 0..bytes.len() {
                if bytes[i] == b'\\' && !expected[i] {
                    expected[i + 1] = true;
                }
            }
            let mut escapes = Escapes::default();
            for (b, block) in bytes.chunks(BLOCK).enumerate() {
                let backslashes = block
                    .iter()
                    .enumerate()
                    .filter(|(_, &c)| c == b'\\')
                    .fold(0u64, |m, (i, _)| m | 1 << i);
                let (escaped, escape) = escapes.next(backslashes);
                for i in 0..block.len() {
                    let at = b * BLOCK + i;
                    prop_assert_eq!(escaped >> i & 1 == 1, expected[at], "escaped at {}", at);
                    prop_assert_eq!(escape >> i & 1 == 1, expected[at + 1] && bytes[at] == b'\\', "escape at {}", at);
                }
            }
        }

        #[test]
        fn string_end_matches_a_bytewise_walk(bytes in escape_soup(), start in 0usize..3) {
            let start = start.min(bytes.len());
            prop_assert_eq!(string_end(&bytes, start), string_end_bytewise(&bytes, start));
        }

        #[test]
        fn both_mask_builders_agree(bytes in prop::collection::vec(any::<u8>(), BLOCK)) {
            let mut block = [0u8; BLOCK];
            block.copy_from_slice(&bytes);
            let (q, b, c) = masks(&block);
            prop_assert_eq!(masks_in_words(&block), (q, b, c));
            for (i, &byte) in block.iter().enumerate() {
                prop_assert_eq!(q >> i & 1 == 1, byte == b'"');
                prop_assert_eq!(b >> i & 1 == 1, byte == b'\\');
                prop_assert_eq!(c >> i & 1 == 1, byte < 0x20);
            }
        }

        #[test]
        fn agrees_with_serde_json_on_soup(text in json_soup()) {
            prop_assert_eq!(skips(&text).is_some(), serde_accepts(&text), "{:?}", text);
        }

        #[test]
        fn agrees_with_serde_json_on_valid_documents(value in any_json(), pad in 0usize..80) {
            let text = format!("{}{}", " ".repeat(pad), value);
            prop_assert!(serde_accepts(&text));
            prop_assert_eq!(skips(&text), Some(text.trim_start()));
        }
    }

    fn any_json() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_string()),
            any::<bool>().prop_map(|b| b.to_string()),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| f.to_string()),
            any::<i64>().prop_map(|i| i.to_string()),
            "\\PC{0,150}".prop_map(|s| serde_json::Value::String(s).to_string()),
        ];
        leaf.prop_recursive(4, 40, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec(("\\PC{0,10}", inner), 0..6).prop_map(|m| {
                    let members: Vec<String> = m
                        .into_iter()
                        .map(|(k, v)| format!("{} : {v}", serde_json::Value::String(k)))
                        .collect();
                    format!("{{ {} }}", members.join(" ,\n"))
                }),
            ]
        })
    }
}
