//! Decoding a JSON string literal that a parser has already validated.
//!
//! serde_json unescapes escape-dense strings (a JSON document embedded in a
//! JSON message has a backslash before every quote) at a fraction of memory
//! speed; this decoder copies the runs between escapes a word at a time and
//! is several times faster. It follows serde_json exactly, including refusing a
//! lone surrogate (`\ud800` not followed by a low surrogate), so a text that
//! serde_json would not decode is not decoded here either.

use std::borrow::Cow;

/// Decodes `raw`, a JSON string literal with its quotes. Borrows when there
/// is no escape. `None` when the literal is malformed or holds a lone
/// surrogate.
pub fn decode(raw: &str) -> Option<Cow<'_, str>> {
    decode_split(raw, PARALLEL_BYTES)
}

/// Literals at least this long are decoded in two halves on two threads
/// (a thread costs tens of microseconds; decoding 1 MB about a millisecond).
const PARALLEL_BYTES: usize = 256 * 1024;

/// [`decode`], in two halves on two threads from `parallel_bytes` up.
fn decode_split(raw: &str, parallel_bytes: usize) -> Option<Cow<'_, str>> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    let bytes = inner.as_bytes();
    if memchr::memchr(b'\\', bytes).is_none() {
        return Some(Cow::Borrowed(inner));
    }
    let split = (bytes.len() >= parallel_bytes)
        .then(|| escape_near_middle(bytes))
        .flatten();
    let out = match split {
        Some(mid) => {
            let (head, tail) = bytes.split_at(mid);
            let (tail, head) =
                crate::parallel::beside("toolstub-decode", || unescape(tail), || unescape(head));
            let mut out = head?;
            out.extend_from_slice(&tail?);
            out
        }
        None => unescape(bytes)?,
    };
    // Both halves split at an ASCII backslash, so each is whole UTF-8.
    String::from_utf8(out).ok().map(Cow::Owned)
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
fn unescape(bytes: &[u8]) -> Option<Vec<u8>> {
    let Some(first) = memchr::memchr(b'\\', bytes) else {
        return Some(bytes.to_vec());
    };
    // Escapes only ever shrink the text, so the output fits in the input's
    // length; the 8 spare bytes let a run be copied a word at a time. A JSON
    // document inside a JSON string has an escape every few bytes, too often
    // for per-run `memchr` calls to pay off: runs are copied eight bytes at a
    // time, and the first backslash in a word is found arithmetically.
    let mut out = vec![0u8; bytes.len() + WORD];
    out.get_mut(..first)?.copy_from_slice(bytes.get(..first)?);
    let (mut i, mut w) = (first, first);
    loop {
        while let Some(word) = bytes.get(i..i + WORD) {
            out.get_mut(w..w + WORD)?.copy_from_slice(word);
            match first_backslash(word) {
                Some(k) => {
                    i += k;
                    w += k;
                    break;
                }
                None => {
                    i += WORD;
                    w += WORD;
                }
            }
        }
        while let Some(&b) = bytes
            .get(i)
            .filter(|&&b| b != b'\\' && i + WORD > bytes.len())
        {
            *out.get_mut(w)? = b;
            i += 1;
            w += 1;
        }
        if i >= bytes.len() {
            break;
        }
        // `bytes[i]` is a backslash.
        let escape = *bytes.get(i + 1)?;
        i += 2;
        let single = match escape {
            b'"' => Some(b'"'),
            b'\\' => Some(b'\\'),
            b'/' => Some(b'/'),
            b'b' => Some(0x08),
            b'f' => Some(0x0c),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            _ => None,
        };
        if let Some(byte) = single {
            *out.get_mut(w)? = byte;
            w += 1;
            continue;
        }
        let c = match escape {
            b'u' => {
                let high = hex4(bytes.get(i..i + 4)?)?;
                i += 4;
                match high {
                    0xD800..=0xDBFF => {
                        if bytes.get(i..i + 2)? != b"\\u" {
                            return None;
                        }
                        let low = hex4(bytes.get(i + 2..i + 6)?)?;
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            return None;
                        }
                        i += 6;
                        char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))?
                    }
                    0xDC00..=0xDFFF => return None,
                    other => char::from_u32(other)?,
                }
            }
            _ => return None,
        };
        let n = c.len_utf8();
        c.encode_utf8(out.get_mut(w..w + n)?);
        w += n;
    }
    out.truncate(w);
    Some(out)
}

/// Bytes handled at a time when copying runs.
const WORD: usize = 8;

/// The index of the first backslash in an 8-byte word, if any (the classic
/// "has a zero byte" bit trick on the word XOR backslashes; exact for the
/// lowest match, which is the only one used).
fn first_backslash(word: &[u8]) -> Option<usize> {
    let word = u64::from_le_bytes(word.try_into().ok()?);
    let x = word ^ u64::from_le_bytes([b'\\'; WORD]);
    let found = x.wrapping_sub(0x0101_0101_0101_0101) & !x & 0x8080_8080_8080_8080;
    (found != 0).then(|| (found.trailing_zeros() / 8) as usize)
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
        // Escapes at every alignment of the word-at-a-time copy.
        for pad in 0..20 {
            let text = format!("{}\"q\"\\{}\u{e9}\n", "x".repeat(pad), "y".repeat(pad));
            let raw = serde_json::to_string(&text).unwrap();
            assert_eq!(decode(&raw).as_deref(), Some(text.as_str()), "pad {pad}");
        }
    }

    proptest! {
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
