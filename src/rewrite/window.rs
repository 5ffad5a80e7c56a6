//! The context-window rescue: a request that would not fit its model's
//! context window is brought under it by replacing more outputs, the
//! largest the model has already seen first, instead of going upstream to
//! fail ("prompt is too long").
//!
//! The size is estimated without a tokenizer: bytes of the request over
//! [`Window::bytes_per_token_milli`] (a conservative ratio, measured on
//! real sessions: see `config/toolstub.toml`). A request over the window
//! less [`Window::margin_permille`] is brought under
//! [`Window::aim_permille`] of it, so that the requests after it grow into
//! the room without another change. A request whose whole body is under
//! the limit costs one comparison.
//!
//! Determinism: the decision points are the requests of the conversation.
//! The request that produced assistant message `m` was the conversation up
//! to `m`'s start (the conversation is linear), and the current request is
//! the whole body. The rule replays them oldest first, from the request's
//! own content: at each, if its estimated size is over the limit, it
//! replaces outputs the model had seen at that point (those before its
//! newest assistant message), largest first (ties: earlier first), until
//! under the aim; only if it is still over the limit, the newest turn's
//! own outputs, largest first, until under the limit. Decisions
//! accumulate: an output rescued at one point is a stub at every later
//! one. Each request therefore reproduces the decisions of every earlier
//! request of the conversation, as long as the bytes outside the
//! conversation (tools, system prompt) and of the earlier messages stay
//! the same. (A client that edits an earlier message, as Claude Code moves
//! its `cache_control` marker, changes a point's size by those bytes: a
//! point within them of the limit may then decide otherwise once, which
//! costs a cache write, never a request over the window.)
//!
//! What the measure counts: the bytes outside the conversation, the
//! recall tools' definitions, the conversation up to the point, less what
//! the provider does not count there (`Protocol::uncounted`: Anthropic's
//! thinking blocks of turns before the point's latest), less what
//! the first-sight rules (threshold, turn and conversation budgets, which
//! decide from what precedes an output) and earlier rescue decisions
//! removed there. It ignores what the aging rule removed, whose decisions
//! it cannot date from a later request; so with aging on it rescues
//! somewhat early, never late, and its decisions do not depend on
//! aging's. Both rules render the same one-line stub
//! ([`crate::stub::render_aged`]): the model has seen the output, and an
//! output claimed by both is the same bytes whichever rule came first.
//!
//! [`rescued`] is the decision, arithmetic over sizes alone; `rescue`
//! measures the request and splices with the rewrite's own helpers.

use super::select::Reason;
use super::tool_policy::Glob;
use super::{externalize, may_externalize, Externalized, Mode, Prepared, Seen};
use std::collections::BTreeMap;
use std::ops::Range;

/// The rule's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// Off: requests go as the other rules leave them.
    pub enabled: bool,
    /// Context windows in tokens by model-name pattern; the first entry
    /// whose pattern matches the request's model applies (0: no rescue
    /// for that model).
    pub table: Vec<(Glob, u64)>,
    /// The window of a model no entry matches, or of a request naming no
    /// model (0: no rescue).
    pub default_tokens: u64,
    /// Bytes of a request per token, in thousandths.
    pub bytes_per_token_milli: u64,
    /// The share of the window kept free, in thousandths: a request over
    /// the rest is rescued.
    pub margin_permille: u32,
    /// What a rescued request is brought under, in thousandths of the
    /// window: room for the next requests to grow into without another
    /// change (each change makes the provider's cache write the prompt
    /// again from the first output changed).
    pub aim_permille: u32,
}

/// The default window of a model the table does not know.
pub const DEFAULT_TOKENS: u64 = 128_000;

/// The window of a request that asks for the long context (Anthropic's
/// `context-1m-*` beta, in the `anthropic-beta` header or, on Bedrock and
/// Vertex AI, in the body's `anthropic_beta`).
pub const LONG_CONTEXT_TOKENS: u64 = 1_000_000;
/// The default ratio: 2.25 bytes of request per token (see
/// `config/toolstub.toml` for the measurement behind it).
pub const DEFAULT_BYTES_PER_TOKEN_MILLI: u64 = 2_250;
/// The default margin: rescue a request over 90% of the window.
pub const DEFAULT_MARGIN_PERMILLE: u32 = 100;
/// The default aim: bring it under 60%.
pub const DEFAULT_AIM_PERMILLE: u32 = 600;

/// The shipped table (pattern, tokens), first match wins: the providers'
/// published input limits, which a config's own table replaces.
pub const DEFAULT_TABLE: &[(&str, u64)] = &[
    // Claude: the 5 models (and Opus 4.8) have 1,000,000 natively; the
    // others 200,000 (their 1M-token beta is opt-in per request, and a
    // request that asks for it is held to 1,000,000).
    ("*claude-fable*", 1_000_000),
    ("*claude-mythos*", 1_000_000),
    ("*claude-opus-5*", 1_000_000),
    ("*claude-sonnet-5*", 1_000_000),
    ("*claude-haiku-5-5*", 1_000_000),
    ("*claude-opus-4-8*", 1_000_000),
    ("*claude*", 200_000),
    // GPT-5's chat models have 128,000; the others 272,000 input tokens
    // (of a 400,000 window, the rest for output).
    ("*gpt-5*chat*", 128_000),
    ("*gpt-5*", 272_000),
    ("*gpt-4.1*", 1_047_576),
    ("*gpt-4o*", 128_000),
    ("o3*", 200_000),
    ("o4*", 200_000),
    ("*/o3*", 200_000),
    ("*/o4*", 200_000),
    ("*gemini-2*", 1_048_576),
    ("*gemini-3*", 1_048_576),
    ("*deepseek*", 128_000),
];

/// The shipped table, parsed.
pub fn default_table() -> Vec<(Glob, u64)> {
    DEFAULT_TABLE
        .iter()
        .filter_map(|(p, t)| Glob::new(p).ok().map(|g| (g, *t)))
        .collect()
}

impl Default for Window {
    fn default() -> Self {
        Window {
            enabled: true,
            table: default_table(),
            default_tokens: DEFAULT_TOKENS,
            bytes_per_token_milli: DEFAULT_BYTES_PER_TOKEN_MILLI,
            margin_permille: DEFAULT_MARGIN_PERMILLE,
            aim_permille: DEFAULT_AIM_PERMILLE,
        }
    }
}

impl Window {
    /// The context window of `model` in tokens, if the rule applies to it.
    pub fn tokens_for(&self, model: Option<&str>) -> Option<u64> {
        let entry = model.and_then(|m| self.table.iter().find(|(g, _)| g.matches(m)));
        let tokens = entry.map_or(self.default_tokens, |(_, t)| *t);
        (tokens > 0).then_some(tokens)
    }

    /// The bytes a request of `model` may have, if the rule is on for it:
    /// the window less the margin, times the ratio.
    pub fn limit_bytes(&self, model: Option<&str>) -> Option<usize> {
        self.limits(model).map(|(over, _)| over)
    }

    /// The bytes over which a request of `model` is rescued, and the bytes
    /// it is brought under (never more than the first), if the rule is on
    /// for it.
    pub fn limits(&self, model: Option<&str>) -> Option<(usize, usize)> {
        self.limits_of(model, false)
    }

    /// [`Window::limits`], for a client that asked for the long context
    /// window or not: asked, the window is at least [`LONG_CONTEXT_TOKENS`]
    /// (a model without the long window refuses the request, as it would
    /// without toolstub).
    pub fn limits_of(&self, model: Option<&str>, long_context: bool) -> Option<(usize, usize)> {
        if !self.enabled {
            return None;
        }
        let mut tokens = self.tokens_for(model)? as u128;
        if long_context {
            tokens = tokens.max(u128::from(LONG_CONTEXT_TOKENS));
        }
        let bytes = |permille: u32| {
            let kept = tokens * u128::from(permille) / 1000;
            let bytes = kept * u128::from(self.bytes_per_token_milli) / 1000;
            usize::try_from(bytes).unwrap_or(usize::MAX)
        };
        let over = bytes(1000u32.saturating_sub(self.margin_permille));
        Some((over, bytes(self.aim_permille).min(over)))
    }
}

/// The rule over a request the other rules have rewritten (`outputs` and
/// `splices` so far): the outputs it rescues are added to both, with
/// reason `context_window`. Only with the originals stored
/// ([`Mode::WithRefs`]): a stub without a ref would take from the model
/// what it has no way to read back.
pub(super) fn rescue<'b>(
    seen: Seen<'_, 'b>,
    outputs: &mut Vec<Externalized<'b>>,
    splices: &mut Vec<(Range<usize>, String)>,
) {
    let Seen {
        body,
        parsed,
        policy,
        names,
        mode,
        protocol,
        memo,
        ..
    } = seen;
    if mode != Mode::WithRefs || parsed.outputs.is_empty() {
        return;
    }
    let Some((limit, aim)) = policy
        .window
        .limits_of(parsed.model.as_deref(), parsed.long_context)
    else {
        return;
    };
    // No decision point is larger than the whole body and the recall
    // tools: under the limit, nothing to do (the common case, at the cost
    // of one comparison; the tools' definitions are far under the bound).
    if body.len().saturating_add(RECALL_TOOLS_BOUND) <= limit {
        return;
    }
    // The recall tools, when offered, are part of every decision point.
    let tools = if policy.recall_enabled {
        protocol.recall_tools(names).join(",").len() + 1
    } else {
        0
    };
    if body.len().saturating_add(tools) <= limit {
        return;
    }
    let (start, conversation) = match (parsed.messages.first(), parsed.messages.last()) {
        (Some(a), Some(b)) => (a.span.start, b.span.end.saturating_sub(a.span.start)),
        _ => return,
    };
    let base = body.len().saturating_sub(conversation) + tools;
    let mut points = Vec::new();
    let mut newest_assistant = 0;
    for m in parsed.messages.iter().filter(|m| m.assistant) {
        let at = m.span.start.saturating_sub(start);
        points.push(Point {
            end: at,
            seen_before: newest_assistant,
            uncounted: 0,
        });
        newest_assistant = at;
    }
    points.push(Point {
        end: conversation,
        seen_before: newest_assistant,
        uncounted: 0,
    });
    // What the provider leaves out of each point (thinking of earlier turns).
    let uncounted = protocol.uncounted(body, &parsed.messages, parsed.model.as_deref());
    for p in &mut points {
        p.uncounted = uncounted
            .iter()
            .filter(|u| u.from.saturating_sub(start) < p.end)
            .map(|u| u.span.len())
            .sum();
    }
    // The preview the aging rule renders at: a stub both rules make is the
    // same bytes.
    let preview = policy.budget.preview_chars;
    // What the other rules made stubs of: whether the aging rule did, and
    // the stub.
    let done: BTreeMap<usize, (bool, &str)> = outputs
        .iter()
        .map(|e| {
            (
                e.at,
                (e.reason.starts_with(Reason::Aged.as_str()), e.stub.as_str()),
            )
        })
        .collect();
    let mut measured = Vec::with_capacity(parsed.outputs.len());
    let mut prepared: Vec<Option<Prepared<'b>>> = Vec::with_capacity(parsed.outputs.len());
    for o in &parsed.outputs {
        let original = o.content_span.len() + o.removed.iter().map(Range::len).sum::<usize>();
        let end = o.content_span.end.saturating_sub(start);
        let encoded = |stub: &str| protocol.encode_content(o.shape, stub).len();
        let (state, saving, p) = match done.get(&o.content_span.start) {
            // Aged: counted at its full size (see the module's doc), and
            // already the stub the rule would make.
            Some(&(true, stub)) => (
                State::Candidate,
                original.saturating_sub(encoded(stub)),
                None,
            ),
            Some(&(false, stub)) => (State::Stubbed, original.saturating_sub(encoded(stub)), None),
            None => {
                let tool = policy
                    .tools
                    .resolve(o.tool_name.as_deref(), policy.budget.threshold_chars);
                let p = if may_externalize(o, &tool, policy, names) {
                    Prepared::new(o, tool.mime, preview, memo)
                } else {
                    None
                };
                match p {
                    Some(mut p) => {
                        let stub = p.stub(o, preview, Reason::ContextWindow, mode, names);
                        let saving = original.saturating_sub(encoded(&stub));
                        (State::Candidate, saving, Some(p))
                    }
                    None => (State::Kept, 0, None),
                }
            }
        };
        measured.push(Output { end, saving, state });
        prepared.push(p);
    }
    let picked = rescued(limit, aim, base, &points, &measured);
    let mut added = false;
    for (i, pick) in picked.into_iter().enumerate() {
        let (true, Some(p)) = (pick, prepared[i].as_mut()) else {
            continue;
        };
        externalize(
            &parsed.outputs[i],
            p,
            preview,
            Reason::ContextWindow,
            mode,
            names,
            protocol,
            outputs,
            splices,
        );
        added = true;
    }
    if added {
        outputs.sort_by_key(|o| o.at);
    }
}

/// More than the recall tools' definitions take in any protocol (about 2
/// KB with the longest names allowed).
const RECALL_TOOLS_BOUND: usize = 16 * 1024;

/// One decision point: a request of the conversation, as the prefix of
/// this one it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    /// Where it ends, from the conversation's start.
    pub end: usize,
    /// Where its newest assistant message starts (outputs ending at or
    /// before it were seen by the model): 0 when it has none.
    pub seen_before: usize,
    /// Bytes of it the provider does not count against the window
    /// ([`crate::protocol::Protocol::uncounted`]: Anthropic's thinking
    /// blocks of earlier turns).
    pub uncounted: usize,
}

/// One output of the conversation, as the rule measures it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Output {
    /// Where it ends, from the conversation's start.
    pub end: usize,
    /// The bytes its stub removes from the body.
    pub saving: usize,
    pub state: State,
}

/// What the other rules made of an output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// A stub of a first-sight rule: counted as removed from its first
    /// request on.
    Stubbed,
    /// The rule may replace it.
    Candidate,
    /// Stays inline (an error, `never`, a recall result, undecodable).
    Kept,
}

/// Which of `outputs` (in body order) the rule replaces, over decision
/// points `points` (oldest first), with `base` bytes outside the
/// conversation: a point over `limit` bytes loses outputs it has seen
/// until under `aim`, then, if still over `limit`, its newest turn's until
/// under `limit`.
pub fn rescued(
    limit: usize,
    aim: usize,
    base: usize,
    points: &[Point],
    outputs: &[Output],
) -> Vec<bool> {
    let mut rescued = vec![false; outputs.len()];
    for p in points {
        let removed: usize = outputs
            .iter()
            .zip(&rescued)
            .filter(|(o, r)| o.end <= p.end && (**r || o.state == State::Stubbed))
            .map(|(o, _)| o.saving)
            .sum();
        let mut size = (base + p.end).saturating_sub(removed + p.uncounted);
        if size <= limit {
            continue;
        }
        for seen in [true, false] {
            let mut order: Vec<usize> = (0..outputs.len())
                .filter(|&i| {
                    let o = &outputs[i];
                    o.state == State::Candidate
                        && !rescued[i]
                        && o.saving > 0
                        && o.end <= p.end
                        && (o.end <= p.seen_before) == seen
                })
                .collect();
            // Largest first; ties: earlier first (the sort is stable).
            order.sort_by(|&a, &b| outputs[b].saving.cmp(&outputs[a].saving));
            let under = if seen { aim } else { limit };
            for i in order {
                if size <= under {
                    break;
                }
                rescued[i] = true;
                size = size.saturating_sub(outputs[i].saving);
            }
            if size <= limit {
                break;
            }
        }
    }
    rescued
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stub::RecallToolNames;

    fn out(end: usize, saving: usize) -> Output {
        Output {
            end,
            saving,
            state: State::Candidate,
        }
    }

    #[test]
    fn the_table_matches_first_entry_first_and_falls_back_on_the_default() {
        let w = Window::default();
        assert_eq!(
            w.tokens_for(Some("claude-sonnet-4-5-20250929")),
            Some(200_000)
        );
        assert_eq!(
            w.tokens_for(Some("us.anthropic.claude-opus-4-1")),
            Some(200_000)
        );
        for native in [
            "claude-opus-5-5",
            "claude-fable-5-1",
            "anthropic.claude-sonnet-5-v1",
        ] {
            assert_eq!(w.tokens_for(Some(native)), Some(1_000_000), "{native}");
        }
        assert_eq!(w.tokens_for(Some("gpt-5-chat-latest")), Some(128_000));
        assert_eq!(w.tokens_for(Some("gpt-5.1-codex")), Some(272_000));
        assert_eq!(w.tokens_for(Some("gpt-4.1-mini")), Some(1_047_576));
        assert_eq!(w.tokens_for(Some("o4-mini")), Some(200_000));
        assert_eq!(w.tokens_for(Some("gemini-2.5-pro")), Some(1_048_576));
        assert_eq!(w.tokens_for(Some("some-model")), Some(DEFAULT_TOKENS));
        assert_eq!(w.tokens_for(None), Some(DEFAULT_TOKENS));
        let off = Window {
            default_tokens: 0,
            ..Window::default()
        };
        assert_eq!(off.tokens_for(Some("some-model")), None);
        // 200,000 tokens less 10%, at 2.25 bytes a token; the aim 60%.
        assert_eq!(w.limits(Some("claude-x")), Some((405_000, 270_000)));
        // Asked for the long context: 1M tokens, never less than the table's.
        assert_eq!(
            w.limits_of(Some("claude-x"), true),
            Some((2_025_000, 1_350_000))
        );
        assert_eq!(
            w.limits_of(Some("gemini-2.5-pro"), true),
            w.limits_of(Some("gemini-2.5-pro"), false)
        );
        let disabled = Window {
            enabled: false,
            ..Window::default()
        };
        assert_eq!(disabled.limits_of(Some("claude-x"), true), None);
        let disabled = Window {
            enabled: false,
            ..Window::default()
        };
        assert_eq!(disabled.limit_bytes(Some("claude-x")), None);
    }

    #[test]
    fn the_recall_tools_are_far_under_their_bound() {
        use crate::protocol::anthropic::AnthropicMessages;
        use crate::protocol::gemini::Gemini;
        use crate::protocol::openai_chat::OpenAiChat;
        use crate::protocol::responses::OpenAiResponses;
        use crate::protocol::Protocol;
        let long = "n".repeat(64);
        let names = RecallToolNames {
            read: long.clone(),
            search: long.clone(),
            list: long,
        };
        let protocols: [&dyn Protocol; 4] = [
            &OpenAiChat,
            &AnthropicMessages,
            &OpenAiResponses,
            &Gemini::GENERATE,
        ];
        for p in protocols {
            assert!(p.recall_tools(&names).join(",").len() * 2 < RECALL_TOOLS_BOUND);
        }
    }

    #[test]
    fn under_the_limit_nothing_is_rescued() {
        let points = [Point {
            end: 900,
            seen_before: 800,
            uncounted: 0,
        }];
        assert_eq!(
            rescued(1000, 1000, 100, &points, &[out(300, 200), out(600, 250)]),
            [false, false]
        );
    }

    #[test]
    fn seen_outputs_go_first_largest_first_and_unseen_ones_only_when_needed() {
        // Point at 1,000 bytes with 100 outside: 1,100 against 800. Seen:
        // the outputs ending by 700.
        let points = [Point {
            end: 1000,
            seen_before: 700,
            uncounted: 0,
        }];
        let outputs = [out(200, 150), out(500, 200), out(900, 400)];
        // 1,100 - 200 = 900 > 800, - 150 = 750: the unseen one stays.
        assert_eq!(
            rescued(800, 800, 100, &points, &outputs),
            [true, true, false]
        );
        // Under 950, the largest alone is enough; over 1,000 aiming under
        // 800, both seen ones go.
        assert_eq!(
            rescued(950, 950, 100, &points, &outputs),
            [false, true, false]
        );
        assert_eq!(
            rescued(1000, 800, 100, &points, &outputs),
            [true, true, false]
        );
        // Against 500, the seen ones are not enough: the unseen one too.
        assert_eq!(
            rescued(500, 500, 100, &points, &outputs),
            [true, true, true]
        );
        // The newest turn's go only to get under the limit, not the aim:
        // 750 after the seen ones, over 700, - 400 = 350.
        assert_eq!(
            rescued(700, 100, 100, &points, &outputs),
            [true, true, true]
        );
        assert_eq!(
            rescued(760, 100, 100, &points, &outputs),
            [true, true, false]
        );
        // Ties: the earlier first.
        let tied = [out(200, 300), out(500, 300)];
        assert_eq!(rescued(850, 850, 100, &points, &tied), [true, false]);
    }

    #[test]
    fn first_sight_stubs_count_and_kept_outputs_are_never_taken() {
        let points = [Point {
            end: 1000,
            seen_before: 900,
            uncounted: 0,
        }];
        let outputs = [
            Output {
                end: 300,
                saving: 250,
                state: State::Stubbed,
            },
            Output {
                end: 600,
                saving: 500,
                state: State::Kept,
            },
            out(800, 100),
        ];
        // 1,000 - 250 = 750 > 700: only the candidate can go.
        assert_eq!(
            rescued(700, 700, 0, &points, &outputs),
            [false, false, true]
        );
    }

    #[test]
    fn each_request_reproduces_the_decisions_of_the_earlier_ones() {
        // Turns of 300 bytes: an assistant message at 300k, its output
        // after it. Each request is the conversation up to an assistant
        // message, the last the whole body.
        let outputs: Vec<Output> = (0..10)
            .map(|k| out(300 * k + 250, [200, 100, 150, 220][k % 4]))
            .collect();
        let points_upto = |n: usize| -> Vec<Point> {
            (1..=n)
                .map(|k| Point {
                    end: 300 * k,
                    seen_before: 300 * (k - 1),
                    uncounted: 0,
                })
                .collect()
        };
        let mut before: Vec<bool> = Vec::new();
        for n in 1..=10 {
            let visible = &outputs[..n];
            let now = rescued(1200, 900, 50, &points_upto(n), visible);
            // An output rescued in an earlier request stays rescued.
            for (i, was) in before.iter().enumerate() {
                assert!(!was || now[i], "request {n}: {before:?} -> {now:?}");
            }
            before = now;
        }
        assert!(before.iter().any(|r| *r));
    }

    /// Requests through the whole rewrite (Chat Completions).
    mod requests {
        use crate::protocol::openai_chat::OpenAiChat;
        use crate::rewrite::tool_policy::Glob;
        use crate::rewrite::tool_policy::{Externalize, ToolRule, ToolRules};
        use crate::rewrite::window::Window;
        use crate::rewrite::{rewrite, Mode, Outcome, Policy};
        use serde_json::value::RawValue;

        /// Output `i`: `chars` characters of numbered lines, its own text.
        fn output(i: usize, chars: usize) -> String {
            let mut s = String::new();
            let mut k = 0;
            while s.len() < chars {
                s.push_str(&format!("output {i} line {k}: some words of a log\n"));
                k += 1;
            }
            s
        }

        /// A conversation of one call per turn, output `i` answering turn `i`,
        /// of the tool `tool`.
        fn conversation(outputs: &[String], tool: &str) -> String {
            let mut messages = vec![r#"{"role":"user","content":"go"}"#.to_string()];
            for (i, o) in outputs.iter().enumerate() {
                messages.push(format!(
                    r#"{{"role":"assistant","content":"step {i}","tool_calls":[{{"id":"call_{i}","type":"function","function":{{"name":"{tool}","arguments":"{{}}"}}}}]}}"#
                ));
                messages.push(format!(
                    r#"{{"role":"tool","tool_call_id":"call_{i}","content":{}}}"#,
                    serde_json::to_string(o).unwrap_or_default()
                ));
            }
            format!(
                r#"{{"model":"small-model","messages":[{}],"tools":[{{"type":"function","function":{{"name":"{tool}","parameters":{{}}}}}}]}}"#,
                messages.join(",")
            )
        }

        /// A window of 20,000 tokens for `small-model` at 3 bytes a token:
        /// over 54,000 bytes, brought under 42,000.
        fn policy() -> Policy {
            Policy {
                window: Window {
                    table: vec![(Glob::literal("small-model"), 20_000)],
                    bytes_per_token_milli: 3_000,
                    aim_permille: 700,
                    ..Window::default()
                },
                ..Policy::default()
            }
        }

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

        /// The body sent and the reasons of its stubs.
        fn send(body: &str, policy: &Policy) -> (String, Vec<String>) {
            match rewrite(body.as_bytes(), policy, &OpenAiChat, Mode::WithRefs) {
                Outcome::Rewritten(r) => (
                    r.body.clone(),
                    r.outputs.iter().map(|o| o.reason.clone()).collect(),
                ),
                Outcome::Unchanged(_) => (body.to_string(), Vec::new()),
            }
        }

        const SHOWN: &str = "[toolstub: tool output shown in full earlier]";

        /// Three Anthropic turns, each a thinking call and its 9,000-character
        /// output; the first two think 20,000 characters each. 67 KB in all,
        /// 27 KB once the earlier turns' thinking is left out.
        fn thinking_turns(extra: &str) -> String {
            let thought = |chars: usize| "weighing the options ".repeat(chars / 21);
            let mut messages = Vec::new();
            for (turn, prompt) in ["go", "next", "more"].iter().enumerate() {
                messages.push(format!(r#"{{"role":"user","content":"{prompt}"}}"#));
                let chars = if turn < 2 { 20_000 } else { 100 };
                messages.push(format!(
                    r#"{{"role":"assistant","content":[{{"type":"thinking","thinking":"{}","signature":"s{turn}"}},{{"type":"tool_use","id":"t{turn}","name":"fetch","input":{{}}}}]}}"#,
                    thought(chars)
                ));
                messages.push(format!(
                    r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t{turn}","content":{}}}]}}"#,
                    serde_json::to_string(&output(turn, 9_000)).unwrap_or_default()
                ));
                if turn < 2 {
                    messages.push(
                        r#"{"role":"assistant","content":[{"type":"text","text":"ok"}]}"#
                            .to_string(),
                    );
                }
            }
            format!(
                r#"{{"model":"claude-sonnet-4-5","max_tokens":100{extra},"tools":[{{"name":"fetch","input_schema":{{"type":"object"}}}}],"messages":[{}]}}"#,
                messages.join(",")
            )
        }

        #[test]
        fn thinking_the_api_leaves_out_is_not_measured() {
            use crate::protocol::anthropic::AnthropicMessages;
            // [`policy`]'s window, for `model`.
            let policy_for = |model: &str| Policy {
                window: Window {
                    table: vec![(Glob::literal(model), 20_000)],
                    ..policy().window
                },
                ..policy()
            };
            let reasons = |body: &str, model: &str| {
                let body = body.replacen("claude-sonnet-4-5", model, 1);
                match rewrite(
                    body.as_bytes(),
                    &policy_for(model),
                    &AnthropicMessages,
                    Mode::WithRefs,
                ) {
                    Outcome::Rewritten(r) => r.outputs.iter().map(|o| o.reason.clone()).collect(),
                    Outcome::Unchanged(_) => Vec::new(),
                }
            };
            let sonnet = "claude-sonnet-4-5";
            let limit = policy_for(sonnet)
                .window
                .limit_bytes(Some(sonnet))
                .unwrap_or(0);
            let body = thinking_turns("");
            assert!(body.len() > limit, "{} <= {limit}", body.len());
            // Sonnet 4.5 leaves the earlier turns' thinking out.
            assert!(reasons(&body, sonnet).is_empty(), "nothing to rescue");
            // Kept by the request (Claude Code's `keep: "all"`), it counts.
            let kept = thinking_turns(
                r#","context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]}"#,
            );
            assert!(reasons(&kept, sonnet).iter().any(|r| r == "context_window"));
            // So it does on a model that keeps every turn's thinking.
            let opus = reasons(&body, "claude-opus-4-5");
            assert!(opus.iter().any(|r| r == "context_window"), "{opus:?}");
        }

        #[test]
        fn a_conversation_over_the_window_is_brought_under_and_stays_so() {
            assert!(over_the_window(&policy(), &["context_window"]));
        }

        #[test]
        fn with_aging_on_both_rules_keep_what_they_sent() {
            // Aging every output after two turns, beside the rescue: each
            // rule's stubs stay as they were sent, whichever made them,
            // and every request is under the limit (the rescue measures
            // aged outputs at full size: it may find them all it needs).
            let policy = Policy {
                aging: crate::rewrite::aging::Aging {
                    after_turns: 2,
                    floor_chars: 300,
                    min_share_permille: 0,
                    horizon_permille: 0,
                    after_expiry: true,
                },
                ..policy()
            };
            over_the_window(&policy, &["aged", "context_window"]);
        }

        /// Replays the conversation request by request; whether the rescue
        /// stubbed anything.
        fn over_the_window(policy: &Policy, reasons_allowed: &[&str]) -> bool {
            // Ten outputs of 9,000 characters (under every threshold):
            // 90 KB against 54,000 bytes.
            let outputs: Vec<String> = (0..10).map(|i| output(i, 9_000)).collect();
            let policy = policy.clone();
            let limit = policy.window.limit_bytes(Some("small-model")).unwrap_or(0);
            let mut previous: Vec<String> = Vec::new();
            let mut rescued_any = false;
            for n in 1..=outputs.len() {
                let body = conversation(&outputs[..n], "fetch");
                let (sent, reasons) = send(&body, &policy);
                assert!(sent.len() <= limit, "request {n}: {} > {limit}", sent.len());
                assert!(
                    reasons
                        .iter()
                        .all(|r| reasons_allowed.contains(&r.as_str())),
                    "{reasons:?}"
                );
                rescued_any |= reasons.iter().any(|r| r == "context_window");
                // Byte for byte what the previous request sent, but for
                // outputs this request's own decision point rescued; a
                // stub once sent stays the same bytes.
                let messages = messages_of(&sent);
                for (i, was) in previous.iter().enumerate() {
                    let now = &messages[i];
                    assert!(
                        was == now || (!was.contains(SHOWN) && now.contains(SHOWN)),
                        "request {n}, message {i}"
                    );
                }
                // Rewritten again with nothing new, a request sends the same.
                assert_eq!(send(&body, &policy).0, sent);
                // The newest output, never seen, is sent in full.
                let newest = messages.last().map(String::as_str).unwrap_or("");
                assert!(!newest.contains(SHOWN), "request {n}");
                previous = messages;
            }
            rescued_any
        }

        #[test]
        fn the_largest_seen_outputs_go_first_and_the_rest_stay() {
            let outputs = vec![
                output(0, 3_000),
                output(1, 15_000),
                output(2, 8_000),
                output(3, 14_000),
                output(4, 6_000),
                output(5, 16_000),
            ];
            let body = conversation(&outputs, "fetch");
            assert!(body.len() > 54_000 + 10_000);
            let (sent, _) = send(&body, &policy());
            let messages = messages_of(&sent);
            let stubbed: Vec<bool> = (0..outputs.len())
                .map(|i| messages[2 + 2 * i].contains(SHOWN))
                .collect();
            // 62 KB of outputs: the request before the newest turn (46 KB)
            // fits; this one is over 54,000 bytes and is brought under 70%
            // of the window (42,000 bytes): outputs 1 (15,000) and 3
            // (14,000), the largest seen. The newest (16,000) stays.
            assert_eq!(stubbed, [false, true, false, true, false, false]);
        }

        #[test]
        fn under_the_window_nothing_changes() {
            let outputs: Vec<String> = (0..10).map(|i| output(i, 9_000)).collect();
            let body = conversation(&outputs, "fetch");
            // The default window of an unknown model: 128,000 tokens.
            let (sent, reasons) = send(&body, &Policy::default());
            assert_eq!(sent, body);
            assert!(reasons.is_empty());
            // Off: nothing either.
            let mut off = policy();
            off.window.enabled = false;
            assert_eq!(send(&body, &off).0, body);
        }

        #[test]
        fn a_tool_whose_rule_says_never_stays_inline() {
            let outputs: Vec<String> = (0..10).map(|i| output(i, 9_000)).collect();
            let body = conversation(&outputs, "fetch");
            let policy = Policy {
                tools: ToolRules(vec![ToolRule {
                    pattern: Glob::literal("fetch"),
                    threshold_chars: None,
                    conversation_budget: None,
                    externalize: Some(Externalize::Never),
                    mime: None,
                }]),
                ..policy()
            };
            assert_eq!(send(&body, &policy).0, body);
        }

        #[test]
        fn preview_only_does_nothing_more() {
            let outputs: Vec<String> = (0..10).map(|i| output(i, 9_000)).collect();
            let body = conversation(&outputs, "fetch");
            let out = rewrite(body.as_bytes(), &policy(), &OpenAiChat, Mode::PreviewOnly);
            assert!(matches!(out, Outcome::Unchanged(_)));
        }
    }
}
