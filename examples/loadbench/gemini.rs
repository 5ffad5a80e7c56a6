//! The Gemini API's requests in the load benchmark (the mock's answers are
//! in `support::gemini`): the small passthrough request, a tool output as
//! a `functionResponse` (`response.output`, a string, as Gemini CLI sends
//! it), the recall round's second round as a client sends it itself, and
//! what a spliced Gemini stream must look like.

use super::{large_output, support};
use bytes::Bytes;

/// The path of a whole request (the model is in the path).
pub const GENERATE_PATH: &str = "/v1beta/models/gemini-mock:generateContent";
/// The path of a streamed request.
pub const STREAM_PATH: &str = "/v1beta/models/gemini-mock:streamGenerateContent?alt=sse";

/// A small request with nothing over budget.
pub const SMALL: &str = r#"{"contents":[{"role":"user","parts":[{"text":"hello"}]}]}"#;

/// A request body: a user text, the model's `functionCall`, the user's
/// `functionResponse` with this output as `response.output`.
pub fn tool_body(ask: &str, output: &str) -> serde_json::Value {
    serde_json::json!({
        "contents": [
            {"role": "user", "parts": [{"text": ask}]},
            {"role": "model", "parts": [{"functionCall": {"name": "list_users", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "list_users", "response": {"output": output}}}]},
        ]
    })
}

/// The 1 MB output (a JSON document) as `functionResponse.response.output`,
/// a JSON string; `salt` makes the content new.
pub fn large_body(salt: u64) -> Bytes {
    Bytes::from(tool_body("list the users", &large_output(salt)).to_string())
}

/// The recall round's second round sent directly: `first` with the
/// model's first round appended as the mock streamed it (its text parts
/// and the signed `tool_result_read` call) and the call's answer, `read`.
pub fn recall_second(first: &serde_json::Value, read: &str) -> serde_json::Value {
    let mut second = first.clone();
    let mut parts = support::gemini::text_parts(support::gemini::RECALL_TEXT_EVENTS);
    parts.push(support::gemini::recall_call_part("tr_none"));
    let model = format!(r#"{{"role":"model","parts":[{}]}}"#, parts.join(","));
    if let Some(contents) = second["contents"].as_array_mut() {
        contents.push(serde_json::from_str(&model).expect("the model content is JSON"));
        contents.push(serde_json::json!({"role": "user", "parts": [
            {"functionResponse": {"name": "tool_result_read", "response": {"output": read}}}]}));
    }
    second
}

/// A Gemini stream spliced from two rounds is one answer as the SDKs read
/// it: every event `data: <a response object>` ended by a blank line
/// (CRLF), no error, exactly one `finishReason`, on the last event.
pub fn check_stream(name: &str, text: &str) {
    let events: Vec<&str> = text
        .split("\r\n\r\n")
        .map(|e| e.trim_matches(['\r', '\n']))
        .filter(|e| !e.is_empty())
        .collect();
    let values: Vec<serde_json::Value> = events
        .iter()
        .map(|event| {
            let data = event
                .strip_prefix("data: ")
                .unwrap_or_else(|| panic!("{name}: an event that is not `data: `:\n{text}"));
            serde_json::from_str(data)
                .unwrap_or_else(|e| panic!("{name}: an event's data is not JSON ({e}):\n{text}"))
        })
        .collect();
    let finishing: Vec<usize> = values
        .iter()
        .enumerate()
        .filter(|(_, v)| v.pointer("/candidates/0/finishReason").is_some())
        .map(|(i, _)| i)
        .collect();
    assert!(
        values
            .iter()
            .all(|v| v.get("error").is_none() && v.get("candidates").is_some())
            && finishing == [values.len().saturating_sub(1)],
        "{name}: not one answer ending with its only finishReason:\n{text}"
    );
}
