//! Small edits of JSON texts that keep every byte they do not change: the
//! raw text of a member, its span, a member's value replaced or added.
//! Adapters use them to change a field of an upstream event or response
//! without re-serializing it (key order and formatting stay the upstream's).

use super::json_scan::Scanner;
use super::{json_string, span_in};
use std::ops::Range;

/// The raw text of a top-level member of a JSON object.
pub fn raw_member<'a>(object: &'a str, key: &str) -> Option<&'a str> {
    member_span(object, key).map(|span| &object[span])
}

/// Where the value of a top-level member of a JSON object is.
pub fn member_span(object: &str, key: &str) -> Option<Range<usize>> {
    member_spans(object, &[key])?.pop().flatten()
}

/// Where the values of several top-level members are, in one pass (the
/// first occurrence of each); `None` if `object` is not an object.
pub fn member_spans(object: &str, keys: &[&str]) -> Option<Vec<Option<Range<usize>>>> {
    let mut found: Vec<Option<Range<usize>>> = vec![None; keys.len()];
    let mut scanner = Scanner::new(object);
    scanner.object(|s, k| {
        let raw = s.value()?;
        if let Some(i) = keys.iter().position(|key| *key == k) {
            if found[i].is_none() {
                found[i] = span_in(object, raw);
            }
        }
        Some(())
    })?;
    Some(found)
}

/// `object` (a JSON object's text) with each member's value replaced by the
/// given JSON text, or added at the end when absent; `None` if `object` is
/// not an object.
pub fn set_members(object: &str, members: &[(&str, String)]) -> Option<String> {
    let mut spans: Vec<(Range<usize>, String)> = Vec::new();
    let mut missing: Vec<&(&str, String)> = members.iter().collect();
    let mut scanner = Scanner::new(object);
    let mut seen = false;
    scanner.object(|s, key| {
        let raw = s.value()?;
        seen = true;
        if let Some(i) = missing.iter().position(|(k, _)| *k == key) {
            let (_, value) = missing.remove(i);
            spans.push((span_in(object, raw)?, value.clone()));
        }
        Some(())
    })?;
    let end = object.trim_end().len().checked_sub(1)?;
    for (i, (key, value)) in missing.into_iter().enumerate() {
        let comma = if seen || i > 0 { "," } else { "" };
        spans.push((end..end, format!("{comma}{}:{value}", json_string(key))));
    }
    Some(crate::rewrite::splice(object, spans))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_keep_every_other_byte() {
        let o = r#"{ "b" : 1, "a":{"x":[1, 2]} }"#;
        assert_eq!(raw_member(o, "a"), Some(r#"{"x":[1, 2]}"#));
        assert_eq!(raw_member(o, "z"), None);
        assert_eq!(member_span(o, "b"), Some(8..9));
        assert_eq!(
            set_members(o, &[("b", "2".into()), ("c", "true".into())]).as_deref(),
            Some(r#"{ "b" : 2, "a":{"x":[1, 2]} ,"c":true}"#)
        );
        assert_eq!(
            set_members("{}", &[("a", "1".into()), ("b", "2".into())]).as_deref(),
            Some(r#"{"a":1,"b":2}"#)
        );
        assert_eq!(set_members("[1]", &[("a", "1".into())]), None);
    }
}
