//! The rewrite core: a request body in; either "unchanged, and why" or a new
//! body plus the outputs to store.
//!
//! Architecture invariant: this is a pure function. No I/O, no async, no
//! clock, no randomness, no store lookups: the rewrite of an assistant-turn
//! group depends only on that group's content, on what the outputs before it
//! keep inline (the conversation budget), and on the [`Policy`], so turn
//! N+1 of a conversation reproduces turn N's rewritten messages byte for byte
//! and the provider's prompt cache keeps hitting. The one exception is the
//! aging rule ([`aging`]), which replaces an output already sent once it
//! is old (off by default), at the request where the price model says the
//! change pays, or at a request that came after the provider's cache
//! expired ([`RequestFacts::expired`], a fact the proxy's store records),
//! and the same way on every later request; so does the context-window
//! rescue ([`window`]), where a request would not fit its model's context
//! window. The body is spliced, never
//! re-serialized: every byte outside the replaced contents and the appended
//! recall tools stays as the client sent it.
//!
//! Outputs that the proxy's own recall tools produced are never seen here:
//! recall rounds append their results to an already rewritten body.

pub mod aging;
pub mod first_stub;
pub mod memo;
pub mod select;
pub mod tool_policy;
pub mod window;

use crate::protocol::{turn_identity, Content, ParsedRequest, Protocol, ToolOutput, ToolsSlot};
use crate::recall::RecallTool;
use crate::refs::{result_ref, sha256_hex};
use crate::stub::{render, render_aged, RecallToolNames, StubHeader};
use crate::synopsis::{synopsize, Hints, Kind, Synopsis};
use memo::{Facts, Memo};
use select::{select, Budget, Candidate, Reason};
use std::borrow::Cow;
use std::ops::Range;
use tool_policy::{Externalize, ToolRules};

/// What the rewrite needs to know of the configuration.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Master switch (`externalization.enabled`).
    pub enabled: bool,
    pub budget: Budget,
    /// Whether recall tools are offered (`recall.enabled`).
    pub recall_enabled: bool,
    /// Not configuration: set for the round after a recall loop's last, on
    /// an API that sends it without the recall tools. Every choice is made
    /// as in the rounds before (the model saw those stubs, and an output
    /// kept verbatim there must stay so: it has no tool to read it back),
    /// only the tools are not added.
    pub withhold_recall_tools: bool,
    /// The configured recall tool names (renamed per request on a clash).
    pub recall_names: RecallToolNames,
    /// Per-tool rules (threshold, conversation budget, never, MIME hint), in order.
    pub tools: ToolRules,
    /// Whether outputs the client flagged as errors may be externalized
    /// (off by default: an agent must see its errors).
    pub externalize_errors: bool,
    /// Outputs seen verbatim that become stubs once old ([`aging`]).
    pub aging: aging::Aging,
    /// Whether a conversation's first stub pays for the cached prompt it
    /// makes the provider write again ([`first_stub`]).
    pub first_stub: first_stub::Gate,
    /// Requests over their model's context window brought under it ([`window`]).
    pub window: window::Window,
    /// Models whose conversations get the recall tools from their first
    /// request that declares tools ([`TOOLS_FROM_START`]).
    pub tools_from_start: Vec<tool_policy::Glob>,
    /// How long the provider keeps a conversation's prompt cached after its
    /// last request, unless the request asks for longer
    /// ([`Protocol::cache_lifetime_ms`]); 0: never expired. Not read by the
    /// rewrite: the proxy and the replay decide with it which requests
    /// come after an expiry ([`RequestFacts::expired`]).
    pub prompt_cache_ttl_ms: u64,
}

/// The default cache lifetime: five minutes, Anthropic's default entry
/// lifetime (refreshed at each use) and the short end of OpenAI's "5 to 10
/// minutes of inactivity". On OpenAI a prefix still cached after 5 to 10
/// minutes may so be judged expired, and rewriting it then costs one read
/// of it at the full price instead of the cached one; the pauses that
/// matter (people coming back to a session) are longer than both.
pub const DEFAULT_PROMPT_CACHE_TTL_MS: u64 = 300_000;

/// The models that bind each thinking block to everything before it in the
/// prompt, the tool definitions included (Anthropic's "preserved thinking":
/// a block whose prefix changed is dropped, or the request refused). On
/// them the recall tools cannot join a conversation's tools at its first
/// stub without invalidating every thinking block so far, so they are
/// offered from its first request that declares tools of its own, and the
/// tools stay the same bytes from there on.
pub const TOOLS_FROM_START: &[&str] = &[
    "*claude-fable*",
    "*claude-mythos*",
    "*claude-opus-5-5*",
    "*claude-sonnet-5-5*",
    "*claude-haiku-5-5*",
];

/// [`TOOLS_FROM_START`], parsed.
pub fn default_tools_from_start() -> Vec<tool_policy::Glob> {
    TOOLS_FROM_START
        .iter()
        .filter_map(|p| tool_policy::Glob::new(p).ok())
        .collect()
}

impl Policy {
    /// Whether a request rewritten in `mode` gets the recall tools added.
    pub fn adds_recall_tools(&self, mode: Mode) -> bool {
        self.recall_enabled && !self.withhold_recall_tools && mode == Mode::WithRefs
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            enabled: true,
            budget: Budget::default(),
            recall_enabled: true,
            withhold_recall_tools: false,
            recall_names: RecallToolNames::default(),
            tools: ToolRules::default(),
            externalize_errors: false,
            aging: aging::Aging::default(),
            first_stub: first_stub::Gate::default(),
            window: window::Window::default(),
            tools_from_start: default_tools_from_start(),
            prompt_cache_ttl_ms: DEFAULT_PROMPT_CACHE_TTL_MS,
        }
    }
}

/// Whether stubs carry a ref (the store took the originals) or not
/// (`failure_mode = preview_only` after the store failed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    WithRefs,
    PreviewOnly,
}

/// Why a body goes upstream byte for byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unchanged {
    Disabled,
    /// Not UTF-8 JSON, or a shape the protocol adapter does not know.
    NotUnderstood,
    /// No tool output is over budget.
    NothingOverBudget,
}

impl Unchanged {
    pub fn as_str(self) -> &'static str {
        match self {
            Unchanged::Disabled => "disabled",
            Unchanged::NotUnderstood => "not_understood",
            Unchanged::NothingOverBudget => "nothing_over_budget",
        }
    }
}

/// One output replaced by a stub, with everything the store keeps of it.
#[derive(Clone, Debug)]
pub struct Externalized<'b> {
    /// `None` in [`Mode::PreviewOnly`].
    pub result_ref: Option<String>,
    pub sha256: String,
    pub tool_call_id: Option<String>,
    pub tool_name: Option<String>,
    pub mime: Option<String>,
    /// The original; [`Content::decode`] gives its text (decoded on demand,
    /// so outputs the store already holds are never unescaped).
    pub content: Content<'b>,
    /// The decoded text, when the rewrite had to decode it (a memo miss), so
    /// that storing it does not decode it a second time.
    pub text: Option<Cow<'b, str>>,
    pub original_chars: usize,
    /// min(original_chars, effective preview budget), as in the stub header.
    pub preview_chars: usize,
    pub synopsis: Synopsis,
    /// `single_threshold`, `turn_budget`, `conversation_budget`, or one of
    /// them with `:externalization_failed`.
    pub reason: String,
    pub stub: String,
    /// Where its content began in the client's body: the outputs are in
    /// body order.
    pub at: usize,
}

/// A rewritten request.
#[derive(Clone, Debug)]
pub struct Rewritten<'b> {
    pub body: String,
    pub outputs: Vec<Externalized<'b>>,
    /// Characters removed from the conversation: originals minus stubs.
    pub saved_chars: usize,
    /// The recall tool names this request offers (configured, or renamed on a clash).
    pub recall_names: RecallToolNames,
    /// The conversation's opening, canonical (see [`derive_session`]).
    pub opening: String,
    /// The model the request names.
    pub model: Option<String>,
    /// Whether the client asked for a streamed response.
    pub streaming: bool,
    /// The assistant messages whose hidden recall exchange, if one is
    /// stored, replaces them (history restoration), with their spans in
    /// `body`.
    pub turns: Vec<Turn>,
    /// [`Protocol::message_canon`] of the request's last message.
    pub last_canon: Option<String>,
    /// Where the prefix the next request of the conversation keeps ends
    /// (a byte offset in `body`, the end of a message), when the aging
    /// rule may replace an output after it there: the request carries a
    /// cache breakpoint there on APIs with explicit ones (Anthropic), and
    /// the replay bills it so on every provider.
    pub cache_anchor: Option<usize>,
    /// What the conversation's prompt-cache clock needs of it.
    pub clock: ClockFacts,
}

/// What the proxy's prompt-cache clock (and the replay's) needs of a
/// request the rewrite read, rewritten or not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockFacts {
    /// The messages (or items) of its conversation.
    pub messages: usize,
    /// The tool outputs it carries: a request with any is one the
    /// conversation's clock notes.
    pub tool_outputs: usize,
    /// Whether the request would be rewritten differently had the
    /// provider's prompt cache expired before it, or before an earlier
    /// request of its conversation ([`RequestFacts::expired`]).
    pub expiry_matters: bool,
}

/// An assistant message that may be one the client saw in place of a
/// hidden recall exchange.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turn {
    /// [`turn_identity`] of the message before it and of it.
    pub identity: String,
    /// The message's span in the rewritten body.
    pub span: Range<usize>,
}

/// The outcome of [`rewrite`].
#[derive(Clone, Debug)]
pub enum Outcome<'b> {
    Unchanged(Unchanged),
    Rewritten(Box<Rewritten<'b>>),
}

/// Rewrites one request body.
pub fn rewrite<'b>(
    body: &'b [u8],
    policy: &Policy,
    protocol: &dyn Protocol,
    mode: Mode,
) -> Outcome<'b> {
    rewrite_with(body, policy, protocol, mode, &Memo::new(0))
}

/// [`rewrite`], remembering digests and synopses across requests in `memo`.
pub fn rewrite_with<'b>(
    body: &'b [u8],
    policy: &Policy,
    protocol: &dyn Protocol,
    mode: Mode,
    memo: &Memo,
) -> Outcome<'b> {
    rewrite_reading(body, policy, protocol, mode, memo).0
}

/// What a request the rewrite read and left unchanged is, for its
/// accounting: the proxy files it under its session without reading the
/// body a second time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    /// The conversation's opening ([`derive_session`]'s input).
    pub opening: String,
    /// The model the request names.
    pub model: Option<String>,
    /// What the conversation's prompt-cache clock needs of it.
    pub clock: ClockFacts,
}

/// [`rewrite_with`], and for a body it read and found nothing to do in,
/// what it read ([`Read`]).
pub fn rewrite_reading<'b>(
    body: &'b [u8],
    policy: &Policy,
    protocol: &dyn Protocol,
    mode: Mode,
    memo: &Memo,
) -> (Outcome<'b>, Option<Read>) {
    rewrite_reading_for(body, policy, protocol, mode, memo, RequestFacts::default())
}

/// What the proxy knows of a request besides its body.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestFacts<'a> {
    /// The model the path names (the Gemini API, Bedrock, Claude on Vertex
    /// AI), for a body that names none.
    pub path_model: Option<&'a str>,
    /// Whether the response streams, where the path says so and the body
    /// does not ([`crate::protocol::endpoint::Endpoint::streams`]).
    pub path_streams: Option<bool>,
    /// The client asked for the model's long context window in a header
    /// (Anthropic's `anthropic-beta: context-1m-*`).
    pub long_context: bool,
    /// The requests of this conversation before which the provider's
    /// prompt cache had expired (longer than its lifetime since the
    /// request before), as their message counts, ascending: there the
    /// provider writes the whole prompt again anyway, so changing it is
    /// free. The proxy records them in the store, so that every replica and
    /// retry passes the same list (see [`first_stub`] and [`aging`] for
    /// what they release).
    pub expired: &'a [usize],
    /// [`crate::protocol::ParsedRequest::continues_recall`].
    pub continues_recall: bool,
}

/// [`rewrite_reading`] with what the proxy knows besides the body
/// ([`RequestFacts`]): the model the path names when the body names none (the
/// model the rules, the context window, and the accounting go by), and a
/// long context window asked for in a header.
pub fn rewrite_reading_for<'b>(
    body: &'b [u8],
    policy: &Policy,
    protocol: &dyn Protocol,
    mode: Mode,
    memo: &Memo,
    facts: RequestFacts<'_>,
) -> (Outcome<'b>, Option<Read>) {
    match Reading::of(body, policy, protocol, facts) {
        Ok(reading) => reading.rewrite(policy, protocol, mode, memo, facts.expired),
        Err(why) => (Outcome::Unchanged(why), None),
    }
}

/// A body the rewrite has parsed and not yet decided anything about. What
/// the conversation's prompt-cache clock needs of it ([`Reading::opening`],
/// [`Reading::clock`]) is known here, so the proxy asks the clock which of
/// the conversation's requests came after an expiry first, and then
/// rewrites the body once, with the answer.
pub struct Reading<'b> {
    text: &'b str,
    parsed: ParsedRequest<'b>,
}

impl<'b> Reading<'b> {
    /// Parses `body` as `protocol` says; why it is left as it is when the
    /// rewrite is off or the body is not a request the protocol knows.
    /// `facts.expired` is not read here ([`Reading::rewrite`] takes it).
    pub fn of(
        body: &'b [u8],
        policy: &Policy,
        protocol: &dyn Protocol,
        facts: RequestFacts<'_>,
    ) -> Result<Reading<'b>, Unchanged> {
        if !policy.enabled {
            return Err(Unchanged::Disabled);
        }
        let text = std::str::from_utf8(body).map_err(|_| Unchanged::NotUnderstood)?;
        let mut parsed = protocol.parse(text).ok_or(Unchanged::NotUnderstood)?;
        if parsed.model.is_none() {
            parsed.model = facts.path_model.map(str::to_string);
        }
        if let Some(streams) = facts.path_streams {
            parsed.streaming = streams;
        }
        parsed.long_context |= facts.long_context;
        parsed.continues_recall = facts.continues_recall;
        Ok(Reading { text, parsed })
    }

    /// The conversation's opening ([`derive_session`]'s input).
    pub fn opening(&self) -> &str {
        &self.parsed.opening
    }

    /// The clock's facts of the body (whether an expiry matters is known
    /// only once it is rewritten: `false` here).
    pub fn clock(&self) -> ClockFacts {
        clock_facts(&self.parsed, false)
    }

    /// The identity of the message that ends the conversation at `count`
    /// messages (the body's message `count - 1`): a hash of its canonical
    /// text ([`Protocol::message_canon`]), so the same message sent again,
    /// re-serialized or with its cache markers moved, has the same one.
    /// The prompt-cache clock names a point by it, so a point applies to
    /// its own branch of a forked conversation only. `None` when the body
    /// has fewer messages or the message no canonical text.
    pub fn message_identity(&self, protocol: &dyn Protocol, count: usize) -> Option<String> {
        let message = self.parsed.messages.get(count.checked_sub(1)?)?;
        let canon = protocol.message_canon(self.text.get(message.span.clone())?)?;
        Some(crate::refs::sha256_hex(&canon))
    }

    /// Rewrites the body; `expired` as [`RequestFacts::expired`]. For a body
    /// it leaves unchanged, what it read ([`Read`]).
    pub fn rewrite(
        self,
        policy: &Policy,
        protocol: &dyn Protocol,
        mode: Mode,
        memo: &Memo,
        expired: &[usize],
    ) -> (Outcome<'b>, Option<Read>) {
        match rewrite_parsed(
            self.text,
            self.parsed,
            policy,
            protocol,
            mode,
            memo,
            expired,
        ) {
            Ok(rewritten) => (Outcome::Rewritten(rewritten), None),
            Err(read) => (Outcome::Unchanged(Unchanged::NothingOverBudget), Some(read)),
        }
    }
}

fn rewrite_parsed<'b>(
    body: &'b str,
    parsed: ParsedRequest<'b>,
    policy: &Policy,
    protocol: &dyn Protocol,
    mode: Mode,
    memo: &Memo,
    expired: &[usize],
) -> Result<Box<Rewritten<'b>>, Read> {
    // Aging needs the originals stored: without a ref an aged stub would
    // lose what the model already relied on.
    let aging = policy.aging.after_turns > 0 && mode == Mode::WithRefs;
    // The rule runs, too, to age what an expired cache lets go (or to tell
    // whether an expiry would).
    let ages = (aging || policy.aging.after_expiry) && mode == Mode::WithRefs;
    let offers_tools = policy.recall_enabled && mode == Mode::WithRefs;
    // The recall tools are offered from the conversation's first request
    // that declares tools: with the aging rule on (below), and on a model
    // that binds its thinking to the tools ([`TOOLS_FROM_START`]); and on
    // every request continuing a stored response they were offered with.
    let binds_thinking = parsed
        .model
        .as_deref()
        .is_some_and(|m| policy.tools_from_start.iter().any(|g| g.matches(m)));
    let offered_from_start = !parsed.client_tool_names.is_empty()
        && (aging || (offers_tools && (binds_thinking || parsed.continues_recall)));
    if parsed.outputs.is_empty() && !offered_from_start {
        // No tool output: nothing to select and nothing to age (the rules
        // below only ever act on outputs), so no recall names to pick,
        // unless the recall tools are offered from the start (below).
        return Err(Read {
            clock: clock_facts(&parsed, false),
            opening: parsed.opening,
            model: parsed.model,
        });
    }
    let names = policy
        .recall_names
        .offered_beside(&parsed.client_tool_names);
    let mut outputs: Vec<Externalized<'b>> = Vec::new();
    let mut splices: Vec<(Range<usize>, String)> = Vec::new();

    // The conversation budget's measure: what the outputs so far keep
    // inline (see `select`). It depends only on what precedes, so every
    // output's fate is the same on every later turn.
    let mut held = 0usize;
    // Until a stub is made, one would make the provider write the whole
    // cached prompt again ([`first_stub`]), unless the recall tools are
    // offered from the conversation's first request or not at all.
    let mut weigh = offers_tools && !offered_from_start;
    // Before the last request at which the provider's cache had expired,
    // a first stub writes nothing again that the provider would not write
    // anyway: every group there is stubbed as if it were not the first.
    let free_until = last_expiry(expired, &parsed).unwrap_or(0);
    // Whether the gate kept a group that an expiry would release.
    let mut held_back = false;
    // The provider's cache prefix before a group is the body but the
    // conversation from the group on: tools and system prompt come first
    // in the prefix wherever the body puts them (Claude Code and the
    // OpenAI SDKs send `tools` after the conversation).
    let conversation_end = parsed.messages.last().map_or(body.len(), |m| m.span.end);
    let mut assistant_turns = parsed.messages.iter().filter(|m| m.assistant).peekable();
    let mut turns_before = 0usize;
    let mut start = 0;
    while start < parsed.outputs.len() {
        let group = parsed.outputs[start].group;
        let end = parsed.outputs[start..]
            .iter()
            .position(|o| o.group != group)
            .map_or(parsed.outputs.len(), |n| start + n);
        let at = parsed.outputs[start].content_span.start;
        while assistant_turns.next_if(|m| m.span.end <= at).is_some() {
            turns_before += 1;
        }
        let gate = (weigh && at >= free_until).then_some(Weigh {
            gate: &policy.first_stub,
            prefix: body
                .len()
                .saturating_sub(conversation_end.saturating_sub(at)),
            turns: turns_before,
        });
        let made_before = outputs.len();
        let kept;
        (held, kept) = rewrite_group(
            &parsed.outputs[start..end],
            held,
            policy,
            &names,
            mode,
            protocol,
            memo,
            gate,
            &mut outputs,
            &mut splices,
        );
        weigh &= outputs.len() == made_before;
        held_back |= kept;
        start = end;
    }
    // On a model that binds its thinking to everything before it, an output
    // the model has seen stays as it was sent: changing it would invalidate
    // every thinking block after it, which the API drops or refuses. The
    // aging rule and the context-window rescue, which change such outputs,
    // leave these conversations alone (over its window, such a request
    // fails as it would without toolstub).
    let seen = Seen {
        body,
        parsed: &parsed,
        policy,
        names: &names,
        mode,
        protocol,
        memo,
        expired,
    };
    let mut next_aged = None;
    if ages && !binds_thinking {
        let (next, kept) = age(seen, &mut outputs, &mut splices);
        next_aged = next;
        held_back |= kept && policy.aging.after_expiry;
        // Aged outputs come after the others were chosen: in body order
        // again, as every consumer of the list reads it.
        outputs.sort_by_key(|o| o.at);
    }
    if !binds_thinking {
        window::rescue(seen, &mut outputs, &mut splices);
    }
    // With the aging rule on, a conversation that declares tools of its own
    // is rewritten from its first request: the recall tools are offered
    // there (nearly every agent session ages an output within a few turns,
    // and the tools head the provider's cache prefix, so offering them then
    // is free where offering them at the first stub writes the whole
    // cached prompt again), so a hidden recall exchange may follow any
    // assistant turn, and every turn is a restoration candidate.
    let from_start = offered_from_start;
    if outputs.is_empty() && !from_start {
        return Err(Read {
            clock: clock_facts(&parsed, held_back),
            opening: parsed.opening,
            model: parsed.model,
        });
    }
    let first_stub = if from_start {
        0
    } else {
        splices.iter().map(|(r, _)| r.start).min().unwrap_or(0)
    };
    // The end of the prefix the next request keeps: the message before the
    // first output that request ages, made a cache breakpoint where the
    // provider caches at explicit ones (see `Protocol::cache_breakpoint`).
    let anchor = next_aged.and_then(|before| {
        let message = parsed
            .messages
            .iter()
            .rev()
            .find(|m| m.span.end <= before)?;
        splices.extend(protocol.cache_breakpoint(body, message.span.clone()));
        Some(message.span.end)
    });
    if policy.adds_recall_tools(mode) {
        splices.extend(protocol.recall_edits(body));
        let tools = protocol.recall_tools(&names).join(",");
        splices.push(match parsed.tools.clone() {
            ToolsSlot::AppendToArray { close, empty } => (
                close..close,
                if empty { tools } else { format!(",{tools}") },
            ),
            ToolsSlot::ReplaceNull { span } => (span, format!("[{tools}]")),
            ToolsSlot::AddMember { close, empty } => {
                let member = format!("\"tools\":[{tools}]");
                (
                    close..close,
                    if empty { member } else { format!(",{member}") },
                )
            }
        });
    }
    let saved_chars = outputs
        .iter()
        .map(|o| o.original_chars.saturating_sub(o.stub.chars().count()))
        .sum();
    splices.sort_by_key(|(range, _)| (range.start, range.end));
    let turns = turns(body, &parsed, protocol, first_stub, &splices);
    let cache_anchor = anchor.map(|end| shifted(end, &splices));
    let last_canon = parsed
        .messages
        .last()
        .and_then(|m| protocol.message_canon(&body[m.span.clone()]));
    let clock = clock_facts(&parsed, held_back);
    Ok(Box::new(Rewritten {
        body: splice(body, splices),
        outputs,
        saved_chars,
        recall_names: names,
        opening: parsed.opening,
        model: parsed.model,
        streaming: parsed.streaming,
        turns,
        last_canon,
        cache_anchor,
        clock,
    }))
}

fn clock_facts(parsed: &ParsedRequest<'_>, expiry_matters: bool) -> ClockFacts {
    ClockFacts {
        messages: parsed.messages.len(),
        tool_outputs: parsed.outputs.len(),
        expiry_matters,
    }
}

/// Where the conversation ends in the last request of it at which the
/// provider's cache had expired (a byte offset in `body`), if one of
/// `expired` is a request of this one's history.
fn last_expiry(expired: &[usize], parsed: &ParsedRequest<'_>) -> Option<usize> {
    let n = parsed.messages.len();
    let last = expired
        .iter()
        .copied()
        .filter(|&p| p >= 1 && p <= n)
        .max()?;
    Some(parsed.messages[last - 1].span.end)
}

/// The span of the last of the comma-separated JSON values that fill
/// `range` of `body` (a restored exchange: the messages it is made of).
pub fn last_value(body: &str, range: Range<usize>) -> Option<Range<usize>> {
    let text = body.get(range.clone())?;
    let mut scanner = crate::protocol::json_scan::Scanner::new(text);
    loop {
        let start = scanner.position()?;
        scanner.value()?;
        if !scanner.comma() {
            return Some(range.start + start..range.start + scanner.offset());
        }
    }
}

/// Where byte `at` of the client's body lands in the rewritten one: moved
/// by every splice that ends at or before it.
fn shifted(at: usize, splices: &[(Range<usize>, String)]) -> usize {
    let moved: isize = splices
        .iter()
        .filter(|(range, _)| range.end <= at)
        .map(|(range, text)| text.len() as isize - range.len() as isize)
        .sum();
    at.saturating_add_signed(moved)
}

/// The assistant messages after the first stub (only a request carrying
/// stubs can have had a hidden recall exchange, and its answer comes after
/// them), with their identities and their spans once `splices` (sorted)
/// are applied. The only splice that falls inside an assistant message is
/// a cache breakpoint ([`Protocol::cache_breakpoint`]).
fn turns(
    body: &str,
    parsed: &ParsedRequest<'_>,
    protocol: &dyn Protocol,
    first_stub: usize,
    splices: &[(Range<usize>, String)],
) -> Vec<Turn> {
    let mut turns = Vec::new();
    let mut shift: isize = 0;
    let mut next_splice = 0;
    for (i, message) in parsed.messages.iter().enumerate() {
        if message.span.start < first_stub || !message.assistant || i == 0 {
            continue;
        }
        while let Some((range, text)) = splices.get(next_splice) {
            if range.end > message.span.start {
                break;
            }
            shift += text.len() as isize - range.len() as isize;
            next_splice += 1;
        }
        let previous = protocol.message_canon(&body[parsed.messages[i - 1].span.clone()]);
        let this = protocol.message_canon(&body[message.span.clone()]);
        // A cache breakpoint may be inserted inside the message.
        let inside: isize = splices[next_splice..]
            .iter()
            .take_while(|(range, _)| range.end <= message.span.end)
            .map(|(range, text)| text.len() as isize - range.len() as isize)
            .sum();
        if let (Some(previous), Some(this)) = (previous, this) {
            let start = message.span.start as isize + shift;
            let end = message.span.end as isize + shift + inside;
            if let (Ok(start), Ok(end)) = (usize::try_from(start), usize::try_from(end)) {
                turns.push(Turn {
                    identity: turn_identity(&previous, &this),
                    span: start..end,
                });
            }
        }
    }
    turns
}

/// Selects and renders the stubs of one assistant-turn group, after
/// outputs that keep `held` characters inline; returns the conversation's
/// inline total after the group, and whether the first-stub gate kept
/// outputs it would have stubbed.
#[allow(clippy::too_many_arguments)]
fn rewrite_group<'b>(
    group: &[ToolOutput<'b>],
    held: usize,
    policy: &Policy,
    names: &RecallToolNames,
    mode: Mode,
    protocol: &dyn Protocol,
    memo: &Memo,
    weigh: Option<Weigh<'_>>,
    outputs: &mut Vec<Externalized<'b>>,
    splices: &mut Vec<(Range<usize>, String)>,
) -> (usize, bool) {
    let budget = &policy.budget;
    // Outputs whose text cannot be decoded stay inline, whatever their size;
    // so do errors (unless configured otherwise), the outputs of tools whose
    // rule says `never`, and the proxy's own recall results (in a restored
    // history).
    let mut candidates = Vec::with_capacity(group.len());
    let mut prepared: Vec<Option<Prepared<'b>>> = Vec::with_capacity(group.len());
    for o in group {
        let tool = policy
            .tools
            .resolve(o.tool_name.as_deref(), budget.threshold_chars);
        let p = if may_externalize(o, &tool, policy, names) {
            Prepared::new(o, tool.mime, budget.preview_chars, memo)
        } else {
            None
        };
        candidates.push(Candidate {
            len: p.as_ref().map_or_else(|| o.content.char_len(), |p| p.chars),
            eligible: p.is_some(),
            threshold_chars: tool.threshold_chars,
            conversation: tool.conversation_budget,
        });
        prepared.push(p);
    }
    let selection = select(budget, &candidates, held, |i, preview, reason| {
        prepared[i].as_mut().map_or(usize::MAX, |p| {
            p.stub(&group[i], preview, reason, mode, names)
                .chars()
                .count()
        })
    });
    if let Some(weigh) = weigh.filter(|_| selection.count() > 0) {
        let removed: usize = selection
            .reasons
            .iter()
            .enumerate()
            .filter_map(|(i, reason)| {
                let (reason, p) = ((*reason)?, prepared[i].as_mut()?);
                let o = &group[i];
                let stub = p.stub(o, selection.preview, reason, mode, names);
                let sent = o.content_span.len() + o.removed.iter().map(|r| r.len()).sum::<usize>();
                Some(sent.saturating_sub(protocol.encode_content(o.shape, &stub).len()))
            })
            .sum();
        if !weigh.gate.pays(removed, weigh.prefix, weigh.turns) {
            // Every output of the group stays verbatim, and inline.
            let inline = candidates.iter().map(|c| c.len).sum::<usize>();
            return (held.saturating_add(inline), true);
        }
    }
    for (i, reason) in selection.reasons.iter().enumerate() {
        let (Some(reason), Some(p)) = (*reason, prepared[i].as_mut()) else {
            continue;
        };
        externalize(
            &group[i],
            p,
            selection.preview,
            reason,
            mode,
            names,
            protocol,
            outputs,
            splices,
        );
    }
    (selection.held, false)
}

/// A group that would make a conversation's first stub, and what
/// [`first_stub::Gate::pays`] weighs it against.
#[derive(Clone, Copy)]
struct Weigh<'a> {
    gate: &'a first_stub::Gate,
    /// Bytes of the provider's cache prefix before the group's first
    /// output: the body but the conversation from there on.
    prefix: usize,
    /// Assistant turns before the group.
    turns: usize,
}

/// Replaces `output` by its stub: the splices, and what the store keeps.
#[allow(clippy::too_many_arguments)]
fn externalize<'b>(
    output: &ToolOutput<'b>,
    p: &mut Prepared<'b>,
    preview: usize,
    reason: Reason,
    mode: Mode,
    names: &RecallToolNames,
    protocol: &dyn Protocol,
    outputs: &mut Vec<Externalized<'b>>,
    splices: &mut Vec<(Range<usize>, String)>,
) {
    let stub = p.stub(output, preview, reason, mode, names);
    let synopsis = p.synopsis_at(&output.content, preview).clone();
    splices.push((
        output.content_span.clone(),
        protocol.encode_content(output.shape, &stub),
    ));
    splices.extend(output.removed.iter().map(|r| (r.clone(), String::new())));
    outputs.push(Externalized {
        at: output.content_span.start,
        result_ref: (mode == Mode::WithRefs).then(|| p.result_ref.clone()),
        sha256: p.sha256.clone(),
        tool_call_id: output.tool_call_id.as_deref().map(str::to_string),
        tool_name: output.tool_name.as_deref().map(str::to_string),
        mime: p.mime.clone(),
        content: output.content.clone(),
        text: p.text.take(),
        original_chars: p.chars,
        preview_chars: p.chars.min(preview),
        synopsis,
        reason: reason_text(reason, mode),
        stub,
    });
}

/// Whether an output may be externalized at all: not a recall result,
/// not an error the client flagged (unless configured), not a tool whose
/// rule (`tool`, resolved for it) says `never`.
fn may_externalize(
    o: &ToolOutput<'_>,
    tool: &tool_policy::ToolPolicy,
    policy: &Policy,
    names: &RecallToolNames,
) -> bool {
    let recall = o
        .tool_name
        .as_deref()
        .is_some_and(|n| RecallTool::named(names, n).is_some());
    !(recall
        || (o.is_error && !policy.externalize_errors)
        || tool.externalize == Externalize::Never)
}

/// What the rules that change outputs the model has seen (the aging rule,
/// the context-window rescue) read of one request.
#[derive(Clone, Copy)]
pub(super) struct Seen<'r, 'b> {
    pub body: &'b str,
    pub parsed: &'r ParsedRequest<'b>,
    pub policy: &'r Policy,
    pub names: &'r RecallToolNames,
    pub mode: Mode,
    pub protocol: &'r dyn Protocol,
    pub memo: &'r Memo,
    /// [`RequestFacts::expired`].
    pub expired: &'r [usize],
}

/// The aging rule over the outputs the other rules kept inline
/// ([`aging`]): each old enough, over the floor, is measured by what its
/// stub would save, and those the rule picks become stubs (reason `aged`).
/// Returns where the first output the next request may age starts, and
/// whether the rule's gate kept an output old enough to age.
fn age<'b>(
    seen: Seen<'_, 'b>,
    outputs: &mut Vec<Externalized<'b>>,
    splices: &mut Vec<(Range<usize>, String)>,
) -> (Option<usize>, bool) {
    let Seen {
        body,
        parsed,
        policy,
        names,
        mode,
        protocol,
        memo,
        expired,
    } = seen;
    // The preview the memo holds the synopsis at (only `unknown` uses it).
    let preview = policy.budget.preview_chars;
    let stubbed: std::collections::BTreeSet<usize> = splices.iter().map(|(r, _)| r.start).collect();
    // Turn ordinals, the end of each turn's outputs, and the first turn
    // holding a stub of another rule.
    let mut ends: Vec<usize> = Vec::new();
    let mut turn_of = Vec::with_capacity(parsed.outputs.len());
    let mut first_stub = None;
    for (i, o) in parsed.outputs.iter().enumerate() {
        if i == 0 || parsed.outputs[i - 1].group != o.group {
            ends.push(0);
        }
        let t = ends.len() - 1;
        ends[t] = ends[t].max(o.content_span.end);
        turn_of.push(t);
        if first_stub.is_none() && stubbed.contains(&o.content_span.start) {
            first_stub = Some(t);
        }
    }
    // Measured from the conversation's start, so that what precedes it in
    // the body (tools, system prompt) counts once, as `outside`.
    let (start, conversation) = match (parsed.messages.first(), parsed.messages.last()) {
        (Some(a), Some(b)) => (a.span.start, b.span.end.saturating_sub(a.span.start)),
        _ => (0, 0),
    };
    // The recall tools are offered from the conversation's first request
    // when it declares tools of its own and the rule runs by age (see
    // `rewrite_parsed`).
    let regular = policy.aging.after_turns;
    let offered_from_start =
        regular > 0 && policy.recall_enabled && !parsed.client_tool_names.is_empty();
    // The decision points at which the provider's cache had expired: the
    // newest turn of each such request of this one's history.
    let n = parsed.messages.len();
    let expired_turns = expired
        .iter()
        .filter(|&&p| p >= 1 && p <= n)
        .filter_map(|&p| {
            let end = parsed.messages[p - 1].span.end;
            let turn = ends.iter().filter(|&&e| e <= end).count().checked_sub(1)?;
            let newest_seen = parsed.messages[..p]
                .iter()
                .any(|m| m.assistant && m.span.start >= ends[turn]);
            Some(aging::Expiry { turn, newest_seen })
        })
        .collect::<Vec<_>>();
    // Outputs become candidates this many turns after theirs: at once at an
    // expiry (the newest turn's where the model answered after them),
    // `after_turns` otherwise.
    let after = if policy.aging.after_expiry {
        0
    } else {
        regular
    };
    // Without the rule by age, and no expiry in this request's history,
    // nothing ages: only whether an expiry would age something is asked,
    // without preparing any stub.
    let probe = regular == 0 && expired_turns.is_empty();
    let turns = aging::Turns {
        ends: ends.iter().map(|e| e.saturating_sub(start)).collect(),
        outside: body.len().saturating_sub(conversation),
        first_stub: if offered_from_start {
            Some(0)
        } else {
            first_stub
        },
        expired: expired_turns,
        // What the recall tools add where they come with the change (none
        // when they are not offered at all).
        recall_tools: if policy.recall_enabled {
            protocol
                .recall_tools(names)
                .iter()
                .map(|t| t.len() + 1)
                .sum()
        } else {
            0
        },
    };
    let newest = turns.ends.len().saturating_sub(1);
    let mut seen = Vec::new();
    let mut prepared = Vec::new();
    // The first output the next request may age by the rule by age (it
    // comes of age then, or the gate kept it this time).
    let mut next = None;
    for (i, o) in parsed.outputs.iter().enumerate() {
        let of_age = turn_of[i].saturating_add(after);
        if stubbed.contains(&o.content_span.start)
            || of_age > newest.saturating_add(1)
            || o.content.char_len() <= policy.aging.floor_chars
        {
            continue;
        }
        let tool = policy
            .tools
            .resolve(o.tool_name.as_deref(), policy.budget.threshold_chars);
        if !may_externalize(o, &tool, policy, names) {
            continue;
        }
        if regular > 0 && turn_of[i].saturating_add(regular) == newest.saturating_add(1) {
            next = next.or(Some(o.content_span.start));
        }
        if of_age > newest {
            continue;
        }
        if probe {
            return (None, true);
        }
        let Some(mut p) = Prepared::new(o, tool.mime, preview, memo) else {
            continue;
        };
        let stub = p.stub(o, preview, Reason::Aged, mode, names);
        let encoded = protocol.encode_content(o.shape, &stub).len();
        seen.push(aging::Seen {
            turn: turn_of[i],
            start: o.content_span.start.saturating_sub(start),
            saving: o.content_span.len().saturating_sub(encoded),
        });
        prepared.push((i, p));
    }
    let picked = aging::aged(&policy.aging, &seen, &turns);
    let mut kept = false;
    for ((i, mut p), aged) in prepared.into_iter().zip(picked) {
        // Old enough but kept (by the gate, or for want of an expiry): the
        // next request may age it.
        if !aged {
            kept = true;
            let start = parsed.outputs[i].content_span.start;
            if regular > 0 && turn_of[i].saturating_add(regular) <= newest {
                next = Some(next.map_or(start, |n: usize| n.min(start)));
            }
        }
        if aged {
            externalize(
                &parsed.outputs[i],
                &mut p,
                preview,
                Reason::Aged,
                mode,
                names,
                protocol,
                outputs,
                splices,
            );
        }
    }
    (next, kept)
}

fn reason_text(reason: Reason, mode: Mode) -> String {
    match mode {
        Mode::WithRefs => reason.as_str().to_string(),
        Mode::PreviewOnly => format!("{}:externalization_failed", reason.as_str()),
    }
}

/// What one output's stubs share, computed once per request (or found in
/// the memo): the digest, the ref, the length, and the synopsis (per preview
/// budget, which only the `unknown` kind's sample depends on).
struct Prepared<'b> {
    sha256: String,
    result_ref: String,
    chars: usize,
    mime: Option<String>,
    synopses: Vec<(usize, Synopsis)>,
    /// The decoded text, once something needed it.
    text: Option<Cow<'b, str>>,
}

impl<'b> Prepared<'b> {
    /// `None` when the output's text cannot be decoded.
    fn new(
        output: &ToolOutput<'b>,
        mime: Option<String>,
        preview: usize,
        memo: &Memo,
    ) -> Option<Prepared<'b>> {
        let decoded = matches!(output.content, Content::Decoded(_));
        let key = Memo::key(output.content.identity(), decoded, mime.as_deref());
        let (facts, text) = match memo.get(&key) {
            Some(facts) => (facts, None),
            None => {
                let text = output.content.decode()?;
                let hints = Hints {
                    mime: mime.as_deref(),
                    preview_chars: preview,
                };
                let ((sha256, chars), synopsis) = digest_and_synopsis(&text, hints);
                let facts = Facts {
                    sha256,
                    chars,
                    synopsis: (preview, synopsis),
                };
                memo.put(key, facts.clone());
                (std::sync::Arc::new(facts), Some(text))
            }
        };
        Some(Prepared {
            result_ref: result_ref(output.tool_call_id.as_deref(), &facts.sha256),
            sha256: facts.sha256.clone(),
            chars: facts.chars,
            mime,
            synopses: vec![facts.synopsis.clone()],
            text,
        })
    }

    /// The stub of `output` at a preview budget.
    fn stub(
        &mut self,
        output: &ToolOutput<'b>,
        preview: usize,
        reason: Reason,
        mode: Mode,
        names: &RecallToolNames,
    ) -> String {
        // The aging rule's one line, and the context-window rescue's (the
        // model has seen the output: the same bytes whichever rule made it).
        let aged = matches!(reason, Reason::Aged | Reason::ContextWindow);
        let reason = reason_text(reason, mode);
        let result_ref = (mode == Mode::WithRefs).then(|| self.result_ref.clone());
        let sha256 = self.sha256.clone();
        let original_chars = self.chars;
        let synopsis = self.synopsis_at(&output.content, preview);
        let header = StubHeader {
            tool_name: output.tool_name.as_deref(),
            original_chars,
            preview_budget: preview,
            result_ref: result_ref.as_deref(),
            sha256: Some(&sha256),
            reason: Some(&reason),
        };
        if aged {
            return render_aged(synopsis.kind, &header, names);
        }
        render(synopsis, &header, names)
    }

    fn synopsis_at(&mut self, content: &Content<'b>, preview: usize) -> &Synopsis {
        // Kinds other than `unknown` do not depend on the preview budget.
        let reusable = self
            .synopses
            .iter()
            .position(|(p, s)| *p == preview || s.kind != Kind::Unknown);
        let index = match reusable {
            Some(i) => i,
            None => {
                if self.text.is_none() {
                    self.text = content.decode();
                }
                let text = self.text.as_deref().unwrap_or_default();
                let synopsis = synopsize(
                    text,
                    Hints {
                        mime: self.mime.as_deref(),
                        preview_chars: preview,
                    },
                );
                self.synopses.push((preview, synopsis));
                self.synopses.len() - 1
            }
        };
        &self.synopses[index].1
    }
}

/// Texts at least this long are hashed on a second thread while the
/// synopsis is computed (a thread costs tens of microseconds; hashing 1 MB
/// costs about 0.7 ms).
const PARALLEL_DIGEST_BYTES: usize = 128 * 1024;

/// The text's (SHA-256, length in characters) and synopsis, side by side on
/// two threads for large texts. Deterministic either way: only where the
/// work runs changes.
fn digest_and_synopsis(text: &str, hints: Hints<'_>) -> ((String, usize), Synopsis) {
    let digest = || (sha256_hex(text), text.chars().count());
    if text.len() < PARALLEL_DIGEST_BYTES {
        return (digest(), synopsize(text, hints));
    }
    crate::parallel::beside("toolstub-digest", digest, || synopsize(text, hints))
}

/// Replaces each range of `body` with its text; ranges do not overlap.
pub fn splice(body: &str, mut splices: Vec<(Range<usize>, String)>) -> String {
    splices.sort_by_key(|(range, _)| (range.start, range.end));
    let extra: usize = splices.iter().map(|(_, s)| s.len()).sum();
    let mut out = String::with_capacity(body.len() + extra);
    let mut at = 0;
    for (range, replacement) in splices {
        out.push_str(&body[at..range.start]);
        out.push_str(&replacement);
        at = range.end;
    }
    out.push_str(&body[at..]);
    out
}

/// A session id derived from the tenant and the conversation's opening, so
/// every turn of one conversation lands in the same session.
pub fn derive_session(tenant: &str, opening: &str) -> String {
    // The SHA-256 of `tenant`, a NUL and `opening`, hashed in pieces
    // rather than joined first; `s_` and its first 24 hex digits.
    use sha2::Digest;
    let digest = sha2::Sha256::new()
        .chain_update(tenant.as_bytes())
        .chain_update([0u8])
        .chain_update(opening.as_bytes())
        .finalize();
    let mut id = String::with_capacity(26);
    id.push_str("s_");
    crate::refs::push_hex(&mut id, &digest[..12]);
    id
}

#[cfg(test)]
mod tests;
