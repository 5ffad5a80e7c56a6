//! MCP tool outputs: content blocks are taken off so the
//! synopsis describes the payload, a JSON text cut short is read as far as
//! it goes, list items keep their identifying values, and a browser's
//! accessibility snapshot is a kind of its own.

use super::{stub, syn};
use toolstub::synopsis::Kind;

/// A JSON list of 60 products, as an MCP server writes it (indented).
fn products() -> String {
    let items: Vec<serde_json::Value> = (0..60)
        .map(|i| {
            serde_json::json!({
                "id": 150 + i,
                "name": format!("Samsung Laptop v{i}"),
                "slug": format!("samsung-laptop-v{i}"),
                "price": "999.00",
                "description": "A laptop. ".repeat(20),
                "categories": [{"id": 7, "name": "Laptops"}],
            })
        })
        .collect();
    serde_json::to_string_pretty(&items).expect("json")
}

/// A text block as MCP SDKs write it: `type` first.
fn block(text: &str) -> String {
    format!(
        "{{\"type\":\"text\",\"text\":{},\"annotations\":null}}",
        serde_json::Value::from(text)
    )
}

#[test]
fn a_text_block_is_described_by_the_json_inside() {
    let text = block(&products());
    let s = syn(&text, 2000);
    assert_eq!(s.kind, Kind::Json);
    assert!(
        s.summary[0]
            .starts_with("MCP tool result as a JSON content block with 1 content block (text)"),
        "{:?}",
        s.summary
    );
    assert!(
        s.summary.contains(&"JSON array.".to_string()),
        "{:?}",
        s.summary
    );
    let stub = stub(&text, 2000);
    for needle in [
        "Identifying values of the items of [] (60 items;",
        "[0] id=150, name=\"Samsung Laptop v0\", slug=\"samsung-laptop-v0\"",
        "[9] id=159,",
    ] {
        assert!(stub.contains(needle), "{needle} missing in\n{stub}");
    }
    // Never the wrapper's own keys.
    assert!(!stub.contains("annotations"), "{stub}");
}

#[test]
fn a_list_of_blocks_joins_its_texts_and_names_its_images() {
    let text = serde_json::json!([
        {"type": "text", "text": "{\"a\": 1}"},
        {"type": "image", "data": "QUJD".repeat(100), "mimeType": "image/png"},
        {"type": "text", "text": "{\"b\": 2}"},
    ])
    .to_string();
    let s = syn(&text, 2000);
    // Two JSON texts one after the other: the first value and what follows.
    assert!(
        s.summary[0].contains("3 content blocks (2 text, 1 image)"),
        "{:?}",
        s.summary
    );
    assert_eq!(
        s.summary[1],
        "Block 2: image, image/png, 400 base64 characters (about 300 bytes), not shown."
    );
    assert!(!stub(&text, 2000).contains("QUJD"));
}

#[test]
fn a_result_with_structured_content_is_described_by_it() {
    let text = serde_json::json!({
        "content": [{"type": "text", "text": "Found 2 repositories."}],
        "structuredContent": {"items": [{"full_name": "a/b", "id": 1}, {"full_name": "c/d", "id": 2}]},
        "isError": false
    })
    .to_string();
    let s = syn(&text, 2000);
    assert_eq!(s.kind, Kind::Json);
    assert!(
        s.summary[0].contains("structuredContent"),
        "{:?}",
        s.summary
    );
    let stub = stub(&text, 2000);
    assert!(stub.contains("items[1] full_name=\"c/d\", id=2"), "{stub}");
}

#[test]
fn the_python_printed_result_is_unwrapped() {
    let inner = "[{\"number\": 4021, \"title\": \"Fix the cache\"}, {\"number\": 4022, \"title\": \"Docs\"}]";
    let text = format!(
        "meta=None content=[TextContent(type='text', text='{}', annotations=None, meta=None)] structuredContent=None isError=False",
        inner.replace('\'', "\\'")
    );
    let s = syn(&text, 2000);
    assert_eq!(s.kind, Kind::Json);
    assert!(
        s.summary[0].contains("the Python SDK's printed CallToolResult"),
        "{:?}",
        s.summary
    );
    assert!(stub(&text, 2000).contains("[1] number=4022, title=\"Docs\""));
}

#[test]
fn a_truncated_json_text_in_a_block_is_read_as_far_as_it_goes() {
    let whole = products();
    let cut = &whole[..whole.len() / 2];
    for text in [
        block(cut),
        format!("{}...[truncated]", &block(cut)[..block(cut).len() - 25]),
    ] {
        let s = syn(&text, 2000);
        assert_eq!(s.kind, Kind::Json, "{:?}", s.summary);
        let stub = stub(&text, 2000);
        assert!(stub.contains("ends unfinished"), "{stub}");
        assert!(
            stub.contains("[0] id=150, name=\"Samsung Laptop v0\""),
            "{stub}"
        );
        assert!(stub.contains("complete before the cut"), "{stub}");
    }
    // Bare, with the marker after the cut.
    let text = format!("{cut}...[truncated]");
    let s = syn(&text, 2000);
    assert_eq!(s.kind, Kind::Json);
    assert!(
        s.summary
            .iter()
            .any(|l| l.contains("then \"...[truncated]\"")),
        "{:?}",
        s.summary
    );
}

/// Playwright MCP's answer to `browser_snapshot`, inside its content block.
fn playwright() -> String {
    let mut tree = String::from("- generic [ref=e1]:\n  - navigation [ref=e2]:\n");
    for i in 0..30 {
        tree.push_str(&format!(
            "    - link \"Section {i}\" [ref=e{}] [cursor=pointer]:\n      - /url: /s/{i}\n",
            10 + i
        ));
    }
    tree.push_str("  - main [ref=e100]:\n    - heading \"Checkout\" [level=1] [ref=e101]\n    - textbox \"Card number\" [ref=e170]\n    - button \"Submit\" [ref=e171] [cursor=pointer]\n");
    block(&format!(
        "### Page state\n- Page URL: https://shop.example.com/checkout\n- Page Title: Checkout\n- Page Snapshot:\n```yaml\n{tree}```\n"
    ))
}

#[test]
fn an_accessibility_snapshot_keeps_its_interactive_elements() {
    let text = playwright();
    let s = syn(&text, 2000);
    assert_eq!(s.kind, Kind::Snapshot);
    let stub = stub(&text, 2000);
    for needle in [
        "kind: snapshot\n",
        "- Page URL: https://shop.example.com/checkout\n",
        "- Page Title: Checkout\n",
        "- roles: link 30, button 1, generic 1, heading 1, main 1, navigation 1, textbox 1\n",
        "- Interactive elements (role, name, ref), all 32 in document order:\n",
        "- link \"Section 0\" [ref=e10]\n",
        "- textbox \"Card number\" [ref=e170]\n- button \"Submit\" [ref=e171]\n",
    ] {
        assert!(stub.contains(needle), "{needle} missing in\n{stub}");
    }
}

#[test]
fn ordinary_yaml_and_logs_keep_their_kinds() {
    let yaml = "services:\n  web:\n    image: nginx  # [ref=e1]\n    ports:\n      - \"80:80\"\n  db:\n    image: postgres\n";
    assert_eq!(syn(yaml, 2000).kind, Kind::Yaml);
    let list = "- name: a\n  ref: e1\n- name: b\n  ref: e2\n- name: c\n  ref: e3\n";
    assert_eq!(syn(list, 2000).kind, Kind::Yaml);
    let log = "2026-01-01T00:00:00Z click [ref=e1] ok\n".repeat(50);
    assert_eq!(syn(&log, 2000).kind, Kind::Text);
}
