//! Replaying recorded agent sessions through the real rewrite, billed the
//! way providers bill: what a session would have cost sent directly and
//! what it costs through toolstub, net of the recalls toolstub's stubs
//! would have caused (`toolstub estimate`, BENCHMARKS.md "Savings on real
//! sessions").
//!
//! A session ([`Recorded`]) is the list of requests its agent sent, each as
//! the body the agent sent (in its protocol's shape, [`Shape`]), when it was
//! sent, and the model's real answer. [`sources`] reads them from the files
//! agents keep (mini-swe-agent trajectories, Claude Code session files and
//! stream-json logs, Codex rollouts, Chat Completions message logs,
//! Responses item lists, opencode sessions, Gemini CLI chat files). For
//! each request, [`replay`]:
//! 1. runs [`crate::rewrite::rewrite_reading`] on the body with the configured
//!    policy, exactly as `toolstub serve` does (same synopsis, stubs, refs
//!    and recall-tool offer);
//! 2. reads both bodies as prompts ([`prompt`]) and bills each with its own
//!    prompt cache ([`cache`]) at each price model ([`price`]);
//! 3. charges a recall round where the model's real answer uses what only
//!    the direct request carried ([`recall`]), and keeps the exchange in
//!    later requests, as history restoration does.
//!
//! Architecture invariant: pure and offline; nothing is sent anywhere and
//! nothing is stored (refs are computed, never put).

pub mod cache;
pub mod clock;
pub mod estimate;
pub mod price;
pub mod prompt;
pub mod read_back;
pub mod report;
pub mod sources;

use crate::protocol::anthropic::AnthropicMessages;
use crate::protocol::gemini::Gemini;
use crate::protocol::openai_chat::OpenAiChat;
use crate::protocol::responses::OpenAiResponses;
use crate::protocol::Protocol;
use crate::rewrite::memo::Memo;
use crate::rewrite::{
    rewrite_reading, rewrite_reading_for, Mode, Outcome, Policy, Reading, RequestFacts,
};
use cache::{Cache, CacheKind};
use price::PriceModel;
use prompt::{Counter, Prompt};
use report::{ModelBill, SessionReport};
use std::collections::{BTreeMap, BTreeSet};

/// The wire shape a session's requests have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Shape {
    /// OpenAI Chat Completions.
    Chat,
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI Responses.
    Responses,
    /// Google's Gemini `generateContent`.
    Gemini,
}

impl Shape {
    pub const ALL: [Shape; 4] = [
        Shape::Chat,
        Shape::Anthropic,
        Shape::Responses,
        Shape::Gemini,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Shape::Chat => "chat",
            Shape::Anthropic => "anthropic",
            Shape::Responses => "responses",
            Shape::Gemini => "gemini",
        }
    }

    pub fn parse(name: &str) -> Option<Shape> {
        Shape::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The adapter `toolstub serve` uses for requests of this shape.
    pub fn protocol(self) -> &'static dyn Protocol {
        match self {
            Shape::Chat => &OpenAiChat,
            Shape::Anthropic => &AnthropicMessages,
            Shape::Responses => &OpenAiResponses,
            Shape::Gemini => &Gemini::GENERATE,
        }
    }

    /// The provider whose cache requests of this shape meet: Gemini's
    /// implicit cache, automatic and without breakpoints, is billed as
    /// OpenAI's.
    pub fn provider(self) -> CacheKind {
        match self {
            Shape::Anthropic => CacheKind::Anthropic,
            Shape::Chat | Shape::Responses | Shape::Gemini => CacheKind::OpenAi,
        }
    }
}

/// Which files a session came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A mini-swe-agent trajectory (`*.traj.json`), replayed as a
    /// tool-calling agent would send it.
    Trajectory,
    /// A Claude Code session file (`~/.claude/projects/**/*.jsonl`).
    ClaudeCode,
    /// A Codex rollout (`~/.codex/sessions/**/rollout-*.jsonl`).
    Codex,
    /// A Chat Completions message log (a run's `messages`, as SDK agents
    /// and eval harnesses save them).
    ChatLog,
    /// A Responses API input item list (the OpenAI Agents SDK's
    /// `to_input_list()`).
    ResponsesItems,
    /// An opencode session (its storage folder, its database, or
    /// `opencode run --format json` events).
    Opencode,
    /// Claude Code's `--output-format stream-json` events.
    ClaudeCodeStream,
    /// A Gemini CLI chat file (`~/.gemini/tmp/*/chats/session-*`).
    GeminiCli,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Trajectory => "trajectory",
            Source::ClaudeCode => "claude_code",
            Source::Codex => "codex",
            Source::ChatLog => "chat_log",
            Source::ResponsesItems => "responses_items",
            Source::Opencode => "opencode",
            Source::ClaudeCodeStream => "claude_code_stream",
            Source::GeminiCli => "gemini_cli",
        }
    }
}

/// One request a session's agent sent.
#[derive(Clone, Debug)]
pub struct Request {
    /// The body as the agent sent it.
    pub body: String,
    /// When (seconds since the epoch), if the file says.
    pub at: Option<f64>,
    /// The text of the model's real answer (its text and its tool calls'
    /// arguments), for the recall charge.
    pub answer: String,
}

/// A recorded session, ready to replay.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// The file it came from (and which session of it, when several).
    pub name: String,
    pub source: Source,
    pub shape: Shape,
    /// The model the agent asked for.
    pub model: Option<String>,
    /// Blocks of a known size before every request's own, standing for
    /// what the file does not record (name, tokens).
    pub placeholders: Vec<(String, u64)>,
    /// What the replay stands in for, in words: the tool definitions and
    /// system prompt it assumed where the file records none (printed by
    /// `--print-requests` and in the report).
    pub assumed: Vec<String>,
    pub requests: Vec<Request>,
}

/// The price models a replay bills at: the session's own provider first.
#[derive(Clone, Debug)]
pub struct Prices {
    pub table: crate::pricing::PriceTable,
    /// Charge no recall round (`estimate --free-recalls`): what a rule
    /// would save if the model never needed a stub read back, the most it
    /// could save.
    pub free_recalls: bool,
    /// Whether what a recall round read back is put back into the later
    /// requests that hold the message it followed, as the proxy's history
    /// restoration does (`recall.restore_history`, off by default). Off,
    /// the later requests go as the client sends them: the model keeps
    /// only what its own answer took from the text, and the provider's
    /// cache still holds the request before the round. A session whose
    /// history is valid only with the exchange back ([`restores_anyway`])
    /// is replayed restored either way, as the proxy does.
    pub restore_history: bool,
}

impl Prices {
    fn models(&self, shape: Shape, model: Option<&str>) -> Vec<PriceModel> {
        let anthropic = PriceModel::anthropic();
        let openai = PriceModel::openai();
        let (own, other) = match shape.provider() {
            CacheKind::Anthropic => (anthropic, openai),
            CacheKind::OpenAi => (openai, anthropic),
        };
        vec![own.priced(&self.table, model), other]
    }
}

/// Both sides of one price model through a session.
struct Side {
    direct: Cache,
    toolstub: Cache,
    bill: ModelBill,
}

/// Replays one session with `policy` and bills it at both price models.
pub fn replay(session: &Recorded, policy: &Policy, prices: &Prices) -> SessionReport {
    let protocol = session.shape.protocol();
    let memo = Memo::new(1 << 16);
    let mut counter = Counter::default();
    let models = prices.models(session.shape, session.model.as_deref());
    let mut sides: Vec<Side> = models
        .into_iter()
        .map(|model| Side {
            direct: Cache::new(model.cache),
            toolstub: Cache::new(model.cache),
            bill: ModelBill::new(model),
        })
        .collect();
    let prefix: Vec<cache::Block> = session
        .placeholders
        .iter()
        .map(|(name, tokens)| counter.placeholder(name, *tokens))
        .collect();
    let placeholder_tokens: u64 = prefix.iter().map(|b| b.tokens).sum();
    let mut report = SessionReport::new(session);
    let mut refs: BTreeSet<String> = BTreeSet::new();
    // Recall exchanges restored into later requests: (the key of the
    // message each followed, the block).
    let mut restored: Vec<(u128, cache::Block)> = Vec::new();
    let restores_anyway = restores_anyway(session);
    // Each conversation's prompt-cache clock, by its opening (the proxy's
    // session).
    let mut clocks: BTreeMap<String, clock::CacheClock> = BTreeMap::new();
    for (index, request) in session.requests.iter().enumerate() {
        let Some(direct) = counter.prompt(session.shape, &request.body, &prefix) else {
            report.unreadable += 1;
            continue;
        };
        report.requests += 1;
        let (mut outcome, mut read) = rewrite_reading(
            request.body.as_bytes(),
            policy,
            protocol,
            Mode::WithRefs,
            &memo,
        );
        // As the proxy does: a request carrying tool outputs is noted on
        // its conversation's prompt-cache clock, which says which requests
        // came after an expiry; where that would change the request, the
        // rewrite runs again with them.
        let noted = match (&outcome, &read) {
            (Outcome::Rewritten(r), _) => Some((&r.opening, r.clock)),
            (Outcome::Unchanged(_), Some(r)) => Some((&r.opening, r.clock)),
            (Outcome::Unchanged(_), None) => None,
        };
        let noted = noted.filter(|(_, c)| c.tool_outputs > 0 && policy.prompt_cache_ttl_ms > 0);
        if let (Some((opening, clock)), Some(at)) = (noted, request.at) {
            let ttl = protocol
                .cache_lifetime_ms(&request.body)
                .unwrap_or(policy.prompt_cache_ttl_ms);
            // Parsed again only for the identities of its messages (the
            // replay is offline; the proxy parses once).
            let reading = std::cell::OnceCell::new();
            let identity_at = |count: usize| {
                reading
                    .get_or_init(|| {
                        Reading::of(
                            request.body.as_bytes(),
                            policy,
                            protocol,
                            RequestFacts::default(),
                        )
                        .ok()
                    })
                    .as_ref()?
                    .message_identity(protocol, count)
            };
            let points = clocks.entry(opening.clone()).or_default().observe(
                clock.messages,
                at,
                ttl,
                identity_at,
            );
            if clock.expiry_matters && !points.is_empty() {
                report.after_expiry += usize::from(points.contains(&clock.messages));
                let facts = RequestFacts {
                    expired: &points,
                    ..RequestFacts::default()
                };
                (outcome, read) = rewrite_reading_for(
                    request.body.as_bytes(),
                    policy,
                    protocol,
                    Mode::WithRefs,
                    &memo,
                    facts,
                );
            }
        }
        // The window of the model the request names, as the rewrite read
        // it, else the session's, else the default window.
        let model = match &outcome {
            Outcome::Rewritten(r) => r.model.clone(),
            Outcome::Unchanged(_) => read.and_then(|r| r.model),
        };
        let window = policy
            .window
            .tokens_for(model.as_deref().or(session.model.as_deref()));
        report.context_window = report.context_window.max(window);
        let (mut toolstub, rewritten) = match outcome {
            Outcome::Rewritten(r) => match counter.prompt(session.shape, &r.body, &prefix) {
                Some(p) => (p, Some(r)),
                None => (direct.clone(), None),
            },
            Outcome::Unchanged(_) => (direct.clone(), None),
        };
        // The block toolstub makes a breakpoint of (the aging rule's
        // anchor): on Anthropic's API the rewritten body carries it; billed
        // at Anthropic's cache, any shape's request would. A restored
        // exchange comes before the answer it led to (the proxy restores
        // it as the exchange whose last message is that answer, and marks
        // that one), so an anchor on the answer ends the exchange too.
        let anchor = rewritten
            .as_ref()
            .and_then(|r| r.cache_anchor)
            .and_then(|at| toolstub.ends.iter().position(|&end| end == at))
            .and_then(|i| toolstub.blocks.get(toolstub.conversation + i))
            .map(|b| b.key);
        insert_restored(&mut toolstub, &restored);
        report.input_tokens.direct += direct.tokens();
        report.input_tokens.toolstub += toolstub.tokens();
        let peak = &mut report.peak_context;
        peak.direct = peak.direct.max(direct.tokens());
        peak.toolstub = peak.toolstub.max(toolstub.tokens());
        if let Some(w) = window {
            report.over_window.direct += u64::from(direct.tokens() > w);
            report.over_window.toolstub += u64::from(toolstub.tokens() > w);
        }
        // Bytes of the body per token of it (placeholders are not in it),
        // on requests large enough to matter to a window.
        let own = direct.tokens().saturating_sub(placeholder_tokens);
        if own >= 10_000 {
            let ratio = request.body.len() as f64 / own as f64;
            if report.min_bytes_per_token == 0.0 || ratio < report.min_bytes_per_token {
                report.min_bytes_per_token = ratio;
            }
        }
        for side in &mut sides {
            let own = side.bill.price_model.cache == session.shape.provider();
            let d = side.direct.bill(&marked(&direct, own, None), request.at);
            let t = side
                .toolstub
                .bill(&marked(&toolstub, own, anchor), request.at);
            side.bill.direct.add(d);
            side.bill.toolstub.add(t);
        }
        let Some(rewritten) = rewritten else {
            continue;
        };
        report.externalizations += rewritten.outputs.len();
        for o in &rewritten.outputs {
            if let Some(r) = &o.result_ref {
                if refs.insert(r.clone()) {
                    report.outputs_externalized += 1;
                    report.externalized_chars += o.original_chars as u64;
                }
            }
        }
        // The recall the model's real answer would have needed.
        let answer = read_back::identifiers(&request.answer);
        let facts = |p: &Prompt| -> Vec<&read_back::Identifiers> {
            p.blocks
                .iter()
                .filter_map(|b| counter.facts(b.key).map(|f| &f.ids))
                .collect()
        };
        let (direct_ids, toolstub_ids) = (facts(&direct), facts(&toolstub));
        let missing = read_back::missing(
            &answer,
            direct_ids.iter().copied(),
            toolstub_ids.iter().copied(),
        );
        if missing.is_empty() || prices.free_recalls {
            continue;
        }
        let mut read = String::new();
        for o in &rewritten.outputs {
            let Some(text) = o.text.clone().or_else(|| o.content.decode()) else {
                continue;
            };
            let ids = read_back::identifiers(&text);
            let hits: Vec<u64> = missing
                .iter()
                .copied()
                .filter(|&id| ids.contains(id))
                .collect();
            if !hits.is_empty() {
                let reference = o.result_ref.as_deref().unwrap_or("");
                read.push_str(&format!("{{\"ref\":\"{reference}\",\"content\":"));
                read.push_str(read_back::read_for(&text, &hits));
                read.push_str("}\n");
            }
        }
        if read.is_empty() {
            continue;
        }
        let exchange = counter.synthetic(&read);
        let mut round = toolstub.blocks.clone();
        round.push(exchange);
        report.recall_rounds += 1;
        report.recall_read_tokens += exchange.tokens;
        report.recall_read_chars += read.chars().count() as u64;
        report.recalls.push(report::Recall {
            request: index,
            quoted: read_back::named(&request.answer, &missing, 5),
        });
        report.input_tokens.toolstub += toolstub.tokens() + exchange.tokens;
        for side in &mut sides {
            let own = side.bill.price_model.cache == session.shape.provider();
            let round = Prompt {
                blocks: round.clone(),
                ..toolstub.clone()
            };
            let r = side.toolstub.bill(&marked(&round, own, anchor), request.at);
            side.bill.toolstub.add(r);
            side.bill.recall.add(r);
        }
        // Restored after the message it followed: the request's newest.
        if let Some(anchor) = toolstub.blocks.last() {
            let restores = prices.restore_history || restores_anyway;
            if restores && !restored.iter().any(|(_, b)| b.key == exchange.key) {
                restored.push((anchor.key, exchange));
            }
        }
    }
    report.models = sides
        .into_iter()
        .map(|mut s| {
            s.bill.finish();
            s.bill
        })
        .collect();
    report.saved_fraction = report.models.first().map_or(0.0, |m| m.saved_fraction);
    report
}

/// Whether the proxy restores a hidden exchange of `session` whatever
/// `recall.restore_history` says: on the Responses API (a reasoning
/// model's hidden round shows the client a reasoning item, which needs the
/// recall call after it; replayed so for every Responses session, which
/// errs costly for one whose model does not reason), and on Anthropic's
/// when the conversation thinks (a thinking block made after a recall
/// round is bound to the exchange).
fn restores_anyway(session: &Recorded) -> bool {
    match session.shape {
        Shape::Responses => true,
        Shape::Anthropic => session.requests.iter().any(|r| {
            r.body.contains(r#""type":"thinking""#)
                || r.body.contains(r#""type":"redacted_thinking""#)
        }),
        Shape::Chat | Shape::Gemini => false,
    }
}

/// The prompt's blocks as a provider's cache sees them. A request billed
/// at another provider's cache than its own shape's carries no
/// breakpoints of that provider: on Anthropic's, it gets Claude Code's
/// (the end of the system prompt, or of the tools without one, and the
/// newest message), as an Anthropic client of the same conversation would
/// send them, and toolstub's own on the block keyed `anchor` (the last
/// one so keyed), as toolstub would add it to that client's request.
fn marked(
    prompt: &Prompt,
    own: bool,
    anchor: Option<u128>,
) -> std::borrow::Cow<'_, [cache::Block]> {
    if own {
        return std::borrow::Cow::Borrowed(&prompt.blocks);
    }
    let mut blocks = prompt.blocks.clone();
    if let Some(b) = anchor.and_then(|k| blocks.iter_mut().rev().find(|b| b.key == k)) {
        b.breakpoint = true;
    }
    let system_end = prompt.system_end.or(prompt.conversation.checked_sub(1));
    if let Some(b) = system_end.and_then(|i| blocks.get_mut(i)) {
        b.breakpoint = true;
    }
    if let Some(b) = blocks.last_mut() {
        b.breakpoint = true;
    }
    std::borrow::Cow::Owned(blocks)
}

/// Puts each restored exchange back after the message it followed, where
/// the request holds that message (as the proxy restores an exchange by
/// the identity of the turn, not by position).
fn insert_restored(prompt: &mut Prompt, restored: &[(u128, cache::Block)]) {
    for (anchor, block) in restored {
        let from = prompt.conversation.min(prompt.blocks.len());
        let found = prompt.blocks[from..].iter().position(|b| b.key == *anchor);
        if let Some(p) = found {
            prompt.blocks.insert(from + p + 1, *block);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(key: u128) -> cache::Block {
        cache::Block {
            key,
            tokens: 10,
            breakpoint: false,
        }
    }

    #[test]
    fn a_restored_exchange_follows_the_message_it_followed_or_nothing() {
        let prompt = |keys: &[u128]| Prompt {
            blocks: keys.iter().map(|&k| block(k)).collect(),
            conversation: 1,
            system_end: None,
            ends: Vec::new(),
        };
        let restored = [(3, block(90)), (5, block(91))];
        let mut p = prompt(&[1, 2, 3, 4, 5, 6]);
        insert_restored(&mut p, &restored);
        let keys: Vec<u128> = p.blocks.iter().map(|b| b.key).collect();
        assert_eq!(keys, [1, 2, 3, 90, 4, 5, 91, 6]);
        // Another conversation (a side call) holds neither message.
        let mut side = prompt(&[1, 7, 8]);
        insert_restored(&mut side, &restored);
        assert_eq!(side.blocks.len(), 3);
        // The tools (before the conversation) are never an anchor.
        let mut tools = prompt(&[3, 8]);
        insert_restored(&mut tools, &restored);
        assert_eq!(tools.blocks.len(), 2);
    }

    #[test]
    fn breakpoints_of_another_provider_go_where_claude_code_puts_them() {
        let p = Prompt {
            blocks: (0..5).map(block).collect(),
            conversation: 1,
            system_end: Some(1),
            ends: Vec::new(),
        };
        let other = marked(&p, false, None);
        let at: Vec<bool> = other.iter().map(|b| b.breakpoint).collect();
        assert_eq!(at, [false, true, false, false, true]);
        assert!(marked(&p, true, None).iter().all(|b| !b.breakpoint));
        // toolstub's anchor (the aging rule's) on the block it names.
        let anchored = marked(&p, false, Some(3));
        let at: Vec<bool> = anchored.iter().map(|b| b.breakpoint).collect();
        assert_eq!(at, [false, true, false, true, true]);
        // On the request's own provider the body carries it already.
        assert!(marked(&p, true, Some(3)).iter().all(|b| !b.breakpoint));
    }
}
