//! MCP tool results: the content blocks an MCP tool's output comes in,
//! taken off so that the synopsis describes the payload inside.
//!
//! An MCP server answers `tools/call` with a `CallToolResult`: a list of
//! content blocks, an optional `structuredContent` and `isError`. Clients
//! and harnesses pass it on to the model as JSON (the blocks alone, one
//! block, or the whole result) or, from Python, as the SDK's printed form.
//! Whole, every such output was described as the wrapper (`type, text,
//! annotations`), never as the JSON inside. Recognised by exact form only:
//!
//! - **A content block**: a JSON object whose `type` is `text` (with a string
//!   `text`), `image` or `audio` (with string `data` and `mimeType`),
//!   `resource` (with `resource`: `uri` and a string `text` or `blob`, and
//!   optionally `mimeType`, `name`, `title`, `size`, `_meta`) or
//!   `resource_link` (with `uri` and `name`, optionally `title`,
//!   `description`, `mimeType`, `size`, `icons`); besides, only
//!   `annotations`, `_meta` and `meta` (and `error`, a boolean Toolathlon's
//!   harness adds). Any other key, a missing field or a value of another
//!   type, and the object is someone's JSON document, not a block.
//! - **A list of blocks**: a JSON array of one or more such objects.
//! - **A result**: a JSON object with a `content` list of blocks and only
//!   `structuredContent`, `isError`, `_meta` and `meta` besides.
//! - **The Python SDK's printed result**: `meta=None content=[TextContent(type='text',
//!   text='...', annotations=None)] isError=False` (`meta=None ` and
//!   ` structuredContent=None` optional; `ImageContent` and `AudioContent`
//!   blocks too; strings as Python writes them).
//!
//! Each form may be cut short by the harness (the JSON or the Python text
//! ends inside a block's text, with or without a marker such as
//! `...[truncated]`): the blocks up to the cut are kept, the last text as far
//! as it goes, and the cut is said.
//!
//! What the synopsis then sees: `structuredContent` when there is one (it is
//! the payload; the text blocks beside it are its serialisation); else the
//! text of the text blocks and of text resources, in order, joined by a
//! blank line. Images, audio, blobs and resource links are named (kind, MIME
//! type, size, URI), never given. `annotations`, `_meta` and `meta` are not
//! described. The first summary line says the output came as MCP content
//! blocks, how many and of which types; the original, stored and read back,
//! is unchanged.

use super::cut::{close_json_prefix, strip_marker};
use super::lines::{clip_line, one_line};
use super::wrapper::Unwrapped;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// Blocks other than text named one per line, at most this many.
const NAMED_BLOCKS: usize = 6;
/// A URI or name is quoted with at most this many characters.
const URI_CHARS: usize = 100;
/// What joins the text of several blocks.
pub(crate) const SEPARATOR: &str = "\n\n";

/// The payload inside an MCP result, in any of the forms above.
pub(crate) fn unwrap(text: &str) -> Option<Unwrapped<'_>> {
    match *text.as_bytes().first()? {
        b'{' | b'[' => json_form(text),
        b'm' | b'c' => python_form(text),
        _ => None,
    }
}

// ------------------------------------------------------------ the model

#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "snake_case")]
enum BlockType {
    Text,
    Image,
    Audio,
    Resource,
    ResourceLink,
}

impl BlockType {
    fn name(self) -> &'static str {
        match self {
            BlockType::Text => "text",
            BlockType::Image => "image",
            BlockType::Audio => "audio",
            BlockType::Resource => "resource",
            BlockType::ResourceLink => "resource_link",
        }
    }
}

/// One content block as JSON; which fields its type needs is checked after.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Block<'a> {
    #[serde(rename = "type")]
    kind: BlockType,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(default)]
    data: Option<Length>,
    #[serde(borrow, default, rename = "mimeType")]
    mime_type: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    resource: Option<Resource<'a>>,
    #[serde(borrow, default)]
    uri: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    title: Option<IgnoredAny>,
    #[serde(default)]
    description: Option<IgnoredAny>,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    icons: Option<IgnoredAny>,
    #[serde(default, rename = "annotations")]
    _annotations: Option<IgnoredAny>,
    #[serde(default, rename = "_meta")]
    _meta: Option<IgnoredAny>,
    #[serde(default, rename = "meta")]
    _meta_field: Option<IgnoredAny>,
    #[serde(default)]
    error: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Resource<'a> {
    #[serde(borrow)]
    uri: Cow<'a, str>,
    #[serde(borrow, default, rename = "mimeType")]
    mime_type: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(default)]
    blob: Option<Length>,
    #[serde(default, rename = "name")]
    _name: Option<IgnoredAny>,
    #[serde(default, rename = "title")]
    _title: Option<IgnoredAny>,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default, rename = "_meta")]
    _meta: Option<IgnoredAny>,
    #[serde(default, rename = "meta")]
    _meta_field: Option<IgnoredAny>,
}

/// A `CallToolResult` as JSON.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolResult<'a> {
    #[serde(borrow)]
    content: Vec<Block<'a>>,
    #[serde(borrow, default, rename = "structuredContent")]
    structured: Option<&'a RawValue>,
    #[serde(default, rename = "isError")]
    is_error: Option<bool>,
    #[serde(default, rename = "_meta")]
    _meta: Option<IgnoredAny>,
    #[serde(default, rename = "meta")]
    _meta_field: Option<IgnoredAny>,
}

/// A string read for its length only (base64 data is never copied).
struct Length(usize);

impl<'de> Deserialize<'de> for Length {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Length, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Length;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E>(self, v: &str) -> Result<Length, E> {
                Ok(Length(v.len()))
            }
        }
        d.deserialize_str(V)
    }
}

/// A block as the synopsis needs it, whatever form it came in.
struct Item {
    kind: BlockType,
    /// The text of a text block or a text resource.
    text: Option<String>,
    /// A one-line description of a block that is not given (image, blob, link).
    named: Option<String>,
    error: bool,
}

impl Block<'_> {
    /// The block as an [`Item`], when its fields are the ones its type has.
    fn item(self, index: usize) -> Option<Item> {
        let n = index + 1;
        let link_fields = self.uri.is_some()
            || self.name.is_some()
            || self.title.is_some()
            || self.description.is_some()
            || self.size.is_some()
            || self.icons.is_some();
        let error = self.error.unwrap_or(false);
        let only = |text: bool, data: bool, mime: bool, resource: bool, link: bool| {
            self.text.is_some() == text
                && self.data.is_some() == data
                && (mime || self.mime_type.is_none())
                && self.resource.is_some() == resource
                && (link || !link_fields)
        };
        match self.kind {
            BlockType::Text => only(true, false, false, false, false).then(|| Item {
                kind: self.kind,
                text: self.text.map(Cow::into_owned),
                named: None,
                error,
            }),
            BlockType::Image | BlockType::Audio => {
                if !only(false, true, true, false, false) {
                    return None;
                }
                let mime = self.mime_type?;
                let data = self.data?.0;
                Some(Item {
                    kind: self.kind,
                    text: None,
                    named: Some(media_line(self.kind.name(), n, &mime, data)),
                    error,
                })
            }
            BlockType::Resource => {
                if !only(false, false, false, true, false) {
                    return None;
                }
                let r = self.resource?;
                if r.text.is_some() == r.blob.is_some() {
                    return None;
                }
                let mime = r
                    .mime_type
                    .as_deref()
                    .map_or(String::new(), |m| format!(", {}", one_line(m, 60)));
                let size = r.size.map_or(String::new(), |s| format!(", {s} bytes"));
                let uri = one_line(&r.uri, URI_CHARS);
                match (r.text, r.blob) {
                    (Some(text), _) => Some(Item {
                        kind: self.kind,
                        named: Some(clip_line(format!(
                            "Block {n}: resource {uri}{mime}{size}, {} characters of text (described below with the other text).",
                            text.chars().count()
                        ))),
                        text: Some(text.into_owned()),
                        error,
                    }),
                    (None, Some(blob)) => Some(Item {
                        kind: self.kind,
                        text: None,
                        named: Some(clip_line(format!(
                            "Block {n}: resource {uri}{mime}{size}, a blob of {} base64 characters (about {} bytes), not shown.",
                            blob.0,
                            blob.0 / 4 * 3
                        ))),
                        error,
                    }),
                    (None, None) => None,
                }
            }
            BlockType::ResourceLink => {
                if self.text.is_some() || self.data.is_some() || self.resource.is_some() {
                    return None;
                }
                let uri = self.uri?;
                let name = self.name?;
                let mime = self
                    .mime_type
                    .as_deref()
                    .map_or(String::new(), |m| format!(", {}", one_line(m, 60)));
                let size = self.size.map_or(String::new(), |s| format!(", {s} bytes"));
                Some(Item {
                    kind: self.kind,
                    text: None,
                    named: Some(clip_line(format!(
                        "Block {n}: resource link {:?} to {}{mime}{size}.",
                        one_line(&name, URI_CHARS),
                        one_line(&uri, URI_CHARS)
                    ))),
                    error,
                })
            }
        }
    }
}

fn media_line(kind: &str, n: usize, mime: &str, base64_chars: usize) -> String {
    clip_line(format!(
        "Block {n}: {kind}, {}, {base64_chars} base64 characters (about {} bytes), not shown.",
        one_line(mime, 60),
        base64_chars / 4 * 3
    ))
}

/// How the blocks came.
struct Form {
    /// `content blocks`, `a CallToolResult`, ...
    what: &'static str,
    is_error: bool,
    /// `structuredContent`, raw.
    structured: Option<String>,
    /// Where and how the output was cut, when it was.
    cut: Option<String>,
}

// ------------------------------------------------------------ JSON

/// The first key of the first object: a block's or a result's, or not MCP.
fn looks_like_mcp(text: &str) -> bool {
    let rest = text.trim_start_matches(['[', ' ', '\n', '\r', '\t']);
    let Some(rest) = rest.strip_prefix('{') else {
        return false;
    };
    let rest = rest.trim_start_matches([' ', '\n', '\r', '\t']);
    let Some(rest) = rest.strip_prefix('"') else {
        return false;
    };
    let Some(end) = rest.get(..rest.len().min(24)).and_then(|w| w.find('"')) else {
        return false;
    };
    matches!(
        &rest[..end],
        "type"
            | "text"
            | "data"
            | "mimeType"
            | "resource"
            | "uri"
            | "name"
            | "annotations"
            | "_meta"
            | "meta"
            | "content"
            | "structuredContent"
            | "isError"
    )
}

enum Parsed<'a> {
    Blocks(Vec<Block<'a>>),
    Result(ToolResult<'a>),
}

fn parse(text: &str) -> Result<Parsed<'_>, serde_json::Error> {
    if text.starts_with('[') {
        return serde_json::from_str(text).map(Parsed::Blocks);
    }
    // A result starts with one of its own keys; a block with `type` most often.
    let result = serde_json::from_str::<ToolResult<'_>>(text).map(Parsed::Result);
    match result {
        Ok(r) => Ok(r),
        Err(e) => match serde_json::from_str::<Block<'_>>(text) {
            Ok(b) => Ok(Parsed::Blocks(vec![b])),
            // The error of the reading that went further tells a cut apart.
            Err(e2) if e2.is_eof() => Err(e2),
            Err(_) => Err(e),
        },
    }
}

fn json_form(text: &str) -> Option<Unwrapped<'static>> {
    let text = text.trim_end();
    if !looks_like_mcp(text) {
        return None;
    }
    let error = match parse(text) {
        Ok(parsed) => return from_parsed(parsed, None),
        Err(e) => e,
    };
    // A marker after the cut is taken off first (a cut inside a string
    // would read it as the string's).
    let (body, marker) = match strip_marker(text) {
        Some((body, marker)) => match parse(body) {
            Ok(parsed) => return from_parsed(parsed, Some(cut_line(body, Some(marker)))),
            Err(e) if e.is_eof() => (body, Some(marker)),
            Err(_) => return None,
        },
        None if error.is_eof() => (text, None),
        None => return None,
    };
    let closed = close_json_prefix(body, true)?;
    let parsed = parse(&closed).ok()?;
    from_parsed(parsed, Some(cut_line(body, marker)))
}

fn cut_line(body: &str, marker: Option<&str>) -> String {
    let marker = marker.map_or(String::new(), |m| format!(", then {m:?}"));
    format!(
        "it ends unfinished after {} characters{marker}: the blocks are read as far as they go",
        body.chars().count()
    )
}

fn from_parsed(parsed: Parsed<'_>, cut: Option<String>) -> Option<Unwrapped<'static>> {
    let (blocks, form) = match parsed {
        Parsed::Blocks(blocks) => {
            let what = if blocks.len() == 1 {
                "a JSON content block"
            } else {
                "a JSON list of content blocks"
            };
            (
                blocks,
                Form {
                    what,
                    is_error: false,
                    structured: None,
                    cut,
                },
            )
        }
        Parsed::Result(r) => (
            r.content,
            Form {
                what: "a JSON CallToolResult",
                is_error: r.is_error.unwrap_or(false),
                structured: r.structured.map(|raw| raw.get().to_string()),
                cut,
            },
        ),
    };
    if blocks.is_empty() && form.structured.is_none() && !form.what.ends_with("CallToolResult") {
        return None;
    }
    let items = blocks
        .into_iter()
        .enumerate()
        .map(|(i, b)| b.item(i))
        .collect::<Option<Vec<Item>>>()?;
    Some(unwrapped(items, form))
}

// ------------------------------------------------------------ the payload

fn unwrapped(items: Vec<Item>, form: Form) -> Unwrapped<'static> {
    let mut counts: Vec<(&'static str, usize)> = Vec::new();
    for item in &items {
        match counts.iter_mut().find(|(k, _)| *k == item.kind.name()) {
            Some((_, n)) => *n += 1,
            None => counts.push((item.kind.name(), 1)),
        }
    }
    let blocks = match items.len() {
        0 => "no content blocks".to_string(),
        1 => format!("1 content block ({})", items[0].kind.name()),
        n => format!(
            "{n} content blocks ({})",
            counts
                .iter()
                .map(|(k, c)| format!("{c} {k}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let text_blocks = items.iter().filter(|i| i.text.is_some()).count();
    let has_structured = form.structured.is_some();
    // Counted only for the note beside structuredContent: a pass over
    // megabytes of text otherwise.
    let text_chars: usize = if has_structured {
        items
            .iter()
            .filter_map(|i| i.text.as_deref())
            .map(|t| t.chars().count())
            .sum()
    } else {
        0
    };
    let error = form.is_error || items.iter().any(|i| i.error);
    let mut facts = Vec::new();
    if error {
        facts.push("the tool reported an error".to_string());
    }
    if let Some(cut) = &form.cut {
        facts.push(cut.clone());
    }
    let facts = if facts.is_empty() {
        String::new()
    } else {
        format!("; {}", facts.join("; "))
    };
    let mut items = items;
    let (inner, what_inside) = match form.structured {
        Some(raw) => (
            raw,
            "its structuredContent (the payload) is described below",
        ),
        None if text_blocks == 0 => (String::new(), "it holds no text"),
        // One text: moved, not copied (it may be megabytes).
        None if text_blocks == 1 => (
            items
                .iter_mut()
                .find_map(|i| i.text.take())
                .unwrap_or_default(),
            "the text inside is described below",
        ),
        None => (
            items
                .iter()
                .filter_map(|i| i.text.as_deref())
                .collect::<Vec<&str>>()
                .join(SEPARATOR),
            "the text of its blocks, joined by blank lines, is described below",
        ),
    };
    let mut notes = vec![clip_line(format!(
        "MCP tool result as {} with {blocks}{facts}; {what_inside}.",
        form.what
    ))];
    if has_structured && text_blocks > 0 {
        notes.push(format!(
            "The {text_blocks} text block(s) beside structuredContent ({text_chars} characters) are not described."
        ));
    }
    let named: Vec<&String> = items.iter().filter_map(|i| i.named.as_ref()).collect();
    for line in named.iter().take(NAMED_BLOCKS) {
        notes.push((*line).clone());
    }
    if named.len() > NAMED_BLOCKS {
        notes.push(format!(
            "{} more blocks that are not text are not named.",
            named.len() - NAMED_BLOCKS
        ));
    }
    Unwrapped {
        inner: Cow::Owned(inner),
        notes,
        may_nest: true,
        offset: None,
    }
}

// ------------------------------------------------------------ Python's form

/// Why the Python form could not be read further.
enum Stop {
    /// The text ended: it was cut there.
    End,
    /// Something else than the form: not an MCP result.
    Other,
}

/// The Python MCP SDK's `CallToolResult` as `str()` prints it.
fn python_form(text: &str) -> Option<Unwrapped<'static>> {
    let rest = text.strip_prefix("meta=None ").unwrap_or(text);
    let rest = rest.strip_prefix("content=[")?;
    let mut items = Vec::new();
    let mut cursor = Cursor { rest };
    let outcome = python_blocks(&mut cursor, &mut items);
    let (is_error, cut) = match outcome {
        Ok(is_error) => (is_error, None),
        Err(Stop::Other) => return None,
        Err(Stop::End) => (
            false,
            Some(format!(
                "it ends unfinished after {} characters: the blocks are read as far as they go",
                text.chars().count()
            )),
        ),
    };
    if items.is_empty() && cut.is_some() {
        return None;
    }
    Some(unwrapped(
        items,
        Form {
            what: "the Python SDK's printed CallToolResult",
            is_error,
            structured: None,
            cut,
        },
    ))
}

struct Cursor<'a> {
    rest: &'a str,
}

impl Cursor<'_> {
    /// Takes `s` if the text goes on with it; the end of the text within `s`
    /// is a cut.
    fn take(&mut self, s: &str) -> Result<(), Stop> {
        if let Some(after) = self.rest.strip_prefix(s) {
            self.rest = after;
            Ok(())
        } else if s.starts_with(self.rest) {
            Err(Stop::End)
        } else {
            Err(Stop::Other)
        }
    }

    fn try_take(&mut self, s: &str) -> bool {
        self.take(s).is_ok()
    }

    fn at_end(&self) -> bool {
        self.rest.is_empty()
    }
}

/// The blocks up to `]`, then the fields after the list; `Ok(is_error)`.
fn python_blocks(c: &mut Cursor<'_>, items: &mut Vec<Item>) -> Result<bool, Stop> {
    if !c.try_take("]") {
        loop {
            let index = items.len();
            let kind = if c.try_take("TextContent(") {
                BlockType::Text
            } else if c.try_take("ImageContent(") {
                BlockType::Image
            } else if c.try_take("AudioContent(") {
                BlockType::Audio
            } else {
                return Err(if c.at_end() || "TextContent(".starts_with(c.rest) {
                    Stop::End
                } else {
                    Stop::Other
                });
            };
            let mut fields = PythonFields::default();
            let cut = python_fields(c, &mut fields);
            let item = match (kind, cut) {
                (BlockType::Text, Ok(())) => Item {
                    kind,
                    text: Some(fields.text.ok_or(Stop::Other)?),
                    named: None,
                    error: false,
                },
                // Cut inside the block: its text as far as it goes.
                (BlockType::Text, Err(Stop::End)) => {
                    if let Some(text) = fields.text.take().or(fields.open_text.take()) {
                        items.push(Item {
                            kind,
                            text: Some(text),
                            named: None,
                            error: false,
                        });
                    }
                    return Err(Stop::End);
                }
                (_, Ok(())) => {
                    let mime = fields.mime.ok_or(Stop::Other)?;
                    let data = fields.data.ok_or(Stop::Other)?;
                    Item {
                        kind,
                        text: None,
                        named: Some(media_line(kind.name(), index + 1, &mime, data)),
                        error: false,
                    }
                }
                (_, Err(stop)) => return Err(stop),
            };
            if fields.kind.as_deref() != Some(kind.name()) {
                return Err(Stop::Other);
            }
            items.push(item);
            if c.try_take("]") {
                break;
            }
            c.take(", ")?;
        }
    }
    if c.at_end() {
        return Err(Stop::End);
    }
    if c.try_take(" structuredContent=None") && c.at_end() {
        return Err(Stop::End);
    }
    c.take(" isError=")?;
    let is_error = if c.try_take("True") {
        true
    } else {
        c.take("False")?;
        false
    };
    if !c.rest.trim_end().is_empty() {
        return Err(Stop::Other);
    }
    Ok(is_error)
}

#[derive(Default)]
struct PythonFields {
    kind: Option<String>,
    text: Option<String>,
    /// A text cut before its closing quote.
    open_text: Option<String>,
    data: Option<usize>,
    mime: Option<String>,
}

/// `name=value, ...)`: strings, and `None` for `annotations` and `meta`.
fn python_fields(c: &mut Cursor<'_>, fields: &mut PythonFields) -> Result<(), Stop> {
    loop {
        let name_end = c
            .rest
            .bytes()
            .position(|b| !(b.is_ascii_alphanumeric() || b == b'_'))
            .ok_or(Stop::End)?;
        let name = &c.rest[..name_end];
        c.rest = &c.rest[name_end..];
        c.take("=")?;
        match name {
            "annotations" | "meta" | "_meta" => c.take("None")?,
            "type" | "text" | "data" | "mimeType" => {
                if c.rest.is_empty() {
                    return Err(Stop::End);
                }
                let (value, end) = python_string(c.rest).ok_or(Stop::Other)?;
                match end {
                    Some(end) => c.rest = &c.rest[end..],
                    None => {
                        if name == "text" {
                            fields.open_text = Some(value);
                        }
                        return Err(Stop::End);
                    }
                }
                match name {
                    "type" => fields.kind = Some(value),
                    "text" => fields.text = Some(value),
                    "data" => fields.data = Some(value.len()),
                    _ => fields.mime = Some(value),
                }
            }
            _ => return Err(Stop::Other),
        }
        if c.try_take(")") {
            return Ok(());
        }
        c.take(", ")?;
    }
}

/// A Python string literal at the start of `text` (`'...'` or `"..."`, as
/// `repr` writes them): its value and where it ends, or the value as far as
/// it goes and `None` when the text ends inside it. `None` when `text` does
/// not start with a quote or holds an escape Python would refuse. (The
/// replay's reader of `repr`s reads its strings with it too.)
pub(crate) fn python_string(text: &str) -> Option<(String, Option<usize>)> {
    let quote = match text.as_bytes().first() {
        Some(&q @ (b'\'' | b'"')) => q,
        _ => return None,
    };
    let mut out = String::new();
    let mut at = 1;
    loop {
        // Runs without a quote or a backslash (both ASCII: `run` is a
        // character boundary) are copied whole.
        let rest = text.get(at..)?;
        let run = rest
            .bytes()
            .position(|b| b == quote || b == b'\\')
            .unwrap_or(rest.len());
        out.push_str(rest.get(..run)?);
        at += run;
        match text.as_bytes().get(at) {
            None => return Some((out, None)),
            Some(&b) if b == quote => return Some((out, Some(at + 1))),
            Some(_) => {}
        }
        let Some(escape) = text.get(at + 1..).and_then(|r| r.chars().next()) else {
            return Some((out, None));
        };
        at += 1 + escape.len_utf8();
        let digits = match escape {
            'x' => 2,
            'u' => 4,
            'U' => 8,
            _ => 0,
        };
        if digits > 0 {
            let Some(hex) = text.get(at..at + digits) else {
                // Cut inside the escape, or not a hex escape at all.
                return (text.len() < at + digits).then_some((out, None));
            };
            out.push(u32::from_str_radix(hex, 16).ok().and_then(char::from_u32)?);
            at += digits;
            continue;
        }
        match escape {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            '\\' | '\'' | '"' => out.push(escape),
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'v' => out.push('\u{b}'),
            '0' => out.push('\0'),
            // A backslash before a line break continues the literal.
            '\n' => {}
            // Python keeps an unknown escape as written.
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inner(text: &str) -> Option<String> {
        unwrap(text).map(|u| u.inner.into_owned())
    }

    fn notes(text: &str) -> Vec<String> {
        unwrap(text).map(|u| u.notes).unwrap_or_default()
    }

    #[test]
    fn a_text_block_gives_its_text() {
        let text = r#"{"type":"text","text":"[{\"id\": 1}]","annotations":null}"#;
        assert_eq!(inner(text).as_deref(), Some(r#"[{"id": 1}]"#));
        assert_eq!(
            notes(text),
            ["MCP tool result as a JSON content block with 1 content block (text); the text inside is described below."]
        );
        let python_dump = r#"{"type": "text", "text": "x", "annotations": null, "meta": null}"#;
        assert_eq!(inner(python_dump).as_deref(), Some("x"));
    }

    #[test]
    fn a_list_of_blocks_is_joined_by_blank_lines() {
        let text = r#"[{"type": "text", "text": "{\"a\":1}"}, {"type": "text", "text": "{\"a\":2}"}, {"type":"image","data":"AAAA","mimeType":"image/png"}]"#;
        assert_eq!(inner(text).as_deref(), Some("{\"a\":1}\n\n{\"a\":2}"));
        let n = notes(text);
        assert!(n[0].contains("3 content blocks (2 text, 1 image)"), "{n:?}");
        assert_eq!(
            n[1],
            "Block 3: image, image/png, 4 base64 characters (about 3 bytes), not shown."
        );
    }

    #[test]
    fn a_result_with_structured_content_gives_it() {
        let text = r#"{"content":[{"type":"text","text":"{\"temp\": 21}"}],"structuredContent":{"temp": 21},"isError":false}"#;
        assert_eq!(inner(text).as_deref(), Some(r#"{"temp": 21}"#));
        let n = notes(text);
        assert!(n[0].contains("structuredContent (the payload)"), "{n:?}");
        assert!(n[1].contains("not described"), "{n:?}");
        let failed =
            r#"{"_meta": null, "content": [{"type": "text", "text": "boom"}], "isError": true}"#;
        assert_eq!(inner(failed).as_deref(), Some("boom"));
        assert!(notes(failed)[0].contains("the tool reported an error"));
    }

    #[test]
    fn resources_are_named_and_their_text_kept() {
        let text = r#"[{"type":"resource","resource":{"uri":"file:///a.csv","mimeType":"text/csv","text":"a,b\n1,2\n"}},{"type":"resource","resource":{"uri":"file:///b.bin","blob":"AAAAAAAA"}},{"type":"resource_link","uri":"file:///c.md","name":"c.md","mimeType":"text/markdown"}]"#;
        assert_eq!(inner(text).as_deref(), Some("a,b\n1,2\n"));
        let n = notes(text);
        assert!(
            n[1].starts_with("Block 1: resource file:///a.csv, text/csv, 8 characters"),
            "{n:?}"
        );
        assert!(n[2].contains("a blob of 8 base64 characters"), "{n:?}");
        assert!(
            n[3].contains("resource link \"c.md\" to file:///c.md, text/markdown"),
            "{n:?}"
        );
    }

    #[test]
    fn documents_that_are_not_blocks_stay_what_they_are() {
        for text in [
            r#"{"type":"text","text":"x","id":5}"#,
            r#"{"type":"file","name":"a.txt"}"#,
            r#"[{"name":"a.txt","type":"file"}]"#,
            r#"{"type":"text"}"#,
            r#"{"type":"text","text":5}"#,
            r#"{"type":"image","data":"AA"}"#,
            r#"{"type":"text","text":"x","data":"AA","mimeType":"image/png"}"#,
            r#"{"content":"hello"}"#,
            r#"{"content":[{"type":"text","text":"x"}],"status":"ok"}"#,
            r#"[]"#,
            r#"{"id": 1}"#,
            "content=[] is a sentence",
            "meta=None content=[Foo(x=1)] isError=False",
        ] {
            assert!(unwrap(text).is_none(), "{text}");
        }
    }

    #[test]
    fn a_cut_block_keeps_its_text_as_far_as_it_goes() {
        let text = r#"{"type":"text","text":"[{\"id\": 153, \"name\": \"Samsung"#;
        assert_eq!(
            inner(text).as_deref(),
            Some(r#"[{"id": 153, "name": "Samsung"#)
        );
        assert!(
            notes(text)[0].contains("ends unfinished after 57 characters"),
            "{:?}",
            notes(text)
        );
        let marked = format!("{text}...[truncated]");
        assert_eq!(
            inner(&marked).as_deref(),
            Some(r#"[{"id": 153, "name": "Samsung"#)
        );
        assert!(notes(&marked)[0].contains("then \"...[truncated]\""));
    }

    #[test]
    fn python_strings_are_read_as_repr_writes_them() {
        let whole = python_string;
        assert_eq!(
            whole(r"'it\'s \u00e9\x41\n' tail"),
            Some(("it's éA\n".to_string(), Some(20)))
        );
        assert_eq!(
            whole(r#""say 'hi' é""#),
            Some(("say 'hi' é".to_string(), Some(13)))
        );
        // Cut: the value as far as it goes, inside an escape too.
        assert_eq!(whole("'abc"), Some(("abc".to_string(), None)));
        assert_eq!(whole(r"'ab\u00"), Some(("ab".to_string(), None)));
        assert_eq!(whole("'ab\\"), Some(("ab".to_string(), None)));
        // Kept as written, continued, refused.
        assert_eq!(whole(r"'\q'"), Some((r"\q".to_string(), Some(4))));
        assert_eq!(whole("'a\\\nb'"), Some(("ab".to_string(), Some(6))));
        assert_eq!(whole(r"'\xZZ'"), None);
        assert_eq!(whole("x'"), None);
        assert_eq!(whole(""), None);
    }

    #[test]
    fn python_printed_results() {
        let text = r#"meta=None content=[TextContent(type='text', text="it's\n{\"a\": 1}", annotations=None)] isError=False"#;
        assert_eq!(inner(text).as_deref(), Some("it's\n{\"a\": 1}"));
        assert!(notes(text)[0]
            .contains("the Python SDK's printed CallToolResult with 1 content block (text)"));
        let two = r#"meta=None content=[TextContent(type='text', text='a\xe9\u4e2d', annotations=None, meta=None), ImageContent(type='image', data='AAAA', mimeType='image/png', annotations=None, meta=None)] structuredContent=None isError=True"#;
        assert_eq!(inner(two).as_deref(), Some("a\u{e9}\u{4e2d}"));
        let n = notes(two);
        assert!(
            n[0].contains("2 content blocks (1 text, 1 image); the tool reported an error"),
            "{n:?}"
        );
        // Cut inside the text, as a harness capping at N characters does.
        let cut = r#"meta=None content=[TextContent(type='text', text='{\n  "_meta": null,\n  "content": [\n    {\n      "type": "text",\n      "text": "{\\n  \\"a\\": [1, 2"#;
        assert_eq!(
            inner(cut).as_deref(),
            Some("{\n  \"_meta\": null,\n  \"content\": [\n    {\n      \"type\": \"text\",\n      \"text\": \"{\\n  \\\"a\\\": [1, 2")
        );
        assert!(notes(cut)[0].contains("ends unfinished"));
    }
}
