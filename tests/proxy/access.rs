//! Who may use the proxy, played as an attacker would: a web page on
//! another origin (a blind cross-site POST, DNS rebinding), another
//! machine, a caller with no key where keys are required; and where the
//! credentials the proxy holds may go.

use super::mock::{self, client, ok_json, send, Recorded, Script};
use super::{big_json, chat_body, KEY};
use serde_json::Value;
use std::sync::Arc;
use toolstub::config::{load, Overrides};
use toolstub::proxy::Server;

/// A proxy in front of a mock that answers every request, with `env`
/// (`TOOLSTUB_*` and provider variables) and `listen`.
async fn start(listen: &str, env: &[(&str, &str)]) -> (Server, mock::Mock, tempfile::TempDir) {
    let script: Script = Arc::new(|_: &Recorded| ok_json("done"));
    let mock = mock::start(script).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let overrides = Overrides {
        listen: Some(listen.to_string()),
        upstream: Some(format!("http://{}", mock.addr)),
        db: Some(dir.path().join("toolstub.db")),
        ..Overrides::default()
    };
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    let config = load(None, env, &overrides).expect("config");
    let proxy = Server::start(config).await.expect("proxy");
    (proxy, mock, dir)
}

fn local_url(proxy: &Server, path: &str) -> String {
    format!("http://127.0.0.1:{}{path}", proxy.addr.port())
}

const CHAT: &str = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;

#[tokio::test]
async fn a_page_of_another_origin_gets_nothing_from_a_local_proxy() {
    let (proxy, mock, _dir) = start("127.0.0.1:0", &[]).await;
    let c = client();
    let port = proxy.addr.port();
    let rebound = format!("attacker.example:{port}");
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        // DNS rebinding: the page's own name now points at 127.0.0.1.
        ("rebound host", vec![("host", &rebound)]),
        // A blind cross-site POST with a body the browser sends unasked.
        (
            "cross-site text/plain POST",
            vec![
                ("origin", "http://attacker.example"),
                ("content-type", "text/plain"),
                ("sec-fetch-site", "cross-site"),
            ],
        ),
        (
            "another origin",
            vec![("origin", "http://attacker.example")],
        ),
        (
            "another local port",
            vec![("origin", "http://localhost:3000")],
        ),
        ("cross-site fetch", vec![("sec-fetch-site", "cross-site")]),
    ];
    for (what, headers) in cases {
        for (method, path, body) in [
            ("POST", "/v1/chat/completions", CHAT),
            ("POST", "/v1/messages", CHAT),
            ("GET", "/toolstub/v1/results", ""),
            ("GET", "/metrics", ""),
            ("GET", "/v1/models", ""),
        ] {
            let (status, _, answer) =
                send(&c, method, local_url(&proxy, path), &headers, body).await;
            assert_eq!(status, 403, "{what}: {method} {path}");
            let v: Value = serde_json::from_slice(&answer).expect("a JSON error");
            assert!(v["error"].is_object(), "{what}: {v}");
        }
    }
    assert!(
        mock.requests().is_empty(),
        "nothing went upstream: {:?}",
        mock.requests()
            .iter()
            .map(|r| r.path_and_query.clone())
            .collect::<Vec<_>>()
    );
    // The proxy's own page and programs on this machine are served.
    let own = format!("http://127.0.0.1:{port}");
    let (status, _, _) = send(
        &c,
        "POST",
        local_url(&proxy, "/v1/chat/completions"),
        &[("origin", &own), ("authorization", KEY)],
        CHAT,
    )
    .await;
    assert_eq!(status, 200);
    let (status, _, _) = send(
        &c,
        "POST",
        format!("http://localhost:{port}/v1/chat/completions"),
        &[("authorization", KEY)],
        CHAT,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(mock.requests().len(), 2);
    proxy.shutdown().await;
}

/// A non-loopback address of this machine, to connect from.
fn machine_address() -> std::net::IpAddr {
    let probe = std::process::Command::new("hostname")
        .arg("-I")
        .output()
        .expect("hostname -I");
    String::from_utf8_lossy(&probe.stdout)
        .split_whitespace()
        .filter_map(|a| a.parse::<std::net::IpAddr>().ok())
        .find(|ip| ip.is_ipv4() && !ip.is_loopback())
        .expect("this machine has a non-loopback IPv4 address")
}

#[tokio::test]
async fn a_proxy_requiring_no_key_answers_no_other_machine() {
    // Told to listen everywhere and not to require keys: still only
    // loopback peers are served.
    let (proxy, mock, _dir) = start("0.0.0.0:0", &[("TOOLSTUB_AUTH_REQUIRED", "false")]).await;
    let c = client();
    let remote = format!(
        "http://{}:{}/v1/chat/completions",
        machine_address(),
        proxy.addr.port()
    );
    let (status, _, _) = send(&c, "POST", remote, &[("authorization", KEY)], CHAT).await;
    assert_eq!(status, 403, "a peer that is not loopback");
    assert!(mock.requests().is_empty());
    let (status, _, _) = send(
        &c,
        "POST",
        local_url(&proxy, "/v1/chat/completions"),
        &[("authorization", KEY)],
        CHAT,
    )
    .await;
    assert_eq!(status, 200, "a loopback peer");
    proxy.shutdown().await;
}

#[tokio::test]
async fn listening_beyond_loopback_requires_a_key_in_every_apis_format() {
    // No key made yet: every request is refused, nothing goes upstream.
    let (proxy, mock, _dir) = start("0.0.0.0:0", &[]).await;
    let c = client();
    let output = big_json(3_000);
    type Case<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>, String);
    let cases: [Case; 5] = [
        (
            "/v1/chat/completions",
            "openai",
            vec![("authorization", KEY)],
            chat_body(std::slice::from_ref(&output), ""),
        ),
        (
            "/v1/messages",
            "anthropic",
            vec![
                ("x-api-key", "sk-ant-x"),
                ("anthropic-version", "2023-06-01"),
            ],
            CHAT.to_string(),
        ),
        (
            "/v1beta/models/gemini-x:generateContent",
            "google",
            vec![("x-goog-api-key", "AIza-x")],
            r#"{"contents":[]}"#.to_string(),
        ),
        (
            "/model/anthropic.claude-x/invoke",
            "anthropic",
            vec![],
            r#"{"anthropic_version":"bedrock-2023-05-31","messages":[]}"#.to_string(),
        ),
        (
            "/toolstub/v1/results",
            "openai",
            vec![("authorization", KEY)],
            String::new(),
        ),
    ];
    for (path, flavor, headers, body) in cases {
        let method = if body.is_empty() { "GET" } else { "POST" };
        let (status, _, answer) = send(&c, method, local_url(&proxy, path), &headers, body).await;
        assert_eq!(status, 401, "{path}");
        let v: Value = serde_json::from_slice(&answer).expect("a JSON error");
        match flavor {
            "anthropic" => assert_eq!(v["error"]["type"], "authentication_error", "{v}"),
            "google" => assert_eq!(v["error"]["status"], "UNAUTHENTICATED", "{v}"),
            _ => assert_eq!(v["error"]["code"], "invalid_client_key", "{v}"),
        }
    }
    let wrong = format!("tsk_{}", "A".repeat(43));
    let (status, _, _) = send(
        &c,
        "POST",
        local_url(&proxy, "/v1/chat/completions"),
        &[("x-toolstub-key", &wrong), ("authorization", KEY)],
        CHAT,
    )
    .await;
    assert_eq!(status, 401, "a key no one made");
    assert!(mock.requests().is_empty(), "nothing went upstream");
    let (status, _, body) = send(&c, "GET", local_url(&proxy, "/healthz"), &[], "").await;
    assert_eq!(
        (status.as_u16(), &body[..]),
        (200, &b"ok\n"[..]),
        "a load balancer's probe"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_held_provider_key_goes_only_to_its_providers_hosts() {
    let held = "sk-held-by-the-proxy-77";
    // The mock is no provider's host: the held key does not go there.
    let (proxy, mock, _dir) = start("127.0.0.1:0", &[("OPENAI_API_KEY", held)]).await;
    let c = client();
    let (status, _, _) = send(
        &c,
        "POST",
        local_url(&proxy, "/v1/chat/completions"),
        &[],
        CHAT,
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        mock.last().headers.get("authorization").is_none(),
        "not lent to an unlisted host"
    );
    proxy.shutdown().await;

    // Listed for the OpenAI key (a gateway in front of OpenAI): lent to a
    // local caller that sent no key of its own; a caller's own key goes as
    // it is. The Anthropic key the proxy also holds is not listed there.
    let (proxy, mock, _dir) = start(
        "127.0.0.1:0",
        &[
            ("OPENAI_API_KEY", held),
            ("ANTHROPIC_API_KEY", "sk-ant-held-not-for-this-host"),
            ("TOOLSTUB_UPSTREAM_OPENAI_API_KEY_HOSTS", "[\"127.0.0.1\"]"),
        ],
    )
    .await;
    let (status, _, _) = send(
        &c,
        "POST",
        local_url(&proxy, "/v1/chat/completions"),
        &[],
        CHAT,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        mock.last().headers["authorization"],
        format!("Bearer {held}")
    );
    let (status, _, _) = send(
        &c,
        "POST",
        local_url(&proxy, "/v1/chat/completions"),
        &[("authorization", KEY)],
        CHAT,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(mock.last().headers["authorization"], KEY);
    // An Anthropic request to the same host gets neither key.
    let (status, _, _) = send(
        &c,
        "POST",
        local_url(&proxy, "/v1/messages"),
        &[("anthropic-version", "2023-06-01")],
        CHAT,
    )
    .await;
    assert_eq!(status, 200);
    let last = mock.last();
    assert!(last.headers.get("authorization").is_none() && last.headers.get("x-api-key").is_none());
    proxy.shutdown().await;
}

/// A Bedrock invoke body with one large tool output.
fn bedrock_body(output: &str) -> String {
    serde_json::json!({
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "read it"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": output}]},
        ],
    })
    .to_string()
}

fn anthropic_reply() -> Script {
    Arc::new(|_: &Recorded| {
        mock::Reply::Full(
            200,
            vec![("content-type", "application/json".to_string())],
            serde_json::json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 1, "output_tokens": 1},
            })
            .to_string(),
        )
    })
}

/// `url` POSTed with `body`, signed with SigV4 for `bedrock` as a client
/// that signs its own requests does (the proxy's host in the signature).
async fn signed_invoke(url: &str, body: &str, key_id: &str, secret: &str) -> (u16, Vec<u8>) {
    use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
    use http_body_util::{BodyExt, Full};
    let uri: http::Uri = url.parse().expect("uri");
    let host = uri.authority().expect("authority").to_string();
    let mut request = http::Request::builder()
        .method("POST")
        .uri(uri)
        .header("host", host)
        .header("content-type", "application/json")
        .body(())
        .expect("request");
    let identity =
        aws_credential_types::Credentials::new(key_id, secret, None, None, "test").into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("bedrock")
        .time(std::time::SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .expect("params")
        .into();
    let headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().expect("ascii").to_string()))
        .collect();
    let signable = SignableRequest::new(
        "POST",
        request.uri().to_string(),
        headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        SignableBody::Bytes(body.as_bytes()),
    )
    .expect("signable");
    sign(signable, &params)
        .expect("signed")
        .into_parts()
        .0
        .apply_to_request_http1x(&mut request);
    let (parts, ()) = request.into_parts();
    let request = http::Request::from_parts(parts, Full::new(bytes::Bytes::from(body.to_string())));
    let response = client().request(request).await.expect("response");
    let status = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, bytes.to_vec())
}

const AKID: &str = "AKIDTENANTATTACK0001";
const AWS_SECRET: &str = "tenant/attack/secret/0123456789";

fn aws_env(listed: bool) -> Vec<(&'static str, &'static str)> {
    let mut env = vec![
        ("AWS_ACCESS_KEY_ID", AKID),
        ("AWS_SECRET_ACCESS_KEY", AWS_SECRET),
        ("AWS_REGION", "us-east-1"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ];
    if listed {
        env.push(("TOOLSTUB_UPSTREAM_AWS_SIGNING_HOSTS", "[\"127.0.0.1\"]"));
    }
    env
}

/// A SigV4-signed client's outputs are its AWS identity's, which only its
/// secret key can name: its access key id (in every signed request, no
/// secret) sent as a credential reads nothing.
#[tokio::test]
async fn an_aws_access_key_id_names_no_tenant() {
    let mock = mock::start(anthropic_reply()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("toolstub.db");
    let upstream = format!("http://{}", mock.addr);
    let proxy = super::Binary::serve(
        &["--upstream", &upstream, "--db", &db.to_string_lossy()],
        &aws_env(true),
    )
    .await;
    let body = bedrock_body(&big_json(3_000));
    let (status, answer) = signed_invoke(
        &proxy.url("/model/anthropic.claude-x/invoke"),
        &body,
        AKID,
        AWS_SECRET,
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let sent = mock.last();
    let authorization = sent.headers["authorization"].to_str().expect("ascii");
    assert!(
        authorization.starts_with(&format!("AWS4-HMAC-SHA256 Credential={AKID}/")),
        "signed again by the proxy: {authorization}"
    );
    let upstream_body = String::from_utf8_lossy(&sent.body).to_string();
    let r = upstream_body
        .split("ref: ")
        .nth(1)
        .and_then(|rest| rest.split(['\\', '"']).next())
        .expect("the output was stubbed")
        .to_string();
    let c = client();
    for (name, value) in [
        ("x-api-key", AKID.to_string()),
        ("authorization", AKID.to_string()),
        ("authorization", format!("Bearer {AKID}")),
    ] {
        let (status, _, list) = send(
            &c,
            "GET",
            proxy.url("/toolstub/v1/results"),
            &[(name, &value)],
            "",
        )
        .await;
        assert_eq!(status, 200);
        let list: Value = serde_json::from_slice(&list).expect("json");
        assert_eq!(
            list["results"].as_array().map(Vec::len),
            Some(0),
            "{name}: {list}"
        );
        let (status, _, _) = send(
            &c,
            "GET",
            proxy.url(&format!("/toolstub/v1/results/{r}")),
            &[(name, &value)],
            "",
        )
        .await;
        assert_eq!(status, 404, "{name}: the owner's ref {r}");
    }
    proxy.kill();
}

/// The operator's AWS identity signs only for AWS's hosts (or those
/// listed): a request bound elsewhere goes as the client sent it.
#[tokio::test]
async fn aws_signing_goes_only_to_aws_hosts() {
    for listed in [false, true] {
        let mock = mock::start(anthropic_reply()).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("toolstub.db");
        let upstream = format!("http://{}", mock.addr);
        let proxy = super::Binary::serve(
            &["--upstream", &upstream, "--db", &db.to_string_lossy()],
            &aws_env(listed),
        )
        .await;
        // A client that skipped its own AWS auth for this gateway.
        let (status, _, _) = send(
            &client(),
            "POST",
            proxy.url("/model/anthropic.claude-x/invoke"),
            &[("content-type", "application/json")],
            bedrock_body(&big_json(3_000)),
        )
        .await;
        assert_eq!(status, 200);
        let sent = mock.last();
        let signed = sent
            .headers
            .get("authorization")
            .is_some_and(|v| v.to_str().is_ok_and(|v| v.contains(AKID)));
        assert_eq!(signed, listed, "signed only for a listed host");
        if !listed {
            assert!(sent.headers.get("x-amz-date").is_none());
        }
        // Claude Code's Bedrock listing at start, passed through: signed
        // the same way.
        let (status, _, _) = send(
            &client(),
            "GET",
            proxy.url("/inference-profiles?type=SYSTEM_DEFINED"),
            &[],
            "",
        )
        .await;
        assert_eq!(status, 200);
        let sent = mock.last();
        assert_eq!(
            sent.path_and_query,
            "/inference-profiles?type=SYSTEM_DEFINED"
        );
        let signed = sent
            .headers
            .get("authorization")
            .is_some_and(|v| v.to_str().is_ok_and(|v| v.contains(AKID)));
        assert_eq!(signed, listed, "a listing signed only for a listed host");
        // Any other method on those paths changes the account: never
        // signed with the operator's identity.
        send(
            &client(),
            "DELETE",
            proxy.url(
                "/inference-profiles/arn:aws:bedrock:us-east-1:1:application-inference-profile%2Fx",
            ),
            &[],
            "",
        )
        .await;
        let sent = mock.last();
        assert!(sent.path_and_query.starts_with("/inference-profiles/"));
        assert!(
            sent.headers.get("authorization").is_none(),
            "a DELETE is not signed"
        );
        proxy.kill();
    }
}

/// In the local case a request with no credential is `anonymous`; a
/// request naming any credential is that credential's tenant and reads
/// nothing of it.
#[tokio::test]
async fn an_anonymous_local_output_is_not_another_credentials() {
    let (proxy, mock, _dir) = start("127.0.0.1:0", &[]).await;
    let c = client();
    let body = chat_body(&[big_json(3_000)], "");
    let (status, _, _) = send(
        &c,
        "POST",
        local_url(&proxy, "/v1/chat/completions"),
        &[],
        body,
    )
    .await;
    assert_eq!(status, 200);
    let sent = String::from_utf8_lossy(&mock.last().body).to_string();
    let r = sent
        .split("ref: ")
        .nth(1)
        .and_then(|rest| rest.split(['\\', '"']).next())
        .expect("the output was stubbed")
        .to_string();
    let read = |headers: Vec<(&'static str, &'static str)>| {
        let c = c.clone();
        let url = local_url(&proxy, &format!("/toolstub/v1/results/{r}"));
        async move { send(&c, "GET", url, &headers, "").await.0 }
    };
    assert_eq!(read(vec![]).await, 200, "anonymous reads its own");
    for credential in [
        ("x-api-key", "anything"),
        ("authorization", "Bearer anonymous"),
        ("authorization", "anonymous"),
        ("x-goog-api-key", "anonymous"),
    ] {
        assert_eq!(read(vec![credential]).await, 404, "{credential:?}");
    }
    proxy.shutdown().await;
}

/// Makes a client key in the proxy's own store, as `toolstub keys create`
/// does; returns the key.
async fn make_key(proxy: &Server, name: &str) -> String {
    let key = toolstub::auth::ClientKey::generate().expect("random");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    proxy
        .app
        .store
        .create_key(name, key.hash, now)
        .await
        .expect("create the key");
    key.secret.clone()
}

/// The ref of the stub in the last request the mock received.
fn last_ref(mock: &mock::Mock) -> String {
    let sent = String::from_utf8_lossy(&mock.last().body).to_string();
    sent.split("ref: ")
        .nth(1)
        .and_then(|rest| rest.split(['\\', '"']).next())
        .expect("the output was stubbed")
        .to_string()
}

#[tokio::test]
async fn client_keys_admit_their_holders_scope_their_outputs_and_never_go_upstream() {
    let held_openai = "sk-held-openai-0091";
    let held_anthropic = "sk-ant-held-0092";
    let (proxy, mock, _dir) = start(
        "0.0.0.0:0",
        &[
            ("OPENAI_API_KEY", held_openai),
            ("ANTHROPIC_API_KEY", held_anthropic),
            ("TOOLSTUB_UPSTREAM_OPENAI_API_KEY_HOSTS", "[\"127.0.0.1\"]"),
            (
                "TOOLSTUB_UPSTREAM_ANTHROPIC_API_KEY_HOSTS",
                "[\"127.0.0.1\"]",
            ),
        ],
    )
    .await;
    let (alice, bob) = (
        make_key(&proxy, "alice").await,
        make_key(&proxy, "bob").await,
    );
    let c = client();
    let chat = local_url(&proxy, "/v1/chat/completions");
    let output = chat_body(&[big_json(3_000)], "");

    // Beside the client's own provider key: the own key goes upstream.
    let (status, _, _) = send(
        &c,
        "POST",
        chat.clone(),
        &[("x-toolstub-key", &alice), ("authorization", KEY)],
        output.clone(),
    )
    .await;
    assert_eq!(status, 200);
    let sent = mock.last();
    assert_eq!(sent.headers["authorization"], KEY);
    let alices = last_ref(&mock);

    // In place of the provider key: the proxy's own key goes upstream.
    let bearer = format!("Bearer {bob}");
    let (status, _, _) = send(
        &c,
        "POST",
        chat.clone(),
        &[("authorization", &bearer)],
        CHAT,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        mock.last().headers["authorization"],
        format!("Bearer {held_openai}")
    );
    let (status, _, _) = send(
        &c,
        "POST",
        local_url(&proxy, "/v1/messages"),
        &[("x-api-key", &bob), ("anthropic-version", "2023-06-01")],
        CHAT,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(mock.last().headers["x-api-key"], held_anthropic);

    // No key ever reached the upstream, in any header or the query.
    let (status, _, _) = send(
        &c,
        "POST",
        local_url(
            &proxy,
            &format!("/v1beta/models/g:generateContent?key={alice}"),
        ),
        &[],
        r#"{"contents":[]}"#,
    )
    .await;
    assert_eq!(status, 200);
    for r in mock.requests() {
        let seen = format!("{} {:?}", r.path_and_query, r.headers);
        for key in [&alice, &bob] {
            assert!(
                !seen.contains(key.as_str()),
                "a client key went upstream: {seen}"
            );
        }
        assert!(r.headers.get("x-toolstub-key").is_none());
    }

    // Each key reads its own outputs, and only them.
    let read = |key: &str, r: &str| {
        let (c, url, key) = (
            c.clone(),
            local_url(&proxy, &format!("/toolstub/v1/results/{r}")),
            key.to_string(),
        );
        async move {
            send(&c, "GET", url, &[("x-toolstub-key", &key)], "")
                .await
                .0
        }
    };
    assert_eq!(read(&alice, &alices).await, 200);
    assert_eq!(read(&bob, &alices).await, 404, "another key's output");
    let (status, _, _) = send(
        &c,
        "GET",
        local_url(&proxy, &format!("/toolstub/v1/results/{alices}")),
        &[("authorization", KEY)],
        "",
    )
    .await;
    assert_eq!(status, 401, "a provider key is no client key");

    // Revoked: refused within about a second, on the next read of the ring.
    assert!(proxy
        .app
        .store
        .revoke_key("alice", 0)
        .await
        .expect("revoke"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (status, _, _) = send(
            &c,
            "POST",
            chat.clone(),
            &[("x-toolstub-key", &alice), ("authorization", KEY)],
            CHAT,
        )
        .await;
        if status == 401 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a revoked key still admitted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (status, _, _) = send(
        &c,
        "POST",
        chat,
        &[("x-toolstub-key", &bob), ("authorization", KEY)],
        CHAT,
    )
    .await;
    assert_eq!(status, 200, "the other key still works");
    proxy.shutdown().await;
}

#[tokio::test]
async fn the_first_key_made_makes_a_local_proxy_require_keys() {
    let (proxy, mock, _dir) = start("127.0.0.1:0", &[]).await;
    let c = client();
    let chat = local_url(&proxy, "/v1/chat/completions");
    let (status, _, _) = send(&c, "POST", chat.clone(), &[("authorization", KEY)], CHAT).await;
    assert_eq!(status, 200, "no key yet: the local case");
    let key = make_key(&proxy, "first").await;
    // A key presented is looked for at once, even before the ring's next read.
    let (status, _, _) = send(
        &c,
        "POST",
        chat.clone(),
        &[("x-toolstub-key", &key), ("authorization", KEY)],
        CHAT,
    )
    .await;
    assert_eq!(status, 200);
    let (status, _, _) = send(&c, "POST", chat, &[("authorization", KEY)], CHAT).await;
    assert_eq!(status, 401, "a key exists: every request needs one");
    let (status, _, _) = send(&c, "GET", local_url(&proxy, "/metrics"), &[], "").await;
    assert_eq!(status, 401, "so do the metrics without an admin token");
    let (status, _, _) = send(
        &c,
        "GET",
        local_url(&proxy, "/metrics"),
        &[("x-toolstub-key", &key)],
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(mock.requests().len(), 2);
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_scraper_reads_the_metrics_with_the_admin_token_alone() {
    let token = "adm-token-for-scrapers-5";
    let (proxy, _mock, _dir) =
        start("0.0.0.0:0", &[("TOOLSTUB_OPERATOR_API_ADMIN_TOKEN", token)]).await;
    let c = client();
    let metrics = local_url(&proxy, "/metrics");
    let bearer = format!("Bearer {token}");
    for (headers, want) in [
        (vec![], 401),
        (vec![("authorization", "Bearer wrong")], 401),
        (vec![("authorization", bearer.as_str())], 200),
        (vec![("x-toolstub-admin-token", token)], 200),
    ] {
        let (status, _, _) = send(&c, "GET", metrics.clone(), &headers, "").await;
        assert_eq!(status, want, "{headers:?}");
    }
    // The admin token opens the metrics only, not the API.
    let (status, _, _) = send(
        &c,
        "GET",
        local_url(&proxy, "/toolstub/v1/results"),
        &[("x-toolstub-admin-token", token)],
        "",
    )
    .await;
    assert_eq!(status, 401);
    proxy.shutdown().await;
}

/// A key in a second `Authorization` or `x-api-key`, or in a second
/// `key=` of the query, is taken off as the first would be.
#[tokio::test]
async fn a_client_key_given_twice_never_goes_upstream() {
    let (proxy, mock, _dir) = start("0.0.0.0:0", &[]).await;
    let key = make_key(&proxy, "alice").await;
    let c = client();
    let bearer = format!("Bearer {key}");
    type Case<'a> = (&'a str, String, Vec<(&'a str, &'a str)>);
    let cases: Vec<Case> = vec![
        (
            "a second Authorization",
            "/v1/chat/completions".to_string(),
            vec![
                ("x-toolstub-key", &key),
                ("authorization", KEY),
                ("authorization", &bearer),
            ],
        ),
        (
            "a second x-api-key",
            "/v1/messages".to_string(),
            vec![
                ("x-toolstub-key", &key),
                ("anthropic-version", "2023-06-01"),
                ("x-api-key", "sk-ant-own"),
                ("x-api-key", &key),
            ],
        ),
        (
            "a second key= in the query",
            format!("/v1beta/models/g:generateContent?key=AIza-own&key={key}"),
            vec![("x-toolstub-key", &key)],
        ),
    ];
    let mut leaked = Vec::new();
    for (what, path, headers) in cases {
        let before = mock.requests().len();
        let (status, _, _) = send(&c, "POST", local_url(&proxy, &path), &headers, CHAT).await;
        assert_eq!(status, 200, "{what}: admitted by its key");
        assert_eq!(mock.requests().len(), before + 1, "{what}: went upstream");
        let r = mock.last();
        let seen = format!("{} {:?}", r.path_and_query, r.headers);
        if seen.contains(key.as_str()) {
            leaked.push(format!("{what}: {seen}"));
        }
    }
    assert!(
        leaked.is_empty(),
        "the client key reached the upstream:\n{}",
        leaked.join("\n")
    );
    proxy.shutdown().await;
}

/// A Bedrock client signing with an AWS identity the proxy does not hold
/// (or any, when it holds none): nothing proves whose its outputs would be,
/// and its signature covers the body. It goes upstream as it came, and
/// nothing of it is stored, for `anonymous` or anyone.
#[tokio::test]
async fn a_signature_by_an_identity_the_proxy_does_not_hold_is_forwarded_unread() {
    let mock = mock::start(anthropic_reply()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("toolstub.db");
    let upstream = format!("http://{}", mock.addr);
    let proxy = super::Binary::serve(
        &["--upstream", &upstream, "--db", &db.to_string_lossy()],
        &[
            ("AWS_ACCESS_KEY_ID", "AKIDTHEPROXYHOLDS001"),
            ("AWS_SECRET_ACCESS_KEY", "the/proxys/own/secret"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ],
    )
    .await;
    // A developer's agent signing Bedrock requests with its own identity.
    let (status, answer) = signed_invoke(
        &proxy.url("/model/anthropic.claude-x/invoke"),
        &bedrock_body(&big_json(3_000)),
        "AKIDDEVELOPERSOWN001",
        "the/developers/own/secret",
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let sent = mock.last();
    assert_eq!(
        sent.body,
        bedrock_body(&big_json(3_000)).as_bytes(),
        "unread, unchanged"
    );
    assert!(
        sent.headers["authorization"]
            .to_str()
            .is_ok_and(|a| a.contains("AKIDDEVELOPERSOWN001")),
        "with its own signature"
    );
    // Another program on the machine, with no credential at all.
    let c = client();
    let (status, _, list) = send(&c, "GET", proxy.url("/toolstub/v1/results"), &[], "").await;
    assert_eq!(status, 200);
    let list: Value = serde_json::from_slice(&list).expect("json");
    proxy.kill();
    assert_eq!(list["results"].as_array().map(Vec::len), Some(0), "{list}");
}

/// Pages of other servers on this machine (port 80, another loopback
/// address on the proxy's port) are other origins: a blind POST from one
/// is refused, and the proxy's key is not lent.
#[tokio::test]
async fn a_page_of_another_local_server_is_another_origin() {
    let held = "sk-held-by-the-proxy-6";
    let (proxy, mock, _dir) = start(
        "127.0.0.1:0",
        &[
            ("OPENAI_API_KEY", held),
            ("TOOLSTUB_UPSTREAM_OPENAI_API_KEY_HOSTS", "[\"127.0.0.1\"]"),
        ],
    )
    .await;
    let port = proxy.addr.port();
    let other_loopback = format!("http://127.0.0.2:{port}");
    let c = client();
    let mut admitted = Vec::new();
    for origin in [
        "http://localhost",
        "http://127.0.0.1",
        "http://[::1]",
        other_loopback.as_str(),
    ] {
        let before = mock.requests().len();
        let (status, _, _) = send(
            &c,
            "POST",
            local_url(&proxy, "/v1/chat/completions"),
            &[
                ("origin", origin),
                ("sec-fetch-site", "same-site"),
                ("content-type", "text/plain"),
            ],
            CHAT,
        )
        .await;
        if status != 403 || mock.requests().len() != before {
            let lent = mock
                .requests()
                .last()
                .and_then(|r| r.headers.get("authorization").cloned())
                .map(|v| v.to_str().unwrap_or("").contains(held))
                .unwrap_or(false);
            admitted.push(format!("{origin}: {status}, held key lent: {lent}"));
        }
    }
    assert!(
        admitted.is_empty(),
        "pages of other origins were served as the proxy's own:\n{}",
        admitted.join("\n")
    );
    proxy.shutdown().await;
}

/// A replica whose store has been unreachable since it started knows no
/// key: beyond loopback a key is answered 503 (the store may know it) and
/// anything else 401, and nothing goes upstream; on loopback it admits as
/// in the local case.
#[tokio::test]
async fn a_replica_that_never_reached_its_store_admits_no_one_beyond_loopback() {
    let down = [("TOOLSTUB_STORE_URL", "postgres://u:p@127.0.0.1:1/toolstub")];
    let (proxy, mock, _dir) = start("0.0.0.0:0", &down).await;
    let c = client();
    let chat = local_url(&proxy, "/v1/chat/completions");
    let key = format!("tsk_{}", "A".repeat(43));
    let (status, _, _) = send(&c, "POST", chat.clone(), &[("x-toolstub-key", &key)], CHAT).await;
    assert_eq!(status, 503, "a key the store may know");
    let (status, _, _) = send(&c, "POST", chat, &[("authorization", KEY)], CHAT).await;
    assert_eq!(status, 401, "no key");
    assert!(mock.requests().is_empty(), "nothing went upstream");
    proxy.shutdown().await;

    let (proxy, mock, _dir) = start("127.0.0.1:0", &down).await;
    let chat = local_url(&proxy, "/v1/chat/completions");
    let (status, _, _) = send(&c, "POST", chat, &[("authorization", KEY)], CHAT).await;
    assert_eq!(status, 200, "the local case");
    assert_eq!(mock.requests().len(), 1);
    proxy.shutdown().await;
}

/// A revoked key presented in the place of a provider key, once no key is
/// active on a loopback proxy (the local case again), names the tenant of
/// that credential, not the key's: the key's outputs stay out of reach.
#[tokio::test]
async fn a_revoked_key_presented_as_a_provider_key_reaches_none_of_its_outputs() {
    let (proxy, mock, _dir) = start("127.0.0.1:0", &[]).await;
    let alice = make_key(&proxy, "alice").await;
    let c = client();
    let chat = local_url(&proxy, "/v1/chat/completions");
    let (status, _, _) = send(
        &c,
        "POST",
        chat,
        &[("x-toolstub-key", &alice), ("authorization", KEY)],
        chat_body(&[big_json(3_000)], ""),
    )
    .await;
    assert_eq!(status, 200);
    let alices = last_ref(&mock);
    assert!(proxy
        .app
        .store
        .revoke_key("alice", 0)
        .await
        .expect("revoke"));
    let bearer = format!("Bearer {alice}");
    let output = local_url(&proxy, &format!("/toolstub/v1/results/{alices}"));
    let list = local_url(&proxy, "/toolstub/v1/results");
    // Once the ring is read again the key is refused where it is given as
    // a key, and the proxy, with no active key, is in the local case.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (status, _, _) = send(&c, "GET", list.clone(), &[("x-toolstub-key", &alice)], "").await;
        if status == 401 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still admitted: {status}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    for (header, value) in [
        ("authorization", bearer.as_str()),
        ("x-api-key", alice.as_str()),
    ] {
        let (status, _, body) = send(&c, "GET", list.clone(), &[(header, value)], "").await;
        let body = String::from_utf8_lossy(&body);
        assert!(
            !body.contains(&alices),
            "{header}: listed ({status}): {body}"
        );
        let (status, _, body) = send(&c, "GET", output.clone(), &[(header, value)], "").await;
        assert!(
            matches!(status.as_u16(), 401 | 404),
            "{header}: the key's output is out of reach: {status} {}",
            String::from_utf8_lossy(&body)
        );
    }
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_clouds_credentials_never_go_to_another_providers_host() {
    // No single upstream: each provider at its own host. Requests that
    // carry AWS credentials or call a Vertex AI model on a path naming no
    // host of that cloud are refused here (400), never sent on to
    // OpenAI's or Anthropic's default host (which this machine cannot
    // reach: that would be a 502). None of these paths is a Bedrock one,
    // so the answer does not hang on the AWS region of the environment.
    let dir = tempfile::tempdir().expect("tempdir");
    let overrides = Overrides {
        listen: Some("127.0.0.1:0".to_string()),
        db: Some(dir.path().join("toolstub.db")),
        ..Overrides::default()
    };
    let env: Vec<(String, String)> = Vec::new();
    let proxy = Server::start(load(None, env, &overrides).expect("config"))
        .await
        .expect("proxy");
    let c = client();
    let sigv4 = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261206/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc";
    type Case<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>);
    let cases: Vec<Case> = vec![
        // A path of no cloud (Bedrock's own paths go to the region's hosts:
        // `upstream::tests`), with a Bedrock API key, any case of its scheme.
        (
            "GET",
            "/v1/models",
            vec![("authorization", "bearer ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl")],
        ),
        (
            "GET",
            "/v1/models",
            vec![("x-amz-security-token", "IQoJb3JpZ2luX2VjEXAMPLE")],
        ),
        // A path of no cloud, signed for AWS.
        (
            "POST",
            "/v1/something",
            vec![("authorization", sigv4), ("x-amz-date", "20261206T000000Z")],
        ),
        // A Vertex AI model path without its /v1: no location to map.
        (
            "POST",
            "/projects/p/locations/us-east5/publishers/anthropic/models/m:rawPredict",
            vec![("authorization", "Bearer ya29.a0-google-token")],
        ),
    ];
    for (method, path, headers) in cases {
        let (status, _, body) = send(
            &c,
            method,
            local_url(&proxy, path),
            &headers,
            r#"{"messages":[]}"#,
        )
        .await;
        assert_eq!(status, 400, "{path}: {}", String::from_utf8_lossy(&body));
    }
    proxy.shutdown().await;
}
