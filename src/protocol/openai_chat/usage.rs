//! Chat Completions usage: `prompt_tokens` (cached included),
//! `prompt_tokens_details.cached_tokens`, `completion_tokens`; on the whole
//! response, or on a stream's last chunk (with
//! `stream_options.include_usage`; `usage: null` on the others).

use crate::usage::{OpenAiFields, Reported};
use serde_json::Value;

/// Where a response keeps its usage, for the tap's reading of the text.
pub(super) static FIELDS: OpenAiFields = OpenAiFields {
    input: "prompt_tokens",
    details: "prompt_tokens_details",
    output: "completion_tokens",
};

pub(super) fn reported(value: &Value) -> Option<Reported> {
    let usage = value.get("usage").filter(|u| u.is_object())?;
    Some(Reported::openai(
        value,
        usage,
        FIELDS.input,
        FIELDS.details,
        FIELDS.output,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::{Usage, UsageScanner};

    #[test]
    fn the_last_chunk_carries_usage() {
        let body = concat!(
            "data: {\"id\":\"c\",\"model\":\"gpt-x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n",
            "data: {\"id\":\"c\",\"model\":\"gpt-x\",\"choices\":[],\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":9,",
            "\"total_tokens\":1009,\"prompt_tokens_details\":{\"cached_tokens\":768}}}\n\n",
            "data: [DONE]\n\n",
        );
        let mut s = UsageScanner::new(Some("text/event-stream"), reported);
        s.push(body.as_bytes());
        let seen = s.finish();
        assert_eq!(
            seen.usage,
            Usage {
                input: 232,
                cache_read: 768,
                cache_write: 0,
                output: 9
            }
        );
        assert_eq!(seen.model.as_deref(), Some("gpt-x"));
    }
}
