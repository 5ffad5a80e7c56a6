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
