//! Prompt-cache clocks, shared by both backends: the SQL (SQLite's `?N`
//! placeholders; PostgreSQL gets `$N` through
//! [`super::ledger::postgres_sql`]) and the decision. A backend only runs
//! them, in one write transaction holding the session's clock row.
//!
//! Why the store decides: whether the provider's prompt cache expired since
//! a conversation's previous request changes what the proxy sends, and a
//! retry of a request, or the same request reaching another replica, must
//! be sent alike (a different prompt would miss the cache the first attempt
//! filled). So the decision is made once, under the row's lock, and
//! recorded as an expiry point: the conversation's message count at the
//! request that found the cache expired. Every later call answers from the
//! recorded points up to its own message count, so a retry gets the first
//! attempt's answer whenever it comes.
//!
//! Who can read what: every row is keyed by tenant, and every statement
//! here is scoped by it; one session id under two tenants is two clocks.
//!
//! Bounded: the sweep deletes a clock whose last request is older than the
//! retention period, with its points (a conversation resumed after that is
//! a new one: its next request records nothing). Without a retention
//! period they are kept, as exchanges are.

use super::StoreError;

/// The session's clock row, `?1` tenant, `?2` session id, if new (`?3`
/// now, `?4` messages): a first request records nothing.
pub const INSERT_CLOCK: &str = "INSERT INTO session_clocks (tenant, session_id, last_at, \
     last_messages) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (tenant, session_id) DO NOTHING";

/// The session's clock: (last_at, last_messages). PostgreSQL appends
/// `FOR UPDATE`.
pub const CLOCK: &str =
    "SELECT last_at, last_messages FROM session_clocks WHERE tenant = ?1 AND session_id = ?2";

/// Moves the clock (`?3` last_at, `?4` last_messages, each already the
/// greater of the row's and the request's).
pub const SET_CLOCK: &str = "UPDATE session_clocks SET last_at = ?3, last_messages = ?4 \
     WHERE tenant = ?1 AND session_id = ?2";

/// Records an expiry point (`?3` messages), once.
pub const INSERT_POINT: &str = "INSERT INTO cache_expiries (tenant, session_id, messages) \
     VALUES (?1, ?2, ?3) ON CONFLICT (tenant, session_id, messages) DO NOTHING";

/// The session's expiry points up to `?3` messages, ascending.
pub const POINTS: &str = "SELECT messages FROM cache_expiries \
     WHERE tenant = ?1 AND session_id = ?2 AND messages <= ?3 ORDER BY messages";

/// Clocks the sweep forgets (last used before `?1`), `?2` at most, with
/// their points. PostgreSQL appends `FOR UPDATE SKIP LOCKED`.
pub const OLD_CLOCKS: &str =
    "SELECT tenant, session_id FROM session_clocks WHERE last_at < ?1 LIMIT ?2";

/// What a call does to a session's existing clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Record the request's message count as an expiry point.
    pub record: bool,
    /// The clock's new row.
    pub last_at: i64,
    pub last_messages: i64,
}

/// The decision for a request of `messages` at `now` on a clock last moved
/// at `last_at` by a request of `last_messages`. Only a request with more
/// messages than any before is a new request of the conversation (fewer or
/// as many: a retry, or a request from before a fork, which the cache state
/// of its first attempt already answered), and only such a request can find
/// the cache expired. `ttl_ms <= 0`: the cache never expires. The clock
/// never moves back (replicas' clocks differ a little).
pub fn decide(last_at: i64, last_messages: i64, now: i64, messages: i64, ttl_ms: i64) -> Decision {
    let record = ttl_ms > 0 && messages > last_messages && now.saturating_sub(last_at) > ttl_ms;
    Decision {
        record,
        last_at: last_at.max(now),
        last_messages: last_messages.max(messages),
    }
}

/// A stored point as a message count (the column holds only what a `u32`
/// put there).
pub fn point(stored: i64) -> Result<u32, StoreError> {
    u32::try_from(stored).map_err(|_| {
        StoreError::Corrupt(format!(
            "prompt-cache expiry point {stored} is not a message count"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_new_request_after_the_ttl_records_a_point() {
        // A new request (more messages) after more than the ttl.
        let d = decide(1_000, 4, 1_000 + 301, 6, 300);
        assert_eq!(
            d,
            Decision {
                record: true,
                last_at: 1_301,
                last_messages: 6
            }
        );
        // Exactly the ttl is not past it.
        assert!(!decide(1_000, 4, 1_300, 6, 300).record);
        // A retry (as many messages), or an older request (fewer), never.
        assert!(!decide(1_000, 6, 9_000, 6, 300).record);
        let older = decide(1_000, 6, 9_000, 2, 300);
        assert!(!older.record);
        assert_eq!((older.last_at, older.last_messages), (9_000, 6));
        // No ttl: never expired, the clock still moves.
        let never = decide(1_000, 4, 9_000, 6, 0);
        assert_eq!(
            (never.record, never.last_at, never.last_messages),
            (false, 9_000, 6)
        );
        assert!(!decide(1_000, 4, 9_000, 6, -1).record);
        // A replica whose clock is behind never moves the clock back.
        let behind = decide(5_000, 4, 4_000, 6, 300);
        assert_eq!((behind.record, behind.last_at), (false, 5_000));
        // Extremes do not overflow.
        assert!(decide(i64::MAX, 0, i64::MIN, 1, 1).last_at == i64::MAX);
        assert!(decide(i64::MIN, 0, i64::MAX, 1, 1).record);
    }

    #[test]
    fn a_stored_point_is_a_message_count_or_corruption() {
        assert_eq!(point(7).ok(), Some(7));
        assert_eq!(point(i64::from(u32::MAX)).ok(), Some(u32::MAX));
        assert!(matches!(point(-1), Err(StoreError::Corrupt(_))));
        assert!(matches!(
            point(i64::from(u32::MAX) + 1),
            Err(StoreError::Corrupt(_))
        ));
    }
}
