//! `toolstub wrap` end to end: the real binary starts its proxy and runs a
//! small child (`sh`, `python3`) that talks to it over TCP, in front of a
//! recording mock upstream. What is checked: the child's requests reach the
//! upstream through the proxy (a large tool output as a stub), the child's
//! environment, exit codes and signal deaths passed through, signals sent to
//! wrap forwarded (and a terminal's Ctrl-C not delivered twice), Codex's
//! provider options, a running proxy (`--proxy`), and the summary.

#[allow(dead_code)]
#[path = "proxy/mock.rs"]
mod mock;

use mock::{ok_json, Mock, Recorded, Script};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_toolstub");
const RUN_TIMEOUT: Duration = Duration::from_secs(60);
const STUB_HEADER: &str = "[toolstub: tool output externalized]";

/// A chat completion with a ~60 KB tool output, sent to
/// `$OPENAI_BASE_URL/chat/completions` (no HTTP proxy); prints the
/// proxy's `x-toolstub-saved-chars` and `x-toolstub-externalized` headers
/// and exits with `argv[1]`.
const CHAT_CHILD: &str = r#"
import json, os, sys, urllib.request
big = json.dumps({"users": [{"id": i, "name": "user %d" % i, "active": True} for i in range(1500)]})
body = {"model": "m", "messages": [
    {"role": "user", "content": "go"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_wrap_1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "call_wrap_1", "content": big}]}
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps(body).encode(),
    headers={"content-type": "application/json", "authorization": "Bearer sk-wrap-test"})
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
with opener.open(req, timeout=30) as r:
    print("saved=%s externalized=%s" % (r.headers["x-toolstub-saved-chars"], r.headers["x-toolstub-externalized"]))
sys.exit(int(sys.argv[1]))
"#;

/// Prints the child's base URLs and sends a count_tokens request to
/// `$ANTHROPIC_BASE_URL/v1/messages/count_tokens`.
const ANTHROPIC_CHILD: &str = r#"
import os, urllib.request
print("openai=" + os.environ["OPENAI_BASE_URL"])
print("anthropic=" + os.environ["ANTHROPIC_BASE_URL"])
req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages/count_tokens",
    data=b'{"model": "m", "messages": []}',
    headers={"content-type": "application/json", "x-api-key": "k", "anthropic-version": "2023-06-01"})
urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=30).read()
"#;

/// Prints the child's Gemini base URL and sends a `generateContent`
/// request under it, as Gemini CLI does.
const GEMINI_CHILD: &str = r#"
import os, urllib.request
print("gemini=" + os.environ["GOOGLE_GEMINI_BASE_URL"])
req = urllib.request.Request(os.environ["GOOGLE_GEMINI_BASE_URL"] + "/v1beta/models/m:generateContent",
    data=b'{"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}',
    headers={"content-type": "application/json", "x-goog-api-key": "AIza-wrap"})
urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=30).read()
"#;

/// Waits for `path` to exist (the child is ready).
fn wait_for(path: &Path) {
    let deadline = Instant::now() + RUN_TIMEOUT;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `toolstub wrap ARGS`, with a clean environment of its own: HOME in
/// `home`, no TOOLSTUB_* settings, no base URLs, no HTTP proxies.
fn wrap(home: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command.arg("wrap").args(args).env("HOME", home);
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        let lower = name.to_ascii_lowercase();
        if name.starts_with("TOOLSTUB_")
            || name.starts_with("XDG_")
            || [
                "OPENAI_BASE_URL",
                "ANTHROPIC_BASE_URL",
                "GOOGLE_GEMINI_BASE_URL",
                "ANTHROPIC_VERTEX_BASE_URL",
                "ANTHROPIC_FOUNDRY_BASE_URL",
                "ANTHROPIC_FOUNDRY_RESOURCE",
                "ANTHROPIC_BEDROCK_BASE_URL",
                "AWS_REGION",
                "AWS_BEARER_TOKEN_BEDROCK",
                "CLAUDE_CODE_USE_BEDROCK",
                "CLAUDE_CODE_SKIP_BEDROCK_AUTH",
                "OPENAI_API_KEY",
            ]
            .contains(&name)
            || lower.ends_with("_proxy")
        {
            command.env_remove(name);
        }
    }
    command.stdin(Stdio::null());
    command
}

/// Runs to the end within [`RUN_TIMEOUT`] (killed and failed beyond it).
fn output(mut command: Command) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn toolstub wrap");
    let deadline = Instant::now() + RUN_TIMEOUT;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("toolstub wrap ran over {RUN_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn describe(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    )
}

fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut s = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            s.push(',');
        }
        s.push(c);
    }
    s
}

/// The tokens [`CHAT_CHILD`]'s output saves: its original (as Python's
/// `json.dumps` writes it) minus the stub the upstream got.
fn tokens_saved(post: &Recorded) -> u64 {
    let users: Vec<String> = (0..1500)
        .map(|i| format!("{{\"id\": {i}, \"name\": \"user {i}\", \"active\": true}}"))
        .collect();
    let original = format!("{{\"users\": [{}]}}", users.join(", "));
    let body: serde_json::Value = serde_json::from_slice(&post.body).expect("json");
    let stub = body["messages"][2]["content"].as_str().expect("the stub");
    toolstub::tokens::count(&original) - toolstub::tokens::count(stub)
}

/// The `saved=N externalized=M` line of [`CHAT_CHILD`].
fn saved_by_child(stdout: &str) -> (u64, u64) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("saved="))
        .unwrap_or_else(|| panic!("no saved= line in {stdout:?}"));
    let mut parts = line.split(' ').map(|p| {
        p.split_once('=')
            .and_then(|(_, v)| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("bad line {line:?}"))
    });
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

async fn mock_upstream() -> Mock {
    let script: Script = Arc::new(|_: &Recorded| ok_json("done"));
    mock::start(script).await
}

fn chat_posts(mock: &Mock) -> Vec<Recorded> {
    mock.requests()
        .into_iter()
        .filter(|r| r.path_and_query.ends_with("/chat/completions"))
        .collect()
}

/// The upstream got the tool output as a stub, not the original.
fn assert_stubbed(r: &Recorded) {
    let body = text(&r.body);
    assert!(
        body.contains(STUB_HEADER),
        "no stub upstream: {}",
        &body[..body.len().min(400)]
    );
    assert!(!body.contains("user 1499"), "the original went upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_request_goes_through_the_proxy_and_the_summary_counts_it() {
    let mock = mock_upstream().await;
    let home = tempfile::tempdir().expect("tempdir");
    let upstream = format!("http://{}", mock.addr);
    let mut command = wrap(home.path(), &["--upstream", &upstream, "--"]);
    command.args(["python3", "-c", CHAT_CHILD, "3"]);
    let out = output(command);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    let (saved, externalized) = saved_by_child(&stdout);
    assert_eq!(externalized, 1, "{}", describe(&out));
    assert!(saved > 50_000, "{saved}");
    let [post] = chat_posts(&mock).try_into().expect("one request upstream");
    assert_eq!(post.path_and_query, "/v1/chat/completions");
    assert_stubbed(&post);
    // The default store is in the user's data directory, named in the summary.
    let db = home.path().join(".local/share/toolstub/toolstub.db");
    assert!(
        db.is_file(),
        "no store at {}: {}",
        db.display(),
        describe(&out)
    );
    let db_shown = db.display().to_string();
    let tokens = tokens_saved(&post);
    assert!(tokens > 10_000, "{tokens}");
    assert_eq!(
        stderr,
        format!(
            "toolstub: 1 request, 1 tool output externalized, {} characters ({} tokens) saved, 0 recall calls answered\n\
             toolstub: originals kept in {db_shown} (toolstub stats --db {db_shown}; toolstub results --db {db_shown} list)\n",
            grouped(saved),
            grouped(tokens),
        ),
        "the summary, and nothing else on stderr: the proxy logs nowhere"
    );
    // The original is in the store the summary names.
    let tenant = toolstub::store::Tenant::from_credential("Bearer sk-wrap-test");
    let list = Command::new(BIN)
        .args(["results", "--db"])
        .arg(&db)
        .args(["--tenant", tenant.as_str(), "--json", "list"])
        .output()
        .expect("toolstub results");
    assert!(
        text(&list.stdout).contains("\"tool_name\": \"read_file\""),
        "{}",
        text(&list.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_and_signal_deaths_pass_through() {
    let mock = mock_upstream().await;
    let home = tempfile::tempdir().expect("tempdir");
    let upstream = format!("http://{}", mock.addr);
    let db = home.path().join("t.db");
    let db = db.to_str().expect("utf-8 path");
    for (script, code) in [
        ("exit 0", 0),
        ("exit 7", 7),
        ("exit 255", 255),
        ("kill -TERM $$", 128 + 15),
        ("kill -KILL $$", 128 + 9),
    ] {
        let mut command = wrap(home.path(), &["--upstream", &upstream, "--db", db, "--"]);
        command.args(["sh", "-c", script]);
        let out = output(command);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{script}: {}",
            describe(&out)
        );
        assert!(
            text(&out.stderr).starts_with("toolstub: 0 requests, 0 tool outputs externalized"),
            "{script}: {}",
            describe(&out)
        );
    }
    let mut quiet = wrap(home.path(), &["--db", db, "--quiet", "--"]);
    quiet.args(["sh", "-c", "echo out; echo err >&2; exit 4"]);
    let out = output(quiet);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(text(&out.stdout), "out\n");
    assert_eq!(text(&out.stderr), "err\n", "--quiet: no summary");

    let mut missing = wrap(home.path(), &["--db", db, "--"]);
    missing.arg("/nonexistent/toolstub-wrap-test-command");
    let out = output(missing);
    assert_eq!(out.status.code(), Some(127), "{}", describe(&out));
    assert_eq!(
        text(&out.stderr).lines().collect::<Vec<_>>(),
        ["toolstub wrap: cannot run /nonexistent/toolstub-wrap-test-command: No such file or directory (os error 2)"],
        "the reason, and no summary of a command that never ran"
    );

    let mut bad_env = wrap(home.path(), &["--db", db, "--"]);
    bad_env
        .env("TOOLSTUB_NOPE", "1")
        .args(["sh", "-c", "exit 0"]);
    let out = output(bad_env);
    assert_eq!(
        out.status.code(),
        Some(125),
        "wrap's own failure: {}",
        describe(&out)
    );
    assert!(
        text(&out.stderr).contains("TOOLSTUB_NOPE"),
        "{}",
        describe(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_child_gets_the_proxys_endpoints_and_keeps_the_rest_of_its_environment() {
    let mock = mock_upstream().await;
    let home = tempfile::tempdir().expect("tempdir");
    let upstream = format!("http://{}", mock.addr);
    let db = home.path().join("t.db");
    let child = r#"
import os, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
with opener.open(os.environ["ANTHROPIC_BASE_URL"] + "/healthz", timeout=10) as r:
    health = r.read().decode().strip()
print("openai=" + os.environ["OPENAI_BASE_URL"])
print("anthropic=" + os.environ["ANTHROPIC_BASE_URL"])
print("health=" + health)
print("kept=" + os.environ.get("WRAP_TEST_KEPT", "-"))
print("toolstub_vars=" + ",".join(sorted(k for k in os.environ if k.startswith("TOOLSTUB_"))))
print("no_proxy=" + os.environ.get("NO_PROXY", "-"))
"#;
    let mut command = wrap(
        home.path(),
        &[
            "--upstream",
            &upstream,
            "--db",
            db.to_str().expect("utf-8"),
            "--",
        ],
    );
    command
        .env("WRAP_TEST_KEPT", "yes")
        .env("HTTPS_PROXY", "http://127.0.0.1:9")
        .env("NO_PROXY", "localhost")
        .args(["python3", "-c", child]);
    let out = output(command);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stdout = text(&out.stdout);
    let value = |key: &str| -> String {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in {stdout}"))
            .to_string()
    };
    let anthropic = value("anthropic");
    let (port, secret) = anthropic
        .strip_prefix("http://127.0.0.1:")
        .and_then(|rest| rest.split_once("/run/"))
        .and_then(|(port, secret)| Some((port.parse::<u16>().ok()?, secret)))
        .unwrap_or_else(|| panic!("ANTHROPIC_BASE_URL={anthropic}"));
    assert_ne!(port, 0);
    assert_eq!(secret.len(), 43, "256 bits in base64url: {secret}");
    assert_eq!(value("openai"), format!("{anthropic}/v1"));
    assert_eq!(
        value("health"),
        "ok",
        "the proxy answers at the child's URL"
    );
    assert_eq!(value("kept"), "yes");
    assert_eq!(
        value("toolstub_vars"),
        "",
        "no TOOLSTUB_* variable for the child"
    );
    assert_eq!(
        value("no_proxy"),
        "localhost,127.0.0.1",
        "an HTTP proxy set: the proxy's host is kept off it"
    );
}

/// Another process on the machine reaches wrap's port but not its run
/// secret: every path answers 404, and nothing reaches the upstream (no
/// request signed with the user's AWS credentials, no output read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_on_the_machine_gets_nothing_from_wraps_proxy() {
    let mock = mock_upstream().await;
    let home = tempfile::tempdir().expect("tempdir");
    let db = home.path().join("t.db");
    let child = r#"
import os, re, urllib.request, urllib.error
base = os.environ["ANTHROPIC_BASE_URL"]
origin = re.match(r"(http://127\.0\.0\.1:\d+)/run/", base).group(1)
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
def status(url, body=None, headers={}):
    req = urllib.request.Request(url, data=body, headers=headers)
    try:
        with opener.open(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
invoke = b'{"anthropic_version":"bedrock-2023-05-31","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}'
chat = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
for name, url, body, headers in [
    ("healthz", origin + "/healthz", None, {}),
    ("metrics", origin + "/metrics", None, {}),
    ("results", origin + "/toolstub/v1/results", None, {}),
    ("dashboard", origin + "/toolstub/", None, {}),
    ("bedrock", origin + "/model/anthropic.claude-x/invoke", invoke, {"content-type": "application/json"}),
    ("chat", origin + "/v1/chat/completions", chat, {"content-type": "application/json", "authorization": "Bearer sk-x"}),
    ("wrong_secret", origin + "/run/" + "A" * 43 + "/healthz", None, {}),
    ("no_secret_run", origin + "/run/", None, {}),
    ("with_secret", base + "/healthz", None, {}),
    ("wrong_header", origin + "/healthz", None, {"x-toolstub-run-secret": "A" * 43}),
    ("header", origin + "/healthz", None, {"x-toolstub-run-secret": base.rsplit("/", 1)[1]}),
    ("both", base + "/healthz", None, {"x-toolstub-run-secret": base.rsplit("/", 1)[1]}),
]:
    print("%s=%d" % (name, status(url, body, headers)))
"#;
    let mut command = wrap(
        home.path(),
        &[
            "--upstream",
            &format!("http://{}", mock.addr),
            "--db",
            db.to_str().expect("utf-8"),
            "--",
        ],
    );
    command
        .env("AWS_ACCESS_KEY_ID", "AKIDWRAPATTACK000001")
        .env("AWS_SECRET_ACCESS_KEY", "wrap/attack/secret")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("TOOLSTUB_UPSTREAM_AWS_SIGNING_HOSTS", "[\"127.0.0.1\"]")
        .args(["python3", "-c", child]);
    let out = output(command);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stdout = text(&out.stdout);
    for name in [
        "healthz",
        "metrics",
        "results",
        "dashboard",
        "bedrock",
        "chat",
        "wrong_secret",
        "no_secret_run",
        "wrong_header",
    ] {
        assert!(
            stdout.contains(&format!("{name}=404")),
            "{name} without the run secret: {stdout}"
        );
    }
    assert!(stdout.contains("with_secret=200"), "{stdout}");
    assert!(
        stdout.contains("both=200"),
        "in the path and a header: {stdout}"
    );
    assert!(
        stdout.contains("header=200"),
        "the secret as a header: {stdout}"
    );
    assert!(
        mock.requests().is_empty(),
        "nothing reached the upstream: {:?}",
        mock.requests()
            .iter()
            .map(|r| r.path_and_query.clone())
            .collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_childs_own_base_urls_become_the_upstream() {
    let mock = mock_upstream().await;
    let home = tempfile::tempdir().expect("tempdir");
    let db = home.path().join("t.db");
    let db = db.to_str().expect("utf-8");
    let child = format!("{ANTHROPIC_CHILD}{CHAT_CHILD}");
    let mut command = wrap(home.path(), &["--db", db, "--"]);
    command
        .env("OPENAI_BASE_URL", format!("http://{}/gw/v1/", mock.addr))
        .env(
            "ANTHROPIC_BASE_URL",
            format!("http://{}/anthropic-gw", mock.addr),
        )
        .args(["python3", "-c", &child, "0"]);
    let out = output(command);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("/wrap/openai/gw/v1\n")
            && stdout.contains("/wrap/anthropic/anthropic-gw\n"),
        "{stdout}"
    );
    let paths: Vec<String> = mock
        .requests()
        .iter()
        .map(|r| r.path_and_query.clone())
        .collect();
    assert_eq!(
        paths,
        [
            "/anthropic-gw/v1/messages/count_tokens",
            "/gw/v1/chat/completions"
        ],
        "each request at the URL the child would have used"
    );
    assert_stubbed(&chat_posts(&mock)[0]);
    assert!(
        text(&out.stderr).starts_with("toolstub: 2 requests, 1 tool output externalized"),
        "{}",
        describe(&out)
    );

    // --upstream wins, and says what it replaced.
    let before = mock.requests().len();
    let mut command = wrap(
        home.path(),
        &[
            "--upstream",
            &format!("http://{}", mock.addr),
            "--db",
            db,
            "--",
        ],
    );
    command
        .env("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
        .args(["python3", "-c", CHAT_CHILD, "0"]);
    let out = output(command);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        text(&out.stderr).starts_with(
            "toolstub wrap: OPENAI_BASE_URL=http://127.0.0.1:1/v1 is not used: --upstream sends every request to http://"
        ),
        "{}",
        describe(&out)
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), before + 1);
    assert_eq!(requests[before].path_and_query, "/v1/chat/completions");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_is_pointed_at_the_proxy_and_its_own_base_url_kept() {
    let mock = mock_upstream().await;
    let home = tempfile::tempdir().expect("tempdir");
    let db = home.path().join("t.db");
    let db = db.to_str().expect("utf-8");
    let upstream = format!("http://{}", mock.addr);
    let mut command = wrap(home.path(), &["--upstream", &upstream, "--db", db, "--"]);
    command.args(["python3", "-c", GEMINI_CHILD]);
    let out = output(command);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stdout = text(&out.stdout);
    let pointed = stdout
        .lines()
        .find_map(|l| l.strip_prefix("gemini="))
        .expect("the child's GOOGLE_GEMINI_BASE_URL");
    assert!(pointed.starts_with("http://127.0.0.1:"), "{stdout}");
    assert_ne!(pointed, upstream, "the child goes through the proxy");
    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].path_and_query,
        "/v1beta/models/m:generateContent"
    );
    assert_eq!(requests[0].headers["x-goog-api-key"], "AIza-wrap");

    // The child's own base URL becomes the upstream, through a route.
    let mut command = wrap(home.path(), &["--db", db, "--"]);
    command
        .env(
            "GOOGLE_GEMINI_BASE_URL",
            format!("http://{}/google-gw", mock.addr),
        )
        .args(["python3", "-c", GEMINI_CHILD]);
    let out = output(command);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        text(&out.stdout).contains("/wrap/gemini/google-gw\n"),
        "{}",
        describe(&out)
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].path_and_query,
        "/google-gw/v1beta/models/m:generateContent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_sent_to_wrap_reach_the_child_and_wrap_outlives_them() {
    let home = tempfile::tempdir().expect("tempdir");
    let ready = home.path().join("ready");
    let log = home.path().join("signals");
    let child = r#"
import signal, sys, time
got = []
def on(signo, _frame):
    got.append(signal.Signals(signo).name)
    open(sys.argv[2], "w").write(" ".join(got))
    if signo == signal.SIGTERM:
        sys.exit(40 + len(got))
for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
    signal.signal(s, on)
open(sys.argv[1], "w").close()
deadline = time.time() + 50
while time.time() < deadline:
    time.sleep(0.02)
sys.exit(1)
"#;
    let mut command = wrap(
        home.path(),
        &[
            "--db",
            home.path().join("t.db").to_str().expect("utf-8"),
            "--",
        ],
    );
    command
        .args(["python3", "-c", child])
        .arg(&ready)
        .arg(&log)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = command.spawn().expect("spawn");
    let pid = libc::pid_t::try_from(child.id()).expect("pid");
    wait_for(&ready);
    let signals_so_far = |n: usize| {
        let deadline = Instant::now() + RUN_TIMEOUT;
        loop {
            let got = std::fs::read_to_string(&log).unwrap_or_default();
            if got.split(' ').filter(|s| !s.is_empty()).count() >= n {
                return got;
            }
            assert!(Instant::now() < deadline, "the child got only {got:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    for (signo, n) in [(libc::SIGINT, 1), (libc::SIGHUP, 2), (libc::SIGTERM, 3)] {
        // SAFETY: kill(2) on the wrap process this test started.
        assert_eq!(unsafe { libc::kill(pid, signo) }, 0);
        signals_so_far(n);
    }
    let out = child.wait_with_output().expect("wait");
    assert_eq!(
        std::fs::read_to_string(&log).expect("log"),
        "SIGINT SIGHUP SIGTERM"
    );
    assert_eq!(
        out.status.code(),
        Some(43),
        "the child's own exit code after SIGTERM: {}",
        describe(&out)
    );
    assert!(
        text(&out.stderr).starts_with("toolstub: 0 requests"),
        "wrap lived on to the summary: {}",
        describe(&out)
    );
}

/// Under a pseudo-terminal, Ctrl-C signals the whole foreground process
/// group: the child gets it from the terminal, and wrap must not pass on a
/// second one (Claude Code exits on a second Ctrl-C).
#[test]
fn a_terminal_ctrl_c_reaches_the_child_once() {
    // Three Ctrl-C, 0.4 s apart: three deliveries, not six.
    assert_eq!(ctrl_c_three_times(false), 3);
    // The child in a process group of its own hears nothing from the
    // terminal: wrap, which does, passes none of it on (and outlives it).
    // Deterministic where the count above can hide a doubled signal that
    // the kernel merged with the first.
    assert_eq!(ctrl_c_three_times(true), 0);
}

/// Runs wrap under a pseudo-terminal with a child that counts SIGINT
/// deliveries (in its own process group if `own_group`), types Ctrl-C
/// three times, and returns the child's count.
fn ctrl_c_three_times(own_group: bool) -> usize {
    let home = tempfile::tempdir().expect("tempdir");
    let ready = home.path().join("ready");
    let count = home.path().join("count");
    // Counts deliveries, not Python-level handler runs (those coalesce):
    // the C-level handler writes one byte to the wakeup fd per delivery.
    let child = r#"
import os, signal, sys, time
r, w = os.pipe()
os.set_blocking(w, False)
os.set_blocking(r, False)
signal.set_wakeup_fd(w)
signal.signal(signal.SIGINT, lambda *_: None)
if sys.argv[3] == "own-group":
    os.setpgid(0, 0)
open(sys.argv[1], "w").close()
n = 0
started = time.time()
last = started
while time.time() - last < 1.5 and time.time() - started < 30:
    try:
        n += len(os.read(r, 64))
        last = time.time()
    except BlockingIOError:
        pass
    if n == 0 and time.time() - started > 3.0:
        break
    time.sleep(0.005)
open(sys.argv[2], "w").write(str(n))
sys.exit(5)
"#;
    let harness = r#"
import os, pty, select, sys, time
argv, ready = sys.argv[1:-1], sys.argv[-1]
pid, fd = pty.fork()
if pid == 0:
    os.execv(argv[0], argv)
seen = b""
def drain(timeout):
    global seen
    r, _, _ = select.select([fd], [], [], timeout)
    if r:
        try:
            seen += os.read(fd, 65536)
        except OSError:
            return False
    return True
deadline = time.time() + 30
while not os.path.exists(ready) and time.time() < deadline:
    drain(0.02)
for _ in range(3):
    os.write(fd, b"\x03")
    t = time.time() + 0.4
    while time.time() < t:
        drain(0.02)
while drain(0.1):
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
else:
    _, status = os.waitpid(pid, 0)
while drain(0.05) and select.select([fd], [], [], 0)[0]:
    pass
sys.stdout.write(seen.decode(errors="replace"))
sys.stdout.write("\nEXIT=%d\n" % os.waitstatus_to_exitcode(status))
"#;
    let db = home.path().join("t.db");
    let mut command = Command::new("python3");
    command
        .args(["-c", harness, BIN, "wrap", "--db"])
        .arg(&db)
        .args(["--", "python3", "-c", child])
        .arg(&ready)
        .arg(&count)
        .arg(if own_group { "own-group" } else { "same-group" })
        .arg(&ready)
        .env("HOME", home.path());
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(|n| n.starts_with("TOOLSTUB_")) {
            command.env_remove(name);
        }
    }
    let out = output(command);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("EXIT=5"),
        "wrap exits with the child's code: {}",
        describe(&out)
    );
    assert!(
        stdout.contains("toolstub: 0 requests"),
        "{}",
        describe(&out)
    );
    std::fs::read_to_string(&count)
        .expect("the child's count")
        .parse()
        .expect("a number")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_is_given_a_provider_pointing_at_the_proxy() {
    let mock = mock_upstream().await;
    let home = tempfile::tempdir().expect("tempdir");
    let bin = home.path().join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    let codex = bin.join("codex");
    let args_file = home.path().join("args");
    std::fs::write(
        &codex,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\necho \"openai=$OPENAI_BASE_URL\"\necho \"secret=$CODEX_TOOLSTUB_RUN_SECRET\"\n",
            args_file.display()
        ),
    )
    .expect("write");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&codex, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let upstream = format!("http://{}", mock.addr);
    let db = home.path().join("t.db");
    for key in [Some("sk-codex"), None] {
        let mut command = wrap(
            home.path(),
            &[
                "--upstream",
                &upstream,
                "--db",
                db.to_str().expect("utf-8"),
                "--",
            ],
        );
        command.arg(&codex).args(["exec", "--json", "do it"]);
        if let Some(key) = key {
            command.env("OPENAI_API_KEY", key);
        }
        let out = output(command);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let openai = text(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("openai=").map(str::to_string))
            .expect("openai=");
        let secret = text(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("secret=").map(str::to_string))
            .expect("secret=");
        let args = std::fs::read_to_string(&args_file).expect("args");
        let auth = match key {
            Some(_) => "env_key=\"OPENAI_API_KEY\"",
            None => "requires_openai_auth=true",
        };
        // Arguments are readable by every user of the machine (`ps`): the
        // run's secret is not in them, Codex sends it from its environment.
        assert_eq!(secret.len(), 43, "the run's secret: {secret:?}");
        assert!(openai.contains(&format!("/run/{secret}/")), "{openai}");
        let without = openai.replace(&format!("/run/{secret}"), "");
        assert!(!args.contains(&secret), "{args}");
        assert_eq!(
            args,
            format!(
                "-c\nmodel_provider=\"toolstub_wrap\"\n-c\nmodel_providers.toolstub_wrap={{name=\"OpenAI through toolstub\",base_url=\"{without}\",wire_api=\"responses\",supports_websockets=false,{auth},env_http_headers={{\"x-toolstub-run-secret\"=\"CODEX_TOOLSTUB_RUN_SECRET\"}}}}\nexec\n--json\ndo it\n"
            )
        );
        assert!(without.starts_with("http://127.0.0.1:") && without.ends_with("/v1"));
    }
    // A program of another name gets its arguments untouched.
    let other = bin.join("codex-not");
    std::fs::copy(&codex, &other).expect("copy");
    let mut command = wrap(
        home.path(),
        &[
            "--upstream",
            &upstream,
            "--db",
            db.to_str().expect("utf-8"),
            "--",
        ],
    );
    command.arg(&other).args(["exec", "x"]);
    let out = output(command);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(
        std::fs::read_to_string(&args_file).expect("args"),
        "exec\nx\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_proxy_is_used_and_its_counts_over_the_run_are_summarized() {
    let mock = mock_upstream().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let overrides = toolstub::config::Overrides {
        listen: Some("127.0.0.1:0".to_string()),
        upstream: Some(format!("http://{}", mock.addr)),
        db: Some(dir.path().join("serve.db")),
        ..Default::default()
    };
    let config = toolstub::config::load(None, Vec::new(), &overrides).expect("config");
    let server = toolstub::proxy::Server::start(config).await.expect("proxy");
    let proxy = format!("http://{}", server.addr);
    // Traffic before the command: not in its summary.
    let client = mock::client();
    let (status, _, _) = mock::send(
        &client,
        "POST",
        format!("{proxy}/v1/chat/completions"),
        &[("content-type", "application/json")],
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    assert_eq!(status, 200);
    let home = tempfile::tempdir().expect("tempdir");
    let mut command = wrap(home.path(), &["--proxy", &proxy, "--"]);
    command.args(["python3", "-c", CHAT_CHILD, "0"]);
    let out = tokio::task::spawn_blocking(move || output(command))
        .await
        .expect("join");
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let (saved, _) = saved_by_child(&text(&out.stdout));
    let post = chat_posts(&mock).last().cloned().expect("a request");
    assert_stubbed(&post);
    // The running proxy counts tokens in the background, at a low priority:
    // when wrap reads its /metrics the count may not be in yet (then 0; it
    // is never another figure).
    let line = |tokens: u64| {
        format!(
            "toolstub: 1 request, 1 tool output externalized, {} characters ({} tokens) saved, 0 recall calls answered (by {proxy} while the command ran, every client's)\n",
            grouped(saved),
            grouped(tokens),
        )
    };
    let stderr = text(&out.stderr);
    assert!(
        stderr == line(tokens_saved(&post)) || stderr == line(0),
        "{stderr}"
    );
    assert!(
        !home.path().join(".local").exists(),
        "no store of its own with --proxy"
    );
    server.shutdown().await;

    let mut command = wrap(home.path(), &["--proxy", &proxy, "--"]);
    command.args(["sh", "-c", "exit 0"]);
    let out = tokio::task::spawn_blocking(move || output(command))
        .await
        .expect("join");
    assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("no toolstub answers at"),
        "{}",
        describe(&out)
    );
}

/// wrap's own store is its user's alone: the folders it makes for it
/// are 0700, the database and its -wal and -shm 0600 (seen by the child,
/// while the store is open); a folder that exists keeps its mode.
#[test]
fn the_store_wrap_makes_is_its_users_alone() {
    let home = tempfile::tempdir().expect("tempdir");
    let share = home.path().join(".local/share");
    let dir = share.join("toolstub");
    let modes =
        |out: &Output| -> Vec<String> { text(&out.stdout).lines().map(str::to_string).collect() };
    let script = "cd \"$HOME/.local/share\" && stat -c '%a %n' . toolstub toolstub/toolstub.db \
                  toolstub/toolstub.db-wal toolstub/toolstub.db-shm";
    let mut command = wrap(home.path(), &["--quiet", "--"]);
    command.args(["sh", "-c", script]);
    let out = output(command);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(
        modes(&out),
        [
            "700 .",
            "700 toolstub",
            "600 toolstub/toolstub.db",
            "600 toolstub/toolstub.db-wal",
            "600 toolstub/toolstub.db-shm"
        ],
        "{}",
        describe(&out)
    );
    // Made by someone else (or loosened by its user): left as it is.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut command = wrap(home.path(), &["--quiet", "--"]);
    command.args(["sh", "-c", script]);
    let out = output(command);
    assert_eq!(modes(&out)[1], "755 toolstub", "{}", describe(&out));
    assert!(share.is_dir());
}

#[test]
fn wrap_needs_a_command_after_the_separator() {
    let home = tempfile::tempdir().expect("tempdir");
    let out = output(wrap(home.path(), &[]));
    assert_eq!(
        out.status.code(),
        Some(2),
        "clap's usage error: {}",
        describe(&out)
    );
    let out = output(wrap(
        home.path(),
        &[
            "--proxy",
            "http://127.0.0.1:1",
            "--db",
            "x.db",
            "--",
            "true",
        ],
    ));
    assert_eq!(
        out.status.code(),
        Some(2),
        "--proxy with a store flag: {}",
        describe(&out)
    );
    assert!(
        text(&out.stderr).contains("cannot be used with"),
        "{}",
        describe(&out)
    );
}

/// Claude Code on the clouds: Vertex AI's and Bedrock's base URLs always
/// point at the proxy; Foundry's does when the environment names the
/// resource (the upstream Claude Code would have used:
/// `https://{resource}.services.ai.azure.com/anthropic`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_codes_cloud_endpoints_point_at_the_proxy() {
    let home = tempfile::tempdir().expect("tempdir");
    let db = home.path().join("t.db");
    let child = r#"
import os
for k in ["ANTHROPIC_VERTEX_BASE_URL", "ANTHROPIC_FOUNDRY_BASE_URL", "ANTHROPIC_BEDROCK_BASE_URL", "CLAUDE_CODE_SKIP_BEDROCK_AUTH"]:
    print(k + "=" + os.environ.get(k, "-"))
"#;
    let mut command = wrap(home.path(), &["--db", db.to_str().expect("utf-8"), "--"]);
    command
        .env("CLAUDE_CODE_USE_BEDROCK", "1")
        .env("AWS_REGION", "eu-west-1")
        .env("ANTHROPIC_FOUNDRY_RESOURCE", "my-resource")
        .args(["python3", "-c", child]);
    let out = output(command);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stdout = text(&out.stdout);
    let value = |key: &str| -> String {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in {stdout}"))
            .to_string()
    };
    let vertex = value("ANTHROPIC_VERTEX_BASE_URL");
    let base = vertex
        .strip_suffix("/v1")
        .filter(|b| b.starts_with("http://127.0.0.1:"))
        .unwrap_or_else(|| panic!("ANTHROPIC_VERTEX_BASE_URL={vertex}"));
    assert_eq!(
        value("ANTHROPIC_FOUNDRY_BASE_URL"),
        format!("{base}/wrap/foundry/anthropic"),
        "the resource's endpoint, through wrap's route"
    );
    assert_eq!(value("ANTHROPIC_BEDROCK_BASE_URL"), base);
    // The proxy signs Claude Code's Bedrock requests: an SSO or role
    // profile gives the child keys of its own, whose signature would not
    // check against the proxy's.
    assert_eq!(value("CLAUDE_CODE_SKIP_BEDROCK_AUTH"), "1");

    // With a Bedrock API key, Claude Code sends it (the proxy signs
    // nothing): not told to skip.
    let mut command = wrap(home.path(), &["--db", db.to_str().expect("utf-8"), "--"]);
    command
        .env("CLAUDE_CODE_USE_BEDROCK", "1")
        .env("AWS_BEARER_TOKEN_BEDROCK", "ABSKQmVkcm9jaw")
        .args(["python3", "-c", child]);
    let out = output(command);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        text(&out.stdout).contains("CLAUDE_CODE_SKIP_BEDROCK_AUTH=-\n"),
        "{}",
        text(&out.stdout)
    );

    // Without a Foundry endpoint in the environment, none is made up.
    let mut command = wrap(home.path(), &["--db", db.to_str().expect("utf-8"), "--"]);
    command.args(["python3", "-c", child]);
    let out = output(command);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(text(&out.stdout).contains("ANTHROPIC_FOUNDRY_BASE_URL=-\n"));
}
