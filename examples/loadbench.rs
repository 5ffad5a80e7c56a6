//! Load benchmark of `toolstub serve` against a direct-to-mock baseline,
//! interleaved in one run (SPEC/issue 4 item 9). Run with `scripts/load`.
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
//!   seen, back to back and after an idle gap; repeated), and the proxy's
//!   RSS idle and under load. Saturating rows alternate batches per path;
//!   paced rows run the direct path and one other side by side (each at the
//!   full rate), because this machine has slow spells of 20-60 ms that
//!   decide a p99 and would otherwise land on one path's batch only.
//!
//! Environment: `LOADBENCH_ONLY=large|paced` (only those rows),
//! `LOADBENCH_PROXY_CPU` (set by `scripts/load`: the CPU of the proxy and
//! the bare forwarder), `LOADBENCH_PROXY_LOG` (the proxy's log filter),
//! `LOADBENCH_TRACE=DIR` (every paced request's latency, see
//! [`write_trace`]). The proxy inherits the rest, e.g.
//! `TOOLSTUB_STORE_DURABILITY=normal`.

mod support;

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
const PACED_RATE: u32 = 2000;

fn main() {
    let args: Vec<String> = std::env::args().collect();
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
    let mock_addr = support::start_mock(Arc::new(mock_answer), 1);
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
        tokio::time::sleep(Duration::from_millis(300)).await;
        let idle_rss = support::rss_kib(targets.proxy_pid);
        println!("## toolstub load benchmark\n");
        println!("proxy: {bin}; mock upstream in-process; {ROUNDS} interleaved rounds of {} ms per configuration; medians over rounds.\n", BATCH.as_millis());
        match &pinned {
            Some(cpu) => println!("CPU placement: proxy pinned to CPU {cpu}; load generator and mock share the other CPU(s).\n"),
            None => println!("CPU placement: none (proxy, load generator and mock share every CPU).\n"),
        }
        println!("| scenario | direct p50 | proxy p50 | added p50 | direct p99 | proxy p99 | added p99 | direct req/s | proxy req/s | proxy CPU per request |");
        println!("|---|---|---|---|---|---|---|---|---|---|");
        let small = Bytes::from_static(br#"{"model":"m","messages":[{"role":"user","content":"hello"}]}"#);
        let small_stream = Bytes::from_static(br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}"#);
        let mut loaded_rss = 0;
        let mut floors = Vec::new();
        let only = std::env::var("LOADBENCH_ONLY").unwrap_or_default();
        let (only_large, only_paced) = (only == "large", only == "paced");
        let scenarios: &[(&str, &Bytes)] = if only_large {
            &[]
        } else {
            &[("non-streaming", &small), ("streaming", &small_stream)]
        };
        for &(name, body) in scenarios {
            let configurations: &[(usize, Option<u32>)] = if only_paced {
                &[(32, Some(PACED_RATE))]
            } else {
                &[(1, None), (32, None), (32, Some(PACED_RATE))]
            };
            for &(concurrency, rate) in configurations {
                let row = compare(&targets, body, concurrency, rate).await;
                let name = match rate {
                    Some(r) => format!("{name}, c={concurrency} paced at {r} req/s"),
                    None => format!("{name}, c={concurrency} saturating"),
                };
                loaded_rss = loaded_rss.max(support::rss_kib(targets.proxy_pid));
                println!(
                    "| {name} | {} | {} | **{}** | {} | {} | **{}** | {:.0} | {:.0} | {:.1} µs |",
                    ms(row.direct_p50), ms(row.proxy_p50), ms(row.added_p50()),
                    ms(row.direct_p99), ms(row.proxy_p99), ms(row.added_p99()),
                    row.direct_rps, row.proxy_rps, row.proxy_cpu * 1e6
                );
                floors.push((name, row));
            }
        }
        println!();
        if !floors.is_empty() {
            println!("The floor on this machine: a bare hyper forwarder (no parsing, no rewrite, no metrics: `loadbench --forwarder`), placed as the proxy is, measured in the same interleaved rounds. Latency it adds is the hops' and the placement's, which any proxy pays.\n");
            println!("| scenario | bare forwarder added p50 | toolstub added p50 | bare forwarder added p99 | toolstub added p99 | toolstub p99 over bare | CPU per request, bare / toolstub |");
            println!("|---|---|---|---|---|---|---|");
            for (name, row) in &floors {
                println!(
                    "| {name} | {} | {} | {} | {} | **{}** | {:.1} / {:.1} µs |",
                    ms(row.bare_added_p50), ms(row.added_p50()),
                    ms(row.bare_added_p99), ms(row.added_p99()),
                    ms(row.added_p99() - row.bare_added_p99),
                    row.bare_cpu * 1e6, row.proxy_cpu * 1e6
                );
            }
            println!();
        }
        if only_paced {
            return;
        }
        let one_mb = large_output_cost(mock_addr, proxy_addr).await;
        loaded_rss = loaded_rss.max(support::rss_kib(targets.proxy_pid));
        println!("| request with a 1 MB JSON tool output (c=1, median of {} each) | added latency |", one_mb.samples);
        println!("|---|---|");
        println!("| first seen, back to back (new content: synopsis, SHA-256, durable insert) | **{}** |", ms(one_mb.first_seen));
        println!("| first seen, each after {} ms idle (as between agent turns) | **{}** |", IDLE_GAP.as_millis(), ms(one_mb.first_seen_after_idle));
        println!("| repeated turn (same content again) | **{}** ({:.2} ms per MB of body) |", ms(one_mb.repeated), one_mb.repeated * 1e3 / (one_mb.body_bytes as f64 / 1e6));
        println!();
        println!("| proxy RSS | MiB |");
        println!("|---|---|");
        println!("| idle, after start | {:.1} |", idle_rss as f64 / 1024.0);
        println!("| peak seen under load | {:.1} |", loaded_rss as f64 / 1024.0);
    });
    drop((proxy, bare));
    let _ = std::fs::remove_dir_all(&dir);
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
    format!("{:.3} ms", seconds * 1e3)
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

async fn compare(targets: &Targets, body: &Bytes, concurrency: usize, rate: Option<u32>) -> Row {
    let client = support::client();
    let (mock, proxy, bare) = (targets.mock, targets.proxy, targets.bare);
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
        for (i, (who, target)) in [("proxy", proxy), ("bare", bare)].into_iter().enumerate() {
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
    Row {
        proxy_cpu: median(proxy_cpu),
        bare_cpu: median(bare_cpu),
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
    body: &Bytes,
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
    body: &Bytes,
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
                    request(&client, target, body.clone()).await;
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

async fn request(client: &BenchClient, target: SocketAddr, body: Bytes) {
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{target}/v1/chat/completions"))
        .header("content-type", "application/json")
        .header("authorization", "Bearer sk-bench")
        .body(Full::new(body))
        .expect("request");
    let response = client.request(req).await.expect("response");
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

struct LargeCost {
    first_seen: f64,
    first_seen_after_idle: f64,
    repeated: f64,
    samples: usize,
    body_bytes: usize,
}

/// A chat body with one ~1 MB JSON tool output; `salt` makes the content new.
fn large_body(salt: u64) -> Bytes {
    let mut items = Vec::new();
    let mut len = 0;
    let mut i = 0u64;
    while len < 1_000_000 {
        let item = format!("{{\"id\":{i},\"salt\":{salt},\"name\":\"user {i}\",\"email\":\"user{i}@example.com\",\"active\":true}}");
        len += item.len() + 1;
        items.push(item);
        i += 1;
    }
    let output = format!("[{}]", items.join(","));
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

async fn large_output_cost(mock: SocketAddr, proxy: SocketAddr) -> LargeCost {
    let client = support::client();
    let samples = 30;
    let repeated_body = large_body(0);
    let time = |target: SocketAddr, body: Bytes| {
        let client = client.clone();
        async move {
            let t = Instant::now();
            request(&client, target, body).await;
            t.elapsed().as_secs_f64()
        }
    };
    // Warm-up, and the repeated body's first sight.
    time(proxy, repeated_body.clone()).await;
    time(mock, repeated_body.clone()).await;
    let (mut direct, mut first, mut repeat) = (Vec::new(), Vec::new(), Vec::new());
    for n in 0..samples {
        let fresh = large_body(n as u64 + 1);
        direct.push(time(mock, fresh.clone()).await);
        first.push(time(proxy, fresh).await);
        repeat.push(time(proxy, repeated_body.clone()).await);
    }
    let base = median(direct);
    // The same, each request after an idle gap, as between an agent's turns
    // (a model answers in seconds): the store's background work (indexing
    // the last output, the checkpoint that lets the WAL be reused) has run.
    // Back to back above, it never gets a quiet moment and the WAL only grows.
    let (mut direct_idle, mut first_idle) = (Vec::new(), Vec::new());
    for n in 0..samples {
        tokio::time::sleep(IDLE_GAP).await;
        direct_idle.push(time(mock, large_body(10_000 + 2 * n as u64)).await);
        tokio::time::sleep(IDLE_GAP).await;
        first_idle.push(time(proxy, large_body(10_001 + 2 * n as u64)).await);
    }
    LargeCost {
        first_seen: median(first) - base,
        first_seen_after_idle: median(first_idle) - median(direct_idle),
        repeated: median(repeat) - base,
        samples,
        body_bytes: repeated_body.len(),
    }
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

/// The mock upstream's answer: a small completion, or 10 SSE chunks.
fn mock_answer(_parts: &http::request::Parts, body: &Bytes) -> http::Response<Full<Bytes>> {
    if memchr::memmem::find(body, b"\"stream\":true").is_some() {
        let mut s = String::new();
        for i in 0..10 {
            s.push_str(&format!("data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"tok{i} \"}}}}]}}\n\n"));
        }
        s.push_str("data: [DONE]\n\n");
        support::sse_response(s)
    } else {
        support::json_response(support::COMPLETION)
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
