//! The providers' prompt caches, as billing sees them: which tokens of a
//! request are read from the cache, which are written to it, which are
//! plain input.
//!
//! A prompt is a sequence of [`Block`]s in prompt order (tool definitions,
//! then the system prompt, then the conversation, one block per message or
//! item), each with a content key, a token count and whether the client put
//! a cache breakpoint on it. Two prefixes are the same when their blocks'
//! keys are; a prefix is matched whole blocks at a time, so a block that
//! changes is a miss from its first token (the few tokens of it that still
//! match are not counted: the figures err against toolstub, which is the
//! one that changes blocks).
//!
//! - [`Anthropic`] (docs: build-with-claude/prompt-caching): an entry is
//!   written at each breakpoint whose prefix holds at least
//!   [`ANTHROPIC_MIN_TOKENS`]; a request reads the longest earlier entry that
//!   is its prefix, looked for at each of its breakpoints and up to
//!   [`ANTHROPIC_LOOKBACK`] blocks before it; the tokens from there to its
//!   last breakpoint are written (the cache-write price), the rest after the
//!   last breakpoint are plain input. An entry lives
//!   [`ANTHROPIC_TTL_SECS`] after it was last written or read.
//! - [`OpenAi`] (docs: guides/prompt-caching): automatic, no breakpoints;
//!   a request of at least [`OPENAI_MIN_TOKENS`] reads the longest prefix it
//!   shares with an earlier request, rounded down to a multiple of
//!   [`OPENAI_STEP_TOKENS`] (and none under the minimum), at the cached
//!   price; everything else is input; no write surcharge. Prefixes live
//!   [`OPENAI_TTL_SECS`] after their last use.
//!
//! Architecture invariant: pure; time is the recorded request's own
//! timestamp, passed in (`None`: entries never expire).

use serde::Serialize;
use std::collections::HashMap;

/// Anthropic writes no entry for a shorter prefix (Claude Sonnet and Opus;
/// Haiku needs 2,048).
pub const ANTHROPIC_MIN_TOKENS: u64 = 1024;
/// How far before a breakpoint Anthropic looks for an earlier entry.
pub const ANTHROPIC_LOOKBACK: usize = 20;
/// The default ("5m") entry lifetime.
pub const ANTHROPIC_TTL_SECS: f64 = 300.0;
/// OpenAI caches prompts from this many tokens.
pub const OPENAI_MIN_TOKENS: u64 = 1024;
/// OpenAI's cache hits grow in steps of this many tokens.
pub const OPENAI_STEP_TOKENS: u64 = 128;
/// OpenAI keeps a prefix 5 to 10 minutes after its last use: the shorter.
pub const OPENAI_TTL_SECS: f64 = 300.0;

/// One block of a prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// What identifies its content (a hash of its bytes, cache markers left out).
    pub key: u128,
    pub tokens: u64,
    /// The client put a `cache_control` breakpoint on it (Anthropic).
    pub breakpoint: bool,
}

/// A request's input tokens by how they are billed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Bill {
    /// Plain input.
    pub input: u64,
    /// Written to the cache (Anthropic's cache-write price).
    pub cache_write: u64,
    /// Read from the cache.
    pub cache_read: u64,
}

impl Bill {
    pub fn total(&self) -> u64 {
        self.input + self.cache_write + self.cache_read
    }

    pub fn add(&mut self, other: Bill) {
        self.input += other.input;
        self.cache_write += other.cache_write;
        self.cache_read += other.cache_read;
    }
}

/// Which provider's cache a price model follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheKind {
    Anthropic,
    OpenAi,
}

/// The cache of one conversation at one provider.
#[derive(Debug)]
pub enum Cache {
    Anthropic(Anthropic),
    OpenAi(OpenAi),
}

impl Cache {
    pub fn new(kind: CacheKind) -> Cache {
        match kind {
            CacheKind::Anthropic => Cache::Anthropic(Anthropic::default()),
            CacheKind::OpenAi => Cache::OpenAi(OpenAi::default()),
        }
    }

    /// Bills one request sent at `at` (seconds) and updates the cache.
    pub fn bill(&mut self, blocks: &[Block], at: Option<f64>) -> Bill {
        match self {
            Cache::Anthropic(c) => c.bill(blocks, at),
            Cache::OpenAi(c) => c.bill(blocks, at),
        }
    }
}

/// The cumulative key and token count of each prefix: `prefixes[i]` ends
/// with block `i`.
fn prefixes(blocks: &[Block]) -> Vec<(u128, u64)> {
    let mut out = Vec::with_capacity(blocks.len());
    let mut key = 0u128;
    let mut tokens = 0u64;
    for b in blocks {
        let mut bytes = [0u8; 32];
        bytes[..16].copy_from_slice(&key.to_le_bytes());
        bytes[16..].copy_from_slice(&b.key.to_le_bytes());
        key = xxhash_rust::xxh3::xxh3_128(&bytes);
        tokens += b.tokens;
        out.push((key, tokens));
    }
    out
}

fn alive(entries: &HashMap<u128, f64>, key: u128, at: Option<f64>) -> bool {
    entries
        .get(&key)
        .is_some_and(|&expires| at.is_none_or(|t| t <= expires))
}

fn expiry(at: Option<f64>, ttl: f64) -> f64 {
    at.map_or(f64::INFINITY, |t| t + ttl)
}

/// Anthropic's explicit prompt cache.
#[derive(Debug, Default)]
pub struct Anthropic {
    /// Prefix key -> when the entry expires.
    entries: HashMap<u128, f64>,
}

impl Anthropic {
    pub fn bill(&mut self, blocks: &[Block], at: Option<f64>) -> Bill {
        let prefixes = prefixes(blocks);
        let total = prefixes.last().map_or(0, |p| p.1);
        let breakpoints: Vec<usize> = blocks
            .iter()
            .enumerate()
            .filter(|(i, b)| b.breakpoint && prefixes[*i].1 >= ANTHROPIC_MIN_TOKENS)
            .map(|(i, _)| i)
            .collect();
        let Some(&last) = breakpoints.last() else {
            return Bill {
                input: total,
                ..Bill::default()
            };
        };
        // The longest earlier entry found from any breakpoint.
        let mut hit: Option<usize> = None;
        for &b in &breakpoints {
            let from = b.saturating_sub(ANTHROPIC_LOOKBACK);
            if let Some(p) = (from..=b)
                .rev()
                .find(|&p| alive(&self.entries, prefixes[p].0, at))
            {
                hit = Some(hit.map_or(p, |h: usize| h.max(p)));
            }
        }
        let read = hit.map_or(0, |p| prefixes[p].1);
        let written_to = prefixes[last].1;
        let expires = expiry(at, ANTHROPIC_TTL_SECS);
        if let Some(p) = hit {
            self.entries.insert(prefixes[p].0, expires);
        }
        for &b in &breakpoints {
            self.entries.insert(prefixes[b].0, expires);
        }
        Bill {
            cache_read: read,
            cache_write: written_to.saturating_sub(read),
            input: total - written_to.max(read),
        }
    }
}

/// OpenAI's automatic prefix cache.
#[derive(Debug, Default)]
pub struct OpenAi {
    entries: HashMap<u128, f64>,
}

impl OpenAi {
    pub fn bill(&mut self, blocks: &[Block], at: Option<f64>) -> Bill {
        let prefixes = prefixes(blocks);
        let total = prefixes.last().map_or(0, |p| p.1);
        let shared = prefixes
            .iter()
            .rev()
            .find(|(key, _)| alive(&self.entries, *key, at))
            .map_or(0, |p| p.1);
        let cached = if total >= OPENAI_MIN_TOKENS && shared >= OPENAI_MIN_TOKENS {
            shared / OPENAI_STEP_TOKENS * OPENAI_STEP_TOKENS
        } else {
            0
        };
        if total >= OPENAI_MIN_TOKENS {
            let expires = expiry(at, OPENAI_TTL_SECS);
            for (key, _) in &prefixes {
                self.entries.insert(*key, expires);
            }
        }
        Bill {
            input: total - cached,
            cache_write: 0,
            cache_read: cached,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(key: u128, tokens: u64, breakpoint: bool) -> Block {
        Block {
            key,
            tokens,
            breakpoint,
        }
    }

    /// A conversation prompt: a 2,000-token system block with a breakpoint,
    /// then messages of 500 tokens, the last one with a breakpoint.
    fn turn(keys: &[u128]) -> Vec<Block> {
        let mut blocks = vec![block(1, 2000, true)];
        for (i, &k) in keys.iter().enumerate() {
            blocks.push(block(k, 500, i + 1 == keys.len()));
        }
        blocks
    }

    #[test]
    fn anthropic_writes_then_reads_the_longest_prefix() {
        let mut c = Anthropic::default();
        let first = c.bill(&turn(&[10, 11]), Some(0.0));
        assert_eq!(
            first,
            Bill {
                input: 0,
                cache_write: 3000,
                cache_read: 0
            }
        );
        let second = c.bill(&turn(&[10, 11, 12, 13]), Some(10.0));
        assert_eq!(
            second,
            Bill {
                input: 0,
                cache_write: 1000,
                cache_read: 3000
            }
        );
        // A changed message: the prefix before it is read (the system
        // entry), everything from it on is written again.
        let changed = c.bill(&turn(&[10, 99, 12, 13, 14]), Some(20.0));
        assert_eq!(changed.cache_read, 2000);
        assert_eq!(changed.cache_write, 2500);
    }

    #[test]
    fn anthropic_entries_expire_five_minutes_after_their_last_use() {
        let mut c = Anthropic::default();
        c.bill(&turn(&[10]), Some(0.0));
        // Read at 200 s: the entry lives on until 500 s.
        assert_eq!(c.bill(&turn(&[10]), Some(200.0)).cache_read, 2500);
        assert_eq!(c.bill(&turn(&[10]), Some(499.0)).cache_read, 2500);
        let late = c.bill(&turn(&[10]), Some(900.0));
        assert_eq!(late.cache_read, 0);
        assert_eq!(late.cache_write, 2500);
    }

    #[test]
    fn anthropic_without_breakpoints_or_under_the_minimum_is_plain_input() {
        let mut c = Anthropic::default();
        let none = [block(1, 5000, false)];
        assert_eq!(c.bill(&none, None).input, 5000);
        assert_eq!(c.bill(&none, None).input, 5000);
        let small = [block(2, 800, true), block(3, 100, false)];
        assert_eq!(c.bill(&small, None).input, 900);
        assert_eq!(c.bill(&small, None).cache_read, 0);
    }

    #[test]
    fn anthropic_looks_back_at_most_twenty_blocks() {
        let mut c = Anthropic::default();
        let mut blocks = vec![block(1, 2000, true)];
        c.bill(&blocks, None);
        for k in 0..25u128 {
            blocks.push(block(100 + k, 10, false));
        }
        if let Some(b) = blocks.last_mut() {
            b.breakpoint = true;
        }
        // The system entry is 25 blocks before the only later breakpoint,
        // but the system block's own breakpoint finds it.
        assert_eq!(c.bill(&blocks, None).cache_read, 2000);
        let mut far = vec![block(1, 2000, false)];
        far.extend((0..25u128).map(|k| block(100 + k, 10, false)));
        if let Some(b) = far.last_mut() {
            b.breakpoint = true;
        }
        let mut c = Anthropic::default();
        c.bill(&[block(1, 2000, true)], None);
        assert_eq!(c.bill(&far, None).cache_read, 0);
    }

    #[test]
    fn openai_reads_shared_prefixes_in_steps_of_128_from_1024() {
        let mut c = OpenAi::default();
        let a = [block(1, 1000, false), block(2, 300, false)];
        assert_eq!(c.bill(&a, None).input, 1300);
        let b = [
            block(1, 1000, false),
            block(2, 300, false),
            block(3, 50, false),
        ];
        let bill = c.bill(&b, None);
        assert_eq!(bill.cache_read, 1280);
        assert_eq!(bill.input, 70);
        assert_eq!(bill.cache_write, 0);
        // Shared only the first block (1,000 tokens): under the minimum.
        let d = [block(1, 1000, false), block(9, 300, false)];
        assert_eq!(c.bill(&d, None).cache_read, 0);
    }

    #[test]
    fn openai_short_prompts_are_never_cached() {
        let mut c = OpenAi::default();
        let a = [block(1, 500, false)];
        c.bill(&a, None);
        assert_eq!(c.bill(&a, None).cache_read, 0);
        let mut c = OpenAi::default();
        c.bill(&[block(1, 2000, false)], Some(0.0));
        assert_eq!(c.bill(&[block(1, 2000, false)], Some(1000.0)).cache_read, 0);
    }
}
