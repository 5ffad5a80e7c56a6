//! Choosing which outputs of one assistant-turn group to externalize
//! (SPEC section 2). Pure arithmetic over sizes: the caller supplies each
//! output's raw length and a way to measure its stub at a preview budget.

/// The budgets of SPEC section 2, in characters.
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
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            threshold_chars: 20_000,
            preview_chars: 2_000,
            turn_inline_budget_chars: 100_000,
            turn_preview_budget_chars: 10_000,
            min_preview_chars: 1_000,
        }
    }
}

impl Budget {
    /// The effective preview budget for `n` selected outputs:
    /// `max(0, min(preview, max(min_preview, turn_preview / n)))`.
    pub fn effective_preview(&self, n: usize) -> usize {
        let share = self.turn_preview_budget_chars / n.max(1);
        self.preview_chars.min(self.min_preview_chars.max(share))
    }
}

/// Why an output was externalized.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    SingleThreshold,
    TurnBudget,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::SingleThreshold => "single_threshold",
            Reason::TurnBudget => "turn_budget",
        }
    }
}

/// The outcome for one group: the reason per output (`None`: stays inline)
/// and the effective preview budget of its stubs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    pub reasons: Vec<Option<Reason>>,
    pub preview: usize,
}

impl Selection {
    pub fn count(&self) -> usize {
        self.reasons.iter().filter(|r| r.is_some()).count()
    }
}

/// Runs the selection for one group. `lengths[i]` is output `i`'s raw length;
/// only `eligible` outputs may be selected; `stub_len(i, preview)` is the
/// length of output `i`'s stub at that preview budget.
pub fn select(
    budget: &Budget,
    lengths: &[usize],
    eligible: &[bool],
    mut stub_len: impl FnMut(usize, usize) -> usize,
) -> Selection {
    let mut reasons: Vec<Option<Reason>> = lengths
        .iter()
        .zip(eligible)
        .map(|(&len, &ok)| (ok && len > budget.threshold_chars).then_some(Reason::SingleThreshold))
        .collect();
    let projected = |reasons: &[Option<Reason>],
                     stub_len: &mut dyn FnMut(usize, usize) -> usize| {
        let n = reasons.iter().filter(|r| r.is_some()).count();
        let preview = budget.effective_preview(n);
        reasons
            .iter()
            .zip(lengths)
            .enumerate()
            .map(|(i, (reason, &len))| match reason {
                Some(_) => stub_len(i, preview),
                None => len,
            })
            .sum::<usize>()
    };
    let mut size = projected(&reasons, &mut stub_len);
    // Largest first; ties keep their original order (the sort is stable).
    let mut by_size: Vec<usize> = (0..lengths.len()).collect();
    by_size.sort_by_key(|&i| std::cmp::Reverse(lengths[i]));
    while size >= budget.turn_inline_budget_chars {
        let mut chosen = None;
        for &i in &by_size {
            if reasons[i].is_some() || !eligible.get(i).copied().unwrap_or(false) {
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
    let n = reasons.iter().filter(|r| r.is_some()).count();
    Selection {
        preview: budget.effective_preview(n),
        reasons,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stub of 500 characters plus its preview share.
    fn stub(_: usize, preview: usize) -> usize {
        500 + preview
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
    fn single_threshold_is_strictly_greater() {
        let b = Budget::default();
        let s = select(&b, &[20_000, 20_001, 10], &[true; 3], stub);
        assert_eq!(s.reasons, [None, Some(Reason::SingleThreshold), None]);
    }

    #[test]
    fn turn_budget_takes_largest_first_until_under_budget() {
        let b = Budget::default();
        // 6 x 19,000 = 114,000 >= 100,000: one stub brings it to 95,000 + stub.
        let s = select(&b, &[19_000; 6], &[true; 6], stub);
        assert_eq!(
            s.reasons,
            [Some(Reason::TurnBudget), None, None, None, None, None]
        );
        assert_eq!(s.preview, 2000);
        // Largest first, ties in original order.
        let s = select(
            &b,
            &[15_000, 19_000, 19_000, 19_000, 19_000, 19_000, 19_000],
            &[true; 7],
            stub,
        );
        assert_eq!(s.reasons[1], Some(Reason::TurnBudget));
        assert_eq!(s.reasons[0], None);
    }

    #[test]
    fn exactly_at_budget_still_selects() {
        let b = Budget::default();
        let s = select(&b, &[19_999, 80_001], &[true; 2], stub);
        // 80,001 is over the threshold; the rest fits.
        assert_eq!(s.reasons, [None, Some(Reason::SingleThreshold)]);
        let s = select(&b, &[20_000; 5], &[true; 5], stub);
        assert_eq!(s.count(), 1, "100,000 is at the budget: one stub");
    }

    #[test]
    fn ineligible_outputs_are_never_selected() {
        let b = Budget::default();
        let s = select(&b, &[90_000, 30_000, 19_000], &[false, true, true], stub);
        assert_eq!(
            s.reasons,
            [
                None,
                Some(Reason::SingleThreshold),
                Some(Reason::TurnBudget)
            ]
        );
    }

    #[test]
    fn stops_when_no_selection_helps() {
        let b = Budget {
            turn_inline_budget_chars: 10,
            ..Budget::default()
        };
        // Stubs longer than the outputs: selecting never shrinks the group.
        let s = select(&b, &[100, 100], &[true; 2], |_, _| 5000);
        assert_eq!(s.count(), 0);
    }
}
