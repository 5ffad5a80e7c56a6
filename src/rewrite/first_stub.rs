//! The first stub of a conversation, weighed against the cached prompt it
//! makes the provider write again.
//!
//! The recall tools join the tool definitions when a conversation's first
//! stub is made, and the tool definitions head the provider's cache
//! prefix: the request that carries the first stub misses the cache from
//! its first token and writes everything before the stubbed output again.
//! On Anthropic's prices that is 1.25x the input price where reading it
//! would have cost 0.1x; on OpenAI's, 1x where it would have cost 0.1x.
//! Anthropic's is the stricter of the two, and the rule uses it.
//!
//! What the stubs repay: the request writes the stubs instead of the
//! outputs (1.25x each character removed), and every later request reads
//! that many characters less (0.1x each). So the first stubs are made when
//!
//! ```text
//! removed * (1.25 + 0.1 * later) >= prefix * (1.25 - 0.1)
//! ```
//!
//! where `removed` is what the group's stubs take out of the body (bytes,
//! as sent), `prefix` the bytes of the body but the conversation from the
//! group's first output on (tools, system prompt and history: what the
//! cache holds before the group, in that order whatever the body's order;
//! Claude Code and the OpenAI SDKs send `tools` after the conversation), and
//! `later` the requests the conversation is expected to go on for: the
//! assistant turns it has had so far times the horizon (0.5 by default: a
//! conversation `d` turns in is counted on for `d / 2` more). Anything
//! better would need the future. The outputs of
//! a group that does not pay stay verbatim in every later request (the
//! decision depends only on what precedes them), and the next group over
//! budget is weighed in its turn, against its own prefix.
//!
//! Before a request that came after the provider's cache had expired
//! ([`super::RequestFacts::expired`]) nothing is weighed: the provider
//! writes the whole prompt again there anyway, so from that request on
//! every group before it that the rule kept is a stub.
//!
//! Only the first stub is weighed: later ones add nothing before them, and
//! when the recall tools are offered from the conversation's first request
//! (the aging rule) or not at all (`recall.enabled = false`, or no store
//! to recall from) no stub changes what precedes it.
//!
//! Measured on real sessions (BENCHMARKS.md, "The first stub"): without
//! the rule, a Claude Code session that stubbed a 28,618-character output
//! 60 turns in rewrote an 80k-token cached prompt and cost 7.8% more; MCP
//! sessions, whose large outputs come early and are many times the prompt,
//! lose nothing to it.

/// The rule's setting: later requests counted on, in thousandths per
/// assistant turn so far (`externalization.first_stub_horizon`); `None`
/// (`first_stub_gate = false`) turns the rule off: every first stub is
/// made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gate {
    pub horizon_permille: Option<u32>,
    /// The later requests counted on however young the conversation
    /// (`externalization.first_stub_min_later`).
    pub min_later: u32,
}

/// The default horizon: a conversation `d` turns long is counted on for
/// `d / 2` more requests. Replayed on real sessions (BENCHMARKS.md, "The
/// first stub"), 0.5 made the fewest sessions costlier short of keeping
/// MCP sessions' large outputs verbatim (at 0 the peak context of MCP
/// sessions rose by a tenth); 1 and more let through the late stubs that
/// cost Claude Code sessions 1-8% more.
pub const DEFAULT_HORIZON_PERMILLE: u32 = 500;

impl Default for Gate {
    fn default() -> Self {
        Gate {
            horizon_permille: Some(DEFAULT_HORIZON_PERMILLE),
            min_later: DEFAULT_MIN_LATER,
        }
    }
}

/// The default floor of later requests: 10. The replayed sessions record
/// no tool definitions of their own (their replay declares the smallest
/// ones their calls imply), so they understate the prefix of real MCP
/// sessions, whose servers declare thousands of tokens of tools. Counting
/// on 10 later requests, a first MCP answer of 100,000 characters is still
/// a stub after 180,000 characters of tools and prompt; replayed, the floor
/// cost one more late Claude Code stub (-0.28% -> -0.62% at Anthropic's
/// prices) and nothing on Toolathlon (+37.88% -> +37.84%).
pub const DEFAULT_MIN_LATER: u32 = 10;

/// The price of writing a cached token, and of reading one, in
/// hundredths of the input price (Anthropic's).
const WRITE: u128 = 125;
const READ: u128 = 10;

impl Gate {
    /// Whether stubs removing `removed` bytes pay for writing `prefix`
    /// bytes again, `turns` assistant turns into the conversation.
    pub fn pays(&self, removed: usize, prefix: usize, turns: usize) -> bool {
        let Some(horizon) = self.horizon_permille else {
            return true;
        };
        // Later requests, in thousandths.
        let later = (turns as u128 * horizon as u128).max(self.min_later as u128 * 1000);
        let saved = removed as u128 * (WRITE * 1000 + READ * later);
        let cost = prefix as u128 * (WRITE - READ) * 1000;
        saved >= cost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_makes_every_first_stub() {
        let gate = Gate {
            horizon_permille: None,
            min_later: 0,
        };
        assert!(gate.pays(1, 1_000_000, 0));
    }

    #[test]
    fn a_large_output_early_pays_for_a_small_prompt() {
        // An MCP answer of 80,000 bytes after 10,000 bytes of prompt.
        assert!(Gate::default().pays(78_000, 10_000, 2));
    }

    #[test]
    fn a_small_saving_late_does_not_pay_for_a_large_prompt() {
        // 6,000 bytes saved against a 200,000-byte prompt, 30 turns in:
        // 6,000 * (1.25 + 0.1 * 15) = 16,500 < 200,000 * 1.15.
        assert!(!Gate::default().pays(6_000, 200_000, 30));
    }

    #[test]
    fn a_young_conversation_counts_on_the_floor() {
        // Turn 1: 10 later requests, not 0.5. 100,000 * (1.25 + 1) =
        // 225,000 >= 180,000 * 1.15 = 207,000.
        assert!(Gate::default().pays(100_000, 180_000, 1));
        assert!(!Gate::default().pays(100_000, 200_000, 1));
    }

    #[test]
    fn the_boundary_is_where_savings_equal_the_rewrite() {
        // No later request counted: removed * 1.25 >= prefix * 1.15.
        let gate = Gate {
            horizon_permille: Some(0),
            min_later: 0,
        };
        assert!(gate.pays(920, 1_000, 50));
        assert!(!gate.pays(919, 1_000, 50));
        // One later request per turn, 10 turns: removed * 2.25 >= prefix * 1.15.
        let one = Gate {
            horizon_permille: Some(1000),
            min_later: 0,
        };
        assert!(one.pays(512, 1_000, 10));
        assert!(!one.pays(510, 1_000, 10));
    }

    #[test]
    fn the_horizon_scales_with_the_turns_so_far() {
        // Half a request per turn: 1,000 * (1.25 + 0.05 * d) >= 11,500 from
        // d = 205 on; below 20 turns the floor of 10 counts.
        let gate = Gate::default();
        assert!(!gate.pays(1_000, 10_000, 5));
        assert!(gate.pays(5_112, 10_000, 5));
        assert!(!gate.pays(5_110, 10_000, 5));
        assert!(!gate.pays(1_000, 10_000, 204));
        assert!(gate.pays(1_000, 10_000, 205));
    }
}
