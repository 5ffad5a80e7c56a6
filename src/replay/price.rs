//! The two price models a replay bills at: a provider's prompt cache
//! ([`CacheKind`]) and its prices per million input tokens.
//!
//! The prices are the operator's `[[pricing]]` entry for the session's
//! model when one matches (as `toolstub stats` prices), otherwise these
//! documented defaults, the list prices of late 2026:
//! - Anthropic: Claude Sonnet, $3.00 input, $3.75 cache write (5-minute
//!   entries, 1.25x), $0.30 cache read (0.1x);
//! - OpenAI: GPT-5, $1.25 input, $0.125 cached input (0.1x), no write
//!   surcharge.
//!
//! What a replay saves is a ratio of dollars at one model, so only the
//! ratios between the three prices move it.

use super::cache::{Bill, CacheKind};
use crate::pricing::PriceTable;
use serde::Serialize;

/// One price model: a cache and its prices (US dollars per million tokens).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PriceModel {
    /// `anthropic` or `openai`.
    pub name: &'static str,
    #[serde(skip)]
    pub cache: CacheKind,
    /// Where the prices came from: `default` or the `[[pricing]]` pattern.
    pub prices_from: String,
    pub input: f64,
    pub cache_write: f64,
    pub cache_read: f64,
}

impl PriceModel {
    pub fn anthropic() -> PriceModel {
        PriceModel {
            name: "anthropic",
            cache: CacheKind::Anthropic,
            prices_from: "default".into(),
            input: 3.00,
            cache_write: 3.75,
            cache_read: 0.30,
        }
    }

    pub fn openai() -> PriceModel {
        PriceModel {
            name: "openai",
            cache: CacheKind::OpenAi,
            prices_from: "default".into(),
            input: 1.25,
            cache_write: 1.25,
            cache_read: 0.125,
        }
    }

    /// This model with the prices of the table's entry for `model`, when
    /// one matches. An entry without `cache_write` writes at 1.25x input on
    /// Anthropic's cache and at the input price on OpenAI's.
    pub fn priced(mut self, table: &PriceTable, model: Option<&str>) -> PriceModel {
        if let Some(p) = model.and_then(|m| table.price(m)) {
            self.prices_from = p.pattern.as_str().to_string();
            self.input = p.input;
            self.cache_read = p.cache_read;
            self.cache_write = p.cache_write.unwrap_or(match self.cache {
                CacheKind::Anthropic => p.input * 1.25,
                CacheKind::OpenAi => p.input,
            });
        }
        self
    }

    /// The dollars of a bill.
    pub fn dollars(&self, bill: &Bill) -> f64 {
        (bill.input as f64 * self.input
            + bill.cache_write as f64 * self.cache_write
            + bill.cache_read as f64 * self.cache_read)
            / 1e6
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pricing::Price;
    use crate::rewrite::tool_policy::Glob;

    #[test]
    fn bills_are_priced_by_class() {
        let bill = Bill {
            input: 1_000_000,
            cache_write: 1_000_000,
            cache_read: 10_000_000,
        };
        assert!((PriceModel::anthropic().dollars(&bill) - 9.75).abs() < 1e-9);
        assert!((PriceModel::openai().dollars(&bill) - 3.75).abs() < 1e-9);
    }

    #[test]
    fn a_matching_pricing_entry_replaces_the_defaults() {
        let table = PriceTable(vec![Price {
            pattern: Glob::new("claude-*").unwrap_or_else(|_| Glob::literal("claude-*")),
            input: 15.0,
            cache_read: 1.5,
            cache_write: None,
            output: 75.0,
        }]);
        let m = PriceModel::anthropic().priced(&table, Some("claude-opus-5-5"));
        assert_eq!(m.input, 15.0);
        assert_eq!(m.cache_write, 18.75);
        assert_eq!(m.prices_from, "claude-*");
        let other = PriceModel::openai().priced(&table, Some("gpt-5"));
        assert_eq!(other, PriceModel::openai());
    }
}
