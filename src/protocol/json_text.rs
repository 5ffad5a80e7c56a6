//! Decoding a JSON string literal that a parser has already validated.
//!
//! serde_json unescapes escape-dense strings (a JSON document embedded in a
//! JSON message has a backslash before every quote) at a fraction of memory
//! speed; this decoder copies the runs between escapes a word at a time and
//! is several times faster. It follows serde_json exactly, including refusing a
//! lone surrogate (`\ud800` not followed by a low surrogate), so a text that
//! serde_json would not decode is not decoded here either.

use super::json_scan::{block_at, masks, Escapes, BLOCK};
use std::borrow::Cow;

/// Decodes `raw`, a JSON string literal with its quotes. Borrows when there
/// is no escape. `None` when the literal is malformed or holds a lone
/// surrogate.
pub fn decode(raw: &str) -> Option<Cow<'_, str>> {
    decode_split(raw, PARALLEL_BYTES)
}

/// A raw value's text when it is a string literal; `None` for any other
/// value, or a literal that does not decode.
pub fn string(raw: &str) -> Option<Cow<'_, str>> {
    raw.starts_with('"').then(|| decode(raw)).flatten()
}

/// The number of characters `raw` (a validated JSON string literal with its
/// quotes) decodes to, without decoding it: the literal's characters less
/// what each escape adds (`\n` is one character, `\u00e9` one, a surrogate
/// pair `\ud83d\ude00` one). A lone surrogate counts as one.
pub fn char_len(raw: &str) -> usize {
    let inner = raw
        .strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .unwrap_or(raw);
    let bytes = inner.as_bytes();
    let mut extra = 0usize;
    let mut at = 0;
    while let Some(found) = memchr::memchr(b'\\', &bytes[at..]) {
        let escape = at + found;
        let len = match bytes.get(escape + 1) {
            Some(b'u') => {
                let high = bytes.get(escape + 2..escape + 6).and_then(hex4);
                let pair = high.is_some_and(|u| (0xD800..=0xDBFF).contains(&u))
                    && bytes.get(escape + 6) == Some(&b'\\')
                    && bytes.get(escape + 7) == Some(&b'u')
                    && bytes
                        .get(escape + 8..escape + 12)
                        .and_then(hex4)
                        .is_some_and(|u| (0xDC00..=0xDFFF).contains(&u));
                if pair {
                    12
                } else {
                    6
                }
            }
            _ => 2,
        };
        extra += len - 1;
        at = (escape + len).min(bytes.len());
    }
    inner.chars().count().saturating_sub(extra)
}

/// Literals at least this long are decoded in two halves on two threads
/// (a thread costs tens of microseconds; decoding 1 MB about a millisecond).
const PARALLEL_BYTES: usize = 256 * 1024;

/// [`decode`], in two halves on two threads from `parallel_bytes` up.
fn decode_split(raw: &str, parallel_bytes: usize) -> Option<Cow<'_, str>> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    let bytes = inner.as_bytes();
    if !has_backslash(bytes) {
        return Some(Cow::Borrowed(inner));
    }
    let split = (bytes.len() >= parallel_bytes)
        .then(|| escape_near_middle(bytes))
        .flatten();
    let out = match split {
        Some(mid) => {
            // One buffer for both halves: the head decodes into its start,
            // the tail into the part after the head's room, on two threads;
            // then the tail moves down behind the head. A buffer of its own
            // for the tail cost a first-seen 1 MB output about 130 page
            // faults more in the proxy (`scripts/page-faults`), and
            // `decode_1MB` 0.92-0.97 ms against 0.71-0.81 under the
            // proxy's malloc settings (`cargo bench --bench rewrite` with
            // `GLIBC_TUNABLES=glibc.malloc.mmap_threshold=32768`).
            let (head, tail) = bytes.split_at(mid);
            let mut out = vec![0u8; head.len() + tail.len() + 2 * RUN];
            let (head_room, tail_room) = out.split_at_mut(head.len() + RUN);
            let tail_room = std::sync::Mutex::new(tail_room);
            let (tail_len, head_len) = crate::parallel::beside(
                "toolstub-decode",
                || {
                    let mut room = tail_room.lock().ok()?;
                    unescape_into(tail, &mut room)
                },
                || unescape_into(head, head_room),
            );
            let (head_len, tail_len) = (head_len?, tail_len?);
            let tail_at = head.len() + RUN;
            out.copy_within(tail_at..tail_at + tail_len, head_len);
            out.truncate(head_len + tail_len);
            out
        }
        None => unescape(bytes)?,
    };
    // Both halves split at an ASCII backslash, so each is whole UTF-8.
    String::from_utf8(out).ok().map(Cow::Owned)
}

/// Whether `bytes` holds a backslash. Most literals are short keys and
/// values, for which a plain loop costs less than setting up `memchr`.
pub(crate) fn has_backslash(bytes: &[u8]) -> bool {
    if bytes.len() <= 32 {
        bytes.contains(&b'\\')
    } else {
        memchr::memchr(b'\\', bytes).is_some()
    }
}

/// The index of an escape at or after the middle of `bytes` where the text
/// can be cut in two independently decodable halves: a backslash preceded by
/// an even run of backslashes (so it starts an escape) that is not the low
/// half of a surrogate pair. `None` when there is no such escape.
fn escape_near_middle(bytes: &[u8]) -> Option<usize> {
    let mut from = bytes.len() / 2;
    loop {
        let at = from + memchr::memchr(b'\\', bytes.get(from..)?)?;
        let run = bytes[..at]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        let low_surrogate = bytes.get(at + 1) == Some(&b'u')
            && bytes
                .get(at + 2..at + 6)
                .and_then(hex4)
                .is_some_and(|u| (0xDC00..=0xDFFF).contains(&u));
        if run % 2 == 0 && !low_surrogate && at > 0 {
            return Some(at);
        }
        from = at + 1;
    }
}

/// Unescapes the inside of a JSON string literal (UTF-8 bytes out).
///
/// A JSON document inside a JSON string has an escape every few bytes. The
/// escapes of each 64-byte block are found at once (the scanner's masks and
/// backslash-run logic), and the run before each is copied 16 bytes at a
/// time into an output with 16 spare bytes: per escape a few instructions
/// that do not wait on each other, not a search from the previous one.
fn unescape(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut out = vec![0u8; bytes.len() + RUN];
    let len = unescape_into(bytes, &mut out)?;
    out.truncate(len);
    Some(out)
}

/// Decodes `bytes` into the start of `out`, which has room for them and
/// [`RUN`] bytes more (escapes only ever shrink the text; the spare bytes
/// take the last run's whole-word copy); returns the decoded length.
fn unescape_into(bytes: &[u8], out: &mut [u8]) -> Option<usize> {
    if out.len() < bytes.len() + RUN {
        return None;
    }
    let mut w = 0;
    // The start of the input not yet copied or decoded.
    let mut from = 0;
    let mut escapes = Escapes::default();
    let mut at = 0;
    while at < bytes.len() {
        let mut padded = [0u8; BLOCK];
        let block = block_at(bytes, at, &mut padded)?;
        let (_, mut escape) = escapes.next(masks(block).1);
        while escape != 0 {
            let k = at + escape.trailing_zeros() as usize;
            escape &= escape - 1;
            if k < from {
                // The second half of a surrogate pair, already decoded.
                continue;
            }
            copy_run(bytes, from, k, out, &mut w)?;
            let escaped = *bytes.get(k + 1)?;
            match SIMPLE[usize::from(escaped)] {
                0 if escaped == b'u' => {
                    let (c, len) = unicode_escape(bytes, k)?;
                    let n = c.len_utf8();
                    c.encode_utf8(out.get_mut(w..w + n)?);
                    w += n;
                    from = k + len;
                }
                0 => return None,
                byte => {
                    *out.get_mut(w)? = byte;
                    w += 1;
                    from = k + 2;
                }
            }
        }
        at += BLOCK;
    }
    copy_run(bytes, from, bytes.len(), out, &mut w)?;
    Some(w)
}

/// Bytes a short run is copied in (one unaligned 16-byte move).
const RUN: usize = 16;

/// Appends `bytes[from..to]` to `out` at `w`. `out` has [`RUN`] spare bytes
/// past anything written so far (`w <= from`), so a short run is copied as
/// a whole 16-byte move when the input has 16 bytes from `from`.
fn copy_run(bytes: &[u8], from: usize, to: usize, out: &mut [u8], w: &mut usize) -> Option<()> {
    let len = to.checked_sub(from)?;
    match bytes.get(from..from + RUN) {
        Some(chunk) if len <= RUN => out.get_mut(*w..*w + RUN)?.copy_from_slice(chunk),
        _ => out
            .get_mut(*w..*w + len)?
            .copy_from_slice(bytes.get(from..to)?),
    }
    *w += len;
    Some(())
}

/// What a two-character escape stands for, by the character after the
/// backslash (0: not a two-character escape).
const SIMPLE: [u8; 256] = {
    let mut table = [0u8; 256];
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table[b'/' as usize] = b'/';
    table[b'b' as usize] = 0x08;
    table[b'f' as usize] = 0x0c;
    table[b'n' as usize] = b'\n';
    table[b'r' as usize] = b'\r';
    table[b't' as usize] = b'\t';
    table
};

/// The character of the `\uXXXX` escape at `at` (a surrogate pair takes two)
/// and the escape's length; `None` for a lone surrogate or bad hex digits.
fn unicode_escape(bytes: &[u8], at: usize) -> Option<(char, usize)> {
    let high = hex4(bytes.get(at + 2..at + 6)?)?;
    match high {
        0xD800..=0xDBFF => {
            if bytes.get(at + 6..at + 8)? != b"\\u" {
                return None;
            }
            let low = hex4(bytes.get(at + 8..at + 12)?)?;
            if !(0xDC00..=0xDFFF).contains(&low) {
                return None;
            }
            let c = char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))?;
            Some((c, 12))
        }
        0xDC00..=0xDFFF => None,
        other => Some((char::from_u32(other)?, 6)),
    }
}

fn hex4(digits: &[u8]) -> Option<u32> {
    let mut value = 0u32;
    for &d in digits {
        value = value * 16 + char::from(d).to_digit(16)?;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_backslash_is_found_in_short_and_long_literals() {
        for len in [0, 1, 15, 16, 31, 32, 33, 64, 200] {
            let plain = "a".repeat(len);
            assert!(!has_backslash(plain.as_bytes()), "{len}");
            for at in 0..len {
                let mut escaped = plain.clone().into_bytes();
                escaped[at] = b'\\';
                assert!(has_backslash(&escaped), "{len} at {at}");
            }
        }
    }

    #[test]
    fn decodes_every_escape() {
        let raw = r#""a\"b\\c\/d\b\f\n\r\t\u00e9\ud83d\ude00z""#;
        assert_eq!(
            decode(raw).as_deref(),
            Some("a\"b\\c/d\u{8}\u{c}\n\r\té😀z")
        );
        assert!(matches!(decode("\"plain\""), Some(Cow::Borrowed("plain"))));
        assert_eq!(decode(r#""\ud800""#), None, "lone high surrogate");
        assert_eq!(decode(r#""\udc00x""#), None, "lone low surrogate");
        assert_eq!(decode(r#""\ud800\u0041""#), None);
        assert_eq!(decode(r#""\x""#), None);
        assert_eq!(decode("\"unterminated\\"), None);
        // Escapes at every alignment within and across 64-byte blocks, a
        // surrogate pair and a lone surrogate straddling each boundary.
        for pad in 0..140 {
            let pair = format!(
                "\"{}\\ud83d\\ude00{}\"",
                "p".repeat(pad),
                "\\n".repeat(pad % 7)
            );
            let expected = format!("{}\u{1f600}{}", "p".repeat(pad), "\n".repeat(pad % 7));
            assert_eq!(
                decode(&pair).as_deref(),
                Some(expected.as_str()),
                "pad {pad}"
            );
            let lone = format!("\"{}\\ud83d\\\\ude00\"", "p".repeat(pad));
            assert_eq!(decode(&lone), None, "pad {pad}");
            let text = format!("{}\"q\"\\{}\u{e9}\n", "x".repeat(pad), "y".repeat(pad));
            let raw = serde_json::to_string(&text).unwrap();
            assert_eq!(decode(&raw).as_deref(), Some(text.as_str()), "pad {pad}");
        }
    }

    #[test]
    fn char_len_counts_what_decode_gives() {
        let raw = r#""a\"b\\c\/d\b\f\n\r\t\u00e9\ud83d\ude00z""#;
        assert_eq!(char_len(raw), 15);
        assert_eq!(char_len(raw), decode(raw).expect("decodes").chars().count());
        assert_eq!(char_len("\"\""), 0);
        assert_eq!(char_len("\"héllo\""), 5);
        assert_eq!(char_len(r#""\ud800x""#), 2, "a lone surrogate is one");
        assert_eq!(
            char_len(r#""\\u0041""#),
            6,
            "an escaped backslash, then text"
        );
    }

    proptest! {
        #[test]
        fn char_len_agrees_with_decoding(text in "\\PC{0,200}", controls in prop::collection::vec(0u8..32, 0..5)) {
            let mut s = text;
            for c in controls {
                s.push(char::from(c));
            }
            let raw = serde_json::to_string(&s).expect("encode");
            prop_assert_eq!(char_len(&raw), s.chars().count());
            let escaped: String = s.encode_utf16().map(|u| format!("\\u{u:04x}")).collect();
            prop_assert_eq!(char_len(&format!("\"{escaped}\"")), s.chars().count());
        }

        #[test]
        fn agrees_with_serde_json(text in "\\PC{0,200}", controls in prop::collection::vec(0u8..32, 0..5)) {
            let mut s = text;
            for c in controls {
                s.push(char::from(c));
            }
            let raw = serde_json::to_string(&s).expect("encode");
            let decoded = decode(&raw).map(Cow::into_owned);
            prop_assert_eq!(&decoded, &Some(s.clone()));
            // Cut in two halves decoded on two threads: the same text.
            prop_assert_eq!(decode_split(&raw, 0).map(Cow::into_owned), decoded);
            // A literal with \u escapes everywhere decodes the same too.
            let escaped: String = s.encode_utf16().map(|u| format!("\\u{u:04x}")).collect();
            let raw = format!("\"{escaped}\"");
            let expected: Option<String> = serde_json::from_str(&raw).ok();
            prop_assert_eq!(decode(&raw).map(|c| c.into_owned()), expected.clone());
            prop_assert_eq!(decode_split(&raw, 0).map(|c| c.into_owned()), expected);
        }
    }
}
