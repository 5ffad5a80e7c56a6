//! The estimated money a saving is worth, from the operator's own price
//! table (`[[pricing]]` in the config; none ships as truth).
//!
//! The method, in one sentence ([`METHOD`]): tokens of an output the
//! upstream saw for the first time are priced at the model's cache-write
//! price (its input price where none is set), because a new output enters
//! the prompt cache; tokens of an output sent again on a later turn are
//! priced at the cache-read price, because most of them would have been
//! cache reads. Pricing repeated tokens at the input price would overstate
//! a saving several times over, since most of an agent's input is cache
//! reads.
//!
//! Architecture invariant: pure; the first entry whose pattern matches a
//! model name prices it, and a model no entry matches is not priced (the
//! estimate says how many tokens were left out).

use crate::rewrite::tool_policy::Glob;
use serde::Serialize;

/// The method the estimate follows, shown beside every figure.
pub const METHOD: &str = "Saved tokens are o200k_base counts of each original minus its stub; \
     tokens of outputs seen for the first time are priced at the model's cache-write price \
     (input price where none is set), tokens of outputs sent again at its cache-read price, \
     with the prices of your config's [[pricing]] table.";

/// Prices in US dollars per million tokens.
#[derive(Clone, Debug, PartialEq)]
pub struct Price {
    pub pattern: Glob,
    pub input: f64,
    pub cache_read: f64,
    pub cache_write: Option<f64>,
    pub output: f64,
}

/// The price table, in file order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PriceTable(pub Vec<Price>);

/// Tokens saved on one model's requests.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ModelSavings {
    pub model: Option<String>,
    pub first_seen_tokens: u64,
    pub repeated_tokens: u64,
}

/// What the table makes of a set of savings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Estimate {
    pub estimated_saving_usd: f64,
    pub method: &'static str,
    /// Saved tokens on models no entry prices (left out of the figure).
    pub unpriced_tokens: u64,
}

impl PriceTable {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The price of `model`: the first entry that matches it.
    pub fn price(&self, model: &str) -> Option<&Price> {
        self.0.iter().find(|p| p.pattern.matches(model))
    }

    /// The estimate over `savings`; `None` without a table.
    pub fn estimate(&self, savings: &[ModelSavings]) -> Option<Estimate> {
        if self.is_empty() {
            return None;
        }
        let mut usd = 0.0;
        let mut unpriced = 0;
        for s in savings {
            match s.model.as_deref().and_then(|m| self.price(m)) {
                Some(p) => {
                    let first = p.cache_write.unwrap_or(p.input);
                    usd += (s.first_seen_tokens as f64 * first
                        + s.repeated_tokens as f64 * p.cache_read)
                        / 1e6;
                }
                None => unpriced += s.first_seen_tokens + s.repeated_tokens,
            }
        }
        Some(Estimate {
            estimated_saving_usd: usd,
            method: METHOD,
            unpriced_tokens: unpriced,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> PriceTable {
        let glob = |p: &str| Glob::new(p).unwrap_or_else(|_| Glob::literal(p));
        PriceTable(vec![
            Price {
                pattern: glob("claude-*"),
                input: 3.0,
                cache_read: 0.3,
                cache_write: Some(3.75),
                output: 15.0,
            },
            Price {
                pattern: glob("gpt-*"),
                input: 2.0,
                cache_read: 0.5,
                cache_write: None,
                output: 8.0,
            },
        ])
    }

    #[test]
    fn first_seen_at_cache_write_or_input_repeated_at_cache_read() {
        let e = table()
            .estimate(&[
                ModelSavings {
                    model: Some("claude-sonnet".into()),
                    first_seen_tokens: 1_000_000,
                    repeated_tokens: 10_000_000,
                },
                ModelSavings {
                    model: Some("gpt-5".into()),
                    first_seen_tokens: 1_000_000,
                    repeated_tokens: 2_000_000,
                },
                ModelSavings {
                    model: Some("llama".into()),
                    first_seen_tokens: 7,
                    repeated_tokens: 3,
                },
            ])
            .unwrap_or_else(|| panic!("a table estimates"));
        // 3.75 + 10 * 0.3 + 2.0 + 2 * 0.5
        assert!((e.estimated_saving_usd - 9.75).abs() < 1e-9, "{e:?}");
        assert_eq!(e.unpriced_tokens, 10);
        assert!(PriceTable::default().estimate(&[]).is_none());
    }
}
