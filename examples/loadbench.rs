//! Load benchmark of `toolstub serve` against a direct-to-mock baseline,
//! interleaved in one run. Run with `scripts/load`.
//!
//! - A mock upstream (in this process, its own runtime thread) answers chat
//!   completions: a small JSON completion, or 10 SSE chunks for streams.
//! - The proxy is the real release binary, a child process.
//! - A bare forwarder (this executable with `--forwarder`, placed as the
//!   proxy is) is the floor: hyper's server and pooled client, nothing else.
//! - The load generator (this process) sends the same requests to the mock
//!   directly, through the proxy and through the bare forwarder, and reports
//!   the medians over rounds of p50/p99 latency and throughput, the added
//!   latency, the cost of a request carrying a 1 MB JSON tool output (first
//!   seen, back to back and after an idle gap; repeated; chat alone, then
//!   in each API's shape interleaved, where six new 1 MB outputs per round
//!   keep the store's indexer busy), the first-seen row against the stored
//!   baseline `benches/loadbench-baseline.json` (exit status 3 at 2x or
//!   more), and the proxy's
//!   RSS idle and under load. Saturating rows alternate batches per path;
//!   paced rows run the direct path and one other side by side (each at the
//!   full rate), because this machine has slow spells of 20-60 ms that
//!   decide a p99 and would otherwise land on one path's batch only.
//!
//! - Issue 14 item 12: the Anthropic Messages route beside the chat one in
//!   the same run: the passthrough rows of a small messages request (with
//!   the bare forwarder measured beside it), the 1 MB output as a
//!   `tool_result` (string content, and an array of text blocks)
//!   interleaved with chat's, the delay each event of a paced stream adds
//!   (the mock stamps every event as it leaves; without a stub the stream
//!   is forwarded, with one the protocol's splicer reads it), and a
//!   streamed recall round against the two rounds sent directly. The
//!   mock's Anthropic answers are in `support`.
//!
//! - Issue 15: the OpenAI Responses route beside the other two, by the same
//!   method: a small `/v1/responses` request in the passthrough rows, the
//!   1 MB output as a `function_call_output` (a string, and an array of
//!   `input_text` parts), paced Responses streams (`sequence_number` on
//!   every event, `response.completed` with the whole output), and a
//!   streamed recall round (a message and a `tool_result_read`
//!   `function_call`, then the answer). The bare forwarder reads no body,
//!   so it is measured beside the chat rows only.
//!
//! - The Gemini API (`src/protocol/gemini/`) beside the others, by the
//!   same method: a small `:generateContent` request and a small
//!   `:streamGenerateContent?alt=sse` one in the passthrough rows (the
//!   streamed one beside the streamed chat row), the 1 MB output as a
//!   `functionResponse`'s `response.output` string, paced Gemini streams
//!   (`data: <GenerateContentResponse>` + CRLF CRLF per event, the last with
//!   `finishReason`), and a streamed recall round (text, then a signed
//!   `tool_result_read` `functionCall`, then the answer). The mock's
//!   answers are in `support::gemini`, the requests in `loadbench/gemini.rs`.
//!
//! - Issue 16 item 6: with `LOADBENCH_STORE_URL` (a PostgreSQL URL), a
//!   second proxy stores in PostgreSQL (a fresh schema of that database,
//!   dropped at the end), placed as the first one is, and the 1 MB chat
//!   output's added latency (first seen back to back, first seen after an
//!   idle gap, repeated) is measured through both proxies side by side,
//!   interleaved request by request (the same new body to each: each
//!   store sees it first), with the ratio. The database server itself is
//!   not pinned.
//!
//! Environment: `LOADBENCH_ONLY=large|paced|anthropic|responses|gemini|streams|stores`
//! (only those rows; `anthropic`: the messages rows and the chat rows
//! beside them; `responses`: the Responses rows and the chat and messages
//! rows beside them; `gemini`: the Gemini rows and the chat rows beside
//! them, streamed chat included, every other API's left out; `stores`:
//! only the SQLite-beside-PostgreSQL 1 MB rows, which need
//! `LOADBENCH_STORE_URL`), `LOADBENCH_STORE_URL` (see
//! above; the `large` and default runs add those rows when it is set),
//! `LOADBENCH_PROXY_CPU` (set by `scripts/load`: the CPU of the proxy and
//! the bare forwarder), `LOADBENCH_PROXY_LOG` (the proxy's log filter),
//! `LOADBENCH_TRACE=DIR` (every paced request's latency, see
//! [`write_trace`]), `LOADBENCH_PACED_RATE` (the paced rows' rate, 2,000
//! requests a second). The proxy inherits the rest, e.g.
//! `TOOLSTUB_STORE_DURABILITY=normal`.

mod support;

/// The Gemini API's request shapes.
#[path = "loadbench/gemini.rs"]
mod gemini;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROUNDS: usize = 5;
const BATCH: Duration = Duration::from_millis(1500);
/// The open-loop rate of the paced runs: well under both paths' capacity, so
/// latency is the proxy's cost, not queueing behind a saturated core.
/// `LOADBENCH_PACED_RATE` sets another, to compare CPU per request at a
/// load nearer the proxy's capacity.
const PACED_RATE: u32 = 2000;

fn paced_rate() -> u32 {
    std::env::var("LOADBENCH_PACED_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&rate| rate > 0)
        .unwrap_or(PACED_RATE)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag] = args.as_slice() {
        if flag == "--mock" {
            // The mock alone (for `scripts/wrk-passthrough`): its address on
            // stdout, then it serves until killed.
            let addr = support::start_streaming_mock(Arc::new(mock_answer), 1);
            println!("{addr}");
            loop {
                std::thread::park();
            }
        }
    }
    if let [_, flag, listen, upstream] = args.as_slice() {
        if flag == "--forwarder" {
            return forwarder::run(
                listen.parse().expect("listen address"),
                upstream.parse().expect("upstream address"),
            );
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let mock_addr = support::start_streaming_mock(Arc::new(mock_answer), 1);
    let dir = std::env::temp_dir().join(format!("toolstub-loadbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let proxy_port = support::free_port();
    let bin =
        std::env::var("TOOLSTUB_BIN").unwrap_or_else(|_| "target/release/toolstub".to_string());
    // With LOADBENCH_PROXY_CPU (set by scripts/load), the proxy runs on its
    // own core, as it would in production, while this process (load
    // generator and mock) keeps to the other: the added latency is then the
    // proxy's work and hops, not its fight with the load generator for CPU.
    let pinned = std::env::var("LOADBENCH_PROXY_CPU").ok();
    let mut proxy = placed(pinned.as_deref(), bin.as_ref());
    proxy
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{proxy_port}"),
            "--upstream",
            &format!("http://{mock_addr}"),
            "--db",
            &dir.join("bench.db").to_string_lossy(),
        ])
        .env_remove("TOOLSTUB_BIN")
        .env(
            "TOOLSTUB_SERVER_LOG_LEVEL",
            std::env::var("LOADBENCH_PROXY_LOG").unwrap_or_else(|_| "warn".to_string()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let proxy = Reaped(
        proxy
            .spawn()
            .expect("start the proxy (build it with cargo build --release)"),
    );
    let proxy_addr: SocketAddr = format!("127.0.0.1:{proxy_port}").parse().expect("addr");
    // The bare forwarder: same placement as the proxy, same hops, no work.
    let bare_addr: SocketAddr = format!("127.0.0.1:{}", support::free_port())
        .parse()
        .expect("addr");
    let me = std::env::current_exe().expect("this executable");
    let mut bare = placed(pinned.as_deref(), me.as_os_str());
    bare.args([
        "--forwarder",
        &bare_addr.to_string(),
        &mock_addr.to_string(),
    ])
    .stdout(Stdio::null());
    let bare = Reaped(bare.spawn().expect("start the bare forwarder"));
    // Issue 16: the same proxy on a PostgreSQL store, in a schema of its own.
    let store_url = std::env::var("LOADBENCH_STORE_URL")
        .ok()
        .filter(|u| !u.is_empty());
    let pg_schema = store_url
        .as_deref()
        .map(|url| rt.block_on(pg_schema::Schema::create_in(url)));
    let pg_proxy = pg_schema.as_ref().map(|schema| {
        let port = support::free_port();
        let mut proxy = placed(pinned.as_deref(), bin.as_ref());
        proxy
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--upstream",
                &format!("http://{mock_addr}"),
                "--store-url",
                &schema.store_url(),
            ])
            .env_remove("TOOLSTUB_BIN")
            .env(
                "TOOLSTUB_SERVER_LOG_LEVEL",
                std::env::var("LOADBENCH_PROXY_LOG").unwrap_or_else(|_| "warn".to_string()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let child = Reaped(proxy.spawn().expect("start the PostgreSQL proxy"));
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        (child, addr)
    });
    let targets = Targets {
        mock: mock_addr,
        proxy: proxy_addr,
        bare: bare_addr,
        proxy_pid: proxy.0.id(),
        bare_pid: bare.0.id(),
    };
    rt.block_on(async {
        wait_healthy(proxy_addr, "the proxy").await;
        wait_healthy(bare_addr, "the bare forwarder").await;
        if let Some((_, addr)) = &pg_proxy {
            wait_healthy(*addr, "the proxy on PostgreSQL").await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let idle_rss = support::rss_kib(targets.proxy_pid);
        println!("## toolstub load benchmark\n");
        println!("proxy: {bin}; mock upstream in-process; {ROUNDS} interleaved rounds of {} ms per configuration; medians over rounds.\n", BATCH.as_millis());
        match &pinned {
            Some(cpu) => println!("CPU placement: proxy pinned to CPU {cpu}; load generator and mock share the other CPU(s).\n"),
            None => println!("CPU placement: none (proxy, load generator and mock share every CPU).\n"),
        }
        let only = std::env::var("LOADBENCH_ONLY").unwrap_or_default();
        let only = Only::from(only.as_str());
        let chat_small = Payload::new(Api::Chat, &br#"{"model":"m","messages":[{"role":"user","content":"hello"}]}"#[..]);
        let chat_stream = Payload::new(Api::Chat, &br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}"#[..]);
        let messages_small = Payload::new(Api::Messages, &br#"{"model":"claude-mock","max_tokens":1024,"messages":[{"role":"user","content":"hello"}]}"#[..]);
        let responses_small = Payload::new(Api::Responses, &br#"{"model":"m","input":[{"role":"user","content":"hello"}]}"#[..]);
        let gemini_small = Payload::new(Api::Gemini, gemini::SMALL);
        let gemini_stream = Payload::new(Api::GeminiStream, gemini::SMALL);
        let mut loaded_rss = 0;
        // (name, request, whether the bare forwarder is measured beside
        // it): the bare forwarder reads no body, so the messages,
        // Responses and Gemini rows use the chat row's of their
        // configuration.
        let scenarios: Vec<(&str, &Payload, bool)> = match only {
            Only::Large | Only::Streams | Only::Stores => Vec::new(),
            Only::Anthropic => vec![("non-streaming", &chat_small, true), (MESSAGES, &messages_small, false)],
            Only::Responses => vec![("non-streaming", &chat_small, true), (MESSAGES, &messages_small, false), (RESPONSES, &responses_small, false)],
            Only::Gemini => vec![("non-streaming", &chat_small, true), (GEMINI, &gemini_small, false), ("streaming", &chat_stream, true), (GEMINI_STREAM, &gemini_stream, false)],
            Only::All | Only::Paced => vec![("non-streaming", &chat_small, true), (MESSAGES, &messages_small, false), (RESPONSES, &responses_small, false), (GEMINI, &gemini_small, false), ("streaming", &chat_stream, true), (GEMINI_STREAM, &gemini_stream, false)],
        };
        let paced = Some(paced_rate());
        let configurations: &[(usize, Option<u32>)] = if only == Only::Paced {
            &[(32, paced)]
        } else {
            &[(1, None), (32, None), (32, paced)]
        };
        // Configuration by configuration, every scenario in turn, so the
        // chat and messages rows of one configuration run minutes apart at
        // most; printed scenario by scenario.
        let mut rows = Vec::new();
        for (c, &(concurrency, rate)) in configurations.iter().enumerate() {
            for (s, &(name, body, with_bare)) in scenarios.iter().enumerate() {
                let row = compare(&targets, body, concurrency, rate, with_bare).await;
                let name = match rate {
                    Some(r) => format!("{name}, c={concurrency} paced at {r} req/s"),
                    None => format!("{name}, c={concurrency} saturating"),
                };
                loaded_rss = loaded_rss.max(support::rss_kib(targets.proxy_pid));
                rows.push((s, c, name, row));
            }
        }
        rows.sort_by_key(|&(s, c, _, _)| (s, c));
        if !rows.is_empty() {
            println!("| scenario | direct p50 | proxy p50 | added p50 | direct p99 | proxy p99 | added p99 | direct req/s | proxy req/s | proxy CPU per request |");
            println!("|---|---|---|---|---|---|---|---|---|---|");
            for (_, _, name, row) in &rows {
                println!(
                    "| {name} | {} | {} | **{}** | {} | {} | **{}** | {:.0} | {:.0} | {:.1} µs |",
                    ms(row.direct_p50), ms(row.proxy_p50), ms(row.added_p50()),
                    ms(row.direct_p99), ms(row.proxy_p99), ms(row.added_p99()),
                    row.direct_rps, row.proxy_rps, row.proxy_cpu * 1e6
                );
            }
            println!();
            println!("The floor on this machine: a bare hyper forwarder (no parsing, no rewrite, no metrics: `loadbench --forwarder`), placed as the proxy is, measured in the same interleaved rounds. Latency it adds is the hops' and the placement's, which any proxy pays.\n");
            println!("| scenario | bare forwarder added p50 | toolstub added p50 | bare forwarder added p99 | toolstub added p99 | toolstub p99 over bare | CPU per request, bare / toolstub |");
            println!("|---|---|---|---|---|---|---|");
            for (_, _, name, row) in &rows {
                if row.bare_cpu.is_nan() {
                    continue;
                }
                println!(
                    "| {name} | {} | {} | {} | {} | **{}** | {} / {} µs |",
                    ms(row.bare_added_p50), ms(row.added_p50()),
                    ms(row.bare_added_p99), ms(row.added_p99()),
                    ms(row.added_p99() - row.bare_added_p99),
                    us(row.bare_cpu), us(row.proxy_cpu)
                );
            }
            println!();
            print_passthrough_beside(&rows);
        }
        if only == Only::Paced {
            return;
        }
        if only != Only::Streams && only != Only::Stores {
            let shapes: &[Shape] = &[
                Shape { name: "chat, `role: tool` string", api: Api::Chat, build: large_body },
                Shape { name: "messages, `tool_result` string content", api: Api::Messages, build: |salt| anthropic_large_body(salt, false) },
                Shape { name: "messages, `tool_result` content as 4 text blocks", api: Api::Messages, build: |salt| anthropic_large_body(salt, true) },
                Shape { name: "responses, `function_call_output` string", api: Api::Responses, build: |salt| responses_large_body(salt, false) },
                Shape { name: "responses, `function_call_output` as 4 `input_text` parts", api: Api::Responses, build: |salt| responses_large_body(salt, true) },
                Shape { name: "gemini, `functionResponse.response.output` string", api: Api::Gemini, build: gemini::large_body },
            ];
            // Chat's shape stays first: the table above is `costs[0]`.
            let shapes: Vec<&Shape> = shapes.iter().filter(|s| only.covers(s.api)).collect();
            // The headline row: one client's 1 MB outputs back to back, the
            // store seeing only them (as an agent's burst of turns would).
            // Interleaved with the other five shapes' new outputs (below),
            // the writer is never quiet and indexes 5 MB more between two
            // of these: that row measures a saturated store, not this cost.
            let alone = large_output_cost(mock_addr, proxy_addr, &shapes[..1], 0, only == Only::All).await;
            let chat = &alone[0];
            check_baseline(chat.first_seen);
            let costs = large_output_cost(mock_addr, proxy_addr, &shapes, 1, false).await;
            loaded_rss = loaded_rss.max(support::rss_kib(targets.proxy_pid));
            println!("| request with a 1 MB JSON tool output (c=1, median of {} each) | added latency |", chat.samples);
            println!("|---|---|");
            println!("| first seen, back to back (new content: synopsis, SHA-256, durable insert; chat alone) | **{}** |", ms(chat.first_seen));
            if let Some(after_idle) = chat.first_seen_after_idle {
                println!("| first seen, each after {} ms idle (as between agent turns) | **{}** |", IDLE_GAP.as_millis(), ms(after_idle));
            }
            println!("| repeated turn (same content again) | **{}** ({:.2} ms per MB of body) |", ms(chat.repeated), chat.repeated * 1e3 / (chat.body_bytes as f64 / 1e6));
            println!();
            println!("The same 1 MB output in each API's shape, the shapes interleaved request by request (c=1, median of {} each; added latency over the direct request of the same body):\n", chat.samples);
            println!("| shape | body | direct | first seen, back to back | repeated turn | repeated, per MB of body |");
            println!("|---|---|---|---|---|---|");
            for (shape, cost) in shapes.iter().zip(&costs) {
                println!(
                    "| {} | {:.2} MB | {} | **{}** | **{}** | {:.2} ms |",
                    shape.name, cost.body_bytes as f64 / 1e6, ms(cost.direct), ms(cost.first_seen), ms(cost.repeated),
                    cost.repeated * 1e3 / (cost.body_bytes as f64 / 1e6)
                );
            }
            println!();
        }
        if matches!(only, Only::All | Only::Large | Only::Stores) {
            match &pg_proxy {
                Some((_, pg_addr)) => {
                    store_rows(mock_addr, proxy_addr, *pg_addr).await;
                    loaded_rss = loaded_rss.max(support::rss_kib(targets.proxy_pid));
                }
                None if only == Only::Stores => {
                    panic!("LOADBENCH_ONLY=stores needs LOADBENCH_STORE_URL (a PostgreSQL URL)")
                }
                None => println!("(The SQLite-beside-PostgreSQL 1 MB rows are skipped: LOADBENCH_STORE_URL is not set.)\n"),
            }
        }
        if only != Only::Large && only != Only::Stores {
            stream_rows(&targets, only).await;
            loaded_rss = loaded_rss.max(support::rss_kib(targets.proxy_pid));
            recall_rows(&targets, only).await;
            loaded_rss = loaded_rss.max(support::rss_kib(targets.proxy_pid));
        }
        println!("| proxy RSS | MiB |");
        println!("|---|---|");
        println!("| idle, after start | {:.1} |", idle_rss as f64 / 1024.0);
        println!("| peak seen under load | {:.1} |", loaded_rss as f64 / 1024.0);
    });
    drop((proxy, bare, pg_proxy));
    drop(pg_schema);
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(regression) = REGRESSION.get() {
        eprintln!("\nloadbench: REGRESSION: {regression}");
        std::process::exit(3);
    }
}

/// The stored baseline of the load bench's first-seen row, measured on this
/// kind of machine; a run at twice it or more fails (exit status 3).
const BASELINE: &str = "benches/loadbench-baseline.json";
/// A regression found by [`check_baseline`], reported once the proxy is down.
static REGRESSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Compares the first-seen 1 MB chat row (seconds) with [`BASELINE`].
fn check_baseline(first_seen: f64) {
    let stored = std::fs::read_to_string(BASELINE)
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|v| v["first_seen_1mb_chat_ms"].as_f64());
    let Some(baseline_ms) = stored else {
        println!("(No first-seen baseline at {BASELINE}: nothing to compare.)\n");
        return;
    };
    let ratio = first_seen * 1e3 / baseline_ms;
    println!("First seen against the stored baseline ({BASELINE}: {baseline_ms:.3} ms): **{ratio:.2}x** (a run at 2x or more fails).\n");
    if ratio >= 2.0 {
        let _ = REGRESSION.set(format!(
            "a first-seen 1 MB chat output added {:.3} ms, {ratio:.2}x the stored baseline of {baseline_ms:.3} ms ({BASELINE})",
            first_seen * 1e3
        ));
    }
}

/// `program`, pinned to `cpu` with taskset when given.
fn placed(cpu: Option<&str>, program: &std::ffi::OsStr) -> Command {
    match cpu {
        Some(cpu) => {
            let mut c = Command::new("taskset");
            c.args(["-c", cpu]).arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// A child process killed and reaped when dropped, also when the
/// benchmark panics, so no proxy or forwarder outlives it.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ms(seconds: f64) -> String {
    if seconds.is_nan() {
        return "-".to_string();
    }
    format!("{:.3} ms", seconds * 1e3)
}

/// Microseconds, "-" when not measured.
fn us(seconds: f64) -> String {
    if seconds.is_nan() {
        return "-".to_string();
    }
    format!("{:.1}", seconds * 1e6)
}

struct Row {
    /// The proxy's CPU time per proxied request (user + system), seconds.
    proxy_cpu: f64,
    /// The same for the bare forwarder.
    bare_cpu: f64,
    direct_p50: f64,
    proxy_p50: f64,
    direct_p99: f64,
    proxy_p99: f64,
    direct_rps: f64,
    proxy_rps: f64,
    /// The bare forwarder's added latency, against the direct path measured
    /// beside it.
    bare_added_p50: f64,
    bare_added_p99: f64,
}

impl Row {
    /// What the proxy adds to the direct path's p50.
    fn added_p50(&self) -> f64 {
        self.proxy_p50 - self.direct_p50
    }

    /// What the proxy adds to the direct path's p99.
    fn added_p99(&self) -> f64 {
        self.proxy_p99 - self.direct_p99
    }
}

/// Where the load goes: the mock (direct), the proxy, the bare forwarder.
struct Targets {
    mock: SocketAddr,
    proxy: SocketAddr,
    bare: SocketAddr,
    proxy_pid: u32,
    bare_pid: u32,
}

/// One passthrough row: the direct path beside the proxy and (`with_bare`)
/// beside the bare forwarder, in alternating batches or side by side.
async fn compare(
    targets: &Targets,
    body: &Payload,
    concurrency: usize,
    rate: Option<u32>,
    with_bare: bool,
) -> Row {
    let client = support::client();
    let (mock, proxy, bare) = (targets.mock, targets.proxy, targets.bare);
    let paths: &[(&str, SocketAddr)] = if with_bare {
        &[("proxy", proxy), ("bare", bare)]
    } else {
        &[("proxy", proxy)]
    };
    // Warm every path (connections, pools).
    for target in [mock, proxy, bare] {
        let warm = Duration::from_millis(300);
        batch(&client, target, body, concurrency, warm, None).await;
    }
    // Per path, one entry per round: direct (beside the proxy), proxy,
    // direct (beside the bare forwarder), bare forwarder.
    let mut stats: [Stats; 4] = Default::default();
    // CPU time per request of the proxy and of the bare forwarder.
    let mut cpu: [Vec<f64>; 2] = Default::default();
    for round in 0..ROUNDS {
        for (i, &(who, target)) in paths.iter().enumerate() {
            let pid = if who == "proxy" {
                targets.proxy_pid
            } else {
                targets.bare_pid
            };
            // Each batch: (its trace, when it started, how long it ran);
            // and the CPU time the other path's process spent meanwhile.
            let (direct, other, spent) = match rate {
                // Paced: the direct path and the other one side by side, so
                // the machine's slow moments fall on both alike. Which of
                // the two goes first in a slot alternates by round.
                Some(_) => {
                    let cpu_before = cpu_seconds(pid);
                    let order = if round % 2 == 0 {
                        [mock, target]
                    } else {
                        [target, mock]
                    };
                    let (mut traces, start, elapsed) =
                        side_by_side(&client, &order, body, concurrency, BATCH, rate).await;
                    let spent = cpu_seconds(pid) - cpu_before;
                    if round % 2 == 1 {
                        traces.reverse();
                    }
                    let [direct, other]: [Vec<(f64, f64)>; 2] =
                        traces.try_into().expect("two traces");
                    ((direct, start, elapsed), (other, start, elapsed), spent)
                }
                // Saturating: one after the other (side by side they would
                // share the load generator's CPU).
                None => {
                    let direct = batch(&client, mock, body, concurrency, BATCH, rate).await;
                    let cpu_before = cpu_seconds(pid);
                    let other = batch(&client, target, body, concurrency, BATCH, rate).await;
                    (direct, other, cpu_seconds(pid) - cpu_before)
                }
            };
            cpu[i].push(spent / other.0.len().max(1) as f64);
            let beside = format!("direct-beside-{who}");
            for (j, (name, (trace, start, elapsed))) in [(beside.as_str(), direct), (who, other)]
                .into_iter()
                .enumerate()
            {
                write_trace(name, rate, &trace, start);
                stats[2 * i + j].add(&trace, elapsed);
            }
        }
    }
    let [d, p, d2, b] = stats;
    let [proxy_cpu, bare_cpu] = cpu;
    // Not measured: NaN (printed as "-").
    Row {
        proxy_cpu: median(proxy_cpu),
        bare_cpu: if with_bare {
            median(bare_cpu)
        } else {
            f64::NAN
        },
        direct_p50: median(d.p50),
        proxy_p50: median(p.p50),
        direct_p99: median(d.p99),
        proxy_p99: median(p.p99),
        direct_rps: median(d.rps),
        proxy_rps: median(p.rps),
        bare_added_p50: median(b.p50) - median(d2.p50),
        bare_added_p99: median(b.p99) - median(d2.p99),
    }
}

/// One path's p50, p99 and throughput, one entry per batch.
#[derive(Default)]
struct Stats {
    p50: Vec<f64>,
    p99: Vec<f64>,
    rps: Vec<f64>,
}

impl Stats {
    fn add(&mut self, trace: &[(f64, f64)], elapsed: f64) {
        let mut lat: Vec<f64> = trace.iter().map(|&(_, l)| l).collect();
        lat.sort_by(|a, b| a.total_cmp(b));
        self.p50.push(percentile(&lat, 0.50));
        self.p99.push(percentile(&lat, 0.99));
        self.rps.push(lat.len() as f64 / elapsed);
    }
}

/// With `LOADBENCH_TRACE=DIR`, each paced batch's requests go to a file
/// (`DIR/{path}-{rate}-{n}.tsv`, path `proxy`, `bare`, `direct-beside-proxy`
/// or `direct-beside-bare`: scheduled offset and latency, seconds),
/// headed by the batch's start on CLOCK_MONOTONIC in nanoseconds, to line
/// slow requests up with `perf sched record -k CLOCK_MONOTONIC`.
fn write_trace(who: &str, rate: Option<u32>, trace: &[(f64, f64)], start: Instant) {
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let (Ok(dir), Some(rate)) = (std::env::var("LOADBENCH_TRACE"), rate) else {
        return;
    };
    let ago = start.elapsed();
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let start_ns = now.tv_sec * 1_000_000_000 + now.tv_nsec - ago.as_nanos() as i64;
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut text = format!("# {start_ns}\n");
    for (at, latency) in trace {
        text.push_str(&format!("{at:.6}\t{latency:.6}\n"));
    }
    let path = format!("{dir}/{who}-{rate}-{n}.tsv");
    if let Err(e) = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, text)) {
        eprintln!("LOADBENCH_TRACE: cannot write {path}: {e}");
    }
}

type BenchClient = support::HttpClient;

/// `concurrency` workers sending requests for `duration`: back to back, or
/// (with `rate`) on an open-loop schedule, latency counted from the
/// scheduled time when a worker falls behind, so a stall is not hidden.
/// Returns every request's (offset from the start, latency), in seconds,
/// when the batch started, and how long it ran (seconds).
async fn batch(
    client: &BenchClient,
    target: SocketAddr,
    body: &Payload,
    concurrency: usize,
    duration: Duration,
    rate: Option<u32>,
) -> (Vec<(f64, f64)>, Instant, f64) {
    let (mut traces, start, elapsed) =
        side_by_side(client, &[target], body, concurrency, duration, rate).await;
    (traces.pop().unwrap_or_default(), start, elapsed)
}

/// [`batch`] against several targets at once, `concurrency` workers and
/// `rate` each, target `i`'s schedule offset by `i / targets.len()` of a
/// slot: whatever slows the machine meanwhile slows all of them. (At 2,000
/// req/s a slot is 0.5 ms, under tokio's 1 ms timer tick, so requests due
/// in the same tick wake together, the first target's first.) Returns one
/// trace per target.
async fn side_by_side(
    client: &BenchClient,
    targets: &[SocketAddr],
    body: &Payload,
    concurrency: usize,
    duration: Duration,
    rate: Option<u32>,
) -> (Vec<Vec<(f64, f64)>>, Instant, f64) {
    let started = Instant::now();
    let mut tasks: Vec<Vec<_>> = Vec::new();
    for (i, &target) in targets.iter().enumerate() {
        let offset = i as f64 / targets.len() as f64;
        let mut workers = Vec::new();
        for worker in 0..concurrency {
            let client = client.clone();
            let body = body.clone();
            workers.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut k = 0u64;
                while started.elapsed() < duration {
                    let t = match rate {
                        Some(rate) => {
                            let slot = ((k * concurrency as u64 + worker as u64) as f64 + offset)
                                / f64::from(rate);
                            let at = started + Duration::from_secs_f64(slot);
                            k += 1;
                            if Instant::now() < at {
                                // On time: the timer's own lateness (tokio's
                                // wheel ticks per millisecond) is the
                                // generator's, not the target's; count from
                                // the wake-up.
                                tokio::time::sleep_until(at.into()).await;
                                Instant::now()
                            } else {
                                // Behind schedule (the last response was
                                // late): count from when this request should
                                // have gone, so a stall is not hidden.
                                at
                            }
                        }
                        None => Instant::now(),
                    };
                    request(&client, target, &body).await;
                    lat.push(((t - started).as_secs_f64(), t.elapsed().as_secs_f64()));
                }
                lat
            }));
        }
        tasks.push(workers);
    }
    let mut traces = Vec::new();
    for workers in tasks {
        let mut all = Vec::new();
        for w in workers {
            all.extend(w.await.expect("worker"));
        }
        traces.push(all);
    }
    (traces, started, started.elapsed().as_secs_f64())
}

/// Which API a request speaks: the path and the credential header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Api {
    Chat,
    Messages,
    Responses,
    /// Gemini's `:generateContent`.
    Gemini,
    /// Gemini's `:streamGenerateContent?alt=sse` (whether a Gemini request
    /// streams is in its path).
    GeminiStream,
}

impl Api {
    fn path(self) -> &'static str {
        match self {
            Api::Chat => "/v1/chat/completions",
            Api::Messages => "/v1/messages",
            Api::Responses => "/v1/responses",
            Api::Gemini => gemini::GENERATE_PATH,
            Api::GeminiStream => gemini::STREAM_PATH,
        }
    }

    fn is_gemini(self) -> bool {
        matches!(self, Api::Gemini | Api::GeminiStream)
    }
}

/// One request to send again and again: its API, its body, and (for the
/// mock's paced streams) the gap between events it asks for.
#[derive(Clone)]
struct Payload {
    api: Api,
    body: Bytes,
    gap: Option<Duration>,
}

impl Payload {
    fn new(api: Api, body: impl Into<Bytes>) -> Payload {
        Payload {
            api,
            body: body.into(),
            gap: None,
        }
    }

    fn paced(mut self, gap: Duration) -> Payload {
        self.gap = Some(gap);
        self
    }

    fn to(&self, target: SocketAddr) -> http::Request<Full<Bytes>> {
        let builder = http::Request::builder()
            .method("POST")
            .uri(format!("http://{target}{}", self.api.path()))
            .header("content-type", "application/json");
        let mut builder = match self.api {
            Api::Chat | Api::Responses => builder.header("authorization", "Bearer sk-bench"),
            Api::Messages => builder
                .header("x-api-key", "sk-ant-bench")
                .header("anthropic-version", "2023-06-01"),
            Api::Gemini | Api::GeminiStream => builder.header("x-goog-api-key", "AIza-bench"),
        };
        if let Some(gap) = self.gap {
            builder = builder.header(support::GAP_HEADER, gap.as_micros().to_string());
        }
        builder.body(Full::new(self.body.clone())).expect("request")
    }
}

async fn request(client: &BenchClient, target: SocketAddr, payload: &Payload) {
    let response = client.request(payload.to(target)).await.expect("response");
    assert!(
        response.status().is_success(),
        "status {}",
        response.status()
    );
    let _ = response.into_body().collect().await.expect("body");
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    percentile(&v, 0.5)
}

/// What `LOADBENCH_ONLY` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Only {
    All,
    /// The 1 MB rows.
    Large,
    /// The paced passthrough rows.
    Paced,
    /// The rows of the Anthropic route and the chat rows beside them
    /// (passthrough non-streaming, 1 MB shapes, streams, recall rounds).
    Anthropic,
    /// The streamed rows: added delay per event, recall rounds.
    Streams,
    /// The rows of the Responses route and the chat and messages rows
    /// beside them (as `Anthropic`, with the Responses rows added).
    Responses,
    /// The 1 MB rows through a SQLite proxy beside a PostgreSQL one.
    Stores,
    /// The rows of the Gemini API and the chat rows beside them
    /// (passthrough whole and streamed, the 1 MB shape, streams, recall
    /// rounds); no other API's.
    Gemini,
}

impl Only {
    fn from(value: &str) -> Only {
        match value {
            "large" => Only::Large,
            "paced" => Only::Paced,
            "anthropic" => Only::Anthropic,
            "streams" => Only::Streams,
            "responses" => Only::Responses,
            "gemini" => Only::Gemini,
            "stores" => Only::Stores,
            "" => Only::All,
            other => panic!(
                "LOADBENCH_ONLY={other}: expected large, paced, anthropic, responses, gemini, streams or stores"
            ),
        }
    }

    /// Whether the 1 MB, stream and recall rows of `api` run: `gemini`
    /// runs chat's beside its own only; `anthropic` and `responses` run
    /// every API's but Gemini's (as before the Gemini rows).
    fn covers(self, api: Api) -> bool {
        match self {
            Only::Gemini => api == Api::Chat || api.is_gemini(),
            Only::Anthropic | Only::Responses => !api.is_gemini(),
            _ => true,
        }
    }
}

/// The scenario name of the small Anthropic Messages request.
const MESSAGES: &str = "messages (Anthropic)";
/// The scenario name of the small OpenAI Responses request.
const RESPONSES: &str = "responses (OpenAI)";

/// The scenario names of the small Gemini requests, whole and streamed.
const GEMINI: &str = "gemini (Google)";
const GEMINI_STREAM: &str = "gemini streaming (Google)";

/// The columns of the passthrough rows side by side: (column, the prefix
/// of its rows' names, the prefix of the chat rows it is compared with).
const BESIDE: [(&str, &str, Option<&str>); 6] = [
    ("chat", "non-streaming,", None),
    ("messages", MESSAGES, Some("non-streaming,")),
    ("responses", RESPONSES, Some("non-streaming,")),
    ("gemini", GEMINI, Some("non-streaming,")),
    ("streamed chat", "streaming,", None),
    ("streamed gemini", GEMINI_STREAM, Some("streaming,")),
];

/// The passthrough rows of each configuration beside each other (every
/// API's measured in this run, a streamed one against streamed chat),
/// with the bare forwarder measured beside the chat row.
fn print_passthrough_beside(rows: &[(usize, usize, String, Row)]) {
    let of = |prefix: &str, c: usize| {
        rows.iter()
            .find(|(_, rc, name, _)| *rc == c && name.starts_with(prefix))
            .map(|(_, _, name, row)| (name, row))
    };
    let measured = |prefix: &str| rows.iter().any(|(_, _, name, _)| name.starts_with(prefix));
    let columns: Vec<_> = BESIDE.iter().filter(|(_, p, _)| measured(p)).collect();
    if !measured("non-streaming,") || !columns.iter().any(|(_, _, base)| base.is_some()) {
        return;
    }
    let configurations: std::collections::BTreeSet<usize> = rows.iter().map(|r| r.1).collect();
    let mut lines = Vec::new();
    for c in configurations {
        let (Some((name, chat)), Some(cells)) = (
            of("non-streaming,", c),
            // Each column's row and the row it is compared with, when
            // all were measured in this configuration.
            columns
                .iter()
                .map(|&&(_, prefix, base)| {
                    let base = match base {
                        Some(b) => Some(of(b, c)?.1),
                        None => None,
                    };
                    Some((of(prefix, c)?.1, base))
                })
                .collect::<Option<Vec<_>>>(),
        ) else {
            continue;
        };
        // The compared columns in bold.
        let figure = |f: fn(&Row) -> f64| {
            cells
                .iter()
                .map(|(row, base)| match base {
                    Some(_) => format!("**{}**", ms(f(row))),
                    None => ms(f(row)),
                })
                .collect::<Vec<_>>()
                .join(" | ")
        };
        let cpu: Vec<String> = cells.iter().map(|(row, _)| us(row.proxy_cpu)).collect();
        let ratios: Vec<String> = cells
            .iter()
            .filter_map(|(row, base)| {
                Some(format!("{:.2}", row.proxy_cpu / base.as_ref()?.proxy_cpu))
            })
            .collect();
        let configuration = name.trim_start_matches("non-streaming, ");
        lines.push(format!(
            "| {configuration} | {} | {} | {} | {} | {} / {} µs | {} |",
            figure(Row::added_p50),
            ms(chat.bare_added_p50),
            figure(Row::added_p99),
            ms(chat.bare_added_p99),
            cpu.join(" / "),
            us(chat.bare_cpu),
            ratios.join(" / "),
        ));
    }
    let names: Vec<&str> = columns.iter().map(|(name, _, _)| *name).collect();
    let header = |figure: &str| {
        names
            .iter()
            .map(|name| format!("{name} added {figure}"))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let compared: Vec<String> = columns
        .iter()
        .filter_map(|(name, _, base)| {
            let base = BESIDE.iter().find(|(_, p, _)| Some(*p) == *base)?.0;
            Some(format!("{name} / {base}"))
        })
        .collect();
    println!("A small request with nothing over budget (forwarded byte for byte), each API's row in the same configuration minutes apart (a streamed one compared with streamed chat); the bare forwarder measured beside the chat row:\n");
    println!(
        "| configuration | {} | bare added p50 | {} | bare added p99 | CPU per request, {} / bare | CPU, {} |",
        header("p50"),
        header("p99"),
        names.join(" / "),
        compared.join(", ")
    );
    println!("|---|{}", "---|".repeat(2 * names.len() + 4));
    for line in lines {
        println!("{line}");
    }
    println!();
}

struct LargeCost {
    /// The direct request's median, back to back.
    direct: f64,
    first_seen: f64,
    first_seen_after_idle: Option<f64>,
    repeated: f64,
    samples: usize,
    body_bytes: usize,
}

/// A request shape of the 1 MB rows: its API and its body, given a salt
/// that makes the content new.
struct Shape {
    name: &'static str,
    api: Api,
    build: fn(u64) -> Bytes,
}

/// A JSON array of user objects of about 1 MB; `salt` makes the content new.
fn large_output(salt: u64) -> String {
    let mut items = Vec::new();
    let mut len = 0;
    let mut i = 0u64;
    while len < 1_000_000 {
        let item = format!("{{\"id\":{i},\"salt\":{salt},\"name\":\"user {i}\",\"email\":\"user{i}@example.com\",\"active\":true}}");
        len += item.len() + 1;
        items.push(item);
        i += 1;
    }
    format!("[{}]", items.join(","))
}

/// A chat body with one ~1 MB JSON tool output; `salt` makes the content new.
fn large_body(salt: u64) -> Bytes {
    let output = large_output(salt);
    let body = serde_json::json!({
        "model": "m",
        "messages": [
            {"role": "user", "content": "list the users"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "list_users", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": output},
        ]
    });
    Bytes::from(body.to_string())
}

/// The same output as a messages body's `tool_result`: its content a
/// string, or (`blocks`) four text blocks cut between array items, whose
/// joined text is the same JSON document.
fn anthropic_large_body(salt: u64, blocks: bool) -> Bytes {
    let output = large_output(salt);
    let content = if blocks {
        serde_json::Value::Array(
            quarters(&output)
                .into_iter()
                .map(|text| serde_json::json!({"type": "text", "text": text}))
                .collect(),
        )
    } else {
        serde_json::Value::String(output)
    };
    Bytes::from(anthropic_tool_body("list the users", content, false).to_string())
}

/// The same output as a Responses body's `function_call_output`: a string,
/// or (`parts`) four `input_text` parts cut between array items.
fn responses_large_body(salt: u64, parts: bool) -> Bytes {
    let output = large_output(salt);
    let output = if parts {
        serde_json::Value::Array(
            quarters(&output)
                .into_iter()
                .map(|text| serde_json::json!({"type": "input_text", "text": text}))
                .collect(),
        )
    } else {
        serde_json::Value::String(output)
    };
    Bytes::from(responses_tool_body("list the users", output, false).to_string())
}

/// A JSON array's text in four pieces cut between its items.
fn quarters(output: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut from = 0;
    for k in 1..4 {
        let at = output.len() * k / 4;
        let cut = output[at..]
            .find("},{")
            .map_or(output.len(), |i| at + i + 1);
        parts.push(&output[from..cut]);
        from = cut;
    }
    parts.push(&output[from..]);
    parts
}

/// A Responses body: a user message, a `function_call`, its
/// `function_call_output` with this output.
fn responses_tool_body(ask: &str, output: serde_json::Value, stream: bool) -> serde_json::Value {
    let mut body = serde_json::json!({
        "model": "m",
        "input": [
            {"type": "message", "role": "user", "content": ask},
            {"type": "function_call", "call_id": "call_1", "name": "list_users", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": output},
        ]
    });
    if stream {
        body["stream"] = true.into();
    }
    body
}

/// A messages body: a user message, an assistant `tool_use`, the user's
/// `tool_result` with this content.
fn anthropic_tool_body(ask: &str, content: serde_json::Value, stream: bool) -> serde_json::Value {
    let mut body = serde_json::json!({
        "model": "claude-mock",
        "max_tokens": 1024,
        "messages": [
            {"role": "user", "content": ask},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "list_users", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": content}]},
        ]
    });
    if stream {
        body["stream"] = true.into();
    }
    body
}

/// A chat body: a user message, an assistant tool call, the tool's output.
fn chat_tool_body(ask: &str, output: &str, stream: bool) -> serde_json::Value {
    let mut body = serde_json::json!({
        "model": "m",
        "messages": [
            {"role": "user", "content": ask},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "list_users", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": output},
        ]
    });
    if stream {
        body["stream"] = true.into();
    }
    body
}

/// The 1 MB rows: for each shape, a request with new content (first seen)
/// and the same request again (repeated), against the direct request of a
/// new body, the shapes interleaved request by request; with `idle`, the
/// first shape's first-seen request also after an idle gap. Each `series`
/// has contents of its own, so no call sees another's outputs again.
async fn large_output_cost(
    mock: SocketAddr,
    proxy: SocketAddr,
    shapes: &[&Shape],
    series: u64,
    idle: bool,
) -> Vec<LargeCost> {
    let client = support::client();
    let samples = 30;
    // Each shape its own contents: the memo and the store must not know
    // one shape's output from another's.
    let salt = |shape: usize, n: u64| series * 100_000_000 + shape as u64 * 1_000_000 + n;
    let payload = |shape: usize, n: u64| {
        Payload::new(shapes[shape].api, (shapes[shape].build)(salt(shape, n)))
    };
    let time = |target: SocketAddr, body: Payload| {
        let client = client.clone();
        async move {
            let t = Instant::now();
            request(&client, target, &body).await;
            t.elapsed().as_secs_f64()
        }
    };
    let repeated: Vec<Payload> = (0..shapes.len()).map(|i| payload(i, 0)).collect();
    // Warm-up, and the repeated bodies' first sight.
    for body in &repeated {
        time(proxy, body.clone()).await;
        time(mock, body.clone()).await;
    }
    let mut direct = vec![Vec::new(); shapes.len()];
    let mut first = vec![Vec::new(); shapes.len()];
    let mut repeat = vec![Vec::new(); shapes.len()];
    for n in 0..samples {
        for i in 0..shapes.len() {
            let fresh = payload(i, n as u64 + 1);
            direct[i].push(time(mock, fresh.clone()).await);
            first[i].push(time(proxy, fresh).await);
            repeat[i].push(time(proxy, repeated[i].clone()).await);
        }
    }
    // The same, each request after an idle gap, as between an agent's turns
    // (a model answers in seconds): the store's background work (indexing
    // the last output, the checkpoint that lets the WAL be reused) has run.
    // Back to back above, it never gets a quiet moment and the WAL only grows.
    let mut after_idle = None;
    if idle {
        let (mut direct_idle, mut first_idle) = (Vec::new(), Vec::new());
        for n in 0..samples {
            tokio::time::sleep(IDLE_GAP).await;
            direct_idle.push(time(mock, payload(0, 10_000 + 2 * n as u64)).await);
            tokio::time::sleep(IDLE_GAP).await;
            first_idle.push(time(proxy, payload(0, 10_001 + 2 * n as u64)).await);
        }
        after_idle = Some(median(first_idle) - median(direct_idle));
    }
    let mut costs = Vec::new();
    for (i, ((direct, first), repeat)) in direct.into_iter().zip(first).zip(repeat).enumerate() {
        let base = median(direct);
        costs.push(LargeCost {
            direct: base,
            first_seen: median(first) - base,
            first_seen_after_idle: if i == 0 { after_idle } else { None },
            repeated: median(repeat) - base,
            samples,
            body_bytes: repeated[i].body.len(),
        });
    }
    costs
}

/// Issue 16: the 1 MB chat output through the proxy on SQLite and the proxy
/// on PostgreSQL, side by side: for each sample a new body sent directly,
/// then to each proxy (both stores see it first; which proxy goes first
/// alternates), then the repeated body to each; then the same new-body
/// requests each after an idle gap. Prints the medians and the ratios.
async fn store_rows(mock: SocketAddr, sqlite: SocketAddr, postgres: SocketAddr) {
    let client = support::client();
    let samples = 30;
    let time = |target: SocketAddr, body: Payload| {
        let client = client.clone();
        async move {
            let t = Instant::now();
            request(&client, target, &body).await;
            t.elapsed().as_secs_f64()
        }
    };
    // Salts of their own: no other row stored these contents.
    let fresh = |n: u64| Payload::new(Api::Chat, large_body(7_000_000 + n));
    let repeated = fresh(0);
    let proxies = [sqlite, postgres];
    for &p in &proxies {
        time(p, repeated.clone()).await;
    }
    time(mock, repeated.clone()).await;
    let (mut direct, mut first, mut repeat) = (
        Vec::new(),
        [Vec::new(), Vec::new()],
        [Vec::new(), Vec::new()],
    );
    for n in 0..samples {
        let body = fresh(1 + n as u64);
        direct.push(time(mock, body.clone()).await);
        for k in 0..2 {
            let i = (k + n) % 2;
            first[i].push(time(proxies[i], body.clone()).await);
        }
        for k in 0..2 {
            let i = (k + n) % 2;
            repeat[i].push(time(proxies[i], repeated.clone()).await);
        }
    }
    let (mut direct_idle, mut first_idle) = (Vec::new(), [Vec::new(), Vec::new()]);
    for n in 0..samples {
        let body = fresh(10_000 + n as u64);
        tokio::time::sleep(IDLE_GAP).await;
        direct_idle.push(time(mock, body.clone()).await);
        for k in 0..2 {
            let i = (k + n) % 2;
            tokio::time::sleep(IDLE_GAP).await;
            first_idle[i].push(time(proxies[i], body.clone()).await);
        }
    }
    let base = median(direct);
    let base_idle = median(direct_idle);
    let [first_sqlite, first_pg] = first.map(|v| median(v) - base);
    let [repeat_sqlite, repeat_pg] = repeat.map(|v| median(v) - base);
    let [idle_sqlite, idle_pg] = first_idle.map(|v| median(v) - base_idle);
    println!("The 1 MB chat tool output ({:.2} MB body) through the proxy on SQLite and the proxy on PostgreSQL (loopback), side by side: c=1, {samples} samples each, interleaved request by request (the same new body to both; which goes first alternates); added latency over the direct request (median {}):\n", repeated.body.len() as f64 / 1e6, ms(base));
    println!("| request with a 1 MB JSON tool output | SQLite added p50 | PostgreSQL added p50 | PostgreSQL / SQLite |");
    println!("|---|---|---|---|");
    for (name, a, b) in [
        ("first seen, back to back", first_sqlite, first_pg),
        ("first seen, each after an idle gap", idle_sqlite, idle_pg),
        (
            "repeated turn (same content again)",
            repeat_sqlite,
            repeat_pg,
        ),
    ] {
        let name = name.replace("an idle gap", &format!("{} ms idle", IDLE_GAP.as_millis()));
        println!("| {name} | {} | {} | **{:.2}** |", ms(a), ms(b), b / a);
    }
    println!();
}

/// A schema of its own for the proxy on PostgreSQL (`LOADBENCH_STORE_URL`),
/// dropped with everything in it at the end (the tests' helper).
#[allow(dead_code)] // the tests' database lookups are not used here
#[path = "../tests/support/postgres.rs"]
mod pg_schema;

/// The mock's gap between the events of a paced stream.
const STREAM_GAP: Duration = Duration::from_millis(2);
/// Streams in flight per path in the streamed rows.
const STREAM_WORKERS: usize = 4;
/// The size of the tool output that makes the stub of the streamed rows
/// (over the 20,000-character threshold).
const STUB_OUTPUT_CHARS: usize = 25_000;

/// What an event of a stream is to the measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EventKind {
    /// `message_delta` (Anthropic), the finish chunk (chat),
    /// `response.completed` (Responses) or the `finishReason` event
    /// (Gemini): held by a splicer until it knows how the round ends.
    Closing,
    Other,
}

/// One streamed request, seen by the client: seconds to the first byte of
/// the body and to its last, and each stamped event's transit time (from
/// the mock's write to its arrival here).
struct Timed {
    first_byte: f64,
    last_byte: f64,
    events: Vec<(EventKind, f64)>,
}

async fn timed(client: &BenchClient, target: SocketAddr, payload: &Payload) -> Timed {
    let started = Instant::now();
    let response = client.request(payload.to(target)).await.expect("response");
    assert!(
        response.status().is_success(),
        "status {}",
        response.status()
    );
    let mut body = response.into_body();
    let (mut buffer, mut events, mut first_byte) = (Vec::new(), Vec::new(), None);
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.expect("stream").into_data() else {
            continue;
        };
        let now = support::now_ns();
        first_byte.get_or_insert_with(|| started.elapsed().as_secs_f64());
        buffer.extend_from_slice(&data);
        while let Some(end) = event_end(&buffer) {
            let event: Vec<u8> = buffer.drain(..end).collect();
            if let Some((kind, sent)) = stamp_of(&event) {
                events.push((kind, now.saturating_sub(sent) as f64 / 1e9));
            }
        }
    }
    let last_byte = started.elapsed().as_secs_f64();
    Timed {
        first_byte: first_byte.unwrap_or(last_byte),
        last_byte,
        events,
    }
}

/// Where the first event in `buffer` ends, its blank line included: LF LF,
/// or CRLF CRLF (Gemini's).
fn event_end(buffer: &[u8]) -> Option<usize> {
    let lf = memchr::memmem::find(buffer, b"\n\n").map(|i| i + 2);
    let crlf = memchr::memmem::find(buffer, b"\r\n\r\n").map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A stamped event's kind and send time.
fn stamp_of(event: &[u8]) -> Option<(EventKind, u64)> {
    const KEY: &[u8] = b"\"bench_ns\":";
    let at = memchr::memmem::find(event, KEY)? + KEY.len();
    let digits = event[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    let sent = std::str::from_utf8(&event[at..at + digits])
        .ok()?
        .parse()
        .ok()?;
    let closing = event.starts_with(b"event: message_delta")
        || event.starts_with(b"event: response.completed")
        || memchr::memmem::find(event, b"\"finish_reason\":\"").is_some()
        || memchr::memmem::find(event, b"\"finishReason\":\"").is_some();
    Some((
        if closing {
            EventKind::Closing
        } else {
            EventKind::Other
        },
        sent,
    ))
}

/// [`timed`] by `workers` workers per target, all targets at once, for
/// `duration`; one list of streams per target.
async fn streams_side_by_side(
    client: &BenchClient,
    targets: &[SocketAddr],
    payload: &Payload,
    workers: usize,
    duration: Duration,
) -> Vec<Vec<Timed>> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for &target in targets {
        let mut handles = Vec::new();
        for _ in 0..workers {
            let (client, payload) = (client.clone(), payload.clone());
            handles.push(tokio::spawn(async move {
                let mut out = Vec::new();
                while started.elapsed() < duration {
                    out.push(timed(&client, target, &payload).await);
                }
                out
            }));
        }
        tasks.push(handles);
    }
    let mut all = Vec::new();
    for handles in tasks {
        let mut streams = Vec::new();
        for h in handles {
            streams.extend(h.await.expect("stream worker"));
        }
        all.push(streams);
    }
    all
}

/// One path's figures in the streamed rows, one entry per batch.
#[derive(Default)]
struct StreamStats {
    first_byte: Vec<f64>,
    event_p50: Vec<f64>,
    event_p99: Vec<f64>,
    closing_p50: Vec<f64>,
    last_byte: Vec<f64>,
    streams: Vec<f64>,
}

impl StreamStats {
    fn add(&mut self, streams: &[Timed]) {
        let sorted = |mut v: Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            v
        };
        let first = sorted(streams.iter().map(|t| t.first_byte).collect());
        let last = sorted(streams.iter().map(|t| t.last_byte).collect());
        let events = sorted(
            streams
                .iter()
                .flat_map(|t| t.events.iter().map(|e| e.1))
                .collect(),
        );
        let closing = sorted(
            streams
                .iter()
                .flat_map(|t| {
                    t.events
                        .iter()
                        .filter(|e| e.0 == EventKind::Closing)
                        .map(|e| e.1)
                })
                .collect(),
        );
        self.first_byte.push(percentile(&first, 0.5));
        self.last_byte.push(percentile(&last, 0.5));
        self.event_p50.push(percentile(&events, 0.5));
        self.event_p99.push(percentile(&events, 0.99));
        self.closing_p50.push(percentile(&closing, 0.5));
        self.streams.push(streams.len() as f64);
    }
}

/// The delay each event of a paced stream adds through
/// the proxy, without a stub (the stream is forwarded) and with one (the
/// request offers the recall tools, so the protocol's splicer reads every
/// event), chat beside the other APIs `only` covers; the direct path and
/// the proxy side by side, the cases in turn in every round.
async fn stream_rows(targets: &Targets, only: Only) {
    let client = support::client();
    let output = support::output_text(0, STUB_OUTPUT_CHARS);
    let paced =
        |api, body: serde_json::Value| Payload::new(api, body.to_string()).paced(STREAM_GAP);
    let cases = [
        (
            "chat, no stub (forwarded)",
            paced(
                Api::Chat,
                serde_json::json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hello"}]}),
            ),
        ),
        (
            "chat, with a stub (splicer)",
            paced(Api::Chat, chat_tool_body("list the users", &output, true)),
        ),
        (
            "messages, no stub (forwarded)",
            paced(
                Api::Messages,
                serde_json::json!({"model": "claude-mock", "max_tokens": 1024, "stream": true, "messages": [{"role": "user", "content": "hello"}]}),
            ),
        ),
        (
            "messages, with a stub (splicer)",
            paced(
                Api::Messages,
                anthropic_tool_body("list the users", output.clone().into(), true),
            ),
        ),
        (
            "responses, no stub (forwarded)",
            paced(
                Api::Responses,
                serde_json::json!({"model": "m", "stream": true, "input": [{"role": "user", "content": "hello"}]}),
            ),
        ),
        (
            "responses, with a stub (splicer)",
            paced(
                Api::Responses,
                responses_tool_body("list the users", output.clone().into(), true),
            ),
        ),
        (
            "gemini, no stub (forwarded)",
            Payload::new(Api::GeminiStream, gemini::SMALL).paced(STREAM_GAP),
        ),
        (
            "gemini, with a stub (splicer)",
            paced(
                Api::GeminiStream,
                gemini::tool_body("list the users", &output),
            ),
        ),
    ];
    let cases: Vec<_> = cases
        .into_iter()
        .filter(|(_, payload)| only.covers(payload.api))
        .collect();
    let (mock, proxy) = (targets.mock, targets.proxy);
    for (_, payload) in &cases {
        for target in [proxy, mock] {
            for _ in 0..3 {
                timed(&client, target, payload).await;
            }
        }
    }
    let mut stats: Vec<[StreamStats; 2]> = cases.iter().map(|_| Default::default()).collect();
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for round in 0..ROUNDS {
        for (i, (_, payload)) in cases.iter().enumerate() {
            let order = if round % 2 == 0 {
                [mock, proxy]
            } else {
                [proxy, mock]
            };
            let before = cpu_seconds(targets.proxy_pid);
            let mut streams =
                streams_side_by_side(&client, &order, payload, STREAM_WORKERS, BATCH).await;
            let spent = cpu_seconds(targets.proxy_pid) - before;
            if round % 2 == 1 {
                streams.reverse();
            }
            stats[i][0].add(&streams[0]);
            stats[i][1].add(&streams[1]);
            cpu[i].push(spent / streams[1].len().max(1) as f64);
        }
    }
    let events = support::ANTHROPIC_TEXT_DELTAS + 5;
    println!("Streams of {events} events {} ms apart (`event: <type>` + `data:`; chat: `data:` chunks and `[DONE]`; Responses: `response.created`, `.in_progress`, `.output_item.added`, 15 `.output_text.delta`, `.output_item.done`, `.completed`; Gemini: {} `data:` responses ended by CRLF CRLF, one text part each, the last with `finishReason`), each event stamped by the mock as it leaves; {STREAM_WORKERS} streams in flight per path, the direct path and the proxy side by side; {ROUNDS} rounds of {} ms, the cases in turn; medians over rounds. Per event: transit from the mock's write to the client's read, proxy minus direct.\n", STREAM_GAP.as_millis(), support::gemini::TEXT_EVENTS, BATCH.as_millis());
    println!("| stream | direct first byte | added: first byte | added per event p50 | added per event p99 | added: `message_delta` / finish chunk / `response.completed` / `finishReason` event p50 | added: last byte p50 | streams per path | proxy CPU per stream |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (i, (name, _)) in cases.iter().enumerate() {
        let [d, p] = &stats[i];
        let added = |f: fn(&StreamStats) -> &Vec<f64>| median(f(p).clone()) - median(f(d).clone());
        println!(
            "| {name} | {} | **{}** | **{}** | **{}** | {} | {} | {:.0} | {:.1} µs |",
            ms(median(d.first_byte.clone())),
            ms(added(|s| &s.first_byte)),
            ms(added(|s| &s.event_p50)),
            ms(added(|s| &s.event_p99)),
            ms(added(|s| &s.closing_p50)),
            ms(added(|s| &s.last_byte)),
            median(p.streams.clone()),
            median(cpu[i].clone()) * 1e6
        );
    }
    println!();
}

/// A streamed recall round. Through the proxy, the
/// mock's first round streams a text block and a `tool_result_read` call
/// on the stub's ref, the proxy answers it and streams the second round's
/// answer into the same client stream; directly, the client sends the two
/// rounds itself (the second with the call answered). Added: the proxy's
/// stream to its last byte against the sum of the two direct rounds, and
/// to its first byte against the first round's.
async fn recall_rows(targets: &Targets, only: Only) {
    let client = support::client();
    let output = support::output_text(0, STUB_OUTPUT_CHARS);
    let ask = format!("{} the users", support::RECALL_MARKER);
    let read = format!("[lines 1-40 of the output]\n{}", &output[..2000]);
    let chat = recall_first(Api::Chat, &ask, &output);
    let mut chat_second = chat.clone();
    let arguments = r#"{"ref":"tr_none","offset":0,"limit":2000}"#;
    if let Some(messages) = chat_second["messages"].as_array_mut() {
        messages.push(serde_json::json!({"role": "assistant", "content": "word0 word1 word2 word3 word4 ", "tool_calls": [{"id": support::CHAT_RECALL_ID, "type": "function", "function": {"name": "tool_result_read", "arguments": arguments}}]}));
        messages.push(serde_json::json!({"role": "tool", "tool_call_id": support::CHAT_RECALL_ID, "content": read}));
    }
    let messages = recall_first(Api::Messages, &ask, &output);
    let mut messages_second = messages.clone();
    if let Some(list) = messages_second["messages"].as_array_mut() {
        list.push(serde_json::json!({"role": "assistant", "content": [
            {"type": "text", "text": "word0 word1 word2 word3 word4 "},
            {"type": "tool_use", "id": support::ANTHROPIC_RECALL_ID, "name": "tool_result_read", "input": {"ref": "tr_none", "offset": 0, "limit": 2000}}]}));
        list.push(serde_json::json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": support::ANTHROPIC_RECALL_ID, "content": read}]}));
    }
    let responses = recall_first(Api::Responses, &ask, &output);
    let mut responses_second = responses.clone();
    if let Some(input) = responses_second["input"].as_array_mut() {
        let arguments = r#"{"ref":"tr_none","limit":20}"#;
        input.push(serde_json::json!({"id": "msg_bench_1", "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": "word0 word1 word2 word3 word4 "}]}));
        input.push(serde_json::json!({"id": "fc_bench_1", "type": "function_call", "status": "completed",
            "arguments": arguments, "call_id": support::RESPONSES_RECALL_ID, "name": "tool_result_read"}));
        input.push(serde_json::json!({"type": "function_call_output", "call_id": support::RESPONSES_RECALL_ID, "output": read}));
    }
    let gemini = recall_first(Api::GeminiStream, &ask, &output);
    let gemini_second = gemini::recall_second(&gemini, &read);
    let paced =
        |api, body: &serde_json::Value| Payload::new(api, body.to_string()).paced(STREAM_GAP);
    let cases = [
        (
            "chat",
            paced(Api::Chat, &chat),
            paced(Api::Chat, &chat_second),
        ),
        (
            "messages",
            paced(Api::Messages, &messages),
            paced(Api::Messages, &messages_second),
        ),
        (
            "responses",
            paced(Api::Responses, &responses),
            paced(Api::Responses, &responses_second),
        ),
        (
            "gemini",
            paced(Api::GeminiStream, &gemini),
            paced(Api::GeminiStream, &gemini_second),
        ),
    ];
    let cases: Vec<_> = cases
        .into_iter()
        .filter(|(_, first, _)| only.covers(first.api))
        .collect();
    let (mock, proxy) = (targets.mock, targets.proxy);
    for (name, first, second) in &cases {
        check_recall_stream(&client, proxy, name, first).await;
        for _ in 0..3 {
            timed(&client, proxy, first).await;
            timed(&client, mock, first).await;
            timed(&client, mock, second).await;
        }
    }
    let samples = 30;
    // A new turn: another conversation (its opening differs, so its session
    // and its hidden exchange are new: the exchange is stored, committed,
    // before the client's last bytes), the same stub (its output known).
    let new_turns: Vec<Vec<Payload>> = (0..samples)
        .map(|n| {
            let ask = format!("{} the users (conversation {n})", support::RECALL_MARKER);
            cases
                .iter()
                .map(|(_, first, _)| paced(first.api, &recall_first(first.api, &ask, &output)))
                .collect()
        })
        .collect();
    // Per case: direct first byte, direct sum of both rounds; through the
    // proxy, the same turn again and a new turn: first byte, last byte.
    let mut figures: Vec<[Vec<f64>; 6]> = cases.iter().map(|_| Default::default()).collect();
    let mut shown = vec![0usize; cases.len()];
    for (n, new_turn) in new_turns.iter().enumerate() {
        for (i, (_, first, second)) in cases.iter().enumerate() {
            let one = timed(&client, mock, first).await;
            let two = timed(&client, mock, second).await;
            // Which of the two proxied requests comes first alternates: the
            // first after the direct ones finds the proxy's CPU idle.
            let (again, new) = if n % 2 == 0 {
                let again = timed(&client, proxy, first).await;
                (again, timed(&client, proxy, &new_turn[i]).await)
            } else {
                let new = timed(&client, proxy, &new_turn[i]).await;
                (timed(&client, proxy, first).await, new)
            };
            shown[i] = again.events.len();
            for (f, value) in figures[i].iter_mut().zip([
                one.first_byte,
                one.last_byte + two.last_byte,
                again.first_byte,
                again.last_byte,
                new.first_byte,
                new.last_byte,
            ]) {
                f.push(value);
            }
        }
    }
    println!("A streamed recall round (c=1, median of {samples} each; events {} ms apart): through the proxy, round 1 (text, then a `tool_result_read` call on the stub's ref) and round 2 (the answer) spliced into one client stream; directly, the client sends both rounds itself. A new turn stores its hidden exchange (a commit) before the client's last bytes; the same turn again finds it stored.\n", STREAM_GAP.as_millis());
    println!("| recall round | direct: round 1 + round 2, to last byte | through toolstub, to last byte | added to last byte | direct first byte | added to first byte | events the client got |");
    println!("|---|---|---|---|---|---|---|");
    for (i, (name, _, _)) in cases.iter().enumerate() {
        let [d_first, d_sum, a_first, a_last, n_first, n_last] = figures[i].clone().map(median);
        for (variant, first, last) in [
            ("a new turn", n_first, n_last),
            ("the same turn again", a_first, a_last),
        ] {
            println!(
                "| {name}, {variant} | {} | {} | **{}** | {} | **{}** | {} |",
                ms(d_sum),
                ms(last),
                ms(last - d_sum),
                ms(d_first),
                ms(first - d_first),
                shown[i]
            );
        }
    }
    println!();
}

/// The first round of a streamed recall request in `api`'s shape: `ask`,
/// a client tool's call and its `output`.
fn recall_first(api: Api, ask: &str, output: &str) -> serde_json::Value {
    match api {
        Api::Chat => chat_tool_body(ask, output, true),
        Api::Messages => anthropic_tool_body(ask, output.into(), true),
        Api::Responses => responses_tool_body(ask, output.into(), true),
        Api::Gemini | Api::GeminiStream => gemini::tool_body(ask, output),
    }
}

/// What the recall rows measure is a recall round answered inside the
/// proxy: the client's one stream holds the second round's last words and
/// neither the recall call nor a second opening or ending.
async fn check_recall_stream(
    client: &BenchClient,
    proxy: SocketAddr,
    name: &str,
    payload: &Payload,
) {
    let response = client.request(payload.to(proxy)).await.expect("response");
    assert!(
        response.status().is_success(),
        "{name}: status {}",
        response.status()
    );
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    // A Gemini stream has no opening event: every event is a response.
    let (last_word, opening, ending) = match payload.api {
        Api::Chat => (
            format!("word{} ", support::CHAT_TEXT_DELTAS - 1),
            Some("\"role\":\"assistant\""),
            "[DONE]",
        ),
        Api::Messages => (
            format!("word{} ", support::ANTHROPIC_TEXT_DELTAS - 1),
            Some("event: message_start"),
            "event: message_stop",
        ),
        Api::Responses => (
            format!("word{} ", support::RESPONSES_TEXT_DELTAS - 1),
            Some("event: response.created"),
            "event: response.completed",
        ),
        Api::Gemini | Api::GeminiStream => (
            format!("word{} ", support::gemini::TEXT_EVENTS - 1),
            None,
            "\"finishReason\":",
        ),
    };
    let count = |needle: &str| text.matches(needle).count();
    assert!(
        text.contains(&last_word)
            && !text.contains("tool_result_read")
            && opening.is_none_or(|opening| count(opening) == 1)
            && count(ending) == 1,
        "{name}: the proxy did not answer the recall round inside one stream:\n{text}"
    );
    match payload.api {
        Api::Responses => check_responses_stream(name, &text),
        Api::GeminiStream => gemini::check_stream(name, &text),
        _ => {}
    }
}

/// A Responses stream spliced from two rounds is one response: one
/// `sequence_number` counter from 0, round 1's id on its first and last
/// events.
fn check_responses_stream(name: &str, text: &str) {
    let events: Vec<serde_json::Value> = text
        .split("\n\n")
        .filter_map(|event| event.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|data| serde_json::from_str(data).expect("each event's data is JSON"))
        .collect();
    for (i, event) in events.iter().enumerate() {
        assert_eq!(
            event["sequence_number"].as_u64(),
            Some(i as u64),
            "{name}: sequence_number of event {i}:\n{text}"
        );
    }
    let id = |event: Option<&serde_json::Value>| {
        event.and_then(|e| e["response"]["id"].as_str().map(str::to_string))
    };
    let (first, last) = (id(events.first()), id(events.last()));
    assert!(
        first.is_some() && first == last,
        "{name}: the response ids differ ({first:?}, {last:?}):\n{text}"
    );
}

/// The pause before each request of the "after an idle gap" row.
const IDLE_GAP: Duration = Duration::from_millis(150);

/// User + system CPU time of a process, in seconds (from /proc).
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) start after ')'.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the full line: 11 and 12 here.
    (ticks(11) + ticks(12)) / 100.0
}

async fn wait_healthy(addr: SocketAddr, what: &str) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    for _ in 0..200 {
        let req = http::Request::get(format!("http://{addr}/healthz"))
            .body(Full::new(Bytes::new()))
            .expect("request");
        if let Ok(r) = client.request(req).await {
            if r.status().is_success() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{what} did not become healthy");
}

/// The mock upstream's answer: Anthropic Messages requests go to
/// [`support::anthropic_answer`], Responses requests to
/// [`support::responses_answer`], Gemini requests to
/// [`support::gemini::answer`]; chat requests asking for a paced stream
/// or a recall round to [`support::chat_answer`]; any other chat request
/// gets a small completion, or 10 SSE chunks at once for streams.
fn mock_answer(parts: &http::request::Parts, body: &Bytes) -> http::Response<support::MockBody> {
    let path = parts.uri.path();
    if path.ends_with("/messages") || path.ends_with("/count_tokens") {
        return support::anthropic_answer(parts, body);
    }
    if path.ends_with("/responses") {
        return support::responses_answer(parts, body);
    }
    if path.contains("/models/") {
        return support::gemini::answer(parts, body);
    }
    if let Some(answer) = support::chat_answer(parts, body) {
        return answer;
    }
    if memchr::memmem::find(body, b"\"stream\":true").is_some() {
        let mut s = String::new();
        for i in 0..10 {
            s.push_str(&format!("data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"tok{i} \"}}}}]}}\n\n"));
        }
        s.push_str("data: [DONE]\n\n");
        support::sse_response(s).map(BodyExt::boxed)
    } else {
        support::json_response(support::COMPLETION).map(BodyExt::boxed)
    }
}

/// `loadbench --forwarder LISTEN UPSTREAM`: the least a proxy built on the
/// same crates can do (hyper's server and pooled client with toolstub's
/// settings: nodelay, a header-read timeout, a pool of 64; bodies streamed
/// both ways, nothing read or rewritten), as a floor for the proxy's rows.
/// Unlike toolstub it has no TLS-capable connector, no first-byte timeout
/// and the system allocator.
mod forwarder {
    use bytes::Bytes;
    use http_body_util::combinators::BoxBody;
    use http_body_util::{BodyExt, Empty};
    use hyper::body::Incoming;
    use hyper::service::service_fn;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use std::convert::Infallible;
    use std::net::SocketAddr;

    type Body = BoxBody<Bytes, hyper::Error>;

    pub fn run(listen: SocketAddr, upstream: SocketAddr) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("forwarder runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind(listen).await.expect("bind");
            let mut connector = HttpConnector::new();
            connector.set_nodelay(true);
            let client: Client<HttpConnector, Incoming> = Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(64)
                .pool_timer(TokioTimer::new())
                .build(connector);
            let mut server = hyper::server::conn::http1::Builder::new();
            server
                .timer(TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(30))
                .keep_alive(true);
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let client = client.clone();
                let server = server.clone();
                tokio::spawn(async move {
                    let service =
                        service_fn(move |request| forward(client.clone(), upstream, request));
                    let _ = server.serve_connection(TokioIo::new(stream), service).await;
                });
            }
        });
    }

    async fn forward(
        client: Client<HttpConnector, Incoming>,
        upstream: SocketAddr,
        mut request: http::Request<Incoming>,
    ) -> Result<http::Response<Body>, Infallible> {
        let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
        let uri = format!("http://{upstream}{path}").parse();
        let Ok(uri) = uri else {
            return Ok(bad_gateway());
        };
        *request.uri_mut() = uri;
        Ok(match client.request(request).await {
            Ok(response) => response.map(BodyExt::boxed),
            Err(_) => bad_gateway(),
        })
    }

    fn bad_gateway() -> http::Response<Body> {
        let mut response =
            http::Response::new(Empty::new().map_err(|never| match never {}).boxed());
        *response.status_mut() = http::StatusCode::BAD_GATEWAY;
        response
    }
}
