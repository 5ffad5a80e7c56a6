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
    let mut documents = serde_norway::Deserializer::from_str(input.text);
    let first = documents.next()?;
    let top = first.deserialize_any(TopLevelVisitor).ok()?;
    let mut more_documents = 0usize;
    for document in documents {
        <IgnoredAny as serde::Deserialize>::deserialize(document).ok()?;
        more_documents += 1;
    }
    let mut s = Synopsis::new(Kind::Yaml, "YAML output");
    match top {
        TopLevel::Mapping(members) => {
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

/// What the summary needs of the first document.
enum TopLevel {
    Mapping(Vec<(String, &'static str)>),
    Sequence(usize),
    Scalar,
}

struct TopLevelVisitor;

impl<'de> Visitor<'de> for TopLevelVisitor {
    type Value = TopLevel;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML document")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TopLevel, A::Error> {
        let mut members = Vec::new();
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key_seed(KeyText)? {
            let ty = map.next_value_seed(TypeName)?;
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom("duplicate key"));
            }
            if members.len() < KEY_LIMIT {
                members.push((one_line(&key, KEY_CHARS), ty));
            }
        }
        Ok(TopLevel::Mapping(members))
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
