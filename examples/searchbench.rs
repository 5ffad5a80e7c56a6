//! Ranked session search over ~100 MB of realistic mixed text, SQLite
//! beside PostgreSQL in one run, through the store's one
//! interface (`AsyncResultStore::search_session`).
//!
//! The fixture: one session holding ~100 MB in 300 outputs of 64 KB-640 KB
//! (log files, JSON API answers, source code, in turn), and 6 other
//! sessions of ~3.4 MB each (the same kinds; they must not be searched),
//! stored on each backend, then indexed (`flush_index`). The text is
//! deterministic: English and technical words with a skewed frequency, a
//! long tail of identifiers made of syllables (as `benches/store.rs` does),
//! timestamps, ids, hex, paths. Then every query runs `SEARCHBENCH_RUNS`
//! times (default 30) on each backend, the backends alternating run by
//! run; p50 and p95 per query and backend, and their ratio.
//!
//! Run: `cargo run --release --example searchbench` (SQLite only), or with
//! PostgreSQL: `eval "$(TEST_POSTGRES_PORT=55433 scripts/postgres start)" &&
//! cargo run --release --example searchbench`. `SEARCHBENCH_MB` changes
//! the searched session's size (default 100); `SEARCHBENCH_ANALYZE=0` skips
//! the `ANALYZE` after PostgreSQL's load (autovacuum's work, which the
//! search's strategy reads); `SEARCHBENCH_KEEP=1` leaves
//! the data in place and prints where (for `EXPLAIN ANALYZE` by hand).

#[path = "../benches/support/stores.rs"]
mod stores;

use std::time::Instant;
use toolstub::store::{NewOutput, Tenant};
use toolstub::synopsis::{synopsize, Hints};

/// Deterministic xorshift generator.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// An index in `0..n` skewed towards 0 (u^3: a few are very common).
    fn skewed(&mut self, n: usize) -> usize {
        let u = (self.next() % 1_000_000) as f64 / 1_000_000.0;
        ((u * u * u) * n as f64) as usize
    }
    fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        words[self.skewed(words.len())]
    }
}

/// Words of log messages, JSON values and comments, most common first.
const WORDS: &[&str] = &[
    "the",
    "request",
    "to",
    "of",
    "user",
    "and",
    "a",
    "in",
    "for",
    "is",
    "connection",
    "failed",
    "error",
    "with",
    "from",
    "on",
    "not",
    "server",
    "data",
    "file",
    "at",
    "timeout",
    "response",
    "received",
    "status",
    "session",
    "cache",
    "retry",
    "value",
    "started",
    "completed",
    "query",
    "database",
    "client",
    "handler",
    "token",
    "key",
    "config",
    "loaded",
    "invalid",
    "missing",
    "upstream",
    "service",
    "worker",
    "job",
    "queue",
    "event",
    "message",
    "pool",
    "thread",
    "lock",
    "write",
    "read",
    "path",
    "http",
    "json",
    "header",
    "body",
    "length",
    "bytes",
    "records",
    "index",
    "table",
    "row",
    "column",
    "schema",
    "migration",
    "version",
    "build",
    "deploy",
    "container",
    "pod",
    "node",
    "cluster",
    "region",
    "zone",
    "disk",
    "memory",
    "cpu",
    "latency",
    "throughput",
    "limit",
    "exceeded",
    "rate",
    "quota",
    "denied",
    "permission",
    "access",
    "account",
    "email",
    "password",
    "reset",
    "login",
    "logout",
    "authenticated",
    "unauthorized",
    "forbidden",
    "found",
    "created",
    "updated",
    "deleted",
    "skipped",
    "ignored",
    "closed",
    "open",
    "listening",
    "port",
    "address",
    "bound",
    "refused",
    "reset",
    "dns",
    "resolve",
    "certificate",
    "expired",
    "handshake",
    "tls",
    "payload",
    "parse",
    "decode",
    "encode",
    "serialize",
    "buffer",
    "overflow",
    "underflow",
    "panic",
    "unwrap",
    "none",
    "some",
    "result",
    "option",
    "future",
    "await",
    "spawn",
    "task",
    "scheduler",
    "metrics",
    "gauge",
    "counter",
    "histogram",
    "trace",
    "span",
    "debug",
    "warning",
    "critical",
    "fatal",
    "shutdown",
    "signal",
    "graceful",
    "restart",
    "healthy",
    "degraded",
    "unavailable",
    "backoff",
    "jitter",
    "deadline",
    "cancelled",
    "aborted",
    "checksum",
    "mismatch",
    "corrupt",
    "recovered",
    "snapshot",
    "backup",
    "restore",
    "replica",
    "primary",
    "leader",
    "follower",
    "election",
    "term",
    "commit",
    "rollback",
    "transaction",
    "isolation",
    "serializable",
    "conflict",
    "deadlock",
    "detected",
    "vacuum",
    "analyze",
    "statistics",
    "planner",
    "scan",
    "sequential",
    "bitmap",
    "heap",
    "tuple",
    "page",
    "wal",
    "checkpoint",
    "flush",
    "fsync",
    "latch",
    "mutex",
    "condvar",
    "channel",
    "sender",
    "receiver",
];

const LEVELS: &[&str] = &["INFO", "INFO", "INFO", "DEBUG", "DEBUG", "WARN", "ERROR"];
const MODULES: &[&str] = &[
    "api::handlers",
    "api::auth",
    "db::pool",
    "db::query",
    "cache::lru",
    "proxy::upstream",
    "worker::jobs",
    "store::writer",
    "http::client",
    "tls::config",
    "scheduler",
    "metrics",
];
const TYPES: &[&str] = &[
    "String",
    "Vec<u8>",
    "Request",
    "Response",
    "Config",
    "Session",
    "Error",
    "Client",
    "Row",
    "HashMap<String, Value>",
    "Option<i64>",
    "Arc<Mutex<State>>",
];
const SYL: [&str; 16] = [
    "ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "pe", "qu", "da", "ri", "zo", "fe", "gu", "ha",
];

/// A long-tail identifier: 2-4 syllables, index skewed over ~70k.
fn ident(r: &mut Rng) -> String {
    let mut idx = r.skewed(69_904);
    let syllables = 2 + idx % 3;
    let mut s = String::new();
    for _ in 0..syllables {
        s.push_str(SYL[idx % 16]);
        idx /= 16;
    }
    s
}

fn sentence(r: &mut Rng, out: &mut String, words: usize) {
    for i in 0..words {
        if i > 0 {
            out.push(' ');
        }
        if r.below(6) == 0 {
            out.push_str(&ident(r));
        } else {
            out.push_str(r.pick(WORDS));
        }
    }
}

/// A log file: timestamped lines with a level, a module and a message.
fn log_text(r: &mut Rng, bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 256);
    let mut ms = r.below(86_400_000);
    while s.len() < bytes {
        ms += r.below(900);
        let level = LEVELS[r.below(LEVELS.len() as u64) as usize];
        s.push_str(&format!(
            "2026-11-{:02}T{:02}:{:02}:{:02}.{:03}Z {level:5} {}: ",
            1 + (ms / 86_400_000) % 28,
            (ms / 3_600_000) % 24,
            (ms / 60_000) % 60,
            (ms / 1000) % 60,
            ms % 1000,
            MODULES[r.below(MODULES.len() as u64) as usize],
        ));
        match r.below(10) {
            0 => s.push_str("connection timeout after 30000 ms to upstream "),
            1 => s.push_str("request completed "),
            _ => {}
        }
        let words = 4 + r.below(10) as usize;
        sentence(r, &mut s, words);
        if r.below(40_000) == 0 {
            s.push_str(" ECONNRESET");
        }
        s.push_str(&format!(
            " request_id={:016x} user={} latency_ms={}\n",
            r.next(),
            r.below(5000),
            r.below(2000)
        ));
        if level == "ERROR" && r.below(4) == 0 {
            s.push_str(&format!(
                "    at {}::{} (src/{}.rs:{}:{})\n",
                MODULES[r.below(MODULES.len() as u64) as usize],
                ident(r),
                ident(r),
                r.below(900),
                r.below(80)
            ));
        }
    }
    s
}

/// A JSON API answer: an array of records.
fn json_text(r: &mut Rng, bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 512);
    s.push('[');
    let mut i = 0;
    while s.len() < bytes {
        if i > 0 {
            s.push(',');
        }
        let mut message = String::new();
        let words = 3 + r.below(8) as usize;
        sentence(r, &mut message, words);
        let name = ident(r);
        s.push_str(&format!(
            "{{\"id\":{},\"user\":\"{name}\",\"email\":\"{name}@example.com\",\"status\":\"{}\",\
             \"tags\":[\"{}\",\"{}\"],\"score\":{}.{:02},\"created_at\":\"2026-11-{:02}T{:02}:{:02}:00Z\",\
             \"message\":\"{message}\"}}",
            r.below(10_000_000),
            ["active", "active", "inactive", "pending", "suspended"][r.below(5) as usize],
            r.pick(WORDS),
            ident(r),
            r.below(100),
            r.below(100),
            1 + r.below(28),
            r.below(24),
            r.below(60),
        ));
        i += 1;
    }
    s.push(']');
    s
}

/// Source code: Rust-like functions with identifiers, calls and comments.
fn code_text(r: &mut Rng, bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 512);
    while s.len() < bytes {
        let mut comment = String::new();
        let words = 5 + r.below(10) as usize;
        sentence(r, &mut comment, words);
        let (f, a, b) = (ident(r), ident(r), ident(r));
        let ty = TYPES[r.below(TYPES.len() as u64) as usize];
        s.push_str(&format!(
            "/// {comment}\npub fn {f}_{a}({a}: &{ty}, {b}: usize) -> Result<{ty}, Error> {{\n"
        ));
        for _ in 0..2 + r.below(6) {
            let (x, y) = (ident(r), ident(r));
            match r.below(4) {
                0 => s.push_str(&format!("    let {x} = {a}.{y}({b})?;\n")),
                1 => s.push_str(&format!(
                    "    if {x}.len() > {} {{\n        return Err(Error::{}(\"{} {}\".into()));\n    }}\n",
                    r.below(4096),
                    ["Invalid", "Timeout", "NotFound", "Conflict"][r.below(4) as usize],
                    r.pick(WORDS),
                    r.pick(WORDS)
                )),
                2 => s.push_str(&format!(
                    "    // {} {} {}\n    {x}.{y}.insert({b}, {x}.clone());\n",
                    r.pick(WORDS),
                    r.pick(WORDS),
                    ident(r)
                )),
                _ => s.push_str(&format!(
                    "    let {x}: Vec<_> = {y}.iter().map(|v| v.{}()).collect();\n",
                    ident(r)
                )),
            }
        }
        s.push_str(&format!("    Ok({a}.clone())\n}}\n\n"));
    }
    s
}

fn output(session: &str, call: &str, tool: &str, mime: &str, text: String) -> NewOutput {
    let head: String = text.chars().take(4096).collect();
    let hints = Hints {
        mime: Some(mime),
        preview_chars: 2000,
    };
    NewOutput {
        session_id: session.to_string(),
        tool_call_id: Some(call.to_string()),
        tool_name: Some(tool.to_string()),
        mime_type: Some(mime.to_string()),
        preview_chars: 2000,
        synopsis: synopsize(&head, hints),
        text: text.into(),
        sha256: None,
        stub: None,
    }
}

/// Output `i` of a session: its kind in turn, its size 64-640 KB.
fn mixed(seed: u64, i: u64) -> (String, &'static str, &'static str) {
    let mut r = Rng::new(seed * 1_000_003 + i);
    let bytes = 64_000 + r.below(577_000) as usize;
    match i % 3 {
        0 => (log_text(&mut r, bytes), "read_log", "text/plain"),
        1 => (json_text(&mut r, bytes), "http_get", "application/json"),
        _ => (code_text(&mut r, bytes), "read_file", "text/x-rust"),
    }
}

const SESSION: &str = "big-session";

/// (name, query), from rare to very common.
const QUERIES: &[(&str, &str)] = &[
    ("rare word (ECONNRESET)", "ECONNRESET"),
    ("rare identifier", "rugufe"),
    ("medium identifier", "mivi"),
    ("common word (error)", "error"),
    ("very common word (request)", "request"),
    ("two words (connection timeout)", "connection timeout"),
    ("three words (user email active)", "user email active"),
    ("no match", "zzzzqqq"),
];

fn percentile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let target_mb = env("SEARCHBENCH_MB", 100);
    let runs = env("SEARCHBENCH_RUNS", 30) as usize;
    // 0: search before PostgreSQL has statistics (a fresh bulk load).
    let analyze = env("SEARCHBENCH_ANALYZE", 1) != 0;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let stores = stores::open_all("searchbench").await;
        let tenant = Tenant::anonymous();
        println!("## Ranked session search over ~{target_mb} MB of mixed text\n");
        // Each output built once and stored on every backend, in turn.
        let (mut bytes, mut n) = (0usize, 0u64);
        let mut put_s = vec![0.0; stores.len()];
        let started = Instant::now();
        while bytes < (target_mb as usize) * 1_000_000 {
            let (text, tool, mime) = mixed(1, n);
            bytes += text.len();
            for (s, t) in stores.iter().zip(&mut put_s) {
                let o = output(SESSION, &format!("c{n}"), tool, mime, text.clone());
                let t0 = Instant::now();
                s.store.put(&tenant, vec![o]).await.expect("put");
                *t += t0.elapsed().as_secs_f64();
            }
            n += 1;
        }
        for other in 0..6u64 {
            for i in 0..10 {
                let (text, tool, mime) = mixed(100 + other, i);
                for s in &stores {
                    let o = output(&format!("other-{other}"), &format!("c{i}"), tool, mime, text.clone());
                    s.store.put(&tenant, vec![o]).await.expect("put");
                }
            }
        }
        println!(
            "fixture: session {SESSION:?}: {n} outputs, {:.1} MB; 6 other sessions of 10 outputs; built and stored in {:.0} s\n",
            bytes as f64 / 1e6,
            started.elapsed().as_secs_f64()
        );
        println!("| backend | put of the session's outputs | indexing after the puts | originals | full-text index | index / originals | database |");
        println!("|---|---|---|---|---|---|---|");
        for (s, put) in stores.iter().zip(&put_s) {
            let t0 = Instant::now();
            s.store.flush_index().await.expect("index");
            let index = t0.elapsed().as_secs_f64();
            if let (Some(url), true) = (&s.url, analyze) {
                // What autovacuum does within a minute of a bulk load: the
                // planner's statistics, which the search's strategy reads.
                let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                    .await
                    .expect("connect to analyze");
                tokio::spawn(conn);
                client.batch_execute("ANALYZE").await.expect("analyze");
            }
            let st = s.store.stats().await.expect("stats");
            println!(
                "| {} | {:.1} s ({:.1} ms per output) | {:.1} s | {:.1} MB | {:.1} MB | {:.0}% | {:.1} MB |",
                s.name,
                put,
                put * 1e3 / n as f64,
                index,
                st.original_bytes as f64 / 1e6,
                st.fts_bytes as f64 / 1e6,
                100.0 * st.fts_bytes as f64 / st.original_bytes as f64,
                st.file_bytes as f64 / 1e6
            );
        }
        println!();
        // Warm-up: every query once on every backend.
        let mut hits = vec![vec![0usize; stores.len()]; QUERIES.len()];
        for (q, &(_, query)) in QUERIES.iter().enumerate() {
            for (b, s) in stores.iter().enumerate() {
                let found = s
                    .store
                    .search_session(&tenant, SESSION, query, 20, 300)
                    .await
                    .expect("search");
                hits[q][b] = found.len();
            }
        }
        let mut times = vec![vec![Vec::with_capacity(runs); stores.len()]; QUERIES.len()];
        for run in 0..runs {
            for (q, &(_, query)) in QUERIES.iter().enumerate() {
                // Alternate which backend goes first.
                for k in 0..stores.len() {
                    let b = (k + run) % stores.len();
                    let t0 = Instant::now();
                    let found = stores[b]
                        .store
                        .search_session(&tenant, SESSION, query, 20, 300)
                        .await
                        .expect("search");
                    times[q][b].push(t0.elapsed().as_secs_f64() * 1e3);
                    std::hint::black_box(found);
                }
            }
        }
        let names: Vec<&str> = stores.iter().map(|s| s.name).collect();
        print!("| query (limit 20, context 300) | hits |");
        for name in &names {
            print!(" {name} p50 | {name} p95 |");
        }
        if names.len() == 2 {
            print!(" p50 ratio {} / {} |", names[1], names[0]);
        }
        println!();
        println!("|---|---|{}{}", "---|---|".repeat(names.len()), if names.len() == 2 { "---|" } else { "" });
        for (q, &(name, query)) in QUERIES.iter().enumerate() {
            let counts: Vec<String> = hits[q].iter().map(|h| h.to_string()).collect();
            print!("| {name}: `{query}` | {} |", counts.join(" / "));
            let mut p50 = Vec::new();
            for t in &mut times[q] {
                t.sort_by(f64::total_cmp);
                p50.push(percentile(t, 0.5));
                print!(" {:.2} ms | {:.2} ms |", percentile(t, 0.5), percentile(t, 0.95));
            }
            if p50.len() == 2 {
                print!(" {:.2} |", p50[1] / p50[0]);
            }
            println!();
        }
        println!("\n{runs} runs of each query on each backend, the backends alternating; hits: per backend.");
        if std::env::var_os("SEARCHBENCH_KEEP").is_some() {
            for s in stores {
                if let Some(url) = &s.url {
                    println!("kept: {} at {url}", s.name);
                }
                s.keep();
            }
        }
    });
}
