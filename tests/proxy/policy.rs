//! Per-tool policy and the conversation budget through the real server, on
//! each of the three rewritten routes: what the upstream receives.

use super::mock::{client, completion, send, Recorded, Reply, Script};
use super::{setup_with, Setup, KEY};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// The three routes, with what their requests and answers look like.
#[derive(Clone, Copy, Debug)]
enum Route {
    Chat,
    Messages,
    Responses,
}

const ROUTES: [Route; 3] = [Route::Chat, Route::Messages, Route::Responses];

impl Route {
    fn path(self) -> &'static str {
        match self {
            Route::Chat => "/v1/chat/completions",
            Route::Messages => "/v1/messages",
            Route::Responses => "/v1/responses",
        }
    }

    /// One turn: the model calls each tool once, then the outputs
    /// (`is_error` on Anthropic where asked).
    fn turn(self, turn: usize, calls: &[(&str, String, bool)]) -> Vec<Value> {
        let id = |i: usize| format!("call_{turn}_{i}");
        match self {
            Route::Chat => {
                let tool_calls: Vec<Value> = calls
                    .iter()
                    .enumerate()
                    .map(|(i, (tool, _, _))| json!({"id": id(i), "type": "function", "function": {"name": tool, "arguments": "{}"}}))
                    .collect();
                let mut m =
                    vec![json!({"role": "assistant", "content": null, "tool_calls": tool_calls})];
                m.extend(calls.iter().enumerate().map(|(i, (_, output, _))| {
                    json!({"role": "tool", "tool_call_id": id(i), "content": output})
                }));
                m
            }
            Route::Messages => {
                let uses: Vec<Value> = calls
                    .iter()
                    .enumerate()
                    .map(|(i, (tool, _, _))| json!({"type": "tool_use", "id": id(i), "name": tool, "input": {}}))
                    .collect();
                let results: Vec<Value> = calls
                    .iter()
                    .enumerate()
                    .map(|(i, (_, output, error))| {
                        let mut r =
                            json!({"type": "tool_result", "tool_use_id": id(i), "content": output});
                        if *error {
                            r["is_error"] = json!(true);
                        }
                        r
                    })
                    .collect();
                vec![
                    json!({"role": "assistant", "content": uses}),
                    json!({"role": "user", "content": results}),
                ]
            }
            Route::Responses => {
                let mut m =
                    vec![json!({"type": "reasoning", "id": format!("rs_{turn}"), "summary": []})];
                m.extend(calls.iter().enumerate().map(|(i, (tool, _, _))| {
                    json!({"type": "function_call", "call_id": id(i), "name": tool, "arguments": "{}"})
                }));
                m.extend(calls.iter().enumerate().map(|(i, (_, output, _))| {
                    json!({"type": "function_call_output", "call_id": id(i), "output": output})
                }));
                m
            }
        }
    }

    /// The request; members in prompt order, the conversation last.
    fn body(self, messages: &[Value]) -> String {
        let conversation = |opening: Value| {
            let mut all = vec![opening];
            all.extend(messages.iter().cloned());
            Value::Array(all).to_string()
        };
        match self {
            Route::Chat => format!(
                r#"{{"model":"gpt-test","tools":[{{"type":"function","function":{{"name":"Read","parameters":{{}}}}}}],"messages":{}}}"#,
                conversation(json!({"role": "user", "content": "go"}))
            ),
            Route::Messages => format!(
                r#"{{"model":"claude-test","max_tokens":100,"tools":[{{"name":"Read","input_schema":{{}}}}],"messages":{}}}"#,
                conversation(json!({"role": "user", "content": "go"}))
            ),
            Route::Responses => format!(
                r#"{{"model":"gpt-5","tools":[{{"type":"function","name":"Read","parameters":{{}}}}],"input":{}}}"#,
                conversation(json!({"role": "user", "content": "go"}))
            ),
        }
    }

    /// Each tool output's text as the upstream received it, by call id.
    fn outputs(self, body: &[u8]) -> Vec<(String, String)> {
        let v: Value = serde_json::from_slice(body).expect("json");
        let mut out = Vec::new();
        match self {
            Route::Chat => {
                for m in v["messages"].as_array().expect("messages") {
                    if m["role"] == "tool" {
                        out.push((str_of(&m["tool_call_id"]), str_of(&m["content"])));
                    }
                }
            }
            Route::Messages => {
                for m in v["messages"].as_array().expect("messages") {
                    for b in m["content"].as_array().into_iter().flatten() {
                        if b["type"] == "tool_result" {
                            out.push((str_of(&b["tool_use_id"]), str_of(&b["content"])));
                        }
                    }
                }
            }
            Route::Responses => {
                for i in v["input"].as_array().expect("input") {
                    if i["type"] == "function_call_output" {
                        out.push((str_of(&i["call_id"]), str_of(&i["output"])));
                    }
                }
            }
        }
        out
    }
}

fn str_of(v: &Value) -> String {
    v.as_str().expect("a string").to_string()
}

/// Answers each route in its own format, never calling a tool.
fn answers() -> Script {
    Arc::new(|r: &Recorded| {
        let body = if r.path_and_query.starts_with("/v1/messages") {
            json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
                "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "stop_sequence": null,
                "usage": {"input_tokens": 5, "output_tokens": 1}
            })
            .to_string()
        } else if r.path_and_query.starts_with("/v1/responses") {
            json!({
                "id": "resp_1", "object": "response", "created_at": 1, "status": "completed", "model": "gpt-5",
                "output": [{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                            "content": [{"type": "output_text", "text": "done", "annotations": []}]}],
                "usage": {"input_tokens": 5, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 1,
                          "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 6}
            })
            .to_string()
        } else {
            completion("done")
        };
        Reply::Full(
            200,
            vec![("content-type", "application/json".to_string())],
            body,
        )
    })
}

async fn post(s: &Setup, route: Route, body: String) -> (u16, http::HeaderMap) {
    let (status, headers, _) = send(
        &client(),
        "POST",
        s.url(route.path()),
        &[
            ("authorization", KEY),
            ("x-api-key", "sk-ant-test"),
            ("anthropic-version", "2023-06-01"),
            ("content-type", "application/json"),
        ],
        body,
    )
    .await;
    (status.as_u16(), headers)
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

fn reason_of(stub: &str) -> Option<&str> {
    stub.starts_with("[toolstub: tool output externalized]")
        .then(|| stub.lines().find_map(|l| l.strip_prefix("reason: ")))
        .flatten()
}

#[tokio::test]
async fn tool_rules_give_a_threshold_and_keep_outputs_inline_on_every_route() {
    let s = setup_with(
        answers(),
        &[(
            "TOOLSTUB_EXTERNALIZATION_TOOLS",
            r#"[{ match = "mcp__github__*", externalize = "never" }, { match = "tin?", threshold_chars = 3000 }]"#,
        )],
    )
    .await;
    for route in ROUTES {
        let calls = [
            ("mcp__github__get_file", text_of(1, 50_000), false),
            ("tiny", text_of(2, 3_001), false),
            ("tin", text_of(3, 3_001), false),
            ("Read", text_of(4, 50_000), false),
        ];
        let (status, headers) = post(&s, route, route.body(&route.turn(0, &calls))).await;
        assert_eq!(status, 200, "{route:?}");
        assert_eq!(headers["x-toolstub-externalized"], "2", "{route:?}");
        let got = route.outputs(&s.mock.last().body);
        assert_eq!(got[0].1, calls[0].1, "{route:?}: never, verbatim");
        assert_eq!(reason_of(&got[1].1), Some("single_threshold"), "{route:?}");
        assert!(got[1].1.contains("tool_name: tiny"));
        assert_eq!(got[2].1, calls[2].1, "{route:?}: the rule does not match");
        assert_eq!(reason_of(&got[3].1), Some("single_threshold"), "{route:?}");
    }
    s.proxy.shutdown().await;
}

/// A growing conversation replayed turn by turn: every request the upstream
/// receives starts with the previous one byte for byte, up to where its
/// conversation closed (the recall tools, first offered in `tools` ahead of
/// the conversation, aside); outputs over the floor are stubs from the turn
/// the budget is passed, each as it first appears, and stay what they were.
#[tokio::test]
async fn a_conversation_over_its_budget_stubs_new_outputs_and_never_what_it_sent() {
    let s = setup_with(
        answers(),
        &[
            (
                "TOOLSTUB_EXTERNALIZATION_CONVERSATION_INLINE_BUDGET_CHARS",
                "25000",
            ),
            ("TOOLSTUB_EXTERNALIZATION_CONVERSATION_FLOOR_CHARS", "4000"),
            // The rule under test alone: turn 2's first stub would not
            // repay the 26,000 characters before it.
            ("TOOLSTUB_EXTERNALIZATION_FIRST_STUB_GATE", "false"),
        ],
    )
    .await;
    for route in ROUTES {
        let mut messages = Vec::new();
        let mut previous: Option<Vec<u8>> = None;
        let mut fates: Vec<(String, Option<String>)> = Vec::new();
        for turn in 0..8 {
            // One 9,000-character output a turn, and a 4,000 one (the floor).
            let calls = [
                ("Read", text_of(turn * 2, 9_000), false),
                ("Grep", text_of(turn * 2 + 1, 4_000), false),
            ];
            messages.extend(route.turn(turn, &calls));
            let (status, headers) = post(&s, route, route.body(&messages)).await;
            assert_eq!(status, 200);
            let sent = s.mock.last().body.to_vec();
            if let Some(before) = &previous {
                let open = &before[..before.len() - 2];
                let offered = |b: &[u8]| String::from_utf8_lossy(b).contains("tool_result_read");
                if offered(before) {
                    assert!(
                        sent.starts_with(open),
                        "{route:?} turn {turn}: bytes sent before changed"
                    );
                } else {
                    let text = String::from_utf8_lossy(open);
                    let now = String::from_utf8_lossy(&sent);
                    let key = ["\"messages\":[", "\"input\":["]
                        .into_iter()
                        .find(|k| text.contains(k))
                        .expect("a conversation");
                    let (a, b) = (text.find(key).expect("key"), now.find(key).expect("key"));
                    assert!(
                        now[b..].starts_with(&text[a..]),
                        "{route:?} turn {turn}: the earlier conversation changed"
                    );
                }
            }
            let got = route.outputs(&sent);
            for (i, (id, text)) in got.iter().enumerate() {
                let fate = reason_of(text).map(str::to_string);
                match fates.get(i) {
                    Some((was_id, was)) => {
                        assert_eq!((was_id, was), (id, &fate), "{route:?} turn {turn}")
                    }
                    None => fates.push((id.clone(), fate)),
                }
            }
            let stubs_now = got.iter().filter(|(_, t)| reason_of(t).is_some()).count();
            match headers.get("x-toolstub-externalized") {
                Some(n) => assert_eq!(n.to_str().ok(), Some(stubs_now.to_string().as_str())),
                None => assert_eq!(stubs_now, 0, "{route:?} turn {turn}"),
            }
            previous = Some(sent);
        }
        // 13,000 a turn: after turn 1 (26,000) the budget is passed; turn
        // 1's Grep output came after 22,000 only.
        let expected: Vec<Option<&str>> = (0..8)
            .flat_map(|turn| match turn {
                0 | 1 => [None, None],
                _ => [Some("conversation_budget"), None],
            })
            .collect();
        let got: Vec<Option<&str>> = fates.iter().map(|(_, f)| f.as_deref()).collect();
        assert_eq!(got, expected, "{route:?}");
    }
    let (_, _, metrics) = send(&client(), "GET", s.url("/metrics"), &[], String::new()).await;
    let metrics = String::from_utf8_lossy(&metrics);
    // Counted per request carrying a stub: 1 + 2 + ... + 6 per route.
    assert!(
        metrics.contains(
            "toolstub_outputs_externalized_total{kind=\"text\",reason=\"conversation_budget\"} 63"
        ),
        "{metrics}"
    );
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn an_anthropic_error_stays_verbatim_under_the_conversation_budget() {
    let s = setup_with(
        answers(),
        &[
            (
                "TOOLSTUB_EXTERNALIZATION_CONVERSATION_INLINE_BUDGET_CHARS",
                "10000",
            ),
            ("TOOLSTUB_EXTERNALIZATION_CONVERSATION_FLOOR_CHARS", "1000"),
        ],
    )
    .await;
    let route = Route::Messages;
    let calls = [
        ("Read", text_of(1, 12_000), false),
        ("Bash", text_of(2, 5_000), true),
        ("Bash", text_of(3, 5_000), false),
    ];
    let (status, headers) = post(&s, route, route.body(&route.turn(0, &calls))).await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-toolstub-externalized"], "1");
    let got = route.outputs(&s.mock.last().body);
    assert_eq!(got[0].1, calls[0].1);
    assert_eq!(got[1].1, calls[1].1, "the error is sent as it came");
    assert_eq!(reason_of(&got[2].1), Some("conversation_budget"));
    s.proxy.shutdown().await;
}

#[test]
fn an_invalid_tool_pattern_stops_the_start_up_with_the_key_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("toolstub.toml");
    std::fs::write(
        &config,
        "[[externalization.tools]]\nmatch = \"Read\"\nexternalize = \"never\"\n\n[[externalization.tools]]\nmatch = \"mcp__[gh]*\"\nthreshold_chars = 5000\n",
    )
    .expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolstub"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .arg("--db")
        .arg(dir.path().join("t.db"))
        .env_remove("RUST_LOG")
        .output()
        .expect("run toolstub");
    assert!(!out.status.success(), "it must not start");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("externalization.tools[1].match") && stderr.contains("mcp__[gh]*"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("t.db").exists(),
        "stopped before opening the store"
    );
}

/// The conversation's messages (or items) as the upstream received them,
/// without `cache_control` markers (not part of the cached prefix).
fn conversation_of(body: &[u8]) -> Vec<Value> {
    let mut v: Value = serde_json::from_slice(body).expect("json");
    let key = if v.get("input").is_some() {
        "input"
    } else {
        "messages"
    };
    let mut list = v[key].take();
    toolstub::protocol::anthropic::cache_control::strip_markers(&mut list);
    list.as_array().cloned().expect("a conversation")
}

/// The aging rule through the real server, on each route, a conversation
/// replayed turn by turn: the recall tools from the first request; every
/// output verbatim in the request that first carries it and a one-line
/// stub from the next on; every earlier message sent again as it was; on
/// Anthropic's route one breakpoint of toolstub's at the end of the prefix
/// the next request keeps (the message that called the newest output).
#[tokio::test]
async fn aged_outputs_become_one_line_stubs_after_one_turn_on_every_route() {
    let s = setup_with(
        answers(),
        &[
            ("TOOLSTUB_EXTERNALIZATION_AGED_AFTER_TURNS", "1"),
            ("TOOLSTUB_EXTERNALIZATION_AGED_FLOOR_CHARS", "1000"),
            ("TOOLSTUB_EXTERNALIZATION_AGED_MIN_SHARE", "0"),
        ],
    )
    .await;
    for route in ROUTES {
        let mut messages = Vec::new();
        let (status, _) = post(&s, route, route.body(&messages)).await;
        assert_eq!(status, 200);
        let first = String::from_utf8_lossy(&s.mock.last().body).to_string();
        assert!(
            first.contains("tool_result_read"),
            "{route:?}: offered at once"
        );
        let mut previous: Option<Vec<Value>> = None;
        for turn in 0..4 {
            let calls = [("Read", text_of(10 + turn, 3_000), false)];
            messages.extend(route.turn(turn, &calls));
            let (status, headers) = post(&s, route, route.body(&messages)).await;
            assert_eq!(status, 200);
            let sent = s.mock.last().body.to_vec();
            let got = route.outputs(&sent);
            assert_eq!(got.len(), turn + 1);
            assert_eq!(
                got[turn].1, calls[0].1,
                "{route:?} turn {turn}: verbatim at first"
            );
            for (id, text) in &got[..turn] {
                assert!(
                    text.starts_with("[toolstub: tool output shown in full earlier] kind: ")
                        && text.contains(&format!("ref: tr_{id}_"))
                        && !text.contains('\n'),
                    "{route:?} turn {turn}: {text}"
                );
            }
            let aged = headers
                .get("x-toolstub-externalized")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("0")
                .to_string();
            assert_eq!(aged, turn.to_string(), "{route:?} turn {turn}");
            // Everything the previous request sent before its newest turn's
            // output, sent again as it was.
            let now = conversation_of(&sent);
            if let Some(before) = &previous {
                let kept = before.len() - 1;
                assert_eq!(before[..kept], now[..kept], "{route:?} turn {turn}");
            }
            if let Route::Messages = route {
                let text = String::from_utf8_lossy(&sent);
                assert_eq!(
                    text.matches("cache_control").count(),
                    1,
                    "{route:?} turn {turn}"
                );
                let v: Value = serde_json::from_slice(&sent).expect("json");
                let all = v["messages"].as_array().expect("messages");
                let caller = &all[all.len() - 2];
                assert_eq!(caller["role"], "assistant");
                assert_eq!(
                    caller["content"][0]["cache_control"],
                    json!({"type": "ephemeral"}),
                    "{turn}"
                );
            }
            previous = Some(now);
        }
    }
    s.proxy.shutdown().await;
}

/// A conversation's first stub is made only where it repays the cached
/// prompt it makes the provider write again: a 21,000-character output
/// after 40 turns of history goes upstream verbatim, byte for byte, on
/// every route; a 100,000-character one at the next turn is a stub, and
/// the first stays verbatim.
#[tokio::test]
async fn a_late_first_stub_that_would_not_repay_the_cached_prompt_is_not_made() {
    let s = setup_with(answers(), &[]).await;
    for route in ROUTES {
        let mut messages = Vec::new();
        for turn in 0..40 {
            messages.extend(route.turn(turn, &[("Bash", text_of(turn, 3_000), false)]));
        }
        let late = text_of(40, 21_000);
        messages.extend(route.turn(40, &[("Bash", late.clone(), false)]));
        let body = route.body(&messages);
        let (status, headers) = post(&s, route, body.clone()).await;
        assert_eq!(status, 200, "{route:?}");
        assert!(
            headers.get("x-toolstub-externalized").is_none(),
            "{route:?}"
        );
        assert_eq!(
            s.mock.last().body,
            body.as_bytes(),
            "{route:?}: byte for byte"
        );
        messages.extend(route.turn(41, &[("Bash", text_of(41, 100_000), false)]));
        let (status, headers) = post(&s, route, route.body(&messages)).await;
        assert_eq!(status, 200, "{route:?}");
        assert_eq!(headers["x-toolstub-externalized"], "1", "{route:?}");
        let got = route.outputs(&s.mock.last().body);
        assert_eq!(got[40].1, late, "{route:?}: kept verbatim for good");
        assert_eq!(reason_of(&got[41].1), Some("single_threshold"), "{route:?}");
    }
    s.proxy.shutdown().await;
}

/// The round after the last recall round goes without the recall tools on
/// Chat Completions, and makes every choice the rounds before it made: the
/// output the first-stub rule kept verbatim stays verbatim (the model read
/// it so in round 1), the stub is the same stub, its original stored.
#[tokio::test]
async fn the_last_round_without_the_recall_tools_keeps_the_first_rounds_choices() {
    use super::recall::{answer, body_json, offers, stub_ref, tool_call_reply};
    let script: Script = Arc::new(|r: &Recorded| {
        let request = body_json(r);
        match stub_ref(&request) {
            Some(reference) if offers(&request, "tool_result_read") => tool_call_reply(
                vec![(
                    "rc_1".to_string(),
                    "tool_result_read",
                    json!({"ref": reference, "limit": 3}),
                )],
                None,
            ),
            _ => answer("done"),
        }
    });
    let s = setup_with(script, &[("TOOLSTUB_RECALL_MAX_ROUNDS", "1")]).await;
    let route = Route::Chat;
    let mut messages = Vec::new();
    for turn in 0..40 {
        messages.extend(route.turn(turn, &[("Bash", text_of(turn, 3_000), false)]));
    }
    let late = text_of(40, 21_000);
    messages.extend(route.turn(40, &[("Bash", late.clone(), false)]));
    messages.extend(route.turn(41, &[("Bash", text_of(41, 100_000), false)]));
    let (status, _) = post(&s, route, route.body(&messages)).await;
    assert_eq!(status, 200);
    let rounds = s.mock.requests();
    assert_eq!(rounds.len(), 2, "one recall round, then the last");
    let (first, last) = (body_json(&rounds[0]), body_json(&rounds[1]));
    assert!(offers(&first, "tool_result_read"));
    assert!(!offers(&last, "tool_result_read"));
    let (first, last) = (
        route.outputs(&rounds[0].body),
        route.outputs(&rounds[1].body),
    );
    assert_eq!(first[40].1, late, "the first stub would not have repaid");
    assert_eq!(reason_of(&first[41].1), Some("single_threshold"));
    let changed: Vec<&str> = first
        .iter()
        .zip(&last)
        .filter(|(a, b)| a != b)
        .map(|(a, _)| a.0.as_str())
        .collect();
    assert!(changed.is_empty(), "changed in the last round: {changed:?}");
    s.proxy.shutdown().await;
}

/// The context-window rescue through the real server, on each route: with
/// a window of 20,000 tokens (54,000 bytes at 3 bytes a token, less 10%;
/// brought under 70%),
/// a conversation of 9,000-character outputs goes upstream under it, every
/// request; outputs the model has seen become one-line stubs (reason
/// `context_window`), the newest stays verbatim, a stub once sent is sent
/// again as it was, and each original reads back from the store.
#[tokio::test]
async fn a_conversation_over_the_window_is_sent_under_it_and_reads_back() {
    let s = setup_with(
        answers(),
        &[
            (
                "TOOLSTUB_CONTEXT_WINDOW_MODELS",
                r#"[{ match = "*", tokens = 20000 }]"#,
            ),
            ("TOOLSTUB_CONTEXT_WINDOW_BYTES_PER_TOKEN", "3"),
            ("TOOLSTUB_CONTEXT_WINDOW_AIM", "0.7"),
        ],
    )
    .await;
    for route in ROUTES {
        let mut messages = Vec::new();
        let mut previous: Vec<(String, String)> = Vec::new();
        let mut rescued = 0;
        for turn in 0..10 {
            let calls = [("Read", text_of(100 * turn + route as usize, 9_000), false)];
            messages.extend(route.turn(turn, &calls));
            let body = route.body(&messages);
            let (status, _) = post(&s, route, body.clone()).await;
            assert_eq!(status, 200);
            let sent = s.mock.last().body.to_vec();
            assert!(
                sent.len() <= 54_000,
                "{route:?} turn {turn}: {}",
                sent.len()
            );
            let got = route.outputs(&sent);
            assert_eq!(got[turn].1, calls[0].1, "{route:?} turn {turn}: newest");
            for (i, (id, text)) in got[..turn].iter().enumerate() {
                let stub = text.starts_with("[toolstub: tool output shown in full earlier]");
                if let Some((_, was)) = previous.get(i) {
                    assert!(
                        was == text || stub && !was.starts_with("[toolstub"),
                        "{route:?} turn {turn}: {id} changed"
                    );
                }
                if !stub {
                    continue;
                }
                assert!(!text.contains('\n'), "{text}");
                let reference = text
                    .split("ref: ")
                    .nth(1)
                    .and_then(|t| t.split(". ").next())
                    .expect("a ref");
                if previous.get(i).is_some_and(|(_, was)| was != text) {
                    rescued += 1;
                    let (status, _, read) = send(
                        &client(),
                        "GET",
                        s.url(&format!("/toolstub/v1/results/{reference}?limit=-1")),
                        &[("authorization", KEY)],
                        "",
                    )
                    .await;
                    assert_eq!(status, 200, "{reference}");
                    let v: Value = serde_json::from_slice(&read).expect("json");
                    assert_eq!(v["content"], json!(previous[i].1), "{reference}");
                }
            }
            previous = got;
        }
        assert!(rescued >= 4, "{route:?}: {rescued}");
    }
    s.proxy.shutdown().await;
}

/// A client that asks for the long context window (`anthropic-beta:
/// context-1m-*`) is held to 1M tokens, not to its model's table entry: the
/// conversation the rescue would bring under 20,000 tokens goes upstream
/// as sent.
#[tokio::test]
async fn a_client_asking_for_the_long_context_window_is_not_rescued_under_the_short_one() {
    let s = setup_with(
        answers(),
        &[(
            "TOOLSTUB_CONTEXT_WINDOW_MODELS",
            r#"[{ match = "*", tokens = 20000 }]"#,
        )],
    )
    .await;
    let route = Route::Messages;
    let mut messages = Vec::new();
    for turn in 0..8 {
        messages.extend(route.turn(turn, &[("Read", text_of(turn, 9_000), false)]));
    }
    let body = route.body(&messages);
    let (status, headers, _) = send_beta(
        &s,
        route,
        Some("fine-grained-tool-streaming-2025-05-14, context-1m-2025-08-07"),
        body.clone(),
    )
    .await;
    assert_eq!(status, 200);
    assert!(headers.get("x-toolstub-externalized").is_none());
    assert_eq!(s.mock.last().body, body.as_bytes(), "sent as it came");
    // Without the beta, the same conversation is rescued.
    let (status, headers, _) = send_beta(&s, route, None, body.clone()).await;
    assert_eq!(status, 200);
    assert!(headers.get("x-toolstub-externalized").is_some());
    assert!(s.mock.last().body.len() < body.len());
    s.proxy.shutdown().await;
}

async fn send_beta(
    s: &Setup,
    route: Route,
    beta: Option<&str>,
    body: String,
) -> (http::StatusCode, http::HeaderMap, Vec<u8>) {
    let mut headers = vec![
        ("authorization", KEY),
        ("x-api-key", "sk-ant-test"),
        ("anthropic-version", "2023-06-01"),
        ("content-type", "application/json"),
    ];
    if let Some(beta) = beta {
        headers.push(("anthropic-beta", beta));
    }
    let (status, headers, body) =
        send(&client(), "POST", s.url(route.path()), &headers, body).await;
    (status, headers, body.to_vec())
}

/// A proxy whose prompt cache lasts 1 s, after two turns of a conversation
/// (each with a 3,000-character output, gone byte for byte) and a pause
/// longer than that: the proxy and the turns' messages.
async fn two_turns_then_a_pause(route: Route) -> (Setup, Vec<Value>) {
    let s = setup_with(
        answers(),
        &[("TOOLSTUB_EXTERNALIZATION_PROMPT_CACHE_TTL_MS", "1000")],
    )
    .await;
    let mut messages = Vec::new();
    for turn in 0..2 {
        messages.extend(route.turn(turn, &[("Read", text_of(turn, 3_000), false)]));
        let body = route.body(&messages);
        let (status, _) = post(&s, route, body.clone()).await;
        assert_eq!(status, 200);
        assert_eq!(s.mock.last().body, body.as_bytes(), "{route:?} turn {turn}");
    }
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    (s, messages)
}

/// The conversation's next turn (a fourth) keeps every message of `sent`,
/// the body its last request went upstream as.
async fn next_turn_keeps(s: &Setup, route: Route, messages: &mut Vec<Value>, sent: &[u8]) {
    messages.extend(route.turn(3, &[("Read", text_of(3, 3_000), false)]));
    let (status, _) = post(s, route, route.body(messages)).await;
    assert_eq!(status, 200);
    let before = conversation_of(sent);
    let now = conversation_of(&s.mock.last().body);
    assert_eq!(before[..], now[..before.len()], "{route:?}");
}

/// After the provider's cache expired (a pause longer than
/// `prompt_cache_ttl_ms`, here 1 s), the outputs the model saw in earlier
/// requests become stubs there, on every route; every retry of that
/// request, however late, sends the same bytes, and so does every later
/// request before the new turn. Within the lifetime, requests go byte for
/// byte.
#[tokio::test]
async fn after_the_cache_expired_seen_outputs_become_stubs_and_retries_agree() {
    for route in ROUTES {
        let (s, mut messages) = two_turns_then_a_pause(route).await;
        messages.extend(route.turn(2, &[("Read", text_of(2, 3_000), false)]));
        let body = route.body(&messages);
        let (status, headers) = post(&s, route, body.clone()).await;
        assert_eq!(status, 200);
        assert_eq!(headers["x-toolstub-externalized"], "2", "{route:?}");
        let sent = s.mock.last().body.to_vec();
        let got = route.outputs(&sent);
        for (id, text) in &got[..2] {
            assert!(
                text.starts_with("[toolstub: tool output shown in full earlier]")
                    && text.contains(&format!("ref: tr_{id}_")),
                "{route:?}: {text}"
            );
        }
        assert_eq!(
            got[2].1,
            text_of(2, 3_000),
            "{route:?}: the new output verbatim"
        );
        assert!(String::from_utf8_lossy(&sent).contains("tool_result_read"));
        // Retries, at once and after another pause: the same bytes.
        for pause in [0, 1_300] {
            tokio::time::sleep(Duration::from_millis(pause)).await;
            let (status, _) = post(&s, route, body.clone()).await;
            assert_eq!(status, 200);
            assert_eq!(
                s.mock.last().body,
                sent,
                "{route:?}: retry after {pause} ms"
            );
        }
        next_turn_keeps(&s, route, &mut messages, &sent).await;
        s.proxy.shutdown().await;
    }
}

/// A fork of a conversation (its history up to a turn, then turns of its
/// own: a message edited and sent again) shares its session and clock, but
/// not a point recorded on the other branch after they parted: a fork
/// whose cache is warm goes as it came, and the first branch, continuing,
/// keeps every byte it sent.
#[tokio::test]
async fn a_fork_does_not_take_the_other_branchs_cache_expiry() {
    for route in ROUTES {
        let (s, shared) = two_turns_then_a_pause(route).await;
        let mut first = shared.clone();
        first.extend(route.turn(2, &[("Read", text_of(2, 3_000), false)]));
        let (status, headers) = post(&s, route, route.body(&first)).await;
        assert_eq!(status, 200);
        assert_eq!(
            headers["x-toolstub-externalized"], "2",
            "{route:?}: the first branch found the cache expired"
        );
        let first_sent = s.mock.last().body.to_vec();
        // The fork, at once: longer than the first branch's request, its
        // cache warm. It goes as it came.
        let mut fork = shared.clone();
        fork.extend(route.turn(5, &[("Read", text_of(5, 3_000), false)]));
        fork.extend(route.turn(6, &[("Read", text_of(6, 3_000), false)]));
        let body = route.body(&fork);
        let (status, headers) = post(&s, route, body.clone()).await;
        assert_eq!(status, 200);
        assert_eq!(
            s.mock.last().body,
            body.as_bytes(),
            "{route:?}: the fork took the other branch's expiry"
        );
        assert!(
            headers.get("x-toolstub-externalized").is_none(),
            "{route:?}"
        );
        // The first branch, continuing, keeps what it sent.
        next_turn_keeps(&s, route, &mut first, &first_sent).await;
        s.proxy.shutdown().await;
    }
}
