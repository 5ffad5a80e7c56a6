//! Property tests: no input panics; with default settings every stub stays
//! within 5,000 characters; every cap of SPEC section 4 holds.

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
            assert!(s.notable_items.len() <= 6, "{:?}", s.notable_items);
            assert!(s.structure.len() <= 12);
        }
        Kind::Yaml => assert!(s.structure.len() <= 30),
        Kind::Xml => assert!(s.structure.len() <= 32),
        Kind::Code => {
            assert!(s.notable_items.len() <= 24);
            assert!(s.structure.len() <= 2);
        }
        Kind::Text => {
            let headers = &s.summary[4];
            if headers != "Detected section headers: none detected." {
                assert!(headers.split(" | ").count() <= 18, "{headers:.200}");
            }
            for excerpt in &s.summary[5..7] {
                assert!(excerpt.chars().count() <= "Opening excerpt: ".len() + 500 + 1);
            }
        }
        Kind::Csv | Kind::Tsv => assert_eq!(s.structure.len(), 3),
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
    assert!(n <= STUB_CAP, "stub of {n} chars for kind {}", s.kind);
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

    #[test]
    fn synopsis_is_a_function_of_its_input(text in soup()) {
        let hints = Hints { mime: None, preview_chars: DEFAULT_PREVIEW };
        prop_assert_eq!(synopsize(&text, hints), synopsize(&text, hints));
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
}
