//! The request pipeline of every endpoint a protocol adapter declares, the
//! same for every protocol, in named phases over one per-request context
//! ([`Exchange`]): the proxy's `handle` has authenticated the caller and
//! routed the request; here its body is read within the cap (or not at
//! all), its signature checked where the endpoint is signed, it is
//! rewritten once (pure, off the runtime when large, the prompt-cache clock
//! asked between the parse and the rewrite), its originals committed to the
//! store and hidden recall exchanges looked up, before anything goes
//! upstream; it is filed with the ledger; then it is sent upstream or the
//! recall rounds run; the response streams back with the toolstub headers.
//!
//! Whatever cannot be read or understood goes upstream as it came, through
//! one exit ([`Exchange::as_it_came`]): bypassed, compressed, oversized or
//! unparsable bodies are forwarded byte for byte.

use super::body::{boxed, Collected};
use super::error::ProxyError;
use super::ledger::{Counting, RequestNote, SessionOf, Tally, TextToCount, ToCount};
use super::recall_rounds::{self, RecallRequest};
use super::usage_tap::{FiledRequest, UsageReport};
use super::{forward, forward_whole, stream_back, whole_request, App, BoxBody};
use crate::config::FailureMode;
use crate::protocol::endpoint::{AwsService, Endpoint, Envelope, Purpose};
use crate::protocol::{json_text, span_in_bytes, Content, Protocol};
use crate::rewrite::{derive_session, splice, Mode, Outcome, Reading, RequestFacts, Turn};
use crate::store::cache_clock::{on_branch, ClockRequest};
use crate::store::{NewOutput, Tenant};
use crate::stub::RecallToolNames;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Response};
use hyper::body::Incoming;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

/// The largest body whose session and model the ledger reads later, off
/// the request's path: a larger one is read now (the rewrite reads it) or
/// not at all, so the ledger's queue never holds request bodies of any
/// size past the bytes the proxy holds at once (`server.max_buffered_bytes`
/// counts a body only while its request lives).
const DEFER_MAX: usize = 64 << 10;

/// Bodies larger than this are rewritten on the blocking pool, so a 10 MB
/// synopsis never stalls other requests on the same runtime thread.
const INLINE_REWRITE_BYTES: usize = 256 * 1024;

/// One API request on its way through the pipeline: what every phase reads
/// of it, carried from one phase to the next (as Pingora's per-request
/// context), so that no phase works it out again or packs it anew.
pub(super) struct Exchange {
    pub endpoint: &'static Endpoint,
    /// The client's request head. Its extensions carry what earlier phases
    /// decided: the route's flavour, the AWS signing decision.
    pub parts: http::request::Parts,
    /// Whose outputs the request may store and read.
    pub tenant: Tenant,
    /// The session the client named (`x-toolstub-session`).
    session_header: Option<String>,
    /// When a turn came (the ledger's clock); `None` for a count of tokens,
    /// which is no turn of a conversation and reports no usage.
    accounted_at: Option<i64>,
    started: std::time::Instant,
    /// The client's body, once read (empty until then).
    pub original: Bytes,
    /// How long reading the body took.
    read_us: u64,
    /// The body's part of the buffered-bytes bound, held as long as the
    /// exchange (a recall loop holds it until its last round).
    held: Option<super::limits::Held>,
}

/// What goes upstream of a request forwarded as it came.
enum AsItCame {
    /// Still being read from the client.
    Streamed(BoxBody),
    /// The body as read (signed again for AWS where the proxy signs).
    Read,
}

impl Exchange {
    fn new(endpoint: &'static Endpoint, parts: http::request::Parts, tenant: Tenant) -> Exchange {
        let session_header = parts
            .headers
            .get(&SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|s| !s.is_empty() && s.len() <= 256)
            .map(str::to_string);
        Exchange {
            accounted_at: endpoint.is_turn().then(crate::store::system_now_ms),
            endpoint,
            parts,
            tenant,
            session_header,
            started: std::time::Instant::now(),
            original: Bytes::new(),
            read_us: 0,
            held: None,
        }
    }

    /// Files the request with the ledger (before anything goes upstream, so
    /// the turn comes before the usage of its responses); where its
    /// responses report. `None` for a request that is no turn.
    fn file_turn(
        &self,
        app: &App,
        session: SessionOf,
        tallies: Vec<Tally>,
        counting: Option<Counting>,
    ) -> Option<FiledRequest> {
        let at = self.accounted_at?;
        let note = RequestNote::new(self.tenant.clone(), self.endpoint.label, at);
        app.ledger.turn(crate::proxy::ledger::Turn {
            note: note.clone(),
            session,
            tallies,
            counting,
        });
        Some(FiledRequest {
            ledger: app.ledger.clone(),
            note,
            protocol: self.endpoint.protocol,
        })
    }

    /// Forwards the request as it came: the one exit of every request the
    /// proxy leaves unchanged, however it got there. Counted under `why`
    /// where the proxy chose to leave it (a failure is counted where it
    /// happened), and filed with the ledger as unread, with what is known of
    /// its session: its response's usage is accounted when the response
    /// ends.
    async fn as_it_came(
        &self,
        app: &App,
        why: Option<&'static str>,
        session: SessionOf,
        body: AsItCame,
    ) -> Result<Response<BoxBody>, ProxyError> {
        if let Some(why) = why {
            app.metrics.unchanged(why);
        }
        let tap = self.accounted_at.map(|at| {
            let unread = app
                .ledger
                .unread(self.tenant.clone(), self.endpoint.label, at, session);
            UsageReport::Unfiled(unread, self.endpoint.protocol)
        });
        match body {
            AsItCame::Streamed(body) => forward(app, &self.parts, body, tap).await,
            AsItCame::Read => forward_whole(app, &self.parts, self.original.clone(), tap).await,
        }
    }

    /// What is known of the session of a request left unchanged: the one
    /// its client named, else what the rewrite read, else (for a small
    /// body) derived by the ledger later, off the request's path.
    fn session_of_unchanged(&self, read: Option<crate::rewrite::Read>) -> SessionOf {
        let path_model = self.endpoint.model_in(self.parts.uri.path());
        match (&self.session_header, read) {
            (Some(s), read) => {
                SessionOf::Known(s.clone(), read.and_then(|r| r.model).or(path_model))
            }
            (None, Some(read)) => SessionOf::Read(read, path_model),
            (None, None) if self.original.len() <= DEFER_MAX => {
                SessionOf::Derive(self.endpoint.protocol, self.original.clone(), path_model)
            }
            (None, None) => SessionOf::Unknown,
        }
    }
}

/// The pipeline of a rewritten route, phase by phase (the proxy's `handle`
/// has authenticated the caller and routed the request to `endpoint`).
pub(super) async fn handle(
    app: &Arc<App>,
    endpoint: &'static Endpoint,
    memo: &super::TenantMemo,
    caller: super::access::Caller,
    req: http::Request<Incoming>,
) -> Result<Response<BoxBody>, ProxyError> {
    let (parts, body) = req.into_parts();
    let keyed = matches!(caller, super::access::Caller::Key(_));
    let tenant = super::caller_tenant(&caller, &parts.headers, &parts.uri, memo);
    let mut exchange = Exchange::new(endpoint, parts, tenant);

    // Read the body, within the cap (or not at all).
    if let Some(why) = skip_reason(&exchange.parts.headers, app.config.max_body_bytes) {
        let body = AsItCame::Streamed(boxed(body));
        return (exchange.as_it_came(app, Some(why), SessionOf::Unknown, body)).await;
    }
    let (collected, held) = super::limits::read_body(app, body).await?;
    exchange.held = Some(held);
    exchange.original = match collected {
        Collected::Complete(bytes) => bytes,
        Collected::TooLarge(stream) => {
            let (why, body) = (Some("too_large"), AsItCame::Streamed(boxed(stream)));
            return exchange
                .as_it_came(app, why, SessionOf::Unknown, body)
                .await;
        }
    };
    exchange.read_us = exchange.started.elapsed().as_micros() as u64;

    // Authenticate the body: a signature over it names its tenant.
    if let Some(service) = endpoint.aws {
        if Box::pin(check_signature(app, service, &mut exchange, keyed)).await {
            let why = Some("foreign_signature");
            let body = AsItCame::Read;
            return exchange
                .as_it_came(app, why, SessionOf::Unknown, body)
                .await;
        }
    }
    if let Some(envelope) = &endpoint.envelope {
        return Box::pin(enveloped(app, &exchange, envelope)).await;
    }
    if let Some(ids) = endpoint.response_ids {
        let original = std::mem::take(&mut exchange.original);
        let continued =
            super::response_ids::continue_upstream(app, ids, &exchange.tenant, original);
        let (body, known) = Box::pin(continued).await;
        exchange.original = body;
        if known {
            exchange.parts.extensions.insert(ContinuesRecall);
        }
    }

    // Rewrite it (once).
    let untouched = exchange.original.len() <= DEFER_MAX
        && app.config.policy.enabled
        && endpoint.protocol.surely_untouched(&exchange.original);
    let outcome = if !endpoint.reads_query(exchange.parts.uri.query()) {
        RewriteOutcome::Unchanged("query_not_read", None)
    } else if untouched {
        RewriteOutcome::Unchanged("no_tools", None)
    } else {
        let ask = Expiries::Ask(exchange.tenant.clone(), exchange.session_header.clone());
        let input = RewriteInput::of(endpoint, &exchange.parts, ask);
        plan(app, endpoint, exchange.original.clone(), input).await?
    };
    match outcome {
        // Boxed: storing, restoring and the recall rounds make a large
        // future, which a request forwarded unchanged (the common case)
        // would otherwise carry and move on every request.
        RewriteOutcome::Rewritten(rewritten) => {
            Box::pin(rewritten_request(app, exchange, rewritten)).await
        }
        RewriteOutcome::Unchanged(why, read) => {
            let session = exchange.session_of_unchanged(read);
            exchange
                .as_it_came(app, Some(why), session, AsItCame::Read)
                .await
        }
    }
}

/// The body's AWS signature, on an endpoint AWS authenticates by one:
/// whether the proxy signs the request again is decided once (and carried
/// in its extensions); a verified signature names its identity's tenant,
/// unless a client key named one already. True when the request is signed
/// by an identity the proxy does not hold (or when it holds none): the
/// signature covers the body, and the caller's outputs would have no tenant
/// of their own (nothing proves whose they are), so it goes as it came.
async fn check_signature(
    app: &App,
    service: &'static AwsService,
    exchange: &mut Exchange,
    keyed: bool,
) -> bool {
    let (signing, identity) = (app.aws)
        .decide(service, &exchange.parts, &exchange.original)
        .await;
    exchange.parts.extensions.insert(signing);
    if let Some(identity) = identity.filter(|_| !keyed) {
        exchange.tenant = identity;
    }
    matches!(signing, super::aws::Signing::AsSent)
        && exchange
            .parts
            .headers
            .get(header::AUTHORIZATION)
            .is_some_and(|v| v.to_str().is_ok_and(super::aws::is_sigv4))
}

/// A request the rewrite changed, through the phases that follow: its
/// outputs stored and hidden exchanges restored before it goes upstream,
/// filed with the ledger, then sent upstream or run through the recall
/// rounds.
async fn rewritten_request(
    app: &Arc<App>,
    exchange: Exchange,
    mut rewritten: Box<OwnedRewrite>,
) -> Result<Response<BoxBody>, ProxyError> {
    let endpoint = exchange.endpoint;
    let expired = rewritten.expired.clone();
    let plan_of = |mode| {
        let known = Expiries::Known(expired.clone());
        let input = RewriteInput {
            mode,
            ..RewriteInput::of(endpoint, &exchange.parts, known)
        };
        plan(app, endpoint, exchange.original.clone(), input)
    };
    let session = exchange
        .session_header
        .clone()
        .unwrap_or_else(|| derive_session(exchange.tenant.as_str(), &rewritten.opening));
    for output in &mut rewritten.outputs {
        output.new.session_id.clone_from(&session);
    }
    let rewritten_us = exchange.started.elapsed().as_micros() as u64;
    let original = &exchange.original;
    let tenant = &exchange.tenant;
    let count = |rewritten: &OwnedRewrite| {
        exchange
            .accounted_at
            .map(|_| app.ledger.count(to_count(app, rewritten, original)))
    };
    let mut counting = count(&rewritten);

    // Store the originals and find the hidden exchanges to restore.
    let turns = std::mem::take(&mut rewritten.turns);
    let (stored, found) = tokio::join!(
        store_outputs(app, tenant, &mut rewritten, original),
        async {
            let restores = app.config.restore_history || endpoint.protocol.may_need_restoration();
            if restores && !turns.is_empty() {
                find_exchanges(app, tenant, &session, &turns).await
            } else {
                BTreeMap::new()
            }
        }
    );
    rewritten.turns = turns;
    tracing::debug!(
        read_us = exchange.read_us,
        rewrite_us = rewritten_us - exchange.read_us,
        store_us = exchange.started.elapsed().as_micros() as u64 - rewritten_us,
        outputs = rewritten.outputs.len(),
        restored = found.len(),
        "request rewritten"
    );
    let mut restorations = found;
    // Which outputs the store saw first; when storing failed, those the
    // rewrite met first (the preview-only plan's, if it replaced the plan).
    let first_seen: Vec<bool> = match stored {
        Ok(first_seen) => first_seen,
        Err(e) => {
            app.metrics.store_error("put");
            tracing::error!(error = %e, "storing tool outputs failed");
            let known = SessionOf::Known(session.clone(), rewritten.model.clone());
            match app.config.failure_mode {
                FailureMode::PreserveRaw => {
                    return exchange.as_it_came(app, None, known, AsItCame::Read).await;
                }
                FailureMode::Reject => return Err(ProxyError::StoreRejected(e.to_string())),
                // A second rewrite, of another kind (stubs without refs),
                // and only on this failure.
                FailureMode::PreviewOnly => match plan_of(Mode::PreviewOnly).await? {
                    // No recall tools, so no restored recall calls either.
                    RewriteOutcome::Rewritten(preview_only) => {
                        rewritten = preview_only;
                        restorations.clear();
                        counting = count(&rewritten);
                    }
                    RewriteOutcome::Unchanged(..) => {
                        return exchange.as_it_came(app, None, known, AsItCame::Read).await;
                    }
                },
            }
            rewritten.outputs.iter().map(|o| o.first_seen).collect()
        }
    };
    rewritten.restore(&restorations, endpoint.protocol);
    app.metrics.restored(restorations.len() as u64);
    for output in &rewritten.outputs {
        app.metrics.externalized(
            output.new.synopsis.kind.as_str(),
            reason_label(&output.reason),
        );
    }
    app.metrics.chars_saved(rewritten.saved_chars as u64);
    let mut extra_headers = vec![
        (
            "x-toolstub-externalized",
            HeaderValue::from(rewritten.outputs.len()),
        ),
        (
            "x-toolstub-saved-chars",
            HeaderValue::from(rewritten.saved_chars),
        ),
    ];
    if !restorations.is_empty() {
        extra_headers.push(("x-toolstub-restored", HeaderValue::from(restorations.len())));
    }

    // Account: the turn filed with the ledger, its stubs tallied.
    let saved_tokens = counting.as_ref().map(Counting::probe);
    let tallies = rewritten
        .outputs
        .iter()
        .zip(first_seen)
        .map(|(o, first_seen)| Tally {
            result_ref: o.result_ref.clone(),
            tool: o.new.tool_name.clone(),
            kind: o.new.synopsis.kind,
            first_seen,
            chars_saved: o.chars_saved as u64,
        })
        .collect();
    let known = SessionOf::Known(session.clone(), rewritten.model.clone());
    let tap = exchange.file_turn(app, known, tallies, counting);

    // Send it upstream, or run the recall rounds.
    if rewritten.recall_offered && endpoint.is_turn() {
        let streaming = rewritten.streaming;
        let req = RecallRequest {
            exchange,
            session,
            names: rewritten.recall_names,
            last_canon: rewritten.last_canon,
            expired: rewritten.expired,
            body: rewritten.body,
            restorations,
            extra_headers,
            saved_tokens,
            tap,
        };
        return if streaming {
            Box::pin(recall_rounds::streaming(app, req)).await
        } else {
            Box::pin(recall_rounds::non_streaming(app, req)).await
        };
    }
    let request = whole_request(app, &exchange.parts, rewritten.body).await?;
    let response = app.send(request).await?;
    let mut response = stream_back(super::tapped(response, tap.map(UsageReport::FiledRequest)));
    for (name, value) in extra_headers {
        response.headers_mut().insert(name, value);
    }
    saved_tokens_header(&mut response, saved_tokens.as_deref());
    Ok(response)
}

/// Adds `x-toolstub-saved-tokens`, the tokens a request's stubs saved, if
/// they were counted by the time its response head leaves (never waits).
pub(super) fn saved_tokens_header(
    response: &mut Response<BoxBody>,
    saved: Option<&std::sync::OnceLock<u64>>,
) {
    if let Some(n) = saved.and_then(|p| p.get()) {
        response
            .headers_mut()
            .insert("x-toolstub-saved-tokens", HeaderValue::from(*n));
    }
}

/// What the ledger counts of a rewrite: each output's stub, and its
/// original unless its count is remembered.
fn to_count(app: &App, rewritten: &OwnedRewrite, original: &Bytes) -> Vec<ToCount> {
    rewritten
        .outputs
        .iter()
        .map(|o| {
            let sha256 = o.new.sha256.clone().unwrap_or_default();
            let text = if app.ledger.remembers(&sha256) {
                TextToCount::Remembered
            } else {
                match &o.text {
                    TextSource::Decoded(text) => TextToCount::Owned(text.clone()),
                    TextSource::Literal(span) => {
                        TextToCount::Literals(original.clone(), vec![span.clone()])
                    }
                    TextSource::Literals(spans) => {
                        TextToCount::Literals(original.clone(), spans.clone())
                    }
                }
            };
            ToCount {
                sha256,
                stub: o.stub.clone(),
                text,
            }
        })
        .collect()
}

/// The key a hidden exchange is stored under: the session and the identity
/// of the answer the client saw.
pub(super) fn exchange_key(session: &str, identity: &str) -> String {
    crate::refs::sha256_hex(&format!("{session}\u{0}{identity}"))
}

/// The stored exchanges among the request's candidate turns, by identity.
/// A failed lookup restores nothing (the request still goes on).
async fn find_exchanges(
    app: &App,
    tenant: &Tenant,
    session: &str,
    turns: &[Turn],
) -> BTreeMap<String, String> {
    let by_key: BTreeMap<String, &str> = turns
        .iter()
        .map(|t| (exchange_key(session, &t.identity), t.identity.as_str()))
        .collect();
    match app
        .store
        .exchanges(tenant, by_key.keys().cloned().collect())
        .await
    {
        Ok(found) => found
            .into_iter()
            .filter_map(|(key, replacement)| {
                by_key
                    .get(&key)
                    .map(|identity| (identity.to_string(), replacement))
            })
            .collect(),
        Err(e) => {
            app.metrics.store_error("exchanges");
            tracing::warn!(error = %e, "looking up hidden recall exchanges failed");
            BTreeMap::new()
        }
    }
}

/// The metrics label of a reason (a closed set).
fn reason_label(reason: &str) -> &'static str {
    match reason {
        "single_threshold" => "single_threshold",
        "turn_budget" => "turn_budget",
        "single_threshold:externalization_failed" => "single_threshold:externalization_failed",
        "turn_budget:externalization_failed" => "turn_budget:externalization_failed",
        "conversation_budget" => "conversation_budget",
        "conversation_budget:externalization_failed" => {
            "conversation_budget:externalization_failed"
        }
        "aged" => "aged",
        "aged:externalization_failed" => "aged:externalization_failed",
        "context_window" => "context_window",
        _ => "other",
    }
}

/// The client's own session id for its requests (named once: a lookup by
/// `&str` parses the name on every request).
static SESSION_HEADER: http::HeaderName = http::HeaderName::from_static("x-toolstub-session");
/// `1`: forward this request without reading it.
static BYPASS_HEADER: http::HeaderName = http::HeaderName::from_static("x-toolstub-bypass");

/// Why a request is forwarded without reading its body, if it is.
fn skip_reason(headers: &HeaderMap, max_body_bytes: u64) -> Option<&'static str> {
    if headers
        .get(&BYPASS_HEADER)
        .is_some_and(|v| v.as_bytes() == b"1")
    {
        return Some("bypass");
    }
    let encoded = headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    if encoded {
        return Some("content_encoding");
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max_body_bytes) {
        return Some("too_large");
    }
    None
}

/// The rewrite's outcome, owned, so it can cross from the blocking pool.
pub(super) enum RewriteOutcome {
    /// Why, and what the rewrite read of the body (when it read it).
    Unchanged(&'static str, Option<crate::rewrite::Read>),
    Rewritten(Box<OwnedRewrite>),
}

pub(super) struct OwnedRewrite {
    pub body: Bytes,
    outputs: Vec<PlannedOutput>,
    saved_chars: usize,
    opening: String,
    /// The model the request names.
    model: Option<String>,
    recall_names: RecallToolNames,
    /// Whether the body offers the recall tools (then the recall loop runs).
    recall_offered: bool,
    /// Whether the client asked for a streamed response.
    streaming: bool,
    /// Candidate answers for history restoration, spans in `body`.
    turns: Vec<Turn>,
    last_canon: Option<String>,
    /// The end of the prefix the next request keeps (the aging rule's
    /// cache breakpoint), an offset in `body`.
    cache_anchor: Option<usize>,
    /// The requests after which the provider's cache had expired that it
    /// was planned with ([`RequestFacts::expired`]): every re-plan of the
    /// request takes them too.
    pub expired: Vec<usize>,
}

impl OwnedRewrite {
    /// Replaces each candidate answer whose hidden exchange was found (by
    /// identity) with that exchange, as first sent. When the answer that
    /// ended the kept prefix is replaced, the exchange's last message ends
    /// it instead, and carries the breakpoint the answer carried.
    pub(super) fn restore(&mut self, found: &BTreeMap<String, String>, protocol: &dyn Protocol) {
        if found.is_empty() {
            return;
        }
        let mut splices: Vec<(Range<usize>, String)> = self
            .turns
            .iter()
            .filter_map(|t| Some((t.span.clone(), found.get(&t.identity)?.clone())))
            .collect();
        splices.sort_by_key(|(span, _)| span.start);
        let Ok(body) = std::str::from_utf8(&self.body) else {
            return;
        };
        // Where the exchange that replaces the anchored answer lands.
        let mut shift: isize = 0;
        let mut anchored = None;
        for (span, text) in &splices {
            let start = span.start.saturating_add_signed(shift);
            if Some(span.end) == self.cache_anchor {
                anchored = Some(start..start + text.len());
            }
            shift += text.len() as isize - span.len() as isize;
        }
        let mut restored = splice(body, splices);
        if let Some(last) = anchored.and_then(|r| crate::rewrite::last_value(&restored, r)) {
            self.cache_anchor = Some(last.end);
            let edits = protocol.cache_breakpoint(&restored, last);
            restored = splice(&restored, edits);
        }
        self.body = Bytes::from(restored);
        self.turns.clear();
    }
}

struct PlannedOutput {
    /// Everything but the text, which is decoded only if the store needs it.
    new: NewOutput,
    reason: String,
    result_ref: Option<String>,
    text: TextSource,
    /// Whether the rewrite met this text for the first time (not in the memo).
    first_seen: bool,
    /// The stub that replaced it.
    stub: String,
    /// Its characters minus the stub's.
    chars_saved: usize,
}

/// Where an output's text is, so that it is decoded only when stored.
enum TextSource {
    /// A JSON string literal at this span of the client's body.
    Literal(Range<usize>),
    /// JSON string literals at these spans, joined in order (text parts).
    Literals(Vec<Range<usize>>),
    /// Decoded already; shared with the store and the token counter.
    Decoded(Arc<String>),
}

/// Commits the outputs the store does not hold yet (a repeated turn resends
/// outputs already stored: they are neither decoded nor written again).
/// Decoded texts are moved into the store, not copied.
async fn store_outputs(
    app: &App,
    tenant: &Tenant,
    rewritten: &mut OwnedRewrite,
    original: &Bytes,
) -> Result<Vec<bool>, crate::store::StoreError> {
    // Outputs this rewrite saw first (a memo miss) are almost never stored
    // yet: they skip the lookup, and `put` is a no-op for one that is.
    let seen_before: Vec<usize> = (0..rewritten.outputs.len())
        .filter(|&i| !rewritten.outputs[i].first_seen)
        .collect();
    let refs: Option<Vec<String>> = seen_before
        .iter()
        .map(|&i| rewritten.outputs[i].result_ref.clone())
        .collect();
    let mut held = vec![false; rewritten.outputs.len()];
    if let Some(refs) = refs.filter(|r| !r.is_empty()) {
        for (i, is_held) in seen_before
            .into_iter()
            .zip(app.store.held(tenant, refs).await?)
        {
            held[i] = is_held;
        }
    }
    let mut news = Vec::new();
    let mut put_index = Vec::new();
    for (i, (output, held)) in rewritten.outputs.iter_mut().zip(held).enumerate() {
        if held {
            continue;
        }
        put_index.push(i);
        let undecodable = || {
            crate::store::StoreError::InvalidArgument(
                "a tool output's text could not be decoded".to_string(),
            )
        };
        let decode = |span: &Range<usize>| {
            std::str::from_utf8(&original[span.clone()])
                .ok()
                .and_then(json_text::decode)
        };
        let text = match &mut output.text {
            // Moved out: the request holds it no longer once stored (the
            // counter may still, by its own handle).
            TextSource::Decoded(text) => std::mem::take(text),
            TextSource::Literal(span) => {
                Arc::new(decode(span).ok_or_else(undecodable)?.into_owned())
            }
            TextSource::Literals(spans) => {
                let mut joined = String::new();
                for span in spans.iter() {
                    joined.push_str(&decode(span).ok_or_else(undecodable)?);
                }
                Arc::new(joined)
            }
        };
        let names = &rewritten.recall_names;
        news.push(NewOutput {
            text,
            // What the stub was rendered with, so it can be shown again.
            stub: Some(crate::store::StubFacts {
                reason: output.reason.clone(),
                tools: [names.read.clone(), names.search.clone(), names.list.clone()],
            }),
            ..output.new.clone()
        });
    }
    let mut first_seen = vec![false; rewritten.outputs.len()];
    if news.is_empty() {
        return Ok(first_seen);
    }
    for (i, stored) in put_index
        .into_iter()
        .zip(app.store.put(tenant, news).await?)
    {
        first_seen[i] = stored.created;
    }
    Ok(first_seen)
}

/// A body that carries the request it stands for ([`Envelope`], Bedrock's
/// CountTokens): what it carries rewritten as a request to the envelope's
/// inner endpoint would be (its outputs stored, so the refs the count
/// covers are real), the envelope closed again; unchanged (or unreadable)
/// it goes as it came.
async fn enveloped(
    app: &Arc<App>,
    exchange: &Exchange,
    envelope: &Envelope,
) -> Result<Response<BoxBody>, ProxyError> {
    let (parts, tenant, original) = (&exchange.parts, &exchange.tenant, &exchange.original);
    let as_it_came = |why| exchange.as_it_came(app, why, SessionOf::Unknown, AsItCame::Read);
    let Some(inner) = (envelope.open)(original).map(Bytes::from) else {
        return as_it_came(Some("not_json")).await;
    };
    let input = RewriteInput::of(exchange.endpoint, parts, Expiries::Known(Vec::new()));
    let mut rewritten = match plan(app, envelope.inner, inner.clone(), input).await? {
        RewriteOutcome::Rewritten(r) => r,
        RewriteOutcome::Unchanged(why, _) => return as_it_came(Some(why)).await,
    };
    let session = derive_session(tenant.as_str(), &rewritten.opening);
    for output in &mut rewritten.outputs {
        output.new.session_id.clone_from(&session);
    }
    if let Err(e) = store_outputs(app, tenant, &mut rewritten, &inner).await {
        app.metrics.store_error("put");
        tracing::error!(error = %e, "storing tool outputs failed");
        return as_it_came(None).await;
    }
    let Some(body) = (envelope.close)(original, &rewritten.body) else {
        return as_it_came(None).await;
    };
    let request = whole_request(app, parts, Bytes::from(body)).await?;
    Ok(stream_back(app.send(request).await?))
}

/// How the rewrite of a body learns which of its conversation's requests
/// came after an expiry of the provider's prompt cache
/// ([`crate::rewrite::RequestFacts::expired`]).
pub(super) enum Expiries {
    /// Known already: those the request's first rewrite was given (a later
    /// round of the same request), or none (a body that is no turn).
    Known(Vec<usize>),
    /// Asked of the conversation's clock, once the body is parsed: the
    /// tenant, and the session the client named (else derived from the
    /// body's opening).
    Ask(Tenant, Option<String>),
}

/// The prompt-cache clock: a request that carries tool outputs is noted on
/// its conversation's clock in the store, which answers at which of the
/// conversation's requests the provider's cache had expired (more than its
/// lifetime since the request before: `externalization.prompt_cache_ttl_ms`,
/// or longer where the request asks, [`Protocol::cache_lifetime_ms`]). The
/// store decides each once, so every replica and retry rewrites alike; of
/// the points it answers, the request keeps those of its own branch of the
/// conversation ([`on_branch`]). It is asked between the body's parse and
/// its rewrite, so the body is rewritten once. A store that fails answers
/// none: the request goes as if no cache had expired.
async fn cache_expiries(
    app: &App,
    endpoint: &'static Endpoint,
    (tenant, session_header): (&Tenant, Option<&str>),
    body: &[u8],
    reading: &Reading<'_>,
) -> Vec<usize> {
    let default_ttl = app.config.policy.prompt_cache_ttl_ms;
    let clock = reading.clock();
    // A count of tokens never touches the provider's cache: it neither
    // moves the clock nor may find the cache expired.
    let counts = endpoint.purpose == Purpose::CountTokens;
    if default_ttl == 0 || clock.tool_outputs == 0 || counts {
        return Vec::new();
    }
    let session = session_header
        .map(str::to_string)
        .unwrap_or_else(|| derive_session(tenant.as_str(), reading.opening()));
    let ttl = std::str::from_utf8(body)
        .ok()
        .and_then(|text| endpoint.protocol.cache_lifetime_ms(text))
        .unwrap_or(default_ttl);
    let ttl = i64::try_from(ttl).unwrap_or(i64::MAX);
    let protocol = endpoint.protocol;
    // Taken once: the store asks for it when it records a point, and
    // `on_branch` then checks that very point.
    let last = std::sync::OnceLock::new();
    let identity_at = |count: usize| {
        if count == clock.messages {
            return last
                .get_or_init(|| reading.message_identity(protocol, count))
                .clone();
        }
        reading.message_identity(protocol, count)
    };
    let last_message = || identity_at(clock.messages).unwrap_or_default();
    let request = ClockRequest {
        messages: u32::try_from(clock.messages).unwrap_or(u32::MAX),
        last_message: &last_message,
    };
    match app
        .store
        .cache_expiries(tenant, &session, request, ttl)
        .await
    {
        Ok(points) => on_branch(&points, identity_at),
        Err(e) => {
            app.metrics.store_error("cache_expiries");
            tracing::warn!(error = %e, "reading the prompt-cache clock failed");
            Vec::new()
        }
    }
}

/// What the rewrite of one body is given besides the body.
pub(super) struct RewriteInput {
    pub mode: Mode,
    /// Off: the recall tools are not added, every choice made as with them
    /// (the last round of a recall loop that drops the tools).
    pub recall: bool,
    /// The model the path names, for a body that names none.
    pub path_model: Option<String>,
    /// The request's headers ask for the long context window
    /// ([`crate::protocol::Protocol::asks_long_context`]).
    pub long_context: bool,
    pub expiries: Expiries,
    /// The request continues a stored response the recall tools were
    /// offered with ([`ContinuesRecall`]).
    pub continues_recall: bool,
}

/// A request extension: the stored response the request continues was
/// answered with the recall tools offered (the store holds its id), so
/// this request is offered them too.
#[derive(Clone, Copy, Debug)]
pub(super) struct ContinuesRecall;

impl RewriteInput {
    /// The request's own rewrite: with refs and recall, the clock asked.
    pub(super) fn of(
        endpoint: &'static Endpoint,
        parts: &http::request::Parts,
        expiries: Expiries,
    ) -> Self {
        RewriteInput {
            mode: Mode::WithRefs,
            recall: true,
            path_model: endpoint.model_in(parts.uri.path()),
            long_context: endpoint.protocol.asks_long_context(&parts.headers),
            expiries,
            continues_recall: parts.extensions.get::<ContinuesRecall>().is_some(),
        }
    }
}

/// Runs the pure rewrite once: parses the body, asks the prompt-cache clock
/// (when `input` says to), rewrites. On the blocking pool for large bodies,
/// where the clock is waited for on the pool's thread.
pub(super) async fn plan(
    app: &Arc<App>,
    endpoint: &'static Endpoint,
    body: Bytes,
    input: RewriteInput,
) -> Result<RewriteOutcome, ProxyError> {
    if body.len() <= INLINE_REWRITE_BYTES {
        return Ok(Box::pin(rewrite_once(app, endpoint, &body, &input)).await);
    }
    let app = app.clone();
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        runtime.block_on(rewrite_once(&app, endpoint, &body, &input))
    })
    .await
    .map_err(|e| ProxyError::Internal(format!("rewrite task failed: {e}")))
}

/// Parses the body, asks the clock where `input` says to, rewrites once.
async fn rewrite_once(
    app: &App,
    endpoint: &'static Endpoint,
    body: &Bytes,
    input: &RewriteInput,
) -> RewriteOutcome {
    let policy = policy_for(app, input.recall);
    let reading = match read(body, &policy, endpoint, input) {
        Ok(reading) => reading,
        Err(why) => return RewriteOutcome::Unchanged(why.as_str(), None),
    };
    let expired = match &input.expiries {
        Expiries::Known(expired) => expired.clone(),
        Expiries::Ask(tenant, session) => {
            let asked = (tenant, session.as_deref());
            cache_expiries(app, endpoint, asked, body, &reading).await
        }
    };
    finish(app, endpoint, body, reading, &policy, input, expired)
}

/// The configured policy, or with the recall tools withheld.
fn policy_for(app: &App, recall: bool) -> Cow<'_, crate::rewrite::Policy> {
    if recall {
        return Cow::Borrowed(&app.config.policy);
    }
    Cow::Owned(crate::rewrite::Policy {
        withhold_recall_tools: true,
        ..app.config.policy.clone()
    })
}

fn read<'b>(
    body: &'b [u8],
    policy: &crate::rewrite::Policy,
    endpoint: &'static Endpoint,
    input: &RewriteInput,
) -> Result<Reading<'b>, crate::rewrite::Unchanged> {
    let facts = RequestFacts {
        path_model: input.path_model.as_deref(),
        path_streams: endpoint.streams,
        long_context: input.long_context,
        expired: &[],
        continues_recall: input.continues_recall,
    };
    Reading::of(body, policy, endpoint.protocol, facts)
}

/// The rewrite of a parsed body, owned (so it can cross from the blocking
/// pool), each output's text left where it is in the body when it can be.
fn finish(
    app: &App,
    endpoint: &'static Endpoint,
    body: &[u8],
    reading: Reading<'_>,
    policy: &crate::rewrite::Policy,
    input: &RewriteInput,
    expired: Vec<usize>,
) -> RewriteOutcome {
    let mode = input.mode;
    let rewritten = reading.rewrite(policy, endpoint.protocol, mode, &app.memo, &expired);
    match rewritten {
        (Outcome::Unchanged(why), read) => RewriteOutcome::Unchanged(why.as_str(), read),
        (Outcome::Rewritten(r), _) => RewriteOutcome::Rewritten(Box::new(OwnedRewrite {
            body: Bytes::from(r.body),
            saved_chars: r.saved_chars,
            opening: r.opening,
            model: r.model,
            recall_names: r.recall_names,
            streaming: r.streaming,
            recall_offered: policy.adds_recall_tools(mode),
            turns: r.turns,
            last_canon: r.last_canon,
            cache_anchor: r.cache_anchor,
            expired,
            outputs: r
                .outputs
                .into_iter()
                .map(|o| PlannedOutput {
                    first_seen: o.text.is_some(),
                    chars_saved: o.original_chars.saturating_sub(o.stub.chars().count()),
                    stub: o.stub,
                    reason: o.reason,
                    result_ref: o.result_ref,
                    text: match (o.text, &o.content) {
                        // Decoded by the rewrite already (first seen): keep it.
                        (Some(decoded), _) => TextSource::Decoded(Arc::new(decoded.into_owned())),
                        (None, Content::JsonString(raw)) => {
                            match span_in_bytes(body, raw.as_bytes()) {
                                Some(span) => TextSource::Literal(span),
                                None => TextSource::Decoded(Arc::new(
                                    o.content.decode().map(Cow::into_owned).unwrap_or_default(),
                                )),
                            }
                        }
                        (None, Content::Decoded(t)) => TextSource::Decoded(Arc::new(t.to_string())),
                        (None, Content::Parts { texts, .. }) => {
                            let spans: Option<Vec<Range<usize>>> = texts
                                .iter()
                                .map(|t| span_in_bytes(body, t.as_bytes()))
                                .collect();
                            match spans {
                                Some(spans) => TextSource::Literals(spans),
                                None => TextSource::Decoded(Arc::new(
                                    o.content.decode().map(Cow::into_owned).unwrap_or_default(),
                                )),
                            }
                        }
                    },
                    new: NewOutput {
                        session_id: String::new(),
                        tool_call_id: o.tool_call_id,
                        tool_name: o.tool_name,
                        mime_type: o.mime,
                        preview_chars: o.preview_chars as u64,
                        synopsis: o.synopsis,
                        text: Arc::default(),
                        sha256: Some(o.sha256),
                        stub: None,
                    },
                })
                .collect(),
        })),
    }
}
