//! The request rewrite's cost for a chat body carrying one ~1 MB JSON tool
//! output (the load benchmark's "1 MB" request), phase by phase: the whole
//! rewrite on first sight (memo empty: decode, SHA-256, synopsis) and on a
//! repeated turn (memo warm: parse, memo lookup, splice), and the parts.
//!
//! Run: `cargo bench --bench rewrite`. CPU only, no I/O; the proxy's added
//! latency is the load benchmark's job (`scripts/load`).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use toolstub::protocol::openai_chat::OpenAiChat;
use toolstub::protocol::{json_text, Content, Protocol};
use toolstub::rewrite::memo::Memo;
use toolstub::rewrite::{rewrite_with, Mode, Outcome, Policy};
use toolstub::synopsis::{synopsize, Hints};

/// The same body as `examples/loadbench.rs` builds: a JSON array of user
/// objects of about 1 MB, as the content string of one tool message.
fn body() -> String {
    let mut items = Vec::new();
    let mut len = 0;
    let mut i = 0u64;
    while len < 1_000_000 {
        let item = format!("{{\"id\":{i},\"salt\":0,\"name\":\"user {i}\",\"email\":\"user{i}@example.com\",\"active\":true}}");
        len += item.len() + 1;
        items.push(item);
        i += 1;
    }
    let output = format!("[{}]", items.join(","));
    serde_json::json!({
        "model": "m",
        "messages": [
            {"role": "user", "content": "list the users"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "list_users", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": output},
        ]
    })
    .to_string()
}

fn rewrite(c: &mut Criterion) {
    let body = body();
    let policy = Policy::default();
    let mut group = c.benchmark_group("rewrite");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.measurement_time(Duration::from_secs(4));
    group.sample_size(30);

    group.bench_function("first_seen_1MB", |b| {
        b.iter(|| {
            let memo = Memo::new(0);
            let out = rewrite_with(body.as_bytes(), &policy, &OpenAiChat, Mode::WithRefs, &memo);
            assert!(matches!(out, Outcome::Rewritten(_)));
            black_box(out);
        })
    });
    let memo = Memo::new(16);
    rewrite_with(body.as_bytes(), &policy, &OpenAiChat, Mode::WithRefs, &memo);
    group.bench_function("repeated_1MB", |b| {
        b.iter(|| {
            black_box(rewrite_with(
                body.as_bytes(),
                &policy,
                &OpenAiChat,
                Mode::WithRefs,
                &memo,
            ))
        })
    });
    group.bench_function("parse_1MB", |b| {
        b.iter(|| black_box(OpenAiChat.parse(black_box(&body))).map(|p| p.outputs.len()))
    });
    // serde_json skipping the same body without building anything: what the
    // adapter's parse cost when it was built on serde_json.
    group.bench_function("serde_json_skip_1MB", |b| {
        b.iter(|| serde_json::from_str::<serde::de::IgnoredAny>(black_box(&body)).is_ok())
    });
    let parsed = OpenAiChat.parse(&body).expect("the bench body parses");
    let Content::JsonString(raw) = parsed.outputs[0].content.clone() else {
        panic!("the tool output is a JSON string");
    };
    let text = json_text::decode(raw).expect("decodes").into_owned();
    group.bench_function("decode_1MB", |b| {
        b.iter(|| black_box(json_text::decode(black_box(raw))))
    });
    group.bench_function("sha256_1MB", |b| {
        b.iter(|| black_box(toolstub::refs::sha256_hex(black_box(&text))))
    });
    group.bench_function("synopsis_1MB", |b| {
        b.iter(|| {
            black_box(synopsize(
                black_box(&text),
                Hints {
                    mime: None,
                    preview_chars: 2000,
                },
            ))
        })
    });
    group.finish();
}

criterion_group!(benches, rewrite);
criterion_main!(benches);
