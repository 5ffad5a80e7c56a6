//! The request rewrite's cost for a chat body carrying one ~1 MB JSON tool
//! output (the load benchmark's "1 MB" request), phase by phase: the whole
//! rewrite on first sight (memo empty: decode, SHA-256, synopsis) and on a
//! repeated turn (memo warm: parse, memo lookup, splice), and the parts.
//!
//! Then a Claude-Code-shaped conversation (system blocks, tool
//! definitions, thinking, 30 turns of 5-30 KB tool results, one 1 MB
//! result) in each API's shape, the Anthropic adapter beside the chat one
//! on the same contents (`rewrite/claude_code/...`), first seen and
//! repeated.
//!
//! And the same 1 MB output as a Responses `function_call_output` (a
//! string, and four `input_text` parts: `rewrite/responses_*`), and a
//! Codex-shaped Responses conversation on the same contents
//! (`rewrite/codex/responses/...`: developer and user messages, reasoning
//! items with `encrypted_content`, 30 rounds of `exec_command` calls whose
//! outputs carry Codex's wrapper), beside the other two.
//!
//! Then the stream splicers (`splice/...`): the CPU each protocol's
//! splicer spends on one streamed answer of 20 events, the load
//! benchmark's mock's (`examples/support`), from the SSE parser to the
//! closing bytes, as the proxy runs them when the recall tools are offered.
//!
//! Run: `cargo bench --bench rewrite`. CPU only, no I/O; the proxy's added
//! latency is the load benchmark's job (`scripts/load`).

#[path = "../examples/support/mod.rs"]
mod support;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::{json, Value};
use std::hint::black_box;
use std::time::Duration;
use toolstub::protocol::anthropic::AnthropicMessages;
use toolstub::protocol::openai_chat::OpenAiChat;
use toolstub::protocol::responses::OpenAiResponses;
use toolstub::protocol::{json_text, Content, Protocol};
use toolstub::rewrite::memo::Memo;
use toolstub::rewrite::{rewrite_with, Mode, Outcome, Policy};
use toolstub::synopsis::{synopsize, Hints};

/// The same body as `examples/loadbench.rs` builds: a JSON array of user
/// objects of about 1 MB, as the content string of one tool message.
fn body() -> String {
    let mut items = Vec::new();
    let mut len = 0;
    let mut i = 0u64;
    while len < 1_000_000 {
        let item = format!("{{\"id\":{i},\"salt\":0,\"name\":\"user {i}\",\"email\":\"user{i}@example.com\",\"active\":true}}");
        len += item.len() + 1;
        items.push(item);
        i += 1;
    }
    let output = format!("[{}]", items.join(","));
    serde_json::json!({
        "model": "m",
        "messages": [
            {"role": "user", "content": "list the users"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "list_users", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": output},
        ]
    })
    .to_string()
}

/// [`body`]'s output as the `tool_result` of a messages body (as
/// `examples/loadbench.rs` sends it): a string, or (`blocks`) four text
/// blocks cut between array items.
fn messages_1mb(blocks: bool) -> String {
    let output = large_output_salted(0);
    let content = if blocks {
        Value::Array(
            quarters(&output)
                .into_iter()
                .map(|text| json!({"type": "text", "text": text}))
                .collect(),
        )
    } else {
        Value::String(output)
    };
    json!({
        "model": "claude-mock",
        "max_tokens": 1024,
        "messages": [
            {"role": "user", "content": "list the users"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "list_users", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": content}]},
        ]
    })
    .to_string()
}

/// [`body`]'s output as the `function_call_output` of a Responses body: a
/// string, or (`parts`) four `input_text` parts cut between array items.
fn responses_1mb(parts: bool) -> String {
    let output = large_output_salted(0);
    let output = if parts {
        Value::Array(
            quarters(&output)
                .into_iter()
                .map(|text| json!({"type": "input_text", "text": text}))
                .collect(),
        )
    } else {
        Value::String(output)
    };
    json!({
        "model": "m",
        "input": [
            {"type": "message", "role": "user", "content": "list the users"},
            {"type": "function_call", "call_id": "call_1", "name": "list_users", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": output},
        ]
    })
    .to_string()
}

/// A JSON array's text in four pieces cut between its items.
fn quarters(output: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut from = 0;
    for k in 1..4 {
        let at = output.len() * k / 4;
        let cut = output[at..]
            .find("},{")
            .map_or(output.len(), |i| at + i + 1);
        parts.push(&output[from..cut]);
        from = cut;
    }
    parts.push(&output[from..]);
    parts
}

fn rewrite(c: &mut Criterion) {
    let body = body();
    let policy = Policy::default();
    let mut group = c.benchmark_group("rewrite");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.measurement_time(Duration::from_secs(4));
    group.sample_size(30);

    group.bench_function("first_seen_1MB", |b| {
        b.iter(|| {
            let memo = Memo::new(0);
            let out = rewrite_with(body.as_bytes(), &policy, &OpenAiChat, Mode::WithRefs, &memo);
            assert!(matches!(out, Outcome::Rewritten(_)));
            black_box(out);
        })
    });
    let memo = Memo::new(16);
    rewrite_with(body.as_bytes(), &policy, &OpenAiChat, Mode::WithRefs, &memo);
    group.bench_function("repeated_1MB", |b| {
        b.iter(|| {
            black_box(rewrite_with(
                body.as_bytes(),
                &policy,
                &OpenAiChat,
                Mode::WithRefs,
                &memo,
            ))
        })
    });
    // The same output as an Anthropic `tool_result`: its content a string,
    // or four text blocks (joined, the same JSON document); and as a
    // Responses `function_call_output`: a string, or four `input_text`
    // parts.
    let shapes: [(&str, String, &dyn Protocol); 4] = [
        ("messages_string", messages_1mb(false), &AnthropicMessages),
        ("messages_blocks", messages_1mb(true), &AnthropicMessages),
        ("responses_string", responses_1mb(false), &OpenAiResponses),
        ("responses_parts", responses_1mb(true), &OpenAiResponses),
    ];
    for (name, body, protocol) in shapes {
        group.bench_function(format!("{name}_first_seen_1MB"), |b| {
            b.iter(|| {
                let memo = Memo::new(0);
                let out = rewrite_with(body.as_bytes(), &policy, protocol, Mode::WithRefs, &memo);
                assert!(matches!(out, Outcome::Rewritten(_)));
                black_box(out);
            })
        });
        let memo = Memo::new(16);
        rewrite_with(body.as_bytes(), &policy, protocol, Mode::WithRefs, &memo);
        group.bench_function(format!("{name}_repeated_1MB"), |b| {
            b.iter(|| {
                black_box(rewrite_with(
                    body.as_bytes(),
                    &policy,
                    protocol,
                    Mode::WithRefs,
                    &memo,
                ))
            })
        });
    }
    group.bench_function("parse_1MB", |b| {
        b.iter(|| black_box(OpenAiChat.parse(black_box(&body))).map(|p| p.outputs.len()))
    });
    // serde_json skipping the same body without building anything: what the
    // adapter's parse cost when it was built on serde_json.
    group.bench_function("serde_json_skip_1MB", |b| {
        b.iter(|| serde_json::from_str::<serde::de::IgnoredAny>(black_box(&body)).is_ok())
    });
    let parsed = OpenAiChat.parse(&body).expect("the bench body parses");
    let Content::JsonString(raw) = parsed.outputs[0].content.clone() else {
        panic!("the tool output is a JSON string");
    };
    let text = json_text::decode(raw).expect("decodes").into_owned();
    group.bench_function("decode_1MB", |b| {
        b.iter(|| black_box(json_text::decode(black_box(raw))))
    });
    group.bench_function("sha256_1MB", |b| {
        b.iter(|| black_box(toolstub::refs::sha256_hex(black_box(&text))))
    });
    group.bench_function("synopsis_1MB", |b| {
        b.iter(|| {
            black_box(synopsize(
                black_box(&text),
                Hints {
                    mime: None,
                    preview_chars: 2000,
                },
            ))
        })
    });
    group.finish();
}

/// xorshift64*: deterministic contents without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

/// A tool output of about `bytes` bytes of the kind a coding agent gets:
/// a file read with line numbers (as Claude Code's Read tool shows it), a
/// command's log, or JSON.
fn agent_output(rng: &mut Rng, kind: u64, bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 128);
    let mut line = 1u64;
    while out.len() < bytes {
        match kind {
            0 => out.push_str(&format!(
                "{line:>6}\t    let value_{} = compute(&input[{}..], {});\n",
                rng.next() % 1000,
                rng.next() % 64,
                rng.next() % 4096
            )),
            1 => out.push_str(&format!(
                "2026-11-30T12:{:02}:{:02}Z INFO test suite::case_{} ... ok ({} ms)\n",
                line / 60 % 60,
                line % 60,
                rng.next() % 5000,
                rng.next() % 900
            )),
            _ => out.push_str(&format!(
                "{{\"path\":\"src/module_{}/file_{}.rs\",\"line\":{},\"match\":\"fn handler_{}(req: &Request) -> Response\"}}\n",
                rng.next() % 40,
                rng.next() % 200,
                rng.next() % 3000,
                rng.next() % 100
            )),
        }
        line += 1;
    }
    out
}

/// One agent turn: the model's text and call, the tool's output.
struct Turn {
    thinking: String,
    text: String,
    id: String,
    tool: &'static str,
    input: Value,
    output: String,
    /// Whether the Anthropic shape sends the output as a text block array.
    blocks: bool,
}

/// 30 turns of 5-30 KB outputs, the 16th carrying a 1 MB JSON output.
fn turns() -> Vec<Turn> {
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    let tools = ["Read", "Bash", "Grep"];
    (0..30)
        .map(|i| {
            let kind = rng.next() % 3;
            let output = if i == 15 {
                large_output()
            } else {
                let size = rng.range(5_000, 30_001) as usize;
                agent_output(&mut rng, kind, size)
            };
            let tool = tools[kind as usize];
            Turn {
                thinking: format!(
                    "The user wants the failing test fixed. Step {i}: I should look at {} next, then compare it with what the last output said about case_{}. {}",
                    tool,
                    rng.next() % 500,
                    "Considering the error path and the retry logic once more. ".repeat(6)
                ),
                text: format!("Let me check step {i}."),
                id: format!("toolu_01{:020x}", rng.next()),
                tool,
                input: match tool {
                    "Read" => json!({"file_path": format!("/repo/src/module_{i}.rs")}),
                    "Bash" => json!({"command": "cargo test --workspace 2>&1 | tail -400", "description": "Run the tests"}),
                    _ => json!({"pattern": format!("handler_{i}"), "path": "/repo/src", "output_mode": "content"}),
                },
                output,
                blocks: i % 3 == 2,
            }
        })
        .collect()
}

/// The 1 MB JSON output of the Claude-Code-shaped conversation.
fn large_output() -> String {
    large_output_salted(7)
}

/// A JSON array of user objects of about 1 MB (as [`body`]'s, salt 0).
fn large_output_salted(salt: u64) -> String {
    let mut items = Vec::new();
    let mut len = 0;
    let mut i = 0u64;
    while len < 1_000_000 {
        let item = format!("{{\"id\":{i},\"salt\":{salt},\"name\":\"user {i}\",\"email\":\"user{i}@example.com\",\"active\":true}}");
        len += item.len() + 1;
        items.push(item);
        i += 1;
    }
    format!("[{}]", items.join(","))
}

const SYSTEM: [&str; 2] = [
    "You are Claude Code, Anthropic's official CLI for Claude.",
    "You are an interactive CLI tool that helps users with software engineering tasks. Use the instructions below and the tools available to you to assist the user.",
];

/// Tool definitions: (name, description, JSON schema), 16 of them.
fn tool_definitions() -> Vec<(String, String, Value)> {
    (0..16)
        .map(|i| {
            (
                ["Read", "Bash", "Grep", "Glob", "Edit", "Write", "TodoWrite", "WebFetch"][i % 8].to_string()
                    + if i >= 8 { "2" } else { "" },
                "Performs one kind of operation on the user's workspace. Usage notes: the path must be absolute; results are truncated past 2000 lines; prefer this tool over shell commands for this task. ".repeat(4),
                json!({"type": "object", "properties": {
                    "file_path": {"type": "string", "description": "The absolute path to the file"},
                    "offset": {"type": "number", "description": "The line number to start reading from"},
                    "limit": {"type": "number", "description": "The number of lines to read"},
                    "command": {"type": "string", "description": "The command to execute"}
                }, "required": ["file_path"], "additionalProperties": false, "$schema": "http://json-schema.org/draft-07/schema#"}),
            )
        })
        .collect()
}

/// The conversation as Claude Code sends it to `/v1/messages`.
fn messages_body(turns: &[Turn]) -> String {
    let mut messages = vec![json!({"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>\nAs you answer the user's questions, you can use the following context: the repository is a Rust workspace.\n</system-reminder>"},
        {"type": "text", "text": "The test suite fails in module 7; find out why and fix it."}
    ]})];
    for (i, t) in turns.iter().enumerate() {
        messages.push(json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": t.thinking, "signature": format!("EqoBCkgIBhABGAIiQ{}", "Lm9wYXF1ZS1zaWduYXR1cmU".repeat(12))},
            {"type": "text", "text": t.text},
            {"type": "tool_use", "id": t.id, "name": t.tool, "input": t.input}
        ]}));
        let content = if t.blocks {
            json!([{"type": "text", "text": t.output}])
        } else {
            Value::String(t.output.clone())
        };
        let mut result = json!({"type": "tool_result", "tool_use_id": t.id, "content": content});
        if i + 1 == turns.len() {
            result["cache_control"] = json!({"type": "ephemeral"});
        }
        messages.push(json!({"role": "user", "content": [result]}));
    }
    let tools: Vec<Value> = tool_definitions()
        .into_iter()
        .map(|(name, description, schema)| json!({"name": name, "description": description, "input_schema": schema}))
        .collect();
    json!({
        "model": "claude-sonnet-4-5-20250929",
        "max_tokens": 32000,
        "system": [
            {"type": "text", "text": SYSTEM[0], "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": SYSTEM[1].repeat(20), "cache_control": {"type": "ephemeral"}}
        ],
        "messages": messages,
        "tools": tools,
        "thinking": {"type": "enabled", "budget_tokens": 31999},
        "metadata": {"user_id": "user_0123456789abcdef_account__session_0f1e2d3c"},
        "stream": true
    })
    .to_string()
}

/// The same conversation as a Chat Completions body (no thinking blocks:
/// the chat API has none; the outputs as `role: tool` strings).
fn chat_conversation_body(turns: &[Turn]) -> String {
    let mut messages = vec![
        json!({"role": "system", "content": format!("{}\n{}", SYSTEM[0], SYSTEM[1].repeat(20))}),
        json!({"role": "user", "content": "The test suite fails in module 7; find out why and fix it."}),
    ];
    for t in turns {
        messages.push(json!({"role": "assistant", "content": t.text, "tool_calls": [
            {"id": t.id, "type": "function", "function": {"name": t.tool, "arguments": t.input.to_string()}}
        ]}));
        messages.push(json!({"role": "tool", "tool_call_id": t.id, "content": t.output}));
    }
    let tools: Vec<Value> = tool_definitions()
        .into_iter()
        .map(|(name, description, schema)| json!({"type": "function", "function": {"name": name, "description": description, "parameters": schema}}))
        .collect();
    json!({"model": "gpt-4.1", "messages": messages, "tools": tools, "stream": true}).to_string()
}

/// Codex's tool definitions (`type, name, description, strict, parameters`)
/// and its web search tool.
fn codex_tools() -> Vec<Value> {
    let mut tools: Vec<Value> = tool_definitions()
        .into_iter()
        .map(|(name, description, schema)| json!({"type": "function", "name": name, "description": description, "strict": false, "parameters": schema}))
        .collect();
    tools.push(json!({"type": "web_search", "external_web_access": true}));
    tools
}

/// A deterministic stand-in for a reasoning item's `encrypted_content`
/// (base64 text of about `bytes` bytes).
fn encrypted(rng: &mut Rng, bytes: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::from("gAAAAAB");
    while out.len() < bytes {
        let x = rng.next();
        for k in 0..10 {
            out.push(ALPHABET[(x >> (6 * k) & 63) as usize] as char);
        }
    }
    out
}

/// The same conversation as Codex CLI sends it to `/v1/responses` (the
/// top-level key order and the item shapes as captured in
/// `tests/e2e/RESPONSES_CLIENTS.md`; each item's keys sorted):
/// two developer messages and the user's environment context and prompt,
/// then per turn a reasoning item with `encrypted_content`, an
/// `exec_command` call and its output in Codex's wrapper (`Chunk ID`, wall
/// time, exit code, token count, `Output:`); stateless (`store: false`,
/// `include` asking for the encrypted reasoning).
fn codex_body(turns: &[Turn]) -> String {
    let mut rng = Rng(0xc0de_c0de_0015_0015);
    let mut id = |prefix: &str| format!("{prefix}_{:016x}{:016x}", rng.next(), rng.next());
    let developer = |text: String, id: String| json!({"type": "message", "id": id, "role": "developer", "content": [{"type": "input_text", "text": text}]});
    let mut input = vec![
        developer(format!("{}\n{}", SYSTEM[1], "<permissions instructions>Filesystem sandboxing: workspace-write; approvals: on-request. Commands that need network access or write outside the workspace must be escalated.</permissions instructions>\n".repeat(40)), id("msg")),
        developer("<skills_instructions>\nA skill is a set of local instructions stored in a SKILL.md file. Use a skill when the user names it or the task clearly matches its description.\n</skills_instructions>\n".repeat(50), id("msg")),
        json!({"type": "message", "id": id("msg"), "role": "user", "content": [{"type": "input_text", "text": "<environment_context>\n  <cwd>/repo</cwd>\n  <shell>bash</shell>\n</environment_context>"}]}),
        json!({"type": "message", "id": id("msg"), "role": "user", "content": [{"type": "input_text", "text": "The test suite fails in module 7; find out why and fix it."}]}),
    ];
    let mut seal = Rng(0x5ea1_0015);
    for (i, t) in turns.iter().enumerate() {
        input.push(json!({"type": "reasoning", "id": id("rs"), "summary": [{"type": "summary_text", "text": t.thinking}], "content": null, "encrypted_content": encrypted(&mut seal, 1_500 + 2 * t.thinking.len())}));
        let call_id = format!("call_{}", &t.id[8..]);
        let cmd = match t.tool {
            "Read" => format!("sed -n '1,400p' src/module_{i}.rs"),
            "Bash" => "cargo test --workspace 2>&1 | tail -400".to_string(),
            _ => format!("rg --json handler_{i} src"),
        };
        let arguments = json!({"cmd": cmd, "workdir": "/repo", "yield_time_ms": 10000}).to_string();
        input.push(json!({"type": "function_call", "status": "completed", "id": id("fc"), "name": "exec_command", "arguments": arguments, "call_id": call_id}));
        let output = format!(
            "Chunk ID: {:06x}\nWall time: 0.{:04} seconds\nProcess exited with code 0\nOriginal token count: {}\nOutput:\n{}",
            seal.next() & 0xff_ffff,
            seal.next() % 10_000,
            t.output.len() / 4,
            t.output
        );
        input.push(json!({"type": "function_call_output", "id": id("fco"), "call_id": call_id, "output": output}));
    }
    let part = |key: &str, value: Value| format!("\"{key}\":{value}");
    format!(
        "{{{}}}",
        [
            part("model", json!("gpt-5.1-codex")),
            part("stream", json!(true)),
            part("input", Value::Array(input)),
            part("tools", Value::Array(codex_tools())),
            part("tool_choice", json!("auto")),
            part("parallel_tool_calls", json!(true)),
            part("reasoning", json!({"summary": "auto"})),
            part("store", json!(false)),
            part("include", json!(["reasoning.encrypted_content"])),
            part(
                "prompt_cache_key",
                json!("019a7c3e-5f1d-7b20-9c4e-0f1e2d3c4b5a")
            ),
            part("client_metadata", json!({"originator": "codex_exec"})),
        ]
        .join(",")
    )
}

/// The Anthropic adapter beside the chat one, on the same conversation
/// (`rewrite/claude_code/...`), and the Responses adapter on the same
/// contents in Codex's shape (`rewrite/codex/responses/...`).
fn claude_code(c: &mut Criterion) {
    let turns = turns();
    conversations(
        c,
        "rewrite/claude_code",
        &[
            ("messages", messages_body(&turns), &AnthropicMessages),
            ("chat", chat_conversation_body(&turns), &OpenAiChat),
        ],
    );
    conversations(
        c,
        "rewrite/codex",
        &[("responses", codex_body(&turns), &OpenAiResponses)],
    );
}

/// First seen, repeated and parse of each conversation body.
fn conversations(c: &mut Criterion, group: &str, bodies: &[(&str, String, &dyn Protocol)]) {
    let policy = Policy::default();
    let mut group = c.benchmark_group(group);
    group.measurement_time(Duration::from_secs(4));
    group.sample_size(30);
    for (name, body, protocol) in bodies {
        group.throughput(Throughput::Bytes(body.len() as u64));
        let memo = Memo::new(1024);
        let Outcome::Rewritten(first) =
            rewrite_with(body.as_bytes(), &policy, *protocol, Mode::WithRefs, &memo)
        else {
            panic!("the {name} body is rewritten");
        };
        eprintln!(
            "{name}: body {:.2} MB, {} outputs externalized, rewritten body {:.0} KB",
            body.len() as f64 / 1e6,
            first.outputs.len(),
            first.body.len() as f64 / 1e3
        );
        group.bench_function(format!("{name}/first_seen"), |b| {
            b.iter(|| {
                let memo = Memo::new(0);
                let out = rewrite_with(body.as_bytes(), &policy, *protocol, Mode::WithRefs, &memo);
                assert!(matches!(out, Outcome::Rewritten(_)));
                black_box(out);
            })
        });
        group.bench_function(format!("{name}/repeated"), |b| {
            b.iter(|| {
                black_box(rewrite_with(
                    body.as_bytes(),
                    &policy,
                    *protocol,
                    Mode::WithRefs,
                    &memo,
                ))
            })
        });
        group.bench_function(format!("{name}/parse"), |b| {
            b.iter(|| black_box(protocol.parse(black_box(body))).map(|p| p.outputs.len()))
        });
    }
    group.finish();
}

/// Each splicer on the load benchmark's paced answer (stamped events; the
/// Responses one echoing the request's tools, the recall tools): events
/// in, bytes for the client out.
fn splice(c: &mut Criterion) {
    use support::MockBlock;
    use toolstub::protocol::RoundsContext;
    use toolstub::recall::sse::SseParser;
    use toolstub::recall::RoundEnd;
    use toolstub::stub::RecallToolNames;
    let text = |n: usize| MockBlock::Text((0..n).map(|i| format!("word{i} ")).collect());
    let names = RecallToolNames::default();
    let tools = format!("[{}]", OpenAiResponses.recall_tools(&names).join(","));
    let stamp = |events: Vec<String>| -> Vec<Vec<u8>> {
        events
            .into_iter()
            .map(|e| e.replace(support::STAMP, "123456789").into_bytes())
            .collect()
    };
    let streams: [(&str, Vec<Vec<u8>>, &dyn Protocol); 3] = [
        (
            "chat",
            stamp(support::chat_events(
                &[text(support::CHAT_TEXT_DELTAS)],
                true,
            )),
            &OpenAiChat,
        ),
        (
            "messages",
            stamp(support::anthropic_events(
                "msg_bench",
                &[text(support::ANTHROPIC_TEXT_DELTAS)],
                "end_turn",
                true,
            )),
            &AnthropicMessages,
        ),
        (
            "responses",
            stamp(support::responses_events(
                "resp_bench_1",
                &["msg_bench"],
                &[text(support::RESPONSES_TEXT_DELTAS)],
                &tools,
                true,
            )),
            &OpenAiResponses,
        ),
    ];
    let mut group = c.benchmark_group("splice");
    group.measurement_time(Duration::from_secs(3));
    for (name, events, protocol) in &streams {
        let run = || {
            let mut rounds = protocol.rounds(RoundsContext {
                names: names.clone(),
                last_canon: Some("tool\u{1e}call_1".to_string()),
            });
            let mut parser = SseParser::new(1 << 20);
            let mut sent = 0usize;
            for event in events {
                for e in parser.push(event).expect("events") {
                    sent += rounds.event(&e).iter().map(|b| b.len()).sum::<usize>();
                }
            }
            if let Some(e) = parser.finish() {
                sent += rounds.event(&e).iter().map(|b| b.len()).sum::<usize>();
            }
            let (released, end) = rounds.end_round(true);
            assert!(matches!(end, RoundEnd::Done), "{name}: the round ends");
            sent += released.iter().map(|b| b.len()).sum::<usize>();
            sent + rounds.finish().iter().map(|b| b.len()).sum::<usize>()
        };
        let upstream: usize = events.iter().map(Vec::len).sum();
        eprintln!(
            "{name}: {} events, {upstream} bytes upstream, {} bytes to the client",
            events.len(),
            run()
        );
        group.throughput(Throughput::Bytes(upstream as u64));
        group.bench_function(*name, |b| b.iter(|| black_box(run())));
    }
    group.finish();
}

criterion_group!(benches, rewrite, claude_code, splice);
criterion_main!(benches);
