//! Kind accuracy on real tool outputs (issue 2, item 5).
//!
//! `scripts/corpus.py` builds, at test time, a labelled set of real outputs of
//! real commands and real files on this machine (nothing third-party is kept
//! in the repository). This test detects the kind of every sample and fails
//! when there are fewer than 150 samples or when fewer than 95% are right. It
//! prints the accuracy per expected kind, the skipped categories and every
//! miss, so a regression is visible at once.

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
    for sample in &manifest.samples {
        let expected = Kind::parse(&sample.expected)
            .unwrap_or_else(|| panic!("bad label {:?} for {}", sample.expected, sample.file));
        let bytes = std::fs::read(dir.0.join(&sample.file)).expect("read a sample");
        let text = String::from_utf8_lossy(&bytes);
        let got = synopsize(
            &text,
            Hints {
                mime: None,
                preview_chars: 2000,
            },
        )
        .kind;
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
