//! The prompt-cache clock of a replayed conversation: which of its requests
//! came after the provider's cache had expired, decided as the proxy's
//! store decides them ([`crate::store::AsyncResultStore::cache_expiries`]),
//! from the file's own timestamps.
//!
//! Architecture invariant: pure; the time is the recorded request's.

use crate::store::cache_clock::{decide, on_branch, ExpiryPoint};

/// One conversation's clock.
#[derive(Clone, Debug, Default)]
pub struct CacheClock {
    /// The clock's row: the latest request's time (Unix ms) and the most
    /// messages seen.
    last: Option<(i64, i64)>,
    /// The requests that came after an expiry, ascending: message count
    /// and the identity of the request's last message.
    points: Vec<ExpiryPoint>,
}

impl CacheClock {
    /// Notes a request of `messages` messages at `at` (seconds) and returns
    /// the conversation's expiry points up to it that lie on its branch,
    /// ascending. A request is one after an expiry when it is longer than
    /// every request before it (not a retry, nor an earlier request sent
    /// again) and more than `ttl_ms` came since the latest of them; the
    /// first request of a conversation is never one (nothing is known of
    /// what came before). `identity_at(count)` is the identity of the
    /// request's message that ends the conversation at `count` messages
    /// ([`crate::rewrite::Reading::message_identity`]).
    pub fn observe(
        &mut self,
        messages: usize,
        at: f64,
        ttl_ms: u64,
        identity_at: impl Fn(usize) -> Option<String>,
    ) -> Vec<usize> {
        let now = (at * 1000.0) as i64;
        let count = i64::try_from(messages).unwrap_or(i64::MAX);
        match self.last {
            None => self.last = Some((now, count)),
            Some((last_at, last_messages)) => {
                let ttl = i64::try_from(ttl_ms).unwrap_or(i64::MAX);
                let d = decide(last_at, last_messages, now, count, ttl);
                // Only a request longer than any before records, so the
                // points stay in ascending order, one per count.
                if d.record {
                    self.points.push(ExpiryPoint {
                        messages: u32::try_from(messages).unwrap_or(u32::MAX),
                        last_message: identity_at(messages).unwrap_or_default(),
                    });
                }
                self.last = Some((d.last_at, d.last_messages));
            }
        }
        let upto = self
            .points
            .partition_point(|p| (p.messages as usize) <= messages);
        on_branch(&self.points[..upto], identity_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_longer_than_the_lifetime_marks_the_next_longer_request() {
        let mut clock = CacheClock::default();
        let one = |count: usize| Some(format!("m{count}"));
        assert!(clock.observe(3, 0.0, 300_000, one).is_empty());
        assert!(clock.observe(5, 200.0, 300_000, one).is_empty());
        // 301 s later: expired.
        assert_eq!(clock.observe(7, 501.0, 300_000, one), [7]);
        // A retry of it, at any time, gets the same answer.
        assert_eq!(clock.observe(7, 502.0, 300_000, one), [7]);
        assert_eq!(clock.observe(7, 5_000.0, 300_000, one), [7]);
        // An earlier request sent again is never one, and does not see it.
        assert!(clock.observe(5, 9_000.0, 300_000, one).is_empty());
        // Later requests keep it.
        assert_eq!(clock.observe(9, 9_001.0, 300_000, one), [7]);
        // A lifetime of 0 never expires.
        assert_eq!(clock.observe(11, 90_000.0, 0, one), [7]);
        // A branch forked before the point's message does not see it; one
        // forked after it does.
        let fork = |count: usize| {
            Some(if count <= 4 {
                format!("m{count}")
            } else {
                format!("f{count}")
            })
        };
        assert!(clock.observe(8, 90_001.0, 300_000, fork).is_empty());
        let late_fork = |count: usize| {
            Some(if count <= 7 {
                format!("m{count}")
            } else {
                format!("f{count}")
            })
        };
        assert_eq!(clock.observe(8, 90_002.0, 300_000, late_fork), [7]);
    }
}
