//! The Responses request adapter against bodies in Codex's and the Agents
//! SDK's shapes.

use super::*;
use crate::rewrite::{rewrite, Mode, Outcome, Policy, Unchanged};
use serde_json::{json, Value};

fn parse(body: &str) -> ParsedRequest<'_> {
    OpenAiResponses.parse(body).expect("understood")
}

#[test]
fn finds_outputs_names_groups_and_turns() {
    let body = r#"{"model":"gpt-5","input":[
        {"type":"message","role":"developer","content":[{"type":"input_text","text":"be careful"}]},
        {"type":"message","role":"user","content":[{"type":"input_text","text":"run it"}]},
        {"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"},
        {"type":"function_call","id":"fc_1","call_id":"call_a","name":"exec_command","arguments":"{\"cmd\":\"ls\"}"},
        {"type":"function_call","id":"fc_2","call_id":"call_b","name":"read","arguments":"{}"},
        {"type":"function_call_output","call_id":"call_a","output":"one\ntwo"},
        {"type":"function_call_output","call_id":"call_b","output":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"data:"},{"type":"input_text","text":"b"}]},
        {"type":"message","role":"assistant","id":"msg_1","phase":"final","content":[{"type":"output_text","text":"done"}]},
        {"role":"user","content":"again"},
        {"type":"custom_tool_call","call_id":"call_c","name":"apply_patch","input":"*** Begin"},
        {"type":"custom_tool_call_output","call_id":"call_c","output":"patched"},
        {"type":"item_reference","id":"x"}
    ],"tools":[{"type":"function","name":"exec_command","parameters":{}},{"type":"web_search"}],"prompt_cache_key":"k","store":false,"stream":true}"#;
    let p = parse(body);
    assert!(p.streaming);
    assert_eq!(p.client_tool_names, ["exec_command"]);
    let [a, b, c] = &p.outputs[..] else {
        panic!("three outputs: {:?}", p.outputs)
    };
    assert_eq!((a.group, b.group, c.group), (1, 1, 2));
    assert_eq!(a.tool_name.as_deref(), Some("exec_command"));
    assert_eq!(b.tool_name.as_deref(), Some("read"));
    assert_eq!(c.tool_name.as_deref(), Some("apply_patch"));
    assert_eq!(a.content.decode().as_deref(), Some("one\ntwo"));
    assert_eq!(b.content.decode().as_deref(), Some("ab"));
    assert_eq!(&body[b.content_span.clone()], "\"b\"");
    assert_eq!(
        &body[b.removed[0].clone()],
        r#"{"type":"input_text","text":"a"},"#
    );
    // One turn per response: reasoning and the two calls; the assistant
    // message; the custom call.
    let turns: Vec<(bool, &str)> = p
        .messages
        .iter()
        .map(|m| (m.assistant, &body[m.span.clone()]))
        .collect();
    assert_eq!(turns.len(), 10, "{turns:?}");
    assert!(turns[2].0 && turns[2].1.starts_with(r#"{"type":"reasoning""#));
    assert!(
        turns[2].1.ends_with(r#""arguments":"{}"}"#),
        "{}",
        turns[2].1
    );
    assert!(turns[5].0 && turns[5].1.contains("msg_1"));
    assert!(!turns[6].0);
    assert!(turns[7].0 && turns[7].1.contains("apply_patch"));
    assert!(p.opening.contains("be careful") && p.opening.contains("run it"));
}

/// A user message, then `pairs` calls and outputs of `chars` characters
/// each, interleaved (one response per call) or all calls first (one
/// response with parallel calls).
fn calls_body(pairs: usize, chars: usize, interleaved: bool) -> String {
    let call = |i: usize| {
        format!(r#"{{"type":"function_call","call_id":"c{i}","name":"read","arguments":"{{}}"}}"#)
    };
    let output = |i: usize| {
        let text: String = (0..chars)
            .map(|j| char::from(b'a' + ((i + j) % 26) as u8))
            .collect();
        format!(r#"{{"type":"function_call_output","call_id":"c{i}","output":"{text}"}}"#)
    };
    let mut items = vec![r#"{"role":"user","content":"read them"}"#.to_string()];
    if interleaved {
        for i in 0..pairs {
            items.push(call(i));
            items.push(output(i));
        }
    } else {
        items.extend((0..pairs).map(call));
        items.extend((0..pairs).map(output));
    }
    format!(
        r#"{{"model":"gpt-5","input":[{}],"stream":false}}"#,
        items.join(",")
    )
}

#[test]
fn a_call_after_outputs_starts_the_next_group() {
    // One call and its output per response, no reasoning between them:
    // each output is its own group, so seven outputs of 15k (105k together)
    // stay inline turn after turn, as the first six did.
    let body = calls_body(7, 15_000, true);
    let groups: Vec<usize> = parse(&body).outputs.iter().map(|o| o.group).collect();
    assert_eq!(groups, [1, 2, 3, 4, 5, 6, 7]);
    for pairs in [6, 7] {
        assert!(matches!(
            rewrite(
                calls_body(pairs, 15_000, true).as_bytes(),
                &Policy::default(),
                &OpenAiResponses,
                Mode::WithRefs
            ),
            Outcome::Unchanged(Unchanged::NothingOverBudget)
        ));
    }
    // Seven parallel calls of one response: one group, over the turn budget.
    let body = calls_body(7, 15_000, false);
    let groups: Vec<usize> = parse(&body).outputs.iter().map(|o| o.group).collect();
    assert_eq!(groups, [1; 7]);
    assert!(matches!(
        rewrite(
            body.as_bytes(),
            &Policy::default(),
            &OpenAiResponses,
            Mode::WithRefs
        ),
        Outcome::Rewritten(_)
    ));
}

#[test]
fn what_is_not_understood_or_not_rewritten() {
    for body in [
        "{}",
        r#"{"input":"just a string"}"#,
        r#"{"input":{}}"#,
        r#"{"input":[1]}"#,
        r#"{"input":[],"tools":{}}"#,
        r#"{"input":[],"background":true}"#,
        r#"{"input":[],"conversation":"conv_1"}"#,
        r#"{"input":[],"conversation":{"id":"conv_1"}}"#,
    ] {
        assert!(OpenAiResponses.parse(body).is_none(), "{body}");
    }
}

fn codex_body(output: &str, store: &str, include: &str) -> String {
    format!(
        r#"{{"model":"gpt-5-codex","instructions":"You are Codex.","input":[{{"type":"message","role":"user","content":[{{"type":"input_text","text":"cat it"}}]}},{{"type":"function_call","call_id":"call_1","name":"exec_command","arguments":"{{\"cmd\":\"cat f\"}}"}},{{"type":"function_call_output","call_id":"call_1","output":{}}}],"tools":[{{"type":"function","name":"exec_command","description":"Runs","strict":false,"parameters":{{"type":"object","properties":{{"cmd":{{"type":"string"}}}}}}}}],"tool_choice":"auto","parallel_tool_calls":true,"reasoning":{{"summary":"auto"}},"store":{store},"stream":true{include},"prompt_cache_key":"019a"}}"#,
        serde_json::to_string(output).unwrap()
    )
}

#[test]
fn a_rewrite_stubs_the_output_appends_the_tools_and_asks_for_encrypted_reasoning() {
    let output = format!(
        "Chunk ID: 7dcbe2\nWall time: 0.0100 seconds\nProcess exited with code 0\nOriginal token count: 9000\nOutput:\n{}",
        (0..3000).map(|i| format!("line {i}\n")).collect::<String>()
    );
    for (store, include, expect_include) in [
        ("false", "", Some(json!(["reasoning.encrypted_content"]))),
        (
            "false",
            r#","include":[]"#,
            Some(json!(["reasoning.encrypted_content"])),
        ),
        (
            "false",
            r#","include":["reasoning.encrypted_content"]"#,
            Some(json!(["reasoning.encrypted_content"])),
        ),
        ("true", "", None),
    ] {
        let body = codex_body(&output, store, include);
        let Outcome::Rewritten(r) = rewrite(
            body.as_bytes(),
            &Policy::default(),
            &OpenAiResponses,
            Mode::WithRefs,
        ) else {
            panic!("rewritten")
        };
        let v: Value = serde_json::from_str(&r.body).expect("valid JSON");
        let stub = v["input"][2]["output"]
            .as_str()
            .expect("a string stays a string");
        assert!(stub.starts_with("[toolstub: tool output externalized]"));
        assert!(stub.contains("tool_name: exec_command"));
        assert!(stub.contains("exit code 0"), "{stub}");
        let tools = v["tools"].as_array().expect("tools");
        assert_eq!(tools.len(), 4);
        assert_eq!(
            tools[1],
            json!({"type":"function","name":"tool_result_read","description":tools[1]["description"],"parameters":tools[1]["parameters"],"strict":false})
        );
        assert_eq!(
            v.get("include").cloned(),
            expect_include,
            "store {store} include {include}"
        );
        assert_eq!(v["prompt_cache_key"], "019a");
        // Only the output, the tools and the include changed.
        let literal = serde_json::to_string(&output).unwrap();
        assert!(r.body.starts_with(&body[..body.find(&literal).unwrap()]));
    }
}

#[test]
fn canon_of_a_turn_survives_reserialization_and_goes_by_ids() {
    let a = r#"{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"x"},{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Hi","annotations":[]}]},{"type":"function_call","id":"fc_1","call_id":"call_9","name":"exec_command","arguments":"{}"}"#;
    let b = r#"{"summary":[],"type":"reasoning","encrypted_content":"x","content":null,"id":"rs_1"},{"content":[{"annotations":[],"text":"Hi","type":"output_text","logprobs":[]}],"id":"msg_1","role":"assistant","type":"message","phase":null}, {"arguments":"{}","call_id":"call_9","id":"fc_1","name":"exec_command","type":"function_call"}"#;
    let canon = OpenAiResponses.message_canon(a).expect("canon");
    assert_eq!(Some(canon.clone()), OpenAiResponses.message_canon(b));
    assert!(canon.starts_with("assistant"));
    // The same texts under other ids are another turn.
    let other = a
        .replace("rs_1", "rs_2")
        .replace("msg_1", "msg_2")
        .replace("fc_1", "fc_2");
    assert_ne!(Some(canon), OpenAiResponses.message_canon(&other));
    // Without ids: a call by its call_id, a message by its text.
    assert_ne!(
        OpenAiResponses
            .message_canon(r#"{"type":"function_call_output","call_id":"call_9","output":"x"}"#),
        OpenAiResponses
            .message_canon(r#"{"type":"function_call_output","call_id":"call_8","output":"x"}"#)
    );
    assert_eq!(
        OpenAiResponses.message_canon(r#"{"role":"user","content":"hi"}"#),
        OpenAiResponses.message_canon(
            r#"{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}"#
        )
    );
}

#[test]
fn every_call_the_client_runs_is_a_client_call() {
    use super::rounds::{item_kind, ItemKind};
    let names = RecallToolNames::default();
    for kind in [
        "function_call",
        "custom_tool_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "computer_call",
        "mcp_approval_request",
    ] {
        let item = format!(r#"{{"type":"{kind}","id":"x","call_id":"c","name":"exec"}}"#);
        assert_eq!(item_kind(&names, &item), ItemKind::ClientCall, "{kind}");
    }
    // What the upstream runs itself, and what is no call.
    for kind in ["message", "reasoning", "web_search_call", "mcp_call"] {
        let item = format!(r#"{{"type":"{kind}","id":"x"}}"#);
        assert_eq!(item_kind(&names, &item), ItemKind::Other, "{kind}");
    }
}
