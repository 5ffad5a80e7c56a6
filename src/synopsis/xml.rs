//! The `xml` kind: a well-formed XML document (SVG, feeds, POMs, JUnit
//! reports) described by its root tag, the root's attribute count and its
//! direct children's tags, most frequent first.
//!
//! Well-formedness is checked in one streaming pass (quick-xml's reader loop,
//! replayed over the bytes; see [`parse`]): matching end tags, exactly one root
//! element, nothing but whitespace outside it, valid attributes, and only
//! predefined or declared entities. HTML that is not
//! well-formed XML is refused here and falls through to later kinds.

use super::lines::{clip_line, one_line};
use super::unknown;
use super::{Input, Kind, Synopsis};
use quick_xml::events::attributes::Attributes;
use quick_xml::events::Event;
use quick_xml::parser::{ElementParser, Parser as _, PiParser};
use quick_xml::Reader;
use std::collections::{HashMap, HashSet};

/// Child tags listed in the structure.
const CHILD_TAG_LIMIT: usize = 30;
/// A tag name is shown with at most this many characters.
const TAG_CHARS: usize = 80;
/// An element's attribute keys are checked for repeats by a linear search up
/// to this many keys, by hashing beyond.
const LINEAR_KEYS: usize = 16;
/// The UTF-8 byte-order mark.
const BOM: &[u8] = b"\xEF\xBB\xBF";

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
#[cfg_attr(test, derive(Debug, PartialEq))]
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
///
/// This is quick-xml's `Reader` loop (0.42, default configuration plus
/// `check_end_names`) replayed over the bytes of `text`, with quick-xml's own
/// pieces doing the parsing: `ElementParser` finds where a start or end tag
/// ends, `PiParser` a processing instruction, `Attributes` checks an
/// element's attributes, and a `Reader` reads a DOCTYPE (whose internal
/// subset only it can parse). The `Reader` would validate the UTF-8 of every
/// event; `text` is a `&str` already, so the scan skips that and slices
/// `text` only where a name or an attribute list is needed (always at ASCII
/// delimiters, hence on character boundaries). Every condition under which
/// the `Reader` returns an error, and every check the summary adds, refuses
/// here at the same event; the differential test below holds the two to
/// that.
fn parse(text: &str) -> Option<Document> {
    let bytes = text.as_bytes();
    let mut scan = Scan {
        text,
        bytes,
        // The `Reader` drops a leading UTF-8 byte-order mark.
        pos: if bytes.starts_with(BOM) { BOM.len() } else { 0 },
        open: Vec::new(),
        root: None,
        children: Vec::new(),
        index: HashMap::new(),
        last_child: None,
        declares_entities: false,
        keys: Vec::new(),
        key_set: HashSet::new(),
    };
    scan.run()?;
    let (root, root_attributes) = scan.root?;
    if !scan.open.is_empty() {
        return None;
    }
    Some(Document {
        root,
        root_attributes,
        children: scan.children,
    })
}

/// The state of one well-formedness scan.
struct Scan<'a> {
    text: &'a str,
    bytes: &'a [u8],
    /// The next byte to read.
    pos: usize,
    /// Byte spans of the names of the open elements, outermost first.
    open: Vec<(usize, usize)>,
    root: Option<(String, usize)>,
    /// Direct children of the root: (tag, count), in order of first appearance.
    children: Vec<(String, usize)>,
    /// Raw child name -> its place in `children`.
    index: HashMap<&'a str, usize>,
    /// The raw name and place of the last direct child (siblings usually
    /// repeat one tag: compare with it before hashing).
    last_child: Option<(&'a str, usize)>,
    declares_entities: bool,
    /// The attribute keys of the current element (reused).
    keys: Vec<&'a str>,
    /// The same, once there are more than [`LINEAR_KEYS`] of them.
    key_set: HashSet<&'a str>,
}

impl<'a> Scan<'a> {
    /// Reads to the end of the input; `None` at the first event the `Reader`
    /// would fail on or the summary refuses.
    fn run(&mut self) -> Option<()> {
        loop {
            // Text up to the next markup or reference (quick-xml's `read_text`).
            let start = self.pos;
            let rest = self.bytes.get(start..)?;
            match memchr::memchr2(b'<', b'&', rest) {
                None => return self.text_event(start, self.bytes.len()),
                Some(i) => {
                    self.pos = start + i;
                    if i > 0 {
                        self.text_event(start, self.pos)?;
                    }
                    if rest[i] == b'<' {
                        self.markup()?;
                    } else {
                        self.reference()?;
                    }
                }
            }
        }
    }

    /// A text event: only whitespace may stand outside the root element.
    fn text_event(&self, start: usize, end: usize) -> Option<()> {
        if self.open.is_empty() && !self.text.get(start..end)?.trim().is_empty() {
            return None;
        }
        Some(())
    }

    /// `&name;` at `pos` (quick-xml's `read_ref`): only the predefined
    /// entities and character references, unless the DOCTYPE declares
    /// entities; never outside the root.
    fn reference(&mut self) -> Option<()> {
        let after = self.bytes.get(self.pos + 1..)?;
        let i = memchr::memchr3(b';', b'&', b'<', after)?;
        if after[i] != b';' || self.open.is_empty() {
            return None; // an unclosed reference, or one outside the root
        }
        let name = &after[..i];
        let known =
            matches!(name, b"lt" | b"gt" | b"amp" | b"apos" | b"quot") || name.starts_with(b"#");
        if !known && !self.declares_entities {
            return None;
        }
        self.pos += i + 2;
        Some(())
    }

    /// Markup at `pos`, which holds `<` (quick-xml's `read_until_close`).
    fn markup(&mut self) -> Option<()> {
        let rest = self.bytes.get(self.pos..)?;
        match rest.get(1)? {
            b'!' => self.bang(rest),
            b'/' => self.end_tag(rest),
            b'?' => {
                let end = PiParser(false).feed(rest)?;
                // `<?>` is no processing instruction.
                if end < 3 {
                    return None;
                }
                self.pos += end + 1;
                Some(())
            }
            _ => self.start_tag(rest),
        }
    }

    /// `<!`: a comment, CDATA or a DOCTYPE (quick-xml's `read_bang_element`
    /// and `emit_bang`).
    fn bang(&mut self, rest: &[u8]) -> Option<()> {
        let end = match rest.get(2)? {
            b'-' => {
                // The first `>` after at least `<!----` that follows `--`.
                let end = memchr::memchr_iter(b'>', rest)
                    .find(|&i| i > 5 && rest[..i].ends_with(b"--"))?;
                if !rest.starts_with(b"<!--") {
                    return None;
                }
                end
            }
            b'[' => {
                let end = memchr::memchr_iter(b'>', rest).find(|&i| rest[..i].ends_with(b"]]"))?;
                if !rest.starts_with(b"<![CDATA[") || self.open.is_empty() {
                    return None;
                }
                end
            }
            b'D' | b'd' => return self.doctype(),
            _ => return None,
        };
        self.pos += end + 1;
        Some(())
    }

    /// A DOCTYPE, read by quick-xml's `Reader` from `pos`: only before the
    /// root element; notes whether it declares entities.
    fn doctype(&mut self) -> Option<()> {
        if self.root.is_some() {
            // Whether or not it parses, a DOCTYPE after the root is refused.
            return None;
        }
        let mut reader = Reader::from_str(self.text.get(self.pos..)?);
        let Ok(Event::DocType(d)) = reader.read_event() else {
            return None;
        };
        self.declares_entities = d.contains("<!ENTITY");
        self.pos += usize::try_from(reader.buffer_position()).ok()?;
        Some(())
    }

    /// `</name>`: must close the innermost open element (quick-xml's
    /// `emit_end`, names compared after trimming trailing whitespace).
    fn end_tag(&mut self, rest: &[u8]) -> Option<()> {
        let end = ElementParser::Outside.feed(rest)?;
        let content = rest.get(2..end)?;
        let name = match content.iter().rposition(|&b| !is_xml_whitespace(b)) {
            Some(last) => &content[..=last],
            None => content,
        };
        let (name_start, name_end) = self.open.pop()?;
        if self.bytes.get(name_start..name_end)? != name {
            return None;
        }
        self.pos += end + 1;
        Some(())
    }

    /// `<name attributes>` or `<name attributes/>` (quick-xml's `emit_start`).
    fn start_tag(&mut self, rest: &[u8]) -> Option<()> {
        let end = ElementParser::Outside.feed(rest)?;
        let empty = end >= 2 && rest[end - 1] == b'/';
        let content_start = self.pos + 1;
        let content_end = self.pos + if empty { end - 1 } else { end };
        let content = self.text.get(content_start..content_end)?;
        let name_len = content
            .bytes()
            .position(is_xml_whitespace)
            .unwrap_or(content.len());
        let attributes = if name_len == content.len() {
            0
        } else {
            self.count_attributes(content, name_len)?
        };
        let name = content.get(..name_len)?;
        match self.open.len() {
            0 => {
                if self.root.is_some() {
                    return None; // a second root element
                }
                self.root = Some((tag_name(name), attributes));
            }
            1 => self.count_child(name),
            _ => {}
        }
        if !empty {
            self.open.push((content_start, content_start + name_len));
        }
        self.pos += end + 1;
        Some(())
    }

    /// Counts the attributes after the name (`content[name_len..]`),
    /// namespace declarations excluded; `None` when one is malformed or
    /// repeated. quick-xml's own duplicate check allocates for every element
    /// with attributes, so it is off and done here on the keys quick-xml
    /// returns, with the same byte-wise comparison.
    fn count_attributes(&mut self, content: &'a str, name_len: usize) -> Option<usize> {
        let mut attributes = Attributes::new(content, name_len);
        attributes.with_checks(false);
        self.keys.clear();
        self.key_set.clear();
        let mut n = 0;
        for attribute in attributes {
            let key = attribute.ok()?.key.0;
            if self.keys.len() < LINEAR_KEYS {
                if self.keys.contains(&key) {
                    return None;
                }
                self.keys.push(key);
            } else {
                if self.key_set.is_empty() {
                    self.key_set.extend(self.keys.iter().copied());
                }
                if !self.key_set.insert(key) {
                    return None;
                }
            }
            if key != "xmlns" && !key.starts_with("xmlns:") {
                n += 1;
            }
        }
        Some(n)
    }

    fn count_child(&mut self, name: &'a str) {
        let i = match self.last_child {
            Some((last, i)) if last == name => i,
            _ => {
                let i = *self.index.entry(name).or_insert_with(|| {
                    self.children.push((tag_name(name), 0));
                    self.children.len() - 1
                });
                self.last_child = Some((name, i));
                i
            }
        };
        if let Some(child) = self.children.get_mut(i) {
            child.1 += 1;
        }
    }
}

/// XML whitespace as quick-xml defines it.
fn is_xml_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\r' | b'\n' | b'\t')
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
            "<?>",
            "<?xml version='1.0'?><?><a/>",
            "<a><!-x--></a>",
            "<a><!--></a>",
            "<a><![CDAT[x]]></a>",
            "<![CDATA[x]]><a/>",
            "<a/><![CDATA[x]]>",
            "<!DOCTYPE a><a/><!DOCTYPE a>",
            "<a><!DOCTYPE a></a>",
            "<!DOCTYPE>",
            "<a>&amp</a>",
            "<a>&amp<b/></a>",
            "&amp;<a/>",
            "<a x></a>",
            "<a x=1></a>",
            "</a>",
            "<a></a",
            "<a><",
            "<a><!x></a>",
            "<a x='>'></a x='>'>",
            "<a><b></a></b>",
        ] {
            assert!(syn(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn accepts_what_is_well_formed() {
        for (good, root, attributes) in [
            ("<!DOCTYPE a [<!ENTITY e 'x'>]><a>&e;</a>", "a", 0),
            ("<!doctype a><a>&#160;&lt;</a>", "a", 0),
            ("<a><![CDATA[<b>&nope;]]></a>", "a", 0),
            (
                "<?xml version='1.0'?>\n<!-- c -- c --><?pi x?><a/>\n<!---->",
                "a",
                0,
            ),
            ("<a\n x = \"1\"\txmlns:p='u'></a \r\n>", "a", 1),
            ("<a/ >text</a/>", "a/", 0),
            ("\u{feff}<a b='1'/>", "a", 1),
        ] {
            let doc = parse(good).unwrap_or_else(|| panic!("refused {good:?}"));
            assert_eq!((doc.root.as_str(), doc.root_attributes), (root, attributes));
        }
    }

    #[test]
    fn an_xml_mime_hint_reports_what_does_not_parse() {
        let s = summarize(&Input::new("<a><b></a>", "application/xml", 100)).expect("unknown");
        assert_eq!(s.kind, Kind::Unknown);
    }

    /// The attribute count as the summary first took it (quick-xml's checks on).
    fn count_attributes(attributes: Attributes<'_>) -> Option<usize> {
        let mut n = 0;
        for attribute in attributes {
            let attribute = attribute.ok()?;
            let key = attribute.key.as_ref();
            if key != "xmlns" && !key.starts_with("xmlns:") {
                n += 1;
            }
        }
        Some(n)
    }

    #[test]
    fn many_attributes_are_checked_for_repeats() {
        let keys: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
        let element = |keys: &[String]| {
            let attributes: String = keys.iter().map(|k| format!(" {k}='v'")).collect();
            format!("<a xmlns='u'{attributes}><b{attributes}/></a>")
        };
        let distinct = element(&keys);
        assert_eq!(parse(&distinct).map(|d| d.root_attributes), Some(40));
        for (i, j) in [(0, 1), (3, 12), (5, 30), (20, 39), (38, 39)] {
            let mut repeated = keys.clone();
            repeated[j] = repeated[i].clone();
            let text = element(&repeated);
            assert!(parse(&text).is_none(), "k{i} repeated at {j}");
            assert!(reader_parse(&text).is_none());
            let inner = format!("<r>{}</r>", element(&repeated));
            assert!(parse(&inner).is_none());
        }
    }

    /// The scan must take every decision quick-xml's `Reader` loop takes:
    /// this is that loop, as the summary first ran it.
    fn reader_parse(text: &str) -> Option<Document> {
        let mut reader = Reader::from_str(text);
        reader.config_mut().check_end_names = true;
        let mut depth = 0usize;
        let mut root: Option<(String, usize)> = None;
        let mut children: Vec<(String, usize)> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut declares_entities = false;
        loop {
            let event = reader.read_event().ok()?;
            match event {
                Event::Start(ref e) | Event::Empty(ref e) => {
                    let attributes = count_attributes(e.attributes())?;
                    let name: &str = e.name().0;
                    if depth == 0 {
                        if root.is_some() {
                            return None;
                        }
                        root = Some((tag_name(name), attributes));
                    } else if depth == 1 {
                        let i = *index.entry(name.to_string()).or_insert_with(|| {
                            children.push((tag_name(name), 0));
                            children.len() - 1
                        });
                        children[i].1 += 1;
                    }
                    if matches!(event, Event::Start(_)) {
                        depth += 1;
                    }
                }
                Event::End(_) => depth = depth.checked_sub(1)?,
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
                    let name: &str = &r;
                    let known = matches!(name, "lt" | "gt" | "amp" | "apos" | "quot")
                        || name.starts_with('#');
                    if depth == 0 || (!known && !declares_entities) {
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
        (depth == 0).then_some(Document {
            root,
            root_attributes,
            children,
        })
    }

    /// Pieces of XML, well-formed or not, that the differential test glues together.
    #[rustfmt::skip]
    const PIECES: &[&str] = &[
        "<a>", "</a>", "<b>", "</b>", "<a/>", "<b/>", "<a x='1'>", "<b y=\"2\" z='3'/>",
        "<a x='1' x='2'>", "<a xmlns='u' xmlns:p='v' p:q='w'>", "<a x>", "<a x=1>",
        "</a >", "</a\n>", "<a\t/>", "<a/ >", "</a/>", "<>", "</>", "<a b='>'>",
        "<p:q>", "</p:q>", "text", " ", "\n", "\t", "\u{a0}", "é", "&amp;", "&lt;",
        "&#10;", "&#;", "&foo;", "&", "&;", ";", "<", ">", "'", "\"", "/", "=", "!", "?",
        "-", "]", "[", "<!-- c -->", "<!---->", "<!-->", "<!--->", "<!-- a--b -->", "-->",
        "<!-x-->", "<![CDATA[x<y]]>", "<![CDATA[]]>", "<![CDAT[x]]>", "]]>", "<![",
        "<?xml version='1.0'?>", "<?pi?>", "<?>", "<??>", "?>", "<!DOCTYPE a>",
        "<!doctype a [<!ENTITY foo 'x'>]>", "<!DOCTYPE a [<!ELEMENT a ANY>]>", "<!DOCTYPE>",
        "<!", "<!x>", "\u{feff}",
    ];

    /// Glues `ops` into a text: mostly nested elements (some left open),
    /// the rest arbitrary pieces.
    fn glue(ops: &[(u8, usize)], close: bool) -> String {
        let mut text = String::new();
        let mut open: Vec<&str> = Vec::new();
        for &(op, i) in ops {
            match op {
                0..=2 => {
                    let name = ["a", "b", "p:q"][i % 3];
                    text.push('<');
                    text.push_str(name);
                    if i % 3 == 0 {
                        text.push_str(" x='1'");
                    }
                    text.push('>');
                    open.push(name);
                }
                3..=5 => {
                    if let Some(name) = open.pop() {
                        text.push_str("</");
                        text.push_str(name);
                        text.push('>');
                    }
                }
                _ => text.push_str(PIECES[i % PIECES.len()]),
            }
        }
        while let Some(name) = open.pop() {
            if close {
                text.push_str("</");
                text.push_str(name);
                text.push('>');
            }
        }
        text
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 3000,
            ..proptest::prelude::ProptestConfig::default()
        })]

        #[test]
        fn the_scan_decides_as_quick_xml_reader_does(
            ops in proptest::collection::vec((0u8..10, 0..PIECES.len()), 0..24),
            close in proptest::bool::weighted(0.9),
        ) {
            let text = glue(&ops, close);
            proptest::prop_assert_eq!(parse(&text), reader_parse(&text), "{:?}", text);
        }

        #[test]
        fn the_scan_decides_as_quick_xml_reader_does_on_any_text(text in "[<>/!?\\[\\]&;#'\"= a-bx\n-]{0,40}") {
            proptest::prop_assert_eq!(parse(&text), reader_parse(&text), "{:?}", text);
        }
    }
}
