//! A round's content blocks, whole or streamed, as the recall rounds need
//! them: which are recall calls, which are the client's tool calls, and the
//! JSON each goes back upstream as.
//!
//! Streamed blocks are rebuilt from their `content_block_start` and deltas
//! the way the Anthropic SDKs accumulate them (text, thinking and signature
//! appended, tool input parsed from its JSON pieces, citations collected),
//! so a thinking block goes back with its signature exactly as it came.

use crate::protocol::json_edit::set_members;
use crate::protocol::json_string;
use crate::recall::{RecallCall, RecallTool};
use crate::stub::RecallToolNames;
use serde_json::{Map, Value};

/// What a block is to the recall rounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum BlockKind {
    /// A `tool_use` of a recall tool: the proxy answers it.
    Recall(RecallCall),
    /// A `tool_use` of the client's own tools.
    ClientTool,
    /// Anything else (text, thinking, server tools, unknown types): shown
    /// to the client and sent back as it came.
    Other,
}

/// One block of a round: its kind and its JSON text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct RoundBlock {
    pub kind: BlockKind,
    pub json: String,
}

/// The kind of a block given its `type`, `id`, `name` and `input` (raw JSON).
pub(super) fn kind_of(
    names: &RecallToolNames,
    kind: &str,
    id: Option<&str>,
    name: Option<&str>,
    input: Option<&str>,
) -> BlockKind {
    if kind != "tool_use" {
        return BlockKind::Other;
    }
    let recall = name.and_then(|n| RecallTool::named(names, n).map(|tool| (n, tool)));
    match (recall, id) {
        (Some((name, tool)), Some(id)) => BlockKind::Recall(RecallCall {
            id: id.to_string(),
            name: name.to_string(),
            tool,
            arguments: input
                .filter(|i| !i.trim().is_empty())
                .unwrap_or("{}")
                .to_string(),
        }),
        _ => BlockKind::ClientTool,
    }
}

/// A streamed block being rebuilt: the `content_block` of its
/// `content_block_start` as it came, and what the deltas add, spliced into
/// it at the end so every key keeps its place (and a tool input its own key
/// order, as the model wrote it).
#[derive(Debug)]
pub(super) struct Rebuilt {
    /// The start block's JSON text.
    raw: String,
    /// The start block, read (for its type, id and name).
    block: Map<String, Value>,
    /// Text appended to string members (`text`, `thinking`, `signature`), in
    /// the order first seen.
    appended: Vec<(&'static str, String)>,
    /// Concatenated `input_json_delta` pieces.
    partial_json: String,
    /// `citations_delta` citations, as they came.
    citations: Vec<String>,
}

impl Rebuilt {
    /// `raw` is the `content_block` value of a `content_block_start`.
    pub fn start(raw: &str) -> Rebuilt {
        let (raw, block) = match serde_json::from_str(raw) {
            Ok(Value::Object(map)) => (raw.to_string(), map),
            _ => ("{}".to_string(), Map::new()),
        };
        Rebuilt {
            raw,
            block,
            appended: Vec::new(),
            partial_json: String::new(),
            citations: Vec::new(),
        }
    }

    pub fn kind_name(&self) -> &str {
        self.field("type").unwrap_or("")
    }

    fn field(&self, key: &str) -> Option<&str> {
        self.block.get(key).and_then(Value::as_str)
    }

    fn append(&mut self, key: &'static str, piece: Option<&Value>) {
        let Some(piece) = piece.and_then(Value::as_str) else {
            return;
        };
        match self.appended.iter_mut().find(|(k, _)| *k == key) {
            Some((_, text)) => text.push_str(piece),
            None => self.appended.push((key, piece.to_string())),
        }
    }

    /// Applies one `delta` object of a `content_block_delta`. Deltas of a
    /// type not known here are ignored (the block goes back without them).
    pub fn apply(&mut self, delta: &Map<String, Value>) {
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => self.append("text", delta.get("text")),
            Some("thinking_delta") => self.append("thinking", delta.get("thinking")),
            Some("signature_delta") => self.append("signature", delta.get("signature")),
            Some("input_json_delta") => {
                if let Some(piece) = delta.get("partial_json").and_then(Value::as_str) {
                    self.partial_json.push_str(piece);
                }
            }
            Some("citations_delta") => {
                if let Some(citation) = delta.get("citation") {
                    self.citations.push(citation.to_string());
                }
            }
            _ => {}
        }
    }

    /// The finished block and its kind.
    pub fn finish(self, names: &RecallToolNames) -> RoundBlock {
        let mut members: Vec<(&str, String)> = Vec::new();
        for (key, piece) in &self.appended {
            let start = self.field(key).unwrap_or("");
            members.push((key, json_string(&format!("{start}{piece}"))));
        }
        // The tool input as the model streamed it; one that does not parse
        // as an object goes back empty (the API refuses anything else).
        let streamed_input = Some(self.partial_json.trim())
            .filter(|i| !i.is_empty())
            .map(|i| match serde_json::from_str::<Value>(i) {
                Ok(Value::Object(_)) => i.to_string(),
                _ => "{}".to_string(),
            });
        if let Some(input) = &streamed_input {
            members.push(("input", input.clone()));
        }
        if !self.citations.is_empty() {
            let mut list: Vec<String> = match self.block.get("citations") {
                Some(Value::Array(existing)) => existing.iter().map(Value::to_string).collect(),
                _ => Vec::new(),
            };
            list.extend(self.citations.iter().cloned());
            members.push(("citations", format!("[{}]", list.join(","))));
        }
        let json = set_members(&self.raw, &members);
        let input_text = streamed_input.or_else(|| self.block.get("input").map(Value::to_string));
        let kind = kind_of(
            names,
            self.kind_name(),
            self.field("id"),
            self.field("name"),
            input_text.as_deref(),
        );
        RoundBlock {
            kind,
            json: json.unwrap_or(self.raw),
        }
    }
}

/// `{"role":"assistant","content":[...]}` of some blocks.
pub(super) fn assistant_message<'a>(blocks: impl Iterator<Item = &'a RoundBlock>) -> String {
    let mut out = String::from("{\"role\":\"assistant\",\"content\":[");
    for (i, block) in blocks.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&block.json);
    }
    out.push_str("]}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("an object"),
        }
    }

    fn start(raw: &str) -> Rebuilt {
        Rebuilt::start(raw)
    }

    #[test]
    fn rebuilds_text_thinking_and_tool_input_as_the_sdk_does() {
        let names = RecallToolNames::default();
        let mut thinking = start(r#"{"type":"thinking","thinking":"","signature":""}"#);
        thinking.apply(&map(json!({"type":"thinking_delta","thinking":"Let me "})));
        thinking.apply(&map(json!({"type":"thinking_delta","thinking":"think."})));
        thinking.apply(&map(
            json!({"type":"signature_delta","signature":"EqQBCg=="}),
        ));
        let block = thinking.finish(&names);
        assert_eq!(block.kind, BlockKind::Other);
        assert_eq!(
            block.json, r#"{"type":"thinking","thinking":"Let me think.","signature":"EqQBCg=="}"#,
            "every key in its place"
        );

        let mut call =
            start(r#"{"type":"tool_use","id":"toolu_1","name":"tool_result_read","input":{}}"#);
        for piece in ["", "{\"ref\": \"tr_", "x\", \"limit\": 5}"] {
            call.apply(&map(
                json!({"type":"input_json_delta","partial_json":piece}),
            ));
        }
        let block = call.finish(&names);
        let BlockKind::Recall(recall) = &block.kind else {
            panic!("a recall call: {block:?}")
        };
        assert_eq!(recall.id, "toolu_1");
        assert_eq!(recall.arguments, r#"{"ref": "tr_x", "limit": 5}"#);
        assert_eq!(
            block.json,
            r#"{"type":"tool_use","id":"toolu_1","name":"tool_result_read","input":{"ref": "tr_x", "limit": 5}}"#,
            "the input as the model wrote it"
        );

        let client =
            start(r#"{"type":"tool_use","id":"toolu_2","name":"Read","input":{}}"#).finish(&names);
        assert_eq!(client.kind, BlockKind::ClientTool);
        assert_eq!(
            client.json,
            r#"{"type":"tool_use","id":"toolu_2","name":"Read","input":{}}"#
        );
        let mut broken = start(r#"{"type":"tool_use","id":"t","name":"Read","input":{}}"#);
        broken.apply(&map(
            json!({"type":"input_json_delta","partial_json":"{\"a\": "}),
        ));
        let v: Value = serde_json::from_str(&broken.finish(&names).json).expect("json");
        assert_eq!(v["input"], json!({}), "an input cut short goes back empty");
    }

    #[test]
    fn citations_and_unknown_deltas() {
        let mut text = start(r#"{"type":"text","text":""}"#);
        text.apply(&map(json!({"type":"text_delta","text":"a"})));
        text.apply(&map(
            json!({"type":"citations_delta","citation":{"cited_text":"c"}}),
        ));
        text.apply(&map(json!({"type":"future_delta","x":1})));
        assert_eq!(
            text.finish(&RecallToolNames::default()).json,
            r#"{"type":"text","text":"a","citations":[{"cited_text":"c"}]}"#
        );
        let empty = start("{}").finish(&RecallToolNames::default());
        assert_eq!(empty.json, "{}");
        let mut added = start(r#"{ }"#);
        added.apply(&map(json!({"type":"text_delta","text":"x"})));
        assert_eq!(
            added.finish(&RecallToolNames::default()).json,
            r#"{ "text":"x"}"#
        );
    }
}
