//! The ledger: token accounting, off every request's path.
//!
//! A request hands the ledger what it decided (its externalized outputs,
//! each with its stub, whether the store saw it for the first time) and
//! goes on; the upstream's responses hand it the usage they reported as
//! they pass ([`super::usage_tap`]). One background task turns that into
//! metrics (`toolstub_tokens_saved_total`, `toolstub_upstream_tokens_total`)
//! and ledger rows in the store, written in batches (one commit per
//! [`FLUSH_ROWS`] rows or [`FLUSH_AFTER`]); the token counts of each new
//! output are set on its stored row.
//!
//! Counting: the o200k_base tokens of each original and of its stub are
//! counted as soon as the request has been rewritten, beside the store's
//! write and the upstream's answer, on one thread at the lowest CPU
//! priority (nice 19: on a busy machine the count waits, requests do not). The response's
//! `x-toolstub-saved-tokens` header carries the total when the count is
//! done by the time the response head leaves (an original's count is
//! remembered by digest, so a repeated output costs only its stub's); the
//! response never waits for it. Nor does the ledger task: a turn whose
//! count is not done when it is filed gets its rows at once and its
//! tokens saved in rows of their own when the count lands, so a starved
//! counter never holds up the rows of other requests. What waits for the
//! counter is bounded ([`MAX_BACKLOG`] bytes); past it an output goes
//! uncounted (`toolstub_tokens_uncounted_total`).
//!
//! Nothing here can fail a request: a full queue or a store failure drops
//! the record and counts it (`toolstub_ledger_dropped_total`).

use crate::metrics::Metrics;
use crate::protocol::Protocol;
use crate::store::{AsyncResultStore, LedgerBatch, LedgerEntry, OutputTokens, Tenant};
use crate::synopsis::Kind;
use crate::usage::{Observed, Reading};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::task::JoinSet;

/// Records waiting for the ledger task; past this, new ones are dropped.
const QUEUE: usize = 16_384;
/// How long the ledger task, woken by a first record, lets more gather
/// before it takes them: one wake-up per this much time under load, not
/// one per request.
const GATHER: Duration = Duration::from_millis(20);
/// Rows written per commit at most.
const FLUSH_ROWS: usize = 256;
/// How long rows wait for company before they are written.
const FLUSH_AFTER: Duration = Duration::from_millis(200);
/// Bytes held for the counting thread at most: the texts (a client body
/// whose literals are counted is held whole) and [`ITEM_OVERHEAD`] per
/// output. It bounds what a starved counter can make the proxy hold.
const MAX_BACKLOG: usize = 16 << 20;
/// What one queued output holds besides its texts (its digest, the job,
/// the ledger task's wait for it), rounded up.
const ITEM_OVERHEAD: usize = 512;
/// How long the ledger's flush (shutdown, tests) waits for counts still
/// running.
const COUNTS_WAIT: Duration = Duration::from_secs(5);
/// Unchanged bodies up to this size are read for their session on the
/// ledger task itself.
const INLINE_DERIVE_BYTES: usize = 64 * 1024;
/// Originals whose token counts are remembered (by digest).
const REMEMBERED: usize = 65_536;

/// One client request, as the ledger knows it: its usage and recall calls
/// are filed under the same tenant and session.
pub struct RequestNote {
    tenant: Tenant,
    api: &'static str,
    session: OnceLock<String>,
    at: i64,
}

impl RequestNote {
    pub fn new(tenant: Tenant, api: &'static str, at: i64) -> Arc<RequestNote> {
        Arc::new(RequestNote {
            tenant,
            api,
            session: OnceLock::new(),
            at,
        })
    }

    fn session(&self) -> String {
        self.session.get().cloned().unwrap_or_default()
    }
}

/// Where a request's session comes from.
pub enum SessionOf {
    /// The session and the model the request names.
    Known(String, Option<String>),
    /// Derived from what the rewrite read of a body it left unchanged;
    /// the model when the body names none (the path did).
    Read(crate::rewrite::Read, Option<String>),
    /// Derived in the background from a body the rewrite left unchanged;
    /// the model when the body names none (the path did).
    Derive(&'static dyn Protocol, Bytes, Option<String>),
    /// Not a conversation the proxy read (forwarded unread).
    Unknown,
}

/// Where an output's text is, for counting.
pub enum TextToCount {
    /// Its count is remembered.
    Remembered,
    /// Decoded already, shared with the store's write.
    Owned(Arc<String>),
    /// JSON string literals in the client's body, joined in order.
    Literals(Bytes, Vec<Range<usize>>),
}

/// The bytes the counting thread's queue holds for `items`: each client
/// body once however many literals point into it.
fn held_bytes(items: &[ToCount]) -> usize {
    let mut bodies: Vec<(*const u8, usize)> = Vec::new();
    let mut held = 0;
    for item in items {
        held += ITEM_OVERHEAD + item.stub.len() + item.sha256.len();
        match &item.text {
            TextToCount::Remembered => {}
            TextToCount::Owned(text) => held += text.len(),
            TextToCount::Literals(body, _) => {
                let key = (body.as_ptr(), body.len());
                if !bodies.contains(&key) {
                    bodies.push(key);
                    held += body.len();
                }
            }
        }
    }
    held
}

/// One externalized output, to count.
pub struct ToCount {
    pub sha256: String,
    pub stub: String,
    pub text: TextToCount,
}

/// The counts of one output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counted {
    pub original: u64,
    pub stub: u64,
}

impl Counted {
    pub fn saved(&self) -> u64 {
        self.original.saturating_sub(self.stub)
    }
}

/// Counting in progress; [`Counting::saved_now`] is the header's value.
pub struct Counting {
    counted: tokio::sync::oneshot::Receiver<Vec<Counted>>,
    saved: Arc<OnceLock<u64>>,
}

impl Counting {
    /// Where the tokens saved appear once counted (read it with `get`,
    /// which never waits).
    pub fn probe(&self) -> Arc<OnceLock<u64>> {
        self.saved.clone()
    }
}

/// One externalized output, as the request decided it.
pub struct Tally {
    pub result_ref: Option<String>,
    pub tool: Option<String>,
    pub kind: Kind,
    /// Stored for the first time by this request.
    pub first_seen: bool,
    pub chars_saved: u64,
}

/// What a request hands the ledger.
pub struct Turn {
    pub note: Arc<RequestNote>,
    pub session: SessionOf,
    pub tallies: Vec<Tally>,
    pub counting: Option<Counting>,
}

enum Job {
    Turn(Turn),
    /// A request the proxy forwarded unread or unchanged, with the usage
    /// its response reported: one hand-off per request.
    Unfiled(PendingTurn, Option<Reading>),
    /// A response's usage, read by the ledger task when not yet read.
    Usage(Arc<RequestNote>, Reading),
    Recall(Arc<RequestNote>, u64),
    /// Write what is filed, then say so.
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// A cheap handle on the ledger task (one count to clone).
#[derive(Clone)]
pub struct Ledger(Arc<Handles>);

struct Handles {
    inbox: Arc<Inbox>,
    counter: std::sync::mpsc::Sender<CountJob>,
    /// Bytes of text waiting for the counting thread.
    backlog: Arc<std::sync::atomic::AtomicUsize>,
    metrics: Arc<Metrics>,
    remembered: Arc<Mutex<HashMap<String, u64>>>,
}

impl Drop for Handles {
    /// The last handle gone: the ledger task writes what it has and ends.
    fn drop(&mut self) {
        self.inbox
            .closed
            .store(true, std::sync::atomic::Ordering::Release);
        self.inbox.wake.notify_one();
    }
}

/// Jobs waiting for the ledger task. A hand-off is a push under a lock
/// no one holds for long; only the first job after the task took the
/// last ones wakes it, and it then waits [`GATHER`] before it takes them
/// all, so under load the task runs once per [`GATHER`] rather than once
/// per request (a task wake-up and poll cost more than filing the row).
#[derive(Default)]
struct Inbox {
    jobs: Mutex<Vec<Job>>,
    wake: tokio::sync::Notify,
    closed: std::sync::atomic::AtomicBool,
}

impl Inbox {
    /// Queues `job` unless [`QUEUE`] jobs wait already (`false`).
    fn push(&self, job: Job) -> bool {
        let mut jobs = lock(&self.jobs);
        if jobs.len() >= QUEUE {
            return false;
        }
        jobs.push(job);
        let first = jobs.len() == 1;
        drop(jobs);
        if first {
            self.wake.notify_one();
        }
        true
    }

    /// Swaps the waiting jobs into `into` (which is empty).
    fn take(&self, into: &mut Vec<Job>) {
        std::mem::swap(&mut *lock(&self.jobs), into);
    }
}

/// One request's outputs for the counting thread.
struct CountJob {
    items: Vec<ToCount>,
    bytes: usize,
    saved: Arc<OnceLock<u64>>,
    reply: tokio::sync::oneshot::Sender<Vec<Counted>>,
}

impl Ledger {
    /// Starts the ledger task on the current runtime and the counting
    /// thread. The encoding's tables (~100 ms to load, ~65 MB resident from
    /// then on) load on the counting thread when it first counts: a proxy
    /// that never externalizes never pays for them, and no request waits
    /// for them.
    pub fn start(store: AsyncResultStore, metrics: Arc<Metrics>) -> Ledger {
        let inbox = Arc::new(Inbox::default());
        tokio::spawn(run(inbox.clone(), store, metrics.clone()));
        let remembered = Arc::new(Mutex::new(HashMap::new()));
        let (counter, counts) = std::sync::mpsc::channel::<CountJob>();
        let memory = remembered.clone();
        let backlog = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let waiting = backlog.clone();
        let started = std::thread::Builder::new()
            .name("toolstub-tokens".to_string())
            .spawn(move || {
                lowest_priority();
                for job in counts {
                    let counted: Vec<Counted> = job
                        .items
                        .into_iter()
                        .map(|item| count_one(&memory, item))
                        .collect();
                    let _ = job.saved.set(counted.iter().map(Counted::saved).sum());
                    let _ = job.reply.send(counted);
                    waiting.fetch_sub(job.bytes, std::sync::atomic::Ordering::Relaxed);
                }
            });
        if let Err(e) = started {
            // Counting then never happens: requests flow, the ledger has
            // usage but no saved tokens.
            tracing::error!(error = %e, "cannot start the token counting thread");
        }
        Ledger(Arc::new(Handles {
            inbox,
            counter,
            backlog,
            metrics,
            remembered,
        }))
    }

    /// Hands outputs to the counting thread. It runs at the lowest CPU
    /// priority, so on a busy machine counting waits for requests, never
    /// the other way round.
    /// What waits for it is held up to [`MAX_BACKLOG`] bytes; past that (a
    /// machine too busy to count), the request's outputs go uncounted and
    /// their saving is recorded as zero (`toolstub_tokens_uncounted_total`).
    pub fn count(&self, items: Vec<ToCount>) -> Counting {
        use std::sync::atomic::Ordering;
        let bytes = held_bytes(&items);
        let saved = Arc::new(OnceLock::new());
        let (reply, counted) = tokio::sync::oneshot::channel();
        if self.0.backlog.load(Ordering::Relaxed) + bytes > MAX_BACKLOG {
            // Dropping `reply` tells the ledger task: nothing counted.
            self.0.metrics.tokens_uncounted(items.len() as u64);
            return Counting { counted, saved };
        }
        self.0.backlog.fetch_add(bytes, Ordering::Relaxed);
        let job = CountJob {
            items,
            bytes,
            saved: saved.clone(),
            reply,
        };
        if let Err(unsent) = self.0.counter.send(job) {
            self.0.backlog.fetch_sub(bytes, Ordering::Relaxed);
            self.0.metrics.tokens_uncounted(unsent.0.items.len() as u64);
        }
        Counting { counted, saved }
    }

    /// Whether the count of this original is remembered (then its text is
    /// not needed).
    pub fn remembers(&self, sha256: &str) -> bool {
        lock(&self.0.remembered).contains_key(sha256)
    }

    pub fn turn(&self, turn: Turn) {
        self.submit(Job::Turn(turn));
    }

    /// A request forwarded unread or unchanged: filed with its response's
    /// usage when that response ends ([`Unfiled::report`]), or alone if it
    /// never comes (the upstream failed, the client went away first).
    pub fn unread(
        &self,
        tenant: Tenant,
        api: &'static str,
        at: i64,
        session: SessionOf,
    ) -> Unfiled {
        Unfiled {
            ledger: self.clone(),
            turn: Some(PendingTurn {
                tenant,
                api,
                at,
                session,
            }),
        }
    }

    pub fn usage(&self, note: Arc<RequestNote>, reading: Reading) {
        if !reading.is_empty() {
            self.submit(Job::Usage(note, reading));
        }
    }

    /// Returns once every record sent before it is written (shutdown:
    /// requests have drained; at most a few seconds).
    pub async fn flush(&self) {
        let (done, wait) = tokio::sync::oneshot::channel();
        // Past a full queue: a flush is never dropped.
        lock(&self.0.inbox.jobs).push(Job::Flush(done));
        self.0.inbox.wake.notify_one();
        let _ = tokio::time::timeout(Duration::from_secs(10), wait).await;
    }

    pub fn recall_calls(&self, note: Arc<RequestNote>, calls: u64) {
        if calls > 0 {
            self.submit(Job::Recall(note, calls));
        }
    }

    fn submit(&self, job: Job) {
        if !self.0.inbox.push(job) {
            self.0.metrics.ledger_dropped(1);
        }
    }
}

/// What the ledger files of a request it did not see rewritten.
pub struct PendingTurn {
    tenant: Tenant,
    api: &'static str,
    at: i64,
    session: SessionOf,
}

/// A request forwarded unread or unchanged, not filed yet: its response's
/// usage goes with it, in one hand-off to the ledger task rather than
/// two. Dropped without a report, it is filed alone: every request is
/// counted.
pub struct Unfiled {
    ledger: Ledger,
    turn: Option<PendingTurn>,
}

impl Unfiled {
    /// Files the request with the usage its response reported (if any).
    pub fn report(mut self, reading: Reading) {
        if let Some(turn) = self.turn.take() {
            let usage = (!reading.is_empty()).then_some(reading);
            self.ledger.submit(Job::Unfiled(turn, usage));
        }
    }
}

impl Drop for Unfiled {
    fn drop(&mut self) {
        if let Some(turn) = self.turn.take() {
            self.ledger.submit(Job::Unfiled(turn, None));
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Makes the calling thread the machine's last claim on a CPU (nice 19).
fn lowest_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid takes no arguments and cannot fail; setpriority on
        // the calling thread's id only changes that thread's niceness, and
        // its failure (reported by the return value) is harmless.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            let _ = libc::setpriority(libc::PRIO_PROCESS, tid, 19);
        }
    }
}

fn count_one(remembered: &Mutex<HashMap<String, u64>>, item: ToCount) -> Counted {
    let stub = crate::tokens::count(&item.stub);
    let known = lock(remembered).get(&item.sha256).copied();
    let original = match known {
        Some(n) => n,
        None => {
            let n = match &item.text {
                TextToCount::Remembered => None,
                TextToCount::Owned(text) => Some(crate::tokens::count(text)),
                TextToCount::Literals(body, spans) => {
                    let mut joined = String::new();
                    for span in spans {
                        let decoded = body
                            .get(span.clone())
                            .and_then(|raw| std::str::from_utf8(raw).ok())
                            .and_then(crate::protocol::json_text::decode);
                        if let Some(d) = decoded {
                            joined.push_str(&d);
                        }
                    }
                    Some(crate::tokens::count(&joined))
                }
            };
            match n {
                Some(n) => {
                    let mut map = lock(remembered);
                    if map.len() >= REMEMBERED {
                        map.clear();
                    }
                    map.insert(item.sha256, n);
                    n
                }
                // Forgotten between the request's check and now: the stub
                // alone is known, so nothing is claimed saved.
                None => stub,
            }
        }
    };
    Counted { original, stub }
}

/// The ledger task: takes the jobs that gathered ([`Inbox`]), files
/// them, and writes rows in batches: when [`FLUSH_ROWS`] rows are waiting,
/// or [`FLUSH_AFTER`] after the first of them. Counts that land after
/// their turn was filed come back through `late`.
async fn run(inbox: Arc<Inbox>, store: AsyncResultStore, metrics: Arc<Metrics>) {
    use std::sync::atomic::Ordering;
    let mut batch = LedgerBatch::default();
    let mut jobs = Vec::new();
    let mut late: JoinSet<Late> = JoinSet::new();
    let due = tokio::time::sleep(FLUSH_AFTER);
    tokio::pin!(due);
    let mut armed = false;
    loop {
        tokio::select! {
            biased;
            () = inbox.wake.notified() => {
                if !inbox.closed.load(Ordering::Acquire) {
                    tokio::time::sleep(GATHER).await;
                }
            }
            Some(landed) = late.join_next(), if !late.is_empty() => {
                if let Ok(landed) = landed {
                    landed.file(&metrics, &mut batch);
                }
            }
            () = &mut due, if armed => {
                flush(&store, &metrics, &mut batch).await;
                armed = false;
                continue;
            }
        }
        let closed = inbox.closed.load(Ordering::Acquire);
        inbox.take(&mut jobs);
        for job in jobs.drain(..) {
            match job {
                Job::Flush(done) => {
                    wait_for_counts(&mut late, &metrics, &mut batch).await;
                    flush(&store, &metrics, &mut batch).await;
                    armed = false;
                    let _ = done.send(());
                }
                job => {
                    file(job, &metrics, &mut batch, &mut late).await;
                    if batch.entries.len() + batch.tokens.len() >= FLUSH_ROWS {
                        flush(&store, &metrics, &mut batch).await;
                        armed = false;
                    }
                }
            }
        }
        if closed {
            break;
        }
        if !armed && !batch.is_empty() {
            due.as_mut()
                .reset(tokio::time::Instant::now() + FLUSH_AFTER);
            armed = true;
        }
    }
    wait_for_counts(&mut late, &metrics, &mut batch).await;
    flush(&store, &metrics, &mut batch).await;
}

/// Files the counts still running, waiting at most [`COUNTS_WAIT`] for
/// them; those that do not land by then are left uncounted.
async fn wait_for_counts(late: &mut JoinSet<Late>, metrics: &Metrics, batch: &mut LedgerBatch) {
    let deadline = tokio::time::Instant::now() + COUNTS_WAIT;
    while !late.is_empty() {
        match tokio::time::timeout_at(deadline, late.join_next()).await {
            Ok(Some(Ok(landed))) => landed.file(metrics, batch),
            Ok(Some(Err(_))) => {}
            Ok(None) => break,
            Err(_) => {
                late.abort_all();
                break;
            }
        }
    }
}

async fn flush(store: &AsyncResultStore, metrics: &Metrics, batch: &mut LedgerBatch) {
    let taken = std::mem::take(batch);
    let rows = (taken.entries.len() + taken.tokens.len()) as u64;
    if rows == 0 {
        return;
    }
    if let Err(e) = store.record(taken).await {
        metrics.store_error("ledger");
        metrics.ledger_dropped(rows);
        tracing::warn!(error = %e, rows, "writing the token ledger failed");
    }
}

async fn file(job: Job, metrics: &Metrics, batch: &mut LedgerBatch, late: &mut JoinSet<Late>) {
    match job {
        Job::Turn(turn) => file_turn(turn, metrics, batch, late).await,
        Job::Unfiled(turn, usage) => file_unread(turn, usage, metrics, batch).await,
        Job::Usage(note, reading) => {
            let observed = reading.read();
            if observed.seen {
                file_usage(
                    &note.tenant,
                    note.api,
                    note.session(),
                    note.at,
                    observed,
                    metrics,
                    batch,
                );
            }
        }
        Job::Flush(done) => {
            let _ = done.send(());
        }
        Job::Recall(note, calls) => batch.add(
            note.tenant.clone(),
            LedgerEntry {
                session_id: note.session(),
                at: note.at,
                recall_calls: calls,
                ..LedgerEntry::default()
            },
        ),
    }
}

/// One upstream response's usage: its metrics, and a ledger row (summed
/// into its request's row when they name the same model).
fn file_usage(
    tenant: &Tenant,
    api: &'static str,
    session_id: String,
    at: i64,
    observed: Observed,
    metrics: &Metrics,
    batch: &mut LedgerBatch,
) {
    metrics.upstream_tokens(api, &observed.usage);
    batch.add(
        tenant.clone(),
        LedgerEntry {
            session_id,
            at,
            model: observed.model,
            rounds: 1,
            usage: observed.usage,
            ..LedgerEntry::default()
        },
    );
}

/// A request forwarded unread or unchanged: one turn of its session, and
/// its response's usage.
async fn file_unread(
    turn: PendingTurn,
    usage: Option<Reading>,
    metrics: &Metrics,
    batch: &mut LedgerBatch,
) {
    let PendingTurn {
        tenant,
        api,
        at,
        session,
    } = turn;
    let (session, model) = session_of(session, &tenant).await;
    let mut request = request_row(session, at, model);
    // One row a request: with its response's usage, under the model the
    // response names (the one it was billed as; "gpt-4o" answers as
    // "gpt-4o-2024-08-06"), else the one the request named.
    if let Some(observed) = usage.map(Reading::read).filter(|observed| observed.seen) {
        metrics.upstream_tokens(api, &observed.usage);
        if observed.model.is_some() {
            request.model = observed.model;
        }
        request.rounds = 1;
        request.usage = observed.usage;
    }
    batch.add(tenant, request);
}

/// The row of a request itself: one turn of its session.
fn request_row(session_id: String, at: i64, model: Option<String>) -> LedgerEntry {
    LedgerEntry {
        session_id,
        at,
        model,
        requests: 1,
        ..LedgerEntry::default()
    }
}

/// The session and model of a request, as `session` says where they come
/// from.
async fn session_of(session: SessionOf, tenant: &Tenant) -> (String, Option<String>) {
    match session {
        SessionOf::Known(s, model) => (s, model),
        SessionOf::Unknown => (String::new(), None),
        SessionOf::Read(read, fallback) => (
            crate::rewrite::derive_session(tenant.as_str(), &read.opening),
            read.model.or(fallback),
        ),
        // A small body is read here (microseconds); a large one off the
        // runtime.
        SessionOf::Derive(protocol, body, fallback) if body.len() <= INLINE_DERIVE_BYTES => {
            let (session, model) = derive(protocol, tenant, &body);
            (session, model.or(fallback))
        }
        SessionOf::Derive(protocol, body, fallback) => {
            let tenant = tenant.clone();
            let (session, model) =
                tokio::task::spawn_blocking(move || derive(protocol, &tenant, &body))
                    .await
                    .unwrap_or_default();
            (session, model.or(fallback))
        }
    }
}

/// A turn's outputs are summed per (tool, kind, first seen) ...
type GroupKey = (Option<String>, &'static str, bool);
/// ... into (outputs, characters saved, tokens saved, kind).
type GroupSums = (u64, u64, u64, Kind);

/// A turn as filed: whose, which session and model, and its outputs.
struct FiledTurn {
    tenant: Tenant,
    session: String,
    at: i64,
    model: Option<String>,
    tallies: Vec<Tally>,
}

/// What of a turn's outputs a set of rows carries.
enum Filing<'a> {
    /// Everything, counts included.
    Whole(&'a [Counted]),
    /// Everything but the tokens saved (their count has not landed).
    Uncounted,
    /// Only the tokens saved, counted after the rest was filed.
    Tokens(&'a [Counted]),
}

/// A turn's token counts that landed after its rows were filed.
struct Late {
    turn: FiledTurn,
    counted: Vec<Counted>,
}

impl Late {
    fn file(self, metrics: &Metrics, batch: &mut LedgerBatch) {
        file_outputs(&self.turn, Filing::Tokens(&self.counted), metrics, batch);
    }
}

async fn file_turn(
    turn: Turn,
    metrics: &Metrics,
    batch: &mut LedgerBatch,
    late: &mut JoinSet<Late>,
) {
    let Turn {
        note,
        session,
        tallies,
        counting,
    } = turn;
    let (session, model) = session_of(session, &note.tenant).await;
    let _ = note.session.set(session.clone());
    let turn = FiledTurn {
        tenant: note.tenant.clone(),
        session,
        at: note.at,
        model,
        tallies,
    };
    batch.add(
        turn.tenant.clone(),
        request_row(turn.session.clone(), turn.at, turn.model.clone()),
    );
    let Some(mut counting) = counting else {
        file_outputs(&turn, Filing::Whole(&[]), metrics, batch);
        return;
    };
    use tokio::sync::oneshot::error::TryRecvError;
    match counting.counted.try_recv() {
        Ok(counted) => file_outputs(&turn, Filing::Whole(&counted), metrics, batch),
        Err(TryRecvError::Closed) => file_outputs(&turn, Filing::Whole(&[]), metrics, batch),
        Err(TryRecvError::Empty) => {
            file_outputs(&turn, Filing::Uncounted, metrics, batch);
            late.spawn(async move {
                let counted = counting.counted.await.unwrap_or_default();
                Late { turn, counted }
            });
        }
    }
}

/// A turn's outputs: one row per (tool, kind, first seen), in a fixed
/// order, and the token counts of the outputs it stored first.
fn file_outputs(turn: &FiledTurn, filing: Filing<'_>, metrics: &Metrics, batch: &mut LedgerBatch) {
    let counted = match filing {
        Filing::Whole(c) | Filing::Tokens(c) => Some(c),
        Filing::Uncounted => None,
    };
    let mut groups: BTreeMap<GroupKey, GroupSums> = BTreeMap::new();
    for (i, tally) in turn.tallies.iter().enumerate() {
        let this = counted.and_then(|c| c.get(i)).copied();
        let c = this.unwrap_or_default();
        if counted.is_some() {
            metrics.tokens_saved(tally.kind.as_str(), tally.first_seen, c.saved());
        }
        let g = groups
            .entry((tally.tool.clone(), tally.kind.as_str(), tally.first_seen))
            .or_insert((0, 0, 0, tally.kind));
        g.0 += 1;
        g.1 += tally.chars_saved;
        g.2 += c.saved();
        if let (Some(r), Some(_), true) = (&tally.result_ref, this, tally.first_seen) {
            batch.tokens.push((
                turn.tenant.clone(),
                OutputTokens {
                    result_ref: r.clone(),
                    original_tokens: c.original,
                    stub_tokens: c.stub,
                },
            ));
        }
    }
    let tokens_only = matches!(filing, Filing::Tokens(_));
    for ((tool, _, first_seen), (outputs, chars, tokens, kind)) in groups {
        if tokens_only && tokens == 0 {
            continue;
        }
        batch.add(
            turn.tenant.clone(),
            LedgerEntry {
                session_id: turn.session.clone(),
                at: turn.at,
                model: turn.model.clone(),
                tool,
                kind: Some(kind),
                first_seen,
                outputs: if tokens_only { 0 } else { outputs },
                chars_saved: if tokens_only { 0 } else { chars },
                tokens_saved: tokens,
                ..LedgerEntry::default()
            },
        );
    }
}

/// The session (and model) of a body the rewrite left unchanged.
fn derive(protocol: &dyn Protocol, tenant: &Tenant, body: &[u8]) -> (String, Option<String>) {
    let Some(parsed) = std::str::from_utf8(body)
        .ok()
        .and_then(|text| protocol.parse(text))
    else {
        return (String::new(), None);
    };
    (
        crate::rewrite::derive_session(tenant.as_str(), &parsed.opening),
        parsed.model,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Backend, ReportQuery, StoreConfig};

    fn turn(tenant: &Tenant, counted: tokio::sync::oneshot::Receiver<Vec<Counted>>) -> Turn {
        Turn {
            note: RequestNote::new(tenant.clone(), "chat", 1_000),
            session: SessionOf::Known("s".to_string(), Some("m".to_string())),
            tallies: vec![Tally {
                result_ref: None,
                tool: Some("bash".to_string()),
                kind: Kind::Text,
                first_seen: true,
                chars_saved: 900,
            }],
            counting: Some(Counting {
                counted,
                saved: Arc::new(OnceLock::new()),
            }),
        }
    }

    /// A turn whose count has not landed does not hold up the rows filed
    /// after it (a starved counter once filled the queue, and every other
    /// request's row was dropped); its tokens are filed when the count
    /// lands.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_count_that_has_not_landed_holds_up_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = AsyncResultStore::open(
            Backend::Sqlite(dir.path().join("s.db")),
            StoreConfig::default(),
        )
        .await
        .expect("open the store");
        let metrics = Arc::new(Metrics::default());
        let ledger = Ledger::start(store.clone(), metrics.clone());
        let tenant = Tenant::new("t").expect("tenant");
        let (count, counted) = tokio::sync::oneshot::channel();
        ledger.turn(turn(&tenant, counted));
        let others = 3 * QUEUE;
        for i in 0..others {
            drop(ledger.unread(tenant.clone(), "chat", 2_000, SessionOf::Unknown));
            if i % 256 == 0 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        let flushed = tokio::spawn({
            let ledger = ledger.clone();
            async move { ledger.flush().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        count
            .send(vec![Counted {
                original: 700,
                stub: 40,
            }])
            .expect("the ledger waits for the count");
        flushed.await.expect("flush");
        let report = store
            .report(Some(&tenant), ReportQuery::default())
            .await
            .expect("report");
        assert_eq!(report.totals.requests, others as u64 + 1);
        assert_eq!(report.totals.outputs, 1);
        assert_eq!(report.totals.chars_saved, 900);
        assert_eq!(report.totals.tokens_saved, 660);
        assert!(metrics.render().contains("toolstub_ledger_dropped_total 0"));
    }

    /// A request the rewrite never read, with its response's body left to
    /// read: one row, its session derived from the body, its usage read
    /// from the response, under the model the response names.
    #[tokio::test]
    async fn an_unread_request_and_its_usage_are_one_row() {
        let tenant = Tenant::new("t").expect("tenant");
        let request = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        let response = br#"{"model":"m-2024","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":4}}}"#;
        let protocol = &crate::protocol::openai_chat::OpenAiChat;
        let mut scanner = crate::usage::UsageScanner::new(Some("application/json"), protocol);
        scanner.push(response);
        let turn = PendingTurn {
            tenant: tenant.clone(),
            api: "chat",
            at: 5,
            session: SessionOf::Derive(protocol, Bytes::from_static(request.as_bytes()), None),
        };
        let mut batch = LedgerBatch::default();
        let metrics = Metrics::default();
        file_unread(turn, Some(scanner.finish_later()), &metrics, &mut batch).await;
        let opening = protocol.parse(request).expect("parsed").opening;
        let [(row_tenant, row)] = &batch.entries[..] else {
            panic!("one row, not {:?}", batch.entries)
        };
        assert_eq!(row_tenant, &tenant);
        assert_eq!(
            row.session_id,
            crate::rewrite::derive_session("t", &opening)
        );
        assert_eq!(row.model.as_deref(), Some("m-2024"));
        assert_eq!((row.at, row.requests, row.rounds), (5, 1, 1));
        assert_eq!(
            (row.usage.input, row.usage.cache_read, row.usage.output),
            (5, 4, 2)
        );
        // Without usage, the request's own model.
        let turn = PendingTurn {
            tenant: tenant.clone(),
            api: "chat",
            at: 6,
            session: SessionOf::Derive(protocol, Bytes::from_static(request.as_bytes()), None),
        };
        file_unread(turn, None, &metrics, &mut batch).await;
        assert_eq!(batch.entries.len(), 2);
        assert_eq!(batch.entries[1].1.model.as_deref(), Some("m"));
        assert_eq!(batch.entries[1].1.rounds, 0);
    }

    /// Past the backlog, nothing is queued for the counter: the outputs
    /// are filed uncounted and say so.
    #[test]
    fn the_backlog_is_bounded_by_what_it_holds() {
        let body = Bytes::from(vec![b'a'; 1000]);
        let items: Vec<ToCount> = (0..3)
            .map(|i| ToCount {
                sha256: "x".repeat(64),
                stub: "s".repeat(10),
                text: TextToCount::Literals(
                    body.clone(),
                    vec![i * 10..i * 10 + 5, i * 10 + 6..i * 10 + 8],
                ),
            })
            .collect();
        // The body once, not its spans, and each item's overhead.
        assert_eq!(held_bytes(&items), 1000 + 3 * (ITEM_OVERHEAD + 10 + 64));
    }
}
