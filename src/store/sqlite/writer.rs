//! The writer thread: the only connection that writes. It takes jobs from a
//! bounded channel and
//! - commits puts, several queued requests per transaction (group commit),
//!   each request inside its own savepoint so one bad request cannot undo
//!   another's outputs; a caller hears back only after the commit;
//! - once puts pause (25 ms without one, or at once when 32 MiB wait),
//!   indexes stored chunks into FTS5 in small batches, then checkpoints
//!   (derived data: it may lag and is rebuilt from `chunks` after a crash,
//!   so it never sits on the put path; searches flush it first);
//! - runs retention sweeps in bounded batches;
//! - decides and records prompt-cache expiries (`cache_clock.rs`), one
//!   session's read, decision and write in one transaction, and moves
//!   prompt-cache clocks nobody waits for (touches; jobs run in the order
//!   they were queued, so a decision queued after a touch sees it);
//! - records and revokes client keys (committed at `synchronous=FULL`
//!   whatever `store.durability` says: a revocation must survive a power
//!   loss);
//! - notes whether its commits succeed, for `/healthz` (`health.rs`), and
//!   runs the write probe a health check asks for.

use super::error::SqlContext;
use super::health::WriteHealth;
use super::prepare::Prepared;
use super::text_index::CHUNK_BITS;
use super::{
    age_cutoff, Answer, KeyRecord, StoreConfig, StoreError, Stored, SweepReport, Tenant, DAY_MS,
};
use crate::store::cache_clock::ExpiryPoint;
use crate::store::{size_victims, Kept, KeptKind, Victim};
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, oneshot};

/// Puts gathered into one transaction at most.
const GROUP_COMMIT_JOBS: usize = 32;
/// Most chunks indexed per background transaction.
const INDEX_BATCH: i64 = 32;
/// A background index transaction stops after this long (at least one
/// chunk), so a put arriving meanwhile waits at most about this much.
const INDEX_SLICE: std::time::Duration = std::time::Duration::from_millis(2);
/// A sweep stops deleting after this long (at least one output) and says
/// more is left: deleting an output deletes its chunks from the search
/// index, which is slow (a soak's sweep of 256 outputs held the writer
/// 0.3-2.3 s, and every put behind it waited), so puts wait at most about
/// this much between sweeps.
const SWEEP_SLICE: std::time::Duration = std::time::Duration::from_millis(50);
/// Background work (indexing, checkpoints) starts once no put came for this
/// long: a put arriving during an index batch waits for its commit, so
/// puts in a burst (an agent's turn) go first and indexing fills the gaps.
const QUIET: std::time::Duration = std::time::Duration::from_millis(25);
/// Index at once, quiet or not, when this much text waits for the index, so
/// that steady traffic cannot grow the backlog without bound (a ranked
/// search flushes the backlog first: 32 MiB is about two seconds of
/// indexing; 8 MiB made back-to-back 1 MB puts wait behind index batches).
const INDEX_BACKLOG_BYTES: u64 = 32 << 20;
/// Outputs expired per sweep transaction.
const SWEEP_BATCH: i64 = 256;
/// Checkpoint even when busy once about this much went into the WAL.
const WAL_FORCE_BYTES: u64 = 64 << 20;
/// Pages given back to the file system per sweep.
const VACUUM_PAGES: i64 = 4096;

pub(crate) type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

pub(crate) enum Job {
    Put {
        tenant: Tenant,
        items: Vec<Prepared>,
        reply: Reply<Vec<Stored>>,
    },
    FlushIndex {
        reply: Reply<u64>,
    },
    PutAnswer {
        tenant: Tenant,
        answer: Answer,
        reply: Reply<bool>,
    },
    Sweep {
        now_ms: i64,
        reply: Reply<SweepReport>,
    },
    Record {
        batch: crate::store::LedgerBatch,
        reply: Reply<()>,
    },
    CreateKey {
        record: KeyRecord,
        reply: Reply<KeyRecord>,
    },
    RevokeKey {
        name: String,
        at: i64,
        reply: Reply<bool>,
    },
    CacheExpiries {
        tenant: Tenant,
        session_id: String,
        messages: u32,
        last_message: String,
        ttl_ms: i64,
        reply: Reply<Vec<ExpiryPoint>>,
    },
    /// Moves a session's prompt-cache clock ([`crate::store::cache_clock::TOUCH`]);
    /// nobody waits for it. `touch` is dropped once it committed or failed.
    TouchClock {
        tenant: Tenant,
        session_id: String,
        at: i64,
        messages: i64,
        touch: crate::store::cache_clock::Touch,
    },
    /// A small durable write, to learn whether the file can be written.
    Probe {
        reply: Reply<()>,
    },
}

/// Starts the writer thread on `conn`.
pub(crate) fn spawn(
    conn: Connection,
    jobs: mpsc::Receiver<Job>,
    config: StoreConfig,
    health: Arc<WriteHealth>,
) -> Result<std::thread::JoinHandle<()>, StoreError> {
    conn.pragma_update(None, "wal_autocheckpoint", 0)
        .ctx("turning off automatic checkpoints on the writer")?;
    // A WAL that grew under load (checkpoints cannot reset it while readers
    // hold old snapshots) is truncated back to this size when it is next
    // reset, instead of keeping its high-water mark on disk for good.
    conn.pragma_update(None, "journal_size_limit", WAL_FORCE_BYTES as i64)
        .ctx("limiting the size the WAL keeps")?;
    std::thread::Builder::new()
        .name("toolstub-store-writer".to_string())
        .spawn(move || Writer::new(conn, config, health).run(jobs))
        .map_err(|source| StoreError::Io {
            context: "starting the store writer thread".to_string(),
            source,
        })
}

struct Writer {
    conn: Connection,
    config: StoreConfig,
    /// Whether chunks may be waiting for the FTS index.
    index_pending: bool,
    /// The `synchronous` level currently set on the connection.
    synchronous: &'static str,
    /// About how many bytes went into the WAL since the last checkpoint.
    wal_dirty: u64,
    /// About how many bytes of stored text wait for the FTS index.
    unindexed_bytes: u64,
    /// When the last put was committed: background work waits for [`QUIET`].
    last_put: std::time::Instant,
    /// What the last write's outcome says of the file, for `/healthz`.
    health: Arc<WriteHealth>,
}

impl Writer {
    fn new(conn: Connection, config: StoreConfig, health: Arc<WriteHealth>) -> Writer {
        Writer {
            conn,
            config,
            health,
            index_pending: true,
            synchronous: "",
            wal_dirty: 0,
            unindexed_bytes: 0,
            last_put: std::time::Instant::now(),
        }
    }

    fn run(mut self, mut jobs: mpsc::Receiver<Job>) {
        let mut backlog: VecDeque<Job> = VecDeque::new();
        // Only to wait for a job with a deadline; jobs run outside it.
        let timer = match tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
        {
            Ok(timer) => Some(timer),
            Err(e) => {
                tracing::warn!(error = %e, "store writer: no timer; background work runs without waiting for quiet");
                None
            }
        };
        loop {
            let job = match backlog.pop_front() {
                Some(job) => job,
                None => match jobs.try_recv() {
                    Ok(job) => job,
                    Err(TryRecvError::Disconnected) => return,
                    Err(TryRecvError::Empty) => {
                        let background = self.index_pending || self.wal_dirty > 0;
                        let quiet_left = QUIET.saturating_sub(self.last_put.elapsed());
                        let urgent = self.unindexed_bytes > INDEX_BACKLOG_BYTES;
                        if background && (quiet_left.is_zero() || urgent || timer.is_none()) {
                            self.background_step();
                            continue;
                        }
                        if !background {
                            match jobs.blocking_recv() {
                                Some(job) => job,
                                None => return,
                            }
                        } else {
                            // Wait for a job, or for the quiet period to end.
                            let waited = timer.as_ref().map(|t| {
                                // The timer must be created inside the runtime.
                                t.block_on(async {
                                    tokio::time::timeout(quiet_left, jobs.recv()).await
                                })
                            });
                            match waited {
                                Some(Ok(Some(job))) => job,
                                Some(Ok(None)) => return,
                                _ => continue,
                            }
                        }
                    }
                },
            };
            match job {
                Job::Put {
                    tenant,
                    items,
                    reply,
                } => {
                    let mut group = vec![(tenant, items, reply)];
                    while group.len() < GROUP_COMMIT_JOBS {
                        match jobs.try_recv() {
                            Ok(Job::Put {
                                tenant,
                                items,
                                reply,
                            }) => group.push((tenant, items, reply)),
                            Ok(other) => {
                                backlog.push_back(other);
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    self.put_group(group);
                    self.last_put = std::time::Instant::now();
                    if self.wal_dirty > WAL_FORCE_BYTES {
                        self.checkpoint();
                    }
                }
                Job::FlushIndex { reply } => self.write(reply, Writer::flush_index),
                Job::PutAnswer {
                    tenant,
                    answer,
                    reply,
                } => {
                    self.write(reply, |w| w.put_answer(&tenant, &answer));
                    self.last_put = std::time::Instant::now();
                }
                Job::Sweep { now_ms, reply } => self.write(reply, |w| w.sweep(now_ms)),
                Job::Record { batch, reply } => self.write(reply, |w| w.record(&batch)),
                Job::CreateKey { record, reply } => self.write(reply, |w| w.create_key(record)),
                Job::RevokeKey { name, at, reply } => {
                    self.write(reply, |w| w.revoke_key(&name, at))
                }
                Job::CacheExpiries {
                    tenant,
                    session_id,
                    messages,
                    last_message,
                    ttl_ms,
                    reply,
                } => {
                    self.write(reply, |w| {
                        w.cache_expiries(&tenant, &session_id, messages, &last_message, ttl_ms)
                    });
                    // On a request's path, as a put is: background work waits.
                    self.last_put = std::time::Instant::now();
                }
                Job::TouchClock {
                    tenant,
                    session_id,
                    at,
                    messages,
                    touch,
                } => {
                    // No reply and no quiet period: nobody waits for it,
                    // so background work need not make way.
                    let before = self.conn.total_changes();
                    let result = self.touch_clock(&tenant, &session_id, at, messages);
                    self.note(result.as_ref().map(drop), before);
                    if let Err(e) = result {
                        tracing::debug!(error = %e, "moving a prompt-cache clock failed; dropped");
                    }
                    // Committed (or failed): this process's reads stop
                    // merging it in.
                    drop(touch);
                }
                Job::Probe { reply } => self.write(reply, Writer::probe),
            }
        }
    }

    /// Runs a job that writes (or may), notes what its outcome says of
    /// the file, and answers it.
    fn write<T>(
        &mut self,
        reply: Reply<T>,
        job: impl FnOnce(&mut Writer) -> Result<T, StoreError>,
    ) {
        let before = self.conn.total_changes();
        let result = job(self);
        self.note(result.as_ref().map(drop), before);
        let _ = reply.send(result);
    }

    /// Notes a job's outcome for `/healthz`: a failure of the file's, or
    /// a success that changed rows since `before` (the connection's change
    /// count when the job began); a job that changed nothing proves
    /// nothing.
    fn note(&self, result: Result<(), &StoreError>, before: u64) {
        match result {
            Ok(()) if self.conn.total_changes() > before => self.health.wrote(),
            Ok(()) => {}
            Err(e) => self.health.failed(e),
        }
    }

    /// One slice of background work: an index batch while chunks wait for
    /// the index, then a checkpoint.
    fn background_step(&mut self) {
        if self.index_pending {
            // A failure stops background indexing until the next put;
            // `flush_index` reports it.
            let before = self.conn.total_changes();
            let batch = self.index_batch();
            self.note(batch.as_ref().map(drop), before);
            self.index_pending = matches!(batch, Ok(n) if n > 0);
            if !self.index_pending {
                self.unindexed_bytes = 0;
            }
        } else {
            // Indexed: move the WAL into the database now rather than
            // inside some later put's commit.
            self.checkpoint();
        }
    }

    /// A passive checkpoint (never waits for readers). Auto-checkpointing is
    /// off on this connection so commits never pay for one.
    fn checkpoint(&mut self) {
        // A failed checkpoint is retried after the next write; the WAL stays valid.
        let _ = self
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        self.wal_dirty = 0;
    }

    fn set_synchronous(&mut self, level: &'static str) -> Result<(), StoreError> {
        if self.synchronous != level {
            self.conn
                .pragma_update(None, "synchronous", level)
                .ctx("setting the synchronous level")?;
            self.synchronous = level;
        }
        Ok(())
    }

    fn durable_level(&self) -> &'static str {
        match self.config.durability {
            super::Durability::Full => "FULL",
            super::Durability::Normal => "NORMAL",
        }
    }

    fn put_group(&mut self, group: Vec<(Tenant, Vec<Prepared>, Reply<Vec<Stored>>)>) {
        let now = self.config.clock.now_ms();
        let before = self.conn.total_changes();
        let outcome = self.set_synchronous(self.durable_level()).and_then(|()| {
            let mut tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .ctx("starting a put transaction")?;
            let started = std::time::Instant::now();
            let mut results = Vec::with_capacity(group.len());
            for (tenant, items, _) in &group {
                results.push(put_request(&mut tx, tenant, items, now));
            }
            let written = started.elapsed();
            tx.commit().ctx("committing stored outputs")?;
            tracing::debug!(
                requests = group.len(),
                write_us = written.as_micros() as u64,
                commit_us = (started.elapsed() - written).as_micros() as u64,
                "store put committed"
            );
            Ok(results)
        });
        self.wal_dirty += group
            .iter()
            .flat_map(|(_, items, _)| items)
            .map(|i| i.output.text.len() as u64 + 1)
            .sum::<u64>();
        self.note(outcome.as_ref().map(drop), before);
        match outcome {
            Ok(results) => {
                let created: u64 = group
                    .iter()
                    .zip(&results)
                    .filter_map(|((_, items, _), r)| Some(items.iter().zip(r.as_ref().ok()?)))
                    .flatten()
                    .filter(|(_, stored)| stored.created)
                    .map(|(item, _)| item.output.text.len() as u64)
                    .sum();
                if created > 0 {
                    self.unindexed_bytes = self.unindexed_bytes.saturating_add(created);
                    self.index_pending = true;
                }
                for ((_, _, reply), result) in group.into_iter().zip(results) {
                    let _ = reply.send(result);
                }
            }
            Err(e) => {
                // The transaction is rolled back: nobody's outputs are stored.
                let message = e.to_string();
                for (_, _, reply) in group {
                    let _ = reply.send(Err(StoreError::CommitFailed(message.clone())));
                }
            }
        }
    }

    /// Adds ledger rows and sets output token counts, in one commit. The
    /// ledger is accounting, not data a ref needs: it commits at
    /// `synchronous=NORMAL` (a crash may lose the last moments of it).
    fn record(&mut self, batch: &crate::store::LedgerBatch) -> Result<(), StoreError> {
        use crate::store::ledger_sql;
        self.set_synchronous("NORMAL")?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .ctx("starting a ledger write")?;
        {
            let mut insert = tx
                .prepare_cached(ledger_sql::INSERT)
                .ctx("preparing a ledger row")?;
            for (tenant, e) in &batch.entries {
                let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
                insert
                    .execute(params![
                        tenant.as_str(),
                        e.session_id,
                        e.at,
                        e.model,
                        e.tool,
                        e.kind.map(|k| k.as_str()),
                        i64::from(e.first_seen),
                        n(e.requests),
                        n(e.rounds),
                        n(e.outputs),
                        n(e.chars_saved),
                        n(e.tokens_saved),
                        n(e.usage.input),
                        n(e.usage.cache_read),
                        n(e.usage.cache_write),
                        n(e.usage.output),
                        n(e.recall_calls),
                    ])
                    .ctx("adding a ledger row")?;
            }
            let mut set = tx
                .prepare_cached(ledger_sql::SET_TOKENS)
                .ctx("preparing to set token counts")?;
            for (tenant, t) in &batch.tokens {
                set.execute(params![
                    tenant.as_str(),
                    t.result_ref,
                    i64::try_from(t.original_tokens).unwrap_or(i64::MAX),
                    i64::try_from(t.stub_tokens).unwrap_or(i64::MAX),
                ])
                .ctx("setting an output's token counts")?;
            }
        }
        tx.commit().ctx("committing the ledger")
    }

    /// Stores an answer's hidden exchange (unless one is stored under its
    /// key: the first wins, restoration sends what was first sent) and its
    /// response id, in one transaction; `true` if the exchange was new.
    fn put_answer(&mut self, tenant: &Tenant, answer: &Answer) -> Result<bool, StoreError> {
        self.set_synchronous(self.durable_level())?;
        let now = self.config.clock.now_ms();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .ctx("starting to keep an answer")?;
        let mut new = false;
        if let Some(exchange) = &answer.exchange {
            let n = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO exchanges (tenant, key, session_id, replacement, \
                     created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        tenant.as_str(),
                        exchange.key,
                        exchange.session_id,
                        exchange.replacement,
                        now
                    ])
                })
                .ctx("storing a hidden recall exchange")?;
            new = n > 0;
            self.wal_dirty += exchange.replacement.len() as u64;
        }
        if let Some(id) = &answer.response_id {
            tx.prepare_cached(
                "INSERT INTO response_ids (tenant, client_id, upstream_id, output, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (tenant, client_id) DO UPDATE SET \
                 upstream_id = excluded.upstream_id, output = excluded.output",
            )
            .and_then(|mut s| {
                s.execute(params![
                    tenant.as_str(),
                    id.client_id,
                    id.upstream_id,
                    id.output,
                    now
                ])
            })
            .ctx("keeping a response id")?;
            self.wal_dirty += id.output.len() as u64;
        }
        tx.commit().ctx("committing a kept answer")?;
        Ok(new)
    }

    /// Decides whether the prompt cache of (tenant, session) expired
    /// before this request ([`crate::store::cache_clock`]) and answers the
    /// session's expiry points up to `messages`, in one transaction: the
    /// one writer makes the read, the decision and the write one step, so
    /// concurrent calls on one session decide once. Committed at
    /// `synchronous=NORMAL`, as the ledger: it is on the path of every
    /// request that carries tool outputs, and only an OS crash or a power
    /// loss (not a process kill) can lose the last moments of it; a lost
    /// point then makes one later request of its conversation go as if the
    /// cache had not expired (one cache write more), a lost clock move
    /// makes one pause look shorter.
    fn cache_expiries(
        &mut self,
        tenant: &Tenant,
        session_id: &str,
        messages: u32,
        last_message: &str,
        ttl_ms: i64,
    ) -> Result<Vec<ExpiryPoint>, StoreError> {
        use crate::store::cache_clock as clock;
        self.set_synchronous("NORMAL")?;
        let now = self.config.clock.now_ms();
        let messages = i64::from(messages);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .ctx("starting a prompt-cache clock decision")?;
        let key = params![tenant.as_str(), session_id];
        let last: Option<(i64, i64)> = tx
            .prepare_cached(clock::CLOCK)
            .and_then(|mut s| s.query_row(key, |r| Ok((r.get(0)?, r.get(1)?))).optional())
            .ctx("reading a session's prompt-cache clock")?;
        match last {
            None => {
                tx.prepare_cached(clock::INSERT_CLOCK)
                    .and_then(|mut s| {
                        s.execute(params![tenant.as_str(), session_id, now, messages])
                    })
                    .ctx("starting a session's prompt-cache clock")?;
            }
            Some((last_at, last_messages)) => {
                let d = clock::decide(last_at, last_messages, now, messages, ttl_ms);
                if d.record {
                    tx.prepare_cached(clock::INSERT_POINT)
                        .and_then(|mut s| {
                            s.execute(params![tenant.as_str(), session_id, messages, last_message])
                        })
                        .ctx("recording a prompt-cache expiry")?;
                }
                if (d.last_at, d.last_messages) != (last_at, last_messages) {
                    tx.prepare_cached(clock::SET_CLOCK)
                        .and_then(|mut s| {
                            s.execute(params![
                                tenant.as_str(),
                                session_id,
                                d.last_at,
                                d.last_messages
                            ])
                        })
                        .ctx("moving a session's prompt-cache clock")?;
                }
            }
        }
        let points = super::reader::expiry_points(&tx, tenant, session_id, messages)?;
        tx.commit()
            .ctx("committing a prompt-cache clock decision")?;
        self.wal_dirty += 1;
        Ok(points)
    }

    /// Moves a session's prompt-cache clock to `at` and `messages` if they
    /// are later and more, starting it if new; records no point (the fast
    /// path of [`crate::store::AsyncResultStore::cache_expiries`]). One
    /// statement, committed at `synchronous=NORMAL` as the decision is: a
    /// lost move makes one pause look longer, at worst one cache write more.
    fn touch_clock(
        &mut self,
        tenant: &Tenant,
        session_id: &str,
        at: i64,
        messages: i64,
    ) -> Result<(), StoreError> {
        use crate::store::cache_clock as clock;
        self.set_synchronous("NORMAL")?;
        self.conn
            .prepare_cached(clock::TOUCH)
            .and_then(|mut s| s.execute(params![tenant.as_str(), session_id, at, messages]))
            .ctx("moving a session's prompt-cache clock")?;
        self.wal_dirty += 1;
        Ok(())
    }

    /// Records a new active key: refused, with nothing written, when an
    /// active key has its name or its hash was ever recorded. The one
    /// writer makes the check and the insert one step.
    fn create_key(&mut self, record: KeyRecord) -> Result<KeyRecord, StoreError> {
        use crate::store::keys;
        self.set_synchronous("FULL")?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .ctx("starting to record a key")?;
        let exists = |sql: &str, value: &str| -> Result<bool, StoreError> {
            tx.prepare_cached(sql)
                .and_then(|mut s| s.query_row([value], |r| r.get(0)))
                .ctx("looking up a key")
        };
        if exists(keys::ACTIVE_NAMED, &record.name)? {
            return Err(keys::name_taken(&record.name));
        }
        let hash = record.hash.hex();
        if exists(keys::HASH_KNOWN, &hash)? {
            return Err(keys::hash_taken());
        }
        tx.prepare_cached(keys::INSERT)
            .and_then(|mut s| {
                s.execute(params![
                    record.name,
                    hash,
                    record.tenant.as_str(),
                    record.created_at
                ])
            })
            .ctx("recording a key")?;
        tx.commit().ctx("committing a key")?;
        self.wal_dirty += 1;
        Ok(record)
    }

    /// Revokes the active key named `name`; `false` when none is.
    fn revoke_key(&mut self, name: &str, at: i64) -> Result<bool, StoreError> {
        self.set_synchronous("FULL")?;
        let revoked = self
            .conn
            .prepare_cached(crate::store::keys::REVOKE)
            .and_then(|mut s| s.execute(params![name, at]))
            .ctx("revoking a key")?;
        self.wal_dirty += 1;
        Ok(revoked > 0)
    }

    /// Rewrites the probe's one row and commits it at the durability puts
    /// use: what a put needs of the file, at the smallest cost.
    fn probe(&mut self) -> Result<(), StoreError> {
        self.set_synchronous(self.durable_level())?;
        let now = self.config.clock.now_ms();
        self.conn
            .prepare_cached(
                "INSERT INTO write_probe (one, at) VALUES (1, ?1) \
                 ON CONFLICT (one) DO UPDATE SET at = excluded.at",
            )
            .and_then(|mut s| s.execute([now]))
            .ctx("probing whether the store can write")?;
        self.wal_dirty += 1;
        Ok(())
    }

    fn flush_index(&mut self) -> Result<u64, StoreError> {
        let mut total = 0;
        loop {
            let n = self.index_batch()?;
            total += n;
            if n == 0 {
                self.index_pending = false;
                self.unindexed_bytes = 0;
                return Ok(total);
            }
        }
    }

    /// Indexes up to [`INDEX_BATCH`] chunks; returns how many.
    fn index_batch(&mut self) -> Result<u64, StoreError> {
        // The index is derived: losing its last batches on power loss is
        // harmless (they are redone from `chunks.indexed`).
        self.set_synchronous("NORMAL")?;
        let started = std::time::Instant::now();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .ctx("starting an index transaction")?;
        let mut n = 0;
        {
            let mut pending = tx
                .prepare_cached(
                    "SELECT id, text FROM chunks WHERE indexed = 0 ORDER BY id LIMIT ?1",
                )
                .ctx("finding unindexed chunks")?;
            let mut insert = tx
                .prepare_cached("INSERT INTO chunks_fts(rowid, text) VALUES (?1, ?2)")
                .ctx("preparing the FTS insert")?;
            let mut mark = tx
                .prepare_cached("UPDATE chunks SET indexed = 1 WHERE id = ?1")
                .ctx("preparing the indexed mark")?;
            let mut rows = pending
                .query([INDEX_BATCH])
                .ctx("finding unindexed chunks")?;
            while let Some(row) = rows.next().ctx("reading an unindexed chunk")? {
                let id: i64 = row.get(0).ctx("reading a chunk id")?;
                let text =
                    rusqlite::types::ToSqlOutput::Borrowed(row.get_ref(1).ctx("reading a chunk")?);
                insert
                    .execute(params![id, text])
                    .ctx("adding a chunk to the FTS index")?;
                mark.execute([id]).ctx("marking a chunk indexed")?;
                n += 1;
                if started.elapsed() >= INDEX_SLICE {
                    break;
                }
            }
        }
        tx.commit().ctx("committing an index batch")?;
        self.wal_dirty += n;
        Ok(n)
    }

    fn sweep(&mut self, now_ms: i64) -> Result<SweepReport, StoreError> {
        self.set_synchronous(self.durable_level())?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .ctx("starting a retention sweep")?;
        let mut report = SweepReport::default();
        let started = std::time::Instant::now();
        if let Some(cutoff) = age_cutoff(&self.config, now_ms) {
            let gone = tx
                .execute(
                    "DELETE FROM exchanges WHERE (tenant, key) IN (SELECT tenant, key \
                     FROM exchanges WHERE created_at < ?1 LIMIT ?2)",
                    params![cutoff, SWEEP_BATCH],
                )
                .ctx("deleting old hidden exchanges")?;
            report.more |= gone as i64 == SWEEP_BATCH;
            let gone = tx
                .execute(
                    "DELETE FROM response_ids WHERE (tenant, client_id) IN (SELECT tenant, \
                     client_id FROM response_ids WHERE created_at < ?1 LIMIT ?2)",
                    params![cutoff, SWEEP_BATCH],
                )
                .ctx("deleting old response ids")?;
            report.more |= gone as i64 == SWEEP_BATCH;
            let gone = forget_session_clocks(&tx, cutoff)?;
            report.more |= gone as i64 == SWEEP_BATCH;
            let victims = oldest_live(&tx, Some(cutoff), SWEEP_BATCH)?;
            report.more |= victims.len() as i64 == SWEEP_BATCH;
            for (id, blob, _) in victims {
                if report.expired_by_age > 0 && started.elapsed() >= SWEEP_SLICE {
                    report.more = true;
                    break;
                }
                report.freed_bytes += expire(&tx, id, blob, now_ms)?;
                report.expired_by_age += 1;
            }
            use crate::store::ledger_sql;
            let oldest: Option<i64> = tx
                .query_row(ledger_sql::OLDEST_TO_ROLL_UP, [cutoff], |r| r.get(0))
                .ctx("finding ledger rows to sum")?;
            if let Some(oldest) = oldest {
                let (bound, more) = ledger_sql::roll_up_bound(oldest, cutoff);
                tx.execute(ledger_sql::ROLL_UP, [bound, ledger_sql::DAY_MS])
                    .ctx("summing old ledger rows per day")?;
                let gone = tx
                    .execute(ledger_sql::DELETE_ROLLED, [bound])
                    .ctx("deleting summed ledger rows")?;
                report.ledger_rolled_up = gone as u64;
                report.more |= more;
            }
        }
        if let Some(max) = self.config.max_bytes {
            let (detail, more) = sum_detail_over_cap(&tx, max, &mut report)?;
            report.more |= more;
            let total: f64 = tx
                .query_row(
                    "SELECT (SELECT total(byte_len) FROM blobs) \
                     + (SELECT total(length(CAST(replacement AS BLOB))) FROM exchanges) \
                     + (SELECT total(length(CAST(output AS BLOB)) + length(upstream_id)) FROM response_ids)",
                    [],
                    |r| r.get(0),
                )
                .ctx("measuring the stored originals and exchanges")?;
            let total = total as i64 + detail.saturating_mul(crate::store::ledger_sql::ROW_BYTES);
            let mut excess = total - i64::try_from(max).unwrap_or(i64::MAX);
            if excess > 0 {
                let (victims, full) = size_victims(
                    oldest_live(&tx, None, SWEEP_BATCH)?,
                    oldest_kept(&tx, SWEEP_BATCH)?,
                    SWEEP_BATCH,
                );
                for victim in victims {
                    if excess <= 0 {
                        break;
                    }
                    let progress =
                        report.expired_by_age + report.expired_by_size + report.dropped_by_size;
                    if progress > 0 && started.elapsed() >= SWEEP_SLICE {
                        report.more = true;
                        break;
                    }
                    match victim {
                        Victim::Output(id, blob) => {
                            let freed = expire(&tx, id, blob, now_ms)?;
                            excess -= freed as i64;
                            report.freed_bytes += freed;
                            report.expired_by_size += 1;
                        }
                        Victim::Kept(item) => {
                            tx.execute(item.kind.delete_sql(), params![item.tenant, item.key])
                                .ctx("deleting a kept exchange over the size cap")?;
                            excess -= item.bytes;
                            report.freed_bytes += u64::try_from(item.bytes).unwrap_or(0);
                            report.dropped_by_size += 1;
                        }
                    }
                }
                report.more |= full && excess > 0;
            }
        }
        let forget_before = now_ms.saturating_sub(i64::from(self.config.tombstone_days) * DAY_MS);
        let purged = tx
            .execute(
                "DELETE FROM outputs WHERE id IN (SELECT id FROM outputs \
                 WHERE blob_id IS NULL AND expired_at < ?1 LIMIT ?2)",
                params![forget_before, SWEEP_BATCH],
            )
            .ctx("forgetting old tombstones")?;
        report.purged_tombstones = purged as u64;
        report.more |= purged as i64 == SWEEP_BATCH;
        // Tombstones are small but not free: under a size cap, keep at most
        // one per 64 KiB of the cap (at least 10,000), forgetting the oldest
        // first, so a busy store's file stays bounded. A forgotten tombstone
        // reads as "not found" instead of "expired".
        if let Some(max) = self.config.max_bytes {
            let cap = i64::try_from(max / 65_536).unwrap_or(i64::MAX).max(10_000);
            let count: i64 = tx
                .query_row(
                    "SELECT count(*) FROM outputs WHERE blob_id IS NULL",
                    [],
                    |r| r.get(0),
                )
                .ctx("counting tombstones")?;
            if count > cap {
                let purged = tx
                    .execute(
                        "DELETE FROM outputs WHERE id IN (SELECT id FROM outputs \
                         WHERE blob_id IS NULL ORDER BY expired_at, id LIMIT ?1)",
                        params![(count - cap).min(SWEEP_BATCH)],
                    )
                    .ctx("forgetting tombstones over the cap")?;
                report.purged_tombstones += purged as u64;
                report.more |= count - cap > SWEEP_BATCH;
            }
        }
        tx.commit().ctx("committing a retention sweep")?;
        self.wal_dirty += 1;
        if report.freed_bytes > 0 {
            // Give freed pages back to the file system, a bounded amount at a time.
            self.conn
                .execute_batch(&format!("PRAGMA incremental_vacuum({VACUUM_PAGES})"))
                .ctx("returning free pages")?;
        }
        Ok(report)
    }
}

/// Keeps the ledger's rows as the proxy wrote them under their share of
/// `max_bytes` ([`crate::store::ledger_sql::detail_cap`]), summing the oldest
/// per hour; returns how many are left (up to the cap) and whether more
/// are to sum.
fn sum_detail_over_cap(
    tx: &Transaction<'_>,
    max_bytes: u64,
    report: &mut SweepReport,
) -> Result<(i64, bool), StoreError> {
    use crate::store::ledger_sql;
    let cap = ledger_sql::detail_cap(max_bytes);
    let count: i64 = tx
        .query_row(
            ledger_sql::COUNT_DETAIL,
            [cap.saturating_add(ledger_sql::SIZE_ROLL_UP_BATCH)],
            |r| r.get(0),
        )
        .ctx("counting the ledger's rows")?;
    let (n, more) = ledger_sql::detail_to_sum(count, cap);
    if n == 0 {
        return Ok((count, false));
    }
    let bound: Option<i64> = tx
        .query_row(ledger_sql::NTH_OLDEST_DETAIL, [n], |r| r.get(0))
        .optional()
        .ctx("finding the ledger rows over the cap")?;
    let Some(bound) = bound else {
        return Ok((count, false));
    };
    tx.execute(ledger_sql::ROLL_UP, [bound, ledger_sql::HOUR_MS])
        .ctx("summing the oldest ledger rows per hour")?;
    let gone = tx
        .execute(ledger_sql::DELETE_ROLLED, [bound])
        .ctx("deleting summed ledger rows")?;
    report.ledger_rolled_up += gone as u64;
    Ok((count - gone as i64, more && gone > 0))
}

/// Deletes up to [`SWEEP_BATCH`] session clocks last used before `cutoff`,
/// and their expiry points (a conversation resumed after that starts a new
/// clock, as a first request); returns how many clocks.
fn forget_session_clocks(tx: &Transaction<'_>, cutoff: i64) -> Result<usize, StoreError> {
    use crate::store::cache_clock as clock;
    let old: Vec<(String, String)> = {
        let mut stmt = tx
            .prepare_cached(clock::OLD_CLOCKS)
            .ctx("preparing the session clock scan")?;
        let rows = stmt
            .query_map(params![cutoff, SWEEP_BATCH], |r| Ok((r.get(0)?, r.get(1)?)))
            .ctx("finding old session clocks")?;
        rows.collect::<Result<_, _>>()
            .ctx("reading old session clocks")?
    };
    let mut points = tx
        .prepare_cached("DELETE FROM cache_expiries WHERE tenant = ?1 AND session_id = ?2")
        .ctx("preparing to delete prompt-cache expiries")?;
    let mut clocks = tx
        .prepare_cached("DELETE FROM session_clocks WHERE tenant = ?1 AND session_id = ?2")
        .ctx("preparing to delete session clocks")?;
    for (tenant, session_id) in &old {
        points
            .execute(params![tenant, session_id])
            .ctx("deleting an old session's prompt-cache expiries")?;
        clocks
            .execute(params![tenant, session_id])
            .ctx("deleting an old session clock")?;
    }
    Ok(old.len())
}

/// One request's outputs, inside a savepoint of the group transaction.
fn put_request(
    tx: &mut Transaction<'_>,
    tenant: &Tenant,
    items: &[Prepared],
    now: i64,
) -> Result<Vec<Stored>, StoreError> {
    let sp = tx.savepoint().ctx("starting a request savepoint")?;
    let mut stored = Vec::with_capacity(items.len());
    for item in items {
        // On error `sp` is dropped and rolls back this request only.
        stored.push(put_item(&sp, tenant, item, now)?);
    }
    sp.commit().ctx("releasing a request savepoint")?;
    Ok(stored)
}

fn put_item(
    conn: &Connection,
    tenant: &Tenant,
    item: &Prepared,
    now: i64,
) -> Result<Stored, StoreError> {
    let existing: Option<(String, Option<i64>)> = conn
        .prepare_cached("SELECT sha256, blob_id FROM outputs WHERE tenant = ?1 AND ref = ?2")
        .and_then(|mut s| {
            s.query_row(params![tenant.as_str(), item.result_ref], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()
        })
        .ctx("looking up an existing output")?;
    let stored = |created| Stored {
        result_ref: item.result_ref.clone(),
        sha256: item.sha256.clone(),
        original_chars: item.chars,
        created,
    };
    let tombstone = match existing {
        Some((sha, Some(_))) if sha == item.sha256 => return Ok(stored(false)),
        Some((sha, Some(_))) => {
            return Err(StoreError::RefConflict {
                result_ref: item.result_ref.clone(),
                existing: sha,
                new: item.sha256.clone(),
            })
        }
        Some((_, None)) => true,
        None => false,
    };
    let blob_id = ensure_blob(conn, item, now)?;
    let o = &item.output;
    let values = params![
        tenant.as_str(),
        item.result_ref,
        o.session_id,
        o.tool_call_id,
        o.tool_name,
        now,
        item.chars as i64,
        i64::try_from(o.preview_chars).unwrap_or(i64::MAX),
        item.sha256,
        o.mime_type,
        o.synopsis.kind.as_str(),
        item.synopsis_json,
        blob_id,
        crate::store::stub_facts_json(o.stub.as_ref()),
    ];
    let sql = if tombstone {
        "UPDATE outputs SET session_id = ?3, tool_call_id = ?4, tool_name = ?5, created_at = ?6, \
         original_chars = ?7, preview_chars = ?8, sha256 = ?9, mime_type = ?10, \
         synopsis_kind = ?11, synopsis = ?12, blob_id = ?13, stub_facts = ?14, expired_at = NULL \
         WHERE tenant = ?1 AND ref = ?2"
    } else {
        "INSERT INTO outputs (tenant, ref, session_id, tool_call_id, tool_name, created_at, \
         original_chars, preview_chars, sha256, mime_type, synopsis_kind, synopsis, blob_id, \
         stub_facts) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
    };
    conn.prepare_cached(sql)
        .and_then(|mut s| s.execute(values))
        .ctx("recording an output")?;
    Ok(stored(true))
}

/// The id of the blob holding `item`'s text, storing it if new.
fn ensure_blob(conn: &Connection, item: &Prepared, now: i64) -> Result<i64, StoreError> {
    let found: Option<i64> = conn
        .prepare_cached("SELECT id FROM blobs WHERE sha256 = ?1")
        .and_then(|mut s| s.query_row([&item.sha256], |r| r.get(0)).optional())
        .ctx("looking up an original by hash")?;
    if let Some(id) = found {
        return Ok(id);
    }
    let text = &item.output.text;
    conn.prepare_cached(
        "INSERT INTO blobs (sha256, byte_len, char_len, chunk_count, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .and_then(|mut s| {
        s.execute(params![
            item.sha256,
            text.len() as i64,
            item.chars as i64,
            item.chunks.len() as i64,
            now
        ])
    })
    .ctx("storing an original")?;
    let blob_id = conn.last_insert_rowid();
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO chunks (id, blob_id, start_char, text) VALUES (?1, ?2, ?3, ?4)",
        )
        .ctx("preparing the chunk insert")?;
    for (seq, &(start_char, from, to)) in item.chunks.iter().enumerate() {
        let id = (blob_id << CHUNK_BITS) | seq as i64;
        insert
            .execute(params![id, blob_id, start_char as i64, &text[from..to]])
            .ctx("storing a chunk of an original")?;
    }
    Ok(blob_id)
}

/// The oldest live outputs (created before `cutoff`, if given).
fn oldest_live(
    tx: &Transaction<'_>,
    cutoff: Option<i64>,
    limit: i64,
) -> Result<Vec<(i64, i64, i64)>, StoreError> {
    let mut stmt = tx
        .prepare_cached(
            "SELECT id, blob_id, created_at FROM outputs WHERE blob_id IS NOT NULL \
             AND created_at < ?1 ORDER BY created_at, id LIMIT ?2",
        )
        .ctx("preparing the retention scan")?;
    let rows = stmt
        .query_map(params![cutoff.unwrap_or(i64::MAX), limit], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .ctx("finding outputs to expire")?;
    rows.collect::<Result<_, _>>()
        .ctx("reading outputs to expire")
}

/// The oldest hidden exchanges and Responses id maps, oldest first.
fn oldest_kept(tx: &Transaction<'_>, limit: i64) -> Result<Vec<Kept>, StoreError> {
    let mut stmt = tx
        .prepare_cached(
            "SELECT 0, tenant, key, length(CAST(replacement AS BLOB)), created_at FROM \
             (SELECT * FROM exchanges ORDER BY created_at LIMIT ?1) \
             UNION ALL SELECT 1, tenant, client_id, \
             length(CAST(output AS BLOB)) + length(upstream_id), created_at FROM \
             (SELECT * FROM response_ids ORDER BY created_at LIMIT ?1) \
             ORDER BY 5 LIMIT ?1",
        )
        .ctx("preparing the exchange scan")?;
    let rows = stmt
        .query_map([limit], |r| {
            Ok(Kept {
                kind: if r.get::<_, i64>(0)? == 0 {
                    KeptKind::Exchange
                } else {
                    KeptKind::ResponseId
                },
                tenant: r.get(1)?,
                key: r.get(2)?,
                bytes: r.get(3)?,
                created_at: r.get(4)?,
            })
        })
        .ctx("finding exchanges to drop")?;
    rows.collect::<Result<_, _>>()
        .ctx("reading exchanges to drop")
}

/// Turns an output into a tombstone and deletes its original if no other
/// output uses it. Returns the bytes freed.
fn expire(tx: &Transaction<'_>, id: i64, blob_id: i64, now: i64) -> Result<u64, StoreError> {
    tx.prepare_cached(
        "UPDATE outputs SET blob_id = NULL, expired_at = ?2, synopsis = '' WHERE id = ?1",
    )
    .and_then(|mut s| s.execute(params![id, now]))
    .ctx("expiring an output")?;
    let in_use: bool = tx
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM outputs WHERE blob_id = ?1)")
        .and_then(|mut s| s.query_row([blob_id], |r| r.get(0)))
        .ctx("checking whether an original is still used")?;
    if in_use {
        return Ok(0);
    }
    let bytes: i64 = tx
        .prepare_cached("SELECT byte_len FROM blobs WHERE id = ?1")
        .and_then(|mut s| s.query_row([blob_id], |r| r.get(0)))
        .ctx("reading the size of an original")?;
    tx.prepare_cached(
        "DELETE FROM chunks_fts WHERE rowid IN \
         (SELECT id FROM chunks WHERE blob_id = ?1 AND indexed = 1)",
    )
    .and_then(|mut s| s.execute([blob_id]))
    .ctx("removing an original from the FTS index")?;
    tx.prepare_cached("DELETE FROM chunks WHERE blob_id = ?1")
        .and_then(|mut s| s.execute([blob_id]))
        .ctx("deleting an original's chunks")?;
    tx.prepare_cached("DELETE FROM blobs WHERE id = ?1")
        .and_then(|mut s| s.execute([blob_id]))
        .ctx("deleting an original")?;
    Ok(u64::try_from(bytes).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::prepare::prepare;
    use crate::store::sqlite::{open_connection, schema};
    use crate::store::{Durability, NewOutput};
    use crate::synopsis::{synopsize, Hints};

    fn writer(dir: &std::path::Path, durability: Durability) -> Writer {
        let mut conn = open_connection(&dir.join("w.db")).expect("open");
        conn.pragma_update(None, "journal_mode", "WAL")
            .expect("wal");
        schema::migrate(&mut conn).expect("schema");
        let config = StoreConfig {
            durability,
            sweep_interval: None,
            ..StoreConfig::default()
        };
        Writer::new(conn, config, Arc::new(WriteHealth::new()))
    }

    fn put(writer: &mut Writer, text: &str) -> Result<Vec<Stored>, StoreError> {
        let output = NewOutput {
            session_id: "s".to_string(),
            tool_call_id: Some("call_1".to_string()),
            tool_name: None,
            mime_type: None,
            preview_chars: 100,
            synopsis: synopsize(text, Hints::default()),
            text: text.to_string().into(),
            sha256: None,
            stub: None,
        };
        let (reply, answer) = oneshot::channel();
        let items = prepare(vec![output])?;
        writer.put_group(vec![(Tenant::anonymous(), items, reply)]);
        answer.blocking_recv().expect("a reply")
    }

    /// A put commits at `store.durability`'s level; the background index
    /// batches (derived data) at NORMAL whatever it is.
    #[test]
    fn puts_commit_at_the_configured_durability() {
        for (durability, level) in [(Durability::Full, 2), (Durability::Normal, 1)] {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut writer = writer(dir.path(), durability);
            let stored = put(&mut writer, "some text worth keeping").expect("put");
            assert!(stored[0].created);
            let sync = |w: &Writer| -> i64 {
                w.conn
                    .query_row("PRAGMA synchronous", [], |r| r.get(0))
                    .expect("synchronous")
            };
            assert_eq!(sync(&writer), level, "{durability:?}");
            writer.flush_index().expect("index");
            assert_eq!(sync(&writer), 1, "index batches run at NORMAL");
            put(&mut writer, "another text").expect("put");
            assert_eq!(sync(&writer), level, "{durability:?} again after indexing");
        }
    }
}
