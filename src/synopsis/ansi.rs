//! Stripping ANSI escape sequences (terminal colours, cursor moves, OSC
//! hyperlinks) before detection, so coloured compiler or test output is read as
//! the text it is instead of tripping the binary-like check.

use std::borrow::Cow;

const ESC: char = '\u{1b}';

/// Removes ANSI escape sequences. Borrows when there is nothing to remove.
pub fn strip(text: &str) -> Cow<'_, str> {
    if memchr::memchr(0x1b, text.as_bytes()).is_none() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != ESC {
            out.push(c);
            continue;
        }
        match chars.peek().copied() {
            // CSI: ESC [ parameters intermediates final-byte (0x40..=0x7e).
            Some('[') => {
                chars.next();
                for c in chars.by_ref() {
                    if ('\u{40}'..='\u{7e}').contains(&c) {
                        break;
                    }
                }
            }
            // OSC, DCS, SOS, PM, APC: a string ended by BEL or ESC \.
            Some(']' | 'P' | 'X' | '^' | '_') => {
                chars.next();
                while let Some(c) = chars.next() {
                    if c == '\u{7}' {
                        break;
                    }
                    if c == ESC && chars.peek() == Some(&'\\') {
                        chars.next();
                        break;
                    }
                }
            }
            // Character-set selection: ESC ( B and friends take one more char.
            Some('(' | ')' | '*' | '+' | '#' | '%') => {
                chars.next();
                chars.next();
            }
            // Any other two-character escape (ESC =, ESC >, ESC 7, ESC M ...).
            Some(c) if ('\u{20}'..='\u{7e}').contains(&c) => {
                chars.next();
            }
            // A lone ESC: drop it.
            _ => {}
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_colours_and_links() {
        let coloured = "\u{1b}[1m\u{1b}[31merror\u{1b}[0m: bad\n\u{1b}]8;;http://x\u{7}link\u{1b}]8;;\u{1b}\\ done\u{1b}(B";
        assert_eq!(strip(coloured), "error: bad\nlink done");
    }

    #[test]
    fn borrows_clean_text() {
        assert!(matches!(strip("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn unterminated_sequences_do_not_panic() {
        assert_eq!(strip("a\u{1b}"), "a");
        assert_eq!(strip("a\u{1b}[12"), "a");
        assert_eq!(strip("a\u{1b}]unterminated"), "a");
    }
}
