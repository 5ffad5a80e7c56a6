//! The token ledger's report as people and scripts read it: the JSON of
//! the operator API's `GET /toolstub/v1/stats` and of `toolstub stats
//! --json` (one shape, [`StatsResponse`]), and the tables `toolstub stats`
//! prints.

use crate::store::{Report, Sums};
use serde::Serialize;

/// `GET stats`: the shape `toolstub stats --json` prints too.
#[derive(Serialize)]
pub struct StatsResponse<'a> {
    pub tokenizer: &'static str,
    pub totals: &'a Sums,
    pub pricing: Option<crate::pricing::Estimate>,
    by_tool: Vec<Named<'a>>,
    by_kind: Vec<Named<'a>>,
    series: Vec<Point<'a>>,
    sessions: Vec<SessionItem<'a>>,
}

#[derive(Serialize)]
struct Named<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    tool: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'a str>,
    #[serde(flatten)]
    sums: &'a Sums,
}

#[derive(Serialize)]
struct Point<'a> {
    at: i64,
    #[serde(flatten)]
    sums: &'a Sums,
}

#[derive(Serialize)]
struct SessionItem<'a> {
    session_id: &'a str,
    turns: u64,
    #[serde(flatten)]
    sums: &'a Sums,
}

impl<'a> StatsResponse<'a> {
    pub fn of(report: &'a Report, prices: &crate::pricing::PriceTable) -> StatsResponse<'a> {
        StatsResponse {
            tokenizer: crate::tokens::ENCODING,
            totals: &report.totals,
            pricing: prices.estimate(&report.by_model),
            by_tool: report
                .by_tool
                .iter()
                .map(|(t, sums)| Named {
                    tool: Some(t),
                    kind: None,
                    sums,
                })
                .collect(),
            by_kind: report
                .by_kind
                .iter()
                .map(|(k, sums)| Named {
                    tool: None,
                    kind: Some(k),
                    sums,
                })
                .collect(),
            series: report
                .series
                .iter()
                .map(|(at, sums)| Point { at: *at, sums })
                .collect(),
            sessions: report
                .sessions
                .iter()
                .map(|(id, sums)| SessionItem {
                    session_id: id,
                    turns: sums.requests,
                    sums,
                })
                .collect(),
        }
    }
}

/// The totals as `toolstub stats` prints them: `scope` says whose rows,
/// `place` which store.
pub fn summary(stats: &StatsResponse<'_>, scope: &str, place: &str) -> String {
    let t = stats.totals;
    let n = grouped;
    let mut out = format!("toolstub stats: {scope}, {place}\n");
    out.push_str(&format!(
        "  {} requests ({} upstream responses), {} tool outputs externalized ({} seen for the first time)\n",
        n(t.requests),
        n(t.rounds),
        n(t.outputs),
        n(t.outputs_first_seen)
    ));
    out.push_str(&format!(
        "  saved: {} tokens ({} first seen, {} sent again), {} characters\n",
        n(t.tokens_saved),
        n(t.tokens_saved_first_seen),
        n(t.tokens_saved_repeated),
        n(t.chars_saved)
    ));
    out.push_str(&format!(
        "  sent, as the upstream counted it: {} input, {} cache read, {} cache write, {} output tokens\n",
        n(t.input_tokens),
        n(t.cache_read_tokens),
        n(t.cache_write_tokens),
        n(t.output_tokens)
    ));
    out.push_str(&format!("  recall calls answered: {}\n", n(t.recall_calls)));
    match &stats.pricing {
        Some(p) => {
            out.push_str(&format!(
                "  estimated saving: ${:.4}. {}",
                p.estimated_saving_usd, p.method
            ));
            if p.unpriced_tokens > 0 {
                out.push_str(&format!(
                    " {} saved tokens are on models the table does not price.",
                    n(p.unpriced_tokens)
                ));
            }
            out.push('\n');
        }
        None => out.push_str(&format!(
            "  (saved tokens: {} counts of each original minus its stub; no money estimate without a \
             [[pricing]] table: --config FILE, see config/toolstub.toml)\n",
            stats.tokenizer
        )),
    }
    out
}

/// `n` with thousands separators.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pricing::{ModelSavings, Price, PriceTable};
    use crate::rewrite::tool_policy::Glob;

    #[test]
    fn the_summary_says_the_method_beside_the_money() {
        let report = Report {
            totals: Sums {
                requests: 3,
                tokens_saved: 3_000_000,
                tokens_saved_first_seen: 1_000_000,
                tokens_saved_repeated: 2_000_000,
                ..Sums::default()
            },
            by_model: vec![ModelSavings {
                model: Some("m-1".into()),
                first_seen_tokens: 1_000_000,
                repeated_tokens: 2_000_000,
            }],
            ..Report::default()
        };
        let prices = PriceTable(vec![Price {
            pattern: Glob::literal("m-1"),
            input: 1.0,
            cache_read: 0.1,
            cache_write: Some(1.25),
            output: 4.0,
        }]);
        let text = summary(&StatsResponse::of(&report, &prices), "every tenant", "t.db");
        assert!(
            text.contains("saved: 3,000,000 tokens (1,000,000 first seen, 2,000,000 sent again)"),
            "{text}"
        );
        assert!(
            text.contains("estimated saving: $1.4500. Saved tokens are o200k_base"),
            "{text}"
        );
        let bare = summary(
            &StatsResponse::of(&report, &PriceTable::default()),
            "x",
            "y",
        );
        assert!(bare.contains("no money estimate"), "{bare}");
    }
}
