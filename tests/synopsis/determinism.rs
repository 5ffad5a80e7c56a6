//! Determinism: the same input gives the byte-identical stub, in this process
//! and from a second process (the `toolstub synopsis` binary).

use super::syn;
use std::io::Write;
use std::process::{Command, Stdio};
use toolstub::refs::sha256_hex;
use toolstub::stub::{render, RecallToolNames, StubHeader};
use toolstub::synopsis::Kind;

/// One input per kind, with enough structure for every section to show.
fn fixtures() -> Vec<(Kind, String)> {
    let mut json = String::from("{");
    for i in 0..40 {
        json.push_str(&format!(
            "\"k{i}\": {{\"v\": [{i}, \"s{i}\", null, true]}}, "
        ));
    }
    json.push_str("\"end\": 1}");
    let xml = format!(
        "<?xml version=\"1.0\"?>\n<r a=\"1\" xmlns:x=\"u\">{}</r>",
        (0..50)
            .map(|i| format!("<t{}/><u/>", i % 7))
            .collect::<String>()
    );
    vec![
        (Kind::Json, json),
        (
            Kind::Json,
            "{\"a\":1}\n{\"a\":2,\"b\":[1]}\n{\"a\":3}\n".to_string(),
        ),
        (
            Kind::Csv,
            "id,name,score\n1,Ada,9\n2,Lin,8\n3,\"Q, R\",7\n".to_string(),
        ),
        (Kind::Tsv, "id\tname\n1\tAda\n2\tLin\n".to_string()),
        (
            Kind::Yaml,
            "on:\n  push:\n    branches: [main]\njobs:\n  test:\n    runs-on: x\nname: ci\n"
                .to_string(),
        ),
        (Kind::Xml, xml),
        // An MCP content block around a JSON list: unwrapped, identifying
        // values kept.
        (
            Kind::Json,
            serde_json::json!({
                "type": "text",
                "text": format!(
                    "[{}]",
                    (0..40)
                        .map(|i| format!(
                            "{{\"id\": {i}, \"login\": \"user-{i}\", \"title\": \"Issue {i}\"}}"
                        ))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                "annotations": null
            })
            .to_string(),
        ),
        (
            Kind::Snapshot,
            format!(
                "### Page state\n- Page URL: https://x.test/\n- Page Title: X\n- Page Snapshot:\n```yaml\n- generic [ref=e1]:\n{}```\n",
                (0..120)
                    .map(|i| format!("  - link \"Item {i}\" [ref=e{}]:\n    - /url: /i/{i}\n  - button \"Buy {i}\" [ref=e{}]\n", 2 * i + 2, 2 * i + 3))
                    .collect::<String>()
            ),
        ),
        (
            Kind::Code,
            "use std::io;\n\npub fn main() {\n    let x = 1;\n}\n\nimpl Foo {\n}\n".to_string(),
        ),
        (
            Kind::Text,
            "# Title\n\nSOME SECTION\n\nwords and more words\n".repeat(30),
        ),
        (Kind::Unknown, "\u{0}\u{1}binary\u{2}".repeat(300)),
    ]
}

fn in_process_stub(text: &str) -> String {
    let sha = sha256_hex(text);
    render(
        &syn(text, 2000),
        &StubHeader {
            tool_name: Some("t"),
            original_chars: text.chars().count(),
            preview_budget: 2000,
            result_ref: None,
            sha256: Some(&sha),
            reason: None,
        },
        &RecallToolNames::default(),
    )
}

fn binary_stub(text: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolstub"))
        .args(["synopsis", "--tool", "t", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn toolstub");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "exit {:?}", out.status);
    let mut s = String::from_utf8(out.stdout).expect("utf-8 stdout");
    assert_eq!(
        s.pop(),
        Some('\n'),
        "the CLI ends the stub with one newline"
    );
    s
}

#[test]
fn fixtures_have_the_kinds_they_claim() {
    for (kind, text) in fixtures() {
        assert_eq!(syn(&text, 2000).kind, kind, "{text:.80}");
    }
}

#[test]
fn same_input_same_stub_in_process() {
    for (_, text) in fixtures() {
        let first = in_process_stub(&text);
        for _ in 0..3 {
            assert_eq!(in_process_stub(&text), first);
        }
    }
}

#[test]
fn same_input_same_stub_across_processes() {
    for (_, text) in fixtures() {
        let expected = in_process_stub(&text);
        assert_eq!(binary_stub(&text), expected);
        assert_eq!(binary_stub(&text), expected);
    }
}

#[test]
fn json_report_is_stable_and_ordered() {
    let run = || {
        let out = Command::new(env!("CARGO_BIN_EXE_toolstub"))
            .args(["synopsis", "--json", "Cargo.toml"])
            .output()
            .expect("run toolstub");
        assert!(out.status.success());
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let a = run();
    assert_eq!(a, run());
    let kind = a.find("\"kind\"").expect("kind");
    let synopsis = a.find("\"synopsis\"").expect("synopsis");
    let stub = a.rfind("\"stub\"").expect("stub");
    assert!(kind < synopsis && synopsis < stub, "{a}");
    let value: serde_json::Value = serde_json::from_str(&a).expect("valid JSON");
    for field in [
        "kind",
        "title",
        "summary",
        "structure",
        "notable_items",
        "sample",
    ] {
        assert!(value["synopsis"].get(field).is_some(), "{field}");
    }
}

#[test]
fn invalid_utf8_is_decoded_lossily() {
    let dir = std::env::temp_dir().join(format!("toolstub-lossy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("bytes.bin");
    std::fs::write(&path, b"name,score\nAda,9\xff\nLin,8\n").expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_toolstub"))
        .args(["synopsis"])
        .arg(&path)
        .output()
        .expect("run toolstub");
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    assert!(stdout.contains("kind: csv"), "{stdout}");
    assert!(stdout.contains('\u{fffd}'), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_file_is_exit_code_2_with_a_message() {
    let out = Command::new(env!("CARGO_BIN_EXE_toolstub"))
        .args(["synopsis", "/nonexistent/toolstub-test-file"])
        .output()
        .expect("run toolstub");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("/nonexistent/toolstub-test-file"),
        "{stderr}"
    );
}
