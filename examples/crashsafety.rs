//! Crash safety under load. Run with `scripts/crash-safety`.
//!
//! The real `toolstub` binary serves several clients that send chat
//! completions carrying large, always-new tool outputs, in front of a mock
//! upstream that records every ref it receives in a stub. A killer sends
//! SIGKILL to the proxy at random moments and restarts it on the same
//! database and port. At the end the store is opened directly and every ref
//! the upstream ever received must read back byte-identical to the original
//! the client sent (re-derived from its seed), under the tenant of the
//! credential that sent it.
//!
//! With a PostgreSQL store (`CRASH_STORE_URL`), `CRASH_REPLICAS` proxies
//! (default 2) share it, the clients spread over them, and each kill takes
//! one replica at random while the others keep serving.
//!
//! Environment: `TOOLSTUB_BIN` (default `target/release/toolstub`),
//! `CRASH_KILLS` (25), `CRASH_CLIENTS` (8), `CRASH_SEED` (the time),
//! `CRASH_MIN_MS`/`CRASH_MAX_MS` (150/1200: the uniform range of the time a
//! proxy lives before its kill). Exits 1 if any ref fails to resolve.

#[path = "support/mod.rs"]
mod support;

use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{Rng, COMPLETION};
use toolstub::store::{AsyncResultStore, Backend, PostgresOptions, StoreConfig, Tenant};

/// The credentials the clients use, alternately: two tenants.
pub const KEYS: [&str; 2] = ["Bearer sk-crash-alpha-0001", "Bearer sk-crash-beta-0002"];

pub struct Params {
    pub bin: String,
    pub kills: usize,
    pub clients: usize,
    pub seed: u64,
    pub min_life: Duration,
    pub max_life: Duration,
    /// Largest output, in characters (each is between a quarter and all of it).
    pub max_chars: usize,
    /// A PostgreSQL store shared by the replicas; `None`: one proxy on a
    /// SQLite file.
    pub store_url: Option<String>,
    /// Proxies sharing the store (1 on SQLite).
    pub replicas: usize,
}

#[derive(Debug, Default)]
pub struct Report {
    pub kills: usize,
    pub requests_sent: u64,
    pub requests_ok: u64,
    pub requests_failed: u64,
    pub outputs_sent: u64,
    pub refs_received: usize,
    pub refs_resolved: usize,
    pub failures: Vec<String>,
    pub restart_ms: Vec<u64>,
    pub elapsed: Duration,
    pub db_bytes: u64,
}

/// What a client sent under one ref.
#[derive(Clone, Copy)]
struct Sent {
    key: usize,
    seed: u64,
    chars: usize,
}

pub fn run(p: &Params) -> Report {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let received: Arc<Mutex<HashSet<String>>> = Arc::default();
    let rec = received.clone();
    let mock = support::start_mock(
        Arc::new(move |_parts, body: &Bytes| {
            let refs = support::refs_in(body);
            if !refs.is_empty() {
                rec.lock().expect("lock").extend(refs);
            }
            support::json_response(COMPLETION)
        }),
        1,
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("crash.db");
    let replicas = if p.store_url.is_some() {
        p.replicas.max(1)
    } else {
        1
    };
    let addrs: Vec<std::net::SocketAddr> = (0..replicas)
        .map(|_| {
            format!("127.0.0.1:{}", support::free_port())
                .parse()
                .expect("addr")
        })
        .collect();
    let env: Vec<(&str, String)> = match &p.store_url {
        Some(url) => vec![("TOOLSTUB_STORE_URL", url.clone())],
        None => Vec::new(),
    };
    let started = Instant::now();
    let mut report = Report::default();

    let sent: Arc<Mutex<HashMap<String, Sent>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new([
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
    ]);

    rt.block_on(async {
        let mut proxies = Vec::new();
        for &addr in &addrs {
            proxies.push(support::spawn_proxy(&p.bin, addr, mock, &db, &env));
        }
        for &addr in &addrs {
            support::wait_healthy(addr, Duration::from_secs(30)).await;
        }
        let mut workers = Vec::new();
        for w in 0..p.clients {
            let sent = sent.clone();
            let stop = stop.clone();
            let counters = counters.clone();
            let seed = p.seed;
            let max_chars = p.max_chars;
            let addrs = addrs.clone();
            workers.push(tokio::spawn(async move {
                let client = support::client();
                let mut rng = Rng::new(seed ^ ((w as u64 + 1) * 0x1000_0001));
                let mut seq = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    seq += 1;
                    let key = (w + seq as usize) % KEYS.len();
                    let n = 1 + (rng.next() % 2) as usize;
                    let mut ids = Vec::new();
                    let mut texts = Vec::new();
                    for j in 0..n {
                        let out_seed = seed
                            .wrapping_mul(1_000_003)
                            .wrapping_add((w as u64) << 40 | seq << 4 | j as u64);
                        let chars = rng.range(max_chars as u64 / 4, max_chars as u64) as usize;
                        let text = support::output_text(out_seed, chars);
                        let id = format!("call_w{w}_s{seq}_{j}");
                        let r = toolstub::refs::result_ref(
                            Some(&id),
                            &toolstub::refs::sha256_hex(&text),
                        );
                        // Recorded before sending: the upstream may see the
                        // ref even when the client never hears back.
                        sent.lock().expect("lock").insert(
                            r,
                            Sent {
                                key,
                                seed: out_seed,
                                chars,
                            },
                        );
                        ids.push(id);
                        texts.push(text);
                    }
                    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                    let body = support::chat_body(&ids, &refs, "");
                    let addr = addrs[(w + seq as usize) % addrs.len()];
                    counters[0].fetch_add(1, Ordering::Relaxed);
                    counters[3].fetch_add(n as u64, Ordering::Relaxed);
                    let result = support::request(
                        &client,
                        "POST",
                        format!("http://{addr}/v1/chat/completions"),
                        &[
                            ("authorization", KEYS[key]),
                            ("content-type", "application/json"),
                        ],
                        Bytes::from(body),
                        Duration::from_secs(20),
                    )
                    .await;
                    match result {
                        Ok((200, _)) => {
                            counters[1].fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {
                            counters[2].fetch_add(1, Ordering::Relaxed);
                            // The proxy is down or restarting: back off a little.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
            }));
        }
        let mut rng = Rng::new(p.seed);
        for _ in 0..p.kills {
            let life = rng.range(p.min_life.as_millis() as u64, p.max_life.as_millis() as u64);
            tokio::time::sleep(Duration::from_millis(life)).await;
            let victim = (rng.next() % addrs.len() as u64) as usize;
            // Child::kill is SIGKILL on Unix.
            proxies[victim].kill().expect("kill -9");
            proxies[victim].wait().expect("reap");
            report.kills += 1;
            let t = Instant::now();
            proxies[victim] = support::spawn_proxy(&p.bin, addrs[victim], mock, &db, &env);
            support::wait_healthy(addrs[victim], Duration::from_secs(30)).await;
            report.restart_ms.push(t.elapsed().as_millis() as u64);
        }
        // A last stretch of traffic, then stop the clients and the proxy.
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            let _ = w.await;
        }
        for proxy in &mut proxies {
            proxy.kill().expect("kill -9");
            proxy.wait().expect("reap");
        }
    });

    report.requests_sent = counters[0].load(Ordering::Relaxed);
    report.requests_ok = counters[1].load(Ordering::Relaxed);
    report.requests_failed = counters[2].load(Ordering::Relaxed);
    report.outputs_sent = counters[3].load(Ordering::Relaxed);
    report.db_bytes = support::file_len(&db) + support::file_len(&dir.path().join("crash.db-wal"));

    // Verify: every ref the upstream received reads back byte-identical.
    let backend = match &p.store_url {
        Some(url) => Backend::Postgres(PostgresOptions {
            url: url.clone(),
            pool_size: 2,
            connect_timeout: Duration::from_secs(10),
            ca_file: None,
        }),
        None => Backend::Sqlite(db.clone()),
    };
    let store = rt
        .block_on(AsyncResultStore::open(
            backend,
            StoreConfig {
                sweep_interval: None,
                ..StoreConfig::default()
            },
        ))
        .expect("open the store");
    let received = received.lock().expect("lock").clone();
    let sent = sent.lock().expect("lock").clone();
    report.refs_received = received.len();
    let tenants: Vec<Tenant> = KEYS.iter().map(|k| Tenant::from_credential(k)).collect();
    let mut received: Vec<String> = received.into_iter().collect();
    received.sort();
    for r in &received {
        let Some(s) = sent.get(r) else {
            report
                .failures
                .push(format!("{r}: the upstream received a ref no client sent"));
            continue;
        };
        let original = support::output_text(s.seed, s.chars);
        match rt.block_on(store.read(&tenants[s.key], r, 0, -1)) {
            Ok(window) if window.content == original => report.refs_resolved += 1,
            Ok(window) => report.failures.push(format!(
                "{r}: content differs ({} chars stored, {} sent)",
                window.content.chars().count(),
                original.chars().count()
            )),
            Err(e) => report.failures.push(format!("{r}: {e}")),
        }
        // The other tenant must not see it.
        if rt
            .block_on(store.read(&tenants[1 - s.key], r, 0, 1))
            .is_ok()
        {
            report
                .failures
                .push(format!("{r}: readable by the other tenant"));
        }
    }
    report.elapsed = started.elapsed();
    report
}

pub fn print(p: &Params, r: &Report) {
    let mut restart = r.restart_ms.clone();
    restart.sort_unstable();
    let pct = |q: f64| {
        restart
            .get(((restart.len().max(1) - 1) as f64 * q).round() as usize)
            .copied()
            .unwrap_or(0)
    };
    println!("## crash safety under load\n");
    println!(
        "binary {}; store {}; {} clients; seed {}; proxy life before each SIGKILL uniform in [{}, {}] ms; outputs {}..{} chars\n",
        p.bin,
        match p.store_url {
            Some(_) => format!("PostgreSQL shared by {} replicas (one killed at a time)", p.replicas.max(1)),
            None => "SQLite".to_string(),
        },
        p.clients,
        p.seed,
        p.min_life.as_millis(),
        p.max_life.as_millis(),
        p.max_chars / 4,
        p.max_chars
    );
    println!("| figure | value |");
    println!("|---|---|");
    println!(
        "| SIGKILLs (each followed by a restart on the same DB) | {} |",
        r.kills
    );
    println!("| wall time | {:.1} s |", r.elapsed.as_secs_f64());
    println!(
        "| requests sent / answered 200 / failed (proxy down) | {} / {} / {} |",
        r.requests_sent, r.requests_ok, r.requests_failed
    );
    println!("| tool outputs sent | {} |", r.outputs_sent);
    println!(
        "| distinct refs the upstream received | {} |",
        r.refs_received
    );
    println!(
        "| refs that resolve byte-identical | **{} / {}** |",
        r.refs_resolved, r.refs_received
    );
    println!(
        "| restart to healthy, p50 / max | {} ms / {} ms |",
        pct(0.5),
        pct(1.0)
    );
    println!(
        "| database + WAL at the end | {:.1} MiB |",
        support::mib(r.db_bytes)
    );
    for f in r.failures.iter().take(20) {
        println!("FAILURE: {f}");
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[allow(dead_code)]
fn main() {
    let seed = env_or(
        "CRASH_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs()),
    );
    let p = Params {
        bin: std::env::var("TOOLSTUB_BIN")
            .unwrap_or_else(|_| "target/release/toolstub".to_string()),
        kills: env_or("CRASH_KILLS", 25),
        clients: env_or("CRASH_CLIENTS", 8),
        seed,
        min_life: Duration::from_millis(env_or("CRASH_MIN_MS", 150)),
        max_life: Duration::from_millis(env_or("CRASH_MAX_MS", 1200)),
        max_chars: env_or("CRASH_MAX_CHARS", 200_000),
        store_url: std::env::var("CRASH_STORE_URL").ok(),
        replicas: env_or("CRASH_REPLICAS", 2),
    };
    let r = run(&p);
    print(&p, &r);
    let ok = r.failures.is_empty() && r.refs_received > 0 && r.kills >= p.kills;
    std::process::exit(if ok { 0 } else { 1 });
}
