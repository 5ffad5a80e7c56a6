//! The Responses API's response ids on the wire. The upstream stores each
//! response under an id; a request may continue one
//! (`previous_response_id`), and `GET /v1/responses/{id}` (with its
//! `input_items`, `cancel` and `DELETE`) reaches one. The proxy answers the
//! client with the first round's id while the upstream's conversation went
//! on to the last recall round's, so the proxy maps one to the other
//! (`proxy::response_ids`); what that mapping reads and writes in a path, a
//! request and a fetched response is here.

use super::super::endpoint::ResponseIds;
use super::super::json_edit::{raw_member, set_members};
use super::super::json_string;
use crate::stub::RecallToolNames;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// What the Responses endpoint declares of its ids.
pub(super) static IDS: ResponseIds = ResponseIds {
    label: "response_by_id",
    in_path,
    continued,
    continue_from,
    as_the_client_saw,
};

/// The response a path names: `.../v1/responses/{id}[/...]`, where the id
/// starts `resp`.
fn in_path(path: &str) -> Option<&str> {
    let (_, rest) = path.split_once("/v1/responses/")?;
    let id = rest.split('/').next()?;
    id.starts_with("resp").then_some(id)
}

/// The response a request continues (its `previous_response_id`). Most
/// bodies continue none (Codex never does): settled without a parse.
fn continued(body: &[u8]) -> Option<String> {
    memchr::memmem::find(body, b"\"previous_response_id\"")?;
    let text = std::str::from_utf8(body).ok()?;
    serde_json::from_str(raw_member(text, "previous_response_id")?).ok()
}

/// The request continuing `id` instead.
fn continue_from(body: &str, id: &str) -> Option<String> {
    set_members(body, &[("previous_response_id", json_string(id))])
}

/// A fetched response as the client knows it: its id the client's, its
/// `output` what the client was answered, and its echoed `tools` without
/// the recall tools. The proxy appends them after the client's tools, under
/// the names [`RecallToolNames::offered_beside`] gives for those tools, so
/// they are the last three exactly when those names stand there; a client
/// tool that has a recall tool's configured name (the recall tool was then
/// renamed) is kept.
fn as_the_client_saw(
    fetched: &str,
    client_id: &str,
    output: &str,
    names: &RecallToolNames,
) -> Option<String> {
    let mut members = vec![
        ("id", json_string(client_id)),
        ("output", output.to_string()),
    ];
    if let Some(tools) = raw_member(fetched, "tools") {
        let mut tools: Vec<&RawValue> = serde_json::from_str(tools).ok()?;
        if let Some(client) = tools.len().checked_sub(3) {
            let name = |tool: &RawValue| -> String {
                serde_json::from_str::<Named>(tool.get())
                    .map(|t| t.name)
                    .unwrap_or_default()
            };
            let client_names: Vec<Cow<'_, str>> = tools[..client]
                .iter()
                .map(|t| Cow::Owned(name(t)))
                .collect();
            let offered = names.offered_beside(&client_names);
            let last: Vec<String> = tools[client..].iter().map(|t| name(t)).collect();
            if last == [offered.read, offered.search, offered.list] {
                tools.truncate(client);
            }
        }
        let tools: Vec<&str> = tools.iter().map(|t| t.get()).collect();
        members.push(("tools", format!("[{}]", tools.join(","))));
    }
    set_members(fetched, &members)
}

/// A tool's name, if it has one (a hosted tool has none).
#[derive(serde::Deserialize)]
struct Named {
    #[serde(default)]
    name: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_names_a_response_only_by_an_id_of_its_kind() {
        assert_eq!(in_path("/v1/responses/resp_1"), Some("resp_1"));
        assert_eq!(
            in_path("/openai/v1/responses/resp_1/input_items"),
            Some("resp_1")
        );
        assert_eq!(in_path("/v1/responses/compact"), None);
        assert_eq!(in_path("/v1/responses"), None);
    }

    #[test]
    fn a_continued_response_is_read_and_replaced() {
        let body = br#"{"model":"m","previous_response_id":"resp_c","input":[]}"#;
        assert_eq!(continued(body).as_deref(), Some("resp_c"));
        assert_eq!(continued(br#"{"model":"m","input":[]}"#), None);
        assert_eq!(continued(br#"{"previous_response_id":7}"#), None);
        let text = std::str::from_utf8(body).expect("utf-8");
        assert_eq!(
            continue_from(text, "resp_u").as_deref(),
            Some(r#"{"model":"m","previous_response_id":"resp_u","input":[]}"#)
        );
    }

    /// The tools a fetched response echoes, as the client sees them.
    fn shown_tools(tools: &[&str]) -> String {
        let tools: Vec<String> = tools
            .iter()
            .map(|n| format!(r#"{{"type":"function","name":"{n}"}}"#))
            .collect();
        let fetched = format!(
            r#"{{"id":"resp_u","output":[{{"type":"function_call"}}],"tools":[{}]}}"#,
            tools.join(",")
        );
        as_the_client_saw(&fetched, "resp_c", "[]", &RecallToolNames::default()).expect("patched")
    }

    #[test]
    fn a_fetched_response_loses_the_recall_tools_and_keeps_the_client_s() {
        assert_eq!(
            shown_tools(&[
                "bash",
                "tool_result_read",
                "tool_result_search",
                "tool_result_list"
            ]),
            r#"{"id":"resp_c","output":[],"tools":[{"type":"function","name":"bash"}]}"#
        );
        // The client's own `tool_result_read` stays; the recall tool offered
        // beside it under another name goes.
        assert_eq!(
            shown_tools(&[
                "tool_result_read",
                "toolstub_tool_result_read",
                "tool_result_search",
                "tool_result_list"
            ]),
            r#"{"id":"resp_c","output":[],"tools":[{"type":"function","name":"tool_result_read"}]}"#
        );
        // No recall tools offered (a turn without a stub): every tool stays,
        // and a hosted tool without a name too.
        let fetched = r#"{"id":"resp_u","output":[],"tools":[{"type":"web_search"},{"type":"function","name":"tool_result_read"},{"type":"function","name":"bash"}]}"#;
        assert_eq!(
            as_the_client_saw(fetched, "resp_c", "[]", &RecallToolNames::default())
                .expect("patched"),
            r#"{"id":"resp_c","output":[],"tools":[{"type":"web_search"},{"type":"function","name":"tool_result_read"},{"type":"function","name":"bash"}]}"#
        );
    }
}
