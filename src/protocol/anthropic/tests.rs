//! The Anthropic request adapter against hand-written bodies in Claude
//! Code's and the SDKs' shapes.

use super::*;
use crate::protocol::ContentShape;
use crate::rewrite::{rewrite, Mode, Outcome, Policy};
use serde_json::json;

fn parse(body: &str) -> ParsedRequest<'_> {
    AnthropicMessages.parse(body).expect("understood")
}

#[test]
fn finds_tool_results_their_names_groups_and_spans() {
    let body = r#"{"model":"claude","max_tokens":10,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[
        {"role":"user","content":"read two files"},
        {"role":"assistant","content":[
            {"type":"thinking","thinking":"hm","signature":"sig"},
            {"type":"tool_use","id":"toolu_1","name":"Read","input":{"file_path":"/a"}},
            {"type":"tool_use","id":"toolu_2","name":"Bash","input":{"command":"ls"}}]},
        {"role":"user","content":[
            {"type":"tool_result","tool_use_id":"toolu_1","content":"one\ntwo"},
            {"type":"tool_result","tool_use_id":"toolu_2","is_error":true,"content":[{"type":"text","text":"a"},{"type":"image","source":{}},{"type":"text","text":"b","cache_control":{"type":"ephemeral","ttl":"1h"}}]},
            {"type":"text","text":"go on"}]},
        {"role":"assistant","content":[{"type":"tool_use","id":"toolu_3","name":"Grep","input":{}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_3","content":"x"}]}
    ],"tools":[{"name":"Read","input_schema":{}},{"type":"web_search_20250305","name":"web_search"}],"stream":true}"#;
    let p = parse(body);
    assert!(p.streaming);
    assert_eq!(p.client_tool_names, ["Read", "web_search"]);
    let [a, b, c] = &p.outputs[..] else {
        panic!("three outputs: {:?}", p.outputs)
    };
    assert_eq!((a.group, b.group, c.group), (1, 1, 2));
    assert_eq!(a.tool_name.as_deref(), Some("Read"));
    assert_eq!(b.tool_name.as_deref(), Some("Bash"));
    assert_eq!(c.tool_name.as_deref(), Some("Grep"));
    assert_eq!(a.tool_call_id.as_deref(), Some("toolu_1"));
    assert_eq!(a.content.decode().as_deref(), Some("one\ntwo"));
    assert_eq!(&body[a.content_span.clone()], "\"one\\ntwo\"");
    assert!(!a.is_error && b.is_error);
    // Text blocks joined in order; the stub goes into the last one.
    assert_eq!(b.content.decode().as_deref(), Some("ab"));
    // Known by its raw bytes (a repeated turn finds it in the memo without
    // decoding its parts).
    assert!(std::str::from_utf8(b.content.identity())
        .expect("utf-8")
        .starts_with(r#"[{"type":"text","text":"a"}"#));
    assert_eq!(&body[b.content_span.clone()], "\"b\"");
    assert_eq!(b.shape, ContentShape::String);
    assert_eq!(b.removed.len(), 1);
    assert_eq!(
        &body[b.removed[0].clone()],
        r#"{"type":"text","text":"a"},"#
    );
    assert_eq!(p.messages.len(), 5);
    assert_eq!(
        p.messages.iter().map(|m| m.assistant).collect::<Vec<_>>(),
        [false, true, false, true, false]
    );
    assert!(body[p.messages[1].span.clone()].starts_with("{\"role\":\"assistant\""));
    assert!(body[p.messages[4].span.clone()].ends_with("}]}"));
    assert!(p.opening.starts_with("user\u{0}\"read two files\""));
}

#[test]
fn unknown_shapes_are_not_understood() {
    for body in [
        "not json",
        "{}",
        r#"{"messages":{}}"#,
        r#"{"messages":[1]}"#,
        r#"{"messages":[],"tools":{}}"#,
        r#"{"messages":[{"role":"user","content":[1]}]}"#,
        r#"{"messages":[{"role":"user","content":[["tool_result"]]}]}"#,
        r#"{"messages":[],"messages":[]}"#,
    ] {
        assert!(AnthropicMessages.parse(body).is_none(), "{body}");
    }
    // Blocks that are not tool results, and results without text, are skipped.
    let p = parse(
        r#"{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{}}]},{"type":"tool_result","tool_use_id":"u"},{"type":"document"}]}]}"#,
    );
    assert!(p.outputs.is_empty());
}

fn claude_code_body(output: &str, extra_block: &str) -> String {
    let result = json!({"type":"tool_result","tool_use_id":"toolu_01A","content":output,"cache_control":{"type":"ephemeral","ttl":"1h"}});
    format!(
        r#"{{"model":"claude-sonnet","max_tokens":32000,"thinking":{{"type":"enabled","budget_tokens":31999}},"system":[{{"type":"text","text":"You are Claude Code.","cache_control":{{"type":"ephemeral"}}}}],"messages":[{{"role":"user","content":[{{"type":"text","text":"read it"}}]}},{{"role":"system","content":"be brief"}},{{"role":"assistant","content":[{{"type":"thinking","thinking":"I will read.","signature":"EqQBCkYIBxgC"}},{{"type":"redacted_thinking","data":"opaque=="}},{{"type":"tool_use","id":"toolu_01A","name":"Read","input":{{"file_path":"/tmp/x.json"}}}}]}},{{"role":"user","content":[{result}{extra_block}]}}],"tools":[{{"name":"Read","description":"Reads","input_schema":{{"type":"object","properties":{{"file_path":{{"type":"string"}}}}}}}}],"metadata":{{"user_id":"u"}},"context_management":{{"edits":[{{"type":"clear_thinking_20251015","keep":"all"}}]}},"stream":true}}"#
    )
}

#[test]
fn a_rewrite_changes_only_the_text_and_appends_the_recall_tools() {
    let output = format!("{{\"rows\":[{}]}}", vec!["1"; 15_000].join(","));
    let body = claude_code_body(&output, r#",{"type":"mystery_block","x":[1,2]}"#);
    let Outcome::Rewritten(r) = rewrite(
        body.as_bytes(),
        &Policy::default(),
        &AnthropicMessages,
        Mode::WithRefs,
    ) else {
        panic!("rewritten")
    };
    assert_eq!(r.outputs.len(), 1);
    let stub = &r.outputs[0].stub;
    assert!(stub.starts_with("[toolstub: tool output externalized]\ntool_name: Read\nkind: json"));
    // Byte for byte: the content literal replaced by the stub, the recall
    // tools appended to the tools array, nothing else.
    let literal = serde_json::to_string(&output).unwrap();
    let tools_end = body.find("}}}}],\"metadata\"").unwrap() + 4;
    let recall = AnthropicMessages
        .recall_tools(&RecallToolNames::default())
        .join(",");
    let expected = format!("{},{recall}{}", &body[..tools_end], &body[tools_end..]).replacen(
        &literal,
        &json_string(stub),
        1,
    );
    assert_eq!(r.body, expected);
    let v: Value = serde_json::from_str(&r.body).expect("valid JSON");
    assert_eq!(v["messages"][3]["content"][0]["content"], json!(stub));
    assert_eq!(v["messages"][3]["content"][0]["cache_control"]["ttl"], "1h");
    assert_eq!(v["messages"][3]["content"][1]["type"], "mystery_block");
    assert_eq!(v["messages"][2]["content"][0]["signature"], "EqQBCkYIBxgC");
    let tools = v["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 4);
    assert_eq!(tools[1]["name"], "tool_result_read");
    assert!(tools[1]["input_schema"]["properties"]["ref"].is_object());
    assert!(tools.iter().all(|t| t.get("cache_control").is_none()));
    assert!(r.body.ends_with(r#""stream":true}"#));
    // The same request again: the same bytes (prompt-cache stability).
    let Outcome::Rewritten(again) = rewrite(
        body.as_bytes(),
        &Policy::default(),
        &AnthropicMessages,
        Mode::WithRefs,
    ) else {
        panic!("rewritten")
    };
    assert_eq!(again.body, r.body);
}

#[test]
fn text_block_arrays_keep_other_blocks_and_the_last_text_blocks_fields() {
    let big = "z".repeat(30_000);
    let body = format!(
        r#"{{"messages":[{{"role":"assistant","content":[{{"type":"tool_use","id":"t1","name":"mcp__db__query","input":{{}}}}]}},{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t1","content":[{{"type":"text","text":"{big}"}}, {{"type":"image","source":{{"type":"base64","data":"AA=="}}}} ,{{"type":"text","text":"tail","cache_control":{{"type":"ephemeral"}}}}]}}]}}]}}"#
    );
    let Outcome::Rewritten(r) = rewrite(
        body.as_bytes(),
        &Policy::default(),
        &AnthropicMessages,
        Mode::WithRefs,
    ) else {
        panic!("rewritten")
    };
    let v: Value = serde_json::from_str(&r.body).expect("valid JSON");
    let content = v["messages"][1]["content"][0]["content"]
        .as_array()
        .expect("blocks");
    assert_eq!(content.len(), 2, "{content:?}");
    assert_eq!(content[0]["type"], "image");
    assert_eq!(content[1]["type"], "text");
    assert_eq!(content[1]["cache_control"]["type"], "ephemeral");
    assert!(content[1]["text"]
        .as_str()
        .unwrap()
        .contains("tool_name: mcp__db__query"));
    assert_eq!(r.outputs[0].original_chars, 30_004);
}

#[test]
fn errors_stay_verbatim_unless_configured() {
    let big = "E".repeat(30_000);
    let body = format!(
        r#"{{"messages":[{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t","is_error":true,"content":"{big}"}}]}}]}}"#
    );
    assert!(matches!(
        rewrite(
            body.as_bytes(),
            &Policy::default(),
            &AnthropicMessages,
            Mode::WithRefs
        ),
        Outcome::Unchanged(crate::rewrite::Unchanged::NothingOverBudget)
    ));
    let policy = Policy {
        externalize_errors: true,
        ..Policy::default()
    };
    assert!(matches!(
        rewrite(body.as_bytes(), &policy, &AnthropicMessages, Mode::WithRefs),
        Outcome::Rewritten(_)
    ));
}

#[test]
fn canon_ignores_bytes_markers_thinking_and_output_content() {
    let a = r#"{"role":"assistant","content":[{"type":"thinking","thinking":"x","signature":"s"},{"type":"text","text":"Hi"},{"type":"tool_use","id":"toolu_9","name":"Read","input":{"a":1}}]}"#;
    let b = r#"{ "content" : [ {"text":"Hi","type":"text","cache_control":{"type":"ephemeral"}}, {"name":"Read","input":{},"id":"toolu_9","type":"tool_use"} ], "role":"assistant" }"#;
    assert_eq!(
        AnthropicMessages.message_canon(a),
        AnthropicMessages.message_canon(b)
    );
    let u1 = r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_9","content":"big output"}]}"#;
    let u2 = r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_9","content":"[toolstub stub]","cache_control":{"type":"ephemeral"}}]}"#;
    assert_eq!(
        AnthropicMessages.message_canon(u1),
        AnthropicMessages.message_canon(u2)
    );
    let other = r#"{"role":"assistant","content":[{"type":"text","text":"Hi!"}]}"#;
    assert_ne!(
        AnthropicMessages.message_canon(a),
        AnthropicMessages.message_canon(other)
    );
    assert_eq!(
        AnthropicMessages.message_canon(r#"{"role":"user","content":"plain"}"#),
        AnthropicMessages
            .message_canon(r#"{"role":"user","content":[{"type":"text","text":"plain"}]}"#)
    );
}

#[test]
fn the_opening_ignores_cache_control_markers() {
    let marked = r#"{"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}"#;
    let plain = r#"{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":"ok"}]}"#;
    assert_eq!(parse(marked).opening, parse(plain).opening);
}

#[test]
fn error_types_follow_the_status() {
    assert_eq!(error_type(400), "invalid_request_error");
    assert_eq!(error_type(401), "authentication_error");
    assert_eq!(error_type(404), "not_found_error");
    assert_eq!(error_type(413), "request_too_large");
    assert_eq!(error_type(429), "rate_limit_error");
    assert_eq!(error_type(502), "api_error");
    assert_eq!(error_type(503), "api_error");
    assert_eq!(error_type(504), "timeout_error");
    assert_eq!(error_type(529), "overloaded_error");
    let body: Value =
        serde_json::from_str(&Flavor::Anthropic.error_body(502, "upstream_unreachable", "no"))
            .expect("json");
    assert_eq!(
        body,
        json!({"type":"error","error":{"type":"api_error","message":"no"}})
    );
}

/// Usage, whole and streamed.
mod usage {
    use super::*;
    use crate::usage::{Usage, UsageScanner};

    #[test]
    fn a_stream_gives_input_at_start_and_output_at_the_end() {
        let body = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"claude-x\",",
            "\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":100,\"cache_read_input_tokens\":900,\"output_tokens\":1}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"usage\"}}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":42}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        let mut s = UsageScanner::new(Some("text/event-stream"), &AnthropicMessages);
        s.push(body.as_bytes());
        let seen = s.finish();
        assert_eq!(
            seen.usage,
            Usage {
                input: 12,
                cache_read: 900,
                cache_write: 100,
                output: 42
            }
        );
        assert_eq!(seen.model.as_deref(), Some("claude-x"));
    }

    #[test]
    fn a_whole_message() {
        let r = AnthropicMessages
            .usage(r#"{"model":"claude-y","usage":{"input_tokens":5,"output_tokens":6,"cache_read_input_tokens":0}}"#)
            .unwrap_or_default();
        assert_eq!(
            (r.input, r.output, r.cache_read, r.cache_write),
            (Some(5), Some(6), Some(0), None)
        );
        assert_eq!(r.model.as_deref(), Some("claude-y"));
    }
}
