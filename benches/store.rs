//! Result store benchmarks (issue 3 targets):
//! - `put` of 1 MB and 10 MB originals (durable commit, FTS indexing excluded;
//!   `put_and_index` includes it);
//! - reading a 20,000-character window at the end of a 10 MB original (goal < 1 ms);
//! - exact search inside a 10 MB original;
//! - ranked session-wide search over 100 MB stored in one session (goal median <= 50 ms);
//! - and, printed once, the size of the FTS index relative to the originals.
//!
//! Run: `cargo bench --bench store`. The fixtures are deterministic
//! pseudo-random words, built in a temp dir.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use std::hint::black_box;
use std::time::{Duration, Instant};
use toolstub::store::{NewOutput, ResultStore, StoreConfig, Tenant};
use toolstub::synopsis::{synopsize, Hints};

/// Deterministic text of about `bytes` bytes: words from a ~70k-word
/// vocabulary with a skewed (Zipf-like) frequency, lines of ~12 words.
fn corpus(seed: u64, bytes: usize) -> String {
    const SYL: [&str; 16] = [
        "ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "pe", "qu", "da", "ri", "zo", "fe", "gu",
        "ha",
    ];
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut s = String::with_capacity(bytes + 64);
    let mut words_in_line = 0;
    while s.len() < bytes {
        // u^3 skews towards small indexes: a few words are very common.
        let u = (next() % 1_000_000) as f64 / 1_000_000.0;
        let mut idx = (u * u * u * 69_904.0) as u64;
        let syllables = 2 + (idx % 3);
        for _ in 0..syllables {
            s.push_str(SYL[(idx % 16) as usize]);
            idx /= 16;
        }
        words_in_line += 1;
        if words_in_line == 12 {
            s.push('\n');
            words_in_line = 0;
        } else {
            s.push(' ');
        }
    }
    s
}

fn output(session: &str, call: &str, text: String) -> NewOutput {
    let head: String = text.chars().take(4096).collect();
    NewOutput {
        session_id: session.to_string(),
        tool_call_id: Some(call.to_string()),
        tool_name: Some("bench_tool".to_string()),
        mime_type: None,
        preview_chars: 2000,
        synopsis: synopsize(
            &head,
            Hints {
                mime: None,
                preview_chars: 2000,
            },
        ),
        text,
        sha256: None,
    }
}

fn config() -> StoreConfig {
    StoreConfig {
        sweep_interval: None,
        ..StoreConfig::default()
    }
}

/// Makes every iteration's text distinct (so `put` is never a no-op).
fn unique(base: &str, n: u64) -> String {
    let mut s = format!("{n:020} ");
    s.push_str(&base[21..]);
    s
}

fn bench_put(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = ResultStore::open(dir.path().join("put.db"), config()).expect("open store");
    let tenant = Tenant::anonymous();
    let mut group = c.benchmark_group("store_put");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    let mut n = 0u64;
    for (name, size) in [("1MB", 1 << 20), ("10MB", 10 << 20)] {
        let base = corpus(size as u64, size);
        group.bench_function(format!("put_{name}"), |b| {
            b.iter_batched(
                || {
                    n += 1;
                    output("s", &format!("c{n}"), unique(&base, n))
                },
                |o| black_box(store.put_one(&tenant, o).expect("put")),
                BatchSize::PerIteration,
            )
        });
        group.bench_function(format!("put_and_index_{name}"), |b| {
            b.iter_batched(
                || {
                    n += 1;
                    output("s", &format!("c{n}"), unique(&base, n))
                },
                |o| {
                    black_box(store.put_one(&tenant, o).expect("put"));
                    store.flush_index().expect("index")
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

fn bench_read(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = ResultStore::open(dir.path().join("read.db"), config()).expect("open store");
    let tenant = Tenant::anonymous();
    // Multi-byte text so byte and code-point offsets differ.
    let mut text = corpus(7, 10 << 20);
    text.push_str(&"日本語のテキスト😀 ".repeat(3000));
    let stored = store
        .put_one(&tenant, output("s", "big", text))
        .expect("put");
    let total = stored.original_chars as i64;
    let mut group = c.benchmark_group("store_read");
    group.bench_function("read_20k_chars_at_end_of_10MB", |b| {
        b.iter(|| {
            let w = store
                .read(&tenant, &stored.result_ref, total - 20_000, 20_000)
                .expect("read");
            black_box(w.content.len())
        })
    });
    group.bench_function("read_20k_chars_at_start_of_10MB", |b| {
        b.iter(|| {
            let w = store
                .read(&tenant, &stored.result_ref, 0, 20_000)
                .expect("read");
            black_box(w.content.len())
        })
    });
    group.sample_size(10);
    group.bench_function("exact_search_in_10MB", |b| {
        b.iter(|| {
            let r = store
                .search(&tenant, &stored.result_ref, "kalomi", 20, 300)
                .expect("search");
            black_box(r.total_matches)
        })
    });
    group.finish();
}

fn bench_session_search(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("search.db");
    let store = ResultStore::open(&path, config()).expect("open store");
    let tenant = Tenant::anonymous();
    // 100 outputs of 1 MiB: 100 MiB in one session.
    let started = Instant::now();
    for i in 0..100u64 {
        store
            .put_one(
                &tenant,
                output("big-session", &format!("c{i}"), corpus(1000 + i, 1 << 20)),
            )
            .expect("put");
    }
    let put_time = started.elapsed();
    let started = Instant::now();
    store.flush_index().expect("index");
    let index_time = started.elapsed();
    let stats = store.stats().expect("stats");
    println!(
        "fixture: {} outputs, {:.1} MB of originals; put {:.1} s, FTS indexing {:.1} s",
        stats.live_outputs,
        stats.original_bytes as f64 / 1e6,
        put_time.as_secs_f64(),
        index_time.as_secs_f64()
    );
    println!(
        "sizes: FTS index {:.1} MB = {:.1}% of originals; chunk table {:.1} MB; file {:.1} MB",
        stats.fts_bytes as f64 / 1e6,
        100.0 * stats.fts_bytes as f64 / stats.original_bytes as f64,
        stats.chunk_table_bytes as f64 / 1e6,
        stats.file_bytes as f64 / 1e6
    );
    let mut group = c.benchmark_group("store_session_search_100MB");
    group.sample_size(20);
    // Word frequencies in the fixture, from rare to very common.
    for (name, query) in [
        ("rare_word", "rugufe"),
        ("medium_word", "mivi"),
        ("common_word", "kalo"),
        ("two_words", "kalo mivi"),
        ("fts_syntax", "\"kalo\" NEAR(mivi* -x) (("),
        ("no_match", "zzzzzz"),
    ] {
        let hits = store
            .search_session(&tenant, "big-session", query, 20, 300)
            .expect("search");
        println!("query {name} ({query:?}): {} hits", hits.len());
        group.bench_function(name, |b| {
            b.iter(|| {
                black_box(
                    store
                        .search_session(&tenant, "big-session", query, 20, 300)
                        .expect("search"),
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_put, bench_read, bench_session_search);
criterion_main!(benches);
