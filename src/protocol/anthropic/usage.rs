//! Anthropic's usage: `input_tokens` (uncached), `cache_read_input_tokens`,
//! `cache_creation_input_tokens`, `output_tokens`; on the whole message, in
//! a stream's `message_start` (under `message`) and `message_delta` (at the
//! top, cumulative: the last one holds the final output count).

use crate::usage::Reported;
use serde_json::Value;

pub(super) fn reported(value: &Value) -> Option<Reported> {
    let (holder, usage) = match value.get("usage").filter(|u| u.is_object()) {
        Some(usage) => (value, usage),
        None => {
            let message = value.get("message")?;
            (message, message.get("usage").filter(|u| u.is_object())?)
        }
    };
    Some(Reported {
        input: Reported::field(usage, "input_tokens"),
        cache_read: Reported::field(usage, "cache_read_input_tokens"),
        cache_write: Reported::field(usage, "cache_creation_input_tokens"),
        output: Reported::field(usage, "output_tokens"),
        model: holder
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::{Usage, UsageScanner};

    #[test]
    fn a_stream_gives_input_at_start_and_output_at_the_end() {
        let body = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"claude-x\",",
            "\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":100,\"cache_read_input_tokens\":900,\"output_tokens\":1}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"usage\"}}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":42}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        let mut s = UsageScanner::new(Some("text/event-stream"), reported);
        s.push(body.as_bytes());
        let seen = s.finish();
        assert_eq!(
            seen.usage,
            Usage {
                input: 12,
                cache_read: 900,
                cache_write: 100,
                output: 42
            }
        );
        assert_eq!(seen.model.as_deref(), Some("claude-x"));
    }

    #[test]
    fn a_whole_message() {
        let v: Value = serde_json::from_str(
            r#"{"model":"claude-y","usage":{"input_tokens":5,"output_tokens":6,"cache_read_input_tokens":0}}"#,
        )
        .unwrap_or_default();
        let r = reported(&v).unwrap_or_default();
        assert_eq!(
            (r.input, r.output, r.cache_read, r.cache_write),
            (Some(5), Some(6), Some(0), None)
        );
        assert_eq!(r.model.as_deref(), Some("claude-y"));
    }
}
