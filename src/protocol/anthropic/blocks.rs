//! A round's content blocks, whole or streamed, as the recall rounds need
//! them: which are recall calls, which are the client's tool calls, and the
//! JSON each goes back upstream as.
//!
//! Streamed blocks are rebuilt from their `content_block_start` and deltas
//! the way the Anthropic SDKs accumulate them (text, thinking and signature
//! appended, tool input parsed from its JSON pieces, citations collected),
//! so a thinking block goes back with its signature exactly as it came.

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

/// A streamed block being rebuilt.
#[derive(Debug)]
pub(super) struct Rebuilt {
    /// The `content_block` of `content_block_start`.
    block: Map<String, Value>,
    /// Concatenated `input_json_delta` pieces.
    partial_json: String,
}

impl Rebuilt {
    pub fn start(block: Map<String, Value>) -> Rebuilt {
        Rebuilt {
            block,
            partial_json: String::new(),
        }
    }

    pub fn kind_name(&self) -> &str {
        self.block.get("type").and_then(Value::as_str).unwrap_or("")
    }

    fn field(&self, key: &str) -> Option<&str> {
        self.block.get(key).and_then(Value::as_str)
    }

    /// Applies one `delta` object of a `content_block_delta`. Deltas of a
    /// type not known here are ignored (the block goes back without them).
    pub fn apply(&mut self, delta: &Map<String, Value>) {
        let append = |block: &mut Map<String, Value>, key: &str, piece: Option<&Value>| {
            let Some(piece) = piece.and_then(Value::as_str) else {
                return;
            };
            match block.get_mut(key) {
                Some(Value::String(s)) => s.push_str(piece),
                _ => {
                    block.insert(key.to_string(), Value::String(piece.to_string()));
                }
            }
        };
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => append(&mut self.block, "text", delta.get("text")),
            Some("thinking_delta") => append(&mut self.block, "thinking", delta.get("thinking")),
            Some("signature_delta") => {
                append(&mut self.block, "signature", delta.get("signature"));
            }
            Some("input_json_delta") => {
                if let Some(piece) = delta.get("partial_json").and_then(Value::as_str) {
                    self.partial_json.push_str(piece);
                }
            }
            Some("citations_delta") => {
                if let Some(citation) = delta.get("citation") {
                    match self.block.get_mut("citations") {
                        Some(Value::Array(list)) => list.push(citation.clone()),
                        _ => {
                            self.block.insert(
                                "citations".to_string(),
                                Value::Array(vec![citation.clone()]),
                            );
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// The finished block and its kind.
    pub fn finish(mut self, names: &RecallToolNames) -> RoundBlock {
        let input = if self.partial_json.trim().is_empty() {
            None
        } else {
            // A tool input that does not parse goes back as an empty input
            // (the API would refuse a string there).
            let parsed = serde_json::from_str::<Value>(&self.partial_json)
                .unwrap_or_else(|_| Value::Object(Map::new()));
            Some(parsed)
        };
        if let Some(input) = &input {
            self.block.insert("input".to_string(), input.clone());
        }
        let input_text = self.block.get("input").map(Value::to_string);
        let kind = kind_of(
            names,
            self.kind_name(),
            self.field("id"),
            self.field("name"),
            input_text.as_deref(),
        );
        RoundBlock {
            kind,
            json: Value::Object(self.block).to_string(),
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

    #[test]
    fn rebuilds_text_thinking_and_tool_input_as_the_sdk_does() {
        let names = RecallToolNames::default();
        let mut thinking = Rebuilt::start(map(json!({"type":"thinking","thinking":"","signature":""})));
        thinking.apply(&map(json!({"type":"thinking_delta","thinking":"Let me "})));
        thinking.apply(&map(json!({"type":"thinking_delta","thinking":"think."})));
        thinking.apply(&map(json!({"type":"signature_delta","signature":"EqQBCg=="})));
        let block = thinking.finish(&names);
        assert_eq!(block.kind, BlockKind::Other);
        let v: Value = serde_json::from_str(&block.json).expect("json");
        assert_eq!(v, json!({"type":"thinking","thinking":"Let me think.","signature":"EqQBCg=="}));

        let mut call = Rebuilt::start(map(
            json!({"type":"tool_use","id":"toolu_1","name":"tool_result_read","input":{}}),
        ));
        for piece in ["", "{\"ref\": \"tr_", "x\", \"limit\": 5}"] {
            call.apply(&map(json!({"type":"input_json_delta","partial_json":piece})));
        }
        let block = call.finish(&names);
        let BlockKind::Recall(recall) = &block.kind else {
            panic!("a recall call: {block:?}")
        };
        assert_eq!(recall.id, "toolu_1");
        let args: Value = serde_json::from_str(&recall.arguments).expect("args");
        assert_eq!(args, json!({"ref":"tr_x","limit":5}));

        let client = Rebuilt::start(map(
            json!({"type":"tool_use","id":"toolu_2","name":"Read","input":{}}),
        ))
        .finish(&names);
        assert_eq!(client.kind, BlockKind::ClientTool);
        let v: Value = serde_json::from_str(&client.json).expect("json");
        assert_eq!(v["input"], json!({}));
    }

    #[test]
    fn citations_and_unknown_deltas() {
        let mut text = Rebuilt::start(map(json!({"type":"text","text":""})));
        text.apply(&map(json!({"type":"text_delta","text":"a"})));
        text.apply(&map(json!({"type":"citations_delta","citation":{"cited_text":"c"}})));
        text.apply(&map(json!({"type":"future_delta","x":1})));
        let v: Value =
            serde_json::from_str(&text.finish(&RecallToolNames::default()).json).expect("json");
        assert_eq!(v, json!({"type":"text","text":"a","citations":[{"cited_text":"c"}]}));
    }
}
