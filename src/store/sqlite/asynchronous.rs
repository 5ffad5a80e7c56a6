//! The SQLite backend for async (tokio) code, without blocking the runtime:
//! puts go to the writer thread through the bounded job channel and are awaited;
//! reads run on tokio's blocking pool, at most `readers` at a time (a
//! semaphore), so a burst of recall calls queues here instead of filling the
//! blocking pool with threads waiting for a connection.

use super::writer::Job;
use super::{
    prepare, Answer, KeyRecord, NewOutput, OutputMeta, OutputSummary, ReadWindow, RefSearch,
    ResponseId, ResultStore, SearchHit, StoreError, Stored, SweepReport, Tenant,
};
use crate::store::cache_clock::{self, ClockRequest, ExpiryPoint, Touches};
#[cfg(any(test, feature = "testing"))]
use crate::store::StoreStats;
use crate::store::{Health, Store};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, Semaphore};

/// Longest wait for the writer's answer to a health check's probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A cheap-to-clone async handle on a [`ResultStore`].
#[derive(Clone, Debug)]
pub(crate) struct SqliteBackend {
    store: ResultStore,
    permits: Arc<Semaphore>,
    /// Prompt-cache clock moves queued for the writer, not yet landed.
    touches: Touches,
}

impl SqliteBackend {
    pub fn new(store: ResultStore) -> SqliteBackend {
        let permits = Arc::new(Semaphore::new(store.readers().size()));
        SqliteBackend {
            store,
            permits,
            touches: Touches::default(),
        }
    }

    /// Runs a read on the blocking pool, bounded by the semaphore.
    async fn blocking<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&ResultStore) -> Result<T, StoreError> + Send + 'static,
    {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| StoreError::Closed)?;
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))?
    }

    /// A job for the writer, and its answer, awaited.
    async fn ask<T>(
        &self,
        job: impl FnOnce(super::writer::Reply<T>) -> Job,
    ) -> Result<T, StoreError> {
        let (reply, wait) = oneshot::channel();
        self.store
            .job_sender()?
            .send(job(reply))
            .await
            .map_err(|_| StoreError::Closed)?;
        wait.await.map_err(|_| StoreError::Closed)?
    }

    /// Queues a clock move for the writer and returns at once; a full or
    /// closed queue drops it (the clock then lags: at worst one cache write
    /// more, `cache_clock.rs`).
    fn touch(&self, tenant: &Tenant, session_id: &str, at: i64, messages: i64) {
        let touch = self.touches.begin(tenant, session_id, at, messages);
        let job = Job::TouchClock {
            tenant: tenant.clone(),
            session_id: session_id.to_string(),
            at,
            messages,
            touch,
        };
        // A job not queued is dropped with its touch, which forgets it.
        if !self.store.try_job(job) {
            tracing::debug!(
                "the store's writer queue is full; a prompt-cache clock move is dropped"
            );
        }
    }

    /// Indexes what the writer has stored but not yet indexed, so a search
    /// that follows sees it.
    async fn index_now(&self) -> Result<u64, StoreError> {
        let (reply, wait) = oneshot::channel();
        self.store
            .job_sender()?
            .send(Job::FlushIndex { reply })
            .await
            .map_err(|_| StoreError::Closed)?;
        wait.await.map_err(|_| StoreError::Closed)?
    }
}

#[async_trait::async_trait]
impl Store for SqliteBackend {
    fn describe(&self) -> String {
        format!("sqlite {}", self.store.path().display())
    }

    /// [`ResultStore::put`]: resolves once the outputs are committed.
    async fn put(
        &self,
        tenant: &Tenant,
        outputs: Vec<NewOutput>,
    ) -> Result<Vec<Stored>, StoreError> {
        let items = prepare::prepare_async(outputs).await?;
        let (reply, wait) = oneshot::channel();
        self.store
            .job_sender()?
            .send(Job::Put {
                tenant: tenant.clone(),
                items,
                reply,
            })
            .await
            .map_err(|_| StoreError::Closed)?;
        wait.await.map_err(|_| StoreError::Closed)?
    }

    /// [`ResultStore::read`].
    async fn read(
        &self,
        tenant: &Tenant,
        result_ref: &str,
        offset: i64,
        limit: i64,
    ) -> Result<ReadWindow, StoreError> {
        let (tenant, result_ref) = (tenant.clone(), result_ref.to_string());
        self.blocking(move |s| s.read(&tenant, &result_ref, offset, limit))
            .await
    }

    /// [`ResultStore::held`].
    async fn held(&self, tenant: &Tenant, refs: Vec<String>) -> Result<Vec<bool>, StoreError> {
        let tenant = tenant.clone();
        self.blocking(move |s| s.held(&tenant, &refs)).await
    }

    /// [`ResultStore::meta`].
    async fn meta(&self, tenant: &Tenant, result_ref: &str) -> Result<OutputMeta, StoreError> {
        let (tenant, result_ref) = (tenant.clone(), result_ref.to_string());
        self.blocking(move |s| s.meta(&tenant, &result_ref)).await
    }

    /// [`ResultStore::search`].
    async fn search(
        &self,
        tenant: &Tenant,
        result_ref: &str,
        query: &str,
        limit: usize,
        context_chars: usize,
    ) -> Result<RefSearch, StoreError> {
        let (tenant, result_ref, query) =
            (tenant.clone(), result_ref.to_string(), query.to_string());
        self.blocking(move |s| s.search(&tenant, &result_ref, &query, limit, context_chars))
            .await
    }

    /// [`ResultStore::search_session`].
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
        self.blocking(move |s| s.search_session(&tenant, &session_id, &query, limit, context_chars))
            .await
    }

    /// [`ResultStore::list`].
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
        self.blocking(move |s| s.list(&tenant, session_id.as_deref(), tool_name.as_deref(), limit))
            .await
    }

    /// [`ResultStore::put_answer`]: resolves once committed.
    async fn put_answer(&self, tenant: &Tenant, answer: Answer) -> Result<bool, StoreError> {
        let (reply, wait) = oneshot::channel();
        self.store
            .job_sender()?
            .send(Job::PutAnswer {
                tenant: tenant.clone(),
                answer,
                reply,
            })
            .await
            .map_err(|_| StoreError::Closed)?;
        wait.await.map_err(|_| StoreError::Closed)?
    }

    /// [`ResultStore::exchanges`].
    async fn exchanges(
        &self,
        tenant: &Tenant,
        keys: Vec<String>,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let tenant = tenant.clone();
        self.blocking(move |s| s.exchanges(&tenant, &keys)).await
    }

    /// [`ResultStore::response_id`].
    async fn response_id(
        &self,
        tenant: &Tenant,
        client_id: &str,
    ) -> Result<Option<ResponseId>, StoreError> {
        let (tenant, client_id) = (tenant.clone(), client_id.to_string());
        self.blocking(move |s| s.response_id(&tenant, &client_id))
            .await
    }

    /// [`ResultStore::flush_index`], off the runtime.
    #[cfg(any(test, feature = "testing"))]
    async fn flush_index(&self) -> Result<u64, StoreError> {
        self.index_now().await
    }

    /// [`ResultStore::sweep`], off the runtime.
    async fn sweep(&self) -> Result<SweepReport, StoreError> {
        self.blocking(|s| s.sweep()).await
    }

    /// [`ResultStore::sweep_at`], off the runtime.
    #[cfg(any(test, feature = "testing"))]
    async fn sweep_at(&self, now_ms: i64) -> Result<SweepReport, StoreError> {
        self.blocking(move |s| s.sweep_at(now_ms)).await
    }

    /// [`ResultStore::record`]: resolves once committed.
    async fn record(&self, batch: crate::store::LedgerBatch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let (reply, wait) = oneshot::channel();
        self.store
            .job_sender()?
            .send(Job::Record { batch, reply })
            .await
            .map_err(|_| StoreError::Closed)?;
        wait.await.map_err(|_| StoreError::Closed)?
    }

    /// [`ResultStore::report`], off the runtime.
    async fn report(
        &self,
        tenant: Option<&Tenant>,
        query: crate::store::ReportQuery,
    ) -> Result<crate::store::Report, StoreError> {
        let tenant = tenant.cloned();
        self.blocking(move |s| s.report(tenant.as_ref(), &query))
            .await
    }

    /// Whether the file can be written: what the writer last learnt, or,
    /// when it learnt nothing for `health_probe_after`, a probe's answer
    /// (`health.rs`). Reads need no check: they work while writes fail.
    async fn health(&self) -> Health {
        let (failure, since) = self.store.write_health().state();
        if since < self.store.config().health_probe_after {
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

    /// [`crate::store::AsyncResultStore::cache_expiries`]: the clock and
    /// the points read on a read connection (beside the writer, whatever
    /// it is busy with); only a request the clock says found the cache
    /// expired waits for the writer, whose decision
    /// ([`ResultStore::cache_expiries`]) is queued after every touch this
    /// handle queued before, so it sees them. Any other call answers what
    /// it read and queues a touch without waiting for it
    /// (`cache_clock.rs` says why that decides alike).
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
        let now = self.store.config().clock.now_ms();
        let pending = self.touches.pending(tenant, session_id);
        let seen = {
            let (tenant, session_id) = (tenant.clone(), session_id.to_string());
            self.blocking(move |s| s.cache_clock(&tenant, &session_id, count))
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

    /// [`ResultStore::create_key`]: resolves once committed.
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

    /// [`ResultStore::keys`], on a read connection.
    async fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        self.blocking(|s| s.keys()).await
    }

    /// [`ResultStore::revoke_key`]: resolves once committed.
    async fn revoke_key(&self, name: &str, at: i64) -> Result<bool, StoreError> {
        let name = name.to_string();
        self.ask(|reply| Job::RevokeKey { name, at, reply }).await
    }

    /// [`ResultStore::stats`], off the runtime.
    #[cfg(any(test, feature = "testing"))]
    async fn stats(&self) -> Result<StoreStats, StoreError> {
        self.blocking(|s| s.stats()).await
    }
}
