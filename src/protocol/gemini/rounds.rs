//! The recall rounds of a Gemini request ([`GeminiRounds`]): the model's
//! recall `functionCall`s found in a response (whole, or across a
//! stream's events), the contents appended for the next round, the
//! response the client sees with no recall part in it, usage summed over
//! the rounds, and the hidden exchange for restoration.
//!
//! A model content is appended as the upstream sent its parts, signatures
//! included. A client call the model made in a round that also recalls is
//! answered with an error asking it to call again (removing the part could
//! drop the turn's `thoughtSignature`, which rides on its first call).
//!
//! Streaming: an event without a function call or a finish reason goes to
//! the client at once; the others are held to the round's end, then
//! dropped (a recall round) or sent (recall parts removed, usage summed).

use super::{calls_of, Gemini};
use crate::protocol::RoundsContext;
use crate::recall::sse::Event;
use crate::recall::{CallResult, RecallCall, RecallTool, Restoration, RoundEnd, Rounds, Step};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

/// What a call not run by the proxy is answered with in a recall round.
const NOT_RUN: &str =
    "toolstub: this call was not run because recall calls came with it; call it again if it is still needed";

/// One request's recall rounds on the Gemini API.
pub struct GeminiRounds {
    context: RoundsContext,
    appended: Vec<String>,
    rounds: usize,
    /// The calls of the round that ended in recall, in order: (id, name,
    /// whether the proxy runs it).
    pending: Vec<(Option<String>, String, bool)>,
    /// Usage of the rounds before this one.
    usage: Usage,
    restoration: Option<Restoration>,
    /// Streaming: the parts of this round (raw JSON), every part of every
    /// round the client saw, and the events held back.
    round_parts: Vec<String>,
    seen_parts: Vec<String>,
    held: Vec<(Bytes, Value)>,
    finished: bool,
}

/// Gemini's `usageMetadata` counts, summed over rounds.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    prompt: u64,
    cached: u64,
    candidates: u64,
    thoughts: u64,
}

impl Usage {
    fn of(value: &Value) -> Option<Usage> {
        let u = value.get("usageMetadata")?;
        let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
        Some(Usage {
            prompt: n("promptTokenCount"),
            cached: n("cachedContentTokenCount"),
            candidates: n("candidatesTokenCount"),
            thoughts: n("thoughtsTokenCount"),
        })
    }

    fn add(&mut self, other: Usage) {
        self.prompt = self.prompt.saturating_add(other.prompt);
        self.cached = self.cached.saturating_add(other.cached);
        self.candidates = self.candidates.saturating_add(other.candidates);
        self.thoughts = self.thoughts.saturating_add(other.thoughts);
    }

    /// `value`'s usage with the earlier rounds' added.
    fn apply_to(self, value: &mut Value) {
        let Some(mut total) = Usage::of(value) else {
            return;
        };
        total.add(self);
        if let Some(u) = value
            .get_mut("usageMetadata")
            .and_then(Value::as_object_mut)
        {
            u.insert("promptTokenCount".into(), total.prompt.into());
            if total.cached > 0 {
                u.insert("cachedContentTokenCount".into(), total.cached.into());
            }
            u.insert("candidatesTokenCount".into(), total.candidates.into());
            if total.thoughts > 0 {
                u.insert("thoughtsTokenCount".into(), total.thoughts.into());
            }
            u.insert(
                "totalTokenCount".into(),
                (total.prompt)
                    .saturating_add(total.candidates)
                    .saturating_add(total.thoughts)
                    .into(),
            );
        }
    }
}

/// A response read only for its first candidate's parts, each kept as the
/// upstream wrote it: a model part goes back upstream byte for byte (its
/// `thoughtSignature`, its key order), never re-serialized.
#[derive(Deserialize)]
struct RawResponse<'a> {
    #[serde(borrow, default)]
    candidates: Vec<RawCandidate<'a>>,
}

#[derive(Deserialize)]
struct RawCandidate<'a> {
    #[serde(borrow, default)]
    content: Option<RawContent<'a>>,
}

#[derive(Deserialize)]
struct RawContent<'a> {
    #[serde(borrow, default)]
    parts: Vec<&'a RawValue>,
}

/// The first candidate's parts of a response body, raw (none when it has
/// none or is not a response).
fn raw_parts(body: &str) -> Vec<String> {
    serde_json::from_str::<RawResponse>(body)
        .ok()
        .and_then(|r| r.candidates.into_iter().next())
        .and_then(|c| c.content)
        .map(|c| c.parts.iter().map(|p| p.get().to_string()).collect())
        .unwrap_or_default()
}

/// The first candidate's parts.
fn parts(value: &Value) -> Option<&Vec<Value>> {
    value.pointer("/candidates/0/content/parts")?.as_array()
}

fn call_name(part: &Value) -> Option<&str> {
    part.pointer("/functionCall/name")?.as_str()
}

fn model_content(parts: &[String]) -> String {
    format!("{{\"role\":\"model\",\"parts\":[{}]}}", parts.join(","))
}

impl GeminiRounds {
    pub fn new(context: RoundsContext) -> GeminiRounds {
        GeminiRounds {
            context,
            appended: Vec::new(),
            rounds: 0,
            pending: Vec::new(),
            usage: Usage::default(),
            restoration: None,
            round_parts: Vec::new(),
            seen_parts: Vec::new(),
            held: Vec::new(),
            finished: false,
        }
    }

    fn is_recall(&self, name: &str) -> bool {
        RecallTool::named(&self.context.names, name).is_some()
    }

    /// The recall calls of a model content (raw JSON), noting every call
    /// of the round; empty when it makes none.
    fn recall_round(&mut self, content: &str) -> Vec<RecallCall> {
        let Some(calls) = calls_of(content) else {
            return Vec::new();
        };
        let mut recalls = Vec::new();
        let mut pending = Vec::new();
        for (i, (id, name, args)) in calls.into_iter().enumerate() {
            let tool = RecallTool::named(&self.context.names, &name);
            pending.push((id.clone(), name.clone(), tool.is_some()));
            if let Some(tool) = tool {
                recalls.push(RecallCall {
                    id: id.unwrap_or_else(|| format!("gemini_{}_{i}", self.rounds)),
                    name,
                    tool,
                    arguments: args,
                });
            }
        }
        if !recalls.is_empty() {
            self.pending = pending;
            self.appended.push(content.to_string());
            self.rounds += 1;
        }
        recalls
    }

    /// Keeps the hidden exchange (`last`: the final round's content as the
    /// next turn sends it upstream; `seen`: the answer the client saw).
    fn restore(&mut self, last: &str, seen: &str) {
        if self.rounds == 0 {
            return;
        }
        self.restoration = Restoration::of(
            self.context.last_canon.as_deref(),
            Gemini::GENERATE.canon(seen),
            &self.appended,
            [last.to_string()],
            false,
        );
    }

    /// Raw parts without the recall calls among them.
    fn without_recall(&self, parts: Vec<String>) -> Vec<String> {
        parts
            .into_iter()
            .filter(|p| {
                serde_json::from_str::<Value>(p)
                    .ok()
                    .and_then(|v| call_name(&v).map(|n| self.is_recall(n)))
                    != Some(true)
            })
            .collect()
    }

    /// Whether a response or event calls a recall tool.
    fn calls_recall(&self, value: &Value) -> bool {
        parts(value).is_some_and(|p| {
            p.iter()
                .any(|p| call_name(p).is_some_and(|n| self.is_recall(n)))
        })
    }

    /// `value` without recall call parts.
    fn strip_recall(&self, value: &mut Value) {
        if let Some(parts) = value
            .pointer_mut("/candidates/0/content/parts")
            .and_then(Value::as_array_mut)
        {
            parts.retain(|p| !call_name(p).is_some_and(|n| self.is_recall(n)));
        }
    }

    /// An event the proxy wrote itself. U+2028 and U+2029 escaped: the JS
    /// SDK's line pattern (`.`) stops at them, and serde_json leaves them raw.
    fn sse(value: &Value) -> Bytes {
        let json = value
            .to_string()
            .replace('\u{2028}', "\\u2028")
            .replace('\u{2029}', "\\u2029");
        Bytes::from(format!("data: {json}\r\n\r\n"))
    }
}

impl Rounds for GeminiRounds {
    fn response(&mut self, body: &[u8], recall_allowed: bool) -> Step {
        let Ok(mut value) = serde_json::from_slice::<Value>(body) else {
            return Step::Final(None);
        };
        let usage = Usage::of(&value);
        let raw = std::str::from_utf8(body).map(raw_parts).unwrap_or_default();
        let content = value
            .pointer("/candidates/0/content")
            .map(|_| model_content(&raw));
        if recall_allowed {
            if let Some(content) = &content {
                let calls = self.recall_round(content);
                if !calls.is_empty() {
                    if let Some(u) = usage {
                        self.usage.add(u);
                    }
                    return Step::Recall(calls);
                }
            }
        }
        if self.rounds == 0 && !self.calls_recall(&value) {
            return Step::Final(None);
        }
        self.strip_recall(&mut value);
        if self.rounds > 0 {
            self.usage.apply_to(&mut value);
        }
        if value.pointer("/candidates/0/content").is_some() {
            let last = model_content(&self.without_recall(raw));
            self.restore(&last, &last);
        }
        Step::Final(Some(Bytes::from(value.to_string())))
    }

    fn event(&mut self, event: &Event) -> Vec<Bytes> {
        let Some(value) = event
            .data
            .as_deref()
            .and_then(|d| serde_json::from_str::<Value>(d).ok())
        else {
            return vec![event.raw.clone()];
        };
        let event_parts: Vec<&Value> = parts(&value)
            .map(|p| p.iter().collect())
            .unwrap_or_default();
        self.round_parts
            .extend(event.data.as_deref().map(raw_parts).unwrap_or_default());
        let has_call = event_parts.iter().any(|p| call_name(p).is_some());
        // A blocked prompt's stream ends with `promptFeedback.blockReason`
        // and no candidate.
        let finishes = value.pointer("/candidates/0/finishReason").is_some()
            || value.pointer("/promptFeedback/blockReason").is_some();
        if has_call || finishes || value.get("error").is_some() {
            self.finished |= finishes;
            self.held.push((event.raw.clone(), value));
            return Vec::new();
        }
        self.seen_parts
            .extend(event_parts.iter().map(|p| p.to_string()));
        vec![event.raw.clone()]
    }

    fn end_round(&mut self, recall_allowed: bool) -> (Vec<Bytes>, RoundEnd) {
        let held = std::mem::take(&mut self.held);
        let round = std::mem::take(&mut self.round_parts);
        // A round that failed shows what it held but its recall calls.
        let shown = |held: Vec<(Bytes, Value)>| {
            held.into_iter()
                .map(|(raw, mut value)| {
                    if !self.calls_recall(&value) {
                        return raw;
                    }
                    self.strip_recall(&mut value);
                    Self::sse(&value)
                })
                .collect()
        };
        if held.iter().any(|(_, v)| v.get("error").is_some()) {
            return (shown(held), RoundEnd::UpstreamError);
        }
        if !self.finished {
            return (shown(held), RoundEnd::Truncated);
        }
        let content = model_content(&round);
        if recall_allowed {
            let calls = self.recall_round(&content);
            if !calls.is_empty() {
                // The last count of a round is its total.
                if let Some(u) = held.iter().rev().find_map(|(_, v)| Usage::of(v)) {
                    self.usage.add(u);
                }
                return (Vec::new(), RoundEnd::Recall(calls));
            }
        }
        let mut out = Vec::with_capacity(held.len());
        let last_with_usage = held
            .iter()
            .rposition(|(_, v)| v.get("usageMetadata").is_some());
        for (i, (raw, mut value)) in held.into_iter().enumerate() {
            let recalls = self.calls_recall(&value);
            let summed = self.rounds > 0 && Some(i) == last_with_usage;
            if !recalls && !summed {
                if let Some(p) = parts(&value) {
                    self.seen_parts.extend(p.iter().map(Value::to_string));
                }
                out.push(raw);
                continue;
            }
            self.strip_recall(&mut value);
            if summed {
                self.usage.apply_to(&mut value);
            }
            if let Some(p) = parts(&value) {
                self.seen_parts.extend(p.iter().map(Value::to_string));
            }
            out.push(Self::sse(&value));
        }
        let last = self.without_recall(round);
        let seen = model_content(&self.seen_parts);
        self.restore(&model_content(&last), &seen);
        (out, RoundEnd::Done)
    }

    fn next_round(&mut self) {
        self.finished = false;
        self.held.clear();
        self.round_parts.clear();
    }

    fn finish(&mut self) -> Vec<Bytes> {
        Vec::new()
    }

    fn answered(&mut self, results: Vec<CallResult>) {
        let mut results = results.into_iter();
        let mut parts = Vec::new();
        for (id, name, runs) in std::mem::take(&mut self.pending) {
            let (output, is_error) = if runs {
                match results.next() {
                    Some(r) => (r.text, r.is_error),
                    None => (NOT_RUN.to_string(), true),
                }
            } else {
                (NOT_RUN.to_string(), true)
            };
            let response = if is_error {
                json!({"error": output})
            } else {
                json!({"output": output})
            };
            let mut part = json!({"name": name, "response": response});
            if let Some(id) = id {
                part["id"] = Value::String(id);
            }
            parts.push(json!({"functionResponse": part}).to_string());
        }
        self.appended.push(format!(
            "{{\"role\":\"user\",\"parts\":[{}]}}",
            parts.join(",")
        ));
    }

    fn appended(&self) -> &[String] {
        &self.appended
    }

    fn restoration(&self) -> Option<Restoration> {
        self.restoration.clone()
    }

    fn error_event(&self, message: &str, _code: &str) -> Bytes {
        Self::sse(&json!({"error": {"code": 500, "message": message, "status": "INTERNAL"}}))
    }

    /// Google's error body (`{"error": {"code", "message", "status"}}`) is
    /// what its stream sends as an error event.
    fn upstream_error(&self, answer: &Value) -> Option<Bytes> {
        let error = answer.get("error").filter(|e| e["code"].is_u64())?;
        Some(Self::sse(&json!({ "error": error })))
    }

    /// A bare blank line, sent between whole events: the only keep-alive
    /// both Google SDKs ignore. An SSE comment stalls the JS SDK's parser
    /// (`@google/genai` 1.30, Gemini CLI 0.61's: a pattern anchored at
    /// `data: `) and makes the Python SDK raise; `data: {}` is read by the
    /// Python SDK's chat as an invalid turn, left out of its history.
    fn keepalive(&self) -> Bytes {
        Bytes::from_static(KEEPALIVE)
    }
}

const KEEPALIVE: &[u8] = b"\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    /// The data of the one event in `bytes`.
    fn data(bytes: &[u8]) -> Value {
        let text = std::str::from_utf8(bytes).expect("utf-8");
        serde_json::from_str(text.trim_start_matches("data: ").trim_end()).expect("json")
    }

    #[test]
    fn an_upstreams_error_answer_to_a_round_is_passed_on() {
        let rounds = GeminiRounds::new(RoundsContext::default());
        let google = json!({"error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}});
        let e = crate::recall::upstream_error_event(&rounds, 429, google.to_string().as_bytes());
        assert_eq!(data(&e), google);
        let e = data(&crate::recall::upstream_error_event(
            &rounds,
            502,
            b"<html>bad gateway</html>",
        ));
        assert_eq!(e["error"]["code"], 500);
        let message = e["error"]["message"].as_str().expect("message");
        assert!(
            message.contains("502") && message.contains("bad gateway"),
            "{message}"
        );
    }

    #[test]
    fn a_keepalive_is_a_blank_line_googles_sdks_ignore() {
        let rounds = GeminiRounds::new(RoundsContext::default());
        let k = rounds.keepalive();
        assert!(
            !k.is_empty() && k.iter().all(|b| matches!(b, b'\r' | b'\n')),
            "a blank line only: no comment, no data"
        );
        // An event the proxy writes never carries a raw line separator.
        let sep = GeminiRounds::sse(&json!({"text": "a\u{2028}b\u{2029}c"}));
        let text = std::str::from_utf8(&sep).expect("utf-8");
        assert!(
            !text.contains('\u{2028}') && !text.contains('\u{2029}'),
            "{text}"
        );
        assert!(text.contains("a\\u2028b\\u2029c"), "{text}");
        let e = rounds.error_event("store down", "internal");
        let e: Value = serde_json::from_str(
            std::str::from_utf8(&e)
                .expect("utf-8")
                .trim_start_matches("data: ")
                .trim_end(),
        )
        .expect("json");
        assert_eq!(
            e["error"]["code"], 500,
            "the SDKs throw on an error of 4xx/5xx"
        );
    }
}
