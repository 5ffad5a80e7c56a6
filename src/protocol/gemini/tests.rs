use super::*;
use crate::protocol::ToolsSlot;

/// A Gemini CLI request: a shell output in `response.output`, a read in
/// an MCP-style object, an error, the model turn with its signature.
const BODY: &str = r#"{"contents":[
  {"role":"user","parts":[{"text":"list"}]},
  {"role":"model","parts":[{"text":"thinking","thought":true},{"functionCall":{"name":"run_shell_command","args":{"command":"ls"}},"thoughtSignature":"c2ln"},{"functionCall":{"id":"c2","name":"read_file","args":{}}}]},
  {"role":"user","parts":[
    {"functionResponse":{"name":"run_shell_command","response":{"output":"a\nb"}}},
    {"functionResponse":{"id":"c2","name":"read_file","response":{"result":{"rows":[1,2]}}}}]},
  {"role":"model","parts":[{"functionCall":{"name":"grep_search","args":{"pattern":"x"}},"thoughtSignature":"c2ln"}]},
  {"role":"user","parts":[{"functionResponse":{"name":"grep_search","response":{"error":"no such file"}}}]}
],"systemInstruction":{"parts":[{"text":"sys"}]},
"tools":[{"functionDeclarations":[{"name":"run_shell_command"},{"name":"read_file"}]},{"googleSearch":{}}]}"#;

#[test]
fn finds_function_responses_their_names_ids_groups_and_spans() {
    let parsed = Gemini::STREAM.parse_body(BODY).expect("parsed");
    assert!(parsed.streaming, "the route streams");
    let [shell, read, grep] = &parsed.outputs[..] else {
        panic!("three outputs: {:?}", parsed.outputs)
    };
    assert_eq!(shell.tool_name.as_deref(), Some("run_shell_command"));
    assert_eq!(shell.tool_call_id, None);
    assert_eq!(shell.content.decode().as_deref(), Some("a\nb"));
    assert_eq!(shell.shape, ContentShape::String);
    assert_eq!(&BODY[shell.content_span.clone()], r#""a\nb""#);
    assert_eq!(read.tool_call_id.as_deref(), Some("c2"));
    assert_eq!(read.shape, ContentShape::OutputObject);
    assert_eq!(
        &BODY[read.content_span.clone()],
        r#"{"result":{"rows":[1,2]}}"#
    );
    assert_eq!(
        read.content.decode().as_deref(),
        Some(r#"{"result":{"rows":[1,2]}}"#)
    );
    assert!(grep.is_error, "response.error is the client's error");
    assert_eq!(grep.content.decode().as_deref(), Some("no such file"));
    assert_eq!(shell.group, read.group, "one content answers one turn");
    assert_ne!(shell.group, grep.group);
    assert_eq!(
        parsed
            .messages
            .iter()
            .map(|m| m.assistant)
            .collect::<Vec<_>>(),
        [false, true, false, true, false]
    );
    assert_eq!(parsed.client_tool_names, ["run_shell_command", "read_file"]);
    assert!(matches!(
        parsed.tools,
        ToolsSlot::AppendToArray { empty: false, .. }
    ));
    assert!(parsed.opening.starts_with("user\u{0}"));
    assert!(!Gemini::GENERATE.parse_body(BODY).expect("parsed").streaming);
}

#[test]
fn shapes_it_does_not_know_are_not_understood() {
    for body in [
        "not json",
        "{}",
        r#"{"contents":{}}"#,
        r#"{"contents":[1]}"#,
        r#"{"contents":[{"parts":{}}]}"#,
        r#"{"contents":[{"parts":[["functionResponse"]]}]}"#,
        r#"{"contents":[],"tools":{}}"#,
        r#"{"contents":[],"tools":[["f"]]}"#,
        r#"{"contents":[{"role":"user","role":"model","parts":[]}]}"#,
        // A cached content holds the tools: the API refuses any beside it.
        r#"{"cachedContent":"cachedContents/x","contents":[]}"#,
    ] {
        assert!(Gemini::GENERATE.parse_body(body).is_none(), "{body}");
    }
    // A response that is not an object, or an output that is not a
    // string in an object of several members: nothing to stub but the
    // object itself.
    let odd = r#"{"contents":[{"role":"user","parts":[
        {"functionResponse":{"name":"a","response":"text"}},
        {"functionResponse":{"name":"b","response":{"output":7,"more":true}}}]}]}"#;
    let parsed = Gemini::GENERATE.parse_body(odd).expect("parsed");
    assert_eq!(parsed.outputs.len(), 1);
    assert_eq!(parsed.outputs[0].shape, ContentShape::OutputObject);
    assert_eq!(parsed.outputs[0].tool_name.as_deref(), Some("b"));
}

#[test]
fn tools_are_added_as_a_tool_of_their_own() {
    let p = Gemini::GENERATE
        .parse_body(r#"{"contents":[]}"#)
        .expect("parsed");
    assert!(matches!(p.tools, ToolsSlot::AddMember { empty: false, .. }));
    let tool: serde_json::Value =
        serde_json::from_str(&Gemini::recall_tool(&RecallToolNames::default())).expect("json");
    let declarations = tool["functionDeclarations"].as_array().expect("array");
    assert_eq!(declarations.len(), 3);
    assert!(declarations
        .iter()
        .all(|d| d["parametersJsonSchema"]["type"] == "object"));
}

#[test]
fn a_content_is_known_by_what_the_model_said_not_by_its_signatures() {
    let streamed = r#"{"role":"model","parts":[{"text":"Here ","thoughtSignature":"AAA="},{"text":"it is."},{"text":"hmm","thought":true}]}"#;
    let merged = r#"{"parts":[{"text":"Here it is."}],"role":"model"}"#;
    let other = r#"{"role":"model","parts":[{"text":"Here it was."}]}"#;
    let g = Gemini::GENERATE;
    assert_eq!(g.canon(streamed), g.canon(merged));
    assert_ne!(g.canon(streamed), g.canon(other));
    let call = |args: &str| {
        g.canon(&format!(
            r#"{{"role":"model","parts":[{{"functionCall":{{"name":"f","args":{args}}},"thoughtSignature":"x"}}]}}"#
        ))
    };
    assert_eq!(call(r#"{"a":1,"b":2}"#), call(r#"{"b":2, "a":1}"#));
    assert_ne!(call(r#"{"a":1}"#), call(r#"{"a":2}"#));
    // A function response by its name and id, not its megabytes.
    let response = |output: &str| {
        g.canon(&format!(
            r#"{{"role":"user","parts":[{{"functionResponse":{{"name":"f","response":{{"output":"{output}"}}}}}}]}}"#
        ))
    };
    assert_eq!(response("one megabyte"), response("[toolstub stub]"));
}

#[test]
fn calls_are_read_from_a_model_content() {
    let content = r#"{"role":"model","parts":[{"text":"x"},{"functionCall":{"name":"tool_result_read","args":{"ref":"tr_1"}},"thoughtSignature":"s"},{"functionCall":{"id":"k","name":"f"}}]}"#;
    assert_eq!(
        calls_of(content).expect("calls"),
        [
            (
                None,
                "tool_result_read".to_string(),
                r#"{"ref":"tr_1"}"#.to_string()
            ),
            (Some("k".to_string()), "f".to_string(), "{}".to_string()),
        ]
    );
}

#[test]
fn reads_parts_by_their_proto_names_too() {
    // The API takes protobuf JSON: `function_response` is `functionResponse`.
    let body = r#"{"contents":[{"role":"user","parts":[{"text":"q"}]},
{"role":"model","parts":[{"function_call":{"name":"f","args":{}}}]},
{"role":"user","parts":[{"function_response":{"name":"f","response":{"output":"big"}}}]}]}"#;
    let parsed = Gemini::GENERATE.parse_body(body).expect("parsed");
    let [out] = &parsed.outputs[..] else {
        panic!("one output: {:?}", parsed.outputs)
    };
    assert_eq!(out.tool_name.as_deref(), Some("f"));
    assert_eq!(&body[out.content_span.clone()], r#""big""#);
    assert_eq!(
        calls_of(r#"{"role":"model","parts":[{"function_call":{"name":"f","args":{"a":1}}}]}"#),
        Some(vec![(None, "f".to_string(), r#"{"a":1}"#.to_string())])
    );
    // Both names in one part: not a request this adapter reads.
    let both = r#"{"contents":[{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}},"function_response":{"name":"f","response":{}}}]}]}"#;
    assert!(Gemini::GENERATE.parse_body(both).is_none());
}

#[test]
fn a_run_of_contents_of_one_role_is_one_message() {
    // The Python SDK's chat keeps a streamed answer as one content per event.
    let body = r#"{"contents":[{"role":"user","parts":[{"text":"q"}]},{"role":"model","parts":[{"text":"Hel"}]},{"role":"model","parts":[{"text":"lo"},{"functionCall":{"name":"f","args":{"a":1}}}]},{"role":"user","parts":[{"text":"next"}]}]}"#;
    let parsed = Gemini::GENERATE.parse_body(body).expect("parsed");
    let spans: Vec<&str> = parsed
        .messages
        .iter()
        .map(|m| &body[m.span.clone()])
        .collect();
    assert_eq!(spans.len(), 3, "{spans:?}");
    assert!(spans[1].starts_with(r#"{"role":"model","parts":[{"text":"Hel"}]},{"role":"model""#));
    assert!(parsed.messages[1].assistant);
    // Its canon is the merged content's: restoration matches either form.
    let merged = r#"{"role":"model","parts":[{"text":"Hello"},{"functionCall":{"name":"f","args":{"a":1}}}]}"#;
    assert_eq!(
        Gemini::GENERATE.canon(spans[1]),
        Gemini::GENERATE.canon(merged)
    );
    assert!(Gemini::GENERATE.canon(spans[1]).is_some());
    // A run that mixes roles is no one message.
    assert_eq!(
        Gemini::GENERATE.canon(r#"{"role":"model","parts":[]},{"role":"user","parts":[]}"#),
        None
    );
}

/// A response's `usageMetadata` is its usage: the cached part apart, the
/// built-in tools' prompts counted as input and the thoughts as output; a
/// stream's last chunk holds the totals.
#[test]
fn usage_metadata_is_read_from_a_whole_response_and_a_stream() {
    use crate::usage::{Usage, UsageScanner};
    let want = Usage {
        input: 2_500,
        cache_read: 28_000,
        cache_write: 0,
        output: 9,
    };
    let whole = r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"they are."}]}}],"usageMetadata":{"promptTokenCount":30000,"toolUsePromptTokenCount":500,"candidatesTokenCount":4,"thoughtsTokenCount":5,"cachedContentTokenCount":28000},"modelVersion":"gemini-x"}"#;
    let mut s = UsageScanner::new(Some("application/json"), &Gemini { streaming: false });
    s.push(whole.as_bytes());
    let seen = s.finish();
    assert_eq!(seen.usage, want);
    assert_eq!(seen.model.as_deref(), Some("gemini-x"));
    let stream = format!(
        "data: {}\r\n\r\ndata: {whole}\r\n\r\n",
        r#"{"candidates":[],"usageMetadata":{"promptTokenCount":30000,"candidatesTokenCount":1}}"#
    );
    let mut s = UsageScanner::new(Some("text/event-stream"), &Gemini { streaming: true });
    s.push(stream.as_bytes());
    assert_eq!(s.finish().usage, want);
}
