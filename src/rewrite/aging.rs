//! The aging rule: an output the model has seen verbatim becomes a stub
//! once it is old, where the change pays under the providers' price model.
//!
//! Every output up to its threshold is sent verbatim in the first request
//! that carries it; the other rules decide at first sight. Aging decides
//! later, and so changes bytes already sent: replacing an output makes the
//! provider's cache miss from that output on, so the request that makes
//! the change writes everything after it again (Anthropic: 1.25x the input
//! price instead of 0.1x to read it; OpenAI: 1x instead of 0.1x). After one
//! turn that is little: the rewrite marks where the kept prefix ends (a
//! cache breakpoint on Anthropic's API) and offers the recall tools from
//! the conversation's first request, so the change costs the next request
//! only the stub. An optional gate changes the prefix only at decision
//! points where the characters removed are at least
//! [`Aging::min_share_permille`] thousandths of the characters the cache
//! must write again (from the first output replaced to the end of the
//! previous request, or the whole previous request when the recall tools
//! are not offered yet, since adding them changes the tool definitions at
//! the head of the prompt); at 920 = 1 - 0.1/1.25 the request that makes
//! the change costs no more than without it on either provider. The
//! default is no gate, the setting the replay of real sessions found best
//! (BENCHMARKS.md, "Savings on real sessions"); the rule itself is off.
//!
//! Where the provider's cache had expired before a request (a pause
//! longer than its lifetime, [`Turns::expired`]), the provider writes the
//! whole prompt again whatever is sent, so with [`Aging::after_expiry`]
//! (on by default, the rule by age off or not) every output over the
//! floor the model saw in an earlier request ages at that decision point,
//! when together they remove more than the recall tools add where they
//! come with the change.
//!
//! Determinism: a decision point is the request whose newest turn is turn
//! `d` of this conversation; the rule replays every decision point from the
//! request's own content, oldest first, so each request reproduces the
//! decisions of every earlier request of the conversation (its history is
//! theirs plus new turns) and an output, once aged, stays aged, as long
//! as the bytes outside the conversation ([`Turns::outside`]) stay the
//! same.

/// The rule's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aging {
    /// An output becomes eligible this many assistant turns after the turn
    /// it answers (0: the rule is off).
    pub after_turns: usize,
    /// Only outputs longer than this many characters.
    pub floor_chars: usize,
    /// What a change must remove, in thousandths of what it makes the
    /// cache write again (0: whenever an output is old enough).
    pub min_share_permille: u32,
    /// The later requests a change may count on to repay it, in
    /// thousandths per turn the conversation has had at the decision
    /// point (0: the change must pay at once). A conversation `d` turns
    /// long is expected to go on about `d * horizon` more requests.
    pub horizon_permille: u32,
    /// Whether, at a request that came after the provider's cache had
    /// expired ([`Turns::expired`]), every output over the floor the model
    /// has seen in an earlier request becomes a stub, whatever
    /// `after_turns` says (0 included): the provider writes the whole
    /// prompt again there anyway, so the change costs nothing.
    pub after_expiry: bool,
}

impl Default for Aging {
    fn default() -> Self {
        Aging {
            after_turns: DEFAULT_AFTER_TURNS,
            floor_chars: DEFAULT_FLOOR_CHARS,
            min_share_permille: DEFAULT_MIN_SHARE_PERMILLE,
            horizon_permille: DEFAULT_HORIZON_PERMILLE,
            after_expiry: DEFAULT_AFTER_EXPIRY,
        }
    }
}

/// The defaults: off; when turned on (`after_turns = 1`), the setting the
/// replay of real sessions found best (BENCHMARKS.md, "Savings on real
/// sessions").
pub const DEFAULT_AFTER_TURNS: usize = 0;
pub const DEFAULT_FLOOR_CHARS: usize = 300;
pub const DEFAULT_MIN_SHARE_PERMILLE: u32 = 0;
pub const DEFAULT_HORIZON_PERMILLE: u32 = 0;
/// On by default: replayed on the Claude Code sessions, whose people pause
/// longer than the cache lives 43 times in 19 of 52 sessions, it took the
/// saving from +0.2% to +3.6% at Anthropic's prices (BENCHMARKS.md, "After
/// the cache expired").
pub const DEFAULT_AFTER_EXPIRY: bool = true;

/// What one later request saves of each character removed, in thousandths
/// of what the change costs to write it: Anthropic's 0.1x read over its
/// 1.25x write (OpenAI's 0.1x over 1x repays sooner, so this is the
/// stricter of the two).
const READ_OVER_WRITE_PERMILLE: u128 = 80;

/// One output the rule may age: its turn (0-based among the request's
/// turns that carry outputs), its bytes in the body, and the bytes its
/// stub would save.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub turn: usize,
    /// Where it starts, from the conversation's start.
    pub start: usize,
    pub saving: usize,
}

/// The request as the rule measures it, in bytes of its conversation
/// (the `messages` or `input` array).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turns {
    /// Where each turn's last output ends, from the conversation's start.
    pub ends: Vec<usize>,
    /// Bytes of the body outside its conversation (tools, system prompt):
    /// what a first offer of the recall tools makes the cache write again.
    /// Taken from the request itself; a change to them (a tool added, the
    /// system prompt edited) makes the provider write its cache again
    /// anyway.
    pub outside: usize,
    /// The first turn from whose request on the recall tools are offered:
    /// 0 when the conversation declares tools of its own (with the aging
    /// rule on they are offered from its first request), otherwise the
    /// first turn holding an output another rule externalized.
    pub first_stub: Option<usize>,
    /// The decision points whose request came after the provider's cache
    /// had expired: there it writes the whole prompt again anyway, so the
    /// change is free, and every output old enough ages if together they
    /// remove more than the recall tools add when offered there first.
    pub expired: Vec<Expiry>,
    /// Bytes the recall tools add to the tool definitions.
    pub recall_tools: usize,
}

/// A decision point whose request came after the provider's cache had
/// expired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expiry {
    /// The request's newest turn.
    pub turn: usize,
    /// Whether the model answered after that turn's outputs in the request
    /// (a person's message after a pause follows the model's answer): then
    /// it has seen them, and they age too.
    pub newest_seen: bool,
}

/// Which of `seen` (in body order) the rule externalizes.
pub fn aged(aging: &Aging, seen: &[Seen], turns: &Turns) -> Vec<bool> {
    let mut aged = vec![false; seen.len()];
    let expiries = aging.after_expiry && !turns.expired.is_empty();
    if aging.after_turns == 0 && !expiries {
        return aged;
    }
    let mut offered_from = turns.first_stub;
    for d in 0..turns.ends.len() {
        let expiry = turns
            .expired
            .iter()
            .find(|e| e.turn == d)
            .filter(|_| aging.after_expiry);
        let expired = expiry.is_some();
        // At an expiry, the outputs the model saw: those of earlier turns,
        // and the newest turn's too where it answered after them.
        let after = match (expiry, aging.after_turns) {
            (Some(e), _) => usize::from(!e.newest_seen),
            (None, 0) => continue,
            (None, n) => n,
        };
        let pending: Vec<usize> = (0..seen.len())
            .filter(|&i| !aged[i] && seen[i].turn.saturating_add(after) <= d)
            .collect();
        let Some(&first) = pending.first() else {
            continue;
        };
        let removed: usize = pending.iter().map(|&i| seen[i].saving).sum();
        let previous_end = d.checked_sub(1).map_or(0, |p| turns.ends[p]);
        let rewritten = if offered_from.is_some_and(|t| t < d) {
            previous_end.saturating_sub(seen[first].start)
        } else {
            previous_end + turns.outside
        };
        // Later requests expected: d turns so far, times the horizon.
        let later = d as u128 * aging.horizon_permille as u128 / 1000;
        let tools_added = offered_from.is_none_or(|t| t > d);
        let pays = if expired {
            removed > if tools_added { turns.recall_tools } else { 0 }
        } else {
            removed as u128 * (1000 + later * READ_OVER_WRITE_PERMILLE)
                >= aging.min_share_permille as u128 * rewritten as u128
        };
        if pays {
            for i in pending {
                aged[i] = true;
            }
            // The recall tools are offered from here on, whatever turn a
            // stub of another rule comes in later.
            offered_from = Some(offered_from.map_or(d, |t| t.min(d)));
        }
    }
    aged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aging(after: usize, permille: u32) -> Aging {
        Aging {
            after_turns: after,
            floor_chars: 0,
            min_share_permille: permille,
            horizon_permille: 0,
            after_expiry: true,
        }
    }

    /// Turns of 1,000 bytes each; `big` outputs (turn, saving) start at the
    /// beginning of their turn.
    fn turns(n: usize, first_stub: Option<usize>) -> Turns {
        Turns {
            ends: (1..=n).map(|t| t * 1000).collect(),
            outside: 500,
            first_stub,
            expired: Vec::new(),
            recall_tools: 0,
        }
    }

    fn seen(turn: usize, saving: usize) -> Seen {
        Seen {
            turn,
            start: turn * 1000,
            saving,
        }
    }

    #[test]
    fn off_ages_nothing() {
        assert_eq!(
            aged(&aging(0, 0), &[seen(0, 900)], &turns(5, None)),
            [false]
        );
    }

    #[test]
    fn without_a_price_gate_outputs_age_after_n_turns() {
        let s = [seen(0, 900), seen(2, 900), seen(3, 900)];
        // Newest turn 4: turns 0 and 2 are two or more turns old, turn 3 is not.
        assert_eq!(aged(&aging(2, 0), &s, &turns(5, None)), [true, true, false]);
        // The request before it (newest turn 3) ages turn 0 only.
        assert_eq!(
            aged(&aging(2, 0), &s, &turns(4, None)),
            [true, false, false]
        );
    }

    #[test]
    fn the_gate_ages_only_where_the_change_pays_at_once() {
        // Tools already offered (a stub in turn 0): an output filling its
        // own turn (saving 950 of 1,000 bytes) pays at age 1.
        let s = [seen(1, 950)];
        assert_eq!(aged(&aging(1, 920), &s, &turns(3, Some(0))), [true]);
        // Saving 900 of 1,000 does not.
        assert_eq!(
            aged(&aging(1, 920), &[seen(1, 900)], &turns(3, Some(0))),
            [false]
        );
        // Without the recall tools offered, the change rewrites the whole
        // previous request: it does not pay.
        assert_eq!(aged(&aging(1, 920), &s, &turns(3, None)), [false]);
    }

    #[test]
    fn a_horizon_counts_later_requests_per_turn_so_far() {
        // Saving 600 of the 1,000 bytes it rewrites: short of 920 at once.
        // With a horizon of 1, a change at turn d counts on d later
        // requests, each repaying 8% of the saving: 600 * (1 + 0.08 * d)
        // >= 920 from d = 7 on, so the output of turn 6 (one turn old at
        // d = 7) ages; the same output in turn 1 makes the change rewrite
        // six turns, which 600 bytes do not repay.
        let mut a = aging(1, 920);
        a.horizon_permille = 1000;
        let at = |t: usize| Seen {
            turn: t,
            start: t * 1000,
            saving: 600,
        };
        assert_eq!(aged(&a, &[at(6)], &turns(8, Some(0))), [true]);
        assert_eq!(aged(&a, &[at(5)], &turns(7, Some(0))), [false]);
        assert_eq!(aged(&a, &[at(1)], &turns(7, Some(0))), [false]);
        assert_eq!(aged(&a, &[at(1)], &turns(8, Some(0))), [false]);
        // Without the horizon it never pays.
        assert_eq!(aged(&aging(1, 920), &[at(6)], &turns(20, Some(0))), [false]);
    }

    #[test]
    fn an_offer_made_by_aging_holds_before_a_later_stub_of_another_rule() {
        // Turn 1's output pays at once even with the whole request
        // rewritten (the tools not offered yet); turn 3's then pays at the
        // cheaper measure. A stub of another rule comes in turn 6: every
        // request, with or without it, must age both.
        let s = [
            Seen {
                turn: 1,
                start: 0,
                saving: 1900,
            },
            Seen {
                turn: 3,
                start: 3000,
                saving: 950,
            },
        ];
        let turns = |n: usize, first_stub| Turns {
            ends: (1..=n).map(|t| t * 1000).collect(),
            outside: 0,
            first_stub,
            expired: Vec::new(),
            recall_tools: 0,
        };
        let a = Aging {
            after_turns: 1,
            floor_chars: 0,
            min_share_permille: 920,
            horizon_permille: 0,
            after_expiry: true,
        };
        assert_eq!(aged(&a, &s, &turns(5, None)), [true, true]);
        assert_eq!(aged(&a, &s, &turns(8, Some(6))), [true, true]);
    }

    #[test]
    fn an_expiry_ages_every_output_seen_before_at_no_cost() {
        // The rule off, or its gate shut: only the decision point after
        // the expiry (turn 3) ages, and everything seen before it.
        let s = [seen(0, 100), seen(1, 100), seen(2, 100), seen(3, 900)];
        let mut t = turns(5, None);
        t.expired = vec![Expiry {
            turn: 3,
            newest_seen: false,
        }];
        assert_eq!(aged(&aging(0, 0), &s, &t), [true, true, true, false]);
        assert_eq!(aged(&aging(4, 1000), &s, &t), [true, true, true, false]);
        // Without an expiry, or with the setting off, nothing.
        assert_eq!(aged(&aging(0, 0), &s, &turns(5, None)), [false; 4]);
        let mut off = aging(0, 0);
        off.after_expiry = false;
        assert_eq!(aged(&off, &s, &t), [false; 4]);
        // Where the recall tools come with the change, it must remove more
        // than they add: 300 bytes do not pay for 400 of tools, and do once
        // another rule offered them before.
        t.recall_tools = 400;
        assert_eq!(aged(&aging(0, 0), &s, &t), [false; 4]);
        t.first_stub = Some(2);
        assert_eq!(aged(&aging(0, 0), &s, &t), [true, true, true, false]);
        // Where the model answered after the newest turn's outputs, it saw
        // them too.
        t.expired[0].newest_seen = true;
        assert_eq!(aged(&aging(0, 0), &s, &t), [true; 4]);
        // The first turn itself, seen and answered (the tools offered
        // there for nothing more).
        t.recall_tools = 0;
        t.expired = vec![Expiry {
            turn: 0,
            newest_seen: true,
        }];
        assert_eq!(aged(&aging(0, 0), &s, &t), [true, false, false, false]);
    }

    #[test]
    fn a_huge_age_never_overflows() {
        let a = aging(usize::MAX, 0);
        assert_eq!(aged(&a, &[seen(1, 900)], &turns(5, None)), [false]);
    }

    #[test]
    fn each_request_reproduces_the_decisions_of_the_earlier_ones() {
        let s = [seen(0, 300), seen(1, 990), seen(2, 990), seen(4, 100)];
        let mut before: Vec<bool> = Vec::new();
        for n in 1..=8 {
            let now = aged(&aging(1, 600), &s, &turns(n, Some(0)));
            // An output aged in an earlier request stays aged.
            for (i, was) in before.iter().enumerate() {
                assert!(!was || now[i], "request {n}: {before:?} -> {now:?}");
            }
            before = now;
        }
        assert!(before[1] && before[2]);
    }
}
