//! Fuzz target: the request rewrite on any bytes as a request body of any
//! protocol (OpenAI Chat Completions, Anthropic Messages, OpenAI
//! Responses, the Gemini API), under any configuration within its bounds, in both modes.
//!
//! Input layout: the first [`CONFIG_BYTES`] bytes derive the protocol and
//! the [`Policy`] (switches, per-tool rules with a MIME hint, a threshold
//! of their own or `never`, the aging rule, the first-stub rule, the
//! context-window rescue with windows small enough to act, the five budgets
//! of the selection (threshold, preview, turn budgets) and the
//! conversation budget within sane bounds, small values as likely as large
//! ones), and the requests after which the provider's cache expired
//! (none, or one of 0..=63 messages); the rest is the body.
//!
//! Invariants: no panic; a body that is not UTF-8 JSON is `Unchanged`, and
//! so is one the adapter calls surely untouched (forwarded unparsed); when
//! rewritten, the new body is valid JSON with the same number of messages,
//! and it is the original byte for byte except for (a) each externalized
//! output, in order: its content replaced by its encoded stub and the spans
//! the adapter named for removal (Anthropic's other text blocks) gone, and
//! (b) one insertion of the recall tools (when the policy adds them)
//! and the adapter's recall edits (Responses with `store: false`: the
//! encrypted reasoning asked for in `include`); every restoration
//! candidate's span is an assistant message (or a run of the model's items)
//! of the new body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolstub::protocol::anthropic::cache_control;
use toolstub::protocol::anthropic::AnthropicMessages;
use toolstub::protocol::gemini::Gemini;
use toolstub::protocol::openai_chat::OpenAiChat;
use toolstub::protocol::responses::OpenAiResponses;
use toolstub::protocol::Protocol;
use toolstub::rewrite::aging::Aging;
use toolstub::rewrite::first_stub::Gate as FirstStub;
use toolstub::rewrite::memo::Memo;
use toolstub::rewrite::select::Budget;
use toolstub::rewrite::tool_policy::{Externalize, Glob, ToolRule, ToolRules};
use toolstub::rewrite::window::Window;
use toolstub::rewrite::{
    rewrite_reading_for, Mode, Outcome, Policy, RequestFacts, Rewritten, Unchanged,
};
use toolstub::stub::RecallToolNames;

const CONFIG_BYTES: usize = 10;

const MIMES: [&str; 8] = [
    "application/json",
    "text/csv",
    "text/tab-separated-values",
    "application/xml",
    "application/yaml",
    "text/x-python",
    "text/plain",
    "application/octet-stream",
];

fn policy(c: &[u8; CONFIG_BYTES]) -> Policy {
    let b = |i: usize| usize::from(c[i]);
    let mut rules = Vec::new();
    if c[7] & 1 != 0 {
        rules.push(ToolRule {
            pattern: Glob::new("f*").expect("pattern"),
            threshold_chars: (c[7] & 2 != 0).then(|| 1 + b(7) * b(7)),
            conversation_budget: (c[7] & 4 != 0).then_some(c[7] & 16 != 0),
            externalize: (c[7] & 8 != 0).then_some(Externalize::Never),
            mime: None,
        });
    }
    if c[0] & 0b10 != 0 {
        let mime = MIMES[usize::from((c[0] >> 2) & 0b111)];
        for tool in ["fetch", "read_file"] {
            rules.push(ToolRule {
                pattern: Glob::literal(tool),
                threshold_chars: None,
                conversation_budget: None,
                externalize: None,
                mime: Some(mime.to_string()),
            });
        }
    }
    Policy {
        enabled: c[0] != 0xff,
        budget: Budget {
            // 1..=65026, quadratic so that small thresholds are common.
            threshold_chars: 1 + b(1) * b(1),
            preview_chars: b(2) * 16,
            min_preview_chars: b(3) * 8,
            turn_preview_budget_chars: b(4) * 80,
            turn_inline_budget_chars: b(5) * b(5) * 4 + b(6),
            // 0 (off) or 1..=65026.
            conversation_inline_budget_chars: b(8) * b(8),
            conversation_floor_chars: b(6) * 64,
        },
        recall_enabled: c[0] & 1 != 0,
        // The last round of a recall loop that drops the tools.
        withhold_recall_tools: c[1] & 1 != 0,
        recall_names: RecallToolNames::default(),
        tools: ToolRules(rules),
        externalize_errors: c[0] & 0x20 != 0,
        // The aging rule: off, or after 1..=4 turns with or without its
        // price gate.
        aging: Aging {
            after_turns: if c[7] & 0x20 != 0 {
                1 + usize::from(c[8] & 3)
            } else {
                0
            },
            floor_chars: b(3) * 16,
            min_share_permille: if c[7] & 0x40 != 0 { 0 } else { 920 },
            horizon_permille: if c[7] & 0x80 != 0 { 1000 } else { 0 },
            after_expiry: c[9] & 1 != 0,
        },
        // The context-window rescue: off, or a window of 1..=65026 tokens
        // (bodies of a few kilobytes go over it), brought under 10-85%.
        window: Window {
            enabled: c[8] & 8 != 0,
            table: Vec::new(),
            default_tokens: 1 + u64::from(c[2]) * u64::from(c[2]),
            bytes_per_token_milli: 2_250,
            margin_permille: 100,
            aim_permille: 100 + u32::from(c[8] >> 4) * 50,
        },
        // The first-stub rule: off, or a horizon of 0..=2.55 later requests
        // a turn with a floor of 0..=15.
        first_stub: FirstStub {
            horizon_permille: (c[6] & 1 == 0).then(|| u32::from(c[4]) * 10),
            min_later: u32::from(c[5] & 15),
        },
        // The recall tools from a conversation's first request: for every
        // model, or for none.
        tools_from_start: if c[8] & 4 != 0 {
            Glob::new("*").into_iter().collect()
        } else {
            Vec::new()
        },
        prompt_cache_ttl_ms: 300_000,
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < CONFIG_BYTES {
        return;
    }
    let (config, body) = data.split_at(CONFIG_BYTES);
    let mut c = [0u8; CONFIG_BYTES];
    c.copy_from_slice(config);
    let policy = policy(&c);
    let expired: Vec<usize> = (c[9] & 2 != 0)
        .then_some(usize::from(c[9] >> 2))
        .into_iter()
        .collect();
    let facts = RequestFacts {
        expired: &expired,
        ..RequestFacts::default()
    };
    // (adapter, the member holding the conversation)
    let (protocol, key): (&dyn Protocol, &str) = match (c[0] & 0x40 != 0, c[0] & 0x80 != 0) {
        (true, false) => (&AnthropicMessages, "messages"),
        (true, true) if c[0] != 0xff && c[8] & 4 != 0 => (&Gemini::STREAM, "contents"),
        (true, true) if c[0] != 0xff => (&Gemini::GENERATE, "contents"),
        (false, true) => (&OpenAiResponses, "input"),
        _ => (&OpenAiChat, "messages"),
    };
    let untouched = protocol.surely_untouched(body);
    let is_json = std::str::from_utf8(body)
        .ok()
        .is_some_and(|t| serde_json::from_str::<serde::de::IgnoredAny>(t).is_ok());

    for mode in [Mode::WithRefs, Mode::PreviewOnly] {
        match rewrite_reading_for(body, &policy, protocol, mode, &Memo::new(0), facts).0 {
            Outcome::Unchanged(why) => {
                if !policy.enabled {
                    assert_eq!(why, Unchanged::Disabled);
                } else if !is_json {
                    assert_eq!(why, Unchanged::NotUnderstood);
                }
            }
            Outcome::Rewritten(r) => {
                assert!(policy.enabled, "rewritten while disabled");
                assert!(is_json, "rewrote a body that is not JSON");
                assert!(!untouched, "rewrote a body said to be surely untouched");
                check_rewritten(body, &r, &policy, mode, protocol, key);
            }
        }
    }
});

fn check_rewritten(
    body: &[u8],
    r: &Rewritten<'_>,
    policy: &Policy,
    mode: Mode,
    protocol: &dyn Protocol,
    key: &str,
) {
    let original = std::str::from_utf8(body).expect("rewritten implies UTF-8");
    let parsed = protocol.parse(original).expect("rewritten implies parsed");
    // Spelled out here rather than asked of the code under test: recall on,
    // not the last round of a recall loop (which withholds them), refs.
    let adds_tools =
        policy.recall_enabled && !policy.withhold_recall_tools && mode == Mode::WithRefs;
    // With the aging rule on, a conversation that declares tools is
    // rewritten from its first request (the recall tools offered), with or
    // without an output to replace.
    let from_start = policy.aging.after_turns > 0
        && mode == Mode::WithRefs
        && !parsed.client_tool_names.is_empty();
    assert!(
        !r.outputs.is_empty() || from_start,
        "rewritten without outputs"
    );
    // Never more cache breakpoints than the API takes (unless the client
    // sent more), counted by the request's structure.
    if let (Some(before), Some(after)) = (
        cache_control::count(original),
        cache_control::count(&r.body),
    ) {
        if key == "messages" && protocol.flavor() == toolstub::protocol::Flavor::Anthropic {
            assert!(
                after <= before.max(cache_control::MAX_BREAKPOINTS),
                "{after} cache breakpoints, {before} sent"
            );
        }
    }
    // The aging rule's anchor ends a message of the new body.
    if let Some(anchor) = r.cache_anchor {
        assert!(policy.aging.after_turns > 0, "an anchor without aging");
        assert!(
            r.body.get(..anchor).is_some_and(|b| b.ends_with('}')),
            "the anchor {anchor} does not end a message"
        );
    }

    // The new body is JSON with as many messages as the original.
    let old = message_count(original, key).expect("the original has messages");
    let new = match message_count(&r.body, key) {
        Ok(n) => n,
        Err(e) => panic!("rewritten body is not a JSON chat body: {e}\n{}", r.body),
    };
    assert_eq!(old, new, "message count changed");

    // Byte for byte: walk the original's gaps and contents along the new body.
    let insertions: Vec<(String, String)> = if adds_tools {
        let tools = protocol.recall_tools(&r.recall_names).join(",");
        vec![
            (String::new(), format!(",{tools}")),
            (String::new(), tools.clone()),
            (String::new(), format!(",\"tools\":[{tools}]")),
            (String::new(), format!("\"tools\":[{tools}]")),
            ("null".to_string(), format!("[{tools}]")),
        ]
    } else {
        Vec::new()
    };
    // The adapter's recall edits, each exactly once, anywhere in a gap, and
    // a cache breakpoint the aging rule may ask for at the end of a message
    // (at most one).
    let mut edits: Vec<(String, bool, bool)> = if adds_tools {
        protocol
            .recall_edits(original)
            .into_iter()
            .map(|(range, text)| {
                assert!(range.is_empty(), "recall edits only insert");
                (text, false, true)
            })
            .collect()
    } else {
        Vec::new()
    };
    if policy.aging.after_turns > 0 {
        let mut breakpoints: Vec<String> = parsed
            .messages
            .iter()
            .flat_map(|m| protocol.cache_breakpoint(original, m.span.clone()))
            .map(|(range, text)| {
                assert!(range.is_empty(), "a cache breakpoint only inserts");
                text
            })
            .collect();
        breakpoints.dedup();
        edits.extend(breakpoints.into_iter().map(|text| (text, false, false)));
    }
    let mut inserted = false;
    let mut stubs = r.outputs.iter().peekable();
    let old_bytes = original.as_bytes();
    let new_body = r.body.as_bytes();
    let mut at = 0; // in the original
    let mut p = 0; // in the new body
    for output in &parsed.outputs {
        let span = output.content_span.clone();
        // One output's bytes: its removable spans, what lies between them,
        // and its content.
        let unit_start = output.removed.first().map_or(span.start, |r| r.start);
        p = walk_gap(
            &old_bytes[at..unit_start],
            new_body,
            p,
            &insertions,
            &mut inserted,
            &mut edits,
        );
        // Externalized: the removable spans gone, the content the next stub.
        let stubbed = stubs.peek().map(|o| {
            let mut expected = Vec::new();
            let mut from = unit_start;
            for removed in &output.removed {
                expected.extend_from_slice(&old_bytes[from..removed.start]);
                from = removed.end;
            }
            expected.extend_from_slice(&old_bytes[from..span.start]);
            expected.extend_from_slice(protocol.encode_content(output.shape, &o.stub).as_bytes());
            expected
        });
        match stubbed.filter(|s| new_body[p..].starts_with(s)) {
            Some(s) => {
                p += s.len();
                stubs.next();
            }
            None => {
                let kept = &old_bytes[unit_start..span.end];
                assert!(
                    new_body[p..].starts_with(kept),
                    "output at {span:?} neither kept nor stubbed"
                );
                p += kept.len();
            }
        }
        at = span.end;
    }
    p = walk_gap(
        &old_bytes[at..],
        new_body,
        p,
        &insertions,
        &mut inserted,
        &mut edits,
    );
    assert!(
        edits.iter().all(|(_, used, required)| *used || !*required),
        "a recall edit is missing"
    );
    assert!(
        edits
            .iter()
            .filter(|(_, used, required)| *used && !*required)
            .count()
            <= 1,
        "more than one cache breakpoint"
    );
    assert_eq!(p, new_body.len(), "extra bytes at the end of the new body");
    assert!(
        stubs.next().is_none(),
        "a stub is missing from the new body"
    );
    assert_eq!(
        inserted,
        adds_tools,
        "recall tools inserted: {inserted}"
    );
    // Restoration candidates point at assistant messages of the new body.
    for turn in &r.turns {
        let message = &r.body[turn.span.clone()];
        let canon = protocol.message_canon(message);
        assert!(
            // Gemini calls the assistant "model".
            canon
                .as_deref()
                .is_some_and(|c| c.starts_with("assistant") || c.starts_with("model")),
            "turn {:?} is not an assistant message: {message:.80}",
            turn.span
        );
    }
}

/// The number of messages (or items) under `key`, read without decoding
/// strings (`serde_json::Value` refuses lone surrogate escapes, which JSON
/// allows and clients send).
fn message_count(body: &str, key: &str) -> Result<usize, String> {
    let shape: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
        serde_json::from_str(body).map_err(|e| e.to_string())?;
    let list = shape.get(key).ok_or("no conversation")?;
    serde_json::from_str::<Vec<&serde_json::value::RawValue>>(list.get())
        .map(|l| l.len())
        .map_err(|e| e.to_string())
}

/// Matches one gap of the original (bytes outside every tool content) at
/// `p` in the new body, allowing the one recall-tools insertion; returns the
/// new position.
fn walk_gap(
    mut gap: &[u8],
    new_body: &[u8],
    mut p: usize,
    insertions: &[(String, String)],
    inserted: &mut bool,
    edits: &mut [(String, bool, bool)],
) -> usize {
    loop {
        let common = gap
            .iter()
            .zip(&new_body[p..])
            .take_while(|(x, y)| x == y)
            .count();
        gap = &gap[common..];
        p += common;
        if gap.is_empty() {
            return p;
        }
        let hit = insertions.iter().find(|(old, new)| {
            !*inserted
                && gap.starts_with(old.as_bytes())
                && new_body[p..].starts_with(new.as_bytes())
        });
        if let Some((text, used, _)) = edits
            .iter_mut()
            .find(|(text, used, _)| !*used && new_body[p..].starts_with(text.as_bytes()))
            .filter(|_| hit.is_none())
        {
            p += text.len();
            *used = true;
            continue;
        }
        match hit {
            Some((old, new)) => {
                gap = &gap[old.len()..];
                p += new.len();
                *inserted = true;
            }
            None => panic!(
                "the original changed: {:?} became {:?}",
                String::from_utf8_lossy(&gap[..gap.len().min(60)]),
                String::from_utf8_lossy(&new_body[p..new_body.len().min(p + 60)])
            ),
        }
    }
}
