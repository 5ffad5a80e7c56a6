//! Choosing which outputs of one assistant-turn group to externalize
//! (with the conversation budget). Pure arithmetic over
//! sizes: the caller supplies each output's raw length, its own threshold
//! and floor (per-tool policy), what the conversation before the group
//! keeps inline, and a way to measure a stub at a preview budget.

/// The selection budgets, in characters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// One output longer than this (strictly) is externalized: `single_threshold`.
    pub threshold_chars: usize,
    /// Per-stub sample budget.
    pub preview_chars: usize,
    /// Budget for the total inline size of one group.
    pub turn_inline_budget_chars: usize,
    /// Preview budget shared by the stubs of one group.
    pub turn_preview_budget_chars: usize,
    /// Floor of each stub's share.
    pub min_preview_chars: usize,
    /// Budget for the tool output a conversation keeps inline: once the
    /// outputs before a group keep more than this inline, each of the
    /// group's outputs over its conversation floor is externalized
    /// (`conversation_budget`). 0: off.
    pub conversation_inline_budget_chars: usize,
    /// Under the conversation budget, outputs longer than this (strictly)
    /// are externalized.
    pub conversation_floor_chars: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            threshold_chars: 20_000,
            preview_chars: 2_000,
            turn_inline_budget_chars: 100_000,
            turn_preview_budget_chars: 10_000,
            min_preview_chars: 1_000,
            conversation_inline_budget_chars: DEFAULT_CONVERSATION_BUDGET,
            conversation_floor_chars: DEFAULT_CONVERSATION_FLOOR,
        }
    }
}

/// The default conversation budget (BENCHMARKS.md, "A conversation budget").
pub const DEFAULT_CONVERSATION_BUDGET: usize = 0;
/// The default conversation floor.
pub const DEFAULT_CONVERSATION_FLOOR: usize = 8_000;

impl Budget {
    /// The effective preview budget for `n` selected outputs:
    /// `max(0, min(preview, max(min_preview, turn_preview / n)))`.
    pub fn effective_preview(&self, n: usize) -> usize {
        let share = self.turn_preview_budget_chars / n.max(1);
        self.preview_chars.min(self.min_preview_chars.max(share))
    }

    /// Whether a group whose history keeps `held` characters of tool
    /// output inline falls under the conversation budget (strictly over it).
    pub fn conversation_over(&self, held: usize) -> bool {
        self.conversation_inline_budget_chars > 0 && held > self.conversation_inline_budget_chars
    }
}

/// Why an output was externalized.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    SingleThreshold,
    TurnBudget,
    ConversationBudget,
    /// Seen verbatim, then old (the aging rule, [`super::aging`]).
    Aged,
    /// Over the model's context window otherwise ([`super::window`]).
    ContextWindow,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::SingleThreshold => "single_threshold",
            Reason::TurnBudget => "turn_budget",
            Reason::ConversationBudget => "conversation_budget",
            Reason::Aged => "aged",
            Reason::ContextWindow => "context_window",
        }
    }
}

/// The outcome for one group: the reason per output (`None`: stays inline)
/// and the effective preview budget of its stubs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    pub reasons: Vec<Option<Reason>>,
    pub preview: usize,
    /// The conversation's inline total after the group (see [`select`]).
    pub held: usize,
}

impl Selection {
    pub fn count(&self) -> usize {
        self.reasons.iter().filter(|r| r.is_some()).count()
    }
}

/// One output as the selection sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Its raw length in characters.
    pub len: usize,
    /// Whether it may be externalized at all (not an error the client
    /// flagged, not a tool whose rule says `never`, decodable, not a recall
    /// result).
    pub eligible: bool,
    /// Longer than this (strictly): `single_threshold`.
    pub threshold_chars: usize,
    /// Whether the conversation budget applies to it (under the budget,
    /// longer than the floor, strictly: `conversation_budget`).
    pub conversation: bool,
}

impl Candidate {
    /// An eligible output with the budget's own threshold, under the
    /// conversation budget.
    pub fn new(budget: &Budget, len: usize) -> Candidate {
        Candidate {
            len,
            eligible: true,
            threshold_chars: budget.threshold_chars,
            conversation: true,
        }
    }
}

/// Runs the selection for one group. `held` is the conversation's inline
/// total before the group: the raw length of every earlier output that
/// neither its own threshold nor the conversation budget externalized
/// (the turn budget, which weighs a group as a whole, does not enter it).
/// Each output is held against the total of the outputs before it, those
/// earlier in the group included, so its fate depends only on what
/// precedes it, however a protocol groups outputs. (An output the last
/// step gives back to inline, its stub no shorter than itself, joins the
/// total after the group; that too depends only on the group.)
/// `stub_len(i, preview, reason)` is the length of output `i`'s stub at
/// that preview budget.
pub fn select(
    budget: &Budget,
    candidates: &[Candidate],
    mut held: usize,
    mut stub_len: impl FnMut(usize, usize, Reason) -> usize,
) -> Selection {
    let mut reasons: Vec<Option<Reason>> = Vec::with_capacity(candidates.len());
    for c in candidates {
        let reason = if !c.eligible {
            None
        } else if c.len > c.threshold_chars {
            Some(Reason::SingleThreshold)
        } else if c.conversation
            && budget.conversation_over(held)
            && c.len > budget.conversation_floor_chars
        {
            Some(Reason::ConversationBudget)
        } else {
            None
        };
        if reason.is_none() {
            held = held.saturating_add(c.len);
        }
        reasons.push(reason);
    }
    let projected = |reasons: &[Option<Reason>],
                     stub_len: &mut dyn FnMut(usize, usize, Reason) -> usize| {
        let n = reasons.iter().filter(|r| r.is_some()).count();
        let preview = budget.effective_preview(n);
        reasons
            .iter()
            .zip(candidates)
            .enumerate()
            .map(|(i, (reason, c))| match reason {
                Some(reason) => stub_len(i, preview, *reason),
                None => c.len,
            })
            .sum::<usize>()
    };
    let mut size = projected(&reasons, &mut stub_len);
    // Largest first; ties keep their original order (the sort is stable).
    let mut by_size: Vec<usize> = (0..candidates.len()).collect();
    by_size.sort_by_key(|&i| std::cmp::Reverse(candidates[i].len));
    while size >= budget.turn_inline_budget_chars {
        let mut chosen = None;
        for &i in &by_size {
            if reasons[i].is_some() || !candidates[i].eligible {
                continue;
            }
            reasons[i] = Some(Reason::TurnBudget);
            let trial = projected(&reasons, &mut stub_len);
            if trial < size {
                chosen = Some(trial);
                break;
            }
            reasons[i] = None;
        }
        match chosen {
            Some(trial) => size = trial,
            None => break,
        }
    }
    // A stub never stands for fewer characters than it has (a low
    // threshold, a short output and a long preview): that output stays
    // inline. Fewer stubs may widen the others' previews: again until none.
    loop {
        let n = reasons.iter().filter(|r| r.is_some()).count();
        let preview = budget.effective_preview(n);
        let longer = (0..candidates.len()).find(|&i| {
            reasons[i].is_some_and(|reason| stub_len(i, preview, reason) >= candidates[i].len)
        });
        let Some(i) = longer else {
            return Selection {
                preview,
                reasons,
                held,
            };
        };
        if reasons[i] != Some(Reason::TurnBudget) {
            held = held.saturating_add(candidates[i].len);
        }
        reasons[i] = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stub of 500 characters plus its preview share.
    fn stub(_: usize, preview: usize, _: Reason) -> usize {
        500 + preview
    }

    /// The selection of outputs of these lengths (with the budget's
    /// threshold and floor), `eligible` per output, after `held` inline
    /// characters.
    fn run(b: &Budget, lengths: &[usize], eligible: &[bool], held: usize) -> Selection {
        let candidates: Vec<Candidate> = lengths
            .iter()
            .zip(eligible)
            .map(|(&len, &eligible)| Candidate {
                eligible,
                ..Candidate::new(b, len)
            })
            .collect();
        select(b, &candidates, held, stub)
    }

    #[test]
    fn effective_preview_follows_the_formula() {
        let b = Budget::default();
        assert_eq!(b.effective_preview(0), 2000);
        assert_eq!(b.effective_preview(1), 2000);
        assert_eq!(b.effective_preview(5), 2000);
        assert_eq!(b.effective_preview(6), 1666);
        assert_eq!(b.effective_preview(20), 1000);
        let tight = Budget {
            preview_chars: 0,
            ..b
        };
        assert_eq!(tight.effective_preview(3), 0);
    }

    #[test]
    fn no_output_gives_way_to_a_longer_stub() {
        // A per-tool threshold of 1,000 and stubs of 500 plus the preview
        // (1,000 here, the preview budget shared by two stubs).
        let b = Budget {
            preview_chars: 1_000,
            ..Budget::default()
        };
        let candidates: Vec<Candidate> = [1_200, 5_000]
            .iter()
            .map(|&len| Candidate {
                threshold_chars: 1_000,
                ..Candidate::new(&b, len)
            })
            .collect();
        let s = select(&b, &candidates, 0, stub);
        assert_eq!(s.reasons, [None, Some(Reason::SingleThreshold)]);
        assert_eq!(s.held, 1_200, "the short output counts as inline");
    }

    #[test]
    fn single_threshold_is_strictly_greater() {
        let b = Budget::default();
        let s = run(&b, &[20_000, 20_001, 10], &[true; 3], 0);
        assert_eq!(s.reasons, [None, Some(Reason::SingleThreshold), None]);
        assert_eq!(s.held, 20_010);
    }

    #[test]
    fn a_candidate_may_carry_its_own_threshold() {
        let b = Budget::default();
        let candidates = [
            Candidate {
                threshold_chars: 3_000,
                ..Candidate::new(&b, 3_001)
            },
            Candidate {
                threshold_chars: 50_000,
                ..Candidate::new(&b, 40_000)
            },
            Candidate::new(&b, 30_000),
        ];
        let s = select(&b, &candidates, 0, stub);
        assert_eq!(
            s.reasons,
            [
                Some(Reason::SingleThreshold),
                None,
                Some(Reason::SingleThreshold)
            ]
        );
        assert_eq!(s.held, 40_000);
    }

    #[test]
    fn turn_budget_takes_largest_first_until_under_budget() {
        let b = Budget::default();
        // 6 x 19,000 = 114,000 >= 100,000: one stub brings it to 95,000 + stub.
        let s = run(&b, &[19_000; 6], &[true; 6], 0);
        assert_eq!(
            s.reasons,
            [Some(Reason::TurnBudget), None, None, None, None, None]
        );
        assert_eq!(s.preview, 2000);
        assert_eq!(
            s.held, 114_000,
            "a turn-budget stub still counts toward the conversation"
        );
        // Largest first, ties in original order.
        let s = run(
            &b,
            &[15_000, 19_000, 19_000, 19_000, 19_000, 19_000, 19_000],
            &[true; 7],
            0,
        );
        assert_eq!(s.reasons[1], Some(Reason::TurnBudget));
        assert_eq!(s.reasons[0], None);
    }

    #[test]
    fn exactly_at_budget_still_selects() {
        let b = Budget::default();
        let s = run(&b, &[19_999, 80_001], &[true; 2], 0);
        // 80,001 is over the threshold; the rest fits.
        assert_eq!(s.reasons, [None, Some(Reason::SingleThreshold)]);
        let s = run(&b, &[20_000; 5], &[true; 5], 0);
        assert_eq!(s.count(), 1, "100,000 is at the budget: one stub");
    }

    #[test]
    fn ineligible_outputs_are_never_selected() {
        let b = Budget {
            conversation_inline_budget_chars: 200_000,
            conversation_floor_chars: 8_000,
            ..Budget::default()
        };
        let s = run(
            &b,
            &[90_000, 30_000, 19_000],
            &[false, true, true],
            1_000_000,
        );
        assert_eq!(
            s.reasons,
            [
                None,
                Some(Reason::SingleThreshold),
                Some(Reason::ConversationBudget)
            ]
        );
        assert_eq!(
            s.held, 1_090_000,
            "an ineligible output stays inline and counts"
        );
    }

    #[test]
    fn stops_when_no_selection_helps() {
        let b = Budget {
            turn_inline_budget_chars: 10,
            ..Budget::default()
        };
        // Stubs longer than the outputs: selecting never shrinks the group.
        let candidates = [Candidate::new(&b, 100), Candidate::new(&b, 100)];
        let s = select(&b, &candidates, 0, |_, _, _| 5000);
        assert_eq!(s.count(), 0);
    }

    #[test]
    fn the_conversation_budget_applies_strictly_over_it_and_over_the_floor() {
        let b = Budget {
            conversation_inline_budget_chars: 100_000,
            conversation_floor_chars: 5_000,
            ..Budget::default()
        };
        // At the budget: nothing but the threshold.
        let s = run(&b, &[19_000, 30_000], &[true; 2], 100_000);
        assert_eq!(s.reasons, [None, Some(Reason::SingleThreshold)]);
        assert_eq!(s.held, 119_000);
        // Over it: every output over the floor; the threshold's reason first.
        let s = run(&b, &[5_000, 5_001, 30_000], &[true; 3], 100_001);
        assert_eq!(
            s.reasons,
            [
                None,
                Some(Reason::ConversationBudget),
                Some(Reason::SingleThreshold)
            ]
        );
        assert_eq!(s.held, 105_001, "only what stays inline counts");
        // Each output against the outputs before it, in the group too:
        // 95,000 + 5,000 is at the budget, + 5,001 is over it.
        let s = run(&b, &[5_000, 5_001, 6_000, 6_000], &[true; 4], 95_000);
        assert_eq!(
            s.reasons,
            [
                None,
                None,
                Some(Reason::ConversationBudget),
                Some(Reason::ConversationBudget)
            ]
        );
        // Off: a budget of 0 never applies.
        let off = Budget {
            conversation_inline_budget_chars: 0,
            ..b
        };
        assert!(!off.conversation_over(usize::MAX));
        let s = run(&off, &[5_001, 19_000, 30_000], &[true; 3], 10_000_000);
        assert_eq!(s.count(), 1);
        // A candidate out of the conversation budget (a tool's rule) still counts.
        let candidates = [
            Candidate {
                conversation: false,
                ..Candidate::new(&b, 19_000)
            },
            Candidate {
                conversation: false,
                threshold_chars: 10_000,
                ..Candidate::new(&b, 10_001)
            },
            Candidate::new(&b, 5_001),
        ];
        let s = select(&b, &candidates, 200_000, stub);
        assert_eq!(
            s.reasons,
            [
                None,
                Some(Reason::SingleThreshold),
                Some(Reason::ConversationBudget)
            ]
        );
        assert_eq!(s.held, 219_000);
    }

    #[test]
    fn stubs_are_measured_with_their_own_reason() {
        let b = Budget {
            conversation_inline_budget_chars: 200_000,
            conversation_floor_chars: 8_000,
            ..Budget::default()
        };
        let mut seen = Vec::new();
        let candidates = [Candidate::new(&b, 30_000), Candidate::new(&b, 9_000)];
        select(&b, &candidates, 1_000_000, |i, _, reason| {
            seen.push((i, reason));
            100
        });
        assert!(seen.contains(&(0, Reason::SingleThreshold)));
        assert!(seen.contains(&(1, Reason::ConversationBudget)));
    }
}
