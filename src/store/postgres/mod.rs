//! The shared backend: PostgreSQL (`store.url`), for several replicas behind
//! one load balancer. Same semantics as the SQLite file: any replica reads
//! what another stored, puts of one content from two replicas at once meet
//! on one original, and a put has committed (`synchronous_commit = on`)
//! before its stub goes upstream.
//!
//! Layout: `schema` (versioned migrations under an advisory lock, safe when
//! replicas start together), `write` (puts, kept answers, retention),
//! `index` (the background full-text indexer), `read` (every query).
//!
//! Connections come from a deadpool pool of tokio-postgres clients; a
//! broken connection is dropped and replaced on the next checkout, so the
//! store reconnects by itself when the database comes back. While it is
//! unreachable, operations fail fast with [`StoreError::Unavailable`] (one
//! attempt per [`RETRY_AFTER`]), and the proxy applies `failure_mode`.

mod index;
mod read;
mod schema;
mod write;

use super::backend::{Health, Store};
use super::cache_clock::{self, ClockRequest, ExpiryPoint, Touches};
use super::error::PgContext;
#[cfg(any(test, feature = "testing"))]
use super::StoreStats;
use super::{
    Answer, KeyRecord, NewOutput, OutputMeta, OutputSummary, ReadWindow, RefSearch, ResponseId,
    SearchHit, StoreConfig, StoreError, Stored, SweepReport, Tenant,
};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// After the database was found unreachable, operations fail at once for
/// this long instead of each waiting for a connection attempt.
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// How the PostgreSQL backend connects.
#[derive(Clone)]
pub struct PostgresOptions {
    /// `postgres://user:pass@host:5432/db` (libpq URL or key=value form).
    pub url: String,
    /// Connections in the pool (concurrent store operations of this replica).
    pub pool_size: usize,
    /// Longest wait for a connection (checkout or a new one).
    pub connect_timeout: Duration,
    /// Extra CA certificates (PEM) for TLS to the database, beside
    /// Mozilla's roots: the upstream client's `upstream.ca_file`.
    pub ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password: never printed.
        f.debug_struct("PostgresOptions")
            .field("pool_size", &self.pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

/// A cheap-to-clone handle on the PostgreSQL store.
#[derive(Clone)]
pub(crate) struct PostgresBackend {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    config: StoreConfig,
    /// host:port/db, no credentials.
    described: String,
    /// Set once the schema is at this build's version.
    migrated: tokio::sync::OnceCell<()>,
    /// Until when operations fail fast (the database was unreachable).
    down_until: Mutex<Option<(Instant, String)>>,
    indexer: index::Indexer,
    /// Prompt-cache clock moves this replica started, not yet landed.
    touches: Touches,
    /// Connections clock moves may use at once (half the pool, at least
    /// one), so that a burst of them never takes every connection from the
    /// requests' own store calls.
    touch_permits: Arc<tokio::sync::Semaphore>,
    /// Longest wait for this replica's clock moves before a decision (the
    /// pool's connect timeout: a move waits at most that for a connection).
    touch_wait: Duration,
    /// The background indexer and retention timer (they hold a weak handle
    /// and stop once the store is dropped; aborted then as well).
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(tasks) = self.tasks.get_mut() {
            for task in tasks.drain(..) {
                task.abort();
            }
        }
    }
}

impl std::fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("database", &self.inner.described)
            .finish_non_exhaustive()
    }
}

/// A pooled connection.
pub(crate) type Conn = deadpool_postgres::Object;

/// The rustls client configuration for the database: Mozilla's roots plus
/// the extra CA file, as the upstream client has them.
fn tls(ca_file: Option<&PathBuf>) -> Result<tokio_postgres_rustls::MakeRustlsConnect, StoreError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = ca_file {
        use rustls_pki_types::pem::PemObject;
        let invalid = |e: &dyn std::fmt::Display| {
            StoreError::InvalidArgument(format!("CA file {} for the store: {e}", path.display()))
        };
        let certs =
            rustls_pki_types::CertificateDer::pem_file_iter(path).map_err(|e| invalid(&e))?;
        for cert in certs {
            roots
                .add(cert.map_err(|e| invalid(&e))?)
                .map_err(|e| invalid(&e))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::InvalidArgument(format!("TLS for the store: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// The connection settings of `url`, with what every toolstub connection
/// needs: durable commits whatever the role's default, a name in
/// `pg_stat_activity`, a connect timeout.
fn pg_config(options: &PostgresOptions) -> Result<tokio_postgres::Config, StoreError> {
    let mut pg: tokio_postgres::Config = options.url.parse().map_err(|e| {
        // The parse error never echoes the URL (it may hold a password).
        StoreError::InvalidArgument(format!("store.url is not a PostgreSQL URL: {e}"))
    })?;
    let mut startup = pg.get_options().unwrap_or_default().to_string();
    if !startup.is_empty() {
        startup.push(' ');
    }
    startup.push_str("-c synchronous_commit=on");
    pg.options(&startup);
    if pg.get_application_name().is_none() {
        pg.application_name("toolstub");
    }
    if pg.get_connect_timeout().is_none() {
        pg.connect_timeout(options.connect_timeout);
    }
    Ok(pg)
}

/// An error with its causes ("a: b: c"): the pool's errors say little
/// without them ("error connecting to server: Connection refused").
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let next = c.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = c.source();
    }
    text
}

/// A connection from the pool; failing, the database is unavailable.
async fn checkout(pool: &Pool) -> Result<Conn, StoreError> {
    pool.get()
        .await
        .map_err(|e| StoreError::Unavailable(format!("connecting: {}", chain(&e))))
}

/// host:port/db of a configuration, for logs.
fn describe(pg: &tokio_postgres::Config) -> String {
    let host = match pg.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_string(),
    };
    let port = pg.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}/{}", pg.get_dbname().unwrap_or(""))
}

impl Inner {
    /// A connection to a database whose schema is current. Fails fast while
    /// the database was recently found unreachable.
    async fn conn(&self) -> Result<Conn, StoreError> {
        if let Ok(down) = self.down_until.lock() {
            if let Some((until, why)) = down.as_ref() {
                if Instant::now() < *until {
                    return Err(StoreError::Unavailable(why.clone()));
                }
            }
        }
        let result = async {
            self.migrated
                .get_or_try_init(|| async {
                    // In a task of its own, run to its end whatever becomes
                    // of this call (a health probe's timeout, a client gone):
                    // a migration dropped between its lock and its unlock,
                    // or its BEGIN and COMMIT, would leave the lock held
                    // (every replica started later waiting for good) or a
                    // transaction open on a pooled connection.
                    let pool = self.pool.clone();
                    tokio::spawn(async move { schema::migrate(&checkout(&pool).await?).await })
                        .await
                        .map_err(|e| StoreError::Unavailable(format!("migrating: {e}")))?
                })
                .await?;
            checkout(&self.pool).await
        }
        .await;
        self.note(result)
    }

    /// Remembers an unreachable database (so the next calls fail fast) or
    /// a reachable one.
    fn note<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Ok(mut down) = self.down_until.lock() {
            match &result {
                Err(StoreError::Unavailable(why)) => {
                    *down = Some((Instant::now() + RETRY_AFTER, why.clone()));
                }
                Ok(_) => *down = None,
                Err(_) => {}
            }
        }
        result
    }
}

impl PostgresBackend {
    /// Builds the pool and tries to migrate; an unreachable database is
    /// not an error here (the store starts degraded). A malformed URL is.
    pub async fn open(
        options: PostgresOptions,
        config: StoreConfig,
    ) -> Result<PostgresBackend, StoreError> {
        if options.pool_size == 0 {
            return Err(StoreError::InvalidArgument(
                "store.pool_size must be at least 1".to_string(),
            ));
        }
        let pg = pg_config(&options)?;
        let described = describe(&pg);
        let manager = Manager::from_config(
            pg,
            tls(options.ca_file.as_ref())?,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(options.connect_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|e| StoreError::InvalidArgument(format!("store pool: {e}")))?;
        let sweep_every = config.sweep_interval;
        let inner = Arc::new(Inner {
            pool,
            config,
            described,
            migrated: tokio::sync::OnceCell::new(),
            down_until: Mutex::new(None),
            indexer: index::Indexer::new(),
            touches: Touches::default(),
            touch_permits: Arc::new(tokio::sync::Semaphore::new(options.pool_size.div_ceil(2))),
            touch_wait: options.connect_timeout,
            tasks: Mutex::new(Vec::new()),
        });
        let mut tasks = vec![index::spawn(Arc::downgrade(&inner))];
        if let Some(every) = sweep_every {
            tasks.push(write::spawn_retention(Arc::downgrade(&inner), every));
        }
        if let Ok(mut slot) = inner.tasks.lock() {
            *slot = tasks;
        }
        let backend = PostgresBackend { inner };
        match backend.inner.conn().await {
            Ok(conn) => {
                tracing::info!(database = %backend.inner.described, "store: PostgreSQL ready");
                warn_of_search_settings(&conn).await;
            }
            Err(e) => {
                // A wrong password or a schema too new will not heal by itself.
                if matches!(e, StoreError::SchemaTooNew { .. }) {
                    return Err(e);
                }
                tracing::warn!(database = %backend.inner.described, error = %e, "store: PostgreSQL not reachable yet; starting degraded");
            }
        }
        Ok(backend)
    }

    /// Moves the clock in a task of its own; a failure is logged (debug)
    /// and dropped (the clock then lags: at worst one cache write more).
    fn touch(&self, tenant: &Tenant, session_id: &str, at: i64, messages: i64) {
        let touch = self.inner.touches.begin(tenant, session_id, at, messages);
        let inner = self.inner.clone();
        let (tenant, session_id) = (tenant.clone(), session_id.to_string());
        tokio::spawn(async move {
            let result = async {
                let _permit = inner
                    .touch_permits
                    .acquire()
                    .await
                    .map_err(|_| StoreError::Closed)?;
                let conn = inner.conn().await?;
                inner.note(write::touch_clock(&conn, &tenant, &session_id, at, messages).await)
            }
            .await;
            if let Err(e) = result {
                tracing::debug!(error = %e, "moving a prompt-cache clock failed; dropped");
            }
            // Committed (or failed): reads stop merging it in.
            drop(touch);
        });
    }
}

/// Says at start what makes PostgreSQL's ranked search find less than
/// SQLite's: a C or POSIX character type (its word pattern then takes
/// only ASCII letters for letters: `東京` is never indexed, `café` is
/// `caf`), and no `unaccent` (diacritics not folded: `CAFE` does not find
/// `café`). Searches still answer; the operator is told why they miss.
async fn warn_of_search_settings(conn: &Conn) {
    let one = |sql: &'static str| async move {
        let row = conn.query_one(sql, &[]).await.ok()?;
        row.try_get::<_, String>(0).ok()
    };
    let ctype = one("SELECT current_setting('lc_ctype')").await;
    // PostgreSQL 15 on: a database whose locale is ICU's or the builtin
    // one classifies Unicode letters whatever `lc_ctype` says. Before 15
    // the column is missing, and libc decides.
    let provider =
        one("SELECT datlocprovider::text FROM pg_database WHERE datname = current_database()")
            .await;
    if let Some(ctype) = ctype.filter(|c| matches!(c.as_str(), "C" | "POSIX")) {
        if provider.as_deref().is_none_or(|p| p == "c") {
            tracing::warn!(lc_ctype = %ctype, "store: the database's character type is {ctype}: ranked search indexes ASCII letters only (create the database with a UTF-8 locale, e.g. C.UTF-8)");
        }
    }
    let unaccent = one("SELECT extname::text FROM pg_extension WHERE extname = 'unaccent'").await;
    if unaccent.is_none() {
        tracing::warn!("store: the unaccent extension is not installed: ranked search does not fold diacritics (CREATE EXTENSION unaccent as a superuser)");
    }
}

#[async_trait::async_trait]
impl Store for PostgresBackend {
    fn describe(&self) -> String {
        format!("postgres {}", self.inner.described)
    }

    async fn health(&self) -> Health {
        let probe = async {
            let conn = self.inner.conn().await?;
            conn.simple_query("SELECT 1")
                .await
                .pg("probing the store")?;
            Ok::<_, StoreError>(())
        };
        match tokio::time::timeout(Duration::from_secs(2), probe).await {
            Ok(Ok(())) => Health::Ok,
            Ok(Err(e)) => Health::Degraded(e.to_string()),
            Err(_) => {
                Health::Degraded("the store's database did not answer within 2 s".to_string())
            }
        }
    }

    async fn put(
        &self,
        tenant: &Tenant,
        outputs: Vec<NewOutput>,
    ) -> Result<Vec<Stored>, StoreError> {
        let items = super::prepare::prepare_async(outputs).await?;
        let mut conn = self.inner.conn().await?;
        let now = self.inner.config.clock.now_ms();
        let stored = self
            .inner
            .note(write::put(&mut conn, tenant, &items, now).await)?;
        if stored.iter().any(|s| s.created) {
            self.inner.indexer.wake();
        }
        Ok(stored)
    }

    async fn put_answer(&self, tenant: &Tenant, answer: Answer) -> Result<bool, StoreError> {
        let mut conn = self.inner.conn().await?;
        let now = self.inner.config.clock.now_ms();
        self.inner
            .note(write::put_answer(&mut conn, tenant, &answer, now).await)
    }

    /// [`crate::store::AsyncResultStore::cache_expiries`]: the clock and
    /// the points read in one plain query (no lock, no transaction); only
    /// a request the clock says found the cache expired takes the row's
    /// lock ([`write::cache_expiries`]), after this replica's clock moves
    /// in flight on the session landed. Any other call answers what it
    /// read and moves the clock in a task of its own, without waiting for
    /// it (`cache_clock.rs` says why that decides alike).
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
        let now = self.inner.config.clock.now_ms();
        let pending = self.inner.touches.pending(tenant, session_id);
        let seen = {
            let conn = self.inner.conn().await?;
            self.inner
                .note(read::cache_clock(&conn, tenant, session_id, count).await)?
        };
        if let Some(points) = cache_clock::answer(seen, pending, now, count, ttl_ms) {
            self.touch(tenant, session_id, now, count);
            return Ok(points);
        }
        // Waited for without a connection (the touches need one); bounded,
        // as a touch is: one still not landed then is as if lost.
        let landed = self.inner.touches.landed(tenant, session_id);
        if tokio::time::timeout(self.inner.touch_wait, landed)
            .await
            .is_err()
        {
            tracing::debug!("a prompt-cache clock move did not land in time; deciding without it");
        }
        let point = (request.messages, (request.last_message)());
        let mut conn = self.inner.conn().await?;
        let now = self.inner.config.clock.now_ms();
        self.inner
            .note(write::cache_expiries(&mut conn, tenant, session_id, point, ttl_ms, now).await)
    }

    async fn read(
        &self,
        tenant: &Tenant,
        result_ref: &str,
        offset: i64,
        limit: i64,
    ) -> Result<ReadWindow, StoreError> {
        let (start, end) = super::text_index::check_window(offset, limit)?;
        let conn = self.inner.conn().await?;
        self.inner
            .note(read::read(&conn, tenant, result_ref, start, end, limit).await)
    }

    async fn held(&self, tenant: &Tenant, refs: Vec<String>) -> Result<Vec<bool>, StoreError> {
        let conn = self.inner.conn().await?;
        self.inner.note(read::held(&conn, tenant, &refs).await)
    }

    async fn meta(&self, tenant: &Tenant, result_ref: &str) -> Result<OutputMeta, StoreError> {
        let conn = self.inner.conn().await?;
        self.inner.note(read::meta(&conn, tenant, result_ref).await)
    }

    async fn search(
        &self,
        tenant: &Tenant,
        result_ref: &str,
        query: &str,
        limit: usize,
        context_chars: usize,
    ) -> Result<RefSearch, StoreError> {
        super::text_index::check_query(query)?;
        let conn = self.inner.conn().await?;
        self.inner
            .note(read::search_ref(&conn, tenant, result_ref, query, limit, context_chars).await)
    }

    async fn search_session(
        &self,
        tenant: &Tenant,
        session_id: &str,
        query: &str,
        limit: usize,
        context_chars: usize,
    ) -> Result<Vec<SearchHit>, StoreError> {
        let mut conn = self.inner.conn().await?;
        self.inner.note(
            read::search_session(&mut conn, tenant, session_id, query, limit, context_chars).await,
        )
    }

    async fn list(
        &self,
        tenant: &Tenant,
        session_id: Option<&str>,
        tool_name: Option<&str>,
        limit: usize,
    ) -> Result<Vec<OutputSummary>, StoreError> {
        let conn = self.inner.conn().await?;
        self.inner
            .note(read::list(&conn, tenant, session_id, tool_name, limit).await)
    }

    async fn exchanges(
        &self,
        tenant: &Tenant,
        keys: Vec<String>,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let conn = self.inner.conn().await?;
        self.inner.note(read::exchanges(&conn, tenant, &keys).await)
    }

    async fn response_id(
        &self,
        tenant: &Tenant,
        client_id: &str,
    ) -> Result<Option<ResponseId>, StoreError> {
        let conn = self.inner.conn().await?;
        self.inner
            .note(read::response_id(&conn, tenant, client_id).await)
    }

    #[cfg(any(test, feature = "testing"))]
    async fn flush_index(&self) -> Result<u64, StoreError> {
        let mut conn = self.inner.conn().await?;
        self.inner
            .note(index::flush(&self.inner.indexer, &mut conn).await)
    }

    async fn sweep(&self) -> Result<SweepReport, StoreError> {
        let now_ms = self.inner.config.clock.now_ms();
        let mut conn = self.inner.conn().await?;
        self.inner
            .note(write::sweep_all(&mut conn, &self.inner.config, now_ms).await)
    }

    #[cfg(any(test, feature = "testing"))]
    async fn sweep_at(&self, now_ms: i64) -> Result<SweepReport, StoreError> {
        let mut conn = self.inner.conn().await?;
        self.inner
            .note(write::sweep_all(&mut conn, &self.inner.config, now_ms).await)
    }

    async fn record(&self, batch: crate::store::LedgerBatch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut conn = self.inner.conn().await?;
        self.inner.note(write::record(&mut conn, &batch).await)
    }

    async fn report(
        &self,
        tenant: Option<&Tenant>,
        query: crate::store::ReportQuery,
    ) -> Result<crate::store::Report, StoreError> {
        let mut conn = self.inner.conn().await?;
        self.inner
            .note(read::report(&mut conn, tenant, &query).await)
    }

    async fn create_key(
        &self,
        name: &str,
        hash: crate::auth::KeyHash,
        created_at: i64,
    ) -> Result<KeyRecord, StoreError> {
        super::keys::check_name(name)?;
        let record = super::keys::new_record(name, hash, created_at);
        let conn = self.inner.conn().await?;
        self.inner.note(write::create_key(&conn, record).await)
    }

    async fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        let conn = self.inner.conn().await?;
        self.inner.note(read::keys(&conn).await)
    }

    async fn revoke_key(&self, name: &str, at: i64) -> Result<bool, StoreError> {
        let conn = self.inner.conn().await?;
        self.inner.note(write::revoke_key(&conn, name, at).await)
    }

    #[cfg(any(test, feature = "testing"))]
    async fn stats(&self) -> Result<StoreStats, StoreError> {
        let conn = self.inner.conn().await?;
        self.inner.note(read::stats(&conn).await)
    }
}
