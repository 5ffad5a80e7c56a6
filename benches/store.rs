//! Result store benchmarks (issue 3 targets), on both backends side by
//! side through the store's one interface (`AsyncResultStore`), issue 16:
//! - `put` of 1 MB and 10 MB originals (durable commit, full-text indexing
//!   excluded; `put_and_index` includes it);
//! - reading a 20,000-character window at the end (and the start) of a
//!   10 MB original (goal < 1 ms);
//! - exact (substring) search inside one 10 MB original;
//! - ranked session-wide search over 100 MB stored in one session (goal
//!   median <= 50 ms);
//! - and, printed once per backend, the size of the full-text index
//!   relative to the originals.
//!
//! Benchmarks are named `store/<backend>/<case>` (`store/sqlite/put_1MB`,
//! `store/postgres/put_1MB`), each case run on SQLite then PostgreSQL, so
//! the two run minutes apart at most. The PostgreSQL rows run only when
//! `TEST_POSTGRES_URL` is set (each run in a schema of its own, dropped at
//! the end); without it a line says they were skipped and SQLite's run.
//!
//! Run: `cargo bench --bench store`, or with PostgreSQL:
//! `eval "$(TEST_POSTGRES_PORT=55433 scripts/postgres start)" && cargo bench --bench store`.
//! The fixtures are deterministic pseudo-random words.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use std::hint::black_box;
use std::time::{Duration, Instant};
use toolstub::store::{NewOutput, Tenant};
use toolstub::synopsis::{synopsize, Hints};

#[path = "support/stores.rs"]
mod stores;

use stores::BenchStore;

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
        text: text.into(),
        sha256: None,
        stub: None,
    }
}

/// Makes every iteration's text distinct (so `put` is never a no-op).
fn unique(base: &str, n: u64) -> String {
    let mut s = format!("{n:020} ");
    s.push_str(&base[21..]);
    s
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

async fn put_one(store: &BenchStore, tenant: &Tenant, o: NewOutput) -> toolstub::store::Stored {
    let mut stored = store.store.put(tenant, vec![o]).await.expect("put");
    stored.pop().expect("one stored")
}

fn bench_put(c: &mut Criterion) {
    let rt = runtime();
    let tenant = Tenant::anonymous();
    let mut group = c.benchmark_group("store");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    let mut n = 0u64;
    for (name, size) in [("1MB", 1 << 20), ("10MB", 10 << 20)] {
        let base = corpus(size as u64, size);
        for index in [false, true] {
            // Fresh stores for each case: no backlog or size left by the
            // case before.
            let stores = rt.block_on(stores::open_all("store put"));
            let case = if index { "put_and_index" } else { "put" };
            for s in &stores {
                group.bench_function(format!("{}/{case}_{name}", s.name), |b| {
                    b.iter_batched(
                        || {
                            n += 1;
                            output("s", &format!("c{n}"), unique(&base, n))
                        },
                        |o| {
                            rt.block_on(async {
                                black_box(put_one(s, &tenant, o).await);
                                if index {
                                    s.store.flush_index().await.expect("index");
                                }
                            })
                        },
                        BatchSize::PerIteration,
                    )
                });
            }
            drop(stores);
        }
    }
    group.finish();
}

fn bench_read(c: &mut Criterion) {
    let rt = runtime();
    let stores = rt.block_on(stores::open_all("store read"));
    let tenant = Tenant::anonymous();
    // Multi-byte text so byte and code-point offsets differ.
    let mut text = corpus(7, 10 << 20);
    text.push_str(&"日本語のテキスト😀 ".repeat(3000));
    let stored: Vec<_> = stores
        .iter()
        .map(|s| {
            rt.block_on(async {
                let stored = put_one(s, &tenant, output("s", "big", text.clone())).await;
                s.store.flush_index().await.expect("index");
                stored
            })
        })
        .collect();
    let total = stored[0].original_chars as i64;
    let mut group = c.benchmark_group("store");
    for (case, at) in [
        ("read_20k_chars_at_end_of_10MB", total - 20_000),
        ("read_20k_chars_at_start_of_10MB", 0),
    ] {
        for (s, stored) in stores.iter().zip(&stored) {
            group.bench_function(format!("{}/{case}", s.name), |b| {
                b.iter(|| {
                    let w = rt
                        .block_on(s.store.read(&tenant, &stored.result_ref, at, 20_000))
                        .expect("read");
                    black_box(w.content.len())
                })
            });
        }
    }
    group.sample_size(10);
    for (s, stored) in stores.iter().zip(&stored) {
        group.bench_function(format!("{}/exact_search_in_10MB", s.name), |b| {
            b.iter(|| {
                let r = rt
                    .block_on(
                        s.store
                            .search(&tenant, &stored.result_ref, "kalomi", 20, 300),
                    )
                    .expect("search");
                black_box(r.total_matches)
            })
        });
    }
    group.finish();
    drop(stores);
}

fn bench_session_search(c: &mut Criterion) {
    let rt = runtime();
    let stores = rt.block_on(stores::open_all("store session search"));
    let tenant = Tenant::anonymous();
    // 100 outputs of 1 MiB: 100 MiB in one session, on each backend.
    for s in &stores {
        rt.block_on(async {
            let started = Instant::now();
            for i in 0..100u64 {
                put_one(
                    s,
                    &tenant,
                    output("big-session", &format!("c{i}"), corpus(1000 + i, 1 << 20)),
                )
                .await;
            }
            let put_time = started.elapsed();
            let started = Instant::now();
            s.store.flush_index().await.expect("index");
            let index_time = started.elapsed();
            let stats = s.store.stats().await.expect("stats");
            println!(
                "{}: fixture: {} outputs, {:.1} MB of originals; put {:.1} s, full-text indexing {:.1} s after the puts",
                s.name,
                stats.live_outputs,
                stats.original_bytes as f64 / 1e6,
                put_time.as_secs_f64(),
                index_time.as_secs_f64()
            );
            println!(
                "{}: sizes: full-text index {:.1} MB = {:.1}% of originals; chunk table {:.1} MB; database {:.1} MB",
                s.name,
                stats.fts_bytes as f64 / 1e6,
                100.0 * stats.fts_bytes as f64 / stats.original_bytes as f64,
                stats.chunk_table_bytes as f64 / 1e6,
                stats.file_bytes as f64 / 1e6
            );
        });
    }
    let mut group = c.benchmark_group("store");
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
        for s in &stores {
            let search = || {
                s.store
                    .search_session(&tenant, "big-session", query, 20, 300)
            };
            let hits = rt.block_on(search()).expect("search");
            println!("{}: query {name} ({query:?}): {} hits", s.name, hits.len());
            group.bench_function(format!("{}/session_search_100MB/{name}", s.name), |b| {
                b.iter(|| black_box(rt.block_on(search()).expect("search")))
            });
        }
    }
    group.finish();
    drop(stores);
}

criterion_group!(benches, bench_put, bench_read, bench_session_search);
criterion_main!(benches);
