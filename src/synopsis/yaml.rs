//! The `yaml` kind: configuration files, CI workflows, Kubernetes manifests,
//! described by their top-level keys and each key's value type.
//!
//! A YAML parser accepts almost any text as a plain scalar, so a heuristic
//! decides first whether the text is meant as YAML: it starts with `---`; or a
//! bare `key:` line is followed by an indented line (the design's rule); or a
//! top-level `- key: value` item continues with an `  other: value` line, or a
//! `- key:` item with an indented line (a sequence of mappings, as in Ansible
//! playbooks and command specs); or,
//! fixing the design's blind spot for flat files, every unindented line is a
//! `key: value` pair, a bare `key:` (a null value) or a comment, there are at
//! least two of them, and most values are not aligned in a column (`MemTotal:
//! 16 kB`, `passwd:   files` are status listings and other config formats,
//! not YAML). Text that is code written at the left margin is never YAML
//! (code inside a YAML block scalar, such as a CI step's script, does not
//! count). The text must then load as a mapping or a sequence with unique
//! top-level keys.

use super::lines::{clip_line, one_line, split_lines};
use super::{Input, Kind, Synopsis};
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserializer as _;
use std::collections::HashSet;
use std::fmt;

/// Top-level keys shown.
const KEY_LIMIT: usize = 30;
/// A key is shown with at most this many characters.
const KEY_CHARS: usize = 80;
/// The flat-file rule looks at this many lines at most.
const FLAT_LINES: usize = 400;

pub fn summarize(input: &Input<'_>) -> Option<Synopsis> {
    if !looks_yaml(input.text, || input.code_scan().is_code_at_margin()) {
        return None;
    }
    let (top, more_documents) = load(input.text)?;
    let mut s = Synopsis::new(Kind::Yaml, "YAML output");
    match top {
        TopLevel::Mapping { members, .. } => {
            s.summary.push("YAML object.".to_string());
            let keys: Vec<&str> = members
                .iter()
                .take(KEY_LIMIT)
                .map(|m| m.0.as_str())
                .collect();
            s.summary
                .push(clip_line(format!("top-level keys: {}", keys.join(", "))));
            s.structure.extend(
                members
                    .iter()
                    .take(KEY_LIMIT)
                    .map(|(key, ty)| clip_line(format!("{key}: {ty}"))),
            );
        }
        TopLevel::Sequence(len) => {
            s.summary.push("YAML array.".to_string());
            s.summary.push(format!("array length: {len}"));
        }
        TopLevel::Scalar => return None,
    }
    if more_documents > 0 {
        s.summary.push(format!(
            "documents: {} (the first is described)",
            more_documents + 1
        ));
    }
    Some(s)
}

/// Outputs at least this large are loaded in two halves on two threads when
/// they can be cut cleanly near the middle: the YAML loader is the slowest
/// part of any synopsis (about 25 MB/s on one core, so 64 KB takes about
/// 2.5 ms, and a thread costs tens of microseconds).
const PARALLEL_BYTES: usize = 64 * 1024;

/// The first document's top level, and how many documents follow it.
fn load(text: &str) -> Option<(TopLevel, usize)> {
    load_split_from(text, PARALLEL_BYTES)
}

/// [`load`], split in two from `parallel_bytes` up.
fn load_split_from(text: &str, parallel_bytes: usize) -> Option<(TopLevel, usize)> {
    if text.len() >= parallel_bytes {
        if let Some(top) = load_in_halves(text) {
            return Some((top, 0));
        }
        // Anything else (no clean cut, an alias to an anchor in the other
        // half, a duplicate key across halves, a second document, a cut that
        // was not clean after all): the whole text decides, on one thread.
    }
    load_whole(text)
}

/// The top level of a one-document text loaded in two halves on two
/// threads; `None` when it cannot be cut or the halves do not join.
fn load_in_halves(text: &str) -> Option<TopLevel> {
    let cut = cut(text)?;
    let head = text.get(..cut.at)?;
    let rest = text.get(cut.at..)?;
    // The second half is loaded under the `key:` lines it sits in.
    let tail: std::borrow::Cow<'_, str> = if cut.context.is_empty() {
        rest.into()
    } else {
        let mut tail = cut.context.join("\n");
        tail.push('\n');
        tail.push_str(rest);
        tail.into()
    };
    let (tail, head) =
        crate::parallel::beside("toolstub-yaml", || load_single(&tail), || load_single(head));
    head?.merge(tail?, !cut.context.is_empty())
}

fn load_whole(text: &str) -> Option<(TopLevel, usize)> {
    let mut documents = serde_norway::Deserializer::from_str(text);
    let first = documents.next()?;
    let top = first.deserialize_any(TopLevelVisitor).ok()?;
    let mut more_documents = 0usize;
    for document in documents {
        <IgnoredAny as serde::Deserialize>::deserialize(document).ok()?;
        more_documents += 1;
    }
    Some((top, more_documents))
}

/// A part that must be exactly one document.
fn load_single(text: &str) -> Option<TopLevel> {
    load_whole(text).and_then(|(top, more)| (more == 0).then_some(top))
}

/// Where a text is cut for a split load.
#[derive(Debug)]
struct Cut<'t> {
    /// The byte where the second half starts (the start of a line).
    at: usize,
    /// The bare `key:` lines that open the block that line sits in,
    /// outermost first (empty for a top-level entry).
    context: Vec<&'t str>,
}

/// The first line after the middle that starts an entry (`- ` or `key:`)
/// and can start the second half: at the left margin, an entry of the kind
/// the document starts with; indented, an entry whose enclosing lines up to
/// the margin are all bare `key:` lines (a long list or mapping nested under
/// a few keys, the usual shape of a large YAML output). A cut inside a
/// multi-line construct (a quoted scalar or a flow collection whose lines
/// look like entries) leaves a first half that fails to load or halves that
/// do not join, and the whole text is then loaded at once.
fn cut(text: &str) -> Option<Cut<'_>> {
    // A document marker after the first line (`---`, or `...` which ends a
    // document) makes the halves' documents differ from the whole's (a
    // first half ending in `...` loads alone, as one document, though the
    // whole text does not load): such texts are not cut.
    let marker = |m: &[u8]| memchr::memmem::find(text.as_bytes(), m).is_some();
    if marker(b"\n---") || marker(b"\n...") || marker(b"\r---") || marker(b"\r...") {
        return None;
    }
    let first = split_lines(text).find(|l| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with('#') && !t.starts_with("---") && !t.starts_with('%')
    })?;
    let sequence_item = |line: &str| line.starts_with("- ") || line.trim_end() == "-";
    let top_is_sequence = sequence_item(first);
    let top_is_mapping = !top_is_sequence && key_line(first).is_some();
    let bytes = text.as_bytes();
    let middle = text.len() / 2;
    let mut at = middle;
    // What the searches for enclosing lines may read in all, so that the
    // cut stays linear: without it, each line of a long block scalar whose
    // lines look like entries (`notes: |` over `  - item`s) scanned back
    // to the scalar's key, quadratic in its length (seconds on 1 MB). Past
    // it the text is loaded whole, the same synopsis by the longer road.
    let mut budget = text.len();
    while at - middle < text.len() / 4 {
        let start = at + memchr::memchr(b'\n', bytes.get(at..)?)? + 1;
        let end = memchr::memchr(b'\n', bytes.get(start..)?).map_or(text.len(), |i| start + i);
        at = start;
        let line = text.get(start..end)?.trim_end_matches('\r');
        let body = line.trim_start_matches(' ');
        let indent = line.len() - body.len();
        let entry_kind = if sequence_item(body) {
            Some(true)
        } else {
            key_line(body).map(|_| false)
        };
        match entry_kind {
            None => continue,
            Some(is_item) if indent == 0 => {
                if (is_item && top_is_sequence) || (!is_item && top_is_mapping) {
                    return Some(Cut {
                        at: start,
                        context: Vec::new(),
                    });
                }
            }
            Some(_) if top_is_mapping => {
                if let Some(context) = context_above(text, start, indent, &mut budget) {
                    return Some(Cut { at: start, context });
                }
            }
            Some(_) => {}
        }
    }
    None
}

/// The lines enclosing the line at byte `line_start` (indented by `indent`),
/// outermost first: for each smaller indentation up to the margin, the
/// nearest line above at that indentation. `None` unless every one of them
/// is a bare `key:` line, or when that takes reading more than `budget`
/// bytes (what is read is taken from it).
fn context_above<'t>(
    text: &'t str,
    line_start: usize,
    indent: usize,
    budget: &mut usize,
) -> Option<Vec<&'t str>> {
    let bytes = text.as_bytes();
    let mut context = Vec::new();
    let mut below = indent;
    let mut end = line_start;
    while below > 0 {
        // The line before the one ending at `end` (its `\n` is at end - 1).
        let newline = end.checked_sub(1)?;
        let start = memchr::memrchr(b'\n', bytes.get(..newline)?).map_or(0, |i| i + 1);
        *budget = budget.checked_sub(end - start)?;
        end = start;
        let line = text.get(start..newline)?.trim_end_matches('\r');
        let body = line.trim_start_matches(' ');
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        let line_indent = line.len() - body.len();
        if line_indent >= below {
            continue;
        }
        if !matches!(key_line(body), Some(KeyLine::Bare)) {
            return None;
        }
        context.push(line);
        below = line_indent;
    }
    context.reverse();
    Some(context)
}

fn looks_yaml(text: &str, code_like: impl FnOnce() -> bool) -> bool {
    if text.trim_start().starts_with("---") {
        return true;
    }
    if code_like() {
        return false;
    }
    let mut lines = split_lines(text)
        .filter(|l| !l.trim().is_empty())
        .take(FLAT_LINES)
        .peekable();
    let mut pairs = 0usize;
    let mut aligned = 0usize;
    let mut flat = true;
    while let Some(line) = lines.next() {
        if line.trim_start().starts_with('#') {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            continue;
        }
        if let Some(item) = line.strip_prefix("- ") {
            // A sequence of mappings: `- key: value` continued by an
            // `  other: value` line, a form Markdown lists do not take.
            // `- key:` may instead be followed by its nested value.
            let next = lines.peek().copied().unwrap_or("");
            let continued = next
                .strip_prefix("  ")
                .is_some_and(|n| !n.starts_with([' ', '\t']) && key_line(n).is_some());
            match key_line(item) {
                Some(KeyLine::Bare) if next.starts_with(' ') => return true,
                Some(_) if continued => return true,
                _ => {}
            }
            flat = false;
            continue;
        }
        match key_line(line) {
            Some(KeyLine::Bare) => {
                // The design's rule: `key:` followed by an indented line.
                let nested = lines
                    .peek()
                    .is_some_and(|next| next.starts_with([' ', '\t', '-']));
                if nested {
                    return true;
                }
                // Otherwise a key with a null value, in a flat file.
                pairs += 1;
            }
            Some(KeyLine::Pair { aligned: a }) => {
                pairs += 1;
                aligned += usize::from(a);
            }
            None => flat = false,
        }
    }
    flat && pairs >= 2 && aligned * 2 <= pairs
}

enum KeyLine {
    /// `key:` with nothing after it but an optional comment.
    Bare,
    /// `key: value`; `aligned` when the value is pushed into a column by a
    /// run of blanks after the colon.
    Pair { aligned: bool },
}

/// Recognises `key:` and `key: value` with a plain or quoted key.
fn key_line(line: &str) -> Option<KeyLine> {
    let bytes = line.as_bytes();
    let key_end = match bytes.first()? {
        b'"' | b'\'' => {
            let quote = bytes[0];
            1 + memchr::memchr(quote, &bytes[1..])? + 1
        }
        _ => bytes
            .iter()
            .position(|&b| !(b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'/')))
            .unwrap_or(bytes.len()),
    };
    if key_end == 0 || bytes.get(key_end) != Some(&b':') {
        return None;
    }
    let rest = &line[key_end + 1..];
    if rest.is_empty() || rest.trim_start().starts_with('#') || rest.trim().is_empty() {
        return Some(KeyLine::Bare);
    }
    let aligned = rest.starts_with('\t') || rest.starts_with("  ");
    rest.starts_with([' ', '\t'])
        .then_some(KeyLine::Pair { aligned })
}

/// A mapping key as written and its value's type name.
type KeyAndType = (String, &'static str);

/// What the summary needs of the first document.
#[cfg_attr(test, derive(Debug, PartialEq))]
enum TopLevel {
    Mapping {
        /// The first [`KEY_LIMIT`] keys (shown) and their value types.
        members: Vec<(String, &'static str)>,
        /// Every key, to find one repeated in the other half of a split load.
        keys: HashSet<String>,
        /// The first and the last key as written, with their value types:
        /// where the halves of a nested cut meet.
        ends: Option<(KeyAndType, KeyAndType)>,
    },
    Sequence(usize),
    Scalar,
}

impl TopLevel {
    /// The top level of a text from those of its two halves: `None` when
    /// they do not join as the whole text would load (different kinds, a
    /// key in both). With `nested`, the tail was loaded under the `key:`
    /// lines it sat in: its first key is the head's last, again, with the
    /// same type, and is not counted twice.
    fn merge(self, tail: TopLevel, nested: bool) -> Option<TopLevel> {
        match (self, tail) {
            (
                TopLevel::Mapping {
                    mut members,
                    mut keys,
                    ends: Some((first, last)),
                },
                TopLevel::Mapping {
                    members: more,
                    keys: mut more_keys,
                    ends: Some((tail_first, tail_last)),
                },
            ) => {
                let skip = usize::from(nested);
                if nested {
                    if tail_first != last {
                        return None;
                    }
                    more_keys.remove(&tail_first.0);
                }
                if more_keys.iter().any(|k| keys.contains(k)) {
                    return None;
                }
                let room = KEY_LIMIT.saturating_sub(members.len());
                members.extend(more.into_iter().skip(skip).take(room));
                keys.extend(more_keys);
                Some(TopLevel::Mapping {
                    members,
                    keys,
                    ends: Some((first, tail_last)),
                })
            }
            (TopLevel::Sequence(a), TopLevel::Sequence(b)) if !nested => {
                Some(TopLevel::Sequence(a + b))
            }
            _ => None,
        }
    }
}

struct TopLevelVisitor;

impl<'de> Visitor<'de> for TopLevelVisitor {
    type Value = TopLevel;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML document")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TopLevel, A::Error> {
        let mut members = Vec::new();
        let mut keys = HashSet::new();
        let mut ends: Option<(KeyAndType, KeyAndType)> = None;
        while let Some(key) = map.next_key_seed(KeyText)? {
            let ty = map.next_value_seed(TypeName)?;
            if members.len() < KEY_LIMIT {
                members.push((one_line(&key, KEY_CHARS), ty));
            }
            ends = Some(match ends {
                None => ((key.clone(), ty), (key.clone(), ty)),
                Some((first, _)) => (first, (key.clone(), ty)),
            });
            if !keys.insert(key) {
                return Err(serde::de::Error::custom("duplicate key"));
            }
        }
        Ok(TopLevel::Mapping {
            members,
            keys,
            ends,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TopLevel, A::Error> {
        let mut len = 0usize;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            len += 1;
        }
        Ok(TopLevel::Sequence(len))
    }

    fn visit_bool<E>(self, _: bool) -> Result<TopLevel, E> {
        Ok(TopLevel::Scalar)
    }
    fn visit_i64<E>(self, _: i64) -> Result<TopLevel, E> {
        Ok(TopLevel::Scalar)
    }
    fn visit_u64<E>(self, _: u64) -> Result<TopLevel, E> {
        Ok(TopLevel::Scalar)
    }
    fn visit_f64<E>(self, _: f64) -> Result<TopLevel, E> {
        Ok(TopLevel::Scalar)
    }
    fn visit_str<E>(self, _: &str) -> Result<TopLevel, E> {
        Ok(TopLevel::Scalar)
    }
    fn visit_unit<E>(self) -> Result<TopLevel, E> {
        Ok(TopLevel::Scalar)
    }
    fn visit_none<E>(self) -> Result<TopLevel, E> {
        Ok(TopLevel::Scalar)
    }
}

/// A mapping key as text, whatever scalar it is; nested keys are named as such.
struct KeyText;

impl<'de> DeserializeSeed<'de> for KeyText {
    type Value = String;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_any(KeyTextVisitor)
    }
}

struct KeyTextVisitor;

impl<'de> Visitor<'de> for KeyTextVisitor {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping key")
    }
    fn visit_str<E>(self, v: &str) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_bool<E>(self, v: bool) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_i64<E>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_u64<E>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_f64<E>(self, v: f64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_unit<E>(self) -> Result<String, E> {
        Ok("null".to_string())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<String, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok("(sequence key)".to_string())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<String, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok("(mapping key)".to_string())
    }
}

/// The type name of a value, skipping its contents.
struct TypeName;

impl<'de> DeserializeSeed<'de> for TypeName {
    type Value = &'static str;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<&'static str, D::Error> {
        d.deserialize_any(TypeNameVisitor)
    }
}

struct TypeNameVisitor;

impl<'de> Visitor<'de> for TypeNameVisitor {
    type Value = &'static str;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<&'static str, E> {
        Ok("boolean")
    }
    fn visit_i64<E>(self, _: i64) -> Result<&'static str, E> {
        Ok("number")
    }
    fn visit_u64<E>(self, _: u64) -> Result<&'static str, E> {
        Ok("number")
    }
    fn visit_f64<E>(self, _: f64) -> Result<&'static str, E> {
        Ok("number")
    }
    fn visit_str<E>(self, _: &str) -> Result<&'static str, E> {
        Ok("string")
    }
    fn visit_unit<E>(self) -> Result<&'static str, E> {
        Ok("null")
    }
    fn visit_none<E>(self) -> Result<&'static str, E> {
        Ok("null")
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<&'static str, D::Error> {
        d.deserialize_any(TypeNameVisitor)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<&'static str, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok("array")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<&'static str, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok("object")
    }
    fn visit_enum<A: serde::de::EnumAccess<'de>>(self, data: A) -> Result<&'static str, A::Error> {
        // A tagged value (`!Ref x`): describe what the tag wraps.
        use serde::de::VariantAccess;
        let (IgnoredAny, variant) = data.variant::<IgnoredAny>()?;
        variant.newtype_variant::<IgnoredAny>()?;
        Ok("tagged value")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A large document loaded in two halves reads as loaded whole, and
    /// every way a cut can go wrong falls back to the whole load.
    #[test]
    fn split_loads_match_whole_loads() {
        let entries = |n: usize, f: &dyn Fn(usize) -> String| (0..n).map(f).collect::<String>();
        let mapping = entries(400, &|i| {
            format!("key_{i}:\n  name: item {i}\n  list: [1, 2, 3]\n")
        });
        let sequence = entries(500, &|i| format!("- id: {i}\n  tags: [a, b]\n"));
        let middle_key = |text: &str| {
            let at = cut(text).expect("a cut").at;
            text[at..].lines().next().unwrap_or("").to_string()
        };
        let mut cases = vec![mapping.clone(), sequence.clone()];
        // An alias in the second half to an anchor in the first.
        cases.push(format!("base: &b {{x: 1}}\n{mapping}late: *b\n"));
        // The same key in both halves: not YAML, whole or split.
        let dup = middle_key(&mapping);
        cases.push(format!("{dup}\n  again: 1\n{mapping}"));
        // A second document after the cut; a document end before it (the
        // first half alone loads, the whole does not: found in review).
        cases.push(format!("{mapping}---\nother: 1\n"));
        let ks = entries(200, &|i| format!("k{i:03}: {i}\n"));
        let js = entries(200, &|i| format!("j{i:03}: {i}\n"));
        cases.push(format!("{ks}...\n{js}"));
        // A flow mapping and a double-quoted scalar whose lines reach the margin
        // across the middle.
        let half = mapping.len() / 2;
        for open in ["flow: {a: 1,\n", "quoted: \"line one\n"] {
            let close = if open.starts_with("flow") {
                "b: 2}\n"
            } else {
                "c: d\"\n"
            };
            // The construct sits where the cut falls.
            let inner = "z: 1\n".repeat(40);
            let at = mapping[..half].rfind('\n').map_or(0, |i| i + 1);
            let text = format!("{}{open}{inner}{close}{}", &mapping[..at], &mapping[at..]);
            let split = cut(&text).expect("a cut").at;
            assert!(
                split > at && split < at + open.len() + inner.len() + close.len(),
                "{open}"
            );
            cases.push(text);
        }
        // Long lists and mappings nested under bare keys, with keys after them.
        let items = entries(500, &|i| format!("    - id: {i}\n      tags: [a, b]\n"));
        let nested = format!("version: 3\nspec:\n  items:\n{items}  more: 1\nafter: true\n");
        let cut_nested = cut(&nested).expect("a nested cut");
        assert_eq!(cut_nested.context, ["spec:", "  items:"]);
        cases.push(nested.clone());
        cases.push(format!("{nested}version: 4\n"));
        cases.push(format!(
            "root:\n{}",
            entries(600, &|i| format!("  k{i}: {{a: {i}}}\n"))
        ));
        // Under a key that is not bare (a block scalar's lines look like entries).
        cases.push(format!(
            "notes: |\n{}end: 1\n",
            entries(700, &|i| format!("  - line {i}\n"))
        ));
        // The clean ones load in halves; the others fall back.
        let split: Vec<bool> = cases.iter().map(|t| load_in_halves(t).is_some()).collect();
        assert_eq!(
            split,
            [true, true, false, false, false, false, false, false, true, false, true, false],
            "mapping, sequence, alias, duplicate, second document, document end, flow, quoted, nested, nested duplicate, root, block scalar"
        );
        for text in &cases {
            assert_eq!(
                load_split_from(text, 0),
                load_whole(text),
                "{}",
                &text[..80]
            );
        }
        assert!(cut(&mapping).is_some() && cut(&sequence).is_some());
        match load_split_from(&mapping, 0) {
            Some((TopLevel::Mapping { members, keys, .. }, 0)) => {
                assert_eq!(keys.len(), 400);
                assert_eq!(members.len(), KEY_LIMIT);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            load_split_from(&sequence, 0),
            Some((TopLevel::Sequence(500), 0))
        );
        match load_split_from(&nested, 0) {
            Some((TopLevel::Mapping { members, .. }, 0)) => assert_eq!(
                members,
                [
                    ("version".to_string(), "number"),
                    ("spec".to_string(), "object"),
                    ("after".to_string(), "boolean")
                ]
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_search_for_enclosing_lines_reads_within_its_budget() {
        let text = "spec:\n  items:\n    - a\n    - b\n";
        let at = text.find("    - b").expect("line");
        let mut budget = text.len();
        assert_eq!(
            context_above(text, at, 4, &mut budget),
            Some(vec!["spec:", "  items:"])
        );
        // It read the three lines above: what is left is what it did not.
        assert_eq!(budget, text.len() - at);
        let mut short = at - 1;
        assert_eq!(context_above(text, at, 4, &mut short), None);
        // A block scalar of 70,000 entry-like lines: the cut's searches
        // stop within the text's length, and the whole load takes it.
        let notes: String = (0..70_000).map(|i| format!("  - item {i}\n")).collect();
        let text = format!("---\nnotes: |\n{notes}");
        assert!(cut(&text).is_none());
    }

    fn syn(text: &str) -> Option<Synopsis> {
        summarize(&Input::new(text, "", 100))
    }

    #[test]
    fn nested_mapping() {
        let s = syn("services:\n  api:\n    image: ov:latest\n    replicas: 2\n").expect("yaml");
        assert_eq!(s.summary, ["YAML object.", "top-level keys: services"]);
        assert_eq!(s.structure, ["services: object"]);
    }

    #[test]
    fn flat_mapping_is_yaml() {
        let s = syn("name: toolstub\nversion: 3\nenabled: true\nowner: null\n").expect("yaml");
        assert_eq!(
            s.structure,
            [
                "name: string",
                "version: number",
                "enabled: boolean",
                "owner: null"
            ]
        );
    }

    #[test]
    fn logs_and_prose_are_not_yaml() {
        assert!(
            syn("INFO: start\nINFO: again\n").is_none(),
            "duplicate keys"
        );
        assert!(syn("Note: this is prose.\nIt goes on without keys.\n").is_none());
        assert!(syn("just one line: here\n").is_none());
        let meminfo =
            "MemTotal:       24684092 kB\nMemFree:        22486224 kB\nBuffers:          120 kB\n";
        assert!(syn(meminfo).is_none(), "an aligned status listing");
    }

    #[test]
    fn a_sequence_of_mappings_is_yaml() {
        let s = syn("# spec\n- release_tracks: [ALPHA, GA]\n  help_text:\n    brief: Create.\n- name: second\n  x: 1\n")
            .expect("yaml");
        assert_eq!(s.summary, ["YAML array.", "array length: 2"]);
        assert!(
            syn("- Fixed: a crash\n- Added: a flag\n- Docs\n").is_none(),
            "a Markdown list"
        );
    }

    #[test]
    fn keys_without_values_are_null() {
        let s = syn("# funding\ngithub: [pyenv]\npatreon: # a comment\nko_fi:\ncustom: x\n")
            .expect("yaml");
        assert_eq!(
            s.structure,
            [
                "github: array",
                "patreon: null",
                "ko_fi: null",
                "custom: string"
            ]
        );
    }

    #[test]
    fn scripts_in_block_scalars_do_not_make_code() {
        let workflow = "name: Add versions\non:\n  workflow_dispatch: {}\njobs:\n  add:\n    steps:\n      - run: |\n          import os\n          import sys\n          print(os.environ)\n";
        let s = syn(workflow).expect("yaml");
        assert_eq!(s.summary[1], "top-level keys: name, on, jobs");
    }

    #[test]
    fn several_documents_are_counted() {
        let s = syn("---\nkind: A\n---\nkind: B\n").expect("yaml");
        assert!(s.summary.iter().any(|l| l.starts_with("documents: 2")));
    }
}
