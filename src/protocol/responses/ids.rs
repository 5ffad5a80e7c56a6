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
use crate::recall::RecallTool;
use crate::stub::RecallToolNames;

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
/// the recall tools. A recall tool is one of the configured names, or one
/// renamed away from a client's tool (`toolstub_<name>`, `_<n>` after it).
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
        let tools: Vec<String> = serde_json::from_str::<Vec<serde_json::Value>>(tools)
            .ok()?
            .into_iter()
            .filter(|t| {
                let name = t
                    .get("name")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("");
                let own = name.strip_prefix("toolstub_").unwrap_or(name);
                let own = own
                    .rsplit_once('_')
                    .filter(|(_, n)| n.parse::<u32>().is_ok())
                    .map_or(own, |(base, _)| base);
                RecallTool::named(names, own).is_none()
            })
            .map(|t| t.to_string())
            .collect();
        members.push(("tools", format!("[{}]", tools.join(","))));
    }
    set_members(fetched, &members)
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

    #[test]
    fn a_fetched_response_loses_the_recall_tools_and_keeps_the_client_s() {
        let fetched = r#"{"id":"resp_u","output":[{"type":"function_call"}],"tools":[{"type":"function","name":"bash"},{"type":"function","name":"tool_result_read"},{"type":"function","name":"toolstub_tool_result_search_2"}]}"#;
        let shown = as_the_client_saw(fetched, "resp_c", "[]", &RecallToolNames::default())
            .expect("patched");
        assert_eq!(
            shown,
            r#"{"id":"resp_c","output":[],"tools":[{"name":"bash","type":"function"}]}"#
        );
    }
}
