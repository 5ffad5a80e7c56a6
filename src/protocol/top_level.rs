//! The top level of a request body every adapter reads the same way: an
//! object with the conversation's array (`messages`, or the Responses API's
//! `input`; each element read by the adapter), the raw `tools` value, and
//! whether `"stream": true` was given once. Every other member is skipped
//! (validated, not built).

use super::json_scan::Scanner;

/// The members of a body the adapters read.
pub(super) struct Body<'b, M> {
    pub messages: Vec<M>,
    /// The raw `tools` value, `null` included; `None` when absent.
    pub tools: Option<&'b str>,
    /// `"stream": true`, given once (serde_json's derived reader, which the
    /// proxy used before, refuses a duplicate field: not streaming).
    pub streaming: bool,
    /// `"background": true` (the Responses API's background mode).
    pub background: bool,
    /// A `conversation` (the Responses API's conversation object, which
    /// the upstream adds each response's input and output items to).
    pub in_conversation: bool,
    /// The `model` member's raw JSON (the last, if given twice).
    pub model: Option<&'b str>,
    /// An `anthropic_beta` list (Claude on Bedrock and Vertex AI, where the
    /// betas go in the body) naming a `context-1m-*` beta: the client asked
    /// for the long context window.
    pub long_context: bool,
}

/// Sets a field read from an object; a second occurrence of the same key
/// makes the body not understood (serde_json's derived readers refuse
/// duplicate fields too, and which one wins is ambiguous).
pub(super) fn once<T>(field: &mut Option<T>, value: T) -> Option<()> {
    field.is_none().then(|| *field = Some(value))
}

/// Reads a body whose `messages` are read by `message`; `None` when it is
/// not such an object (it is then forwarded as it came).
pub(super) fn read_body<'b, M>(
    body: &'b str,
    message: impl FnMut(&mut Scanner<'b>) -> Option<M>,
) -> Option<Body<'b, M>> {
    read_conversation(body, "messages", message)
}

/// [`read_body`] with the conversation under `conversation`.
pub(super) fn read_conversation<'b, M>(
    body: &'b str,
    conversation: &str,
    mut message: impl FnMut(&mut Scanner<'b>) -> Option<M>,
) -> Option<Body<'b, M>> {
    let mut scanner = Scanner::new(body);
    let (mut messages, mut tools) = (None, None);
    let (mut streams, mut stream_true) = (0, false);
    let mut background = false;
    let mut in_conversation = false;
    let mut model = None;
    let mut long_context = false;
    scanner.object(|s, key| match key {
        k if k == conversation => {
            let mut list = Vec::new();
            s.array(|s| message(s).map(|m| list.push(m)))?;
            once(&mut messages, list)
        }
        "tools" => once(&mut tools, s.value()?),
        // Beside these the API refuses the recall tools the rewrite would
        // add: Chat's legacy `functions` (OpenAI takes them or `tools`,
        // never both), Gemini's `cachedContent` (its cache holds the
        // tools, and a request naming it may name none). Not understood,
        // so forwarded as the client sent it.
        "functions" | "cachedContent" => None,
        "stream" => {
            streams += 1;
            stream_true = s.value()? == "true";
            Some(())
        }
        "background" => {
            background |= s.value()? == "true";
            Some(())
        }
        "conversation" => {
            in_conversation |= s.value()? != "null";
            Some(())
        }
        // Not a member the proxy acts on: a duplicate is no reason to
        // forward a body unread (the last one counts, as in most readers).
        "model" => {
            model = Some(s.value()?);
            Some(())
        }
        "anthropic_beta" => {
            long_context |= names_long_context(s.value()?);
            Some(())
        }
        _ => s.value().map(drop),
    })?;
    scanner.finish()?;
    Some(Body {
        messages: messages?,
        tools,
        streaming: streams == 1 && stream_true,
        background,
        in_conversation,
        model,
        long_context,
    })
}

/// Whether a raw `anthropic_beta` value (a list of strings) names a
/// `context-1m-*` beta.
fn names_long_context(raw: &str) -> bool {
    serde_json::from_str::<Vec<&str>>(raw)
        .is_ok_and(|betas| betas.iter().any(|b| is_long_context_beta(b)))
}

/// Anthropic's beta names for the 1M-token context window
/// (`context-1m-2025-08-07`, and later dates).
pub fn is_long_context_beta(name: &str) -> bool {
    name.trim().starts_with("context-1m-")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::anthropic::AnthropicMessages;
    use crate::protocol::Protocol;

    #[test]
    fn the_long_context_beta_is_read_from_the_body_s_anthropic_beta_only() {
        let body = |extra: &str| {
            format!(
                r#"{{"anthropic_version":"bedrock-2023-05-31"{extra},"max_tokens":10,"messages":[{{"role":"user","content":"context-1m-2025-08-07"}}]}}"#
            )
        };
        let long = |b: &str| AnthropicMessages.parse(b).map(|p| p.long_context);
        assert_eq!(
            long(&body(r#","anthropic_beta":["context-1m-2025-08-07"]"#)),
            Some(true)
        );
        assert_eq!(
            long(&body(
                r#","anthropic_beta":["interleaved-thinking-2025-05-14"," context-1m-2026-01-01"]"#
            )),
            Some(true)
        );
        // Other betas, another shape, or the words in a message: no.
        assert_eq!(
            long(&body(
                r#","anthropic_beta":["interleaved-thinking-2025-05-14"]"#
            )),
            Some(false)
        );
        assert_eq!(
            long(&body(r#","anthropic_beta":"context-1m-2025-08-07""#)),
            Some(false)
        );
        assert_eq!(long(&body("")), Some(false));
    }

    #[test]
    fn the_long_context_header_is_anthropic_s() {
        let mut headers = http::HeaderMap::new();
        headers.append(
            "anthropic-beta",
            "fine-grained-tool-streaming-2025-05-14"
                .parse()
                .expect("value"),
        );
        assert!(!AnthropicMessages.asks_long_context(&headers));
        headers.append(
            "anthropic-beta",
            "x, context-1m-2025-08-07".parse().expect("value"),
        );
        assert!(AnthropicMessages.asks_long_context(&headers));
        let bedrock = crate::protocol::bedrock::INVOKE.protocol;
        assert!(bedrock.asks_long_context(&headers));
        let chat = crate::protocol::openai_chat::CHAT_COMPLETIONS.protocol;
        assert!(!chat.asks_long_context(&headers), "not an OpenAI header");
    }

    #[test]
    fn beta_names() {
        assert!(is_long_context_beta("context-1m-2025-08-07"));
        assert!(is_long_context_beta(" context-1m-2025-08-07 "));
        assert!(!is_long_context_beta("context-management-2025-06-27"));
        assert!(!is_long_context_beta(""));
    }
}
