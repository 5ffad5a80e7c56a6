//! Token accounting through the real server: the saved-tokens header, the
//! ledger behind `GET /toolstub/v1/stats`, and the metrics, against the
//! upstream's own usage (Chat Completions here; the Anthropic and Responses
//! streams in their own modules).

use super::mock::{self, client, send, Recorded, Reply, Script};
use super::{big_json, chat_body, sample, setup, stats_once, KEY};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// A completion reporting 1,000 prompt tokens, 600 of them cached, after a
/// second (a real model takes far longer to its first byte than counting
/// takes, even on the low-priority thread of a busy machine).
fn cached_completion() -> Script {
    Arc::new(|_: &Recorded| {
        let body = json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 7, "total_tokens": 1007,
                      "prompt_tokens_details": {"cached_tokens": 600}}
        });
        Reply::After(
            Duration::from_millis(1000),
            Box::new(Reply::Full(
                200,
                vec![("content-type", "application/json".to_string())],
                body.to_string(),
            )),
        )
    })
}

#[tokio::test]
async fn saved_tokens_are_counted_by_first_seen_and_the_metrics_name_no_tool() {
    let s = setup(cached_completion()).await;
    let original = big_json(3000);
    let body = chat_body(std::slice::from_ref(&original), "");
    let headers = [("authorization", KEY), ("x-toolstub-session", "acct-1")];
    let mut header_values = Vec::new();
    for turn in 0..2 {
        if turn == 1 {
            // Turn 1 is in the ledger, so its original's count is remembered:
            // turn 2 has only its stub to count.
            stats_once(&s, ("authorization", KEY), "", 1, 1).await;
        }
        let (status, h, _) = send(
            &client(),
            "POST",
            s.url("/v1/chat/completions"),
            &headers,
            body.clone(),
        )
        .await;
        assert_eq!(status, 200);
        header_values.push(
            h.get("x-toolstub-saved-tokens")
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok()),
        );
    }
    let upstream: Value = serde_json::from_slice(&s.mock.last().body).expect("json");
    let stub = upstream["messages"][2]["content"].as_str().expect("stub");
    let expected = toolstub::tokens::count(&original) - toolstub::tokens::count(stub);
    assert!(expected > 10_000, "{expected}");
    // The first turn's header is there if its ~130 KB were counted within
    // the upstream's second (never a wrong figure); the second's is.
    assert!(
        header_values[0].is_none_or(|n| n == expected),
        "{header_values:?}"
    );
    assert_eq!(header_values[1], Some(expected));

    let stats = stats_once(&s, ("authorization", KEY), "", 2, 2).await;
    let t = &stats["totals"];
    assert_eq!(stats["tokenizer"], "o200k_base");
    assert_eq!(t["requests"], 2, "{stats}");
    assert_eq!(t["outputs"], 2);
    assert_eq!(t["outputs_first_seen"], 1);
    assert_eq!(t["tokens_saved"], 2 * expected);
    assert_eq!(t["tokens_saved_first_seen"], expected);
    assert_eq!(t["tokens_saved_repeated"], expected);
    assert_eq!(t["input_tokens"], 800);
    assert_eq!(t["cache_read_tokens"], 1200);
    assert_eq!(t["cache_write_tokens"], 0);
    assert_eq!(t["output_tokens"], 14);
    assert!(
        stats["pricing"].is_null(),
        "no price table: no money figure"
    );
    assert_eq!(stats["by_tool"][0]["tool"], "fetch");
    assert_eq!(stats["by_tool"][0]["tokens_saved"], 2 * expected);
    assert_eq!(stats["by_kind"][0]["kind"], "json");
    assert_eq!(stats["sessions"][0]["session_id"], "acct-1");
    assert_eq!(stats["sessions"][0]["turns"], 2);
    let points: u64 = stats["series"]
        .as_array()
        .expect("series")
        .iter()
        .map(|p| p["tokens_saved"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(points, 2 * expected);

    let (_, _, metrics) = send(&client(), "GET", s.url("/metrics"), &[], "").await;
    let metrics = String::from_utf8_lossy(&metrics);
    let saved = |first: &str| {
        sample(
            &metrics,
            &format!("toolstub_tokens_saved_total{{kind=\"json\",first_seen=\"{first}\"}}"),
        )
    };
    assert_eq!((saved("true"), saved("false")), (expected, expected));
    // The tool's figures are the tenant's own (its stats, above): /metrics,
    // which anyone reaching the listener reads, names no client's tool.
    assert_eq!(stats["by_tool"][0]["tool"], "fetch");
    assert!(!metrics.contains("fetch"), "{metrics}");
    let usage = |part: &str| {
        sample(
            &metrics,
            &format!("toolstub_upstream_tokens_total{{api=\"chat_completions\",type=\"{part}\"}}"),
        )
    };
    assert_eq!((usage("input"), usage("cache_read")), (800, 1200));

    // Another credential is another tenant: nothing of this one's.
    let other = stats_once(&s, ("authorization", "Bearer sk-other"), "", 0, 0).await;
    assert_eq!(other["totals"]["requests"], 0);
    assert_eq!(other["sessions"], json!([]));
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_price_table_prices_first_seen_at_cache_write_and_repeats_at_cache_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("toolstub.toml");
    std::fs::write(
        &config,
        "[[pricing]]\nmatch = \"gpt-*\"\ninput = 2.0\ncache_read = 0.5\noutput = 8.0\n",
    )
    .expect("config");
    let s = super::setup_with_file(cached_completion(), &config).await;
    let original = big_json(3000);
    let body = chat_body(std::slice::from_ref(&original), "");
    for _ in 0..3 {
        send(
            &client(),
            "POST",
            s.url("/v1/chat/completions"),
            &[("authorization", KEY)],
            body.clone(),
        )
        .await;
    }
    let stats = stats_once(&s, ("authorization", KEY), "", 3, 3).await;
    let first = stats["totals"]["tokens_saved_first_seen"]
        .as_u64()
        .expect("n") as f64;
    let repeated = stats["totals"]["tokens_saved_repeated"]
        .as_u64()
        .expect("n") as f64;
    assert_eq!(repeated, 2.0 * first, "{stats}");
    let usd = stats["pricing"]["estimated_saving_usd"]
        .as_f64()
        .expect("usd");
    // No cache-write price: first-seen tokens at the input price.
    let want = (first * 2.0 + repeated * 0.5) / 1e6;
    assert!((usd - want).abs() < 1e-12, "{usd} vs {want}");
    assert!(stats["pricing"]["method"]
        .as_str()
        .is_some_and(|m| m.contains("cache-read price")));
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_request_left_unchanged_still_counts_its_turn_and_streamed_usage() {
    let chunks = vec![
        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-test\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n".to_string(),
        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-test\",\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":3,\"total_tokens\":43,\"prompt_tokens_details\":{\"cached_tokens\":32}}}\n\n".to_string(),
        "data: [DONE]\n\n".to_string(),
    ];
    let s = setup(Arc::new(move |_: &Recorded| Reply::Stream {
        chunks: chunks.clone(),
        gap: Duration::from_millis(1),
        sent: Arc::default(),
    }))
    .await;
    let body = r#"{"model":"gpt-test","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}"#;
    let (status, headers, response) = send(
        &client(),
        "POST",
        s.url("/v1/chat/completions"),
        &[("authorization", KEY)],
        body,
    )
    .await;
    assert_eq!(status, 200);
    assert!(headers.get("x-toolstub-saved-tokens").is_none());
    assert!(String::from_utf8_lossy(&response).ends_with("data: [DONE]\n\n"));
    assert_eq!(
        s.mock.last().body,
        body.as_bytes(),
        "forwarded byte for byte"
    );
    let stats = stats_once(&s, ("authorization", KEY), "", 1, 1).await;
    let t = &stats["totals"];
    assert_eq!(
        (t["input_tokens"].as_u64(), t["cache_read_tokens"].as_u64()),
        (Some(8), Some(32)),
        "{stats}"
    );
    assert_eq!(t["output_tokens"], 3);
    assert_eq!(t["tokens_saved"], 0);
    let session = stats["sessions"][0]["session_id"].as_str().unwrap_or("");
    assert!(
        session.starts_with("s_"),
        "derived from the opening: {stats}"
    );
    assert_eq!(stats["sessions"][0]["turns"], 1);
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn toolstub_stats_reads_the_same_figures_from_the_store() {
    let s = setup(cached_completion()).await;
    let original = big_json(2000);
    let body = chat_body(std::slice::from_ref(&original), "");
    for _ in 0..2 {
        send(
            &client(),
            "POST",
            s.url("/v1/chat/completions"),
            &[("authorization", KEY), ("x-toolstub-session", "cli-1")],
            body.clone(),
        )
        .await;
    }
    let api = stats_once(&s, ("authorization", KEY), "", 2, 2).await;
    let db = s.db_path();
    s.proxy.shutdown().await;
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolstub"))
            .arg("stats")
            .arg("--db")
            .arg(&db)
            .args(args)
            .output()
            .expect("toolstub stats");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let json: Value = serde_json::from_str(&run(&["--json"])).expect("json");
    assert_eq!(
        json["totals"], api["totals"],
        "every tenant's: this one's alone"
    );
    assert_eq!(json["by_tool"], api["by_tool"]);
    let tenant = toolstub::store::Tenant::from_credential(KEY);
    let mine: Value =
        serde_json::from_str(&run(&["--json", "--tenant", tenant.as_str()])).expect("json");
    assert_eq!(mine["sessions"][0]["session_id"], "cli-1");
    let nobody: Value =
        serde_json::from_str(&run(&["--json", "--tenant", "0000000000000000"])).expect("json");
    assert_eq!(nobody["totals"]["requests"], 0);
    let text = run(&[]);
    let saved = api["totals"]["tokens_saved"].as_u64().expect("n");
    assert!(
        text.contains(&format!(
            "saved: {} tokens",
            toolstub::stats::grouped(saved)
        )),
        "{text}"
    );
    assert!(text.contains("cli-1"), "{text}");
    assert!(text.contains("fetch"), "{text}");
}

/// A body without tools larger than the ledger may hold (64 KiB) is read
/// by the rewrite on its way, not handed whole to the ledger to read
/// later: its session is still derived and its turn counted, and it is not
/// among the bodies forwarded unread (`no_tools`).
#[tokio::test]
async fn a_large_body_without_tools_is_read_on_its_way_not_queued_for_the_ledger() {
    let s = setup(Arc::new(|_: &Recorded| mock::ok_json("done"))).await;
    let filler = "lorem ipsum ".repeat(9_000);
    let body =
        format!(r#"{{"model":"gpt-test","messages":[{{"role":"user","content":"{filler}"}}]}}"#);
    assert!(body.len() > 100_000);
    for body in [
        body.clone(),
        r#"{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}"#.to_string(),
    ] {
        let (status, _, _) = send(
            &client(),
            "POST",
            s.url("/v1/chat/completions"),
            &[("authorization", KEY)],
            body.clone(),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(
            s.mock.last().body,
            body.as_bytes(),
            "forwarded byte for byte"
        );
    }
    let stats = stats_once(&s, ("authorization", KEY), "", 2, 2).await;
    let sessions = stats["sessions"].as_array().expect("sessions");
    assert!(
        sessions.iter().all(|x| x["session_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("s_"))),
        "both sessions derived: {stats}"
    );
    let (_, _, metrics) = send(&client(), "GET", s.url("/metrics"), &[], "").await;
    let metrics = String::from_utf8_lossy(&metrics);
    let unread = metrics
        .lines()
        .find_map(|l| l.strip_prefix("toolstub_chat_unchanged_total{reason=\"no_tools\"} "))
        .and_then(|n| n.parse::<u64>().ok());
    assert_eq!(
        unread,
        Some(1),
        "only the small body went unread:\n{metrics}"
    );
    s.proxy.shutdown().await;
}
