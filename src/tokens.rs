//! Token counts, with OpenAI's `o200k_base` encoding (GPT-4o, GPT-4.1,
//! o-series, GPT-5), for every model.
//!
//! The counter is GitHub's `bpe-openai` crate: the same token counts as
//! `tiktoken` (checked on 1 MB of JSON and 1 MB of Rust: identical), about
//! six times faster (~65 ms per MB against ~450 ms for `tiktoken-rs` on
//! this machine), and its tables ship in the crate. No other vendor
//! publishes a tokenizer: for Claude models the count is an estimate, and
//! Anthropic's own tokenizer gives more tokens for the same text (see
//! README.md: about 16% more for English, 30% for code); the upstream's own usage,
//! recorded from every response, is the figure to bill by.
//!
//! Architecture invariant: pure; counting is never on a request's path
//! (the proxy's ledger counts in the background).

/// The encoding's name, as reports show it.
pub const ENCODING: &str = "o200k_base";

/// The number of `o200k_base` tokens of `text`.
pub fn count(text: &str) -> u64 {
    bpe_openai::o200k_base().count(text) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_o200k_base() {
        // Reference counts from tiktoken's o200k_base.
        assert_eq!(count(""), 0);
        assert_eq!(count("hello world"), 2);
        assert_eq!(count("{\"id\": 1, \"name\": \"x\"}"), 12);
    }
}
