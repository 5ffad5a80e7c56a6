//! The store's domain types: what callers hand in and get back. No SQLite
//! row shapes leak out of `crate::store`.

use super::StoreError;
use crate::synopsis::{Kind, Synopsis};
use serde::Serialize;
use std::fmt;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

/// The unit every offset, limit and length in the store is counted in.
pub const OFFSET_UNIT: &str = "unicode_code_point";

/// Longest tenant id accepted (tenants are 16 hex digits or `anonymous`).
const TENANT_MAX: usize = 128;

/// Whose outputs these are: every query is scoped to one tenant, and one
/// tenant can never see another's rows. Shared, not copied: a request hands
/// its tenant to the ledger and its usage tap, and cloning it is a count.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tenant(Arc<str>);

impl Serialize for Tenant {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl Tenant {
    /// The tenant of requests without a credential.
    pub const ANONYMOUS: &'static str = "anonymous";

    /// A tenant id as given: non-empty, at most 128 characters, printable ASCII.
    pub fn new(id: impl Into<String>) -> Result<Tenant, StoreError> {
        let id = id.into();
        if id.is_empty() || id.len() > TENANT_MAX || !id.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(StoreError::InvalidArgument(format!(
                "tenant id must be 1 to {TENANT_MAX} printable ASCII characters, got {id:?}"
            )));
        }
        Ok(Tenant(id.into()))
    }

    /// A tenant id the proxy builds itself (`k-` or `aws-` and hex
    /// digits: [`crate::auth`]), valid by construction.
    pub(crate) fn named(id: String) -> Tenant {
        debug_assert!(Tenant::new(id.clone()).is_ok(), "{id:?}");
        Tenant(id.into())
    }

    /// The `anonymous` tenant.
    pub fn anonymous() -> Tenant {
        Tenant(Tenant::ANONYMOUS.into())
    }

    /// The first 16 hex digits of the SHA-256 of the
    /// credential. The credential itself is never kept.
    pub fn from_credential(credential: &str) -> Tenant {
        let digest = crate::refs::sha256(credential.as_bytes());
        Tenant(crate::refs::hex(&digest[..8]).into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One tool output to store. The store derives the ref and the character
/// count from `text` (and the SHA-256, unless the caller vouches for it), so
/// they can never disagree with it.
#[derive(Clone, Debug)]
pub struct NewOutput {
    pub session_id: String,
    pub tool_call_id: Option<String>,
    pub tool_name: Option<String>,
    pub mime_type: Option<String>,
    /// The preview budget shown in the stub header.
    pub preview_chars: u64,
    /// The synopsis the stub was rendered from.
    pub synopsis: Synopsis,
    /// The original, exactly as the tool produced it. Shared: the proxy's
    /// token counter reads the same text while the store writes it, where
    /// a copy of a 1 MB output cost about 300 page faults per first-seen
    /// request (BENCHMARKS.md, "Memory").
    pub text: Arc<String>,
    /// The text's SHA-256 (lowercase hex) when the caller has computed it
    /// already (the proxy's rewrite does), so a 1 MB output is not hashed
    /// twice; `None` to have the store compute it. Verified in debug builds.
    pub sha256: Option<String>,
    /// What the stub was rendered from besides the synopsis and the fields
    /// above, so it can be rendered again exactly (`None`: not known, as for
    /// outputs stored by other means than a rewrite).
    pub stub: Option<StubFacts>,
}

/// The parts of an output's stub that are neither its synopsis nor its
/// metadata: the header's reason line and the recall tool names the stub
/// points to (configured, or renamed on a clash with the client's tools).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct StubFacts {
    pub reason: String,
    /// The read, search and list tools' names, in that order.
    pub tools: [String; 3],
}

/// A hidden recall exchange, kept for history restoration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exchange {
    /// Derived from the session and the identity of the answer the client
    /// saw (the caller's business; the store only matches it).
    pub key: String,
    pub session_id: String,
    /// The messages that replace that answer upstream, as first sent.
    pub replacement: String,
}

/// A response id the client got that stands for another upstream id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponseId {
    pub client_id: String,
    pub upstream_id: String,
    /// The output the client saw (a JSON array).
    pub output: String,
}

/// What the proxy keeps of one answer that took recall rounds, committed
/// together (one transaction, one sync).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Answer {
    pub exchange: Option<Exchange>,
    pub response_id: Option<ResponseId>,
}

/// A client key as the store keeps it (never the key itself: only its
/// SHA-256, which cannot be turned back into the key). Active until
/// revoked; revoked rows stay, so a revoked key's hash is never recorded
/// again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRecord {
    pub name: String,
    pub hash: crate::auth::KeyHash,
    /// Always `hash.tenant()`.
    pub tenant: Tenant,
    /// Unix milliseconds.
    pub created_at: i64,
}

/// What `put` reports for one output, once it is committed durably.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Stored {
    #[serde(rename = "ref")]
    pub result_ref: String,
    /// Full lowercase hex SHA-256 of the text.
    pub sha256: String,
    pub original_chars: u64,
    /// `false` when this (tenant, ref) was already stored: the put was a no-op.
    pub created: bool,
}

/// A row of `list`: what the model and the operator see per output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OutputSummary {
    #[serde(rename = "ref")]
    pub result_ref: String,
    pub session_id: String,
    pub tool_name: Option<String>,
    pub kind: Kind,
    pub original_chars: u64,
    /// Unix milliseconds.
    pub created_at: i64,
}

/// Everything the store knows about one output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OutputMeta {
    #[serde(rename = "ref")]
    pub result_ref: String,
    pub session_id: String,
    pub tool_call_id: Option<String>,
    pub tool_name: Option<String>,
    /// Unix milliseconds.
    pub created_at: i64,
    pub original_chars: u64,
    pub preview_chars: u64,
    /// Full lowercase hex SHA-256 of the text.
    pub sha256: String,
    pub mime_type: Option<String>,
    pub synopsis_kind: Kind,
    pub synopsis: Synopsis,
    /// Always [`OFFSET_UNIT`].
    pub offset_unit: &'static str,
    /// The o200k_base tokens of the original and of its stub, once the
    /// proxy's ledger has counted them (in the background).
    pub original_tokens: Option<u64>,
    pub stub_tokens: Option<u64>,
    /// How its stub was rendered, when known (outputs stored before schema
    /// version 5 (SQLite) / 4 (PostgreSQL), or not by a rewrite, have none).
    #[serde(skip)]
    pub stub: Option<StubFacts>,
}

/// A window of an original: characters `[offset, offset + limit)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReadWindow {
    pub content: String,
    pub offset: u64,
    /// The limit asked for (`-1`: to the end).
    pub limit: i64,
    pub total_chars: u64,
    pub has_more: bool,
    /// Where the next window starts, when there is more.
    pub next_offset: Option<u64>,
}

/// One exact match inside one original.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Match {
    /// Code-point offset of the match.
    pub offset: u64,
    /// The match with up to `context_chars` on each side.
    pub snippet: String,
}

/// The result of an exact search inside one original.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RefSearch {
    #[serde(rename = "ref")]
    pub result_ref: String,
    /// The first `limit` matches, in text order.
    pub matches: Vec<Match>,
    /// All non-overlapping matches in the original (may exceed `matches.len()`).
    pub total_matches: u64,
}

/// One hit of the ranked session-wide search.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SearchHit {
    #[serde(rename = "ref")]
    pub result_ref: String,
    pub tool_name: Option<String>,
    /// Code-point offset of the first query term in the hit passage.
    pub offset: u64,
    pub snippet: String,
    /// Relevance, higher is better: BM25 over the session's own passages
    /// on SQLite, `ts_rank_cd` on PostgreSQL (neither depends on another
    /// tenant's outputs).
    pub score: f64,
}

/// Sizes, for operators and the benchmark.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StoreStats {
    /// Rows in `outputs` that can still be read.
    pub live_outputs: u64,
    /// Tombstones of expired outputs.
    pub expired_outputs: u64,
    /// Distinct originals.
    pub originals: u64,
    /// UTF-8 bytes of the distinct originals (what `max_bytes` caps).
    pub original_bytes: u64,
    /// Bytes of pages used by the original chunks table and its indexes.
    pub chunk_table_bytes: u64,
    /// Bytes of pages used by the FTS5 index.
    pub fts_bytes: u64,
    /// Chunks still waiting to be indexed.
    pub unindexed_chunks: u64,
    /// Size of the main database file (the WAL not included).
    pub file_bytes: u64,
}

/// What one retention sweep did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SweepReport {
    /// Outputs turned into tombstones because of their age.
    pub expired_by_age: u64,
    /// Outputs turned into tombstones to get under `max_bytes`.
    pub expired_by_size: u64,
    /// Bytes of originals deleted.
    pub freed_bytes: u64,
    /// Tombstones forgotten.
    pub purged_tombstones: u64,
    /// Hidden exchanges and Responses id maps deleted to get under
    /// `max_bytes` (their bytes are in `freed_bytes`).
    pub dropped_by_size: u64,
    /// Ledger rows summed into per-day rows (their age past retention).
    pub ledger_rolled_up: u64,
    /// Whether a batch was full (another sweep has work to do).
    pub more: bool,
}

impl SweepReport {
    pub(crate) fn add(&mut self, other: &SweepReport) {
        self.expired_by_age += other.expired_by_age;
        self.expired_by_size += other.expired_by_size;
        self.freed_bytes += other.freed_bytes;
        self.purged_tombstones += other.purged_tombstones;
        self.dropped_by_size += other.dropped_by_size;
        self.ledger_rolled_up += other.ledger_rolled_up;
        self.more |= other.more;
    }
}

/// One row of the ledger: what one request saved for one (tool, kind,
/// first seen) group, or what one upstream response reported using, or
/// the recall calls one request ran. Rows are only ever added; reports sum
/// them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LedgerEntry {
    /// Empty when the request named no session and had no conversation.
    pub session_id: String,
    /// Unix milliseconds.
    pub at: i64,
    /// The model, as the request or the response named it.
    pub model: Option<String>,
    pub tool: Option<String>,
    pub kind: Option<Kind>,
    /// Whether these outputs were stored for the first time by this request.
    pub first_seen: bool,
    /// Client requests (a turn of the conversation): 1 on one row per request.
    pub requests: u64,
    /// Upstream responses (a request with recall rounds has several).
    pub rounds: u64,
    pub outputs: u64,
    pub chars_saved: u64,
    pub tokens_saved: u64,
    pub usage: crate::usage::Usage,
    pub recall_calls: u64,
}

/// The token counts of one stored output and of its stub.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputTokens {
    pub result_ref: String,
    pub original_tokens: u64,
    pub stub_tokens: u64,
}

/// What the ledger writes in one commit.
#[derive(Clone, Debug, Default)]
pub struct LedgerBatch {
    pub entries: Vec<(Tenant, LedgerEntry)>,
    pub tokens: Vec<(Tenant, OutputTokens)>,
    /// Where each row of `entries` is, by what it is counted under: rows
    /// that differ only in their counts become one ([`LedgerBatch::add`]).
    /// Lookup only: the rows go in the order they were first added.
    pub index: RowIndex,
}

/// The rows of a batch by the hash of what each is counted under: its
/// tenant and every column but the counts (`at` to the millisecond, so no
/// report can tell a merged row from the rows it sums). Rows are compared
/// column by column where the hashes meet; nothing is copied to look one up.
#[derive(Clone, Debug, Default)]
pub struct RowIndex {
    /// The last row added with each hash (the hashes are used as they are).
    last: std::collections::HashMap<u64, usize, BuildHasherDefault<Prehashed>>,
    /// For each row, the row added before it with the same hash.
    previous: Vec<Option<usize>>,
    /// The bytes of the key being hashed (kept to spare an allocation).
    key: Vec<u8>,
}

/// The hash [`RowIndex`] files a row under: xxh3 over its key columns, each
/// with its length, seeded once per process, so that no client can choose
/// model names that pile its rows onto one hash. (SipHash over the same
/// columns took a quarter of the ledger task's time on small requests.)
fn row_hash(tenant: &Tenant, entry: &LedgerEntry, key: &mut Vec<u8>) -> u64 {
    static SEED: std::sync::LazyLock<u64> = std::sync::LazyLock::new(|| {
        use std::hash::BuildHasher;
        std::collections::hash_map::RandomState::new().hash_one(0u64)
    });
    key.clear();
    let mut put = |text: &[u8]| {
        key.extend_from_slice(&text.len().to_le_bytes());
        key.extend_from_slice(text);
    };
    put(tenant.as_str().as_bytes());
    put(entry.session_id.as_bytes());
    put(&entry.at.to_le_bytes());
    put(entry.model.as_deref().map_or(b"\0none", str::as_bytes));
    put(entry.tool.as_deref().map_or(b"\0none", str::as_bytes));
    put(entry.kind.map_or("", |k| k.as_str()).as_bytes());
    put(&[u8::from(entry.first_seen)]);
    xxhash_rust::xxh3::xxh3_64_with_seed(key.as_slice(), *SEED)
}

/// A hasher for keys that are hashes already: the key is the hash.
#[derive(Default)]
struct Prehashed(u64);

impl std::hash::Hasher for Prehashed {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Whether two rows are counted under the same key (see [`RowIndex`]).
fn same_row(a: (&Tenant, &LedgerEntry), b: (&Tenant, &LedgerEntry)) -> bool {
    let ((ta, a), (tb, b)) = (a, b);
    a.at == b.at
        && a.first_seen == b.first_seen
        && a.kind.map(|k| k.as_str()) == b.kind.map(|k| k.as_str())
        && a.session_id == b.session_id
        && a.model == b.model
        && a.tool == b.tool
        && ta == tb
}

impl LedgerBatch {
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.tokens.is_empty()
    }

    /// Adds a row, summed into the batch's row of the same tenant,
    /// session, time, model, tool, kind and first sight when there is one:
    /// a request and its upstream's usage (filed at the request's time),
    /// or requests of one session in the same millisecond, are one row.
    /// Reports sum rows, so they read the same; the store writes half the
    /// rows or fewer.
    pub fn add(&mut self, tenant: Tenant, entry: LedgerEntry) {
        let hash = row_hash(&tenant, &entry, &mut self.index.key);
        self.add_hashed(hash, tenant, entry);
    }

    fn add_hashed(&mut self, hash: u64, tenant: Tenant, entry: LedgerEntry) {
        let mut at = self.index.last.get(&hash).copied();
        while let Some(i) = at {
            let (row_tenant, row) = &mut self.entries[i];
            if same_row((row_tenant, row), (&tenant, &entry)) {
                row.requests += entry.requests;
                row.rounds += entry.rounds;
                row.outputs += entry.outputs;
                row.chars_saved += entry.chars_saved;
                row.tokens_saved += entry.tokens_saved;
                row.usage.add(&entry.usage);
                row.recall_calls += entry.recall_calls;
                return;
            }
            at = self.index.previous.get(i).copied().flatten();
        }
        // Rows handed in whole (not through `add`) are indexed as none.
        let i = self.entries.len();
        self.index.previous.resize(i, None);
        self.index.previous.push(self.index.last.insert(hash, i));
        self.entries.push((tenant, entry));
    }
}

/// Which part of a tenant's ledger a report sums.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportQuery {
    /// One session, or all of them.
    pub session: Option<String>,
    /// The width of a series point, in milliseconds (at least 1).
    pub bucket_ms: i64,
    /// At most this many sessions, most recently active first.
    pub sessions: usize,
}

impl Default for ReportQuery {
    fn default() -> Self {
        ReportQuery {
            session: None,
            bucket_ms: 60_000,
            sessions: 50,
        }
    }
}

/// Sums over ledger rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Sums {
    pub requests: u64,
    pub rounds: u64,
    pub outputs: u64,
    pub outputs_first_seen: u64,
    pub chars_saved: u64,
    pub tokens_saved: u64,
    pub tokens_saved_first_seen: u64,
    pub tokens_saved_repeated: u64,
    pub input_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub output_tokens: u64,
    pub recall_calls: u64,
    /// Unix milliseconds of the first and last row summed (0 when none).
    pub first_at: i64,
    pub last_at: i64,
}

/// A tenant's ledger, summed (`toolstub stats`, the dashboard).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Report {
    pub totals: Sums,
    pub by_tool: Vec<(String, Sums)>,
    pub by_kind: Vec<(String, Sums)>,
    /// (bucket start, sums), oldest first.
    pub series: Vec<(i64, Sums)>,
    /// (session, sums), most recently active first.
    pub sessions: Vec<(String, Sums)>,
    /// Saved tokens per model (what pricing needs).
    pub by_model: Vec<crate::pricing::ModelSavings>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(session: &str, at: i64, model: Option<&str>) -> LedgerEntry {
        LedgerEntry {
            session_id: session.to_string(),
            at,
            model: model.map(str::to_string),
            ..LedgerEntry::default()
        }
    }

    /// One request's row.
    fn request(session: &str, at: i64, model: Option<&str>) -> LedgerEntry {
        LedgerEntry {
            requests: 1,
            ..row(session, at, model)
        }
    }

    #[test]
    fn a_batch_sums_rows_that_differ_only_in_their_counts() {
        let a = Tenant::from_credential("key-a");
        let b = Tenant::from_credential("key-b");
        let mut batch = LedgerBatch::default();
        // A request, then its upstream's usage at the request's time.
        batch.add(a.clone(), request("s1", 10, Some("m")));
        batch.add(
            a.clone(),
            LedgerEntry {
                rounds: 1,
                usage: crate::usage::Usage {
                    input: 5,
                    output: 2,
                    ..Default::default()
                },
                ..row("s1", 10, Some("m"))
            },
        );
        // Any other tenant, session, time or model is a row of its own.
        batch.add(b.clone(), request("s1", 10, Some("m")));
        batch.add(a.clone(), request("s2", 10, Some("m")));
        batch.add(a.clone(), request("s1", 11, Some("m")));
        batch.add(
            a.clone(),
            LedgerEntry {
                rounds: 1,
                ..row("s1", 10, Some("m-2026"))
            },
        );
        assert_eq!(batch.entries.len(), 5);
        let (tenant, first) = &batch.entries[0];
        assert_eq!(tenant, &a);
        assert_eq!((first.requests, first.rounds), (1, 1));
        assert_eq!((first.usage.input, first.usage.output), (5, 2));
        assert_eq!(batch.entries[1].0, b, "rows keep the order they came in");
        let taken = std::mem::take(&mut batch);
        assert_eq!(taken.entries.len(), 5);
        batch.add(a, request("s1", 10, Some("m")));
        assert_eq!(batch.entries.len(), 1, "a new batch starts empty");
        assert_eq!(batch.entries[0].1.requests, 1);
    }

    #[test]
    fn rows_whose_hashes_meet_are_told_apart_column_by_column() {
        let a = Tenant::from_credential("key-a");
        let mut batch = LedgerBatch::default();
        // Every row filed under one hash: only the columns decide.
        let rows = [
            request("s1", 10, Some("m")),
            request("s2", 10, Some("m")),
            request("s1", 10, None),
            LedgerEntry {
                tool: Some("Read".to_string()),
                outputs: 1,
                ..row("s1", 10, Some("m"))
            },
            LedgerEntry {
                first_seen: true,
                ..request("s1", 10, Some("m"))
            },
        ];
        for _ in 0..3 {
            for r in &rows {
                batch.add_hashed(7, a.clone(), r.clone());
            }
        }
        batch.add_hashed(7, Tenant::anonymous(), request("s1", 10, Some("m")));
        assert_eq!(batch.entries.len(), rows.len() + 1);
        for (i, r) in rows.iter().enumerate() {
            let (tenant, got) = &batch.entries[i];
            assert_eq!(tenant, &a);
            assert_eq!(
                (&got.session_id, &got.model, &got.tool, got.first_seen),
                (&r.session_id, &r.model, &r.tool, r.first_seen)
            );
            assert_eq!((got.requests, got.outputs), (3 * r.requests, 3 * r.outputs));
        }
        // Rows handed in whole, then one added: a row of its own.
        let mut whole = LedgerBatch {
            entries: vec![(a.clone(), request("s1", 10, Some("m")))],
            ..LedgerBatch::default()
        };
        whole.add(a.clone(), request("s1", 10, Some("m")));
        whole.add(a, request("s1", 10, Some("m")));
        assert_eq!(whole.entries.len(), 2);
        assert_eq!(whole.entries[1].1.requests, 2);
    }
}
