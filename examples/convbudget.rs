//! The conversation budget measured on a replay of a long coding-agent
//! session: characters and estimated tokens sent turn
//! after turn with and without it, what a prompt cache would read and
//! write, and the recall rounds it would cause.
//!
//! The session is deterministic (a fixed seed) and shaped like Claude
//! Code's: each turn the model makes one to three tool calls (Read 40%,
//! Bash 30%, Grep 15%, Edit 10%, Glob 5%); Read returns a source file in
//! Claude Code's numbered listing (2-24 KB, one in ten 25-60 KB), Bash a
//! test or build log (small, or 5-30 KB: Claude Code cuts Bash output at
//! 30,000 characters), Grep match lines (0.5-15 KB), Edit and Glob a few
//! hundred characters. Each turn's request is the whole conversation so
//! far, rewritten by the real rewrite (`rewrite_with`, one memo across
//! turns as in the proxy). The JSON members are written in prompt order
//! (tools, system, messages), so the bytes a request shares with the one
//! before are what a provider's prefix cache reads; the rest it writes.
//!
//! Recall: the model meets a stub the turn its output first appears (it
//! called the tool to see that output), so every stub may cost a recall
//! round. The model assumed here ("reads back"): a Read or Grep stub is
//! read back in full (20,000 characters per call, all calls in one round);
//! a Bash stub is searched (about 3,000 characters of snippets) one time in
//! two, else the stub's synopsis (exit code, opening and closing lines)
//! suffices. A round is one more request (the turn's body plus the
//! exchange), and the exchange stays in every later request
//! (`recall.restore_history`). Each setting is also replayed with a model
//! that never reads a stub back (the most the budget could save), and both
//! again compacted as Claude Code does near 155,000 tokens of context (a
//! summarizing request, then the conversation starts again from a summary),
//! to count compactions. Counted: stubs by reason and by tool, recall
//! rounds, characters sent, cache reads and writes, the last request.
//!
//! Asserted: every turn's rewritten messages start with the previous
//! turn's byte for byte, and two settings give every output the same fate
//! on Anthropic Messages, Chat Completions and the Responses API.
//!
//! Run: `cargo run --release --example convbudget` (`CONVBUDGET_TURNS`,
//! default 150; `CONVBUDGET_SEED`). Characters are counted as code points;
//! tokens are estimated as characters / 4.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use toolstub::protocol::anthropic::AnthropicMessages;
use toolstub::protocol::openai_chat::OpenAiChat;
use toolstub::protocol::responses::OpenAiResponses;
use toolstub::protocol::Protocol;
use toolstub::rewrite::memo::Memo;
use toolstub::rewrite::select::Budget;
use toolstub::rewrite::tool_policy::{Glob, ToolRule, ToolRules};
use toolstub::rewrite::{rewrite_with, Mode, Outcome, Policy};

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15 | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
    fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        words[(self.next() % words.len() as u64) as usize]
    }
}

const WORDS: [&str; 16] = [
    "request", "handler", "config", "value", "buffer", "index", "parse", "error", "state",
    "client", "stream", "token", "result", "cache", "session", "budget",
];

/// A source file as Claude Code's Read shows it: `{n:>6}→{line}`.
fn read_output(rng: &mut Rng, chars: usize) -> String {
    let mut out = String::with_capacity(chars + 128);
    let mut n = 1;
    let mut depth = 0usize;
    while out.chars().count() < chars {
        let line = match rng.next() % 12 {
            0 => {
                depth = 1;
                format!(
                    "pub fn {}_{}(input: &{}) -> Result<{}, Error> {{",
                    rng.pick(&WORDS),
                    rng.next() % 100,
                    rng.pick(&WORDS),
                    rng.pick(&WORDS)
                )
            }
            1 => format!("use crate::{}::{};", rng.pick(&WORDS), rng.pick(&WORDS)),
            2 => format!(
                "{}// {} the {} before the {}.",
                "    ".repeat(depth),
                rng.pick(&WORDS),
                rng.pick(&WORDS),
                rng.pick(&WORDS)
            ),
            3 if depth > 0 => {
                depth -= 1;
                format!("{}}}", "    ".repeat(depth))
            }
            _ => format!(
                "{}let {} = self.{}.{}(&{}[{}..])?;",
                "    ".repeat(depth.max(1)),
                rng.pick(&WORDS),
                rng.pick(&WORDS),
                rng.pick(&WORDS),
                rng.pick(&WORDS),
                rng.next() % 64
            ),
        };
        out.push_str(&format!("{n:>6}\u{2192}{line}\n"));
        n += 1;
    }
    out
}

/// A test or build log.
fn bash_output(rng: &mut Rng, chars: usize) -> String {
    let mut out = String::with_capacity(chars + 128);
    let mut n = 0;
    while out.len() < chars {
        let line = match rng.next() % 10 {
            0 => format!(
                "   Compiling {}-{} v0.{}.{}",
                rng.pick(&WORDS),
                rng.pick(&WORDS),
                rng.next() % 20,
                rng.next() % 10
            ),
            1 => format!(
                "warning: unused variable: `{}` --> src/{}.rs:{}:{}",
                rng.pick(&WORDS),
                rng.pick(&WORDS),
                rng.next() % 900,
                rng.next() % 80
            ),
            _ => format!(
                "test {}::{}::{}_{} ... ok",
                rng.pick(&WORDS),
                rng.pick(&WORDS),
                rng.pick(&WORDS),
                n
            ),
        };
        out.push_str(&line);
        out.push('\n');
        n += 1;
    }
    out.push_str(&format!(
        "\ntest result: ok. {n} passed; 0 failed; 0 ignored; finished in {}.{:02}s\n",
        rng.next() % 90,
        rng.next() % 100
    ));
    out
}

/// Match lines, as Grep's content mode shows them.
fn grep_output(rng: &mut Rng, chars: usize) -> String {
    let mut out = String::with_capacity(chars + 128);
    while out.len() < chars {
        out.push_str(&format!(
            "/repo/src/{}/{}.rs:{}:    let {} = {}::{}(&self.{});\n",
            rng.pick(&WORDS),
            rng.pick(&WORDS),
            rng.next() % 2000,
            rng.pick(&WORDS),
            rng.pick(&WORDS),
            rng.pick(&WORDS),
            rng.pick(&WORDS)
        ));
    }
    out
}

/// One tool call and its output.
struct Call {
    id: String,
    tool: &'static str,
    input: Value,
    output: String,
}

/// One turn: the model's text, its calls, their outputs.
struct Turn {
    text: String,
    calls: Vec<Call>,
}

fn session(seed: u64, turns: usize) -> Vec<Turn> {
    let mut rng = Rng::new(seed);
    let mut serial = 0u64;
    (0..turns)
        .map(|t| {
            let n = match rng.next() % 10 {
                0..=6 => 1,
                7 | 8 => 2,
                _ => 3,
            };
            let calls = (0..n)
                .map(|_| {
                    serial += 1;
                    let id = format!("toolu_01{:018x}{serial:04}", rng.next() >> 8);
                    let roll = rng.next() % 100;
                    let (tool, input, output) = match roll {
                        0..=39 => {
                            let size = if rng.next().is_multiple_of(10) {
                                rng.range(25_000, 60_000)
                            } else {
                                rng.range(2_000, 24_000)
                            };
                            let path = format!("/repo/src/{}/{}.rs", rng.pick(&WORDS), serial);
                            ("Read", json!({"file_path": path}), read_output(&mut rng, size as usize))
                        }
                        40..=69 => {
                            let size = if rng.next().is_multiple_of(3) {
                                rng.range(200, 2_000)
                            } else {
                                rng.range(5_000, 30_000)
                            };
                            (
                                "Bash",
                                json!({"command": "cargo test --workspace 2>&1", "description": "Run the tests"}),
                                bash_output(&mut rng, size as usize),
                            )
                        }
                        70..=84 => {
                            let size = rng.range(500, 15_000);
                            (
                                "Grep",
                                json!({"pattern": rng.pick(&WORDS), "path": "/repo/src", "output_mode": "content"}),
                                grep_output(&mut rng, size as usize),
                            )
                        }
                        85..=94 => {
                            let size = rng.range(300, 1_500);
                            let path = format!("/repo/src/{}.rs", rng.pick(&WORDS));
                            let mut out = format!("The file {path} has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n");
                            out.push_str(&read_output(&mut rng, size as usize));
                            ("Edit", json!({"file_path": path, "old_string": "a", "new_string": "b"}), out)
                        }
                        _ => {
                            let count = rng.range(5, 60);
                            let out: String = (0..count)
                                .map(|i| format!("/repo/src/{}/{}_{i}.rs\n", rng.pick(&WORDS), rng.pick(&WORDS)))
                                .collect();
                            ("Glob", json!({"pattern": "src/**/*.rs"}), out)
                        }
                    };
                    Call {
                        id,
                        tool,
                        input,
                        output,
                    }
                })
                .collect();
            Turn {
                text: format!(
                    "Step {t}: the last output says the {} {} needs a look; checking the {} next.",
                    rng.pick(&WORDS),
                    rng.pick(&WORDS),
                    rng.pick(&WORDS)
                ),
                calls,
            }
        })
        .collect()
}

const SYSTEM: &str = "You are Claude Code, Anthropic's official CLI for Claude. You are an interactive CLI tool that helps users with software engineering tasks. Use the instructions below and the tools available to you to assist the user.";
const TASK: &str = "The test suite fails in module 7; find out why and fix it.";
const TOOLS: [&str; 5] = ["Read", "Bash", "Grep", "Edit", "Glob"];

fn tool_schema() -> Value {
    json!({"type": "object", "properties": {"file_path": {"type": "string", "description": "The absolute path to the file"}, "command": {"type": "string"}, "pattern": {"type": "string"}}})
}

/// A protocol's request for the conversation up to `turns`: members in
/// prompt order (tools, system, messages), so a request's bytes shared
/// with the one before are the cacheable prefix.
trait Shape {
    fn name(&self) -> &'static str;
    fn protocol(&self) -> &'static dyn Protocol;
    fn head(&self) -> String;
    fn opening(&self) -> Vec<String>;
    /// The conversation after a compaction: the opening, then the summary.
    fn compacted(&self, summary: &str) -> Vec<String>;
    fn turn(&self, turn: &Turn) -> Vec<String>;
    fn tail(&self) -> &'static str;
}

struct Messages;
struct Chat;
struct Responses;

fn item(v: Value) -> String {
    v.to_string()
}

impl Shape for Messages {
    fn name(&self) -> &'static str {
        "anthropic"
    }
    fn protocol(&self) -> &'static dyn Protocol {
        &AnthropicMessages
    }
    fn head(&self) -> String {
        let tools: Vec<Value> = TOOLS
            .iter()
            .map(|t| json!({"name": t, "description": format!("The {t} tool."), "input_schema": tool_schema()}))
            .collect();
        format!(
            r#"{{"model":"claude-sonnet-4-5","max_tokens":32000,"tools":{},"system":[{{"type":"text","text":{},"cache_control":{{"type":"ephemeral"}}}}],"messages":["#,
            Value::Array(tools),
            Value::String(SYSTEM.to_string())
        )
    }
    fn opening(&self) -> Vec<String> {
        vec![item(
            json!({"role": "user", "content": [{"type": "text", "text": TASK}]}),
        )]
    }
    fn compacted(&self, summary: &str) -> Vec<String> {
        vec![item(
            json!({"role": "user", "content": [{"type": "text", "text": summary}]}),
        )]
    }
    fn turn(&self, turn: &Turn) -> Vec<String> {
        let mut blocks = vec![json!({"type": "text", "text": turn.text})];
        blocks.extend(
            turn.calls
                .iter()
                .map(|c| json!({"type": "tool_use", "id": c.id, "name": c.tool, "input": c.input})),
        );
        let results: Vec<Value> = turn
            .calls
            .iter()
            .map(|c| json!({"type": "tool_result", "tool_use_id": c.id, "content": c.output}))
            .collect();
        vec![
            item(json!({"role": "assistant", "content": blocks})),
            item(json!({"role": "user", "content": results})),
        ]
    }
    fn tail(&self) -> &'static str {
        r#"],"stream":true}"#
    }
}

impl Shape for Chat {
    fn name(&self) -> &'static str {
        "chat"
    }
    fn protocol(&self) -> &'static dyn Protocol {
        &OpenAiChat
    }
    fn head(&self) -> String {
        let tools: Vec<Value> = TOOLS
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t, "description": format!("The {t} tool."), "parameters": tool_schema()}}))
            .collect();
        format!(
            r#"{{"model":"gpt-4.1","tools":{},"messages":["#,
            Value::Array(tools)
        )
    }
    fn opening(&self) -> Vec<String> {
        vec![
            item(json!({"role": "system", "content": SYSTEM})),
            item(json!({"role": "user", "content": TASK})),
        ]
    }
    fn compacted(&self, summary: &str) -> Vec<String> {
        vec![
            item(json!({"role": "system", "content": SYSTEM})),
            item(json!({"role": "user", "content": summary})),
        ]
    }
    fn turn(&self, turn: &Turn) -> Vec<String> {
        let calls: Vec<Value> = turn
            .calls
            .iter()
            .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.tool, "arguments": c.input.to_string()}}))
            .collect();
        let mut out = vec![item(
            json!({"role": "assistant", "content": turn.text, "tool_calls": calls}),
        )];
        out.extend(
            turn.calls
                .iter()
                .map(|c| item(json!({"role": "tool", "tool_call_id": c.id, "content": c.output}))),
        );
        out
    }
    fn tail(&self) -> &'static str {
        r#"],"stream":true}"#
    }
}

impl Shape for Responses {
    fn name(&self) -> &'static str {
        "responses"
    }
    fn protocol(&self) -> &'static dyn Protocol {
        &OpenAiResponses
    }
    fn head(&self) -> String {
        let tools: Vec<Value> = TOOLS
            .iter()
            .map(|t| json!({"type": "function", "name": t, "description": format!("The {t} tool."), "strict": false, "parameters": tool_schema()}))
            .collect();
        format!(
            r#"{{"model":"gpt-5.1-codex","tools":{},"instructions":{},"input":["#,
            Value::Array(tools),
            Value::String(SYSTEM.to_string())
        )
    }
    fn opening(&self) -> Vec<String> {
        vec![item(
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": TASK}]}),
        )]
    }
    fn compacted(&self, summary: &str) -> Vec<String> {
        vec![item(
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": summary}]}),
        )]
    }
    fn turn(&self, turn: &Turn) -> Vec<String> {
        let mut out = vec![item(
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": turn.text}]}),
        )];
        out.extend(turn.calls.iter().map(|c| {
            item(json!({"type": "function_call", "call_id": c.id, "name": c.tool, "arguments": c.input.to_string()}))
        }));
        out.extend(turn.calls.iter().map(|c| {
            item(json!({"type": "function_call_output", "call_id": c.id, "output": c.output}))
        }));
        out
    }
    fn tail(&self) -> &'static str {
        r#"],"store":false,"stream":true}"#
    }
}

/// One configuration under test.
struct Setup {
    label: String,
    policy: Policy,
    /// Whether the model reads stubs back (the recall model above), or
    /// never (the bound on what the budget can save).
    recall: bool,
    /// Whether the conversation is compacted as Claude Code does it.
    compact: bool,
}

fn setup(label: &str, budget: usize, floor: usize, rules: Vec<ToolRule>) -> Setup {
    Setup {
        label: label.to_string(),
        recall: true,
        compact: false,
        policy: Policy {
            budget: Budget {
                conversation_inline_budget_chars: budget,
                conversation_floor_chars: floor,
                ..Budget::default()
            },
            tools: ToolRules(rules),
            ..Policy::default()
        },
    }
}

/// What one replay cost.
#[derive(Default)]
struct Totals {
    requests: usize,
    sent: u64,
    /// Characters of requests shared with the request before (cache reads).
    cached: u64,
    /// The rest (cache writes).
    fresh: u64,
    last_context: u64,
    /// Stubs by reason, and conversation-budget stubs by tool.
    by_reason: BTreeMap<String, usize>,
    conversation_by_tool: BTreeMap<&'static str, usize>,
    rounds: usize,
    conversation_rounds: usize,
    recalled: u64,
    /// Per call id: whether it was a stub and why (for the cross-protocol check).
    fates: BTreeMap<String, Option<String>>,
    /// Turns whose rewritten messages did not start with the previous turn's.
    unstable: usize,
    compactions: usize,
}

/// Claude Code compacts the conversation near 155,000 tokens of context
/// (its auto-compact buffer below the 200,000-token window).
const COMPACT_CHARS: u64 = 155_000 * 4;
/// A compaction summary's length.
const SUMMARY_CHARS: usize = 12_000;

fn summary(n: usize) -> String {
    let mut text = format!("This session is being continued from a previous conversation that ran out of context (compaction {n}). The conversation is summarized below:\n");
    let mut rng = Rng::new(n as u64);
    while text.len() < SUMMARY_CHARS {
        text.push_str(&format!(
            "- Looked at the {} {} in src/{}.rs and changed the {}.\n",
            rng.pick(&WORDS),
            rng.pick(&WORDS),
            rng.pick(&WORDS),
            rng.pick(&WORDS)
        ));
    }
    text
}

/// The characters `a` and `b` share from their start.
fn common_prefix_chars(a: &str, b: &str) -> usize {
    let mut bytes = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    while !a.is_char_boundary(bytes) {
        bytes -= 1;
    }
    a[..bytes].chars().count()
}

/// Where the conversation's array begins in a body.
fn messages_start(body: &str) -> usize {
    ["\"messages\":[", "\"input\":["]
        .iter()
        .filter_map(|m| body.find(m).map(|at| at + m.len()))
        .min()
        .unwrap_or(0)
}

/// What a recall round reads of a stubbed output, in the model assumed.
fn read_back(tool: &str, chars: usize, call_id: &str) -> Option<(usize, usize)> {
    let calls = chars.div_ceil(20_000).max(1);
    match tool {
        "Read" | "Grep" => Some((calls, chars)),
        // One Bash stub in two is searched; decided by its id, deterministically.
        "Bash" => (call_id
            .bytes()
            .map(u64::from)
            .sum::<u64>()
            .is_multiple_of(2))
        .then_some((1, 3_000)),
        _ => None,
    }
}

fn replay(shape: &dyn Shape, turns: &[Turn], s: &Setup) -> Totals {
    let memo = Memo::new(100_000);
    let head = shape.head();
    let mut messages: Vec<String> = shape.opening();
    let mut totals = Totals::default();
    // The hidden recall exchanges so far (restored into every later request).
    let mut exchanges: u64 = 0;
    // The previous turn's rewritten body and its messages' span.
    let mut previous: Option<(String, std::ops::Range<usize>)> = None;
    let tools_of: BTreeMap<&str, &'static str> = turns
        .iter()
        .flat_map(|t| t.calls.iter().map(|c| (c.id.as_str(), c.tool)))
        .collect();
    // Right after a compaction the history is new: no prefix to keep.
    let mut compacted = false;
    for turn in turns {
        messages.extend(shape.turn(turn));
        let joined = messages.join(",");
        let body = format!("{head}{joined}{}", shape.tail());
        let (sent_body, outputs) = match rewrite_with(
            body.as_bytes(),
            &s.policy,
            shape.protocol(),
            Mode::WithRefs,
            &memo,
        ) {
            Outcome::Rewritten(r) => {
                let outs: Vec<(String, String, usize, bool)> = r
                    .outputs
                    .iter()
                    .map(|o| {
                        (
                            o.tool_call_id.clone().unwrap_or_default(),
                            o.reason.clone(),
                            o.original_chars,
                            o.text.is_some(),
                        )
                    })
                    .collect();
                (r.body, outs)
            }
            Outcome::Unchanged(_) => (body.clone(), Vec::new()),
        };
        // The rewritten messages end where the tail begins.
        let start = messages_start(&sent_body);
        let end = sent_body
            .rfind(&shape.tail()[..9])
            .unwrap_or(sent_body.len());
        if let Some((before, span)) = previous.as_ref().filter(|_| !compacted) {
            // The previous turn's messages, byte for byte, open this turn's
            // (only the head may change, at the first offer of the recall tools).
            if sent_body.get(start..start + span.len()) != before.get(span.clone()) {
                totals.unstable += 1;
            }
        }
        let chars = sent_body.chars().count() as u64 + exchanges;
        let shared = previous.as_ref().map_or(0, |(before, _)| {
            common_prefix_chars(before, &sent_body) as u64 + exchanges
        });
        totals.requests += 1;
        totals.sent += chars;
        totals.cached += shared;
        totals.fresh += chars - shared;
        let mut sent_now = chars;
        for (id, reason, original, first_seen) in &outputs {
            totals.fates.insert(id.clone(), Some(reason.clone()));
            if !first_seen {
                continue;
            }
            *totals.by_reason.entry(reason.clone()).or_default() += 1;
            let tool = tools_of.get(id.as_str()).copied().unwrap_or("tool");
            let conversation = reason == "conversation_budget";
            if conversation {
                *totals.conversation_by_tool.entry(tool).or_default() += 1;
            }
            if let Some((calls, read)) = read_back(tool, *original, id).filter(|_| s.recall) {
                // One more request: this body plus the exchange, which then
                // stays in every later request.
                let exchange = (read + calls * 450) as u64;
                totals.rounds += 1;
                totals.conversation_rounds += usize::from(conversation);
                totals.recalled += read as u64;
                totals.requests += 1;
                totals.sent += sent_now + exchange;
                totals.cached += sent_now;
                totals.fresh += exchange;
                exchanges += exchange;
                sent_now += exchange;
            }
        }
        for c in &turn.calls {
            totals.fates.entry(c.id.clone()).or_insert(None);
        }
        totals.last_context = sent_now;
        previous = Some((sent_body, start..end));
        compacted = false;
        if s.compact && sent_now > COMPACT_CHARS {
            // The summarizing request: the whole context and the
            // instruction; then the conversation starts again from the summary.
            totals.compactions += 1;
            totals.requests += 1;
            totals.sent += sent_now + 2_000;
            totals.cached += sent_now;
            totals.fresh += 2_000;
            messages = shape.compacted(&summary(totals.compactions));
            exchanges = 0;
            compacted = true;
        }
    }
    totals
}

fn k(n: u64) -> String {
    if n >= 10_000_000 {
        format!("{:.1} M", n as f64 / 1e6)
    } else {
        format!("{:.0} K", n as f64 / 1e3)
    }
}

fn main() {
    let turns: usize = std::env::var("CONVBUDGET_TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150);
    let seed: u64 = std::env::var("CONVBUDGET_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(17);
    let session = session(seed, turns);
    let calls: Vec<&Call> = session.iter().flat_map(|t| &t.calls).collect();
    let total: usize = calls.iter().map(|c| c.output.chars().count()).sum();
    let mut by_tool: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for c in &calls {
        let e = by_tool.entry(c.tool).or_default();
        e.0 += 1;
        e.1 += c.output.chars().count();
    }
    println!(
        "session: {turns} turns, {} tool calls, {} characters of tool output (seed {seed})",
        calls.len(),
        total
    );
    for (tool, (n, chars)) in &by_tool {
        println!(
            "  {tool}: {n} calls, {chars} characters, mean {}",
            chars / n.max(&1)
        );
    }
    let over = calls
        .iter()
        .filter(|c| c.output.chars().count() > 20_000)
        .count();
    println!("  over the 20,000 threshold: {over}");

    let rule = |pattern: &str, conversation: bool| ToolRule {
        pattern: Glob::new(pattern).expect("pattern"),
        threshold_chars: None,
        conversation_budget: Some(conversation),
        externalize: None,
        mime: None,
    };
    let setups = vec![
        setup("off", 0, 0, Vec::new()),
        setup("100K / 4K", 100_000, 4_000, Vec::new()),
        setup("100K / 8K", 100_000, 8_000, Vec::new()),
        setup("200K / 8K", 200_000, 8_000, Vec::new()),
        setup("200K / 16K", 200_000, 16_000, Vec::new()),
        setup("400K / 8K", 400_000, 8_000, Vec::new()),
        setup(
            "100K / 8K, Read exempt",
            100_000,
            8_000,
            vec![rule("Read", false)],
        ),
        setup(
            "200K / 8K, Read exempt",
            200_000,
            8_000,
            vec![rule("Read", false)],
        ),
        setup(
            "100K / 8K, Bash only",
            100_000,
            8_000,
            vec![rule("Bash", true), rule("*", false)],
        ),
        setup(
            "100K / 8K, Read and Grep exempt",
            100_000,
            8_000,
            vec![rule("Read", false), rule("Grep", false)],
        ),
        setup(
            "100K / 4K, Bash only",
            100_000,
            4_000,
            vec![rule("Bash", true), rule("*", false)],
        ),
        setup(
            "100K / 16K, Bash only",
            100_000,
            16_000,
            vec![rule("Bash", true), rule("*", false)],
        ),
    ];

    println!();
    println!("Anthropic Messages (Claude Code's shape). Sent: characters summed over every request of the session (turns, recall rounds, compactions); ≈ tokens = characters / 4. Weighted: input-token equivalents at Anthropic's multipliers, cache read 0.1 (the part of a request equal to the request before) and cache write 1.25 (the rest). Reads back: the recall model above; never: the model never reads a stub back, the most the budget could save. Compactions: the same replay compacted at {} tokens of context, as Claude Code does (the other columns: never compacted, a 1M-token window).", COMPACT_CHARS / 4);
    println!();
    println!("| budget / floor | stubs (threshold / turn / conversation) | conversation stubs by tool | reads back: requests | sent | ≈ tokens | weighted tokens | recall rounds (for the conversation budget) | never reads back: sent | weighted tokens | last request | compactions (reads back / never) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut base: Option<[(u64, f64); 3]> = None;
    for s in &setups {
        let run = |recall: bool, compact: bool| {
            let t = replay(
                &Messages,
                &session,
                &Setup {
                    label: s.label.clone(),
                    policy: s.policy.clone(),
                    recall,
                    compact,
                },
            );
            assert_eq!(t.unstable, 0, "{}: a turn changed earlier bytes", s.label);
            let weighted = (t.cached as f64 * 0.1 + t.fresh as f64 * 1.25) / 4.0;
            (t, weighted)
        };
        let (reads, reads_w) = run(true, false);
        let (never, never_w) = run(false, false);
        let (reads_c, _) = run(true, true);
        let (never_c, _) = run(false, true);
        let b = *base.get_or_insert([
            (reads.sent, reads_w),
            (never.sent, never_w),
            (never.last_context, 0.0),
        ]);
        let rel = |now: f64, then: f64| {
            if (now - then).abs() < 0.5 {
                String::new()
            } else {
                format!(" ({:+.0}%)", (now / then - 1.0) * 100.0)
            }
        };
        let reasons = |r: &str| never.by_reason.get(r).copied().unwrap_or(0);
        let tools: Vec<String> = never
            .conversation_by_tool
            .iter()
            .map(|(tool, n)| format!("{tool} {n}"))
            .collect();
        println!(
            "| {} | {} / {} / {} | {} | {} | {}{} | {} | {}{} | {} ({}) | {}{} | {}{} | {}{} | {} / {} |",
            s.label,
            reasons("single_threshold"),
            reasons("turn_budget"),
            reasons("conversation_budget"),
            if tools.is_empty() {
                "-".to_string()
            } else {
                tools.join(", ")
            },
            reads.requests,
            k(reads.sent),
            rel(reads.sent as f64, b[0].0 as f64),
            k(reads.sent / 4),
            k(reads_w as u64),
            rel(reads_w, b[0].1),
            reads.rounds,
            reads.conversation_rounds,
            k(never.sent),
            rel(never.sent as f64, b[1].0 as f64),
            k(never_w as u64),
            rel(never_w, b[1].1),
            k(never.last_context),
            rel(never.last_context as f64, b[2].0 as f64),
            reads_c.compactions,
            never_c.compactions,
        );
    }

    // The same decisions on every protocol, and what each one sends.
    let named = |label: &str| setups.iter().find(|s| s.label == label).expect(label);
    for checked in [named("100K / 8K"), named("100K / 8K, Read and Grep exempt")] {
        println!();
        println!("{} on the three protocols (reads back):", checked.label);
        let mut fates: Option<BTreeMap<String, Option<String>>> = None;
        for shape in [&Messages as &dyn Shape, &Chat, &Responses] {
            let off = replay(shape, &session, &setups[0]);
            let on = replay(shape, &session, checked);
            assert_eq!(on.unstable, 0);
            println!(
                "  {}: {} characters sent without the conversation budget, {} with it ({:+.0}%); {} stubs for the conversation budget",
                shape.name(),
                k(off.sent),
                k(on.sent),
                (on.sent as f64 / off.sent as f64 - 1.0) * 100.0,
                on.by_reason.get("conversation_budget").copied().unwrap_or(0)
            );
            match &fates {
                None => fates = Some(on.fates),
                Some(first) => assert_eq!(first, &on.fates, "{}: other decisions", shape.name()),
            }
        }
        println!("  every output got the same fate (inline, or a stub with the same reason) on all three");
    }
}
