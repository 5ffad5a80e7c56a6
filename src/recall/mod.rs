//! Recall: the model reads, searches and lists the externalized originals
//! through tools the proxy injects and answers itself.
//!
//! - [`execute`]: runs one recall call against the store (tenant and session
//!   scope) and returns the tool result the model sees; invalid arguments and
//!   unknown or expired refs are results too, never failures.
//! - [`Rounds`]: the protocol-independent face of one request's recall
//!   rounds, implemented once per wire format in `crate::protocol`: which
//!   calls in a response are recall calls, what the next round appends, what
//!   the client sees (whole or streamed), and the hidden exchange to restore
//!   on the client's next turn.
//! - [`sse`]: a bounded server-sent events parser keeping original bytes.
//!
//! Architecture invariant: everything here but [`execute`] is pure (no I/O);
//! the proxy layer drives the rounds without knowing the protocol. Recall
//! results stay inside the request and its restored history: they are never
//! stored as outputs or externalized.

pub mod execute;
pub mod sse;

pub use execute::{execute, RecallScope};

use crate::stub::RecallToolNames;
use bytes::Bytes;
use sse::Event;

/// The three recall tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecallTool {
    Read,
    Search,
    List,
}

impl RecallTool {
    /// Which recall tool `name` is, under this request's names.
    pub fn named(names: &RecallToolNames, name: &str) -> Option<RecallTool> {
        if name == names.read {
            Some(RecallTool::Read)
        } else if name == names.search {
            Some(RecallTool::Search)
        } else if name == names.list {
            Some(RecallTool::List)
        } else {
            None
        }
    }

    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            RecallTool::Read => "read",
            RecallTool::Search => "search",
            RecallTool::List => "list",
        }
    }
}

/// One call of a recall tool the model made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecallCall {
    pub id: String,
    pub name: String,
    pub tool: RecallTool,
    /// The JSON arguments, as the model wrote them.
    pub arguments: String,
}

/// The event that ends a client's stream when the upstream answered a
/// later round with `status` and `body` (its first bytes, or none when it
/// was too long to read): the upstream's own error where the adapter can
/// pass it on ([`Rounds::upstream_error`]), else the proxy's.
pub fn upstream_error_event(rounds: &dyn Rounds, status: u16, body: &[u8]) -> Bytes {
    serde_json::from_slice(body)
        .ok()
        .and_then(|answer| rounds.upstream_error(&answer))
        .unwrap_or_else(|| {
            let message = format!(
                "the upstream answered {status} during a recall round: {}",
                crate::synopsis::clip(&String::from_utf8_lossy(body), 500)
            );
            rounds.error_event(&message, "upstream_error")
        })
}

/// A recall call answered, as the next round sends it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallResult {
    pub call: RecallCall,
    /// The tool result text (JSON).
    pub text: String,
    /// The call failed (bad arguments, unknown or expired ref).
    pub is_error: bool,
}

/// What a whole (non-streaming) round's response amounts to.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// The model called recall tools: run them, hand the results to
    /// [`Rounds::answered`], and send the next round.
    Recall(Vec<RecallCall>),
    /// The response for the client; `None`: the upstream's bytes unchanged.
    Final(Option<Bytes>),
}

/// How a streamed round ended.
#[derive(Debug, PartialEq, Eq)]
pub enum RoundEnd {
    /// The model called recall tools: run them, then start the next round.
    Recall(Vec<RecallCall>),
    /// The response is complete; [`Rounds::finish`] gives the closing bytes.
    Done,
    /// The upstream sent an error event (already forwarded).
    UpstreamError,
    /// The stream ended before its end marker.
    Truncated,
}

/// A hidden exchange, kept so the client's next turn can be restored to
/// the conversation the model really had.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restoration {
    /// [`crate::protocol::turn_identity`] of the request's last message and
    /// the answer as the client saw it.
    pub identity: String,
    /// What replaces that answer when the client sends it back: the hidden
    /// rounds' messages and the last round's answer, JSON values joined by
    /// commas, byte for byte as first sent upstream.
    pub replacement: String,
    /// The answer as the client saw it is no valid history without the
    /// hidden rounds (the Responses API: a hidden round's reasoning item was
    /// shown, and the upstream rejects a reasoning item sent back without
    /// the item the model emitted after it, here a recall call). Such an
    /// exchange is kept and restored whatever `recall.restore_history` says.
    pub required: bool,
}

impl Restoration {
    /// The exchange of a request whose last message canonicalizes to
    /// `previous` and whose answer, as the client saw it, to `seen`: the
    /// hidden rounds' `appended` messages, then the last round's `last`
    /// (its answer as the next turn sends it upstream). `None` when either
    /// canonical form is unknown (nothing to recognize the turn by).
    pub fn of(
        previous: Option<&str>,
        seen: Option<String>,
        appended: &[String],
        last: impl IntoIterator<Item = String>,
        required: bool,
    ) -> Option<Restoration> {
        let (previous, seen) = (previous?, seen?);
        let replacement: Vec<String> = appended.iter().cloned().chain(last).collect();
        Some(Restoration {
            identity: crate::protocol::turn_identity(previous, &seen),
            replacement: replacement.join(","),
            required,
        })
    }
}

/// The id a client got for an answer whose last round the upstream knows
/// under another id (the Responses API: the client sees round 1's id), so
/// that a request chaining from it, or fetching it, reaches the true one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdMap {
    pub client: String,
    pub upstream: String,
    /// The output the client saw (a JSON array), for fetches of the id.
    pub output: String,
}

/// One request's recall rounds in one protocol: a state machine fed with
/// each round's response (whole, or event by event), pure.
pub trait Rounds: Send + Sync {
    /// A whole round's response body (a 2xx JSON response).
    fn response(&mut self, body: &[u8], recall_allowed: bool) -> Step;

    /// One event of a streamed round; returns the bytes for the client.
    fn event(&mut self, event: &Event) -> Vec<Bytes>;

    /// The streamed round's upstream body has ended: bytes for the client
    /// (blocks held back until the round's end), and how it ended.
    fn end_round(&mut self, recall_allowed: bool) -> (Vec<Bytes>, RoundEnd);

    /// A streamed round begins after [`Rounds::answered`].
    fn next_round(&mut self);

    /// The closing bytes of the client's stream.
    fn finish(&mut self) -> Vec<Bytes>;

    /// The results of the calls of the round that just ended.
    fn answered(&mut self, results: Vec<CallResult>);

    /// JSON items the next round appends to the conversation, in order.
    fn appended(&self) -> &[String];

    /// After the last round: the hidden exchange, if there was one.
    fn restoration(&self) -> Option<Restoration>;

    /// After the last round: the id the client got for the answer, when the
    /// upstream knows it under another one, or under the same one where a
    /// request may continue it by id (the Responses API's stored answers).
    fn id_map(&self) -> Option<IdMap> {
        None
    }

    /// A well-formed event that ends the client's stream with an error.
    fn error_event(&self, message: &str, code: &str) -> Bytes;

    /// The event that ends the client's stream when the upstream answered
    /// a later round with an error status, its `answer` (JSON) in the
    /// API's error format: the upstream's own error passed on, so that a
    /// client that retries or backs off by the error's type
    /// (`overloaded_error`, `rate_limit_exceeded`) still can. `None` (the
    /// default, or an answer of another shape): the driver ends the stream
    /// with the proxy's own [`Rounds::error_event`], naming the status and
    /// the answer.
    fn upstream_error(&self, _answer: &serde_json::Value) -> Option<Bytes> {
        None
    }

    /// An event that keeps the client's stream alive and means nothing.
    fn keepalive(&self) -> Bytes;
}
