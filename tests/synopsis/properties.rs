//! Property tests: no input panics; with default settings every stub stays
//! within 5,000 characters; every cap of the synopsis holds.

use proptest::prelude::*;
use toolstub::refs::{result_ref, sha256_hex};
use toolstub::stub::{render, RecallToolNames, StubHeader};
use toolstub::synopsis::{synopsize, Hints, Kind, Synopsis, LINE_CAP};

const DEFAULT_PREVIEW: usize = 2000;
const STUB_CAP: usize = 5000;

/// The longest stub header the proxy can produce with default settings: a
/// 96-character safe call id, a 64-character tool name, a long reason.
fn worst_case_stub(text: &str, synopsis: &Synopsis) -> String {
    let sha = sha256_hex(text);
    let r = result_ref(Some(&"c".repeat(300)), &sha);
    render(
        synopsis,
        &StubHeader {
            tool_name: Some(&"n".repeat(300)),
            original_chars: text.chars().count(),
            preview_budget: DEFAULT_PREVIEW,
            result_ref: Some(&r),
            sha256: Some(&sha),
            reason: Some("single_threshold:externalization_failed"),
        },
        &RecallToolNames::default(),
    )
}

fn check_caps(text: &str, s: &Synopsis, preview: usize) {
    let lines = s.summary.iter().chain(&s.structure).chain(&s.notable_items);
    for line in lines {
        assert!(
            !line.contains('\n') && !line.contains('\r'),
            "raw line break in {line:?}"
        );
        let n = line.chars().count();
        let is_text_summary = s.kind == Kind::Text && s.summary.contains(line);
        let cap = if is_text_summary { 2500 } else { LINE_CAP };
        assert!(n <= cap, "{n} > {cap}: {line:.120}");
    }
    if s.kind != Kind::Unknown {
        assert!(s.sample.is_empty(), "only unknown has a sample");
    } else {
        let body: usize = s
            .sample
            .split('\n')
            .filter(|l| !l.starts_with("--- BEGIN SAMPLE") && !l.starts_with("--- END SAMPLE"))
            .map(|l| l.chars().count())
            .sum();
        assert!(body <= preview, "sample {body} > budget {preview}");
    }
    match s.kind {
        Kind::Json => {
            // Examples (at most 6 lines), then the identifying values of
            // list items: at most 4 lists, all their lines (headers, bullets
            // and line breaks counted) within 1,500 characters.
            let is_header = |l: &String| l.starts_with("Identifying values of the items of ");
            let first = s
                .notable_items
                .iter()
                .position(is_header)
                .unwrap_or(s.notable_items.len());
            let (examples, ids) = s.notable_items.split_at(first);
            let trailing = |l: &String| l.starts_with("trailing_chars_after_first_json_value");
            assert!(
                examples.len() + ids.iter().filter(|l| trailing(l)).count() <= 6,
                "{:?}",
                s.notable_items
            );
            assert!(ids.iter().filter(|l| is_header(l)).count() <= 4, "{ids:?}");
            let id_chars: usize = ids
                .iter()
                .filter(|l| !trailing(l))
                .map(|l| l.chars().count() + 3)
                .sum();
            assert!(id_chars <= 1500, "{id_chars}: {ids:?}");
            assert!(s.structure.len() <= 12);
        }
        Kind::Yaml => assert!(s.structure.len() <= 30),
        Kind::Xml => assert!(s.structure.len() <= 32),
        Kind::Code => {
            assert!(s.notable_items.len() <= 24);
            assert!(s.structure.len() <= 2);
        }
        Kind::Text => {
            // A wrapper's lines (a numbered listing, a command's exit code)
            // come before the text kind's own.
            let own = s
                .summary
                .iter()
                .position(|l| l == "Text exploration summary:")
                .expect("the text summary");
            let wrapper: usize = s.summary[..own].iter().map(|l| l.chars().count()).sum();
            assert!(wrapper <= 600, "{:?}", &s.summary[..own]);
            let headers = &s.summary[own + 4];
            if headers != "Detected section headers: none detected." {
                assert!(headers.split(" | ").count() <= 18, "{headers:.200}");
            }
            for excerpt in &s.summary[own + 5..own + 7] {
                assert!(excerpt.chars().count() <= "Opening excerpt: ".len() + 500 + 1);
            }
        }
        Kind::Csv | Kind::Tsv => assert_eq!(s.structure.len(), 3),
        Kind::Snapshot => {
            assert!(s.structure.len() <= 3, "{:?}", s.structure);
            let elements: usize = s.notable_items[1..].iter().map(|l| l.chars().count()).sum();
            assert!(elements <= 2000, "{elements}: {:?}", s.notable_items);
        }
        Kind::Unknown => {}
    }
    let _ = text;
}

fn check(text: &str) {
    let s = synopsize(
        text,
        Hints {
            mime: None,
            preview_chars: DEFAULT_PREVIEW,
        },
    );
    check_caps(text, &s, DEFAULT_PREVIEW);
    let stub = worst_case_stub(text, &s);
    let n = stub.chars().count();
    assert!(
        n <= STUB_CAP,
        "stub of {n} chars for kind {}:\n{stub}",
        s.kind
    );
}

/// Fragments that steer the generator into every parser's corner cases.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("{".to_string()),
        Just("}".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just("\"".to_string()),
        Just(",".to_string()),
        Just(":".to_string()),
        Just("\t".to_string()),
        Just("\n".to_string()),
        Just("\r\n".to_string()),
        Just("  ".to_string()),
        Just("<a>".to_string()),
        Just("</a>".to_string()),
        Just("<b x='1'/>".to_string()),
        Just("<?xml version='1.0'?>".to_string()),
        Just("key:".to_string()),
        Just("- ".to_string()),
        Just("---".to_string()),
        Just("def f():".to_string()),
        Just("import os".to_string()),
        Just("# Head".to_string()),
        Just("TITLE LINE".to_string()),
        Just("\u{1b}[31m".to_string()),
        Just("\u{0}".to_string()),
        Just("\u{feff}".to_string()),
        Just("é😀".to_string()),
        Just("1.5e3".to_string()),
        Just("null".to_string()),
        "[a-zA-Z0-9 _-]{0,12}",
        "\\PC{0,8}",
    ]
}

fn soup() -> impl Strategy<Value = String> {
    prop::collection::vec(fragment(), 0..200).prop_map(|v| v.concat())
}

/// Long keys, cells, tags and names with line breaks: hostile to every cap.
fn hostile() -> impl Strategy<Value = String> {
    let long = "[a-zA-Z][a-zA-Z0-9 \\n_]{0,400}";
    prop_oneof![
        prop::collection::vec((long, long), 1..40).prop_map(|kv| {
            let body: Vec<String> = kv
                .iter()
                .map(|(k, v)| format!("{}: {}", serde_json::json!(k), serde_json::json!(v)))
                .collect();
            format!("{{{}}}", body.join(", "))
        }),
        prop::collection::vec(prop::collection::vec("[a-zA-Z0-9 ]{0,300}", 3), 2..30).prop_map(
            |rows| rows
                .iter()
                .map(|r| r.join(","))
                .collect::<Vec<_>>()
                .join("\n")
        ),
        prop::collection::vec("[a-z][a-z0-9]{0,300}", 1..80).prop_map(|tags| {
            let children: String = tags.iter().map(|t| format!("<{t}/>")).collect();
            format!("<root a='1' b='2'>{children}</root>")
        }),
        prop::collection::vec("[A-Z][A-Z ]{6,400}", 1..60).prop_map(|t| t.join("\n\n")),
        prop::collection::vec("[a-z_][a-z0-9_]{0,400}", 1..60).prop_map(|names| {
            let mut s = String::from("import os\nimport sys\n");
            for n in names {
                s.push_str(&format!("def {n}():\n    pass\nimport {n}\n"));
            }
            s
        }),
        // Lists whose items are full of identifying values, at every depth
        // the identifying values look.
        prop::collection::vec(
            (
                "[a-zA-Z][a-zA-Z0-9_]{0,120}",
                prop::collection::vec(("[a-zA-Z0-9_-]{1,250}", "[a-zA-Z0-9 ]{1,250}"), 1..40)
            ),
            1..14
        )
        .prop_map(|lists| {
            let body: Vec<String> = lists
                .iter()
                .map(|(k, items)| {
                    let items: Vec<serde_json::Value> = items
                        .iter()
                        .map(|(id, name)| {
                            serde_json::json!({
                                "id": id, "sha": id, "login": id, "title": name,
                                "user": {"login": id, "displayName": name},
                                "labels": [{"name": name, "node_id": id}],
                                "node": {"id": id, "html_url": id}
                            })
                        })
                        .collect();
                    format!(
                        "{}: {}",
                        serde_json::json!(k),
                        serde_json::Value::from(items)
                    )
                })
                .collect();
            format!("{{{}}}", body.join(", "))
        }),
        prop::collection::vec(("[a-z][a-z0-9_]{0,300}", "[a-z0-9 ]{0,300}"), 2..60).prop_map(
            |kv| {
                let mut s = String::from("---\n");
                for (i, (k, v)) in kv.iter().enumerate() {
                    s.push_str(&format!("{k}{i}: {v}\n"));
                }
                s
            }
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn any_string_is_safe(text in "\\PC{0,3000}") {
        check(&text);
    }

    #[test]
    fn any_bytes_decoded_lossily_are_safe(bytes in prop::collection::vec(any::<u8>(), 0..4000)) {
        check(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn fragment_soup_is_safe(text in soup()) {
        check(&text);
    }

    #[test]
    fn hostile_structures_respect_every_cap(text in hostile()) {
        check(&text);
    }

    #[test]
    fn unknown_sample_fits_any_budget(
        bytes in prop::collection::vec(0u8..32, 1..3000),
        preview in 0usize..3000,
    ) {
        let text = String::from_utf8_lossy(&bytes);
        let s = synopsize(&text, Hints { mime: None, preview_chars: preview });
        check_caps(&text, &s, preview);
    }

    /// Any text inside any agent wrapper keeps every cap: the wrapper's
    /// lines come on top of the content's own.
    #[test]
    fn wrapped_outputs_respect_every_cap(text in prop_oneof![soup(), hostile(), snapshot()], form in 0usize..10) {
        check(&wrap(form, &text));
    }

    #[test]
    fn snapshots_respect_every_cap(text in snapshot()) {
        check(&text);
    }

    #[test]
    fn synopsis_is_a_function_of_its_input(text in soup()) {
        let hints = Hints { mime: None, preview_chars: DEFAULT_PREVIEW };
        prop_assert_eq!(synopsize(&text, hints), synopsize(&text, hints));
    }
}

/// Accessibility trees with long names, odd refs, quoted keys, states and
/// stray lines, with and without Playwright's Markdown around them.
fn snapshot() -> impl Strategy<Value = String> {
    let line = (
        0usize..12,
        prop_oneof![
            Just("button"),
            Just("link"),
            Just("textbox"),
            Just("generic"),
            Just("heading"),
            Just("checkbox"),
            Just("/url"),
            Just("text")
        ],
        "\\PC{0,300}",
        "[a-z0-9]{0,20}",
        0usize..6,
    )
        .prop_map(|(indent, role, name, r, form)| {
            let pad = "  ".repeat(indent);
            let name = serde_json::Value::from(name).to_string();
            match form {
                0 => format!("{pad}- {role} {name} [ref={r}]"),
                1 => format!("{pad}- {role} {name} [checked] [ref=e{r}] [cursor=pointer]:"),
                2 => format!("{pad}- '{role} {name} [ref=e{r}]':"),
                3 => format!("{pad}- {role} [ref=e{r}]: {name}"),
                4 => format!("{pad}- {role}: {name}"),
                _ => format!("{pad}{name}"),
            }
        });
    (prop::collection::vec(line, 1..200), any::<bool>(), "\\PC{0,300}").prop_map(
        |(lines, framed, title)| {
            let tree = lines.join("\n");
            if framed {
                format!("### Page state\n- Page URL: {title}\n- Page Title: {title}\n- Page Snapshot (Span 1 of 9):\n```yaml\n{tree}\n```\n")
            } else {
                tree
            }
        },
    )
}

/// `text` inside one of the agent wrappers the synopsis takes off, with the
/// longest notes they allow (a reminder before and after a listing, a long
/// command, Codex's truncation header).
fn wrap(form: usize, text: &str) -> String {
    let note = format!("<system-reminder>{}</system-reminder>", "n ".repeat(3000));
    match form {
        0 => {
            let listed: Vec<String> = text
                .split('\n')
                .enumerate()
                .map(|(i, l)| format!("{}\t{l}", i + 1))
                .collect();
            format!("{note}\n{}\n\n{note}", listed.join("\n"))
        }
        1 => format!(
            "Command: {}\nChunk ID: 7dcbe2\nWall time: 0.0000 seconds\nProcess exited with code -12345678901234567890\nOriginal token count: 12345678901234567890\nOutput:\nTotal output lines: 12345678901234567890\n\n{text}",
            "c".repeat(5000)
        ),
        2 => format!("Exit code: 1\nWall time: 0.1 seconds\nTotal output lines: 99999\nOutput:\n{text}"),
        3 => format!(
            r#"{{"output":{},"metadata":{{"exit_code":1,"duration_seconds":0.1}}}}"#,
            serde_json::Value::from(format!("Total output lines: 9\n\n{text}"))
        ),
        // MCP content blocks: one, a list with an image, a whole result, the
        // Python SDK's printed form, and a block cut short.
        5 => serde_json::json!({"type": "text", "text": text, "annotations": null}).to_string(),
        6 => serde_json::json!([
            {"type": "text", "text": text},
            {"type": "image", "data": "QUJD".repeat(2000), "mimeType": "image/png"},
            {"type": "text", "text": text}
        ])
        .to_string(),
        7 => serde_json::json!({
            "content": [{"type": "text", "text": text}],
            "structuredContent": serde_json::from_str::<serde_json::Value>(text)
                .unwrap_or_else(|_| serde_json::Value::from(text)),
            "isError": false
        })
        .to_string(),
        8 => format!(
            "meta=None content=[TextContent(type='text', text={}, annotations=None)] isError=False",
            serde_json::Value::from(text)
        ),
        9 => {
            let block = serde_json::json!({"type": "text", "text": text}).to_string();
            let cut: String = block.chars().take(block.chars().count() * 2 / 3).collect();
            format!("{cut}...[truncated]")
        }
        _ => format!("Exit code 1\n{text}"),
    }
}

/// The worst cases found by reasoning rather than by chance.
#[test]
fn worst_case_texts_stay_under_the_stub_cap() {
    let headers: String = (0..40)
        .map(|i| format!("# {}{i}\n", "H".repeat(300)))
        .collect();
    check(&headers);
    let json_keys: String = format!(
        "{{{}}}",
        (0..20)
            .map(|i| format!(
                "\"{}{i}\": {{\"{}\": [1]}}",
                "k\n".repeat(200),
                "x".repeat(500)
            ))
            .collect::<Vec<_>>()
            .join(",")
    );
    check(&json_keys);
    let mut nested = String::new();
    for _ in 0..200 {
        nested.push('[');
    }
    check(&nested);
    check(&"\u{1b}[31m".repeat(5000));
    check(&"\u{0}".repeat(10_000));
    // Lists whose items are all identifying values, under long keys, at
    // every depth the values are looked for.
    let long = "0aA_-".repeat(40);
    let item = format!(
        "{{\"id\":\"{long}\",\"sha\":\"{long}\",\"title\":\"{}\",\"labels\":[{{\"name\":\"{}\",\"node_id\":\"{long}\"}}],\"node\":{{\"id\":\"{long}\"}}}}",
        "T ".repeat(100),
        "N ".repeat(100)
    );
    let id_lists = format!(
        "{{{}}}",
        (0..12)
            .map(|i| format!(
                "\"{}{i}\": [{}]",
                "k_".repeat(100),
                vec![item.as_str(); 60].join(",")
            ))
            .collect::<Vec<_>>()
            .join(",")
    );
    check(&id_lists);
    // An accessibility tree with the longest page lines, sections, roles,
    // headings and element lines.
    let mut tree = format!(
        "### {}\n### {}\n- Page URL: {}\n- Page Title: {}\n- Page Snapshot ({}):\n```yaml\n",
        "S".repeat(300),
        "Z".repeat(300),
        "u".repeat(500),
        "t".repeat(500),
        "p".repeat(500)
    );
    for i in 0..400 {
        let role = ["button", "link", "textbox", "heading", "menuitemcheckbox"][i % 5];
        tree.push_str(&format!(
            "{}- {role}{} \"{}\" [checked=mixed] [disabled] [expanded] [selected] [pressed=mixed] [ref=e{i}0000000000]:\n",
            "  ".repeat(i % 30),
            if i % 5 == 3 { format!("x{}", "q".repeat(i % 50)) } else { String::new() },
            "\\\"".repeat(80)
        ));
    }
    tree.push_str("```\n");
    check(&tree);
    // The same inside every wrapper, a listing inside a command's output too.
    for text in [&headers, &json_keys, &nested, &id_lists, &tree] {
        for form in 0..10 {
            check(&wrap(form, text));
            check(&wrap(1, &wrap(form, text)));
        }
    }
}
