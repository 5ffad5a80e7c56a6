//! Recall: the model reads, searches and lists the externalized originals
//! through tools the proxy injects and answers itself (SPEC section 6).
//!
//! - [`execute`]: runs one recall call against the store (tenant and session
//!   scope) and returns the tool result the model sees; invalid arguments and
//!   unknown or expired refs are results too, never failures.
//! - [`openai`]: the OpenAI Chat wire shapes of a recall round: which calls in
//!   a response are recall calls, the messages appended for the next round,
//!   summed usage, and the cleaned final response.
//! - [`sse`] and [`stream`]: the streaming variant, an explicit state machine
//!   over server-sent events that splices rounds into one client stream.
//!
//! Architecture invariant: everything here but [`execute`] is pure (no I/O);
//! the proxy layer drives the rounds. Recall results stay inside the request:
//! they are never stored or externalized.

pub mod execute;
pub mod openai;
pub mod sse;
pub mod stream;

pub use execute::{execute, RecallScope};

use crate::stub::RecallToolNames;

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
