//! [`Store`] on the SQLite file, for async (tokio) code, without blocking
//! the runtime: writes go to the writer thread through the bounded job
//! channel and are awaited; reads run on tokio's blocking pool, at most
//! `readers` at a time (a semaphore), so a burst of recall calls queues
//! here instead of filling the blocking pool with threads waiting for a
//! connection.

use super::writer::{Job, Reply};
use super::{
    prepare, reader, text_index, Answer, KeyRecord, NewOutput, OutputMeta, OutputSummary,
    ReadWindow, RefSearch, ResponseId, SearchHit, SqliteStore, StoreError, Stored, SweepReport,
    Tenant,
};
use crate::store::cache_clock::{self, ClockRequest, ExpiryPoint};
#[cfg(any(test, feature = "testing"))]
use crate::store::StoreStats;
use crate::store::{Health, LedgerBatch, Report, ReportQuery, Store};
use rusqlite::Connection;
use std::time::Duration;
use tokio::sync::oneshot;

/// Longest wait for the writer's answer to a health check's probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

impl SqliteStore {
    /// Runs `f` on the blocking pool, bounded by the readers' semaphore.
    async fn blocking<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&SqliteStore) -> Result<T, StoreError> + Send + 'static,
    {
        let _permit = self
            .inner
            .permits
            .acquire()
            .await
            .map_err(|_| StoreError::Closed)?;
        let store = self.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))?
    }

    /// Runs a query on a pooled read connection, off the runtime.
    async fn on_reader<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.blocking(move |s| s.inner.readers.with(f)).await
    }

    /// A job for the writer, and its answer, awaited.
    async fn ask<T: Send>(&self, job: impl FnOnce(Reply<T>) -> Job) -> Result<T, StoreError> {
        let (reply, wait) = oneshot::channel();
        self.jobs()?
            .send(job(reply))
            .await
            .map_err(|_| StoreError::Closed)?;
        wait.await.map_err(|_| StoreError::Closed)?
    }

    /// Queues a clock move for the writer and returns at once; a full or
    /// closed queue drops it (the clock then lags: at worst one cache write
    /// more, `cache_clock.rs`).
    fn touch(&self, tenant: &Tenant, session_id: &str, at: i64, messages: i64) {
        let touch = self.inner.touches.begin(tenant, session_id, at, messages);
        let job = Job::TouchClock {
            tenant: tenant.clone(),
            session_id: session_id.to_string(),
            at,
            messages,
            touch,
        };
        // A job not queued is dropped with its touch, which forgets it.
        if !self.try_job(job) {
            tracing::debug!(
                "the store's writer queue is full; a prompt-cache clock move is dropped"
            );
        }
    }

    /// Indexes what the writer has stored but not yet indexed, so a search
    /// that follows sees it; returns how many chunks this indexed.
    async fn index_now(&self) -> Result<u64, StoreError> {
        self.ask(|reply| Job::FlushIndex { reply }).await
    }
}

#[async_trait::async_trait]
impl Store for SqliteStore {
    fn describe(&self) -> String {
        format!("sqlite {}", self.path().display())
    }

    /// Whether the file can be written: what the writer last learnt, or,
    /// when it learnt nothing for `health_probe_after`, a probe's answer
    /// (`health.rs`). Reads need no check: they work while writes fail.
    async fn health(&self) -> Health {
        let (failure, since) = self.inner.health.state();
        if since < self.config().health_probe_after {
            return failure.map_or(Health::Ok, Health::Degraded);
        }
        match tokio::time::timeout(PROBE_TIMEOUT, self.ask(|reply| Job::Probe { reply })).await {
            Ok(Ok(())) => Health::Ok,
            Ok(Err(e)) => Health::Degraded(format!("a write probe failed: {e}")),
            Err(_) => Health::Degraded(format!(
                "the store's writer did not answer a write probe within {} s",
                PROBE_TIMEOUT.as_secs()
            )),
        }
    }

    /// One transaction through the writer, durable per the store's
    /// `Durability` when it resolves.
    async fn put(
        &self,
        tenant: &Tenant,
        outputs: Vec<NewOutput>,
    ) -> Result<Vec<Stored>, StoreError> {
        let items = prepare::prepare_async(outputs).await?;
        let tenant = tenant.clone();
        self.ask(|reply| Job::Put {
            tenant,
            items,
            reply,
        })
        .await
    }

    /// A negative offset or `limit < -1` is an invalid argument; an offset
    /// past the end gives empty content.
    async fn read(
        &self,
        tenant: &Tenant,
        result_ref: &str,
        offset: i64,
        limit: i64,
    ) -> Result<ReadWindow, StoreError> {
        let (offset, end) = text_index::check_window(offset, limit)?;
        let (tenant, result_ref) = (tenant.clone(), result_ref.to_string());
        self.on_reader(move |c| reader::read(c, &tenant, &result_ref, offset, end, limit))
            .await
    }

    async fn held(&self, tenant: &Tenant, refs: Vec<String>) -> Result<Vec<bool>, StoreError> {
        let tenant = tenant.clone();
        self.on_reader(move |c| reader::held(c, &tenant, &refs))
            .await
    }

    async fn meta(&self, tenant: &Tenant, result_ref: &str) -> Result<OutputMeta, StoreError> {
        let (tenant, result_ref) = (tenant.clone(), result_ref.to_string());
        self.on_reader(move |c| reader::meta(c, &tenant, &result_ref))
            .await
    }

    /// An empty query is an invalid argument.
    async fn search(
        &self,
        tenant: &Tenant,
        result_ref: &str,
        query: &str,
        limit: usize,
        context_chars: usize,
    ) -> Result<RefSearch, StoreError> {
        text_index::check_query(query)?;
        let (tenant, result_ref, query) =
            (tenant.clone(), result_ref.to_string(), query.to_string());
        self.on_reader(move |c| {
            reader::search_ref(c, &tenant, &result_ref, &query, limit, context_chars)
        })
        .await
    }

    /// BM25 over the session's passages (`rank.rs`: a word in another
    /// tenant's outputs is a word nowhere).
    async fn search_session(
        &self,
        tenant: &Tenant,
        session_id: &str,
        query: &str,
        limit: usize,
        context_chars: usize,
    ) -> Result<Vec<SearchHit>, StoreError> {
        // The index fills in the background: what was stored in the last
        // few milliseconds is indexed now, so the search sees it.
        if let Err(e) = self.index_now().await {
            tracing::warn!(error = %e, "flushing the search index failed");
        }
        let (tenant, session_id, query) =
            (tenant.clone(), session_id.to_string(), query.to_string());
        self.on_reader(move |c| {
            reader::search_session(c, &tenant, &session_id, &query, limit, context_chars)
        })
        .await
    }

    async fn list(
        &self,
        tenant: &Tenant,
        session_id: Option<&str>,
        tool_name: Option<&str>,
        limit: usize,
    ) -> Result<Vec<OutputSummary>, StoreError> {
        let tenant = tenant.clone();
        let session_id = session_id.map(str::to_string);
        let tool_name = tool_name.map(str::to_string);
        self.on_reader(move |c| {
            reader::list(
                c,
                &tenant,
                session_id.as_deref(),
                tool_name.as_deref(),
                limit,
            )
        })
        .await
    }

    async fn put_answer(&self, tenant: &Tenant, answer: Answer) -> Result<bool, StoreError> {
        let tenant = tenant.clone();
        self.ask(|reply| Job::PutAnswer {
            tenant,
            answer,
            reply,
        })
        .await
    }

    async fn exchanges(
        &self,
        tenant: &Tenant,
        keys: Vec<String>,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let tenant = tenant.clone();
        self.on_reader(move |c| reader::exchanges(c, &tenant, &keys))
            .await
    }

    async fn response_id(
        &self,
        tenant: &Tenant,
        client_id: &str,
    ) -> Result<Option<ResponseId>, StoreError> {
        let (tenant, client_id) = (tenant.clone(), client_id.to_string());
        self.on_reader(move |c| reader::response_id(c, &tenant, &client_id))
            .await
    }

    #[cfg(any(test, feature = "testing"))]
    async fn flush_index(&self) -> Result<u64, StoreError> {
        self.index_now().await
    }

    async fn sweep(&self) -> Result<SweepReport, StoreError> {
        let now_ms = self.config().clock.now_ms();
        self.blocking(move |s| s.sweep_at(now_ms)).await
    }

    #[cfg(any(test, feature = "testing"))]
    async fn sweep_at(&self, now_ms: i64) -> Result<SweepReport, StoreError> {
        self.blocking(move |s| s.sweep_at(now_ms)).await
    }

    async fn record(&self, batch: LedgerBatch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        self.ask(|reply| Job::Record { batch, reply }).await
    }

    async fn report(
        &self,
        tenant: Option<&Tenant>,
        query: ReportQuery,
    ) -> Result<Report, StoreError> {
        let tenant = tenant.cloned();
        self.on_reader(move |c| reader::report(c, tenant.as_ref(), &query))
            .await
    }

    /// The clock and the points are read on a read connection (beside the
    /// writer, whatever it is busy with); only a request the clock says
    /// found the cache expired waits for the writer, whose decision is
    /// queued after every touch this store queued before, so it sees them.
    /// Any other call answers what it read and queues a touch without
    /// waiting for it (`cache_clock.rs` says why that decides alike).
    async fn cache_expiries(
        &self,
        tenant: &Tenant,
        session_id: &str,
        request: ClockRequest<'_>,
        ttl_ms: i64,
    ) -> Result<Vec<ExpiryPoint>, StoreError> {
        let count = i64::from(request.messages);
        // Before the read: a touch that lands meanwhile is then either
        // merged in here or committed before the read's snapshot.
        let now = self.config().clock.now_ms();
        let pending = self.inner.touches.pending(tenant, session_id);
        let seen = {
            let (tenant, session_id) = (tenant.clone(), session_id.to_string());
            self.on_reader(move |c| reader::cache_clock(c, &tenant, &session_id, count))
                .await?
        };
        if let Some(points) = cache_clock::answer(seen, pending, now, count, ttl_ms) {
            self.touch(tenant, session_id, now, count);
            return Ok(points);
        }
        let (tenant, session_id) = (tenant.clone(), session_id.to_string());
        self.ask(|reply| Job::CacheExpiries {
            tenant,
            session_id,
            messages: request.messages,
            last_message: (request.last_message)(),
            ttl_ms,
            reply,
        })
        .await
    }

    async fn create_key(
        &self,
        name: &str,
        hash: crate::auth::KeyHash,
        created_at: i64,
    ) -> Result<KeyRecord, StoreError> {
        crate::store::keys::check_name(name)?;
        let record = crate::store::keys::new_record(name, hash, created_at);
        self.ask(|reply| Job::CreateKey { record, reply }).await
    }

    /// From a read connection, so it answers while the writer is busy.
    async fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        self.on_reader(reader::keys).await
    }

    async fn revoke_key(&self, name: &str, at: i64) -> Result<bool, StoreError> {
        let name = name.to_string();
        self.ask(|reply| Job::RevokeKey { name, at, reply }).await
    }

    #[cfg(any(test, feature = "testing"))]
    async fn stats(&self) -> Result<StoreStats, StoreError> {
        self.blocking(|s| s.stats()).await
    }
}
