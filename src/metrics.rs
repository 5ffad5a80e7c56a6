//! Prometheus metrics (`prometheus-client`), rendered for `GET /metrics`
//! in the OpenMetrics text format, which Prometheus reads.
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

use prometheus_client::encoding::{text, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds of the latency buckets, in seconds.
const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0, 120.0,
];
/// Upper bounds of the recall-rounds buckets.
const ROUND_BUCKETS: [f64; 6] = [0.0, 1.0, 2.0, 4.0, 8.0, 16.0];

/// A family of counters by one label.
type By<const N: usize> = Family<[(&'static str, &'static str); N], Counter>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteStatus {
    route: &'static str,
    status: u16,
}

/// Every metric toolstub exports: handles onto the counters `registry`
/// renders (a counter is shared by its clones).
pub struct Metrics {
    registry: Registry,
    requests: Family<RouteStatus, Counter>,
    upstream_latency: Histogram,
    externalized: By<2>,
    unchanged: By<1>,
    chars_saved: Counter,
    store_errors: By<1>,
    recall_calls: By<1>,
    recall_errors: By<1>,
    recall_rounds: Histogram,
    exchanges_kept: Counter,
    restored: Counter,
    tokens_saved: By<2>,
    upstream_tokens: By<2>,
    /// Each API's four `upstream_tokens` counters, looked up in the family
    /// once: a family lookup hashes its labels, and four of them a response
    /// were 3,400 instructions, a seventh of the ledger's work for a
    /// passthrough request (`scripts/callgrind-passthrough`).
    upstream_parts: Mutex<Vec<(&'static str, [Counter; 4])>>,
    ledger_dropped: Counter,
    tokens_uncounted: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        // Registers a clone of a new metric under `name` (`_total` is
        // added to a counter's), `help` ending in the period the encoder adds.
        macro_rules! metric {
            ($name:literal, $help:literal, $metric:expr) => {{
                let metric = $metric;
                registry.register($name, $help, metric.clone());
                metric
            }};
        }
        Metrics {
            requests: metric!("toolstub_requests", "Requests served, by route and status", Family::default()),
            upstream_latency: metric!(
                "toolstub_upstream_latency_seconds",
                "Time from sending a request upstream to its response headers",
                Histogram::new(LATENCY_BUCKETS)
            ),
            externalized: metric!(
                "toolstub_outputs_externalized",
                "Tool outputs replaced by a stub, by synopsis kind and reason",
                By::default()
            ),
            unchanged: metric!(
                "toolstub_chat_unchanged",
                "Requests of the rewritten routes forwarded byte for byte, by reason",
                By::default()
            ),
            chars_saved: metric!(
                "toolstub_chars_saved",
                "Characters removed from requests (originals minus stubs)",
                Counter::default()
            ),
            store_errors: metric!(
                "toolstub_store_errors",
                "Result store failures, by operation",
                By::default()
            ),
            recall_calls: metric!(
                "toolstub_recall_calls",
                "Recall tool calls answered by the proxy, by tool",
                By::default()
            ),
            recall_errors: metric!(
                "toolstub_recall_errors",
                "Recall tool calls that returned an error to the model, by tool",
                By::default()
            ),
            recall_rounds: metric!(
                "toolstub_recall_rounds",
                "Recall rounds per request that offered the recall tools",
                Histogram::new(ROUND_BUCKETS)
            ),
            exchanges_kept: metric!(
                "toolstub_exchanges_kept",
                "Hidden recall exchanges stored for history restoration",
                Counter::default()
            ),
            restored: metric!(
                "toolstub_history_restored",
                "Hidden recall exchanges put back into the history a client sent",
                Counter::default()
            ),
            tokens_saved: metric!(
                "toolstub_tokens_saved",
                "Tokens removed from requests (o200k_base counts of originals minus stubs), by synopsis kind and whether the output was seen for the first time",
                By::default()
            ),
            upstream_tokens: metric!(
                "toolstub_upstream_tokens",
                "Tokens the upstream reported using, by API and part (input: uncached input; cache_read; cache_write; output)",
                By::default()
            ),
            upstream_parts: Mutex::default(),
            ledger_dropped: metric!(
                "toolstub_ledger_dropped",
                "Token-accounting records lost (queue full or store failure)",
                Counter::default()
            ),
            tokens_uncounted: metric!(
                "toolstub_tokens_uncounted",
                "Externalized outputs whose tokens were not counted (the counting thread was too far behind); their saving is recorded as zero",
                Counter::default()
            ),
            registry,
        }
    }
}

impl Metrics {
    pub fn request(&self, route: &'static str, status: u16) {
        self.requests
            .get_or_create(&RouteStatus { route, status })
            .inc();
    }

    /// Time from sending the request upstream to its response headers.
    pub fn upstream_latency(&self, elapsed: Duration) {
        self.upstream_latency.observe(elapsed.as_secs_f64());
    }

    pub fn externalized(&self, kind: &'static str, reason: &'static str) {
        self.externalized
            .get_or_create(&[("kind", kind), ("reason", reason)])
            .inc();
    }

    /// A request of a rewritten route forwarded byte for byte, and why.
    pub fn unchanged(&self, why: &'static str) {
        self.unchanged.get_or_create(&[("reason", why)]).inc();
    }

    pub fn chars_saved(&self, n: u64) {
        self.chars_saved.inc_by(n);
    }

    /// Tokens an output's stub saved (original minus stub, o200k_base),
    /// by synopsis kind and whether the output was seen for the first
    /// time. Not by tool: a client names its tools, and `/metrics` is every
    /// tenant's (per tool, the tenant's own stats say it).
    pub fn tokens_saved(&self, kind: &'static str, first_seen: bool, n: u64) {
        let first = if first_seen { "true" } else { "false" };
        self.tokens_saved
            .get_or_create(&[("kind", kind), ("first_seen", first)])
            .inc_by(n);
    }

    /// What the upstream reported using, by part (input, cache_read,
    /// cache_write, output).
    pub fn upstream_tokens(&self, api: &'static str, usage: &crate::usage::Usage) {
        const PARTS: [&str; 4] = ["input", "cache_read", "cache_write", "output"];
        let mut known = self
            .upstream_parts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let at = match known.iter().position(|(a, _)| *a == api) {
            Some(at) => at,
            None => {
                let family = &self.upstream_tokens;
                let counters = PARTS.map(|part| {
                    family
                        .get_or_create(&[("api", api), ("type", part)])
                        .clone()
                });
                known.push((api, counters));
                known.len() - 1
            }
        };
        let counts = [
            usage.input,
            usage.cache_read,
            usage.cache_write,
            usage.output,
        ];
        for (counter, n) in known[at].1.iter().zip(counts) {
            counter.inc_by(n);
        }
    }

    /// A ledger record dropped (its queue was full, or the store failed).
    pub fn ledger_dropped(&self, n: u64) {
        self.ledger_dropped.inc_by(n);
    }

    /// Outputs whose tokens were not counted: the counting thread was
    /// too far behind (a machine busy with requests); their saving is
    /// recorded as zero.
    pub fn tokens_uncounted(&self, n: u64) {
        self.tokens_uncounted.inc_by(n);
    }

    pub fn store_error(&self, operation: &'static str) {
        self.store_errors
            .get_or_create(&[("operation", operation)])
            .inc();
    }

    pub fn recall_call(&self, tool: &'static str) {
        self.recall_calls.get_or_create(&[("tool", tool)]).inc();
    }

    pub fn recall_error(&self, tool: &'static str) {
        self.recall_errors.get_or_create(&[("tool", tool)]).inc();
    }

    pub fn recall_rounds(&self, rounds: usize) {
        self.recall_rounds.observe(rounds as f64);
    }

    /// A hidden recall exchange stored for restoration.
    pub fn exchange_kept(&self) {
        self.exchanges_kept.inc();
    }

    /// Hidden recall exchanges put back into a request's history.
    pub fn restored(&self, n: u64) {
        self.restored.inc_by(n);
    }

    /// The text exposition, without its closing `# EOF` line: the server
    /// appends its gauges, then [`finish`].
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        // Writing to a String cannot fail.
        let _ = text::encode_registry(&mut out, &self.registry);
        out
    }
}

/// Closes a text exposition (OpenMetrics ends it with `# EOF`).
pub fn finish(out: &mut String) {
    let _ = text::encode_eof(out);
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
        assert!(text.contains("toolstub_upstream_latency_seconds_bucket{le=\"120.0\"} 1"));
        m.upstream_latency(Duration::from_secs(500));
        m.upstream_latency(Duration::from_micros(100));
        let text = m.render();
        assert!(text.contains("toolstub_upstream_latency_seconds_bucket{le=\"0.0005\"} 1"));
        assert!(text.contains("toolstub_upstream_latency_seconds_bucket{le=\"0.005\"} 2"));
        assert!(text.contains("toolstub_upstream_latency_seconds_bucket{le=\"120.0\"} 2"));
        assert!(text.contains("toolstub_upstream_latency_seconds_bucket{le=\"+Inf\"} 3"));
        assert!(text.contains("toolstub_upstream_latency_seconds_count 3"));
        assert!(text.contains("toolstub_chars_saved_total 42"));
    }

    #[test]
    fn upstream_tokens_sum_per_api_and_part() {
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
        let mut lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("toolstub_upstream_tokens_total{"))
            .collect();
        lines.sort_unstable();
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

    #[test]
    fn the_exposition_is_openmetrics_with_one_period_a_help() {
        let m = Metrics::default();
        m.unchanged("no_tools");
        let mut text = m.render();
        finish(&mut text);
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(
            text.contains("# TYPE toolstub_chat_unchanged counter"),
            "{text}"
        );
        assert!(text.contains("toolstub_chat_unchanged_total{reason=\"no_tools\"} 1"));
        for help in text.lines().filter(|l| l.starts_with("# HELP")) {
            assert!(help.ends_with('.') && !help.ends_with(".."), "{help}");
        }
    }
}
