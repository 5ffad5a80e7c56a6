//! Small text helpers shared by every kind: clipping to a cap, escaping a
//! key's newlines, collapsing whitespace. All counts are in code points.

/// Every rendered synopsis line is clipped to this many characters, so one
/// hostile key or cell cannot blow up a stub.
pub const LINE_CAP: usize = 200;

/// A string over `cap` characters becomes its first `cap - 3` characters
/// followed by `...`.
pub fn clip(value: &str, cap: usize) -> String {
    if cap == 0 {
        return String::new();
    }
    match value.char_indices().nth(cap) {
        None => value.to_string(),
        Some(_) => {
            let keep = cap.saturating_sub(3);
            let end = value
                .char_indices()
                .nth(keep)
                .map_or(value.len(), |(i, _)| i);
            let mut out = String::with_capacity(end + 3);
            out.push_str(&value[..end]);
            out.push_str("...");
            out
        }
    }
}

/// Clips a finished line to [`LINE_CAP`].
pub fn clip_line(value: String) -> String {
    if value.len() <= LINE_CAP {
        // Byte length bounds the character count: nothing to do.
        return value;
    }
    clip(&value, LINE_CAP)
}

/// Makes a key or a cell safe to show on one line: line breaks and other
/// control characters become visible escapes. Works on at most `cap`
/// characters of the input, so a 1 MB key costs no more than a short one.
pub fn one_line(value: &str, cap: usize) -> String {
    let mut out = String::new();
    for (taken, c) in value.chars().enumerate() {
        if taken > cap {
            break;
        }
        push_escaped(&mut out, c);
    }
    clip(&out, cap)
}

/// Pushes `c`, escaping line breaks, tabs and other control characters.
pub fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if c.is_control() => {
            use std::fmt::Write;
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c => out.push(c),
    }
}

/// Collapses every run of whitespace to one space, trims, and clips to `cap`.
/// Reads only as much of `value` as the cap can show.
pub fn collapse_whitespace(value: &str, cap: usize) -> String {
    let mut out = String::new();
    let mut chars = 0usize;
    let mut pending_space = false;
    for c in value.chars() {
        if c.is_whitespace() {
            pending_space = chars > 0;
            continue;
        }
        if pending_space {
            out.push(' ');
            chars += 1;
            pending_space = false;
        }
        out.push(c);
        chars += 1;
        if chars > cap {
            break;
        }
    }
    clip(&out, cap)
}

/// Splits text into lines the way a reader counts them: `\n`, `\r\n` and a
/// lone `\r` each end a line; a final line break does not open an empty line.
pub fn split_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        match memchr::memchr2(b'\n', b'\r', rest.as_bytes()) {
            None => {
                let line = rest;
                rest = "";
                Some(line)
            }
            Some(i) => {
                let line = &rest[..i];
                let skip =
                    if rest.as_bytes()[i] == b'\r' && rest.as_bytes().get(i + 1) == Some(&b'\n') {
                        2
                    } else {
                        1
                    };
                rest = &rest[i + skip..];
                Some(line)
            }
        }
    })
}

/// `text.split_whitespace().count()`, eight ASCII bytes at a time: a word
/// starts at each non-whitespace byte after whitespace. Stretches with
/// non-ASCII bytes go a character at a time (Unicode's White_Space, as
/// `char::is_whitespace`). The std iterator decodes every character and was
/// most of the text kind's time.
pub fn count_words(text: &str) -> usize {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const ONES: u64 = 0x0101_0101_0101_0101;
    let bytes = text.as_bytes();
    let mut words = 0usize;
    // Whether the byte before `i` is whitespace (the text starts "after" one).
    let mut after_space = true;
    let mut i = 0;
    while i < bytes.len() {
        if let Some(chunk) = bytes.get(i..i + 8) {
            let word = u64::from_le_bytes(chunk.try_into().unwrap_or([0x80; 8]));
            if word & HIGH == 0 {
                // ASCII only. Whitespace: 0x20, or 0x09..=0x0D (each test
                // exact per byte: no carry crosses a byte below 0x80).
                let x = word ^ (ONES * 0x20);
                let space = !(((x & !HIGH) + !HIGH) | x) & HIGH;
                let at_least_9 = word + ONES * (0x80 - 0x09);
                let at_least_14 = word + ONES * (0x80 - 0x0E);
                let ws = space | (at_least_9 & !at_least_14 & HIGH);
                let previous_ws = ws << 8 | u64::from(after_space) << 7;
                // One high bit per word start; summed by a multiply (the
                // baseline x86-64 target has no popcount instruction).
                let starts = (!ws & HIGH & previous_ws) >> 7;
                words += (starts.wrapping_mul(ONES) >> 56) as usize;
                after_space = ws >> 63 == 1;
                i += 8;
                continue;
            }
        }
        // A character at a time until past the next eight bytes (or the end),
        // stopping on a character boundary.
        let stop = (i + 8).min(bytes.len());
        let Some(rest) = text.get(i..) else {
            break;
        };
        for c in rest.chars() {
            let ws = c.is_whitespace();
            if !ws && after_space {
                words += 1;
            }
            after_space = ws;
            i += c.len_utf8();
            if i >= stop {
                break;
            }
        }
    }
    words
}

/// Counts lines exactly as [`split_lines`] yields them, without allocating.
pub fn count_lines(text: &str) -> usize {
    let bytes = text.as_bytes();
    if bytes.is_empty() {
        return 0;
    }
    let ends_with_break = matches!(bytes.last(), Some(b'\n' | b'\r'));
    line_breaks(text) + usize::from(!ends_with_break)
}

/// Line breaks in `text`: `\n`, `\r` and `\r\n` each count once.
pub fn line_breaks(text: &str) -> usize {
    let bytes = text.as_bytes();
    memchr::memchr_iter(b'\n', bytes).count() + memchr::memchr_iter(b'\r', bytes).count()
        - memchr::memmem::find_iter(bytes, b"\r\n").count()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    #[test]
    fn words_are_counted_as_split_whitespace_counts_them() {
        for text in [
            "",
            " ",
            "one",
            "one two\tthree\nfour\r\nfive\x0b\x0csix",
            "  leading and trailing  ",
            "exactly8 exactly8",
            "non\u{a0}breaking\u{3000}ideographic\u{2028}line\u{85}next",
            "caf\u{e9} na\u{ef}ve \u{1f600} emoji\u{1f600}glued",
            "\x1c\x1d\x1e\x1f are not whitespace",
        ] {
            assert_eq!(
                count_words(text),
                text.split_whitespace().count(),
                "{text:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn count_words_matches_split_whitespace(parts in prop::collection::vec(prop_oneof![
            Just(" ".to_string()), Just("\t".to_string()), Just("\n".to_string()), Just("\x0b".to_string()),
            Just("\u{a0}".to_string()), Just("\u{2003}".to_string()), Just("\u{3000}".to_string()),
            Just("\u{85}".to_string()), "[a-z]{1,12}", "\\PC{1,6}", Just("\u{1f600}".to_string()),
        ], 0..60)) {
            let text = parts.concat();
            prop_assert_eq!(count_words(&text), text.split_whitespace().count());
        }
    }

    use super::*;

    #[test]
    fn clip_keeps_short_strings_and_marks_long_ones() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcd", 3), "...");
        assert_eq!(clip("abcdefgh", 6), "abc...");
        assert_eq!(clip("日本語テキスト", 5), "日本...");
        assert_eq!(clip("x", 0), "");
    }

    #[test]
    fn one_line_escapes_breaks_and_controls() {
        assert_eq!(one_line("a\nb\tc\u{1}", 50), "a\\nb\\tc\\u{1}");
        assert_eq!(one_line(&"k".repeat(1000), 10), "kkkkkkk...");
    }

    #[test]
    fn collapse_whitespace_folds_runs() {
        assert_eq!(collapse_whitespace("  a \n\t b  ", 50), "a b");
        assert_eq!(collapse_whitespace("aaaa bbbb", 6), "aaa...");
    }

    #[test]
    fn lines_are_split_on_every_break_style() {
        let v: Vec<_> = split_lines("a\nb\r\nc\rd\n").collect();
        assert_eq!(v, ["a", "b", "c", "d"]);
        for text in ["", "a", "a\n", "a\r\nb", "\n\n", "a\r\r\nb\r", "x\ry\n\rz"] {
            assert_eq!(count_lines(text), split_lines(text).count(), "{text:?}");
        }
    }
}
