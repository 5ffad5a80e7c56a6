//! Kind accuracy on real tool outputs.
//!
//! `scripts/corpus.py` builds, at test time, a labelled set of real outputs of
//! real commands and real files on this machine (nothing third-party is kept
//! in the repository). This test detects the kind of every sample and fails
//! when there are fewer than 150 samples, when fewer than 95% are right, when
//! any sample of a class once misjudged is wrong again, or when a
//! code sample's symbols disagree with what universal-ctags finds declared
//! in it. It prints the accuracy per expected kind, the skipped categories
//! and every miss, so a regression is visible at once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use toolstub::synopsis::{synopsize, Hints, Kind};

const MIN_SAMPLES: usize = 150;
const MIN_ACCURACY: f64 = 0.95;

#[derive(serde::Deserialize)]
struct Manifest {
    samples: Vec<Sample>,
    #[serde(default)]
    skipped: Vec<Skipped>,
}

#[derive(serde::Deserialize)]
struct Sample {
    file: String,
    expected: String,
    category: String,
    source: String,
    /// What universal-ctags finds declared in the sample (names), when the
    /// corpus ran it for the sample's language.
    #[serde(default)]
    declared: Option<Vec<String>>,
    /// The shell functions ctags finds, in line order.
    #[serde(default)]
    functions: Vec<String>,
}

#[derive(serde::Deserialize)]
struct Skipped {
    category: String,
    reason: String,
}

/// A fresh directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir =
            std::env::temp_dir().join(format!("toolstub-accuracy-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the corpus directory");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn build_corpus(out: &Path) -> Manifest {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/corpus.py");
    let status = Command::new("python3")
        .arg(&script)
        .arg("--out")
        .arg(out)
        .status()
        .unwrap_or_else(|e| {
            panic!("the accuracy test needs python3 on PATH to run {script:?}: {e}")
        });
    assert!(status.success(), "{script:?} failed: {status}");
    let manifest = std::fs::read(out.join("manifest.json")).expect("read manifest.json");
    serde_json::from_slice(&manifest).expect("parse manifest.json")
}

#[test]
fn kind_accuracy_on_real_tool_outputs() {
    let dir = TempDir::new();
    let manifest = build_corpus(&dir.0);

    // expected kind -> (right, total)
    let mut per_kind: BTreeMap<Kind, (usize, usize)> = BTreeMap::new();
    let mut misses = Vec::new();
    let mut symbols = SymbolCheck::default();
    for sample in &manifest.samples {
        let expected = Kind::parse(&sample.expected)
            .unwrap_or_else(|| panic!("bad label {:?} for {}", sample.expected, sample.file));
        let bytes = std::fs::read(dir.0.join(&sample.file)).expect("read a sample");
        let text = String::from_utf8_lossy(&bytes);
        let synopsis = synopsize(
            &text,
            Hints {
                mime: None,
                preview_chars: 2000,
            },
        );
        let got = synopsis.kind;
        if got == Kind::Code {
            symbols.check(sample, &synopsis.notable_items);
        }
        let entry = per_kind.entry(expected).or_default();
        entry.1 += 1;
        if got == expected {
            entry.0 += 1;
        } else {
            misses.push((sample, got));
        }
    }

    let total = manifest.samples.len();
    let right = total - misses.len();
    let accuracy = if total == 0 {
        0.0
    } else {
        right as f64 / total as f64
    };
    println!("Kind accuracy on {total} real tool outputs:");
    for (kind, (ok, n)) in &per_kind {
        println!(
            "  {:<8} {ok:>4}/{n:<4} {:6.2}%",
            kind.as_str(),
            100.0 * *ok as f64 / *n as f64
        );
    }
    println!("  overall  {right:>4}/{total:<4} {:6.2}%", 100.0 * accuracy);
    if manifest.skipped.is_empty() {
        println!("Skipped: none");
    } else {
        println!("Skipped on this machine:");
        for s in &manifest.skipped {
            println!("  {}: {}", s.category, s.reason);
        }
    }
    if misses.is_empty() {
        println!("Misses: none");
    } else {
        println!("Misses ({}):", misses.len());
        for (s, got) in &misses {
            println!(
                "  {} [{}] expected {} got {} <- {}",
                s.file, s.category, s.expected, got, s.source
            );
        }
    }
    symbols.report();

    let class_misses: Vec<_> = misses
        .iter()
        .filter(|(s, _)| CLASS_CATEGORIES.contains(&s.category.as_str()))
        .collect();
    assert!(
        class_misses.is_empty(),
        "{} samples of the classes once misjudged are misjudged again (see Misses)",
        class_misses.len()
    );
    for category in CLASS_CATEGORIES {
        assert!(
            manifest.samples.iter().any(|s| s.category == *category)
                || manifest.skipped.iter().any(|s| s.category == *category),
            "no sample of {category} and no reason given"
        );
    }
    assert!(
        symbols.files > 0
            || manifest
                .skipped
                .iter()
                .any(|s| s.category == "declarations"),
        "no code sample was checked against ctags's declarations"
    );
    assert!(
        symbols.not_declared.is_empty(),
        "{} function symbols are not declarations (see above)",
        symbols.not_declared.len()
    );
    assert!(
        symbols.missed_functions.is_empty(),
        "{} shell functions are missing from the symbols (see above)",
        symbols.missed_functions.len()
    );
    assert!(
        total >= MIN_SAMPLES,
        "only {total} samples (at least {MIN_SAMPLES} needed); see the skipped categories above"
    );
    assert!(
        accuracy >= MIN_ACCURACY,
        "kind accuracy {:.2}% is below {:.0}%",
        100.0 * accuracy,
        100.0 * MIN_ACCURACY
    );
}

/// Categories of the classes once misjudged (short Python, shell
/// functions, prose with a comma a line, pydoc, READMEs quoting code,
/// traces): every sample of them must be right, not only 95%.
const CLASS_CATEGORIES: &[&str] = &[
    "code-python-short",
    "code-python-import-list",
    "code-shell-functions",
    "prose-commas",
    "pydoc",
    "readme-code",
    "traces",
];

/// The code kind's symbols against universal-ctags's declarations: every
/// `function NAME` listed must be something ctags finds declared (a
/// statement such as `match plan(app, x) {` is not), and every shell
/// function ctags finds must be listed while the list has room.
#[derive(Default)]
struct SymbolCheck {
    files: usize,
    functions_checked: usize,
    shell_functions: usize,
    not_declared: Vec<String>,
    missed_functions: Vec<String>,
}

/// How many symbols the code kind lists at most (`code.rs`, SYMBOL_LIMIT).
const SYMBOL_LIMIT: usize = 24;

impl SymbolCheck {
    fn check(&mut self, sample: &Sample, items: &[String]) {
        let Some(declared) = &sample.declared else {
            return;
        };
        self.files += 1;
        let listed: Vec<&str> = items
            .iter()
            .filter_map(|item| item.strip_prefix("function "))
            .collect();
        for name in &listed {
            self.functions_checked += 1;
            let last = name.rsplit("::").next().unwrap_or(name);
            if !declared.iter().any(|d| d == name || d == last) {
                self.not_declared.push(format!(
                    "{} [{}]: function {name}",
                    sample.source, sample.category
                ));
            }
        }
        if items.len() < SYMBOL_LIMIT {
            for function in &sample.functions {
                self.shell_functions += 1;
                if !listed.contains(&function.as_str()) {
                    self.missed_functions.push(format!(
                        "{} [{}]: {function}",
                        sample.source, sample.category
                    ));
                }
            }
        }
    }

    fn report(&self) {
        println!(
            "Symbols against universal-ctags: {} code samples, {} function symbols checked, \
             {} not declared; {} shell functions, {} not listed",
            self.files,
            self.functions_checked,
            self.not_declared.len(),
            self.shell_functions,
            self.missed_functions.len()
        );
        for miss in self.not_declared.iter().chain(&self.missed_functions) {
            println!("  {miss}");
        }
    }
}
