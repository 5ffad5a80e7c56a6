//! Synopsis throughput per kind at 100 KB, 1 MB and 10 MB, the design's
//! latency goal for a 5,000-element JSON array of objects (about 1 MB), and
//! the cost of an agent's wrapper: a 1 MB file and the same file as Claude
//! Code's numbered `Read` listing, side by side; a JSON list inside an MCP
//! content block next to the same list bare.
//!
//! Run: `cargo bench --bench synopsis` (`-- listing` for the wrapper pairs,
//! `-- mcp_block` for the MCP pairs). Inputs are generated here,
//! deterministically, from realistic repeating units.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use toolstub::synopsis::{synopsize, Hints, Kind};

const SIZES: [(&str, usize); 3] = [("100KB", 100_000), ("1MB", 1_000_000), ("10MB", 10_000_000)];

/// Builds an input of about `size` bytes: `head`, then `unit(i)` repeated, then `tail`.
fn build(size: usize, head: &str, tail: &str, unit: impl Fn(usize) -> String) -> String {
    let mut s = String::with_capacity(size + 1024);
    s.push_str(head);
    let mut i = 0;
    while s.len() + tail.len() < size {
        s.push_str(&unit(i));
        i += 1;
    }
    s.push_str(tail);
    s
}

pub fn input(kind: Kind, size: usize) -> String {
    match kind {
        Kind::Json => {
            let mut s = build(size, "[", "", |i| {
                format!(
                    "{{\"id\":{i},\"name\":\"user {i}\",\"email\":\"user{i}@example.com\",\"tags\":[\"a\",\"b\"],\"active\":true,\"score\":{}.5}},",
                    i % 100
                )
            });
            s.pop();
            s.push(']');
            s
        }
        Kind::Csv => build(size, "id,name,email,score,city\n", "", |i| {
            format!(
                "{i},user {i},user{i}@example.com,{},\"Paris, FR\"\n",
                i % 100
            )
        }),
        Kind::Tsv => build(size, "id\tname\temail\tscore\tcity\n", "", |i| {
            format!("{i}\tuser {i}\tuser{i}@example.com\t{}\tParis\n", i % 100)
        }),
        Kind::Yaml => build(size, "version: 3\nitems:\n", "", |i| {
            format!(
                "  - id: {i}\n    name: user {i}\n    tags: [a, b]\n    meta:\n      active: true\n"
            )
        }),
        Kind::Xml => build(
            size,
            "<?xml version=\"1.0\"?>\n<catalog lang=\"en\">\n",
            "</catalog>\n",
            |i| {
                format!(
                    "  <item id=\"{i}\"><name>user {i}</name><value>{}</value></item>\n",
                    i % 100
                )
            },
        ),
        Kind::Snapshot => build(
            size,
            "### Page state\n- Page URL: https://shop.example.com/\n- Page Title: Shop\n- Page Snapshot:\n```yaml\n- generic [ref=e1]:\n",
            "```\n",
            |i| {
                format!(
                    "  - listitem [ref=e{}]:\n    - link \"Product number {i}\" [ref=e{}] [cursor=pointer]:\n      - /url: /p/{i}\n    - generic [ref=e{}]: ${}.99\n    - button \"Add to cart\" [ref=e{}]\n",
                    4 * i + 2,
                    4 * i + 3,
                    4 * i + 4,
                    i % 100,
                    4 * i + 5
                )
            },
        ),
        Kind::Code => build(size, "import os\nimport sys\n\n", "", |i| {
            format!(
                "def handler_{i}(request, context):\n    value = request.get(\"key_{i}\", None)\n    if value is None:\n        return {{\"status\": 404}}\n    return {{\"status\": 200, \"value\": value}}\n\n"
            )
        }),
        Kind::Text => build(size, "", "", |i| {
            format!(
                "2026-11-30 05:{:02}:{:02} INFO request handled path=/api/v1/items/{i} status=200 duration_ms={}\n",
                (i / 60) % 60,
                i % 60,
                i % 97
            )
        }),
        Kind::Unknown => build(size, "", "", |i| format!("\u{0}\u{1}{}\u{2}\u{3}", i % 251)),
    }
}

fn throughput(c: &mut Criterion) {
    let hints = Hints {
        mime: None,
        preview_chars: 2000,
    };
    for kind in Kind::ALL {
        let mut group = c.benchmark_group(format!("synopsis/{kind}"));
        for (label, size) in SIZES {
            let text = input(kind, size);
            assert_eq!(synopsize(&text, hints).kind, kind, "bench input for {kind}");
            group.throughput(Throughput::Bytes(text.len() as u64));
            if size >= 10_000_000 {
                group.sample_size(10);
                group.measurement_time(Duration::from_secs(8));
            } else {
                group.sample_size(20);
                group.measurement_time(Duration::from_secs(3));
            }
            group.bench_with_input(BenchmarkId::from_parameter(label), &text, |b, text| {
                b.iter(|| synopsize(black_box(text), hints))
            });
        }
        group.finish();
    }
}

fn json_5000_objects(c: &mut Criterion) {
    let objects: Vec<String> = (0..5000)
        .map(|i| {
            format!(
                "{{\"id\":{i},\"login\":\"user-{i}\",\"name\":\"User Number {i}\",\"email\":\"user{i}@example.com\",\"roles\":[\"reader\",\"writer\"],\"active\":{},\"score\":{}.25,\"created_at\":\"2026-11-{:02}T10:00:00Z\",\"address\":{{\"city\":\"Paris\",\"zip\":\"75001\"}}}}",
                i % 2 == 0,
                i % 1000,
                i % 28 + 1
            )
        })
        .collect();
    let text = format!("[{}]", objects.join(","));
    let hints = Hints {
        mime: None,
        preview_chars: 2000,
    };
    assert_eq!(synopsize(&text, hints).kind, Kind::Json);
    let mut group = c.benchmark_group("synopsis/json_5000_objects");
    group.throughput(Throughput::Bytes(text.len() as u64));
    group.bench_function(format!("{}KB", text.len() / 1000), |b| {
        b.iter(|| synopsize(black_box(&text), hints))
    });
    group.finish();
}

/// `text` as Claude Code's `Read` lists it: `N<TAB>line` per line.
fn numbered_listing(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&(i + 1).to_string());
        out.push('\t');
        out.push_str(line);
    }
    out
}

/// Each 1 MB file next to its numbered listing: the wrapper's cost is the
/// ratio of the two times.
fn listing(c: &mut Criterion) {
    let hints = Hints {
        mime: None,
        preview_chars: 2000,
    };
    let pretty_json = {
        let mut s = build(1_000_000, "[\n", "", |i| {
            format!(
                "  {{\n    \"id\": {i},\n    \"name\": \"user {i}\",\n    \"tags\": [\"a\", \"b\"],\n    \"active\": true\n  }},\n"
            )
        });
        s.truncate(s.len() - 2);
        s.push_str("\n]\n");
        s
    };
    let files = [
        ("json", pretty_json),
        ("code", input(Kind::Code, 1_000_000)),
        ("csv", input(Kind::Csv, 1_000_000)),
        ("text", input(Kind::Text, 1_000_000)),
    ];
    let mut group = c.benchmark_group("synopsis/listing");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(3));
    for (name, file) in &files {
        let listed = numbered_listing(file);
        let kind = synopsize(file, hints).kind;
        assert_eq!(synopsize(&listed, hints).kind, kind, "listed {name}");
        group.throughput(Throughput::Bytes(file.len() as u64));
        group.bench_with_input(BenchmarkId::new(*name, "1MB file"), file, |b, text| {
            b.iter(|| synopsize(black_box(text), hints))
        });
        group.bench_with_input(BenchmarkId::new(*name, "1MB listed"), &listed, |b, text| {
            b.iter(|| synopsize(black_box(text), hints))
        });
    }
    group.finish();
}

/// A JSON list of 1 MB and 10 MB inside an MCP text block (a string with
/// every quote escaped), next to the same list bare: the unwrapping's cost
/// is the ratio of the two times.
fn mcp_block(c: &mut Criterion) {
    let hints = Hints {
        mime: None,
        preview_chars: 2000,
    };
    let mut group = c.benchmark_group("synopsis/mcp_block");
    for (label, size) in [("1MB", 1_000_000), ("10MB", 10_000_000)] {
        let bare = input(Kind::Json, size);
        let block = format!(
            "{{\"type\":\"text\",\"text\":{},\"annotations\":null}}",
            serde_json::Value::from(bare.as_str())
        );
        let s = synopsize(&block, hints);
        assert_eq!(s.kind, Kind::Json, "the block's text is described");
        assert!(s.summary[0].starts_with("MCP tool result"));
        if size >= 10_000_000 {
            group.sample_size(10);
            group.measurement_time(Duration::from_secs(8));
        } else {
            group.sample_size(20);
            group.measurement_time(Duration::from_secs(3));
        }
        group.throughput(Throughput::Bytes(block.len() as u64));
        group.bench_with_input(BenchmarkId::new("block", label), &block, |b, text| {
            b.iter(|| synopsize(black_box(text), hints))
        });
        group.throughput(Throughput::Bytes(bare.len() as u64));
        group.bench_with_input(BenchmarkId::new("bare", label), &bare, |b, text| {
            b.iter(|| synopsize(black_box(text), hints))
        });
    }
    group.finish();
}

criterion_group!(benches, throughput, json_5000_objects, listing, mcp_block);
criterion_main!(benches);
