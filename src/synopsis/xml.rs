//! The `xml` kind: a well-formed XML document (SVG, feeds, POMs, JUnit
//! reports) described by its root tag, the root's attribute count and its
//! direct children's tags, most frequent first.
//!
//! Well-formedness is checked in one streaming pass (quick-xml): matching end
//! tags, exactly one root element, nothing but whitespace outside it, valid
//! attributes, and only predefined or declared entities. HTML that is not
//! well-formed XML is refused here and falls through to later kinds.

use super::lines::{clip_line, one_line};
use super::unknown;
use super::{Input, Kind, Synopsis};
use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;
use std::collections::HashMap;

/// Child tags listed in the structure.
const CHILD_TAG_LIMIT: usize = 30;
/// A tag name is shown with at most this many characters.
const TAG_CHARS: usize = 80;

pub fn summarize(input: &Input<'_>) -> Option<Synopsis> {
    let trimmed = input.text.trim_start();
    let mime_xml = input.mime_says("xml");
    if !(mime_xml || trimmed.starts_with('<')) {
        return None;
    }
    match parse(trimmed) {
        Some(doc) => Some(describe(&doc)),
        None => mime_xml.then(|| unknown::unparsed(input, "XML")),
    }
}

/// What the summary needs of a document.
struct Document {
    root: String,
    root_attributes: usize,
    /// Direct children of the root: (tag, count), in order of first appearance.
    children: Vec<(String, usize)>,
}

fn describe(doc: &Document) -> Synopsis {
    let mut s = Synopsis::new(Kind::Xml, "XML output");
    s.summary
        .push(clip_line(format!("XML document with root: {}.", doc.root)));
    s.structure.push(clip_line(format!("root: {}", doc.root)));
    s.structure
        .push(format!("attributes: {}", doc.root_attributes));
    let mut ranked: Vec<&(String, usize)> = doc.children.iter().collect();
    // Stable sort: ties keep their first-seen order.
    ranked.sort_by_key(|entry| std::cmp::Reverse(entry.1));
    s.structure.extend(
        ranked
            .into_iter()
            .take(CHILD_TAG_LIMIT)
            .map(|(tag, n)| clip_line(format!("{tag}: {n}"))),
    );
    s
}

/// Parses `text` as one well-formed XML document; `None` when it is not one.
fn parse(text: &str) -> Option<Document> {
    let mut reader = Reader::from_str(text);
    reader.config_mut().check_end_names = true;
    let mut depth = 0usize;
    let mut root: Option<(String, usize)> = None;
    let mut children: Vec<(String, usize)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut declares_entities = false;
    let mut last_child: Option<usize> = None;
    let mut last_name = String::new();
    loop {
        let event = reader.read_event().ok()?;
        match event {
            Event::Start(ref e) | Event::Empty(ref e) => {
                let empty = matches!(event, Event::Empty(_));
                let attributes = count_attributes(e)?;
                if depth == 0 {
                    if root.is_some() {
                        return None; // a second root element
                    }
                    root = Some((tag_name(e.name().as_ref()), attributes));
                } else if depth == 1 {
                    let name = e.name();
                    let name: &str = name.as_ref();
                    // Siblings usually repeat one tag: compare with the last
                    // one before hashing.
                    let i = match last_child {
                        Some(i) if last_name == name => i,
                        _ => {
                            let i = match index.get(name) {
                                Some(&i) => i,
                                None => {
                                    index.insert(name.to_string(), children.len());
                                    children.push((tag_name(name), 0));
                                    children.len() - 1
                                }
                            };
                            last_name.clear();
                            last_name.push_str(name);
                            last_child = Some(i);
                            i
                        }
                    };
                    children[i].1 += 1;
                }
                if !empty {
                    depth += 1;
                }
            }
            Event::End(_) => {
                depth = depth.checked_sub(1)?;
            }
            Event::Text(t) => {
                if depth == 0 && !t.trim().is_empty() {
                    return None;
                }
            }
            Event::CData(_) => {
                if depth == 0 {
                    return None;
                }
            }
            Event::GeneralRef(r) => {
                if depth == 0 {
                    return None;
                }
                let name: &str = &r;
                let known =
                    matches!(name, "lt" | "gt" | "amp" | "apos" | "quot") || name.starts_with('#');
                if !known && !declares_entities {
                    return None;
                }
            }
            Event::DocType(d) => {
                if root.is_some() {
                    return None;
                }
                declares_entities = d.contains("<!ENTITY");
            }
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) => {}
            Event::Eof => break,
        }
    }
    let (root, root_attributes) = root?;
    if depth != 0 {
        return None;
    }
    Some(Document {
        root,
        root_attributes,
        children,
    })
}

/// Counts an element's attributes, namespace declarations excluded; `None`
/// when an attribute is malformed or repeated.
fn count_attributes(e: &BytesStart<'_>) -> Option<usize> {
    let mut n = 0;
    for attribute in e.attributes() {
        let attribute = attribute.ok()?;
        let key = attribute.key.as_ref();
        if key != "xmlns" && !key.starts_with("xmlns:") {
            n += 1;
        }
    }
    Some(n)
}

fn tag_name(raw: &str) -> String {
    one_line(raw, TAG_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn syn(text: &str) -> Option<Synopsis> {
        summarize(&Input::new(text, "", 100))
    }

    #[test]
    fn counts_children_most_frequent_first() {
        let s = syn("<?xml version='1.0'?>\n<feed xmlns='urn:x' lang='en'><title/><entry/><link/><entry>&amp;</entry></feed>")
            .expect("xml");
        assert_eq!(
            s.structure,
            [
                "root: feed",
                "attributes: 1",
                "entry: 2",
                "title: 1",
                "link: 1"
            ]
        );
    }

    #[test]
    fn refuses_what_is_not_well_formed() {
        for bad in [
            "<html><br></html>",
            "<a></b>",
            "<a/><b/>",
            "<a>unclosed",
            "<p>&nbsp;</p>",
            "<a x='1' x='2'/>",
            "<a/>trailing text",
        ] {
            assert!(syn(bad).is_none(), "{bad}");
        }
    }
}
