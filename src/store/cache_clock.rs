//! Prompt-cache clocks, shared by both backends: the SQL (SQLite's `?N`
//! placeholders; PostgreSQL gets `$N` through
//! [`super::ledger_sql::postgres_sql`]), the decision, and the read fast path.
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
//! Why most calls only read: the call is on the path of every request that
//! carries tool outputs, and a write there queues behind everything else
//! that writes (on SQLite, the one writer thread with its puts and its
//! background indexing). Yet only a request that finds the cache expired
//! records anything; every other call answers from the points already
//! recorded and merely moves the clock. So a call reads the clock and the
//! points on a read connection ([`answer`]); only when the clock looks
//! expired for a new request does it take the atomic write transaction,
//! which decides again under the lock. Otherwise it answers what it read
//! and moves the clock without waiting for the move to land (a "touch",
//! [`TOUCH`]: the later time and the more messages, never a point).
//!
//! Why that is still decided once:
//! - A read can only be older than the truth, and a clock only moves
//!   forward, so an older clock can make a request look expired when it
//!   is not, never the reverse ([`decide`] is monotonic: a later
//!   `last_at` or more `last_messages` never turns "not expired" into
//!   "expired"). A request that looks expired takes the atomic path,
//!   which sees the committed clock and answers the committed decision.
//! - A retry racing the request that found the cache expired either reads
//!   the clock before that decision committed (the clock is then stale,
//!   the retry looks expired too and takes the atomic path, which finds the
//!   decision and its point) or after it (the point is visible, and the
//!   clock it moved says not expired): the point and the clock move commit
//!   together.
//! - A touch never records, so it cannot create a point a request did not
//!   use; it only makes a later request look less expired, which is what
//!   the request it stands for would have done in the atomic path.
//! - This process never reads past its own touches: until a touch lands,
//!   its clock is kept in memory ([`Touches`]) and merged into every read
//!   of its session, and the atomic path waits for it (SQLite's writer runs
//!   jobs in order, so there the touch has landed before the atomic job
//!   runs). Another replica may read a clock without a touch still in
//!   flight, but requests of one conversation come seconds apart (a retry
//!   comes after its first attempt went upstream), longer than a touch
//!   takes to land.
//! - A touch that does not land (the writer's queue full, the database
//!   failing) leaves the clock behind, as a clock move lost in a crash
//!   does: one later request may then find the cache expired when it was
//!   not (one cache write more).
//!
//! Why a point names a message: a conversation's session is derived from
//! its opening, so the branches of a forked conversation (an edited
//! message sent again, a harness running one task several times) share a
//! session and its clock. A point applies to the requests that continue
//! the request that recorded it, and to no other branch: it is stored with
//! the identity of that request's last message (a hash of its canonical
//! text, which survives a client's re-serialization of it), and a request
//! gets a point only when its own message at that place has the same
//! identity ([`on_branch`]). Branches are told apart as far as that
//! message tells them apart (its tool call ids, its text; two branches
//! that hold the same message there share the point). A point with no
//! identity (none could be taken, or recorded before points had one)
//! applies to every branch. What forks still share is the clock's row: a
//! branch shorter than the longest request of its session never records a
//! point, so it goes as if its cache had not expired (a missed saving,
//! never a changed byte).
//!
//! Who can read what: every row is keyed by tenant, and every statement
//! here is scoped by it; one session id under two tenants is two clocks.
//!
//! Bounded: the sweep deletes a clock whose last request is older than the
//! retention period, with its points (a conversation resumed after that is
//! a new one: its next request records nothing). Without a retention
//! period they are kept, as exchanges are. [`Touches`] holds only touches
//! in flight.

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

/// Records an expiry point (`?3` messages, `?4` the identity of the
/// request's last message), once. Only a request with more messages than
/// any before records one, so no two points of a session share a count.
pub const INSERT_POINT: &str = "INSERT INTO cache_expiries (tenant, session_id, messages, \
     last_message) VALUES (?1, ?2, ?3, ?4) \
     ON CONFLICT (tenant, session_id, messages) DO NOTHING";

/// The session's expiry points up to `?3` messages, ascending: (messages,
/// last_message).
pub const POINTS: &str = "SELECT messages, last_message FROM cache_expiries \
     WHERE tenant = ?1 AND session_id = ?2 AND messages <= ?3 ORDER BY messages";

/// Moves the clock without deciding (`?3` now, `?4` messages), starting it
/// if new: the later time and the more messages, never back. Records no
/// point. SQLite's form (`max`); [`TOUCH_POSTGRES`] is PostgreSQL's.
pub const TOUCH: &str = "INSERT INTO session_clocks (tenant, session_id, last_at, \
     last_messages) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (tenant, session_id) DO UPDATE SET \
     last_at = max(session_clocks.last_at, excluded.last_at), \
     last_messages = max(session_clocks.last_messages, excluded.last_messages)";

/// [`TOUCH`] for PostgreSQL (`GREATEST`; placeholders still `?N`, for
/// [`super::ledger_sql::postgres_sql`]).
pub const TOUCH_POSTGRES: &str = "INSERT INTO session_clocks (tenant, session_id, last_at, \
     last_messages) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (tenant, session_id) DO UPDATE SET \
     last_at = GREATEST(session_clocks.last_at, excluded.last_at), \
     last_messages = GREATEST(session_clocks.last_messages, excluded.last_messages)";

/// PostgreSQL's read of the fast path in one statement (one snapshot):
/// always one row, the clock's (last_at, last_messages) or NULLs, and the
/// points up to `?3`, ascending, as two arrays aggregated in one scan, in
/// one order (messages, last_message).
pub const READ_POSTGRES: &str = "SELECT c.last_at, c.last_messages, \
     COALESCE(p.messages, '{}'), COALESCE(p.last_messages, '{}') \
     FROM (SELECT 1) AS one LEFT JOIN session_clocks c ON c.tenant = ?1 AND c.session_id = ?2 \
     CROSS JOIN (SELECT array_agg(messages ORDER BY messages) AS messages, \
     array_agg(last_message ORDER BY messages) AS last_messages FROM cache_expiries \
     WHERE tenant = ?1 AND session_id = ?2 AND messages <= ?3) AS p";

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

/// A request as its conversation's clock sees it.
#[derive(Clone, Copy)]
pub struct ClockRequest<'a> {
    /// The messages (or items) of its conversation.
    pub messages: u32,
    /// The identity of the last of them ("" when none could be taken),
    /// taken by the store only when the request may record a point: it
    /// reads the whole message, which may be a megabyte of tool output,
    /// and most requests record nothing. (The caller's [`on_branch`] takes
    /// the identity of its message at each point there is: one per pause
    /// longer than the cache's lifetime.)
    pub last_message: &'a (dyn Fn() -> String + Sync),
}

/// A request of a conversation at which the provider's prompt cache had
/// expired: its message count and the identity of its last message (""
/// for every branch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpiryPoint {
    pub messages: u32,
    pub last_message: String,
}

/// A stored point (the count column holds only what a `u32` put there).
pub fn point(messages: i64, last_message: String) -> Result<ExpiryPoint, StoreError> {
    let messages = u32::try_from(messages).map_err(|_| {
        StoreError::Corrupt(format!(
            "prompt-cache expiry point {messages} is not a message count"
        ))
    })?;
    Ok(ExpiryPoint {
        messages,
        last_message,
    })
}

/// The message counts of the points that lie on the request's own branch
/// of its conversation, ascending: a point with an identity is kept when
/// `identity_at(count)` (the identity of the request's message that ends
/// the conversation at `count` messages) is that identity.
pub fn on_branch(
    points: &[ExpiryPoint],
    identity_at: impl Fn(usize) -> Option<String>,
) -> Vec<usize> {
    points
        .iter()
        .filter(|p| {
            p.last_message.is_empty()
                || identity_at(p.messages as usize).as_deref() == Some(p.last_message.as_str())
        })
        .map(|p| p.messages as usize)
        .collect()
}

/// What a read of a session found: its clock (last_at, last_messages), if
/// it has one, and its stored points up to the request's messages,
/// ascending, read in one snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    pub clock: Option<(i64, i64)>,
    pub points: Vec<ExpiryPoint>,
}

/// The fast path's answer: `Some(points)` when the read answers the call
/// (the caller then touches the clock), `None` when the clock looks expired
/// for a new request, so the atomic path must decide. `pending` is this
/// process's clock not yet landed ([`Touches::pending`]), taken before the
/// read; it counts as if it had landed. A session without a clock is a
/// first request: nothing to record.
pub fn answer(
    seen: Seen,
    pending: Option<(i64, i64)>,
    now: i64,
    messages: i64,
    ttl_ms: i64,
) -> Option<Vec<ExpiryPoint>> {
    let clock = match (seen.clock, pending) {
        (Some((at, m)), Some((p_at, p_m))) => Some((at.max(p_at), m.max(p_m))),
        (clock, None) | (None, clock) => clock,
    };
    if let Some((last_at, last_messages)) = clock {
        if decide(last_at, last_messages, now, messages, ttl_ms).record {
            return None;
        }
    }
    Some(seen.points)
}

/// This process's touches not yet landed, per session: the clock each
/// would leave (merged), and how many are in flight. Reads merge it
/// ([`answer`]), so a call never decides on a clock older than what an
/// earlier call of this process left, even when the two come closer
/// together than a touch takes to land; the atomic path waits for it
/// ([`Touches::landed`]). An entry lives while its touches are in flight:
/// each [`Touch`] is dropped once its statement committed or failed, or
/// with the job that was not queued.
#[derive(Clone, Debug, Default)]
pub struct Touches {
    inner: std::sync::Arc<TouchesInner>,
}

#[derive(Debug, Default)]
struct TouchesInner {
    pending: std::sync::Mutex<std::collections::HashMap<(String, String), Pending>>,
    /// Told whenever a session's last touch in flight landed.
    landed: tokio::sync::Notify,
}

#[derive(Debug)]
struct Pending {
    last_at: i64,
    last_messages: i64,
    in_flight: usize,
}

type Key = (String, String);

fn key(tenant: &super::Tenant, session_id: &str) -> Key {
    (tenant.as_str().to_string(), session_id.to_string())
}

impl TouchesInner {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<Key, Pending>> {
        // The map is consistent between statements: a panic elsewhere
        // while holding the lock leaves it usable.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Touches {
    /// Notes a touch of (tenant, session) to `now` and `messages` about to
    /// be sent; it stays pending until the returned [`Touch`] is dropped.
    pub fn begin(
        &self,
        tenant: &super::Tenant,
        session_id: &str,
        now: i64,
        messages: i64,
    ) -> Touch {
        let key = key(tenant, session_id);
        let mut pending = self.inner.lock();
        let entry = pending.entry(key.clone()).or_insert(Pending {
            last_at: now,
            last_messages: messages,
            in_flight: 0,
        });
        entry.last_at = entry.last_at.max(now);
        entry.last_messages = entry.last_messages.max(messages);
        entry.in_flight += 1;
        Touch {
            touches: self.inner.clone(),
            key,
        }
    }

    /// The clock this process's touches in flight on the session would
    /// leave: (last_at, last_messages).
    pub fn pending(&self, tenant: &super::Tenant, session_id: &str) -> Option<(i64, i64)> {
        self.inner
            .lock()
            .get(&key(tenant, session_id))
            .map(|p| (p.last_at, p.last_messages))
    }

    /// Resolves once no touch of this process on the session is in flight.
    pub async fn landed(&self, tenant: &super::Tenant, session_id: &str) {
        let key = key(tenant, session_id);
        loop {
            let notified = self.inner.landed.notified();
            tokio::pin!(notified);
            // Registered before the check, so a landing between the check
            // and the wait still wakes it.
            notified.as_mut().enable();
            if !self.inner.lock().contains_key(&key) {
                return;
            }
            notified.await;
        }
    }
}

/// A touch in flight; dropping it says it landed (or never will).
#[derive(Debug)]
pub struct Touch {
    touches: std::sync::Arc<TouchesInner>,
    key: Key,
}

impl Drop for Touch {
    fn drop(&mut self) {
        let last = {
            let mut pending = self.touches.lock();
            match pending.get_mut(&self.key) {
                Some(p) if p.in_flight > 1 => {
                    p.in_flight -= 1;
                    false
                }
                Some(_) => {
                    pending.remove(&self.key);
                    true
                }
                None => false,
            }
        };
        if last {
            self.touches.landed.notify_waiters();
        }
    }
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

    fn points(counts: &[u32]) -> Vec<ExpiryPoint> {
        counts
            .iter()
            .map(|&messages| ExpiryPoint {
                messages,
                last_message: String::new(),
            })
            .collect()
    }

    fn seen(clock: Option<(i64, i64)>, counts: &[u32]) -> Seen {
        Seen {
            clock,
            points: points(counts),
        }
    }

    #[test]
    fn the_read_answers_unless_the_clock_looks_expired() {
        let ans = |s: Seen, pending, now, messages| answer(s, pending, now, messages, 300);
        // No clock: a first request, answered (its points, if any).
        assert_eq!(ans(seen(None, &[]), None, 9_000, 4), Some(vec![]));
        // Within the ttl, or not a new request: what was read.
        assert_eq!(
            ans(seen(Some((1_000, 4)), &[2]), None, 1_300, 6),
            Some(points(&[2]))
        );
        assert_eq!(
            ans(seen(Some((1_000, 6)), &[2, 6]), None, 9_000, 6),
            Some(points(&[2, 6]))
        );
        // A new request past the ttl: the atomic path decides.
        assert_eq!(ans(seen(Some((1_000, 4)), &[2]), None, 1_301, 6), None);
        // The ttl off: never.
        assert_eq!(
            answer(seen(Some((1_000, 4)), &[]), None, 9_000, 6, 0),
            Some(vec![])
        );
        // A touch in flight counts as landed: a later time or more
        // messages make the request not expired ...
        assert_eq!(
            ans(seen(Some((1_000, 4)), &[]), Some((1_200, 4)), 1_301, 6),
            Some(vec![])
        );
        assert_eq!(
            ans(seen(Some((1_000, 4)), &[]), Some((500, 6)), 1_301, 6),
            Some(vec![])
        );
        // ... an older one changes nothing ...
        assert_eq!(
            ans(seen(Some((1_000, 4)), &[]), Some((900, 3)), 1_301, 6),
            None
        );
        // ... and without a row yet it is the clock.
        assert_eq!(ans(seen(None, &[]), Some((1_000, 4)), 1_301, 6), None);
        assert_eq!(
            ans(seen(None, &[]), Some((1_000, 4)), 1_300, 6),
            Some(vec![])
        );
    }

    /// A fork shares its conversation's clock, not the points recorded on
    /// another branch after it forked.
    #[test]
    fn a_point_applies_to_its_own_branch_only() {
        let at = |messages: u32, last: &str| ExpiryPoint {
            messages,
            last_message: last.to_string(),
        };
        let stored = vec![at(3, "a3"), at(6, "a6"), at(8, ""), at(9, "b9")];
        // Branch a: its own messages at 3 and 6; the point without an
        // identity applies to every branch.
        let branch_a = |count: usize| Some(format!("a{count}"));
        assert_eq!(on_branch(&stored, branch_a), [3, 6, 8]);
        // Branch b forked after message 3: a's first point is its history
        // too (its message 3 is a's), a's second is not.
        let branch_b = |count: usize| {
            Some(if count <= 3 {
                format!("a{count}")
            } else {
                format!("b{count}")
            })
        };
        assert_eq!(on_branch(&stored, branch_b), [3, 8, 9]);
        // A request whose messages have no identity gets only the points
        // that apply to every branch.
        assert_eq!(on_branch(&stored, |_| None), [8]);
    }

    #[test]
    fn a_stored_point_is_a_message_count_or_corruption() {
        assert_eq!(
            point(7, "x".to_string()).ok(),
            Some(ExpiryPoint {
                messages: 7,
                last_message: "x".to_string()
            })
        );
        assert_eq!(
            point(i64::from(u32::MAX), String::new())
                .map(|p| p.messages)
                .ok(),
            Some(u32::MAX)
        );
        assert!(matches!(
            point(-1, String::new()),
            Err(StoreError::Corrupt(_))
        ));
        assert!(matches!(
            point(i64::from(u32::MAX) + 1, String::new()),
            Err(StoreError::Corrupt(_))
        ));
    }

    #[tokio::test]
    async fn touches_stay_pending_until_the_last_one_landed() {
        let touches = Touches::default();
        let alice = super::super::Tenant::anonymous();
        let bob = super::super::Tenant::new("bob").expect("a tenant");
        assert_eq!(touches.pending(&alice, "s"), None);
        let first = touches.begin(&alice, "s", 1_000, 6);
        let second = touches.begin(&alice, "s", 900, 8);
        // Merged: the later time, the more messages; keyed by tenant too.
        assert_eq!(touches.pending(&alice, "s"), Some((1_000, 8)));
        assert_eq!(touches.pending(&bob, "s"), None);
        assert_eq!(touches.pending(&alice, "t"), None);
        // Nothing in flight on another session: no wait.
        touches.landed(&alice, "t").await;
        drop(first);
        assert_eq!(touches.pending(&alice, "s"), Some((1_000, 8)));
        let waiter = {
            let touches = touches.clone();
            let alice = alice.clone();
            tokio::spawn(async move { touches.landed(&alice, "s").await })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(second);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("the wait ends once the last touch landed")
            .expect("the waiter");
        assert_eq!(touches.pending(&alice, "s"), None);
        // A new touch starts from its own clock, not the forgotten one.
        let _third = touches.begin(&alice, "s", 500, 2);
        assert_eq!(touches.pending(&alice, "s"), Some((500, 2)));
    }
}
