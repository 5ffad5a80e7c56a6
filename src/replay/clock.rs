//! The prompt-cache clock of a replayed conversation: which of its requests
//! came after the provider's cache had expired, decided as the proxy's
//! store decides them ([`crate::store::AsyncResultStore::cache_expiries`]),
//! from the file's own timestamps.
//!
//! Architecture invariant: pure; the time is the recorded request's.

/// One conversation's clock.
#[derive(Clone, Debug, Default)]
pub struct CacheClock {
    /// The latest request seen: when (seconds), and its message count.
    last: Option<(f64, usize)>,
    /// The message counts of the requests that came after an expiry.
    points: Vec<usize>,
}

impl CacheClock {
    /// Notes a request of `messages` messages at `at` (seconds) and returns
    /// the conversation's expiry points up to it, ascending. A request is
    /// one after an expiry when it is longer than every request before it
    /// (not a retry, nor an earlier request sent again) and more than
    /// `ttl_ms` came since the latest of them; the first request of a
    /// conversation is never one (nothing is known of what came before).
    pub fn observe(&mut self, messages: usize, at: f64, ttl_ms: u64) -> Vec<usize> {
        match self.last {
            None => self.last = Some((at, messages)),
            Some((last_at, last_messages)) => {
                let idle_ms = (at - last_at) * 1000.0;
                if ttl_ms > 0
                    && messages > last_messages
                    && idle_ms > ttl_ms as f64
                    && !self.points.contains(&messages)
                {
                    self.points.push(messages);
                }
                self.last = Some((last_at.max(at), last_messages.max(messages)));
            }
        }
        let mut points: Vec<usize> = self
            .points
            .iter()
            .copied()
            .filter(|&p| p <= messages)
            .collect();
        points.sort_unstable();
        points
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_longer_than_the_lifetime_marks_the_next_longer_request() {
        let mut clock = CacheClock::default();
        assert!(clock.observe(3, 0.0, 300_000).is_empty());
        assert!(clock.observe(5, 200.0, 300_000).is_empty());
        // 301 s later: expired.
        assert_eq!(clock.observe(7, 501.0, 300_000), [7]);
        // A retry of it, at any time, gets the same answer.
        assert_eq!(clock.observe(7, 502.0, 300_000), [7]);
        assert_eq!(clock.observe(7, 5_000.0, 300_000), [7]);
        // An earlier request sent again is never one, and does not see it.
        assert!(clock.observe(5, 9_000.0, 300_000).is_empty());
        // Later requests keep it.
        assert_eq!(clock.observe(9, 9_001.0, 300_000), [7]);
        // A lifetime of 0 never expires.
        assert_eq!(clock.observe(11, 90_000.0, 0), [7]);
    }
}
