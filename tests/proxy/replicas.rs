//! Several replicas, one PostgreSQL store: two `toolstub serve`
//! processes on one schema behind one mock upstream. What one stored, the
//! other reads (recall tools, operator API); a conversation continued
//! through the other gets the first one's hidden recall exchange back. And
//! (in-process) a store that cannot be reached degrades to passthrough,
//! says so on `/healthz`, and is used again once it is back, without a
//! restart.

use super::mock::{self, client, send, Mock, Recorded, Script};
use super::recall::{
    answer, body_json, last_recall_result, offers, read_result, stub_ref, tool_call_reply,
    with_messages,
};
use super::{big_json, chat_body, Setup, KEY};
use serde_json::json;
use serde_json::Value;
use std::sync::Arc;
use toolstub::config::{load, Overrides};
use toolstub::proxy::Server;

#[path = "../support/postgres.rs"]
mod pg;

/// A mock that reads the stub's ref (40 characters from 0) when the last
/// message is the user's "please read", and otherwise just answers.
fn reader_when_asked() -> Script {
    Arc::new(|r: &Recorded| {
        let request = body_json(r);
        if let Some(result) = last_recall_result(&request) {
            return answer(&format!("READ:{result}"));
        }
        let asked = request["messages"]
            .as_array()
            .and_then(|m| m.last())
            .is_some_and(|m| m["role"] == "user" && m["content"] == "please read");
        match stub_ref(&request) {
            Some(reference) if asked && offers(&request, "tool_result_read") => tool_call_reply(
                vec![(
                    "rc_1".to_string(),
                    "tool_result_read",
                    json!({"ref": reference, "offset": 0, "limit": 40}),
                )],
                None,
            ),
            _ => answer("ok"),
        }
    })
}

/// A proxy on `store_url` in front of `mock`.
async fn replica(mock: &Mock, store_url: &str) -> Setup {
    replica_with(mock, store_url, &[]).await
}

/// [`replica`] with `TOOLSTUB_*` settings.
async fn replica_with(mock: &Mock, store_url: &str, env: &[(&str, &str)]) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let overrides = Overrides {
        listen: Some("127.0.0.1:0".to_string()),
        upstream: Some(format!("http://{}", mock.addr)),
        db: Some(dir.path().join("unused.db")),
        store_url: Some(store_url.to_string()),
        routes: Vec::new(),
    };
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let config = load(None, env, &overrides).expect("config");
    let proxy = Server::start(config).await.expect("proxy");
    Setup {
        proxy,
        mock: Mock {
            addr: mock.addr,
            received: mock.received.clone(),
        },
        _dir: dir,
    }
}

/// A `toolstub serve` process on `store_url` in front of `mock`.
struct Process {
    child: std::process::Child,
    addr: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

impl Process {
    async fn start(mock: &Mock, store_url: &str) -> Process {
        Process::start_with(mock, store_url, &[]).await
    }

    /// [`Process::start`] with `TOOLSTUB_*` settings.
    async fn start_with(mock: &Mock, store_url: &str, env: &[(&str, &str)]) -> Process {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
        let dir = tempfile::tempdir().expect("tempdir");
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_toolstub"))
            .args(["serve", "--listen", &addr.to_string()])
            .args(["--upstream", &format!("http://{}", mock.addr)])
            .arg("--db")
            .arg(dir.path().join("unused.db"))
            .env("TOOLSTUB_STORE_URL", store_url)
            .env("TOOLSTUB_SERVER_LOG_LEVEL", "warn")
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("starting toolstub");
        let process = Process {
            child,
            addr,
            _dir: dir,
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let health = tokio::time::timeout(
                std::time::Duration::from_secs(1),
                client().get(process.url("/healthz").parse().expect("uri")),
            )
            .await;
            if matches!(health, Ok(Ok(r)) if r.status() == 200) {
                return process;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "toolstub never became healthy"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn ask(&self, body: String) -> (u16, Value) {
        let (status, _, bytes) = send(
            &client(),
            "POST",
            self.url("/v1/chat/completions"),
            &[("authorization", KEY)],
            body,
        )
        .await;
        (
            status.as_u16(),
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn with_user(body: &str, text: &str) -> String {
    with_messages(
        body,
        &[json!({"role": "user", "content": text}).to_string()],
    )
}

#[tokio::test]
async fn a_ref_stored_through_one_replica_resolves_through_the_other() {
    let schema = pg::Schema::create().await;
    let mock = mock::start(reader_when_asked()).await;
    let a = Process::start(&mock, &schema.store_url()).await;
    let b = Process::start(&mock, &schema.store_url()).await;
    let original = big_json(3000);
    let turn1 = chat_body(std::slice::from_ref(&original), "");
    let (status, _) = a.ask(turn1.clone()).await;
    assert_eq!(status, 200);
    let reference = stub_ref(&body_json(&mock.last())).expect("A sent a stub");

    // B never saw the output: its operator API reads it from the shared store.
    let (status, _, body) = send(
        &client(),
        "GET",
        b.url(&format!("/toolstub/v1/results/{reference}?limit=-1")),
        &[("authorization", KEY)],
        String::new(),
    )
    .await;
    assert_eq!(status.as_u16(), 200, "{}", String::from_utf8_lossy(&body));
    let got: serde_json::Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(got["content"], original);
    // Another tenant's key does not see it through B either.
    let (status, _, _) = send(
        &client(),
        "GET",
        b.url(&format!("/toolstub/v1/results/{reference}")),
        &[("authorization", "Bearer sk-someone-else-9876")],
        String::new(),
    )
    .await;
    assert_eq!(status.as_u16(), 404);

    // The model's recall call, answered by B.
    let before = mock.requests().len();
    let (status, got) = b.ask(with_user(&turn1, "please read")).await;
    assert_eq!(status, 200);
    let result = read_result(&got);
    let expected: String = original.chars().take(40).collect();
    assert_eq!(result["content"], expected);
    assert_eq!(result["total_chars"], original.chars().count());
    assert_eq!(
        mock.requests().len(),
        before + 2,
        "one recall round through B"
    );
}

#[tokio::test]
async fn a_conversation_continued_through_the_other_replica_gets_its_history_back() {
    let schema = pg::Schema::create().await;
    let mock = mock::start(reader_when_asked()).await;
    let a = Process::start_with(&mock, &schema.store_url(), super::RESTORING).await;
    let b = Process::start_with(&mock, &schema.store_url(), super::RESTORING).await;
    let turn1 = with_user(&chat_body(&[big_json(3000)], ""), "please read");
    let (_, got) = a.ask(turn1.clone()).await;
    let content = got["choices"][0]["message"]["content"].clone();
    assert!(content.as_str().is_some_and(|c| c.starts_with("READ:")));
    let seen = json!({"role": "assistant", "content": content});
    let turn2 = with_messages(
        &turn1,
        &[
            seen.to_string(),
            json!({"role": "user", "content": "and then?"}).to_string(),
        ],
    );
    b.ask(turn2).await;
    let requests = mock.requests();
    assert_eq!(requests.len(), 3, "A: two rounds; B: one");
    let round2 = body_json(&requests[1]);
    let next = body_json(&requests[2]);
    let messages = next["messages"].as_array().expect("messages");
    // B sent turn 1's round 2 again, as A sent it, then the answer and the
    // new message: the hidden exchange came from the shared store.
    let n = round2["messages"].as_array().expect("messages").len();
    assert_eq!(
        &messages[..n],
        round2["messages"].as_array().expect("m").as_slice()
    );
    assert_eq!(
        messages[n - 2]["tool_calls"][0]["function"]["name"],
        "tool_result_read"
    );
    assert_eq!(messages[n], seen);
    assert_eq!(messages[n + 1]["content"], "and then?");
}

/// A TCP relay to the test database that can be cut (every connection
/// closed, new ones refused) and restored on the same port: the database
/// "goes away" for this test alone.
struct Relay {
    port: u16,
    target: String,
    tasks: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Relay {
    /// A relay to the database of `url` (`postgres://user:pass@HOST:PORT/db?...`),
    /// and the URL that goes through it.
    async fn to(url: &str) -> (Relay, String) {
        let at = url.find('@').expect("credentials") + 1;
        let end = at + url[at..].find('/').expect("path");
        let relay = Relay::start(url[at..end].to_string()).await;
        let relayed = format!("{}127.0.0.1:{}{}", &url[..at], relay.port, &url[end..]);
        (relay, relayed)
    }

    async fn start(target: String) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind relay");
        let port = listener.local_addr().expect("addr").port();
        let relay = Relay {
            port,
            target,
            tasks: Arc::default(),
        };
        relay.serve(listener);
        relay
    }

    fn serve(&self, listener: tokio::net::TcpListener) {
        let (tasks, target) = (self.tasks.clone(), self.target.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = target.clone();
                let conn = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tasks.lock().expect("lock").push(conn);
            }
        });
        self.tasks.lock().expect("lock").push(accept);
    }

    fn cut(&self) {
        for task in self.tasks.lock().expect("lock").drain(..) {
            task.abort();
        }
    }

    async fn restore(&self) {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .expect("rebind relay");
        self.serve(listener);
    }
}

async fn healthz(s: &Setup) -> String {
    let (status, _, body) = send(&client(), "GET", s.url("/healthz"), &[], String::new()).await;
    assert_eq!(status.as_u16(), 200, "healthz answers 200 either way");
    String::from_utf8_lossy(&body).into_owned()
}

/// The number of outputs the proxy externalized in its answer to `body`.
async fn externalized(s: &Setup, body: String) -> usize {
    let (status, headers, _) = send(
        &client(),
        "POST",
        s.url("/v1/chat/completions"),
        &[("authorization", KEY)],
        body,
    )
    .await;
    assert_eq!(status.as_u16(), 200);
    headers
        .get("x-toolstub-externalized")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_lost_database_degrades_to_passthrough_and_is_used_again_once_back() {
    let schema = pg::Schema::create().await;
    let (relay, relayed) = Relay::to(&schema.store_url()).await;
    let mock = mock::start(Arc::new(|_: &Recorded| answer("ok"))).await;
    let s = replica(&mock, &relayed).await;
    assert_eq!(healthz(&s).await, "ok\n");
    let first = big_json(3000);
    assert_eq!(
        externalized(&s, chat_body(std::slice::from_ref(&first), "")).await,
        1
    );
    let first_ref = stub_ref(&body_json(&mock.last())).expect("a stub");

    relay.cut();
    let health = healthz(&s).await;
    assert!(
        health.starts_with("degraded: store unavailable"),
        "{health}"
    );
    assert!(
        !health.contains("toolstub:toolstub"),
        "no credentials: {health}"
    );
    // failure_mode = preserve_raw: the request goes upstream as it came.
    let during = big_json(3001);
    let body = chat_body(std::slice::from_ref(&during), "");
    assert_eq!(externalized(&s, body.clone()).await, 0);
    assert_eq!(mock.last().body, body.as_bytes(), "forwarded byte for byte");

    relay.restore().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while healthz(&s).await != "ok\n" {
        assert!(std::time::Instant::now() < deadline, "never healthy again");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let after = big_json(3002);
    assert_eq!(
        externalized(&s, chat_body(std::slice::from_ref(&after), "")).await,
        1
    );
    let after_ref = stub_ref(&body_json(&mock.last())).expect("a stub");
    for (reference, original) in [(first_ref, first), (after_ref, after)] {
        let (status, _, body) = send(
            &client(),
            "GET",
            s.url(&format!("/toolstub/v1/results/{reference}?limit=-1")),
            &[("authorization", KEY)],
            String::new(),
        )
        .await;
        assert_eq!(status.as_u16(), 200);
        let got: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(got["content"], original, "{reference}");
    }
    s.proxy.shutdown().await;
}

/// A replica whose first migration waits on another's (the migration lock
/// held) while its health probe gives up: the migration runs to its end
/// once the lock is free, and leaves it free. Cut off with the probe, it
/// left the lock held by a pooled connection, and every replica started
/// after waited for it for good.
#[tokio::test]
async fn a_migration_its_caller_gave_up_on_runs_to_its_end() {
    let schema = pg::Schema::create().await;
    let (relay, relayed) = Relay::to(&schema.store_url()).await;
    relay.cut();
    let mock = mock::start(Arc::new(|_: &Recorded| answer("ok"))).await;
    let s = replica(&mock, &relayed).await;
    assert!(
        healthz(&s).await.starts_with("degraded"),
        "started without its database"
    );
    // Another replica migrating: its lock held.
    let (other, conn) = tokio_postgres::connect(&pg::url(), tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    const LOCK: i64 = 0x746f_6f6c_7374_7562;
    other
        .execute("SELECT pg_advisory_lock($1)", &[&LOCK])
        .await
        .expect("lock");
    relay.restore().await;
    // Past the half second a replica fails fast after a failure.
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let asked = std::time::Instant::now();
    let health = healthz(&s).await;
    assert!(
        health.starts_with("degraded"),
        "the probe gave up waiting: {health}"
    );
    assert!(
        asked.elapsed() >= std::time::Duration::from_millis(1_900),
        "the probe waited on the migration: {health}"
    );
    other
        .execute("SELECT pg_advisory_unlock($1)", &[&LOCK])
        .await
        .expect("unlock");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while healthz(&s).await != "ok\n" {
        assert!(std::time::Instant::now() < deadline, "never healthy");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // The lock is free: another replica takes it (within moments: the
    // replicas of tests running beside this one take it in turn).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let free = other
            .query_one("SELECT pg_try_advisory_lock($1)", &[&LOCK])
            .await
            .expect("query");
        if free.get::<_, bool>(0) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the migration lock was left held"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    other
        .execute("SELECT pg_advisory_unlock($1)", &[&LOCK])
        .await
        .expect("unlock");
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn tls_to_the_database_is_verified_against_the_upstream_roots_and_ca_file() {
    let schema = pg::Schema::create().await;
    let url = schema
        .store_url()
        .replace("sslmode=disable", "sslmode=require");
    assert!(url.contains("sslmode=require"), "{url}");
    let ca = std::env::var("TEST_POSTGRES_CA").expect("TEST_POSTGRES_CA (scripts/postgres)");
    let mock = mock::start(Arc::new(|_: &Recorded| answer("ok"))).await;
    // The test server's certificate comes from a CA of its own: trusted
    // through upstream.ca_file, as a private upstream's would be.
    let trusting = replica_with(&mock, &url, &[("TOOLSTUB_UPSTREAM_CA_FILE", &ca)]).await;
    assert_eq!(healthz(&trusting).await, "ok\n");
    let original = big_json(3000);
    assert_eq!(
        externalized(&trusting, chat_body(std::slice::from_ref(&original), "")).await,
        1
    );
    trusting.proxy.shutdown().await;
    // Without it, Mozilla's roots alone: the certificate is refused, and the
    // store is unavailable rather than reached in the clear.
    let strict = replica(&mock, &url).await;
    let health = healthz(&strict).await;
    assert!(health.starts_with("degraded"), "{health}");
    assert!(health.to_lowercase().contains("certificate"), "{health}");
    let body = chat_body(&[big_json(3001)], "");
    assert_eq!(externalized(&strict, body.clone()).await, 0);
    assert_eq!(mock.last().body, body.as_bytes());
    strict.proxy.shutdown().await;
}

/// Client keys on a shared store: a key made through one replica's store
/// admits its holder on the other at once, and a revocation reaches both
/// within about a second.
#[tokio::test]
async fn every_replica_knows_every_key() {
    let schema = pg::Schema::create().await;
    let mock = mock::start(Arc::new(|_: &Recorded| super::mock::ok_json("ok"))).await;
    let env = [("TOOLSTUB_AUTH_REQUIRED", "true")];
    let a = replica_with(&mock, &schema.store_url(), &env).await;
    let b = replica_with(&mock, &schema.store_url(), &env).await;
    let key = toolstub::auth::ClientKey::generate().expect("random");
    a.proxy
        .app
        .store
        .create_key("shared", key.hash, 1)
        .await
        .expect("create");
    let c = client();
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let ask = |s: &Setup, key: &str| {
        let (c, url, key) = (c.clone(), s.url("/v1/chat/completions"), key.to_string());
        async move {
            send(
                &c,
                "POST",
                url,
                &[("x-toolstub-key", &key), ("authorization", KEY)],
                body,
            )
            .await
            .0
        }
    };
    assert_eq!(ask(&a, &key.secret).await, 200);
    assert_eq!(
        ask(&b, &key.secret).await,
        200,
        "the other replica knows it at once"
    );
    assert_eq!(
        ask(&b, "tsk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA").await,
        401
    );
    assert!(b
        .proxy
        .app
        .store
        .revoke_key("shared", 2)
        .await
        .expect("revoke"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    for s in [&a, &b] {
        while ask(s, &key.secret).await != 401 {
            assert!(
                std::time::Instant::now() < deadline,
                "revoked, still admitted"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    a.proxy.shutdown().await;
    b.proxy.shutdown().await;
}

/// A chat conversation of one `fetch` call a turn, output `i` answering
/// turn `i`.
fn turns_body(outputs: &[String]) -> String {
    let mut messages = vec![json!({"role": "user", "content": "replicas"})];
    for (i, o) in outputs.iter().enumerate() {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("call_{i}"), "type": "function", "function": {"name": "fetch", "arguments": "{}"}}
        ]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": o}));
    }
    json!({"model": "gpt-test", "messages": messages, "tools": [
        {"type": "function", "function": {"name": "fetch", "parameters": {}}}
    ]})
    .to_string()
}

/// Two replicas on one store decide alike when a conversation's prompt
/// cache expired: the request that found it expired through one, retried
/// through the other after another pause, goes upstream as the same bytes.
#[tokio::test]
async fn replicas_agree_on_when_the_prompt_cache_expired() {
    let schema = pg::Schema::create().await;
    let mock = mock::start(Arc::new(|_: &Recorded| answer("ok"))).await;
    let env = [("TOOLSTUB_EXTERNALIZATION_PROMPT_CACHE_TTL_MS", "1000")];
    let a = replica_with(&mock, &schema.store_url(), &env).await;
    let b = replica_with(&mock, &schema.store_url(), &env).await;
    let outputs: Vec<String> = (0..3)
        .map(|i| format!("line {i} of a log\n").repeat(200))
        .collect();
    let c = client();
    let ask = |s: &Setup, body: String| {
        let c = c.clone();
        let url = s.url("/v1/chat/completions");
        async move {
            let (status, _, _) = send(&c, "POST", url, &[("authorization", KEY)], body).await;
            assert_eq!(status.as_u16(), 200);
        }
    };
    for n in 1..=2 {
        let body = turns_body(&outputs[..n]);
        ask(&a, body.clone()).await;
        assert_eq!(mock.last().body, body.as_bytes(), "within the lifetime");
    }
    tokio::time::sleep(std::time::Duration::from_millis(1_300)).await;
    let body = turns_body(&outputs);
    ask(&b, body.clone()).await;
    let sent = mock.last().body.to_vec();
    assert_ne!(sent, body.as_bytes(), "expired: the outputs seen age");
    assert_eq!(
        String::from_utf8_lossy(&sent)
            .matches("shown in full earlier")
            .count(),
        2
    );
    tokio::time::sleep(std::time::Duration::from_millis(1_300)).await;
    ask(&a, body).await;
    assert_eq!(
        mock.last().body,
        sent,
        "the retry through the other replica"
    );
}
