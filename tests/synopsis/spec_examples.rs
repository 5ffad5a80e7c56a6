//! Every worked example the synopsis rules were designed against, each as
//! its own test, plus the stub layout README.md shows under "Point your agent
//! at it".

use super::{stub, syn};
use toolstub::refs::{result_ref, sha256_hex};
use toolstub::stub::{render, RecallToolNames, StubHeader};
use toolstub::synopsis::Kind;

#[test]
fn json_object_with_users_and_meta() {
    let text = r#"{"users":[{"id":1,"name":"Ada"},{"id":2,"name":"Lin"}],"meta":{"count":2}}"#;
    assert_eq!(syn(text, 2000).kind, Kind::Json);
    let s = stub(text, 2000);
    for needle in ["top-level keys", "users", "array length: 2"] {
        assert!(s.contains(needle), "{needle} missing in\n{s}");
    }
}

#[test]
fn csv_table() {
    let text = "name,score\nAda,99\nLin,98\n";
    assert_eq!(syn(text, 2000).kind, Kind::Csv);
    let s = stub(text, 2000);
    assert!(s.contains("columns: name, score"), "{s}");
    assert!(s.contains("rows: 2"), "{s}");
}

#[test]
fn tsv_table() {
    let text = "name\tscore\nAda\t99\nLin\t98\n";
    assert_eq!(syn(text, 2000).kind, Kind::Tsv);
    let s = stub(text, 2000);
    assert!(s.contains("columns: name, score"), "{s}");
    assert!(s.contains("rows: 2"), "{s}");
}

#[test]
fn yaml_services() {
    let text = "services:\n  api:\n    image: ov:latest\n    replicas: 2\n";
    assert_eq!(syn(text, 2000).kind, Kind::Yaml);
    let s = stub(text, 2000);
    assert!(s.contains("top-level keys"), "{s}");
    assert!(s.contains("services"), "{s}");
}

#[test]
fn xml_root_with_items() {
    let text = "<root><item id='1'>A</item><item id='2'>B</item></root>";
    assert_eq!(syn(text, 2000).kind, Kind::Xml);
    let s = stub(text, 2000);
    assert!(s.contains("root: root"), "{s}");
    assert!(s.contains("item: 2"), "{s}");
}

#[test]
fn python_code() {
    let text = "import os\n\nclass Runner:\n    pass\n\ndef main():\n    return os.getcwd()\n";
    assert_eq!(syn(text, 2000).kind, Kind::Code);
    let s = stub(text, 2000);
    for needle in ["imports: os", "class Runner", "def main"] {
        assert!(s.contains(needle), "{needle} missing in\n{s}");
    }
}

#[test]
fn log_is_text_with_error_in_excerpt() {
    let text = "INFO start\nWARN retry once\nERROR failed to open file\nINFO done\n";
    let synopsis = syn(text, 2000);
    assert_eq!(synopsis.kind, Kind::Text);
    assert!(stub(text, 2000).contains("ERROR failed"));
}

#[test]
fn text_section_headers() {
    let text = "# Heading\n\nSYSTEM STATUS\n\nThis is a paragraph.\n\nThis is another paragraph.";
    assert_eq!(syn(text, 2000).kind, Kind::Text);
    assert!(stub(text, 2000).contains("Detected section headers: # Heading | SYSTEM STATUS"));
}

#[test]
fn text_excerpts_are_500_characters() {
    let text = format!(
        "{}\n\nmiddle section\n\n{}",
        "A".repeat(600),
        "Z".repeat(600)
    );
    let synopsis = syn(&text, 10);
    assert_eq!(synopsis.kind, Kind::Text);
    let s = stub(&text, 10);
    let a500 = format!("Opening excerpt: {}.", "A".repeat(500));
    let z500 = format!("Closing excerpt: {}.", "Z".repeat(500));
    assert!(s.contains(&a500), "{s}");
    assert!(s.contains(&z500), "{s}");
    assert!(!s.contains(&"A".repeat(501)));
    assert!(!s.contains(&"Z".repeat(501)));
    assert!(!s.contains("middle section"));
    assert!(synopsis.sample.is_empty());
}

#[test]
fn json_keys_are_capped_at_ten() {
    let members: Vec<String> = (0..15).map(|i| format!("\"key{i}\": {i}")).collect();
    let text = format!("{{{}}}", members.join(", "));
    let synopsis = syn(&text, 1);
    assert_eq!(synopsis.kind, Kind::Json);
    let s = stub(&text, 1);
    for i in 0..10 {
        assert!(s.contains(&format!("key{i}")), "key{i} missing");
    }
    assert!(!s.contains("key10"), "{s}");
    assert!(synopsis.sample.is_empty());
    assert!(!s.contains("Sample:"));
}

#[test]
fn code_imports_and_symbols_are_capped() {
    let mut text = String::new();
    for i in 0..15 {
        text.push_str(&format!("import module_{i}\n"));
    }
    for i in 0..30 {
        text.push_str(&format!("\ndef function_{i}():\n    return {i}\n"));
    }
    let synopsis = syn(&text, 1);
    assert_eq!(synopsis.kind, Kind::Code);
    let s = stub(&text, 1);
    for i in 0..12 {
        assert!(s.contains(&format!("module_{i},")) || s.contains(&format!("module_{i}\n")));
    }
    for i in 12..15 {
        assert!(!s.contains(&format!("module_{i}")), "module_{i} in\n{s}");
    }
    for i in 0..24 {
        assert!(s.contains(&format!("- def function_{i}\n")), "function_{i}");
    }
    for i in 24..30 {
        assert!(
            !s.contains(&format!("function_{i}")),
            "function_{i} in\n{s}"
        );
    }
    assert!(synopsis.sample.is_empty());
}

#[test]
fn binary_is_unknown_with_sample() {
    let text = format!("\u{0}\u{1}\u{2}{}", "x".repeat(80));
    let synopsis = syn(&text, 30);
    assert_eq!(synopsis.kind, Kind::Unknown);
    assert!(!synopsis.sample.is_empty());
    assert!(stub(&text, 30).contains("--- BEGIN SAMPLE HEAD ---"));
}

#[test]
fn empty_output_is_unknown() {
    let synopsis = syn("", 2000);
    assert_eq!(synopsis.kind, Kind::Unknown);
    assert_eq!(synopsis.summary, ["Output is empty."]);
}

/// Header order, sections in order, Explore only with a ref,
/// sha256 shown as 16 hex digits, no trailing newline.
#[test]
fn stub_layout_matches_section_5() {
    let text = r#"{"users":[{"id":1,"name":"Ada"},{"id":2,"name":"Lin"}],"meta":{"count":2}}"#;
    let sha = sha256_hex(text);
    let r = result_ref(Some("call_abc123"), &sha);
    let s = render(
        &syn(text, 2000),
        &StubHeader {
            tool_name: Some("read_file"),
            original_chars: text.chars().count(),
            preview_budget: 2000,
            result_ref: Some(&r),
            sha256: Some(&sha),
            reason: Some("single_threshold"),
        },
        &RecallToolNames::default(),
    );
    let expected = format!(
        "[toolstub: tool output externalized]\n\
         tool_name: read_file\n\
         kind: json\n\
         original_chars: 74\n\
         preview_chars: 74\n\
         ref: {r}\n\
         sha256: {}\n\
         reason: single_threshold\n\
         \n\
         Synopsis:\n\
         - JSON object.\n\
         - top-level keys: users, meta\n\
         \n\
         Structure:\n\
         - shape: object(keys=2: users, meta)\n\
         - users: array length: 2\n\
         - meta: object keys: count\n\
         \n\
         Notable items:\n\
         - users[0].id: 1\n\
         - users[0].name: \"Ada\"\n\
         - meta.count: 2\n\
         - Identifying values of the items of users[] (2 items, all shown):\n\
         - users[0] id=1, name=\"Ada\"\n\
         - users[1] id=2, name=\"Lin\"\n\
         \n\
         Explore:\n\
         - Use tool_result_search with ref={r} to find relevant raw snippets.\n\
         - Use tool_result_read with ref={r} and offset/limit to read the raw output.\n\
         - Use tool_result_list to see the other externalized outputs of this session.",
        &sha[..16]
    );
    assert_eq!(s, expected);
    assert!(r.starts_with("tr_call_abc123_") && r.len() == "tr_call_abc123_".len() + 16);
}

#[test]
fn stub_without_ref_has_no_explore() {
    let s = render(
        &syn("a\nb\n", 2000),
        &StubHeader {
            original_chars: 4,
            preview_budget: 2000,
            ..StubHeader::default()
        },
        &RecallToolNames::default(),
    );
    assert!(s.starts_with("[toolstub: tool output externalized]\ntool_name: tool\nkind: text\n"));
    assert!(!s.contains("ref:") && !s.contains("Explore") && !s.contains("sha256"));
    assert!(!s.ends_with('\n'));
}
