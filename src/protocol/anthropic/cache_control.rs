//! Prompt-cache breakpoints (`cache_control` markers) of an Anthropic
//! request: where the aging rule adds one of toolstub's own.
//!
//! The API takes at most [`MAX_BREAKPOINTS`] markers, on tool definitions,
//! system blocks and message content blocks (and the blocks of a
//! `tool_result`'s content), and refuses a 1-hour entry after a 5-minute
//! one in prompt order (tools, system, messages). Markers are found by the
//! request's structure, never by text, so a tool parameter or a string
//! that happens to be named `cache_control` is not one.

use super::{read_block, read_message, span_in};
use crate::protocol::json_scan::Scanner;
use std::ops::Range;

/// An hour, in milliseconds, when any of the request's breakpoints asks
/// for a 1-hour entry (`"ttl": "1h"`); `None` otherwise (the 5-minute
/// default).
pub fn longest_lifetime_ms(body: &str) -> Option<u64> {
    // Most requests ask for no lifetime at all: a byte search (a few µs a
    // megabyte) spares them the walk of the request's structure (about
    // 130 µs a megabyte).
    memchr::memmem::find(body.as_bytes(), b"\"ttl\"")?;
    markers(body)?
        .iter()
        .any(|m| m.lifetime == Some(Lifetime::OneHour))
        .then_some(3_600_000)
}

/// The most `cache_control` breakpoints a request may carry.
pub const MAX_BREAKPOINTS: usize = 4;

/// How long an entry lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Lifetime {
    FiveMinutes,
    OneHour,
}

/// One marker: the body offset of the block (or tool) it is on, whether
/// that is in `messages` (tools and system come first in prompt order,
/// whatever the key order), and its lifetime (`None`: a value toolstub
/// does not know).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Marker {
    at: usize,
    in_messages: bool,
    lifetime: Option<Lifetime>,
}

/// The request's markers in prompt order: tools, then system, then
/// messages; `None` when the body is not a JSON object.
fn markers(body: &str) -> Option<Vec<Marker>> {
    let (mut tools, mut system, mut messages) = (Vec::new(), Vec::new(), Vec::new());
    let mut s = Scanner::new(body);
    s.object(|s, key| match key {
        "tools" => blocks(s, &mut tools, false),
        "system" => blocks(s, &mut system, false),
        "messages" => {
            if s.peek() == Some(b'[') {
                s.array(|s| {
                    if s.peek() == Some(b'{') {
                        s.object(|s, key| match key {
                            "content" => blocks(s, &mut messages, true),
                            _ => s.value().map(drop),
                        })
                    } else {
                        s.value().map(drop)
                    }
                })
            } else {
                s.value().map(drop)
            }
        }
        _ => s.value().map(drop),
    })?;
    s.finish()?;
    messages.iter_mut().for_each(|m| m.in_messages = true);
    tools.extend(system);
    tools.extend(messages);
    Some(tools)
}

/// The markers of a value that may be an array of blocks (or tools); with
/// `nested`, also those of each block's own `content` array (a
/// `tool_result`'s).
fn blocks(s: &mut Scanner<'_>, out: &mut Vec<Marker>, nested: bool) -> Option<()> {
    if s.peek() != Some(b'[') {
        return s.value().map(drop);
    }
    s.array(|s| {
        let start = s.position()?;
        if s.peek() != Some(b'{') {
            return s.value().map(drop);
        }
        s.object(|s, key| match key {
            "cache_control" => {
                let value = s.value()?;
                out.push(Marker {
                    at: start,
                    in_messages: false,
                    lifetime: lifetime(value),
                });
                Some(())
            }
            "content" if nested => blocks(s, out, false),
            _ => s.value().map(drop),
        })
    })
}

/// The lifetime a marker's value asks for: `{"type":"ephemeral"}` with an
/// optional `ttl` of `"5m"` or `"1h"`, nothing else.
fn lifetime(value: &str) -> Option<Lifetime> {
    let (mut kind, mut ttl) = (None, None);
    let mut s = Scanner::new(value);
    s.object(|s, key| {
        let v = s.value()?;
        match key {
            "type" if kind.is_none() => kind = Some(v),
            "ttl" if ttl.is_none() => ttl = Some(v),
            _ => return None,
        }
        Some(())
    })?;
    s.finish()?;
    if kind != Some("\"ephemeral\"") {
        return None;
    }
    match ttl {
        None | Some("\"5m\"") => Some(Lifetime::FiveMinutes),
        Some("\"1h\"") => Some(Lifetime::OneHour),
        Some(_) => None,
    }
}

/// A `cache_control` marker on the last content block of `message` (a span
/// of `body`), as an insertion, unless: the request carries
/// [`MAX_BREAKPOINTS`] already, or a marker whose value toolstub does not
/// know; the message's content is not an array of blocks; its last block
/// is thinking (which takes none) or already marked; or no lifetime fits
/// in prompt order. Its lifetime is an hour when a marker after it asks
/// for an hour (a 5-minute entry may not come before a 1-hour one), five
/// minutes otherwise.
pub fn breakpoint(body: &str, message: Range<usize>) -> Option<(Range<usize>, String)> {
    let markers = markers(body)?;
    if markers.len() >= MAX_BREAKPOINTS || markers.iter().any(|m| m.lifetime.is_none()) {
        return None;
    }
    let mut scanner = Scanner::new(body.get(message.clone())?);
    let content = read_message(&mut scanner)?.content?;
    let base = span_in(body, content)?.start;
    let mut scanner = Scanner::new(content);
    let mut last = None;
    scanner.array(|s| {
        let start = s.position()?;
        let block = read_block(s)?;
        last = Some((start..s.offset(), block));
        Some(())
    })?;
    let (span, block) = last?;
    let at = base + span.start;
    if matches!(
        block.kind.as_deref(),
        Some("thinking" | "redacted_thinking")
    ) || markers.iter().any(|m| m.at == at)
    {
        return None;
    }
    // Only a later block of the messages comes after this one.
    let after = |m: &&Marker| m.in_messages && m.at > at;
    let lifetime = if markers
        .iter()
        .filter(after)
        .any(|m| m.lifetime == Some(Lifetime::OneHour))
    {
        Lifetime::OneHour
    } else {
        Lifetime::FiveMinutes
    };
    let before_shorter = markers
        .iter()
        .filter(|m| !after(m))
        .any(|m| m.lifetime < Some(lifetime));
    if before_shorter {
        return None;
    }
    let value = match lifetime {
        Lifetime::FiveMinutes => r#"{"type":"ephemeral"}"#,
        Lifetime::OneHour => r#"{"type":"ephemeral","ttl":"1h"}"#,
    };
    let raw = &content[span.clone()];
    let close = base + span.end - 1;
    let empty = raw[..raw.len() - 1].trim_end().ends_with('{');
    let separator = if empty { "" } else { "," };
    Some((
        close..close,
        format!("{separator}\"cache_control\":{value}"),
    ))
}

/// How many `cache_control` markers the request carries, by its
/// structure; `None` when it is not a JSON object.
pub fn count(body: &str) -> Option<usize> {
    markers(body).map(|m| m.len())
}

/// `value` without its `cache_control` markers, at any depth: what the
/// provider's cache compares (a marker moved from one block to another
/// does not change the prefix it keys).
pub fn strip_markers(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            map.remove("cache_control");
            map.values_mut().for_each(strip_markers);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_markers),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_hour_long_breakpoint_makes_the_conversation_cached_an_hour() {
        let hour = r#","cache_control":{"type":"ephemeral","ttl":"1h"}"#;
        let five = r#","cache_control":{"type":"ephemeral"}"#;
        assert_eq!(longest_lifetime_ms(&body(hour, "", five)), Some(3_600_000));
        assert_eq!(longest_lifetime_ms(&body(five, "", five)), None);
        // Spelled in a tool output's text, it is no breakpoint.
        let spelled = r#""x","ttl\":\"1h\""#;
        let text = body("", "", "").replace(r#""x""#, spelled);
        assert_eq!(longest_lifetime_ms(&text), None);
    }

    /// A Claude Code-ordered body (model, messages, system, tools), the
    /// assistant message to mark second of `messages`.
    fn body(system_marker: &str, tool: &str, newest_marker: &str) -> String {
        format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"go"}},{{"role":"assistant","content":[{{"type":"text","text":"a"}},{{"type":"tool_use","id":"t1","name":"Read","input":{{}}}}]}},{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t1","content":"x"{newest_marker}}}]}}],"system":[{{"type":"text","text":"s"{system_marker}}}],"tools":[{tool}]}}"#
        )
    }

    fn assistant(body: &str) -> Range<usize> {
        let at = body.find(r#"{"role":"assistant""#).unwrap_or_default();
        let end = body[at..].find("]}").map_or(at, |e| at + e + 2);
        at..end
    }

    fn marked(body: &str) -> Option<String> {
        let (range, text) = breakpoint(body, assistant(body))?;
        let mut out = body.to_string();
        out.replace_range(range, &text);
        Some(out)
    }

    const READ: &str = r#"{"name":"Read","input_schema":{"type":"object"}}"#;
    const FIVE: &str = r#","cache_control":{"type":"ephemeral"}"#;
    const HOUR: &str = r#","cache_control":{"type":"ephemeral","ttl":"1h"}"#;

    #[test]
    fn the_marker_goes_on_the_last_block_and_keeps_json_valid() {
        let b = body(FIVE, READ, FIVE);
        let out = marked(&b).unwrap_or_default();
        assert!(out.contains(
            r#"{"type":"tool_use","id":"t1","name":"Read","input":{},"cache_control":{"type":"ephemeral"}}"#
        ));
        assert!(serde_json::from_str::<serde_json::Value>(&out).is_ok());
        assert_eq!(count(&out), Some(3));
    }

    #[test]
    fn a_tool_parameter_named_cache_control_is_no_marker_and_never_copied() {
        // R1: a schema object with nested objects, after `messages`.
        let nested = r#"{"name":"Fetch","input_schema":{"type":"object","properties":{"cache_control":{"type":"object","properties":{"max_age":{"type":"integer"}}}}}}"#;
        let b = body(FIVE, nested, FIVE);
        assert_eq!(count(&b), Some(2));
        let out = marked(&b).unwrap_or_default();
        assert!(
            serde_json::from_str::<serde_json::Value>(&out).is_ok(),
            "{out}"
        );
        assert!(out.contains(r#""input":{},"cache_control":{"type":"ephemeral"}}"#));
        // R2, R3: a string schema, an enum naming it; the newest block's
        // 1-hour marker decides ours.
        let string = r#"{"name":"H","input_schema":{"properties":{"cache_control":{"type":"string","description":"Cache-Control header"}},"required":["cache_control"]}}"#;
        let b = body(HOUR, string, HOUR);
        let out = marked(&b).unwrap_or_default();
        assert!(
            out.contains(r#""input":{},"cache_control":{"type":"ephemeral","ttl":"1h"}}"#),
            "{out}"
        );
    }

    #[test]
    fn lifetimes_stay_in_prompt_order() {
        // An hour after ours: ours lives an hour.
        let out = marked(&body("", READ, HOUR)).unwrap_or_default();
        assert!(out.contains(r#""input":{},"cache_control":{"type":"ephemeral","ttl":"1h"}}"#));
        // Five minutes after ours, an hour before (the system, serialized
        // after the messages): five minutes fits.
        let out = marked(&body(HOUR, READ, FIVE)).unwrap_or_default();
        assert!(out.contains(r#""input":{},"cache_control":{"type":"ephemeral"}}"#));
        // R4: five minutes before ours (the system), an hour after: none fits.
        assert_eq!(marked(&body(FIVE, READ, HOUR)), None);
        // A marker toolstub does not know: none added.
        let odd = r#","cache_control":{"type":"ephemeral","ttl":"2h"}"#;
        assert_eq!(marked(&body(odd, READ, "")), None);
    }

    #[test]
    fn four_markers_by_structure_leave_no_room() {
        // R5: escaped keys are markers too (the API decodes them).
        let escaped = r#","cache_contro\u006c":{"type":"ephemeral"}"#;
        let tools = format!(
            r#"{{"name":"A","input_schema":{{}}{escaped}}},{{"name":"B","input_schema":{{}}{escaped}}}"#
        );
        let b = body(escaped, &tools, FIVE);
        assert_eq!(count(&b), Some(4));
        assert_eq!(marked(&b), None);
        // Three: room for ours.
        let b = body("", &tools, FIVE);
        assert_eq!(count(&b), Some(3));
        assert!(marked(&b).is_some());
    }

    #[test]
    fn thinking_a_marked_block_or_string_content_take_none() {
        let b = body("", READ, "").replace(
            r#"{"type":"tool_use","id":"t1","name":"Read","input":{}}"#,
            r#"{"type":"tool_use","id":"t1","name":"Read","input":{}},{"type":"thinking","thinking":"t","signature":"s"}"#,
        );
        assert_eq!(marked(&b), None);
        let b = body("", READ, "").replace(r#""input":{}}"#, &format!(r#""input":{{}}{FIVE}}}"#));
        assert_eq!(count(&b), Some(1));
        assert_eq!(marked(&b), None);
        let b = r#"{"messages":[{"role":"assistant","content":"plain"}]}"#;
        assert_eq!(breakpoint(b, 13..b.len() - 2), None);
    }
}
