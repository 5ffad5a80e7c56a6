//! Unit tests of the rewrite core with the OpenAI Chat adapter.

use super::*;
use crate::protocol::anthropic::AnthropicMessages;
use crate::protocol::openai_chat::OpenAiChat;
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::BTreeMap;

fn big_json(n: usize) -> String {
    let items: Vec<String> = (0..n)
        .map(|i| format!("{{\"id\":{i},\"name\":\"item {i}\"}}"))
        .collect();
    format!("{{\"items\":[{}]}}", items.join(","))
}

fn body_with_outputs(outputs: &[String]) -> String {
    let calls: Vec<String> = (0..outputs.len())
        .map(|i| format!(r#"{{"id":"call_{i}","type":"function","function":{{"name":"fetch","arguments":"{{}}"}}}}"#))
        .collect();
    let tools: Vec<String> = outputs
        .iter()
        .enumerate()
        .map(|(i, o)| {
            format!(
                r#"{{"role":"tool","tool_call_id":"call_{i}","content":{}}}"#,
                serde_json::to_string(o).expect("string")
            )
        })
        .collect();
    format!(
        r#"{{"model":"gpt-x","temperature":0.2,"messages":[{{"role":"user","content":"go"}},{{"role":"assistant","content":null,"tool_calls":[{}]}},{}],"tools":[{{"type":"function","function":{{"name":"fetch","parameters":{{"type":"object","properties":{{"z":{{"type":"string"}},"a":{{"type":"string"}}}}}}}}}}],"stream":false}}"#,
        calls.join(","),
        tools.join(",")
    )
}

fn run(body: &str) -> Outcome<'_> {
    rewrite(
        body.as_bytes(),
        &Policy::default(),
        &OpenAiChat,
        Mode::WithRefs,
    )
}

fn rewritten(body: &str) -> Rewritten<'_> {
    match run(body) {
        Outcome::Rewritten(r) => *r,
        Outcome::Unchanged(why) => panic!("unchanged: {why:?}"),
    }
}

#[test]
fn small_requests_are_unchanged() {
    let body = body_with_outputs(&["short".to_string()]);
    assert!(matches!(
        run(&body),
        Outcome::Unchanged(Unchanged::NothingOverBudget)
    ));
    assert!(matches!(
        run("not json"),
        Outcome::Unchanged(Unchanged::NotUnderstood)
    ));
    assert!(matches!(
        rewrite(b"\xff\xfe", &Policy::default(), &OpenAiChat, Mode::WithRefs),
        Outcome::Unchanged(Unchanged::NotUnderstood)
    ));
    let off = Policy {
        enabled: false,
        ..Policy::default()
    };
    let big = body_with_outputs(&[big_json(10_000)]);
    assert!(matches!(
        rewrite(big.as_bytes(), &off, &OpenAiChat, Mode::WithRefs),
        Outcome::Unchanged(Unchanged::Disabled)
    ));
}

#[test]
fn a_large_json_output_becomes_a_json_stub() {
    let original = big_json(10_000);
    assert!(original.len() > 200_000);
    let body = body_with_outputs(std::slice::from_ref(&original));
    let r = rewritten(&body);
    assert_eq!(r.outputs.len(), 1);
    let out = &r.outputs[0];
    assert_eq!(out.content.decode().as_deref(), Some(original.as_str()));
    assert_eq!(out.reason, "single_threshold");
    assert_eq!(out.tool_name.as_deref(), Some("fetch"));
    let r_ref = out.result_ref.clone().expect("ref");
    assert!(r_ref.starts_with("tr_call_0_"));
    let v: Value = serde_json::from_str(&r.body).expect("valid JSON");
    let content = v["messages"][2]["content"]
        .as_str()
        .expect("string content");
    assert_eq!(content, out.stub);
    assert!(content.contains("kind: json"));
    assert!(content.contains(&format!("ref: {r_ref}")));
    assert!(content.contains("reason: single_threshold"));
    // Every other field keeps its value; the recall tools are appended.
    assert_eq!(v["model"], "gpt-x");
    assert_eq!(v["temperature"], 0.2);
    assert_eq!(v["stream"], false);
    let names: Vec<&str> = v["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["function"]["name"].as_str().expect("name"))
        .collect();
    assert_eq!(
        names,
        [
            "fetch",
            "tool_result_read",
            "tool_result_search",
            "tool_result_list"
        ]
    );
    assert!(r.saved_chars > 190_000);
}

#[test]
fn bytes_outside_the_splices_are_untouched() {
    let body = body_with_outputs(&[big_json(10_000)]);
    let r = rewritten(&body);
    let content_at = body.find(r#""content":"{\"items"#).expect("content") + 10;
    assert_eq!(&r.body[..content_at], &body[..content_at]);
    // The client's tool definition keeps its parameter key order (z before a).
    assert!(r
        .body
        .contains(r#""properties":{"z":{"type":"string"},"a":{"type":"string"}}"#));
    let tail_at = body.find(r#"],"tools":"#).expect("tools");
    let new_tail_at = r.body.find(r#"],"tools":"#).expect("tools");
    assert_eq!(
        &r.body[new_tail_at..new_tail_at + 20],
        &body[tail_at..tail_at + 20]
    );
    assert!(r.body.ends_with(r#"],"stream":false}"#));
}

#[test]
fn turn_budget_stubs_the_largest_until_under_budget() {
    let outputs: Vec<String> = (0..6)
        .map(|i| format!("{i}{}", "x ".repeat(9_500)))
        .collect();
    let body = body_with_outputs(&outputs);
    let r = rewritten(&body);
    assert_eq!(r.outputs.len(), 1, "one stub brings 114,000 under 100,000");
    assert_eq!(r.outputs[0].reason, "turn_budget");
    assert_eq!(r.outputs[0].tool_call_id.as_deref(), Some("call_0"));
    assert_eq!(r.outputs[0].preview_chars, 2000);
}

#[test]
fn many_stubs_share_the_preview_budget() {
    // Twelve outputs over the threshold: preview = max(1000, 10000 / 12) = 1000.
    let outputs: Vec<String> = (0..12)
        .map(|i| format!("\u{0}{i}{}", "\u{1}b".repeat(11_000)))
        .collect();
    let body = body_with_outputs(&outputs);
    let r = rewritten(&body);
    assert_eq!(r.outputs.len(), 12);
    for out in &r.outputs {
        assert_eq!(out.preview_chars, 1000);
        assert_eq!(out.synopsis.kind, Kind::Unknown);
        assert!(out.stub.contains("preview_chars: 1000"));
    }
}

#[test]
fn clashing_tool_names_are_renamed_everywhere() {
    let body = body_with_outputs(&[big_json(5_000)]).replace(
        r#""tools":[{"type":"function","function":{"name":"fetch""#,
        r#""tools":[{"type":"function","function":{"name":"tool_result_read""#,
    );
    let r = rewritten(&body);
    assert_eq!(r.recall_names.read, "toolstub_tool_result_read");
    assert!(r.outputs[0]
        .stub
        .contains("Use toolstub_tool_result_read with ref="));
    assert!(r.body.contains(r#""name":"toolstub_tool_result_read""#));
}

#[test]
fn preview_only_has_no_ref_and_no_recall_tools() {
    let body = body_with_outputs(&[big_json(5_000)]);
    let Outcome::Rewritten(r) = rewrite(
        body.as_bytes(),
        &Policy::default(),
        &OpenAiChat,
        Mode::PreviewOnly,
    ) else {
        panic!("rewritten")
    };
    let out = &r.outputs[0];
    assert_eq!(out.result_ref, None);
    assert_eq!(out.reason, "single_threshold:externalization_failed");
    assert!(!out.stub.contains("ref:") && !out.stub.contains("Explore"));
    assert!(!r.body.contains("tool_result_read"));
}

#[test]
fn text_parts_keep_their_shape() {
    let body = format!(
        r#"{{"messages":[{{"role":"tool","tool_call_id":"c","content":[{{"type":"text","text":{}}}]}}]}}"#,
        serde_json::to_string(&"line\n".repeat(10_000)).expect("json")
    );
    let r = rewritten(&body);
    let v: Value = serde_json::from_str(&r.body).expect("json");
    let parts = v["messages"][0]["content"].as_array().expect("parts");
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0]["type"], "text");
    assert!(parts[0]["text"]
        .as_str()
        .expect("text")
        .contains("kind: text"));
    assert!(v["tools"].is_array(), "tools added as a new member");
}

/// Turn N+1's rewritten messages start with turn N's rewritten messages.
#[test]
fn growing_conversations_keep_their_prefix() {
    let mut messages: Vec<String> = vec![r#"{"role":"user","content":"start"}"#.to_string()];
    let mut previous: Option<Vec<String>> = None;
    for turn in 0..12 {
        messages.push(format!(
            r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"c{turn}","type":"function","function":{{"name":"f","arguments":"{{}}"}}}}]}}"#
        ));
        let output = if turn % 3 == 0 {
            big_json(2_000 + turn)
        } else {
            format!("small {turn}")
        };
        messages.push(format!(
            r#"{{"role":"tool","tool_call_id":"c{turn}","content":{}}}"#,
            serde_json::to_string(&output).expect("json")
        ));
        let body = format!(r#"{{"model":"m","messages":[{}]}}"#, messages.join(","));
        let new_body = match run(&body) {
            Outcome::Rewritten(r) => r.body,
            Outcome::Unchanged(_) => body.clone(),
        };
        #[derive(serde::Deserialize)]
        struct Messages<'a> {
            #[serde(borrow)]
            messages: Vec<&'a RawValue>,
        }
        let parsed: Messages<'_> = serde_json::from_str(&new_body).expect("json");
        let now: Vec<String> = parsed
            .messages
            .iter()
            .map(|m| m.get().to_string())
            .collect();
        if let Some(before) = &previous {
            assert_eq!(&now[..before.len()], &before[..], "turn {turn}");
        }
        previous = Some(now);
    }
}

#[test]
fn sessions_are_derived_from_tenant_and_opening() {
    let opening = |body: &str| OpenAiChat.parse(body).expect("parsed").opening;
    let a = opening(
        r#"{"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"assistant","content":"x"}]}"#,
    );
    let b =
        opening(r#"{"messages":[{"role":"system", "content":"s"},{"content":"u","role":"user"}]}"#);
    assert_eq!(a, b);
    assert_eq!(derive_session("t1", &a), derive_session("t1", &b));
    assert_ne!(derive_session("t1", &a), derive_session("t2", &a));
    // Sessions already in stores stay what they were: `s_` and the first
    // 24 hex digits of the SHA-256 of tenant, NUL, opening.
    for (tenant, opening) in [
        ("t1", a.as_str()),
        ("anonymous", ""),
        ("0123abcd", "ü\u{0}x"),
    ] {
        let joined = crate::refs::sha256_hex(&format!("{tenant}\u{0}{opening}"));
        assert_eq!(
            derive_session(tenant, opening),
            format!("s_{}", &joined[..24])
        );
    }
    assert_eq!(
        derive_session("t1", ""),
        "s_603e7c7147edcb927082fe49",
        "a value pinned from before (Python's hashlib)"
    );
}

/// The three adapters, for tests that must hold on each.
#[derive(Clone, Copy, Debug)]
enum Wire {
    Chat,
    Messages,
    Responses,
}

impl Wire {
    const ALL: [Wire; 3] = [Wire::Chat, Wire::Messages, Wire::Responses];

    fn protocol(self) -> &'static dyn Protocol {
        match self {
            Wire::Chat => &OpenAiChat,
            Wire::Messages => &crate::protocol::anthropic::AnthropicMessages,
            Wire::Responses => &crate::protocol::responses::OpenAiResponses,
        }
    }

    /// One turn: the model calls `tool` once per output, then the outputs
    /// (Anthropic: `is_error` where asked).
    fn turn(self, turn: usize, tool: &str, outputs: &[(String, bool)]) -> Vec<String> {
        let id = |i: usize| format!("call_{turn}_{i}");
        let text = |o: &str| serde_json::to_string(o).expect("json");
        match self {
            Wire::Chat => {
                let calls: Vec<String> = (0..outputs.len())
                    .map(|i| format!(r#"{{"id":"{}","type":"function","function":{{"name":"{tool}","arguments":"{{}}"}}}}"#, id(i)))
                    .collect();
                let mut m = vec![format!(
                    r#"{{"role":"assistant","content":null,"tool_calls":[{}]}}"#,
                    calls.join(",")
                )];
                m.extend(outputs.iter().enumerate().map(|(i, (o, _))| {
                    format!(
                        r#"{{"role":"tool","tool_call_id":"{}","content":{}}}"#,
                        id(i),
                        text(o)
                    )
                }));
                m
            }
            Wire::Messages => {
                let uses: Vec<String> = (0..outputs.len())
                    .map(|i| {
                        format!(
                            r#"{{"type":"tool_use","id":"{}","name":"{tool}","input":{{}}}}"#,
                            id(i)
                        )
                    })
                    .collect();
                let results: Vec<String> = outputs
                    .iter()
                    .enumerate()
                    .map(|(i, (o, error))| {
                        let flag = if *error { r#","is_error":true"# } else { "" };
                        format!(
                            r#"{{"type":"tool_result","tool_use_id":"{}"{flag},"content":{}}}"#,
                            id(i),
                            text(o)
                        )
                    })
                    .collect();
                vec![
                    format!(r#"{{"role":"assistant","content":[{}]}}"#, uses.join(",")),
                    format!(r#"{{"role":"user","content":[{}]}}"#, results.join(",")),
                ]
            }
            Wire::Responses => {
                let mut m = vec![format!(
                    r#"{{"type":"reasoning","id":"rs_{turn}","summary":[]}}"#
                )];
                m.extend((0..outputs.len()).map(|i| {
                    format!(
                        r#"{{"type":"function_call","call_id":"{}","name":"{tool}","arguments":"{{}}"}}"#,
                        id(i)
                    )
                }));
                m.extend(outputs.iter().enumerate().map(|(i, (o, _))| {
                    format!(
                        r#"{{"type":"function_call_output","call_id":"{}","output":{}}}"#,
                        id(i),
                        text(o)
                    )
                }));
                m
            }
        }
    }

    /// The request carrying `messages`; the conversation's array ends the
    /// body but for its closing, so a previous turn's rewritten messages
    /// must be a byte prefix of the next turn's.
    fn body(self, messages: &[String]) -> String {
        match self {
            Wire::Chat => format!(
                r#"{{"model":"m","tools":[{{"type":"function","function":{{"name":"Read","parameters":{{}}}}}}],"messages":[{{"role":"user","content":"go"}}{}{}]}}"#,
                if messages.is_empty() { "" } else { "," },
                messages.join(",")
            ),
            Wire::Messages => format!(
                r#"{{"model":"m","max_tokens":10,"tools":[{{"name":"Read","input_schema":{{}}}}],"messages":[{{"role":"user","content":"go"}}{}{}]}}"#,
                if messages.is_empty() { "" } else { "," },
                messages.join(",")
            ),
            Wire::Responses => format!(
                r#"{{"model":"m","tools":[{{"type":"function","name":"Read","parameters":{{}}}}],"input":[{{"role":"user","content":"go"}}{}{}]}}"#,
                if messages.is_empty() { "" } else { "," },
                messages.join(",")
            ),
        }
    }
}

/// Where a body's conversation array begins.
fn conversation_start(body: &str) -> usize {
    ["\"messages\":[", "\"input\":["]
        .iter()
        .filter_map(|m| body.find(m).map(|at| at + m.len()))
        .min()
        .expect("a conversation")
}

/// Text of exactly `chars` characters, distinct per seed.
fn text_of(seed: usize, chars: usize) -> String {
    let mut s = format!("output {seed}\n");
    while s.len() < chars {
        s.push_str(&format!("line {} of output {seed}\n", s.len()));
    }
    s.truncate(chars);
    s
}

fn conversation_policy() -> Policy {
    Policy {
        budget: Budget {
            conversation_inline_budget_chars: 30_000,
            conversation_floor_chars: 3_000,
            ..Budget::default()
        },
        first_stub: NO_GATE,
        ..Policy::default()
    }
}

/// The first-stub rule off, for tests of the rules that choose stubs.
const NO_GATE: first_stub::Gate = first_stub::Gate {
    horizon_permille: None,
    min_later: 0,
};

/// The outputs of each turn of the growing conversation: one 8,000-character
/// output a turn, two small ones every third turn, an 8,000-character error
/// at turn 5 (kept inline on the protocol that can flag it).
fn growing_turns() -> Vec<Vec<(String, bool)>> {
    (0..14)
        .map(|t| {
            let mut outputs = vec![(text_of(t * 10, 8_000), t == 5)];
            if t % 3 == 0 {
                outputs.push((text_of(t * 10 + 1, 2_999), false));
                outputs.push((text_of(t * 10 + 2, 3_001), false));
            }
            outputs
        })
        .collect()
}

/// Replays a growing conversation turn by turn on each protocol: every
/// turn's rewritten request starts with the previous turn's rewritten
/// request byte for byte (up to where its conversation array closes, the
/// recall tools aside at their first offer), an output's fate is decided
/// when it first appears and never changes, and all three protocols decide
/// the same.
#[test]
fn the_conversation_budget_decides_each_output_once_on_every_protocol() {
    let policy = conversation_policy();
    let mut fates_by_wire = Vec::new();
    for wire in Wire::ALL {
        let memo = Memo::new(1_000);
        let mut messages: Vec<String> = Vec::new();
        let mut previous: Option<String> = None;
        let mut fates: BTreeMap<String, String> = BTreeMap::new();
        for (t, outputs) in growing_turns().iter().enumerate() {
            messages.extend(wire.turn(t, "Read", outputs));
            let body = wire.body(&messages);
            let sent = match rewrite_with(
                body.as_bytes(),
                &policy,
                wire.protocol(),
                Mode::WithRefs,
                &memo,
            ) {
                Outcome::Rewritten(r) => {
                    for o in &r.outputs {
                        let id = o.tool_call_id.clone().expect("id");
                        let fate = fates.entry(id.clone()).or_insert(o.reason.clone());
                        assert_eq!(*fate, o.reason, "{wire:?} turn {t}: {id} changed its fate");
                    }
                    r.body
                }
                Outcome::Unchanged(_) => body.clone(),
            };
            if let Some(before) = &previous {
                // The previous request up to the `]` closing its
                // conversation is where this one starts, byte for byte;
                // only the turn that first offers the recall tools (in
                // `tools`, before the conversation) changes the head.
                let before_open = &before[..before.len() - 2];
                if before.contains("tool_result_read") {
                    assert!(
                        sent.starts_with(before_open),
                        "{wire:?} turn {t}: the earlier request changed"
                    );
                } else {
                    let (from, now) = (conversation_start(before), conversation_start(&sent));
                    assert!(
                        sent[now..].starts_with(&before_open[from..]),
                        "{wire:?} turn {t}: the earlier conversation changed"
                    );
                }
            }
            // Outputs never stubbed so far stay inline for good: record them.
            for (i, _) in outputs.iter().enumerate() {
                fates
                    .entry(format!("call_{t}_{i}"))
                    .or_insert_with(|| "inline".to_string());
            }
            previous = Some(sent);
        }
        fates_by_wire.push((wire, fates));
    }
    // Turns 0 to 2 keep 8,000 x 3 + 2,999 + 3,001 = 30,000 inline: at the
    // budget, not over it, so turn 3's first output stays inline too; from
    // there on every output over 3,000 is a stub.
    let (_, chat) = &fates_by_wire[0];
    for t in 0..4 {
        assert_eq!(chat[&format!("call_{t}_0")], "inline", "turn {t}");
    }
    assert_eq!(chat["call_0_1"], "inline");
    assert_eq!(chat["call_0_2"], "inline", "under the budget");
    assert_eq!(chat["call_3_1"], "inline", "2,999 is under the floor");
    assert_eq!(
        chat["call_3_2"], "conversation_budget",
        "38,000 before it, in its own group"
    );
    for t in 4..14 {
        assert_eq!(
            chat[&format!("call_{t}_0")],
            "conversation_budget",
            "turn {t}"
        );
    }
    assert_eq!(chat["call_6_1"], "inline", "2,999 is under the floor");
    assert_eq!(chat["call_6_2"], "conversation_budget");
    for (wire, fates) in &fates_by_wire[1..] {
        for (id, fate) in fates {
            // Only Anthropic can flag turn 5's output as an error: it stays.
            let expected = match (wire, id.as_str()) {
                (Wire::Messages, "call_5_0") => "inline",
                _ => chat[id].as_str(),
            };
            assert_eq!(fate, expected, "{wire:?}: {id}");
        }
        assert_eq!(fates.len(), chat.len());
    }
}

fn rule(pattern: &str) -> tool_policy::ToolRule {
    tool_policy::ToolRule {
        pattern: tool_policy::Glob::new(pattern).expect("pattern"),
        threshold_chars: None,
        conversation_budget: None,
        externalize: None,
        mime: None,
    }
}

/// The fate of each output of one turn calling each tool once, in order.
fn fates(policy: &Policy, wire: Wire, outputs: &[(&str, String)]) -> Vec<Option<String>> {
    let mut messages = Vec::new();
    for (i, (tool, output)) in outputs.iter().enumerate() {
        messages.extend(wire.turn(i, tool, &[(output.clone(), false)]));
    }
    let body = wire.body(&messages);
    let r = match rewrite(body.as_bytes(), policy, wire.protocol(), Mode::WithRefs) {
        Outcome::Rewritten(r) => r.outputs,
        Outcome::Unchanged(_) => Vec::new(),
    };
    (0..outputs.len())
        .map(|i| {
            let id = format!("call_{i}_0");
            r.iter()
                .find(|o| o.tool_call_id.as_deref() == Some(id.as_str()))
                .map(|o| o.reason.clone())
        })
        .collect()
}

#[test]
fn tool_rules_set_a_threshold_keep_outputs_inline_and_leave_the_conversation_budget() {
    let policy = Policy {
        budget: Budget {
            conversation_inline_budget_chars: 40_000,
            conversation_floor_chars: 3_500,
            ..Budget::default()
        },
        tools: tool_policy::ToolRules(vec![
            tool_policy::ToolRule {
                externalize: Some(tool_policy::Externalize::Never),
                ..rule("mcp__github__*")
            },
            tool_policy::ToolRule {
                threshold_chars: Some(3_000),
                ..rule("fetch_?")
            },
            tool_policy::ToolRule {
                conversation_budget: Some(false),
                ..rule("Read")
            },
        ]),
        first_stub: NO_GATE,
        ..Policy::default()
    };
    let single = Some("single_threshold".to_string());
    let conversation = Some("conversation_budget".to_string());
    for wire in Wire::ALL {
        let got = fates(
            &policy,
            wire,
            &[
                // Never: inline at 50,000, and counted (the budget is now passed).
                ("mcp__github__get_file", text_of(1, 50_000)),
                ("fetch_a", text_of(2, 3_001)),
                ("fetch_ab", text_of(3, 3_001)),
                ("Read", text_of(4, 10_000)),
                ("Read", text_of(5, 20_001)),
                ("Bash", text_of(6, 10_000)),
            ],
        );
        assert_eq!(
            got,
            [
                None,
                single.clone(),
                None,
                None,
                single.clone(),
                conversation.clone()
            ],
            "{wire:?}"
        );
    }
}

#[test]
fn a_mime_hint_comes_from_the_first_rule_that_gives_one() {
    // Looks like JSON, is not: a JSON hint makes it `unknown`, else `text`.
    let broken = format!("{{\"a\": {}", "1, ".repeat(10_000));
    let kind = |tools: Vec<tool_policy::ToolRule>| {
        let policy = Policy {
            tools: tool_policy::ToolRules(tools),
            ..Policy::default()
        };
        let body = body_with_outputs(std::slice::from_ref(&broken));
        match rewrite(body.as_bytes(), &policy, &OpenAiChat, Mode::WithRefs) {
            Outcome::Rewritten(r) => (r.outputs[0].synopsis.kind, r.outputs[0].mime.clone()),
            Outcome::Unchanged(why) => panic!("{why:?}"),
        }
    };
    assert_eq!(kind(Vec::new()), (Kind::Text, None));
    let json = Some("application/json".to_string());
    let with_mime = |pattern: &str, mime: &str| tool_policy::ToolRule {
        mime: Some(mime.to_string()),
        ..rule(pattern)
    };
    assert_eq!(
        kind(vec![with_mime("fe*", "application/json")]),
        (Kind::Unknown, json.clone())
    );
    // A rule that matches but gives no MIME does not stop the search.
    assert_eq!(
        kind(vec![
            tool_policy::ToolRule {
                threshold_chars: Some(100),
                ..rule("*")
            },
            with_mime("fetch", "application/json"),
            with_mime("*", "text/plain"),
        ]),
        (Kind::Unknown, json)
    );
    assert_eq!(kind(vec![with_mime("other", "application/json")]).1, None);
}

/// A chat conversation of one tool call per turn, output `i` answering turn `i`.
fn conversation(outputs: &[String]) -> String {
    let mut messages = vec![r#"{"role":"user","content":"go"}"#.to_string()];
    for (i, o) in outputs.iter().enumerate() {
        messages.push(format!(
            r#"{{"role":"assistant","content":"step {i}","tool_calls":[{{"id":"call_{i}","type":"function","function":{{"name":"fetch","arguments":"{{}}"}}}}]}}"#
        ));
        messages.push(format!(
            r#"{{"role":"tool","tool_call_id":"call_{i}","content":{}}}"#,
            serde_json::to_string(o).unwrap_or_default()
        ));
    }
    format!(
        r#"{{"model":"gpt-x","messages":[{}],"tools":[{{"type":"function","function":{{"name":"fetch","parameters":{{}}}}}}]}}"#,
        messages.join(",")
    )
}

fn aging_policy(after_turns: usize, min_share_permille: u32) -> Policy {
    Policy {
        aging: aging::Aging {
            after_turns,
            floor_chars: 4_000,
            min_share_permille,
            horizon_permille: 0,
            after_expiry: true,
        },
        ..Policy::default()
    }
}

/// The messages of a body, as raw JSON texts.
fn messages_of(body: &str) -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct B<'a> {
        #[serde(borrow)]
        messages: Vec<&'a RawValue>,
    }
    serde_json::from_str::<B<'_>>(body)
        .map(|b| b.messages.iter().map(|m| m.get().to_string()).collect())
        .unwrap_or_default()
}

fn body_of(outcome: Outcome<'_>, original: &str) -> String {
    match outcome {
        Outcome::Rewritten(r) => r.body,
        Outcome::Unchanged(_) => original.to_string(),
    }
}

#[test]
fn aging_replaces_a_seen_output_where_the_change_pays_and_keeps_it_replaced() {
    // Turn 0: over the threshold (a stub at first sight: the recall tools
    // are offered from then on). Turn 1: 19,000 characters, under it.
    let mid = big_json(650);
    assert!(mid.len() > 15_000 && mid.len() < 20_000, "{}", mid.len());
    let outputs = [
        big_json(3_000),
        mid.clone(),
        "ok".into(),
        "ok".into(),
        "ok".into(),
    ];
    let policy = aging_policy(1, 920);
    let bodies: Vec<String> = (1..=outputs.len())
        .map(|n| {
            let b = conversation(&outputs[..n]);
            let out = rewrite(b.as_bytes(), &policy, &OpenAiChat, Mode::WithRefs);
            body_of(out, &b)
        })
        .collect();
    // The request that first carries it sends it verbatim.
    let first = messages_of(&bodies[1]);
    assert!(first[4].contains(&serde_json::to_string(&mid).unwrap_or_default()[1..200]));
    // The next one replaces it (reason aged) and changes nothing before it.
    let second = messages_of(&bodies[2]);
    assert!(
        second[4].contains("[toolstub: tool output shown in full earlier]"),
        "{}",
        &second[4][..200]
    );
    assert_eq!(first[..4], second[..4]);
    // Every later request reproduces the previous one's messages.
    for w in bodies[2..].windows(2) {
        let (a, b) = (messages_of(&w[0]), messages_of(&w[1]));
        assert_eq!(a[..], b[..a.len()]);
    }
}

#[test]
fn aged_outputs_take_their_place_in_body_order() {
    // A later output stubbed at first sight, an earlier one aged: the list
    // of outputs is in the body's order (the fuzz target's invariant).
    let mid = big_json(650);
    let outputs = [
        big_json(3_000),
        mid,
        "ok".into(),
        "ok".into(),
        big_json(3_001),
    ];
    let body = conversation(&outputs);
    let Outcome::Rewritten(r) = rewrite(
        body.as_bytes(),
        &aging_policy(1, 920),
        &OpenAiChat,
        Mode::WithRefs,
    ) else {
        panic!("rewritten")
    };
    let reasons: Vec<&str> = r.outputs.iter().map(|o| o.reason.as_str()).collect();
    assert!(reasons.contains(&"aged"), "{reasons:?}");
    assert!(
        r.outputs.windows(2).all(|w| w[0].at < w[1].at),
        "{reasons:?}"
    );
}

#[test]
fn aging_leaves_an_output_where_the_change_would_not_pay() {
    let mid = big_json(650);
    let next = big_json(651);
    // Two turns old, it is followed by an output as large: replacing it
    // makes the provider write both again, for one saved.
    let outputs = ["a ".repeat(1_500), mid.clone(), next, "ok".into()];
    let b = conversation(&outputs);
    let out = rewrite(
        b.as_bytes(),
        &aging_policy(2, 920),
        &OpenAiChat,
        Mode::WithRefs,
    );
    match out {
        // The recall tools are offered (the rule is on), nothing is aged.
        Outcome::Rewritten(r) => {
            assert!(r.outputs.is_empty(), "{:?}", r.outputs[0].reason);
            assert!(r.body.contains("tool_result_read"));
        }
        Outcome::Unchanged(why) => panic!("unchanged: {why:?}"),
    }
    // Without the price gate, the same output goes at its age.
    let out = rewrite(
        b.as_bytes(),
        &aging_policy(2, 0),
        &OpenAiChat,
        Mode::WithRefs,
    );
    match out {
        Outcome::Rewritten(r) => {
            assert_eq!(r.outputs.len(), 1);
            assert_eq!(r.outputs[0].reason, "aged");
            assert_eq!(r.outputs[0].tool_call_id.as_deref(), Some("call_1"));
        }
        Outcome::Unchanged(why) => panic!("unchanged: {why:?}"),
    }
    // One turn younger, it is not old enough.
    let b = conversation(&outputs[..3]);
    let out = rewrite(
        b.as_bytes(),
        &aging_policy(2, 0),
        &OpenAiChat,
        Mode::WithRefs,
    );
    assert!(matches!(out, Outcome::Rewritten(r) if r.outputs.is_empty()));
}

#[test]
fn with_aging_on_the_recall_tools_are_offered_from_the_first_request() {
    let policy = aging_policy(1, 0);
    let first = conversation(&[]);
    let Outcome::Rewritten(r) = rewrite(first.as_bytes(), &policy, &OpenAiChat, Mode::WithRefs)
    else {
        panic!("rewritten")
    };
    assert!(r.outputs.is_empty());
    // The tools appended, every other byte as sent.
    let tools = OpenAiChat.recall_tools(&r.recall_names).join(",");
    let close = first.rfind("]}").unwrap_or_default();
    assert_eq!(
        r.body,
        format!("{},{tools}{}", &first[..close], &first[close..])
    );
    // A request that declares no tools of its own is left alone, and so is
    // every request while the rule is off.
    let plain = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    assert!(matches!(
        rewrite(plain.as_bytes(), &policy, &OpenAiChat, Mode::WithRefs),
        Outcome::Unchanged(Unchanged::NothingOverBudget)
    ));
    assert!(matches!(
        rewrite(
            first.as_bytes(),
            &aging_policy(0, 0),
            &OpenAiChat,
            Mode::WithRefs
        ),
        Outcome::Unchanged(Unchanged::NothingOverBudget)
    ));
    // Without a store to keep the originals, nothing ages and nothing is offered.
    let b = conversation(&[text_of(1, 5_000), "ok".into()]);
    assert!(matches!(
        rewrite(b.as_bytes(), &policy, &OpenAiChat, Mode::PreviewOnly),
        Outcome::Unchanged(Unchanged::NothingOverBudget)
    ));
}

#[test]
fn an_aged_output_becomes_a_one_line_stub_naming_its_ref() {
    let seen = text_of(7, 5_000);
    let b = conversation(&[seen.clone(), "ok".into()]);
    let Outcome::Rewritten(r) = rewrite(
        b.as_bytes(),
        &aging_policy(1, 0),
        &OpenAiChat,
        Mode::WithRefs,
    ) else {
        panic!("rewritten")
    };
    assert_eq!(r.outputs.len(), 1);
    let o = &r.outputs[0];
    let reference = o.result_ref.clone().unwrap_or_default();
    assert_eq!(
        o.stub,
        format!(
            "[toolstub: tool output shown in full earlier] kind: {}, original_chars: 5000, \
             ref: {reference}. tool_result_read with this ref reads it again.",
            o.synopsis.kind
        )
    );
    assert!(r
        .body
        .contains(&serde_json::to_string(&o.stub).unwrap_or_default()));
    assert!(!r.body.contains("output 7\\n"));
}

/// An Anthropic conversation of one `Read` call a turn, answered by `outputs[t]`.
fn messages_turns(outputs: &[String]) -> String {
    let mut messages = Vec::new();
    for (t, o) in outputs.iter().enumerate() {
        messages.extend(Wire::Messages.turn(t, "Read", &[(o.clone(), false)]));
    }
    Wire::Messages.body(&messages)
}

fn rewritten_with(body: &str, policy: &Policy, protocol: &dyn Protocol) -> Rewritten<'static> {
    let body: &'static str = Box::leak(body.to_string().into_boxed_str());
    match rewrite(body.as_bytes(), policy, protocol, Mode::WithRefs) {
        Outcome::Rewritten(r) => *r,
        Outcome::Unchanged(why) => panic!("unchanged: {why:?}"),
    }
}

#[test]
fn the_prefix_the_next_request_keeps_ends_at_a_cache_breakpoint_on_anthropic() {
    let policy = aging_policy(1, 0);
    let outputs = [text_of(0, 5_000), text_of(1, 5_000), "ok".to_string()];
    // Turns 0 and 1: turn 0's output is aged; turn 1's ages in the next
    // request, so the assistant message that called it ends the prefix.
    let r = rewritten_with(&messages_turns(&outputs[..2]), &policy, &AnthropicMessages);
    let anchor = r.cache_anchor.expect("an anchor");
    let messages = messages_of(&r.body);
    let called = &messages[3];
    assert!(
        r.body[..anchor].ends_with(called.as_str()),
        "{}",
        &r.body[..anchor]
    );
    assert!(
        called.ends_with(r#""input":{},"cache_control":{"type":"ephemeral"}}]}"#),
        "{called}"
    );
    assert_eq!(r.body.matches("cache_control").count(), 1);
    // Restoration candidates still span whole messages of the new body.
    for turn in &r.turns {
        assert!(serde_json::from_str::<Value>(&r.body[turn.span.clone()]).is_ok());
    }
    // The next request keeps that prefix: the same messages, the marker
    // moved on (markers are not part of the provider's cached prefix).
    let next = rewritten_with(&messages_turns(&outputs), &policy, &AnthropicMessages);
    let later = messages_of(&next.body);
    assert_eq!(messages[..3], later[..3]);
    assert_eq!(
        called.replace(r#","cache_control":{"type":"ephemeral"}"#, ""),
        later[3]
    );
    assert!(later[4].contains("shown in full earlier"));
    // The last output is short: nothing ages next, no breakpoint.
    assert_eq!(next.cache_anchor, None);
    assert!(!next.body.contains("cache_control"));
}

#[test]
fn toolstub_adds_a_breakpoint_only_where_the_request_has_room_and_copies_its_lifetime() {
    let policy = aging_policy(1, 0);
    let outputs = [text_of(0, 5_000), text_of(1, 5_000)];
    let body = messages_turns(&outputs);
    let hour = r#"{"type":"ephemeral","ttl":"1h"}"#;
    // The client marks its newest block with a 1-hour entry: ours, before
    // it, lives as long.
    let marked = body.replacen(
        r#""tool_use_id":"call_1_0","#,
        &format!(r#""tool_use_id":"call_1_0","cache_control":{hour},"#),
        1,
    );
    let r = rewritten_with(&marked, &policy, &AnthropicMessages);
    let messages = messages_of(&r.body);
    assert!(
        messages[3].contains(&format!(r#""cache_control":{hour}}}]}}"#)),
        "{}",
        messages[3]
    );
    // Four markers already: none added, the anchor still reported.
    let full = marked.replacen(
        r#""tools":[{"name":"Read","#,
        &format!(
            r#""system":[{{"type":"text","text":"a","cache_control":{hour}}},{{"type":"text","text":"b","cache_control":{hour}}}],"tools":[{{"cache_control":{hour},"name":"Read","#
        ),
        1,
    );
    assert_eq!(full.matches("cache_control").count(), 4);
    let r = rewritten_with(&full, &policy, &AnthropicMessages);
    assert_eq!(r.body.matches("cache_control").count(), 4);
    assert!(r.cache_anchor.is_some());
    // A thinking block takes no marker.
    let thinking = body.replacen(
        r#"{"type":"tool_use","id":"call_1_0","name":"Read","input":{}}"#,
        r#"{"type":"tool_use","id":"call_1_0","name":"Read","input":{}},{"type":"thinking","thinking":"t","signature":"s"}"#,
        1,
    );
    assert_ne!(thinking, body);
    let r = rewritten_with(&thinking, &policy, &AnthropicMessages);
    assert!(!r.body.contains("cache_control"));
    // OpenAI caches automatically: the anchor, no marker.
    let chat = conversation(&outputs);
    let r = rewritten_with(&chat, &policy, &OpenAiChat);
    let anchor = r.cache_anchor.expect("an anchor");
    assert!(r.body[..anchor].ends_with(messages_of(&r.body)[3].as_str()));
    assert!(!r.body.contains("cache_control"));
}

/// A conversation of `small` outputs of 3,000 characters each, then one of
/// `last` characters.
fn late_output(small: usize, last: usize) -> String {
    let mut outputs: Vec<String> = (0..small).map(|i| text_of(i, 3_000)).collect();
    outputs.push(text_of(small, last));
    conversation(&outputs)
}

#[test]
fn a_first_stub_is_not_made_where_the_cached_prompt_costs_more_to_write_again() {
    // 40 turns of 3,000 characters: about 130,000 bytes of cached prompt.
    // An output of 21,000 characters saves about 19,000: 19,000 * (1.25 +
    // 0.1 * 40) < 130,000 * 1.15, so it stays verbatim.
    let body = late_output(40, 21_000);
    assert!(matches!(
        run(&body),
        Outcome::Unchanged(Unchanged::NothingOverBudget)
    ));
    // With the rule off it is made, and the recall tools join the tools.
    let off = Policy {
        first_stub: NO_GATE,
        ..Policy::default()
    };
    let r = rewritten_with(&body, &off, &OpenAiChat);
    assert_eq!(r.outputs.len(), 1);
    assert!(r.body.contains("tool_result_read"));
    // Larger, it pays: 100,000 characters save about 98,000.
    let body = late_output(40, 100_000);
    let r = rewritten_with(&body, &Policy::default(), &OpenAiChat);
    assert_eq!(r.outputs.len(), 1);
}

#[test]
fn an_output_the_gate_kept_verbatim_stays_verbatim_and_later_stubs_cost_nothing_more() {
    // Turn 40 keeps its 21,000 characters; a 100,000-character output at
    // turn 41 pays and is made a stub; turn 40's output is still verbatim,
    // as it was sent.
    let mut outputs: Vec<String> = (0..40).map(|i| text_of(i, 3_000)).collect();
    outputs.push(text_of(40, 21_000));
    outputs.push(text_of(41, 100_000));
    let body = conversation(&outputs);
    let r = rewritten_with(&body, &Policy::default(), &OpenAiChat);
    assert_eq!(r.outputs.len(), 1);
    assert_eq!(r.outputs[0].tool_call_id.as_deref(), Some("call_41"));
    let kept = serde_json::to_string(&outputs[40]).unwrap_or_default();
    assert!(r.body.contains(&kept));
    // Once a stub is made, a later output over the threshold is made a stub
    // whatever its size: nothing before it changes.
    outputs.push(text_of(42, 21_000));
    let body = conversation(&outputs);
    let r = rewritten_with(&body, &Policy::default(), &OpenAiChat);
    let ids: Vec<_> = r
        .outputs
        .iter()
        .map(|o| o.tool_call_id.as_deref())
        .collect();
    assert_eq!(ids, [Some("call_41"), Some("call_42")]);
}

#[test]
fn the_gate_weighs_nothing_when_no_recall_tools_are_added() {
    let body = late_output(40, 21_000);
    let no_recall = Policy {
        recall_enabled: false,
        ..Policy::default()
    };
    let r = rewritten_with(&body, &no_recall, &OpenAiChat);
    assert_eq!(r.outputs.len(), 1);
    match rewrite(
        body.as_bytes(),
        &Policy::default(),
        &OpenAiChat,
        Mode::PreviewOnly,
    ) {
        Outcome::Rewritten(r) => assert_eq!(r.outputs.len(), 1),
        Outcome::Unchanged(why) => panic!("unchanged: {why:?}"),
    }
}

/// A Messages conversation of `turns` small Bash calls, for `model`.
fn thinking_conversation(model: &str, turns: usize) -> String {
    let mut messages = vec![r#"{"role":"user","content":"go"}"#.to_string()];
    for t in 0..turns {
        messages.push(format!(
            r#"{{"role":"assistant","content":[{{"type":"thinking","thinking":"step {t}","signature":"s{t}"}},{{"type":"tool_use","id":"t{t}","name":"Bash","input":{{}}}}]}}"#
        ));
        messages.push(format!(
            r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t{t}","content":"ok {t}"}}]}}"#
        ));
    }
    format!(
        r#"{{"model":"{model}","max_tokens":100,"thinking":{{"type":"adaptive"}},"tools":[{{"name":"Bash","input_schema":{{"type":"object"}}}}],"messages":[{}]}}"#,
        messages.join(",")
    )
}

#[test]
fn a_model_that_binds_its_thinking_gets_the_recall_tools_from_the_first_request() {
    let policy = Policy::default();
    let tools_of = |body: &str| -> Option<String> {
        match rewrite(body.as_bytes(), &policy, &AnthropicMessages, Mode::WithRefs) {
            Outcome::Rewritten(r) => {
                let v: Value = serde_json::from_str(&r.body).ok()?;
                Some(v["tools"].to_string())
            }
            Outcome::Unchanged(_) => None,
        }
    };
    // On a model with preserved thinking, every request carries the same
    // tools, the recall tools among them, before any output is stubbed.
    let first = tools_of(&thinking_conversation("claude-fable-5-1", 0));
    let later = tools_of(&thinking_conversation("claude-fable-5-1", 3));
    assert!(first
        .as_deref()
        .is_some_and(|t| t.contains("tool_result_read")));
    assert_eq!(
        first, later,
        "the tools never change within the conversation"
    );
    // Elsewhere, nothing over budget goes as it came.
    assert_eq!(
        tools_of(&thinking_conversation("claude-sonnet-4-5", 3)),
        None
    );
    // The list is the policy's: empty, the model is like any other.
    let none = Policy {
        tools_from_start: Vec::new(),
        ..Policy::default()
    };
    let body = thinking_conversation("claude-fable-5-1", 1);
    assert!(matches!(
        rewrite(body.as_bytes(), &none, &AnthropicMessages, Mode::WithRefs),
        Outcome::Unchanged(_)
    ));
}

#[test]
fn a_model_that_binds_its_thinking_keeps_every_output_it_has_seen() {
    // Ten turns of 9,000-character outputs, under the threshold, in a
    // window of 20,000 tokens: over it, rescued on another model.
    let window = |model: &str| window::Window {
        table: vec![(tool_policy::Glob::literal(model), 20_000)],
        bytes_per_token_milli: 3_000,
        ..window::Window::default()
    };
    let aging = aging::Aging {
        after_turns: 1,
        floor_chars: 300,
        min_share_permille: 0,
        horizon_permille: 0,
        after_expiry: true,
    };
    for (model, changed) in [("claude-sonnet-4-5", true), ("claude-fable-5-1", false)] {
        let mut body = thinking_conversation(model, 0);
        let mut messages = vec![r#"{"role":"user","content":"go"}"#.to_string()];
        for t in 0..10 {
            messages.push(format!(
                r#"{{"role":"assistant","content":[{{"type":"thinking","thinking":"step {t}","signature":"s{t}"}},{{"type":"tool_use","id":"t{t}","name":"Bash","input":{{}}}}]}}"#
            ));
            messages.push(format!(
                r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t{t}","content":{}}}]}}"#,
                serde_json::to_string(&"line of a log\n".repeat(640)).unwrap_or_default()
            ));
        }
        body = body.replacen(
            r#""messages":[{"role":"user","content":"go"}]"#,
            &format!(r#""messages":[{}]"#, messages.join(",")),
            1,
        );
        for policy in [
            Policy {
                window: window(model),
                ..Policy::default()
            },
            Policy {
                window: window(model),
                aging,
                ..Policy::default()
            },
        ] {
            let stubbed =
                match rewrite(body.as_bytes(), &policy, &AnthropicMessages, Mode::WithRefs) {
                    Outcome::Rewritten(r) => r.outputs.len(),
                    Outcome::Unchanged(_) => 0,
                };
            assert_eq!(stubbed > 0, changed, "{model}");
        }
    }
}

/// [`rewrite_reading_for`] with the requests at which the provider's cache
/// had expired.
fn after_expiry<'b>(
    body: &'b str,
    policy: &Policy,
    expired: &[usize],
) -> (Outcome<'b>, Option<Read>) {
    let facts = RequestFacts {
        expired,
        ..RequestFacts::default()
    };
    rewrite_reading_for(
        body.as_bytes(),
        policy,
        &OpenAiChat,
        Mode::WithRefs,
        &Memo::new(0),
        facts,
    )
}

/// The call ids of the outputs stubbed at the defaults after the cache
/// expired at `expired`.
fn stubbed_after(body: &str, expired: &[usize]) -> Vec<String> {
    match after_expiry(body, &Policy::default(), expired).0 {
        Outcome::Rewritten(r) => r
            .outputs
            .iter()
            .filter_map(|o| o.tool_call_id.clone())
            .collect(),
        Outcome::Unchanged(_) => Vec::new(),
    }
}

#[test]
fn an_expired_cache_releases_the_outputs_the_first_stub_gate_kept() {
    // The gate keeps turn 40's 21,000 characters (see above), and says an
    // expiry would change that. The conversation: the user, then an
    // assistant message and a tool message per turn.
    let mut outputs: Vec<String> = (0..40).map(|i| text_of(i, 3_000)).collect();
    outputs.push(text_of(40, 21_000));
    let body = conversation(&outputs);
    // The gate alone (outputs seen before are aged at an expiry too: the
    // next test).
    let mut policy = Policy::default();
    policy.aging.after_expiry = false;
    let (outcome, read) = after_expiry(&body, &policy, &[]);
    assert!(matches!(
        outcome,
        Outcome::Unchanged(Unchanged::NothingOverBudget)
    ));
    let read = read.expect("read");
    assert_eq!(read.clock.messages, 83);
    assert!(read.clock.expiry_matters);
    // Expired at this request: the whole prompt is written again anyway,
    // so the first stub is made.
    let stubbed = |outcome: Outcome<'_>| match outcome {
        Outcome::Rewritten(r) => r.outputs.iter().map(|o| o.tool_call_id.clone()).collect(),
        Outcome::Unchanged(_) => Vec::new(),
    };
    let (outcome, _) = after_expiry(&body, &policy, &[83]);
    let Outcome::Rewritten(first) = outcome else {
        panic!("not rewritten");
    };
    assert_eq!(first.outputs.len(), 1);
    assert_eq!(first.outputs[0].tool_call_id.as_deref(), Some("call_40"));
    assert!(first.body.contains("tool_result_read"));
    assert!(!first.clock.expiry_matters);
    // Every later request reproduces it byte for byte.
    outputs.push("ok".into());
    let later = conversation(&outputs);
    let (outcome, _) = after_expiry(&later, &policy, &[83]);
    let Outcome::Rewritten(next) = outcome else {
        panic!("not rewritten");
    };
    let kept = messages_of(&first.body);
    assert_eq!(messages_of(&next.body)[..kept.len()], kept[..]);
    // An expiry before the output existed (the request that asked for it,
    // 82 messages) releases nothing; one after this request is not of its
    // history.
    assert!(stubbed(after_expiry(&body, &policy, &[82]).0).is_empty());
    assert!(stubbed(after_expiry(&body, &policy, &[85]).0).is_empty());
    // A conversation with nothing kept has nothing an expiry would change.
    let (_, read) = after_expiry(&late_output(3, 100), &policy, &[]);
    assert!(!read.expect("read").clock.expiry_matters);
}

#[test]
fn an_expired_cache_ages_every_output_the_model_has_seen() {
    // Three outputs of 3,000 characters, under the threshold: verbatim,
    // and an expiry would age those seen before the newest turn.
    let outputs: Vec<String> = (0..3).map(|i| text_of(i, 3_000)).collect();
    let body = conversation(&outputs);
    let policy = Policy::default();
    let (outcome, read) = after_expiry(&body, &policy, &[]);
    assert!(matches!(
        outcome,
        Outcome::Unchanged(Unchanged::NothingOverBudget)
    ));
    assert!(read.expect("read").clock.expiry_matters);
    // Expired at this request (7 messages): turns 0 and 1 age, the newest
    // turn's output, which the model has not seen, stays verbatim.
    let (outcome, _) = after_expiry(&body, &policy, &[7]);
    let Outcome::Rewritten(r) = outcome else {
        panic!("not rewritten");
    };
    let aged: Vec<_> = r
        .outputs
        .iter()
        .map(|o| (o.reason.as_str(), o.tool_call_id.as_deref()))
        .collect();
    assert_eq!(aged, [("aged", Some("call_0")), ("aged", Some("call_1"))]);
    assert!(r.body.contains("tool_result_read"));
    // No cache breakpoint is added: no later request is known to age.
    assert!(r.cache_anchor.is_none());
    // Expired at the request before (5 messages): only turn 0 aged there,
    // and every later request keeps it so.
    let (outcome, _) = after_expiry(&body, &policy, &[5]);
    let Outcome::Rewritten(r) = outcome else {
        panic!("not rewritten");
    };
    assert_eq!(r.outputs.len(), 1);
    assert_eq!(r.outputs[0].tool_call_id.as_deref(), Some("call_0"));
    // Off, an expiry changes nothing.
    let mut off = Policy::default();
    off.aging.after_expiry = false;
    let (outcome, read) = after_expiry(&body, &off, &[7]);
    assert!(matches!(outcome, Outcome::Unchanged(_)));
    assert!(!read.expect("read").clock.expiry_matters);
}

#[test]
fn an_expired_cache_ages_what_the_gate_of_the_aging_rule_kept() {
    let mid = big_json(650);
    let next = big_json(651);
    let outputs = ["a ".repeat(1_500), mid, next, "ok".into()];
    let b = conversation(&outputs);
    let policy = aging_policy(2, 920);
    let reasons = |expired: &[usize], policy: &Policy| match after_expiry(&b, policy, expired).0 {
        Outcome::Rewritten(r) => (
            r.outputs
                .iter()
                .map(|o| format!("{} {}", o.reason, o.tool_call_id.as_deref().unwrap_or("")))
                .collect::<Vec<_>>(),
            r.clock.expiry_matters,
        ),
        Outcome::Unchanged(why) => panic!("unchanged: {why:?}"),
    };
    // Kept by the gate (see above), which an expiry would change.
    assert_eq!(reasons(&[], &policy), (vec![], true));
    // Expired at this request (9 messages): both outputs the model has
    // seen age (turn 0's is under the floor).
    assert_eq!(reasons(&[9], &policy).0, ["aged call_1", "aged call_2"]);
    // Expired at the request whose newest turn was 2: turn 1's aged there,
    // and stays aged.
    assert_eq!(reasons(&[7], &policy).0, ["aged call_1"]);
    // With the setting off, an expiry changes nothing and matters not.
    let mut off = policy.clone();
    off.aging.after_expiry = false;
    assert_eq!(reasons(&[], &off), (vec![], false));
    assert_eq!(reasons(&[9], &off), (vec![], false));
}

#[test]
fn after_a_pause_the_newest_outputs_age_too_where_the_model_answered_them() {
    // Two turns of 3,000 characters, the model's answer, then the person's
    // next message after a pause: the model saw both outputs.
    let outputs: Vec<String> = (0..2).map(|i| text_of(i, 3_000)).collect();
    let mut v: Value = serde_json::from_str(&conversation(&outputs)).expect("json");
    if let Some(m) = v["messages"].as_array_mut() {
        m.push(serde_json::json!({"role": "assistant", "content": "Both read."}));
        m.push(serde_json::json!({"role": "user", "content": "Now fix it."}));
    }
    let body = v.to_string();
    assert_eq!(stubbed_after(&body, &[7]), ["call_0", "call_1"]);
    // Without the answer after them, the newest turn's output is new to
    // the model and stays.
    assert_eq!(stubbed_after(&conversation(&outputs), &[5]), ["call_0"]);
}

/// The identity of a message (what names a prompt-cache expiry point's
/// branch) survives what a client changes when it sends the message again
/// (Anthropic's cache marker moved off it, its keys reordered), and tells
/// apart the same place in two branches (another tool call).
#[test]
fn a_message_identity_survives_a_moved_cache_marker_and_tells_branches_apart() {
    let body = |last: &str| {
        format!(
            r#"{{"model":"claude","max_tokens":9,"messages":[{{"role":"user","content":"go"}},{{"role":"assistant","content":[{{"type":"tool_use","id":"toolu_1","name":"Read","input":{{}}}}]}},{last}]}}"#
        )
    };
    let marked = body(
        r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"x","cache_control":{"type":"ephemeral"}}]}"#,
    );
    let resent = body(
        r#"{"content":[{"content":"x","tool_use_id":"toolu_1","type":"tool_result"}],"role":"user"}"#,
    );
    let other = body(
        r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":"x"}]}"#,
    );
    let identity = |b: &str, count: usize| {
        Reading::of(
            b.as_bytes(),
            &Policy::default(),
            &AnthropicMessages,
            RequestFacts::default(),
        )
        .expect("read")
        .message_identity(&AnthropicMessages, count)
    };
    let first = identity(&marked, 3).expect("an identity");
    assert_eq!(identity(&resent, 3).as_deref(), Some(first.as_str()));
    assert_ne!(identity(&other, 3).as_deref(), Some(first.as_str()));
    assert_eq!(identity(&marked, 2), identity(&other, 2));
    assert_eq!(identity(&marked, 0), None);
    assert_eq!(identity(&marked, 4), None);
}

/// The memo tells decoded text from an encoded literal: a text part whose
/// text spells another output's JSON literal, quotes and escapes included,
/// is another output, with the digest and length of its own text.
#[test]
fn a_text_spelling_another_outputs_literal_is_another_output() {
    let memo = Memo::new(1_000);
    let text = big_json(2_000);
    let literal = serde_json::to_string(&text).expect("literal");
    let a = body_with_outputs(std::slice::from_ref(&text));
    let part = serde_json::json!([{"type": "text", "text": literal}]).to_string();
    let b = a.replace(
        &format!("\"content\":{literal}"),
        &format!("\"content\":{part}"),
    );
    assert_ne!(a, b);
    let digest = |body: &str| match rewrite_with(
        body.as_bytes(),
        &Policy::default(),
        &OpenAiChat,
        Mode::WithRefs,
        &memo,
    ) {
        Outcome::Rewritten(r) => (r.outputs[0].sha256.clone(), r.outputs[0].original_chars),
        Outcome::Unchanged(why) => panic!("unchanged: {why:?}"),
    };
    assert_eq!(
        digest(&a),
        (crate::refs::sha256_hex(&text), text.chars().count())
    );
    assert_eq!(
        digest(&b),
        (crate::refs::sha256_hex(&literal), literal.chars().count()),
        "not the memo's facts of the literal"
    );
}

/// The cached prompt a first stub makes the provider write again holds the
/// tool definitions wherever the body puts them: Claude Code and the
/// OpenAI SDKs send `tools` after the conversation.
#[test]
fn the_first_stubs_prefix_counts_the_tools_after_the_conversation() {
    let body = late_output(10, 30_000);
    let r = rewritten_with(&body, &Policy::default(), &OpenAiChat);
    assert_eq!(r.outputs.len(), 1, "about 35 KB before it: the stub pays");
    let heavy = body.replacen(
        r#""name":"fetch","parameters":{}"#,
        &format!(
            r#""name":"fetch","description":"{}","parameters":{{}}"#,
            "d".repeat(150_000)
        ),
        1,
    );
    let tools_at = heavy.find(r#","tools":"#).expect("tools");
    let tools = &heavy[tools_at + 1..heavy.len() - 1];
    let before = format!("{{{tools},{}}}", &heavy[1..tools_at]);
    assert!(before.starts_with(r#"{"tools":"#), "{}", &before[..40]);
    for body in [&heavy, &before] {
        assert!(
            matches!(run(body), Outcome::Unchanged(Unchanged::NothingOverBudget)),
            "150 KB of tools to write again: the output stays, tools first or last"
        );
    }
}
