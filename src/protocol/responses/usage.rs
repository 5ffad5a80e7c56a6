//! Responses API usage: `input_tokens` (cached included),
//! `input_tokens_details.cached_tokens`, `output_tokens`; on the whole
//! response, or under `response` in a stream's `response.completed`
//! (`response.incomplete`, `response.failed`; earlier events carry
//! `usage: null`).

use crate::usage::Reported;
use serde_json::Value;

pub(super) fn reported(value: &Value) -> Option<Reported> {
    let response = match value.get("response").filter(|r| r.is_object()) {
        Some(inner) => inner,
        None => value,
    };
    let usage = response.get("usage").filter(|u| u.is_object())?;
    Some(Reported::openai(
        response,
        usage,
        "input_tokens",
        "input_tokens_details",
        "output_tokens",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::{Usage, UsageScanner};

    #[test]
    fn response_completed_carries_usage() {
        let body = concat!(
            "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"model\":\"gpt-5\",\"usage\":null}}\n\n",
            "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"model\":\"gpt-5\",",
            "\"usage\":{\"input_tokens\":500,\"input_tokens_details\":{\"cached_tokens\":400},\"output_tokens\":20,\"total_tokens\":520}}}\n\n",
        );
        let mut s = UsageScanner::new(Some("text/event-stream"), reported);
        s.push(body.as_bytes());
        let seen = s.finish();
        assert_eq!(
            seen.usage,
            Usage {
                input: 100,
                cache_read: 400,
                cache_write: 0,
                output: 20
            }
        );
        assert_eq!(seen.model.as_deref(), Some("gpt-5"));
    }
}
