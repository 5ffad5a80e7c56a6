//! Structural fidelity: for json, csv, tsv, yaml and xml, the keys, columns,
//! row counts, root tag and child-tag counts in the synopsis match an
//! independent parse of the same text done here (serde_json into an ordered
//! tree, the csv crate's header API, serde_norway's `Value`, roxmltree).

use super::syn;
use indexmap::IndexMap;
use proptest::prelude::*;
use serde::Deserialize;
use toolstub::synopsis::{clip, Kind};

// ---------------------------------------------------------------- json

/// A generated JSON value whose object members keep their order.
#[derive(Clone, Debug)]
enum J {
    Null,
    Bool(bool),
    Num(i64),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl J {
    fn write(&self, out: &mut String) {
        match self {
            J::Null => out.push_str("null"),
            J::Bool(b) => out.push_str(&b.to_string()),
            J::Num(n) => out.push_str(&n.to_string()),
            J::Str(s) => out.push_str(&serde_json::to_string(s).expect("string")),
            J::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write(out);
                }
                out.push(']');
            }
            J::Obj(members) => {
                out.push_str("{\n");
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push_str(",\n");
                    }
                    out.push_str(&serde_json::to_string(k).expect("key"));
                    out.push_str(": ");
                    v.write(out);
                }
                out.push_str("\n}");
            }
        }
    }
}

fn json_value() -> impl Strategy<Value = J> {
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        any::<i64>().prop_map(J::Num),
        "[a-zA-Z0-9 é\"\\\\]{0,100}".prop_map(J::Str),
    ];
    leaf.prop_recursive(4, 64, 12, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(J::Arr),
            prop::collection::vec(("[a-z][a-z0-9_ ]{0,8}", inner), 0..14).prop_map(|members| {
                let mut seen = std::collections::HashSet::new();
                J::Obj(
                    members
                        .into_iter()
                        .filter(|(k, _)| seen.insert(k.clone()))
                        .collect(),
                )
            }),
        ]
    })
}

/// Without a MIME hint only a text starting with `{` or `[` is tried as JSON.
fn json_root() -> impl Strategy<Value = J> {
    json_value().prop_map(|v| match v {
        J::Arr(_) | J::Obj(_) => v,
        scalar => J::Arr(vec![scalar]),
    })
}

/// The independent parse: serde_json into a tree that keeps key order.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Ordered {
    Null,
    Bool(bool),
    Num(serde_json::Number),
    Str(String),
    Arr(Vec<Ordered>),
    Obj(IndexMap<String, Ordered>),
}

impl Ordered {
    fn type_name(&self) -> &'static str {
        match self {
            Ordered::Null => "null",
            Ordered::Bool(_) => "boolean",
            Ordered::Num(_) => "number",
            Ordered::Str(_) => "string",
            Ordered::Arr(_) => "array",
            Ordered::Obj(_) => "object",
        }
    }

    /// The first five scalars of a depth-first walk (objects: every member;
    /// arrays: the first item), as `path: literal`.
    fn examples(&self, path: &str, out: &mut Vec<String>) {
        if out.len() >= 5 {
            return;
        }
        let literal = match self {
            Ordered::Null => "null".to_string(),
            Ordered::Bool(b) => b.to_string(),
            Ordered::Num(n) => n.to_string(),
            Ordered::Str(s) => serde_json::to_string(s).expect("literal"),
            Ordered::Arr(items) => {
                if let Some(first) = items.first() {
                    first.examples(&format!("{path}[0]"), out);
                }
                return;
            }
            Ordered::Obj(members) => {
                for (k, v) in members {
                    let child = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    v.examples(&child, out);
                    if out.len() >= 5 {
                        break;
                    }
                }
                return;
            }
        };
        let shown = if path.is_empty() { "(root)" } else { path };
        out.push(clip(&format!("{shown}: {}", clip(&literal, 80)), 200));
    }
}

fn first_keys(map: &IndexMap<String, Ordered>) -> String {
    map.keys().take(10).cloned().collect::<Vec<_>>().join(", ")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    #[test]
    fn json_matches_an_independent_parse(value in json_root()) {
        let mut text = String::new();
        value.write(&mut text);
        let parsed: Ordered = serde_json::from_str(&text).expect("generated JSON parses");
        let s = syn(&text, 2000);
        prop_assert_eq!(s.kind, Kind::Json);
        prop_assert_eq!(&s.summary[0], &format!("JSON {}.", parsed.type_name()));
        match &parsed {
            Ordered::Obj(map) => {
                let keys = if map.is_empty() { "(none)".to_string() } else { first_keys(map) };
                prop_assert_eq!(&s.summary[1], &clip(&format!("top-level keys: {keys}"), 200));
                let mut expected_lines = Vec::new();
                for (k, v) in map.iter().take(10) {
                    let line = match v {
                        Ordered::Arr(items) => format!("{k}: array length: {}", items.len()),
                        Ordered::Obj(child) => format!("{k}: object keys: {}", first_keys(child)),
                        scalar => format!("{k}: {}", scalar.type_name()),
                    };
                    expected_lines.push(clip(&line, 200));
                }
                prop_assert_eq!(&s.structure[1..], &expected_lines[..]);
                let shape = if map.is_empty() {
                    "shape: object(keys=0)".to_string()
                } else {
                    format!("shape: object(keys={}: {})", map.len(), first_keys(map))
                };
                prop_assert_eq!(&s.structure[0], &clip(&shape, 200));
            }
            Ordered::Arr(items) => {
                prop_assert_eq!(&s.summary[1], &format!("array length: {}", items.len()));
                if let Some(first) = items.first() {
                    prop_assert_eq!(&s.structure[1], &format!("first item type: {}", first.type_name()));
                }
            }
            _ => prop_assert_eq!(s.summary.len(), 1),
        }
        let mut examples = Vec::new();
        parsed.examples("", &mut examples);
        prop_assert_eq!(&s.notable_items, &examples);
    }
}

// ---------------------------------------------------------------- csv / tsv

fn table(delimiter: u8) -> impl Strategy<Value = (Vec<String>, Vec<Vec<String>>, u8)> {
    let cell = if delimiter == b'\t' {
        "[a-zA-Z0-9.,\"]{0,10}"
    } else {
        "[a-zA-Z0-9.;\"\t]{0,10}"
    };
    (2usize..8).prop_flat_map(move |width| {
        (
            prop::collection::vec("[a-z][a-z0-9]{0,6}", width),
            prop::collection::vec(prop::collection::vec(cell, width), 1..40),
            Just(delimiter),
        )
    })
}

fn write_table(header: &[String], rows: &[Vec<String>], delimiter: u8) -> String {
    let mut w = csv::WriterBuilder::new()
        .delimiter(delimiter)
        .from_writer(Vec::new());
    w.write_record(header).expect("header");
    for row in rows {
        w.write_record(row).expect("row");
    }
    String::from_utf8(w.into_inner().expect("flush")).expect("utf-8")
}

fn check_table(
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    delimiter: u8,
) -> Result<(), TestCaseError> {
    let text = write_table(&header, &rows, delimiter);
    // The independent parse: the csv crate's header-aware StringRecord API.
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .from_reader(text.as_bytes());
    let columns: Vec<String> = reader
        .headers()
        .expect("headers")
        .iter()
        .map(str::to_string)
        .collect();
    let records: Vec<csv::StringRecord> = reader
        .records()
        .map(|r| r.expect("record"))
        .filter(|r| r.iter().any(|c| !c.trim().is_empty()))
        .collect();
    prop_assert_eq!(&columns, &header);
    let s = syn(&text, 2000);
    let kind = if delimiter == b'\t' {
        Kind::Tsv
    } else {
        Kind::Csv
    };
    prop_assume!(!records.is_empty());
    prop_assert_eq!(s.kind, kind, "{}", text);
    prop_assert_eq!(
        &s.structure[0],
        &clip(&format!("columns: {}", columns.join(", ")), 200)
    );
    prop_assert_eq!(&s.structure[1], &format!("rows: {}", records.len()));
    let sep = if delimiter == b'\t' { "\t" } else { "," };
    let first: Vec<&str> = records[0].iter().collect();
    let first = first
        .join(sep)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    prop_assert_eq!(
        &s.structure[2],
        &format!("first row sample: {}", clip(&first, 180))
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    #[test]
    fn csv_matches_an_independent_parse((header, rows, d) in table(b',')) {
        check_table(header, rows, d)?;
    }

    #[test]
    fn tsv_matches_an_independent_parse((header, rows, d) in table(b'\t')) {
        check_table(header, rows, d)?;
    }
}

// ---------------------------------------------------------------- yaml

fn yaml_document() -> impl Strategy<Value = serde_norway::Mapping> {
    let value = prop_oneof![
        Just(serde_norway::Value::Null),
        any::<bool>().prop_map(serde_norway::Value::Bool),
        any::<i32>().prop_map(|n| serde_norway::Value::Number(n.into())),
        "[a-zA-Z0-9 ]{1,20}".prop_map(serde_norway::Value::String),
        prop::collection::vec(any::<u8>(), 1..4).prop_map(|v| {
            serde_norway::Value::Sequence(
                v.into_iter()
                    .map(|n| serde_norway::Value::Number(n.into()))
                    .collect(),
            )
        }),
        prop::collection::vec(("[a-z]{1,6}", "[a-z]{1,6}"), 1..4).prop_map(|kv| {
            let mut m = serde_norway::Mapping::new();
            for (k, v) in kv {
                m.insert(k.into(), v.into());
            }
            serde_norway::Value::Mapping(m)
        }),
    ];
    prop::collection::vec(("[a-z][a-z0-9_]{0,8}", value), 2..45).prop_map(|kv| {
        let mut m = serde_norway::Mapping::new();
        for (k, v) in kv {
            m.insert(serde_norway::Value::String(k), v);
        }
        m
    })
}

fn yaml_type(v: &serde_norway::Value) -> &'static str {
    match v {
        serde_norway::Value::Null => "null",
        serde_norway::Value::Bool(_) => "boolean",
        serde_norway::Value::Number(_) => "number",
        serde_norway::Value::String(_) => "string",
        serde_norway::Value::Sequence(_) => "array",
        serde_norway::Value::Mapping(_) => "object",
        serde_norway::Value::Tagged(_) => "tagged value",
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    #[test]
    fn yaml_matches_an_independent_parse(doc in yaml_document()) {
        prop_assume!(doc.len() >= 2);
        let text = serde_norway::to_string(&doc).expect("serialize");
        let parsed: serde_norway::Value = serde_norway::from_str(&text).expect("parse");
        let map = parsed.as_mapping().expect("mapping");
        let s = syn(&text, 2000);
        prop_assert_eq!(s.kind, Kind::Yaml, "{}", text);
        let keys: Vec<&str> = map.keys().take(30).map(|k| k.as_str().expect("string key")).collect();
        prop_assert_eq!(&s.summary[1], &clip(&format!("top-level keys: {}", keys.join(", ")), 200));
        let expected: Vec<String> = map
            .iter()
            .take(30)
            .map(|(k, v)| format!("{}: {}", k.as_str().expect("key"), yaml_type(v)))
            .collect();
        prop_assert_eq!(&s.structure, &expected);
    }
}

// ---------------------------------------------------------------- xml

fn xml_document() -> impl Strategy<Value = String> {
    (
        "[a-z][a-z0-9]{0,6}",
        prop::collection::vec("[a-z][a-z0-9]{0,4}", 0..5),
        any::<bool>(),
        prop::collection::vec(("(item|entry|link|title|node)", any::<bool>()), 0..80),
    )
        .prop_map(|(root, attrs, with_ns, children)| {
            let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
            s.push('<');
            s.push_str(&root);
            let mut seen = std::collections::HashSet::new();
            for a in attrs.iter().filter(|a| seen.insert((*a).clone())) {
                s.push_str(&format!(" {a}=\"v&amp;1\""));
            }
            if with_ns {
                s.push_str(" xmlns=\"urn:x\" xmlns:p=\"urn:p\"");
            }
            s.push('>');
            for (tag, nested) in children {
                if nested {
                    s.push_str(&format!(
                        "<{tag} k='1'><inner>text</inner><inner/></{tag}>\n"
                    ));
                } else {
                    s.push_str(&format!("<{tag}/>\n"));
                }
            }
            s.push_str(&format!("</{root}>\n"));
            s
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    #[test]
    fn xml_matches_an_independent_parse(text in xml_document()) {
        let doc = roxmltree::Document::parse(&text).expect("generated XML parses");
        let root = doc.root_element();
        let mut counts: Vec<(String, usize)> = Vec::new();
        for child in root.children().filter(|n| n.is_element()) {
            let name = child.tag_name().name().to_string();
            match counts.iter_mut().find(|(t, _)| *t == name) {
                Some(entry) => entry.1 += 1,
                None => counts.push((name, 1)),
            }
        }
        counts.sort_by_key(|entry| std::cmp::Reverse(entry.1));
        let mut expected = vec![
            format!("root: {}", root.tag_name().name()),
            format!("attributes: {}", root.attributes().len()),
        ];
        expected.extend(counts.iter().take(30).map(|(t, n)| format!("{t}: {n}")));
        let s = syn(&text, 2000);
        prop_assert_eq!(s.kind, Kind::Xml);
        prop_assert_eq!(&s.structure, &expected);
        prop_assert_eq!(&s.summary[0], &format!("XML document with root: {}.", root.tag_name().name()));
    }
}
