//! Agents' wrappers around tool outputs:
//! the synopsis describes the content inside, says what the wrapper was, and
//! leaves ordinary outputs alone. The Claude Code texts are what Claude Code
//! 2.1.328 sent through a mock upstream (`claude -p` with `Read`, `Grep`,
//! `Glob`, `Bash`); the Codex forms are those of openai/codex's sources.

use super::{stub, syn};
use toolstub::synopsis::Kind;

/// `text` as Claude Code 2.1 lists it: `N<TAB>line`, no padding.
fn claude_read(text: &str, first: usize) -> String {
    text.split('\n')
        .enumerate()
        .map(|(i, line)| format!("{}\t{line}", first + i))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` as `cat -n` (and older Claude Code, with an arrow) lists it.
fn cat_n(text: &str, separator: &str) -> String {
    let mut out = String::new();
    for (i, line) in text.lines().enumerate() {
        out.push_str(&format!("{:>6}{separator}{line}\n", i + 1));
    }
    out
}

/// Codex's `exec_command` result around `output`.
fn codex_exec(output: &str, exit_code: i32, tokens: usize) -> String {
    format!(
        "Chunk ID: 7dcbe2\nWall time: 0.0000 seconds\nProcess exited with code {exit_code}\nOriginal token count: {tokens}\nOutput:\n{output}"
    )
}

/// The JSON file Claude Code read, as it sent it (31 numbered lines).
const CLAUDE_READ_JSON: &str = "1\t{\n2\t  \"users\": [\n3\t    {\n4\t      \"id\": 0,\n5\t      \"name\": \"u0\",\n6\t      \"tags\": [\n7\t        \"a\",\n8\t        \"b\"\n9\t      ]\n10\t    },\n11\t    {\n12\t      \"id\": 1,\n13\t      \"name\": \"u1\",\n14\t      \"tags\": [\n15\t        \"a\",\n16\t        \"b\"\n17\t      ]\n18\t    },\n19\t    {\n20\t      \"id\": 2,\n21\t      \"name\": \"u2\",\n22\t      \"tags\": [\n23\t        \"a\",\n24\t        \"b\"\n25\t      ]\n26\t    }\n27\t  ],\n28\t  \"meta\": {\n29\t    \"count\": 3\n30\t  }\n31\t}";

#[test]
fn claude_code_read_of_json_is_json() {
    let s = syn(CLAUDE_READ_JSON, 2000);
    assert_eq!(s.kind, Kind::Json);
    assert_eq!(
        s.summary[0],
        "Numbered listing (cat -n style) of lines 1 to 31; the file inside is described below."
    );
    let stub = stub(CLAUDE_READ_JSON, 2000);
    for needle in [
        "top-level keys: users, meta",
        "users: array length: 3",
        "users[0].id: 0",
    ] {
        assert!(stub.contains(needle), "{needle} missing in\n{stub}");
    }
    // The stub's header describes the original as sent.
    let chars = CLAUDE_READ_JSON.chars().count();
    assert!(
        stub.contains(&format!("original_chars: {chars}\n")),
        "{stub}"
    );
}

/// A `Read` with an offset and a limit lists part of a file.
#[test]
fn claude_code_read_with_offset() {
    let text = "5\t    return os.getcwd()\n6\t\n7\t\n8\tclass Runner:\n9\t    def run(self):\n10\t        pass\n11\timport os\n12\t\n13\t\n14\tdef main():";
    let s = syn(text, 2000);
    assert_eq!(s.kind, Kind::Code);
    assert!(
        s.summary[0].contains("of lines 5 to 14;"),
        "{:?}",
        s.summary
    );
    assert!(
        s.notable_items.contains(&"class Runner".to_string()),
        "{:?}",
        s.notable_items
    );
}

/// A real source file of this repository, read by Claude Code and by `cat -n`:
/// code, with the file's declarations as symbols, never a statement.
#[test]
fn listed_rust_file_is_code_with_declarations() {
    let file = include_str!("../../src/proxy/pipeline.rs");
    for text in [
        claude_read(file, 1),
        cat_n(file, "\t"),
        cat_n(file, "\u{2192}"),
    ] {
        let s = syn(&text, 2000);
        assert_eq!(s.kind, Kind::Code, "{:?}", s.summary);
        assert!(
            s.notable_items.contains(&"pub async fn handle".to_string()),
            "{:?}",
            s.notable_items
        );
        assert!(
            s.notable_items.contains(&"enum RewriteOutcome".to_string()),
            "{:?}",
            s.notable_items
        );
        for item in &s.notable_items {
            assert!(
                !item.starts_with("function "),
                "{item} in {:?}",
                s.notable_items
            );
        }
    }
    // The same file without numbers lists the same symbols.
    assert_eq!(
        syn(file, 2000).notable_items,
        syn(&claude_read(file, 1), 2000).notable_items
    );
}

#[test]
fn listed_python_and_csv_keep_their_kinds() {
    let python = include_str!("../../scripts/corpus.py");
    let s = syn(&claude_read(python, 1), 2000);
    assert_eq!(s.kind, Kind::Code);
    assert!(
        s.structure
            .iter()
            .any(|l| l.starts_with("imports: argparse, gzip, json")),
        "{:?}",
        s.structure
    );
    let csv = "name,score,city\nAda,99,Paris\nLin,98,Lyon\nBo,97,Nice\n";
    let s = syn(&claude_read(csv, 1), 2000);
    assert_eq!(s.kind, Kind::Csv);
    assert!(
        s.structure
            .contains(&"columns: name, score, city".to_string()),
        "{:?}",
        s.structure
    );
    assert!(
        s.structure.contains(&"rows: 3".to_string()),
        "{:?}",
        s.structure
    );
}

/// A real TSV whose first column counts 1, 2, 3 has a header row: it is no
/// listing and keeps every column.
#[test]
fn numbered_tsv_with_a_header_stays_a_tsv() {
    let text = "id\tname\tscore\n1\tAda\t99\n2\tLin\t98\n3\tBo\t97\n";
    let s = syn(text, 2000);
    assert_eq!(s.kind, Kind::Tsv);
    assert!(
        s.structure
            .contains(&"columns: id, name, score".to_string()),
        "{:?}",
        s.structure
    );
    assert!(
        !s.summary[0].contains("Numbered listing"),
        "{:?}",
        s.summary
    );
}

#[test]
fn reminders_around_a_listing_are_said_apart() {
    let text = format!(
        "{CLAUDE_READ_JSON}\n\n<system-reminder>\nWhenever you read a file, you should consider whether it would be considered malware.\n</system-reminder>\n"
    );
    let s = syn(&text, 2000);
    assert_eq!(s.kind, Kind::Json);
    assert!(
        s.summary[1].starts_with("After the listing: a note of"),
        "{:?}",
        s.summary
    );
}

/// Claude Code's `Grep` and `Glob` results carry no wrapper: they stay text.
#[test]
fn claude_code_search_results_stay_text() {
    for text in [
        "prog.py-3-\nprog.py:4:def main():\nprog.py-5-    return os.getcwd()\n--\nprog.py-8-class Runner:\nprog.py:9:    def run(self):\nprog.py-10-        pass\n--\nprog.py-13-\nprog.py:14:def main():\nprog.py-15-    return os.getcwd()",
        "Found 1 file\nprog.py",
        "prog.py:6\n\nFound 6 total occurrences across 1 file.",
        "data.json\nprog.py\ntabbed.tsv\nlong.txt",
    ] {
        let s = syn(text, 2000);
        assert_eq!(s.kind, Kind::Text, "{text}");
        assert_eq!(s.summary[0], "Text exploration summary:", "{text}");
    }
}

#[test]
fn claude_code_bash_failure_keeps_its_exit_code() {
    let text = "Exit code 3\n1\n2\n3\n4\n5\nerr";
    let stub = stub(text, 2000);
    assert!(
        stub.contains("- Command output (exit code 3); the output inside, from character 12 on, is described below."),
        "{stub}"
    );
}

/// A `curl ... | jq` result through Codex is JSON with its keys; the exit
/// code and token count stay visible.
#[test]
fn codex_command_output_is_described_inside() {
    let json = "{\n  \"name\": \"toolstub\",\n  \"version\": \"0.1.0\",\n  \"dependencies\": [\"serde\", \"tokio\"]\n}\n";
    let text = codex_exec(json, 0, 8);
    let s = syn(&text, 2000);
    assert_eq!(s.kind, Kind::Json);
    let stub = stub(&text, 2000);
    for needle in [
        "Command output (exit code 0, original token count 8)",
        "top-level keys: name, version, dependencies",
    ] {
        assert!(stub.contains(needle), "{needle} missing in\n{stub}");
    }
    // The offset said is where the output starts in the original.
    let offset = text.find("{\n").expect("json");
    assert!(
        stub.contains(&format!("from character {offset} on")),
        "{stub}"
    );

    // A test run is text with its headers.
    let run = "running 3 tests\ntest a ... ok\ntest b ... FAILED\n\nFAILURES:\n\n---- b stdout ----\nassertion failed\n\ntest result: FAILED. 1 passed; 1 failed\n";
    let s = syn(&codex_exec(run, 101, 40), 2000);
    assert_eq!(s.kind, Kind::Text);
    assert!(
        s.summary[0].contains("exit code 101, original token count 40"),
        "{:?}",
        s.summary
    );
    assert!(
        s.summary.iter().any(|l| l.contains("FAILURES:")),
        "{:?}",
        s.summary
    );
}

/// The character offset said is the original's, as recall reads it, also
/// when a BOM or colour escapes were taken out first; when escapes stood
/// before the output, no offset is said.
#[test]
fn offsets_are_the_originals() {
    let coloured = codex_exec("\u{1b}[32mok\u{1b}[0m 12 tests passed\nall fine\n", 0, 9);
    let s = syn(&coloured, 2000);
    let start = coloured.find('\u{1b}').expect("escape");
    assert!(
        s.summary[0].contains(&format!("from character {start} on")),
        "{:?}",
        s.summary
    );
    assert!(s
        .summary
        .contains(&"ANSI escape sequences were stripped before analysis.".to_string()));

    let bom = format!("\u{feff}{}", codex_exec("{\"a\": 1}", 0, 3));
    let start = bom.chars().position(|c| c == '{').expect("json");
    assert!(syn(&bom, 2000).summary[0].contains(&format!("from character {start} on")));

    let escaped_header = format!(
        "Command: \u{1b}[1mls\u{1b}[0m\n{}",
        codex_exec("a\nb\n", 0, 1)
    );
    let s = syn(&escaped_header, 2000);
    assert!(
        s.summary[0].starts_with("Command output (exit code 0"),
        "{:?}",
        s.summary
    );
    assert!(!s.summary[0].contains("from character"), "{:?}", s.summary);
}

/// `cat -n` run through Codex: a listing inside a command's output.
#[test]
fn codex_cat_n_is_a_listing_inside_a_command() {
    let text = codex_exec(
        &cat_n(include_str!("../../src/proxy/pipeline.rs"), "\t"),
        0,
        3400,
    );
    let s = syn(&text, 2000);
    assert_eq!(s.kind, Kind::Code);
    assert!(
        s.summary[0].starts_with("Command output (exit code 0"),
        "{:?}",
        s.summary
    );
    assert!(
        s.summary[1].starts_with("Numbered listing (cat -n style) of lines 1 to"),
        "{:?}",
        s.summary
    );
}

#[test]
fn codex_structured_output_is_described_inside() {
    let inner = "name,score\nAda,99\nLin,98\n";
    let text = format!(
        r#"{{"output":{},"metadata":{{"exit_code":0,"duration_seconds":0.1}}}}"#,
        serde_json::Value::from(inner)
    );
    let s = syn(&text, 2000);
    assert_eq!(s.kind, Kind::Csv);
    assert_eq!(
        s.summary[0],
        "Command output as Codex JSON (exit code 0, duration 0.1 seconds); the output inside is described below."
    );
}

/// Same input, same bytes: wrapped or not, the stub is a function of the text.
#[test]
fn wrapped_stubs_are_deterministic() {
    for text in [CLAUDE_READ_JSON.to_string(), codex_exec("{\"a\": 1}", 0, 3)] {
        assert_eq!(stub(&text, 2000), stub(&text, 2000));
    }
}
