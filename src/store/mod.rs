//! The result store: every externalized original, and the recall
//! operations (read, exact search, ranked session
//! search, list) plus retention, the hidden recall exchanges and the
//! response-id map of the protocol adapters.
//!
//! One interface, two backends: [`Store`] is the trait, [`AsyncResultStore`]
//! the handle the proxy, the operator API and the CLI talk to; behind it is
//! either the embedded SQLite file (`sqlite/`, the default, one machine) or
//! PostgreSQL (`postgres/`, `store.url`, several replicas sharing one
//! store), each implementing [`Store`] in its own folder. Both keep the
//! same semantics, and the store's test suite runs unchanged against each.
//!
//! Shared by both: `types` (the domain types), `error`, `prepare` (what a put
//! derives from an output before writing: hash, ref, chunks), `text` (pure
//! chunking, code-point and query helpers), `cache_clock` (the SQL, the
//! decision and the read fast path of `cache_expiries`).
//!
//! Who can read what: every output, exchange, response id, ledger row and
//! prompt-cache clock belongs to one [`Tenant`], and every query is scoped
//! by it; nothing a query answers depends on another tenant's rows
//! (another tenant's ref reads as not found, and a session search keeps,
//! finds, scores and orders from the tenant's session alone). Client keys
//! (`keys`) belong to no tenant: the operator makes them, every replica
//! reads them, and the store keeps their SHA-256, never the keys. The
//! SQLite file toolstub creates, its `-wal` and `-shm`, are mode 0600
//! (their owner's alone).
//!
//! Architecture invariant: only this module touches a database, and its API
//! speaks domain types (`NewOutput`, `ReadWindow`, `SearchHit`, ...), never
//! rows. It knows nothing of HTTP or of any LLM API.

mod backend;
pub mod cache_clock;
mod error;
mod keys;
mod ledger_sql;
mod postgres;
mod prepare;
mod sqlite;
mod text_index;
mod types;

pub use backend::{AsyncResultStore, Backend, Health, Store};
pub use error::StoreError;
pub use postgres::PostgresOptions;
pub use sqlite::{sqlite_memory_in_use, SCHEMA_VERSION};
pub(crate) use text_index::query_terms;
pub use types::{
    Answer, Exchange, KeyRecord, LedgerBatch, LedgerEntry, Match, NewOutput, OutputMeta,
    OutputSummary, OutputTokens, ReadWindow, RefSearch, Report, ReportQuery, ResponseId, SearchHit,
    StoreStats, Stored, StubFacts, Sums, SweepReport, Tenant, OFFSET_UNIT,
};

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Default of `store.retention_days`.
pub const DEFAULT_RETENTION_DAYS: u32 = 30;
const DAY_MS: i64 = 86_400_000;

/// How hard a put's commit pushes to the disk (`store.durability`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// `synchronous=FULL`: the WAL is fsynced at every commit, so a stored
    /// output survives a process kill, an OS crash and a power loss.
    #[default]
    Full,
    /// `synchronous=NORMAL`: survives a process kill (the WAL is written
    /// before commit returns), but an OS crash or power loss may lose every
    /// commit since the last checkpoint (the writer checkpoints after 25 ms
    /// without a put, or once about 64 MiB went into the WAL). Saves the
    /// fsync of each commit that stores something new (BENCHMARKS.md).
    /// Behind the proxy a lost original comes back with the agent's next
    /// turn that carries it (the memo is empty after a restart, so it is
    /// stored again); a ref already sent is unreadable until then.
    Normal,
}

/// Where "now" comes from (tests move it).
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> i64 + Send + Sync>);

impl Clock {
    /// The system clock, in Unix milliseconds.
    pub fn system() -> Clock {
        Clock(Arc::new(system_now_ms))
    }

    /// Any function returning Unix milliseconds.
    pub fn from_fn(f: impl Fn() -> i64 + Send + Sync + 'static) -> Clock {
        Clock(Arc::new(f))
    }

    pub fn now_ms(&self) -> i64 {
        (self.0)()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Clock")
    }
}

/// The system clock in Unix milliseconds (what [`Clock::system`] reads).
pub fn system_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Store settings (the `[store]` config section plus tuning knobs).
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Outputs older than this many days expire; 0 keeps them forever.
    pub retention_days: u32,
    /// Cap on the UTF-8 bytes of distinct originals; the oldest outputs
    /// expire first when it is exceeded. `None`: no cap.
    pub max_bytes: Option<u64>,
    /// Tombstones of expired outputs are forgotten after this many days
    /// (then the ref reads as not found).
    pub tombstone_days: u32,
    /// How often the background retention sweep runs; `None` disables it
    /// (the CLI, tests; [`Store::sweep`] still works).
    pub sweep_interval: Option<Duration>,
    pub durability: Durability,
    /// Read connections in the pool (and concurrent async reads).
    pub readers: usize,
    /// Capacity of the writer's job queue.
    pub queue: usize,
    /// SQLite: a health check finding nothing written (nor failed) for
    /// this long asks the writer for a small durable write, so `/healthz`
    /// learns that the file can no longer be written (a full disk) or can
    /// again, also while no request writes.
    pub health_probe_after: Duration,
    pub clock: Clock,
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            retention_days: DEFAULT_RETENTION_DAYS,
            max_bytes: None,
            tombstone_days: 365,
            sweep_interval: Some(Duration::from_secs(60)),
            durability: Durability::default(),
            readers: 4,
            queue: 64,
            health_probe_after: Duration::from_secs(5),
            clock: Clock::system(),
        }
    }
}

/// Retention cut-off for `now_ms` (None: keep forever).
/// What a size sweep may drop besides originals: a hidden exchange or a
/// Responses id map, with its bytes and age (both backends).
pub(crate) struct Kept {
    pub kind: KeptKind,
    pub tenant: String,
    /// The exchange's key, or the client's response id.
    pub key: String,
    pub bytes: i64,
    pub created_at: i64,
}

#[derive(Clone, Copy)]
pub(crate) enum KeptKind {
    Exchange,
    ResponseId,
}

impl KeptKind {
    /// Deletes one (`?1` tenant, `?2` key), in SQLite's placeholders.
    pub(crate) fn delete_sql(self) -> &'static str {
        match self {
            KeptKind::Exchange => "DELETE FROM exchanges WHERE tenant = ?1 AND key = ?2",
            KeptKind::ResponseId => "DELETE FROM response_ids WHERE tenant = ?1 AND client_id = ?2",
        }
    }
}

/// What a size sweep drops next: an output (id, original's id) or a kept
/// exchange or id map.
pub(crate) enum Victim {
    Output(i64, i64),
    Kept(Kept),
}

/// Both backends' size-sweep order: the oldest first, whichever kind
/// (what a live conversation needs is the newest), from a batch of each
/// (outputs as (id, original's id, created_at)), oldest first, `batch` at
/// most. A full batch that runs out ends the list: what comes after it may
/// be older than the other kind's next, so the next sweep looks again.
/// Also whether a batch was full.
pub(crate) fn size_victims(
    outputs: Vec<(i64, i64, i64)>,
    kept: Vec<Kept>,
    batch: i64,
) -> (Vec<Victim>, bool) {
    let outputs_full = outputs.len() as i64 == batch;
    let kept_full = kept.len() as i64 == batch;
    let mut victims = Vec::with_capacity(outputs.len() + kept.len());
    let (mut outputs, mut kept) = (outputs.into_iter().peekable(), kept.into_iter().peekable());
    loop {
        let output_first = match (outputs.peek(), kept.peek()) {
            (Some(o), Some(k)) => o.2 <= k.created_at,
            (Some(_), None) if !kept_full => true,
            (None, Some(_)) if !outputs_full => false,
            _ => break,
        };
        let next = if output_first {
            outputs.next().map(|(id, blob, _)| Victim::Output(id, blob))
        } else {
            kept.next().map(Victim::Kept)
        };
        victims.extend(next);
    }
    (victims, outputs_full || kept_full)
}

fn age_cutoff(config: &StoreConfig, now_ms: i64) -> Option<i64> {
    (config.retention_days > 0)
        .then(|| now_ms.saturating_sub(i64::from(config.retention_days) * DAY_MS))
}

/// The `stub_facts` column's value: [`StubFacts`] as JSON, or NULL.
pub(crate) fn stub_facts_json(facts: Option<&StubFacts>) -> Option<String> {
    facts.and_then(|f| serde_json::to_string(f).ok())
}

/// [`StubFacts`] from the `stub_facts` column; `None` for NULL, and for a
/// value this build cannot read (the stub is then reported as unknown).
pub(crate) fn stub_facts_parse(column: Option<&str>) -> Option<StubFacts> {
    column.and_then(|c| serde_json::from_str(c).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(at: i64) -> Kept {
        Kept {
            kind: KeptKind::Exchange,
            tenant: "t".to_string(),
            key: format!("k{at}"),
            bytes: 1,
            created_at: at,
        }
    }

    fn order(victims: &[Victim]) -> Vec<String> {
        victims
            .iter()
            .map(|v| match v {
                Victim::Output(id, _) => format!("o{id}"),
                Victim::Kept(k) => k.key.clone(),
            })
            .collect()
    }

    #[test]
    fn the_size_sweep_takes_the_oldest_first_and_stops_where_a_full_batch_ends() {
        let (v, full) = size_victims(vec![(1, 1, 10), (2, 2, 30)], vec![kept(20)], 5);
        assert_eq!(order(&v), ["o1", "k20", "o2"]);
        assert!(!full);
        // The outputs' batch is full and runs out first: the newer exchange
        // waits for the next sweep.
        let (v, full) = size_victims(vec![(1, 1, 10), (2, 2, 30)], vec![kept(40)], 2);
        assert_eq!(order(&v), ["o1", "o2"]);
        assert!(full);
    }
}
