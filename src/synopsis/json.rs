//! The `json` kind: one JSON value (or JSON Lines records) described by its
//! top-level keys, shape to depth 2, per-key structure and a few scalar
//! examples.
//!
//! The value is never built in memory. A bounded walker (a serde
//! `DeserializeSeed`) keeps only what the caps can show: keys and child info
//! near the root, the first items of arrays, the first five scalars in
//! depth-first order; every other subtree is skipped with `IgnoredAny`. That
//! keeps a 10 MB response at parser speed and constant memory.
//!
//! Text after the first value is counted as trailing characters, except that
//! (without a JSON MIME type) a first value followed by more non-JSON text
//! than itself is not taken for the content: log lines such as
//! `[    0.000000] Linux version ...` or `[2024-01-01] started` fall through.
//!
//! The walk also gathers the identifying values of list items (ids, numbers,
//! names, titles...: the rules are in [`ids`](super::ids)), shown after the
//! examples within their own budget; it stops looking at a list's items once
//! that budget is spent.
//!
//! **A JSON text cut short** (the text ends inside the value, so the parser
//! meets the end of its input, or ends with a harness's marker such as
//! `...[truncated]` after such a cut) is read as far as it goes: the prefix
//! up to its last whole value, its open brackets closed (see
//! [`cut`](super::cut)), is described as any JSON, with a line saying where
//! the text ends; its counts are of the items complete before the cut.

use super::cut;
use super::ids::{self, Candidate, Captured, Lists};
use super::lines::{clip, clip_line, one_line, split_lines};
use super::unknown;
use super::{Input, Kind, Synopsis};
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt::{self, Write};

/// Shapes are shown to this depth (the root is depth 0).
const MAX_DEPTH: usize = 2;
/// An array's shape shows its first items only.
const ARRAY_SAMPLE_LIMIT: usize = 3;
/// Objects show at most this many keys.
const KEY_LIMIT: usize = 10;
/// Scalar examples in the notable items.
const EXAMPLE_LIMIT: usize = 5;
/// Each example's JSON literal is clipped to this many characters.
const EXAMPLE_CHARS: usize = 80;
/// JSON Lines: accepted when at most this share of non-blank lines fails to parse (1 in N).
const JSONL_MAX_BAD_SHARE: usize = 10;

pub fn summarize(input: &Input<'_>) -> Option<Synopsis> {
    let trimmed = input.text.trim();
    let mime_json = input.mime_says("json");
    if !(mime_json || trimmed.starts_with('{') || trimmed.starts_with('[')) {
        return None;
    }
    let (walked, end) = match walk_first(trimmed) {
        Ok(walked) => walked,
        Err(e) => {
            if let Some(s) = cut_short(input, trimmed, e.is_eof()) {
                return Some(s);
            }
            return mime_json.then(|| unknown::unparsed(input, "JSON"));
        }
    };
    let rest = trimmed[end..].trim();
    if !rest.is_empty() {
        if let Some(records) = json_lines(trimmed, end) {
            return Some(records);
        }
        // A small value opening a mostly non-JSON text is not the content:
        // `[    0.000000] Linux version ...` (dmesg), `[INFO] ...`, `{1}`.
        // A stream of values (`jq '.a, .b'`) continues with another value.
        let another_value = rest.starts_with(['{', '[']);
        if !mime_json && !another_value && rest.len() > end {
            return None;
        }
    }
    Some(describe_value(&walked, rest.chars().count(), None))
}

/// A JSON text cut short, read as far as it goes (see the module comment):
/// `trimmed` did not parse, and `eof` says whether the parser met the end of
/// the text.
fn cut_short(input: &Input<'_>, trimmed: &str, eof: bool) -> Option<Synopsis> {
    // A marker after the cut is taken off first (a cut inside a string
    // would read it as the string's).
    let (body, marker) = match cut::strip_marker(trimmed) {
        Some((body, marker)) => match walk_first(body) {
            Err(e) if e.is_eof() => (body, Some(marker)),
            _ => return None,
        },
        None if eof => (trimmed, None),
        None => return None,
    };
    let closed = cut::close_json_prefix(body, false)?;
    let (walked, _) = walk_first(&closed).ok()?;
    // Where the body ends in the text as given, leading whitespace included.
    let lead = input.text.len() - input.text.trim_start().len();
    let chars = input.text[..lead].chars().count() + body.chars().count();
    let marker = marker.map_or(String::new(), |m| format!(", then {m:?}"));
    let line = clip_line(format!(
        "The JSON text ends unfinished after {chars} characters{marker} (cut short): described as far as it goes; counts are of the items complete before the cut."
    ));
    Some(describe_value(&walked, 0, Some(line)))
}

/// Walks the first JSON value of `text` in one pass; returns what the walker
/// kept and the byte offset where the value ends.
fn walk_first(text: &str) -> Result<(Walked, usize), serde_json::Error> {
    let mut ctx = Ctx::default();
    let mut de = serde_json::Deserializer::from_str(text);
    let info = Walk {
        depth: 0,
        on_example_path: true,
        ctx: &mut ctx,
        role: Role::Plain,
    }
    .deserialize(&mut de)?;
    // A stream deserializer starts where the first value ended.
    let end = de.into_iter::<IgnoredAny>().byte_offset();
    Ok((
        Walked {
            info,
            examples: ctx.examples,
            ids: ctx.ids,
        },
        end,
    ))
}

/// Everything the walker kept of one value.
struct Walked {
    info: Info,
    examples: Vec<String>,
    ids: Lists,
}

fn describe_value(walked: &Walked, trailing_chars: usize, cut: Option<String>) -> Synopsis {
    let mut s = Synopsis::new(Kind::Json, "JSON output");
    let info = &walked.info;
    s.summary.push(format!("JSON {}.", info.type_name()));
    let was_cut = cut.is_some();
    s.summary.extend(cut);
    match info {
        Info::Object { keys, children, .. } => {
            s.summary
                .push(clip_line(format!("top-level keys: {}", key_list(keys))));
            s.structure
                .push(clip_line(format!("shape: {}", info.shape(0))));
            for (key, child) in keys.iter().zip(children) {
                s.structure
                    .push(clip_line(format!("{key}: {}", child.as_member())));
            }
        }
        Info::Array { len, items } => {
            s.summary.push(format!("array length: {len}"));
            s.structure
                .push(clip_line(format!("shape: {}", info.shape(0))));
            if let Some(first) = items.first() {
                s.structure
                    .push(format!("first item type: {}", first.type_name()));
            }
        }
        _ => {}
    }
    s.notable_items.extend(walked.examples.iter().cloned());
    let trailing = (trailing_chars > 0)
        .then(|| format!("trailing_chars_after_first_json_value: {trailing_chars}"));
    let room = ids_room(&s, trailing.as_deref());
    s.notable_items.extend(walked.ids.render(was_cut, room));
    s.notable_items.extend(trailing);
    s
}

/// What a JSON synopsis's lines may hold together as the stub lays them
/// out, identifying values included: with the longest stub header, an
/// agent's wrappers' notes and the recall lines, a stub stays under 5,000
/// characters.
const LINES_CHARS: usize = 3200;

/// The room left for identifying values (at most their own budget) once
/// the synopsis's other lines, and `more`, are counted.
fn ids_room(s: &Synopsis, more: Option<&str>) -> usize {
    let used: usize = s
        .summary
        .iter()
        .chain(&s.structure)
        .chain(&s.notable_items)
        .map(|l| ids::laid_out(l))
        .sum::<usize>()
        + more.map_or(0, ids::laid_out);
    LINES_CHARS.saturating_sub(used).min(ids::BUDGET_CHARS)
}

/// JSON Lines: one value per line. Accepted when the first value ends its
/// line, at least two lines parse, and at most one line in ten does not.
fn json_lines(text: &str, first_end: usize) -> Option<Synopsis> {
    let first_line_end = memchr::memchr(b'\n', text.as_bytes())?;
    // A first value spanning several lines (pretty-printed) is not a record line.
    if first_end > first_line_end || !text[first_end..first_line_end].trim().is_empty() {
        return None;
    }
    let mut records = 0usize;
    let mut bad = 0usize;
    let mut first_record: Option<&str> = None;
    for line in split_lines(text) {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let ok = serde_json::from_str::<IgnoredAny>(line).is_ok();
        if ok {
            records += 1;
            first_record.get_or_insert(line);
        } else {
            bad += 1;
        }
    }
    if records < 2 || bad * JSONL_MAX_BAD_SHARE > records + bad {
        return None;
    }
    let (walked, _) = walk_first(first_record?).ok()?;
    let mut s = Synopsis::new(Kind::Json, "JSON Lines output");
    s.summary.push(format!("JSON Lines: {records} records."));
    match &walked.info {
        Info::Object { keys, children, .. } => {
            s.summary
                .push(clip_line(format!("first record keys: {}", key_list(keys))));
            s.structure.push(clip_line(format!(
                "first record shape: {}",
                walked.info.shape(0)
            )));
            for (key, child) in keys.iter().zip(children) {
                s.structure
                    .push(clip_line(format!("{key}: {}", child.as_member())));
            }
        }
        other => {
            s.summary
                .push(format!("first record type: {}", other.type_name()));
            s.structure
                .push(clip_line(format!("first record shape: {}", other.shape(0))));
        }
    }
    if bad > 0 {
        s.structure.push(format!("unparsed lines: {bad}"));
    }
    s.notable_items.extend(
        walked
            .examples
            .iter()
            .map(|e| clip_line(format!("[0].{e}"))),
    );
    s.notable_items
        .extend(record_ids(text, records).render(false, ids_room(&s, None)));
    Some(s)
}

/// The identifying values of JSON Lines records, each record an item of the
/// list `records[]`, while the budget lasts.
fn record_ids(text: &str, records: usize) -> Lists {
    let mut ctx = Ctx {
        path: "records".to_string(),
        ..Ctx::default()
    };
    let Some(list) = ctx.ids.open("records") else {
        return ctx.ids;
    };
    let mut index = 0usize;
    for line in split_lines(text) {
        if !ctx.ids.wants(list) {
            break;
        }
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let mark = ctx.path.len();
        let _ = write!(ctx.path, "[{index}]");
        let walk = Walk {
            depth: 1,
            on_example_path: false,
            ctx: &mut ctx,
            role: Role::Item(list),
        };
        let mut de = serde_json::Deserializer::from_str(line);
        let walked = walk.deserialize(&mut de);
        ctx.path.truncate(mark);
        match walked {
            Ok(Info::Object { .. }) => index += 1,
            Ok(_) => {
                ctx.ids.not_an_object(list);
                index += 1;
            }
            // An unparsed line is no record.
            Err(_) => {}
        }
    }
    ctx.ids.ended(list, records);
    ctx.ids
}

fn key_list(keys: &[String]) -> String {
    if keys.is_empty() {
        "(none)".to_string()
    } else {
        keys.join(", ")
    }
}

/// What the walker keeps of one value: enough for the caps, nothing more.
enum Info {
    Null,
    Bool,
    Number,
    String,
    Array {
        len: usize,
        /// The first [`ARRAY_SAMPLE_LIMIT`] items, kept only near the root.
        items: Vec<Info>,
    },
    Object {
        count: usize,
        /// The first [`KEY_LIMIT`] keys, escaped for one line.
        keys: Vec<String>,
        /// Info about the first [`KEY_LIMIT`] values, kept only at the root.
        children: Vec<Info>,
    },
}

impl Info {
    fn type_name(&self) -> &'static str {
        match self {
            Info::Null => "null",
            Info::Bool => "boolean",
            Info::Number => "number",
            Info::String => "string",
            Info::Array { .. } => "array",
            Info::Object { .. } => "object",
        }
    }

    /// `object(keys=2: a, b)`, `array(len=5, sample=[...])`, a scalar type, or
    /// `...` below [`MAX_DEPTH`].
    fn shape(&self, depth: usize) -> String {
        if depth >= MAX_DEPTH {
            return "...".to_string();
        }
        match self {
            Info::Array { len, items } => {
                let mut out = format!("array(len={len}");
                let shown = (*len).min(ARRAY_SAMPLE_LIMIT);
                if shown > 0 {
                    out.push_str(", sample=[");
                    for i in 0..shown {
                        if i > 0 {
                            out.push_str(", ");
                        }
                        match items.get(i) {
                            Some(item) => out.push_str(&item.shape(depth + 1)),
                            None => out.push_str("..."),
                        }
                    }
                    out.push(']');
                }
                out.push(')');
                out
            }
            Info::Object { count, keys, .. } => {
                if keys.is_empty() {
                    format!("object(keys={count})")
                } else {
                    format!("object(keys={count}: {})", keys.join(", "))
                }
            }
            scalar => scalar.type_name().to_string(),
        }
    }

    /// The structure line of a top-level member.
    fn as_member(&self) -> String {
        match self {
            Info::Array { len, .. } => format!("array length: {len}"),
            Info::Object { keys, .. } => format!("object keys: {}", keys.join(", ")),
            scalar => scalar.type_name().to_string(),
        }
    }
}

#[derive(Default)]
struct Ctx {
    examples: Vec<String>,
    /// The path of the value being walked, while examples or identifying
    /// values are still wanted.
    path: String,
    ids: Lists,
}

impl Ctx {
    fn wants_examples(&self) -> bool {
        self.examples.len() < EXAMPLE_LIMIT
    }

    fn example(&mut self, literal: String) {
        let path = if self.path.is_empty() {
            "(root)"
        } else {
            &self.path
        };
        let line = clip_line(format!("{path}: {}", clip(&literal, EXAMPLE_CHARS)));
        self.examples.push(line);
    }
}

/// Walks one value at `depth`. `on_example_path` is true where a depth-first
/// search for scalar examples passes: every member of an object, only the
/// first item of an array.
struct Walk<'c> {
    depth: usize,
    on_example_path: bool,
    ctx: &'c mut Ctx,
    role: Role<'c>,
}

/// What a value is to the gathering of identifying values.
enum Role<'c> {
    /// Nothing in particular: arrays in it may be lists.
    Plain,
    /// An item of list `0`: its members are ranked.
    Item(usize),
    /// A member object of an item, under `key`: its members count one rank
    /// lower, into the item's `cands`; `base` orders them after the members
    /// before it.
    Member {
        key: &'c str,
        cands: &'c mut Vec<Candidate>,
        base: usize,
    },
    /// The value of an identifying key: a scalar is kept here.
    Capture(&'c mut Option<Captured>),
}

/// Members of one item are ordered by `member << ORDER_SHIFT`, those of its
/// member objects after their parent's.
const ORDER_SHIFT: u32 = 16;

impl Walk<'_> {
    fn scalar(self, info: Info, literal: impl FnOnce() -> String) -> Info {
        if self.on_example_path && self.ctx.wants_examples() {
            self.ctx.example(literal());
        }
        info
    }

    fn capture(&mut self, value: impl FnOnce() -> Captured) {
        if let Role::Capture(slot) = &mut self.role {
            **slot = Some(value());
        }
    }

    fn child_wants_examples(&self, first_item: bool) -> bool {
        self.on_example_path && first_item && self.ctx.wants_examples()
    }

    /// Whether arrays below this value may still become lists.
    fn looks_for_lists(&self) -> bool {
        self.depth < ids::LIST_DEPTH
            && !matches!(self.role, Role::Capture(_))
            && self.ctx.ids.room()
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = Info;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Info, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = Info;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<Info, E> {
        Ok(self.scalar(Info::Null, || "null".to_string()))
    }
    fn visit_bool<E>(self, v: bool) -> Result<Info, E> {
        Ok(self.scalar(Info::Bool, || v.to_string()))
    }
    fn visit_i64<E>(mut self, v: i64) -> Result<Info, E> {
        self.capture(|| Captured::Int(v.to_string()));
        Ok(self.scalar(Info::Number, || v.to_string()))
    }
    fn visit_u64<E>(mut self, v: u64) -> Result<Info, E> {
        self.capture(|| Captured::Int(v.to_string()));
        Ok(self.scalar(Info::Number, || v.to_string()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Info, E> {
        Ok(self.scalar(Info::Number, || {
            serde_json::Number::from_f64(v).map_or_else(|| "null".to_string(), |n| n.to_string())
        }))
    }
    fn visit_str<E>(mut self, v: &str) -> Result<Info, E> {
        self.capture(|| Captured::string(v));
        Ok(self.scalar(Info::String, || string_literal(v)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Info, A::Error> {
        let keep_items = self.depth == 0;
        let list = if self.looks_for_lists() {
            let ctx = &mut *self.ctx;
            ctx.ids.open(&ctx.path)
        } else {
            None
        };
        let mut items = Vec::new();
        let mut len = 0usize;
        loop {
            let id_item = list.filter(|&l| self.ctx.ids.wants(l));
            let need = (keep_items && len < ARRAY_SAMPLE_LIMIT)
                || self.child_wants_examples(len == 0)
                || id_item.is_some();
            if !need {
                if seq.next_element::<IgnoredAny>()?.is_none() {
                    break;
                }
                len += 1;
                continue;
            }
            let mark = self.ctx.path.len();
            let _ = write!(self.ctx.path, "[{len}]");
            let child = Walk {
                depth: self.depth + 1,
                on_example_path: self.on_example_path && len == 0,
                ctx: &mut *self.ctx,
                role: id_item.map_or(Role::Plain, Role::Item),
            };
            let next = seq.next_element_seed(child)?;
            self.ctx.path.truncate(mark);
            match next {
                None => break,
                Some(info) => {
                    if let Some(l) = id_item {
                        if !matches!(info, Info::Object { .. }) {
                            self.ctx.ids.not_an_object(l);
                        }
                    }
                    if keep_items && items.len() < ARRAY_SAMPLE_LIMIT {
                        items.push(info);
                    }
                    len += 1;
                }
            }
        }
        if let Some(l) = list {
            self.ctx.ids.ended(l, len);
        }
        Ok(Info::Array { len, items })
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Info, A::Error> {
        let keep_keys = self.depth < MAX_DEPTH;
        let keep_children = self.depth == 0;
        let ranked = matches!(self.role, Role::Item(_) | Role::Member { .. });
        let mut cands: Vec<Candidate> = Vec::new();
        let mut first_is_object = false;
        let mut count = 0usize;
        let mut keys = Vec::new();
        let mut children = Vec::new();
        loop {
            let wants_examples = self.child_wants_examples(true);
            let want_key = (keep_keys && count < KEY_LIMIT) || wants_examples || ranked;
            let Some(key) = map.next_key_seed(KeySeed { keep: want_key })? else {
                break;
            };
            let rule = if ranked {
                key.as_deref().and_then(ids::classify)
            } else {
                None
            };
            let need_child = (keep_children && count < KEY_LIMIT)
                || wants_examples
                || ranked
                || self.looks_for_lists();
            if need_child {
                let mark = self.ctx.path.len();
                if let Some(k) = &key {
                    if mark > 0 {
                        self.ctx.path.push('.');
                    }
                    self.ctx.path.push_str(&one_line(k, 60));
                }
                let mut captured = None;
                let role = match (&self.role, rule) {
                    (_, Some(_)) => Role::Capture(&mut captured),
                    (Role::Item(_), None) => Role::Member {
                        key: key.as_deref().unwrap_or(""),
                        cands: &mut cands,
                        base: count << ORDER_SHIFT,
                    },
                    _ => Role::Plain,
                };
                let child = Walk {
                    depth: self.depth + 1,
                    on_example_path: self.on_example_path,
                    ctx: &mut *self.ctx,
                    role,
                };
                let info = map.next_value_seed(child)?;
                self.ctx.path.truncate(mark);
                if let (Some(rule), Some(value), Some(k)) = (rule, &captured, &key) {
                    if let Some(shown) = value.shown(rule) {
                        match &mut self.role {
                            Role::Item(_) => {
                                cands.push(Candidate::new(rule, 0, count << ORDER_SHIFT, k, shown))
                            }
                            Role::Member {
                                key: parent,
                                cands: item_cands,
                                base,
                            } => item_cands.push(Candidate::new(
                                rule,
                                1,
                                *base + count,
                                &format!("{}.{k}", one_line(parent, 40)),
                                shown,
                            )),
                            _ => {}
                        }
                    }
                }
                if count == 0 {
                    first_is_object = matches!(info, Info::Object { .. });
                }
                if keep_children && children.len() < KEY_LIMIT {
                    children.push(info);
                }
            } else {
                map.next_value::<IgnoredAny>()?;
            }
            if keep_keys && keys.len() < KEY_LIMIT {
                if let Some(k) = key {
                    keys.push(one_line(&k, 80));
                }
            }
            count += 1;
        }
        if let Role::Item(list) = self.role {
            // One object under one key: its members are the item's own.
            let promote = count == 1 && first_is_object;
            let ctx = &mut *self.ctx;
            ctx.ids.item(list, &ctx.path, cands, promote);
        }
        Ok(Info::Object {
            count,
            keys,
            children,
        })
    }
}

/// Reads an object key as a `String` only when it will be shown.
struct KeySeed {
    keep: bool,
}

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Option<String>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<String>, D::Error> {
        if self.keep {
            <String as serde::Deserialize>::deserialize(d).map(Some)
        } else {
            <IgnoredAny as serde::Deserialize>::deserialize(d).map(|_| None)
        }
    }
}

/// A JSON string literal of at most about [`EXAMPLE_CHARS`] characters: only
/// the beginning of a long string is encoded.
fn string_literal(v: &str) -> String {
    let end = v
        .char_indices()
        .nth(EXAMPLE_CHARS + 1)
        .map_or(v.len(), |(i, _)| i);
    serde_json::to_string(&v[..end]).unwrap_or_else(|_| "\"\"".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn syn(text: &str) -> Synopsis {
        summarize(&Input::new(text, "", 2000)).expect("json")
    }

    #[test]
    fn object_structure_and_examples() {
        let s =
            syn(r#"{"users":[{"id":1,"name":"Ada"},{"id":2,"name":"Lin"}],"meta":{"count":2}}"#);
        assert_eq!(s.summary, ["JSON object.", "top-level keys: users, meta"]);
        assert_eq!(
            s.structure,
            [
                "shape: object(keys=2: users, meta)",
                "users: array length: 2",
                "meta: object keys: count"
            ]
        );
        assert_eq!(
            s.notable_items,
            [
                "users[0].id: 1",
                "users[0].name: \"Ada\"",
                "meta.count: 2",
                "Identifying values of the items of users[] (2 items, all shown):",
                "users[0] id=1, name=\"Ada\"",
                "users[1] id=2, name=\"Lin\""
            ]
        );
    }

    #[test]
    fn array_shape_samples_three_items() {
        let s = syn(r#"[{"a":1},[1,2],3,4]"#);
        assert_eq!(s.summary, ["JSON array.", "array length: 4"]);
        assert_eq!(
            s.structure,
            [
                "shape: array(len=4, sample=[object(keys=1: a), array(len=2, sample=[..., ...]), number])",
                "first item type: object"
            ]
        );
        assert_eq!(s.notable_items, ["[0].a: 1"]);
    }

    #[test]
    fn trailing_characters_are_counted() {
        let s = syn("{\"a\": true}  garbage!\n");
        assert!(s
            .notable_items
            .contains(&"trailing_chars_after_first_json_value: 8".to_string()));
    }

    #[test]
    fn json_lines_are_records() {
        let s =
            syn("{\"reason\":\"x\",\"id\":1}\n{\"reason\":\"y\",\"id\":2}\n{\"reason\":\"z\"}\n");
        assert_eq!(s.title, "JSON Lines output");
        assert_eq!(s.summary[0], "JSON Lines: 3 records.");
        assert_eq!(s.summary[1], "first record keys: reason, id");
    }

    #[test]
    fn pretty_value_followed_by_more_is_not_json_lines() {
        // `jq '.a, .b'` prints a stream of pretty values; this once panicked.
        let s = syn("{\n \"a\": 1\n}\n{\n \"b\": 2\n}\n");
        assert_eq!(s.summary[0], "JSON object.");
        assert!(s
            .notable_items
            .contains(&"trailing_chars_after_first_json_value: 11".to_string()));
        let s = syn("{\n \"a\": 1\n}\nfoo");
        assert_eq!(s.title, "JSON output");
    }

    #[test]
    fn a_bracketed_log_prefix_is_not_json() {
        let dmesg = "[    0.000000] Linux version 6.1\n[    0.000000] Command line: quiet\n";
        assert!(summarize(&Input::new(dmesg, "", 10)).is_none());
        let input = Input::new(dmesg, "application/json", 10);
        assert_eq!(summarize(&input).map(|s| s.kind), Some(Kind::Json));
    }

    #[test]
    fn not_json_falls_through_without_mime() {
        let input = Input::new("[INFO] starting", "", 10);
        assert!(summarize(&input).is_none());
        let input = Input::new("{broken", "application/json", 10);
        assert_eq!(summarize(&input).map(|s| s.kind), Some(Kind::Unknown));
    }
}
