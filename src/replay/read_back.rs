//! The recalls a stub causes, as the replay charges them.
//!
//! The model's real next message is known (the session recorded it). When
//! it uses something the direct request carried and toolstub's did not, a
//! model behind toolstub would have had to read it back first: one more
//! round of the whole request (at the cached price, as the cache model
//! bills it) plus the text read back. "Something" is an identifier, a path
//! or a number ([`identifiers`]): plain words are left out, since a model
//! writes them from any context, and so are short numbers.
//!
//! What is read back is, for each externalized output of the request that
//! holds one of the missing identifiers, what one `tool_result_read` call
//! with its default limit returns ([`READ_LIMIT_CHARS`] characters): from
//! the start, or around the identifier when it lies further in. With
//! history restoration (toolstub's default) that exchange then stays in the
//! conversation, after the message it followed, so the replay puts it in
//! every later request that holds that message.

use std::collections::BTreeSet;

/// `tool_result_read`'s default `limit`.
pub const READ_LIMIT_CHARS: usize = 20_000;

/// The identifiers of a text, hashed (xxh3), sorted, unique.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identifiers(Vec<u64>);

impl Identifiers {
    pub fn contains(&self, id: u64) -> bool {
        self.0.binary_search(&id).is_ok()
    }

    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().copied()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }
}

/// Whether a token is an identifier, a path or a number a model would only
/// write after seeing it: a path or dotted name (`src/a.rs`,
/// `django.db.models`), a name with `_` or inner capitals (`field_name`,
/// `IndexError`), letters with digits (`col2`), or a number of 3 or more
/// digits (a line number, a port, a count).
fn is_identifier(t: &str) -> bool {
    let bytes = t.as_bytes();
    if bytes.iter().all(u8::is_ascii_digit) {
        return bytes.len() >= 3;
    }
    if bytes.len() < 4 || !bytes.iter().any(u8::is_ascii_alphabetic) {
        return false;
    }
    if t.contains('/') || t.contains('_') {
        return true;
    }
    if t.contains('.') {
        return t.split('.').all(|p| !p.is_empty());
    }
    let upper = bytes.iter().filter(|b| b.is_ascii_uppercase()).count();
    let lower = bytes.iter().filter(|b| b.is_ascii_lowercase()).count();
    let inner_upper = bytes[1..].iter().any(u8::is_ascii_uppercase);
    if upper >= 2 && lower >= 1 && inner_upper {
        return true;
    }
    bytes.iter().any(u8::is_ascii_digit)
}

/// The identifier tokens of `text` (see [`is_identifier`]): runs of
/// `[A-Za-z0-9_./-]`, trimmed of `.`, `/` and `-` at their ends.
fn tokens(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c)))
        .map(|t| t.trim_matches(|c| c == '.' || c == '/' || c == '-'))
        .filter(|t| !t.is_empty() && is_identifier(t))
}

fn hash(token: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(token.as_bytes())
}

/// The identifiers of `text`, hashed.
pub fn identifiers(text: &str) -> Identifiers {
    let set: BTreeSet<u64> = tokens(text).map(hash).collect();
    Identifiers(set.into_iter().collect())
}

/// The tokens of `text` among `ids` (hashes), sorted, at most `n`: what a
/// report names of a recall.
pub fn named(text: &str, ids: &[u64], n: usize) -> Vec<String> {
    let set: BTreeSet<&str> = tokens(text).filter(|t| ids.contains(&hash(t))).collect();
    set.into_iter().take(n).map(str::to_string).collect()
}

/// The identifiers of `answer` that some block of `direct` holds and no
/// block of `toolstub` does.
pub fn missing<'a>(
    answer: &Identifiers,
    direct: impl Iterator<Item = &'a Identifiers> + Clone,
    toolstub: impl Iterator<Item = &'a Identifiers> + Clone,
) -> Vec<u64> {
    answer
        .iter()
        .filter(|&id| {
            direct.clone().any(|ids| ids.contains(id))
                && !toolstub.clone().any(|ids| ids.contains(id))
        })
        .collect()
}

/// What one `tool_result_read` call with the default limit returns of `text`.
pub fn read_back(text: &str) -> &str {
    match text.char_indices().nth(READ_LIMIT_CHARS) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

/// What a model reads of `text` to find one of `ids`: the first
/// [`READ_LIMIT_CHARS`] characters when one of them is there, otherwise
/// the window of that many characters centred on the first occurrence (a
/// search, then a read at its offset).
pub fn read_for<'t>(text: &'t str, ids: &[u64]) -> &'t str {
    let first = read_back(text);
    if tokens(first).any(|t| ids.contains(&hash(t))) {
        return first;
    }
    let Some(at) = tokens(text)
        .find(|t| ids.contains(&hash(t)))
        .map(|t| t.as_ptr() as usize - text.as_ptr() as usize)
    else {
        return first;
    };
    let before = text[..at].chars().count();
    let start_char = before.saturating_sub(READ_LIMIT_CHARS / 2);
    let start = text
        .char_indices()
        .nth(start_char)
        .map_or(text.len(), |(i, _)| i);
    read_back(&text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has(text: &str, token: &str) -> bool {
        identifiers(text).contains(xxhash_rust::xxh3::xxh3_64(token.as_bytes()))
    }

    #[test]
    fn identifiers_are_names_paths_and_numbers_not_words() {
        let text =
            "The function field_name in astropy/io/ascii/ui.py raised IndexError at line 290; \
                    see django.db.models and col2. Please modify the behaviour; it is 42.";
        for t in [
            "field_name",
            "astropy/io/ascii/ui.py",
            "IndexError",
            "290",
            "django.db.models",
            "col2",
        ] {
            assert!(has(text, t), "{t}");
        }
        for t in ["function", "Please", "modify", "behaviour", "42", "The"] {
            assert!(!has(text, t), "{t}");
        }
    }

    #[test]
    fn missing_is_what_only_the_direct_request_carried() {
        let answer = identifiers("edit field_name at 290 in src/app.py");
        let direct = [
            identifiers("def field_name(): ... line 290"),
            identifiers("src/app.py"),
        ];
        let toolstub = [identifiers("[toolstub stub]"), identifiers("src/app.py")];
        let m = missing(&answer, direct.iter(), toolstub.iter());
        assert_eq!(m.len(), 2);
        let none = missing(&answer, direct.iter(), direct.iter());
        assert!(none.is_empty());
    }

    #[test]
    fn a_needed_identifier_past_the_first_window_is_read_around_it() {
        let text = format!(
            "{}late_name here{}",
            "x ".repeat(READ_LIMIT_CHARS),
            "y ".repeat(100)
        );
        let ids = [xxhash_rust::xxh3::xxh3_64(b"late_name")];
        let window = read_for(&text, &ids);
        assert!(window.contains("late_name"));
        assert!(window.chars().count() <= READ_LIMIT_CHARS);
        let early = format!("early_name {}", "x ".repeat(READ_LIMIT_CHARS));
        let ids = [xxhash_rust::xxh3::xxh3_64(b"early_name")];
        assert!(read_for(&early, &ids).starts_with("early_name"));
    }

    #[test]
    fn read_back_stops_at_the_default_limit() {
        let long = "é".repeat(READ_LIMIT_CHARS + 10);
        assert_eq!(read_back(&long).chars().count(), READ_LIMIT_CHARS);
        assert_eq!(read_back("short"), "short");
    }
}
