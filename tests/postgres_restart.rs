//! PostgreSQL restarted under load: the real binary on a
//! PostgreSQL store keeps answering while the database restarts (requests
//! pass through under `failure_mode = preserve_raw`), reconnects by itself
//! once it is back (stubs again, `/healthz` ok again, no restart of the
//! proxy), and every ref the upstream received resolves byte-identical.
//!
//! Its own test binary: it restarts the test server, which no other test
//! may be using meanwhile (cargo runs test binaries one after another).
//! Needs `TEST_POSTGRES_BIN` and `TEST_POSTGRES_DATA` (set by
//! `scripts/postgres start`).

#![cfg(unix)]

#[path = "../examples/support/mod.rs"]
mod support;

#[path = "support/postgres.rs"]
mod pg;

use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use toolstub::store::{AsyncResultStore, Backend, PostgresOptions, StoreConfig, Tenant};

const KEY: &str = "Bearer sk-restart-0001";

/// `pg_ctl restart` on the test server, as its owner.
fn restart_postgres() {
    let bin = std::env::var("TEST_POSTGRES_BIN").expect("TEST_POSTGRES_BIN (scripts/postgres)");
    let data = std::env::var("TEST_POSTGRES_DATA").expect("TEST_POSTGRES_DATA (scripts/postgres)");
    let pg_ctl = format!("{bin}/pg_ctl");
    // The server's output goes to its log, never to this test's pipes (the
    // restarted postmaster outlives the test).
    let log = format!("{data}/../server.log");
    let args = [
        "-D", &data, "-l", &log, "-m", "fast", "-w", "-t", "60", "restart",
    ];
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0"));
    let status = if root {
        Command::new("runuser")
            .args(["-u", "postgres", "--", &pg_ctl])
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
    } else {
        Command::new(&pg_ctl)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
    }
    .expect("running pg_ctl");
    assert!(status.success(), "pg_ctl restart failed");
}

#[test]
fn the_proxy_rides_out_a_database_restart_and_loses_nothing_it_stubbed() {
    let schema = pg::Schema::create_blocking();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let received: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let rec = received.clone();
    let mock = support::start_mock(
        Arc::new(move |_parts, body: &Bytes| {
            rec.lock().expect("lock").extend(support::refs_in(body));
            support::json_response(support::COMPLETION)
        }),
        1,
    );
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", support::free_port())
        .parse()
        .expect("addr");
    let dir = tempfile::tempdir().expect("tempdir");
    let env = vec![("TOOLSTUB_STORE_URL", schema.store_url())];
    let mut proxy = support::spawn_proxy(
        env!("CARGO_BIN_EXE_toolstub"),
        addr,
        mock,
        &dir.path().join("unused.db"),
        &env,
    );
    // (seed, chars) of every output sent, by ref.
    let sent: Arc<Mutex<BTreeMap<String, (u64, usize)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let stubbed_after = rt.block_on(async {
        support::wait_healthy(addr, Duration::from_secs(30)).await;
        let mut workers = Vec::new();
        for w in 0..3u64 {
            let (sent, stop, ok, failed) = (sent.clone(), stop.clone(), ok.clone(), failed.clone());
            workers.push(tokio::spawn(async move {
                let client = support::client();
                let mut seq = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    seq += 1;
                    let seed = w << 32 | seq;
                    let chars = 30_000 + (seq as usize % 7) * 1000;
                    let text = support::output_text(seed, chars);
                    let id = format!("call_{w}_{seq}");
                    let r =
                        toolstub::refs::result_ref(Some(&id), &toolstub::refs::sha256_hex(&text));
                    sent.lock().expect("lock").insert(r, (seed, chars));
                    let body = support::chat_body(&[id], &[text.as_str()], "");
                    let result = support::request(
                        &client,
                        "POST",
                        format!("http://{addr}/v1/chat/completions"),
                        &[("authorization", KEY), ("content-type", "application/json")],
                        Bytes::from(body),
                        Duration::from_secs(20),
                    )
                    .await;
                    match result {
                        Ok((200, _)) => ok.fetch_add(1, Ordering::Relaxed),
                        _ => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let before = received.lock().expect("lock").len();
        tokio::task::spawn_blocking(restart_postgres)
            .await
            .expect("restart task");
        // Back on its own: stubs again within a few seconds.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let resumed = loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = received.lock().expect("lock").len();
            if now > before + 10 {
                break now - before;
            }
            assert!(std::time::Instant::now() < deadline, "stubs never resumed");
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            let _ = w.await;
        }
        let health = support::request(
            &support::client(),
            "GET",
            format!("http://{addr}/healthz"),
            &[],
            Bytes::new(),
            Duration::from_secs(5),
        )
        .await
        .expect("healthz");
        assert_eq!(health, (200, Bytes::from_static(b"ok\n")));
        resumed
    });
    proxy.kill().expect("kill");
    proxy.wait().expect("reap");
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "every request was answered 200"
    );
    assert!(stubbed_after > 10);

    let store = rt
        .block_on(AsyncResultStore::open(
            Backend::Postgres(PostgresOptions {
                url: schema.store_url(),
                pool_size: 2,
                connect_timeout: Duration::from_secs(10),
                ca_file: None,
            }),
            StoreConfig {
                sweep_interval: None,
                ..StoreConfig::default()
            },
        ))
        .expect("open the store");
    let tenant = Tenant::from_credential(KEY);
    let received = received.lock().expect("lock").clone();
    let sent = sent.lock().expect("lock").clone();
    assert!(!received.is_empty());
    for r in &received {
        let (seed, chars) = sent[r];
        let window = rt
            .block_on(store.read(&tenant, r, 0, -1))
            .unwrap_or_else(|e| panic!("{r}: {e}"));
        assert!(
            window.content == support::output_text(seed, chars),
            "{r} differs"
        );
    }
    println!(
        "{} requests answered, {} refs the upstream received all resolve, {} stubbed after the restart",
        ok.load(Ordering::Relaxed),
        received.len(),
        stubbed_after
    );
}
