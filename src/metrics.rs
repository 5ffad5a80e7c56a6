//! Prometheus metrics, rendered as text for `GET /metrics`.
//!
//! Labels are low-cardinality by construction (route names, status codes,
//! synopsis kinds, reasons, the proxy's own recall tool names): never a
//! path, a ref, a session, a tool name or anything else a client chose,
//! and never a credential.
//!
//! Who reads `/metrics`: whoever reaches the proxy's listener, with no
//! credential, every tenant's figures summed. So it holds nothing of any
//! one tenant's: no client's tool names (a tool's figures are in the
//! tenant-scoped `GET /toolstub/v1/stats` and `toolstub stats`), only
//! counts over every tenant and labels from closed sets the proxy chose.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of the latency buckets, in seconds.
const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0, 120.0,
];
/// Upper bounds of the recall-rounds buckets.
const ROUND_BUCKETS: [f64; 6] = [0.0, 1.0, 2.0, 4.0, 8.0, 16.0];

/// Label values of a counter family; keys are small `Copy` tuples, so
/// counting never allocates.
trait Labels: Ord + Copy {
    fn values(&self) -> Vec<String>;
}

impl Labels for &'static str {
    fn values(&self) -> Vec<String> {
        vec![self.to_string()]
    }
}

impl Labels for (&'static str, &'static str) {
    fn values(&self) -> Vec<String> {
        vec![self.0.to_string(), self.1.to_string()]
    }
}

impl Labels for (&'static str, &'static str, &'static str) {
    fn values(&self) -> Vec<String> {
        vec![self.0.to_string(), self.1.to_string(), self.2.to_string()]
    }
}

impl Labels for (&'static str, u16) {
    fn values(&self) -> Vec<String> {
        vec![self.0.to_string(), self.1.to_string()]
    }
}

/// A labelled counter family.
struct Counters<K>(Mutex<BTreeMap<K, u64>>);

impl<K> Default for Counters<K> {
    fn default() -> Self {
        Counters(Mutex::new(BTreeMap::new()))
    }
}

impl<K: Labels> Counters<K> {
    fn add(&self, labels: K, n: u64) {
        self.add_all([(labels, n)]);
    }

    /// Adds each count under one lock.
    fn add_all<const N: usize>(&self, counts: [(K, u64); N]) {
        let mut map = match self.0.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        for (labels, n) in counts {
            *map.entry(labels).or_insert(0) += n;
        }
    }

    fn render(&self, out: &mut String, name: &str, help: &str, label_names: &[&str]) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        let map = match self.0.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        for (labels, value) in map.iter() {
            let pairs: Vec<String> = label_names
                .iter()
                .zip(labels.values())
                .map(|(k, v)| format!("{k}=\"{}\"", escape(&v)))
                .collect();
            let _ = writeln!(out, "{name}{{{}}} {value}", pairs.join(","));
        }
    }
}

/// The upstream's usage by API: one lookup a response, not one a part
/// (every response reports all four).
#[derive(Default)]
struct UsageCounters(Mutex<BTreeMap<&'static str, crate::usage::Usage>>);

impl UsageCounters {
    fn render(&self, out: &mut String) {
        let name = "toolstub_upstream_tokens_total";
        let _ = writeln!(
            out,
            "# HELP {name} Tokens the upstream reported using, by API and part (input: uncached input; cache_read; cache_write; output).\n# TYPE {name} counter"
        );
        let map = match self.0.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        for (api, usage) in map.iter() {
            // The parts in the order of their names.
            for (part, value) in [
                ("cache_read", usage.cache_read),
                ("cache_write", usage.cache_write),
                ("input", usage.input),
                ("output", usage.output),
            ] {
                let _ = writeln!(
                    out,
                    "{name}{{api=\"{}\",type=\"{part}\"}} {value}",
                    escape(api)
                );
            }
        }
    }
}

/// A histogram with fixed buckets.
struct Histogram {
    bounds: &'static [f64],
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    /// The sum, in millionths of the unit.
    sum_micros: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    /// Counts `value` in the first bucket that holds it (one increment
    /// per observation; the cumulative counts are summed when rendered).
    fn observe(&self, value: f64) {
        if let Some(bucket) = self
            .bounds
            .iter()
            .position(|bound| value <= *bound)
            .and_then(|i| self.buckets.get(i))
        {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add((value * 1e6) as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (bound, bucket) in self.bounds.iter().zip(&self.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
    }
}

/// Every metric toolstub exports.
pub struct Metrics {
    requests: Counters<(&'static str, u16)>,
    upstream_latency: Histogram,
    externalized: Counters<(&'static str, &'static str)>,
    unchanged: Counters<&'static str>,
    chars_saved: AtomicU64,
    store_errors: Counters<&'static str>,
    recall_calls: Counters<&'static str>,
    recall_errors: Counters<&'static str>,
    recall_rounds: Histogram,
    exchanges_kept: AtomicU64,
    restored: AtomicU64,
    /// (kind, first_seen).
    tokens_saved: Counters<(&'static str, &'static str)>,
    /// By api: the usage's parts.
    upstream_tokens: UsageCounters,
    ledger_dropped: AtomicU64,
    tokens_uncounted: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: Counters::default(),
            upstream_latency: Histogram::new(&LATENCY_BUCKETS),
            externalized: Counters::default(),
            unchanged: Counters::default(),
            chars_saved: AtomicU64::new(0),
            store_errors: Counters::default(),
            recall_calls: Counters::default(),
            recall_errors: Counters::default(),
            recall_rounds: Histogram::new(&ROUND_BUCKETS),
            exchanges_kept: AtomicU64::new(0),
            restored: AtomicU64::new(0),
            tokens_saved: Counters::default(),
            upstream_tokens: UsageCounters::default(),
            ledger_dropped: AtomicU64::new(0),
            tokens_uncounted: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    pub fn request(&self, route: &'static str, status: u16) {
        self.requests.add((route, status), 1);
    }

    /// Time from sending the request upstream to its response headers.
    pub fn upstream_latency(&self, elapsed: Duration) {
        self.upstream_latency.observe(elapsed.as_secs_f64());
    }

    pub fn externalized(&self, kind: &'static str, reason: &'static str) {
        self.externalized.add((kind, reason), 1);
    }

    /// A chat completion forwarded byte for byte, and why.
    pub fn unchanged(&self, why: &'static str) {
        self.unchanged.add(why, 1);
    }

    pub fn chars_saved(&self, n: u64) {
        self.chars_saved.fetch_add(n, Ordering::Relaxed);
    }

    /// Tokens an output's stub saved (original minus stub, o200k_base),
    /// by synopsis kind and whether the output was seen for the first
    /// time. Not by tool: a client names its tools, and `/metrics` is every
    /// tenant's (per tool, the tenant's own stats say it).
    pub fn tokens_saved(&self, kind: &'static str, first_seen: bool, n: u64) {
        let first = if first_seen { "true" } else { "false" };
        self.tokens_saved.add((kind, first), n);
    }

    /// What the upstream reported using, by part (input, cache_read,
    /// cache_write, output).
    pub fn upstream_tokens(&self, api: &'static str, usage: &crate::usage::Usage) {
        let mut map = match self.upstream_tokens.0.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.entry(api).or_default().add(usage);
    }

    /// A ledger record dropped (its queue was full, or the store failed).
    pub fn ledger_dropped(&self, n: u64) {
        self.ledger_dropped.fetch_add(n, Ordering::Relaxed);
    }

    /// Outputs whose tokens were not counted: the counting thread was
    /// too far behind (a machine busy with requests); their saving is
    /// recorded as zero.
    pub fn tokens_uncounted(&self, n: u64) {
        self.tokens_uncounted.fetch_add(n, Ordering::Relaxed);
    }

    pub fn store_error(&self, operation: &'static str) {
        self.store_errors.add(operation, 1);
    }

    pub fn recall_call(&self, tool: &'static str) {
        self.recall_calls.add(tool, 1);
    }

    pub fn recall_error(&self, tool: &'static str) {
        self.recall_errors.add(tool, 1);
    }

    pub fn recall_rounds(&self, rounds: usize) {
        self.recall_rounds.observe(rounds as f64);
    }

    /// A hidden recall exchange stored for restoration.
    pub fn exchange_kept(&self) {
        self.exchanges_kept.fetch_add(1, Ordering::Relaxed);
    }

    /// Hidden recall exchanges put back into a request's history.
    pub fn restored(&self, n: u64) {
        self.restored.fetch_add(n, Ordering::Relaxed);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        self.requests.render(
            &mut out,
            "toolstub_requests_total",
            "Requests served, by route and status.",
            &["route", "status"],
        );
        self.upstream_latency.render(
            &mut out,
            "toolstub_upstream_latency_seconds",
            "Time from sending a request upstream to its response headers.",
        );
        self.externalized.render(
            &mut out,
            "toolstub_outputs_externalized_total",
            "Tool outputs replaced by a stub, by synopsis kind and reason.",
            &["kind", "reason"],
        );
        self.unchanged.render(
            &mut out,
            "toolstub_chat_unchanged_total",
            "Requests of the rewritten routes (chat completions, messages, count_tokens) forwarded byte for byte, by reason.",
            &["reason"],
        );
        let _ = writeln!(
            out,
            "# HELP toolstub_chars_saved_total Characters removed from requests (originals minus stubs).\n# TYPE toolstub_chars_saved_total counter\ntoolstub_chars_saved_total {}",
            self.chars_saved.load(Ordering::Relaxed)
        );
        self.store_errors.render(
            &mut out,
            "toolstub_store_errors_total",
            "Result store failures, by operation.",
            &["operation"],
        );
        self.recall_calls.render(
            &mut out,
            "toolstub_recall_calls_total",
            "Recall tool calls answered by the proxy, by tool.",
            &["tool"],
        );
        self.recall_errors.render(
            &mut out,
            "toolstub_recall_errors_total",
            "Recall tool calls that returned an error to the model, by tool.",
            &["tool"],
        );
        self.recall_rounds.render(
            &mut out,
            "toolstub_recall_rounds",
            "Recall rounds per request that offered the recall tools.",
        );
        let _ = writeln!(
            out,
            "# HELP toolstub_exchanges_kept_total Hidden recall exchanges stored for history restoration.\n# TYPE toolstub_exchanges_kept_total counter\ntoolstub_exchanges_kept_total {}",
            self.exchanges_kept.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP toolstub_history_restored_total Hidden recall exchanges put back into the history a client sent.\n# TYPE toolstub_history_restored_total counter\ntoolstub_history_restored_total {}",
            self.restored.load(Ordering::Relaxed)
        );
        self.tokens_saved.render(
            &mut out,
            "toolstub_tokens_saved_total",
            "Tokens removed from requests (o200k_base counts of originals minus stubs), by synopsis kind and whether the output was seen for the first time.",
            &["kind", "first_seen"],
        );
        self.upstream_tokens.render(&mut out);
        let _ = writeln!(
            out,
            "# HELP toolstub_ledger_dropped_total Token-accounting records lost (queue full or store failure).\n# TYPE toolstub_ledger_dropped_total counter\ntoolstub_ledger_dropped_total {}",
            self.ledger_dropped.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP toolstub_tokens_uncounted_total Externalized outputs whose tokens were not counted (the counting thread was too far behind); their saving is recorded as zero.\n# TYPE toolstub_tokens_uncounted_total counter\ntoolstub_tokens_uncounted_total {}",
            self.tokens_uncounted.load(Ordering::Relaxed)
        );
        out
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histograms() {
        let m = Metrics::default();
        m.request("chat_completions", 200);
        m.request("chat_completions", 200);
        m.externalized("json", "single_threshold");
        m.upstream_latency(Duration::from_millis(3));
        m.chars_saved(42);
        let text = m.render();
        assert!(
            text.contains("toolstub_requests_total{route=\"chat_completions\",status=\"200\"} 2")
        );
        assert!(text.contains(
            "toolstub_outputs_externalized_total{kind=\"json\",reason=\"single_threshold\"} 1"
        ));
        assert!(text.contains("toolstub_upstream_latency_seconds_bucket{le=\"0.005\"} 1"));
        assert!(text.contains("toolstub_upstream_latency_seconds_bucket{le=\"0.001\"} 0"));
        assert!(text.contains("toolstub_upstream_latency_seconds_count 1"));
        assert!(text.contains("toolstub_upstream_latency_seconds_bucket{le=\"120\"} 1"));
        m.upstream_latency(Duration::from_secs(500));
        m.upstream_latency(Duration::from_micros(100));
        let text = m.render();
        assert!(text.contains("toolstub_upstream_latency_seconds_bucket{le=\"0.0005\"} 1"));
        assert!(text.contains("toolstub_upstream_latency_seconds_bucket{le=\"0.005\"} 2"));
        assert!(text.contains("toolstub_upstream_latency_seconds_bucket{le=\"120\"} 2"));
        assert!(text.contains("toolstub_upstream_latency_seconds_bucket{le=\"+Inf\"} 3"));
        assert!(text.contains("toolstub_upstream_latency_seconds_count 3"));
        assert!(text.contains("toolstub_chars_saved_total 42"));
    }

    #[test]
    fn upstream_tokens_sum_per_api_and_part_in_name_order() {
        let m = Metrics::default();
        let usage = crate::usage::Usage {
            input: 5,
            cache_read: 7,
            cache_write: 0,
            output: 2,
        };
        m.upstream_tokens("messages", &usage);
        m.upstream_tokens("chat_completions", &usage);
        m.upstream_tokens("chat_completions", &usage);
        let text = m.render();
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("toolstub_upstream_tokens_total{"))
            .collect();
        let name = "toolstub_upstream_tokens_total";
        assert_eq!(
            lines,
            [
                format!("{name}{{api=\"chat_completions\",type=\"cache_read\"}} 14"),
                format!("{name}{{api=\"chat_completions\",type=\"cache_write\"}} 0"),
                format!("{name}{{api=\"chat_completions\",type=\"input\"}} 10"),
                format!("{name}{{api=\"chat_completions\",type=\"output\"}} 4"),
                format!("{name}{{api=\"messages\",type=\"cache_read\"}} 7"),
                format!("{name}{{api=\"messages\",type=\"cache_write\"}} 0"),
                format!("{name}{{api=\"messages\",type=\"input\"}} 5"),
                format!("{name}{{api=\"messages\",type=\"output\"}} 2"),
            ]
        );
    }

    #[test]
    fn tokens_saved_carry_no_tool_name() {
        let m = Metrics::default();
        m.tokens_saved("json", true, 10);
        m.tokens_saved("json", true, 5);
        m.tokens_saved("text", false, 1);
        let text = m.render();
        assert!(
            text.contains("toolstub_tokens_saved_total{kind=\"json\",first_seen=\"true\"} 15"),
            "{text}"
        );
        assert!(text.contains("toolstub_tokens_saved_total{kind=\"text\",first_seen=\"false\"} 1"));
        assert!(!text.contains("tool=\""), "{text}");
    }
}
