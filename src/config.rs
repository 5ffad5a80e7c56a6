//! Configuration: a TOML file, overridden by `TOOLSTUB_*` environment
//! variables, overridden by command-line flags.
//!
//! Two stages, as ripgrep does it: the sources are merged into one TOML table
//! and deserialized into [`RawConfig`] (which mirrors the file; unknown keys
//! are an error naming the key), then validated into [`Config`], which holds
//! parsed addresses and derived values. The config is passed explicitly,
//! never global.

use crate::rewrite::select::Budget;
use crate::rewrite::tool_policy::{Externalize, Glob, ToolRule, ToolRules};
use crate::rewrite::Policy;
use crate::store::Durability;
use crate::stub::RecallToolNames;
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The configuration file's shape. Every field has the documented default.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawConfig {
    pub server: RawServer,
    pub upstream: RawUpstream,
    pub store: RawStore,
    pub externalization: RawExternalization,
    pub recall: RawRecall,
    pub operator_api: RawOperatorApi,
    pub auth: RawAuth,
    /// `[context_window]`: the context-window rescue (`rewrite::window`).
    pub context_window: RawContextWindow,
    /// `[[pricing]]`: prices per model-name pattern, for the estimate.
    pub pricing: Vec<RawPrice>,
}

/// `[context_window]`: requests over their model's context window are
/// brought under it by stubbing outputs the model has seen.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawContextWindow {
    pub enabled: bool,
    /// The window of a model no entry names (0: no rescue for it).
    pub default_tokens: u64,
    /// Bytes of a request per token, the estimate's ratio.
    pub bytes_per_token: f64,
    /// The share of the window kept free.
    pub margin: f64,
    /// The share of the window a rescued request is brought under.
    pub aim: f64,
    /// `[[context_window.models]]`, before the shipped table.
    pub models: Vec<RawModelWindow>,
}

impl Default for RawContextWindow {
    fn default() -> Self {
        let w = crate::rewrite::window::Window::default();
        RawContextWindow {
            enabled: w.enabled,
            default_tokens: w.default_tokens,
            bytes_per_token: w.bytes_per_token_milli as f64 / 1000.0,
            margin: f64::from(w.margin_permille) / 1000.0,
            aim: f64::from(w.aim_permille) / 1000.0,
            models: Vec::new(),
        }
    }
}

/// One `[[context_window.models]]` entry.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModelWindow {
    /// A model-name pattern (`*`, `?`), as the request names the model.
    #[serde(rename = "match")]
    pub pattern: String,
    /// Its context window in input tokens (0: no rescue for it).
    pub tokens: u64,
}

/// One `[[pricing]]` entry as written: US dollars per million tokens.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrice {
    /// A model-name pattern (`*`, `?`), as the upstream reports the model.
    #[serde(rename = "match")]
    pub pattern: String,
    pub input: f64,
    pub cache_read: f64,
    pub cache_write: Option<f64>,
    pub output: f64,
}

/// hyper's own header limit: it parses up to this many fields without an
/// allocation, and allocates room for the configured number on every
/// request otherwise.
pub const HYPER_MAX_HEADERS: usize = 100;

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawServer {
    pub listen: String,
    pub max_body_bytes: u64,
    pub header_read_timeout_ms: u64,
    pub body_read_timeout_ms: u64,
    /// A client connection whose answer cannot be written for this long
    /// (the client reads nothing) is closed.
    pub write_timeout_ms: u64,
    /// Client connections served at once; more are answered 503.
    pub max_connections: usize,
    /// Request and response bytes read whole across all requests at once;
    /// a request that would pass it is answered 503.
    pub max_buffered_bytes: u64,
    pub shutdown_grace_ms: u64,
    pub max_headers: usize,
    pub log_format: String,
    pub log_level: String,
}

impl Default for RawServer {
    fn default() -> Self {
        RawServer {
            listen: "127.0.0.1:8790".to_string(),
            max_body_bytes: 64 * 1024 * 1024,
            header_read_timeout_ms: 30_000,
            body_read_timeout_ms: 60_000,
            write_timeout_ms: 60_000,
            max_connections: 1024,
            max_buffered_bytes: 256 * 1024 * 1024,
            shutdown_grace_ms: 30_000,
            max_headers: HYPER_MAX_HEADERS,
            log_format: "text".to_string(),
            log_level: "info".to_string(),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawUpstream {
    /// Every path goes here when set; when not, OpenAI's and Anthropic's
    /// APIs each get their own requests ([`DEFAULT_OPENAI`], [`DEFAULT_ANTHROPIC`]).
    pub base_url: Option<String>,
    pub connect_timeout_ms: u64,
    pub first_byte_timeout_ms: u64,
    /// How long an upstream response body may be silent once its head is in.
    pub idle_timeout_ms: u64,
    pub ca_file: Option<PathBuf>,
    pub pool_idle_timeout_ms: u64,
    pub pool_max_idle_per_host: usize,
    /// More upstreams by path prefix: a request whose path starts with the
    /// prefix goes to that base URL, the prefix removed.
    pub routes: BTreeMap<String, String>,
    /// Hosts besides Google's own Vertex AI hosts that may get the Google
    /// token toolstub obtains (a Private Service Connect endpoint).
    pub google_token_hosts: Vec<String>,
    /// Hosts besides AWS's own (`*.amazonaws.com`, `*.amazonaws.com.cn`)
    /// that may get requests signed with the AWS credentials toolstub finds.
    pub aws_signing_hosts: Vec<String>,
    /// The provider keys toolstub holds, sent for a client that presents a
    /// client key in their place (else `OPENAI_API_KEY`,
    /// `ANTHROPIC_API_KEY`, `GEMINI_API_KEY` or `GOOGLE_API_KEY`).
    pub openai_api_key: Option<Secret>,
    pub anthropic_api_key: Option<Secret>,
    pub gemini_api_key: Option<Secret>,
    /// Hosts besides each provider's own API host that may get its key
    /// (a gateway in front of it): one list per provider, so that a host
    /// listed for one key never gets another.
    pub openai_api_key_hosts: Vec<String>,
    pub anthropic_api_key_hosts: Vec<String>,
    pub gemini_api_key_hosts: Vec<String>,
    /// The one list for every key this once was: refused, with the names
    /// that replace it.
    pub api_key_hosts: Option<toml::Value>,
}

impl Default for RawUpstream {
    fn default() -> Self {
        RawUpstream {
            base_url: None,
            connect_timeout_ms: 10_000,
            first_byte_timeout_ms: 600_000,
            idle_timeout_ms: 300_000,
            ca_file: None,
            pool_idle_timeout_ms: 90_000,
            pool_max_idle_per_host: 64,
            routes: BTreeMap::new(),
            google_token_hosts: Vec::new(),
            aws_signing_hosts: Vec::new(),
            openai_api_key: None,
            anthropic_api_key: None,
            gemini_api_key: None,
            openai_api_key_hosts: Vec::new(),
            anthropic_api_key_hosts: Vec::new(),
            gemini_api_key_hosts: Vec::new(),
            api_key_hosts: None,
        }
    }
}

/// A secret from the configuration (a provider key, the admin token): it
/// never prints, in a log line or an error (one of another type than a
/// string is refused without its value).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        secret_string(d).map(Secret)
    }
}

/// A string, or an error that does not repeat the value given.
fn secret_string<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<String, D::Error> {
    struct Quiet;
    impl serde::de::Visitor<'_> for Quiet {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a quoted string")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> std::result::Result<String, E> {
            Err(E::custom(
                "a secret must be a quoted string (its value is not shown)",
            ))
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> std::result::Result<String, E> {
            self.visit_i64(0)
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> std::result::Result<String, E> {
            self.visit_i64(0)
        }
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> std::result::Result<String, E> {
            self.visit_i64(0)
        }
    }
    d.deserialize_string(Quiet)
}

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// `[auth]`: who may use the proxy.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawAuth {
    /// Whether every request needs a client key. Unset: required when
    /// `server.listen` is not a loopback address or any client key exists.
    pub required: Option<bool>,
    /// Names besides the listen address, `localhost` and loopback
    /// addresses that a request's `Host` may give when no key is required.
    pub hosts: Vec<String>,
}

/// A database URL: it may hold a password, so it never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreUrl(pub String);

impl<'de> Deserialize<'de> for StoreUrl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        secret_string(d).map(StoreUrl)
    }
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreUrl(<redacted>)")
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawStore {
    /// The SQLite file (used when `url` is not set).
    pub path: PathBuf,
    /// `postgres://user:pass@host:5432/db`: store in PostgreSQL instead
    /// (several replicas sharing one store).
    pub url: Option<StoreUrl>,
    /// PostgreSQL connections per replica.
    pub pool_size: usize,
    /// Longest wait for a PostgreSQL connection.
    pub connect_timeout_ms: u64,
    pub retention_days: u32,
    pub max_bytes: u64,
    /// How often the background retention sweep runs (at least 100 ms).
    pub sweep_interval_ms: u64,
    /// Whether a put's commit waits for the disk (`full`) or for the OS
    /// (`normal`: survives a process kill, not a power loss).
    pub durability: Durability,
}

impl Default for RawStore {
    fn default() -> Self {
        RawStore {
            path: PathBuf::from("toolstub.db"),
            url: None,
            pool_size: 16,
            connect_timeout_ms: 5_000,
            retention_days: 30,
            max_bytes: 10 * 1024 * 1024 * 1024,
            sweep_interval_ms: 60_000,
            durability: Durability::default(),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawExternalization {
    pub enabled: bool,
    pub threshold_chars: usize,
    pub preview_chars: usize,
    pub assistant_turn_inline_budget_chars: usize,
    pub assistant_turn_preview_budget_chars: usize,
    pub min_preview_chars: usize,
    /// Budget for the tool output a conversation keeps inline (0: off).
    pub conversation_inline_budget_chars: usize,
    /// Under the conversation budget, outputs longer than this are externalized.
    pub conversation_floor_chars: usize,
    /// The aging rule (`rewrite::aging`): turns before an output seen
    /// verbatim may become a stub (0: off), its floor, and the share of
    /// what a change makes the cache write again that it must remove.
    pub aged_after_turns: usize,
    pub aged_floor_chars: usize,
    pub aged_min_share: f64,
    /// Later requests a change may count on, per turn so far (0: it must
    /// pay at once).
    pub aged_horizon: f64,
    /// Whether outputs the model has seen become stubs at a request that
    /// came after the provider's cache expired (`rewrite::aging`).
    pub aged_after_expiry: bool,
    /// Whether a conversation's first stub must pay for the cached prompt
    /// it makes the provider write again (`rewrite::first_stub`), and the
    /// later requests it may count on, per assistant turn so far.
    pub first_stub_gate: bool,
    pub first_stub_horizon: f64,
    /// The later requests a first stub may count on however young the
    /// conversation.
    pub first_stub_min_later: u32,
    /// How long the provider keeps a conversation's prompt cached after
    /// its last request, unless the request asks for longer (0: never
    /// treated as expired; see `rewrite::RequestFacts::expired`).
    pub prompt_cache_ttl_ms: u64,
    pub failure_mode: FailureMode,
    /// The older form of a MIME hint per tool name, still accepted: each
    /// entry is read as a rule `{ match = <the exact name>, mime = ... }`
    /// placed after the `tools` rules.
    pub mime_by_tool: BTreeMap<String, String>,
    /// Per-tool rules (`[[externalization.tools]]`), in file order.
    pub tools: Vec<RawToolRule>,
    /// Whether outputs the client flags as errors (Anthropic `is_error`)
    /// may be externalized; by default they stay verbatim.
    pub externalize_errors: bool,
}

/// One `[[externalization.tools]]` entry as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawToolRule {
    /// A tool-name pattern (`*`, `?`).
    #[serde(rename = "match")]
    pub pattern: String,
    pub threshold_chars: Option<usize>,
    pub conversation_budget: Option<bool>,
    pub externalize: Option<Externalize>,
    pub mime: Option<String>,
}

impl Default for RawExternalization {
    fn default() -> Self {
        let b = Budget::default();
        RawExternalization {
            enabled: true,
            threshold_chars: b.threshold_chars,
            preview_chars: b.preview_chars,
            assistant_turn_inline_budget_chars: b.turn_inline_budget_chars,
            assistant_turn_preview_budget_chars: b.turn_preview_budget_chars,
            min_preview_chars: b.min_preview_chars,
            conversation_inline_budget_chars: b.conversation_inline_budget_chars,
            conversation_floor_chars: b.conversation_floor_chars,
            aged_after_turns: crate::rewrite::aging::DEFAULT_AFTER_TURNS,
            aged_floor_chars: crate::rewrite::aging::DEFAULT_FLOOR_CHARS,
            aged_min_share: f64::from(crate::rewrite::aging::DEFAULT_MIN_SHARE_PERMILLE) / 1000.0,
            aged_horizon: f64::from(crate::rewrite::aging::DEFAULT_HORIZON_PERMILLE) / 1000.0,
            aged_after_expiry: crate::rewrite::aging::DEFAULT_AFTER_EXPIRY,
            first_stub_gate: true,
            first_stub_horizon: f64::from(crate::rewrite::first_stub::DEFAULT_HORIZON_PERMILLE)
                / 1000.0,
            first_stub_min_later: crate::rewrite::first_stub::DEFAULT_MIN_LATER,
            prompt_cache_ttl_ms: crate::rewrite::DEFAULT_PROMPT_CACHE_TTL_MS,
            failure_mode: FailureMode::PreserveRaw,
            mime_by_tool: BTreeMap::new(),
            tools: Vec::new(),
            externalize_errors: false,
        }
    }
}

/// What to do when storing an original fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureMode {
    /// Forward the outputs inline, as if nothing were over budget.
    #[default]
    PreserveRaw,
    /// Send stubs without a ref.
    PreviewOnly,
    /// Answer the client 503.
    Reject,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawRecall {
    pub enabled: bool,
    pub max_rounds: usize,
    /// Put hidden recall exchanges back into the history the client sends
    /// on its next turn.
    pub restore_history: bool,
    /// While the proxy runs recall calls or waits for the next round, a
    /// streaming client gets a keep-alive event after this long without a
    /// byte (Claude Code warns after 20 s).
    pub keepalive_ms: u64,
    /// Models whose conversations get the recall tools from their first
    /// request that declares tools (`crate::rewrite::TOOLS_FROM_START`).
    pub tools_from_start: Vec<String>,
    pub read_tool: String,
    pub search_tool: String,
    pub list_tool: String,
}

impl Default for RawRecall {
    fn default() -> Self {
        let names = RecallToolNames::default();
        RawRecall {
            enabled: true,
            max_rounds: 8,
            restore_history: false,
            keepalive_ms: 5_000,
            tools_from_start: crate::rewrite::TOOLS_FROM_START
                .iter()
                .map(|p| p.to_string())
                .collect(),
            read_tool: names.read,
            search_tool: names.search,
            list_tool: names.list,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawOperatorApi {
    pub enabled: bool,
    pub listen: Option<String>,
    pub admin_token: Option<Secret>,
}

impl Default for RawOperatorApi {
    fn default() -> Self {
        RawOperatorApi {
            enabled: true,
            listen: None,
            admin_token: None,
        }
    }
}

/// How logs are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// The validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub max_body_bytes: u64,
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub write_timeout: Duration,
    pub max_connections: usize,
    pub max_buffered_bytes: u64,
    pub shutdown_grace: Duration,
    pub max_headers: usize,
    pub log_format: LogFormat,
    pub log_level: String,
    pub upstream: UpstreamConfig,
    pub store: RawStore,
    pub failure_mode: FailureMode,
    pub policy: Policy,
    pub recall_max_rounds: usize,
    pub restore_history: bool,
    pub keepalive: Duration,
    pub operator_api: OperatorApiConfig,
    pub auth: AuthConfig,
    pub pricing: crate::pricing::PriceTable,
}

/// Who may use the proxy (`[auth]`, and `toolstub wrap`'s run secret).
#[derive(Clone, Debug, Default)]
pub struct AuthConfig {
    /// `auth.required`; `None`: decided by the listen address and whether
    /// any client key exists.
    pub required: Option<bool>,
    /// `auth.hosts`.
    pub hosts: Vec<String>,
    /// `toolstub wrap`'s per-run secret: every request's path must start
    /// with `/run/<secret>` (or the request carry it in
    /// `x-toolstub-run-secret`), and nothing else is needed (nor served).
    /// Never read from a file or the environment.
    pub run_secret: Option<Secret>,
}

#[derive(Clone, Debug)]
pub struct UpstreamConfig {
    /// The base URL without a trailing slash (`https://host/prefix`).
    pub base_url: http::Uri,
    /// Where Anthropic requests go instead (`upstream.base_url` not set:
    /// then a messages request, or any carrying `anthropic-version`, goes
    /// to Anthropic, the rest to OpenAI).
    pub anthropic_base: Option<http::Uri>,
    /// Where Gemini API requests go instead (`upstream.base_url` not set:
    /// `/v1beta/...` paths, `/v1/models/...:generateContent` and the like,
    /// or any carrying `x-goog-api-key`).
    pub gemini_base: Option<http::Uri>,
    pub connect_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub idle_timeout: Duration,
    pub ca_file: Option<PathBuf>,
    pub pool_idle_timeout: Duration,
    pub pool_max_idle_per_host: usize,
    /// (path prefix without a trailing `/`, base URL), longest prefix first.
    pub routes: Vec<(String, http::Uri)>,
    /// `upstream.google_token_hosts`.
    pub google_token_hosts: Vec<String>,
    /// `upstream.aws_signing_hosts`.
    pub aws_signing_hosts: Vec<String>,
    /// The provider keys toolstub holds.
    pub held_keys: HeldKeys,
}

/// The provider keys toolstub holds, one per API, each with the hosts
/// besides its provider's own that may get it.
#[derive(Clone, Debug, Default)]
pub struct HeldKeys {
    pub openai: Option<Secret>,
    pub anthropic: Option<Secret>,
    pub gemini: Option<Secret>,
    /// `upstream.openai_api_key_hosts`, ...
    pub openai_hosts: Vec<String>,
    pub anthropic_hosts: Vec<String>,
    pub gemini_hosts: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct OperatorApiConfig {
    pub enabled: bool,
    pub listen: Option<SocketAddr>,
    pub admin_token: Option<Secret>,
}

/// Overrides given on the command line (they win over everything).
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub listen: Option<String>,
    pub upstream: Option<String>,
    pub db: Option<PathBuf>,
    /// `store.url` (PostgreSQL).
    pub store_url: Option<String>,
    /// `PREFIX=URL` pairs (`upstream.routes`), added to the file's.
    pub routes: Vec<String>,
}

/// Loads the configuration: `file` (if any), then `env` (`TOOLSTUB_*`
/// variables, e.g. `TOOLSTUB_UPSTREAM_BASE_URL`), then `overrides`.
pub fn load(
    file: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
    overrides: &Overrides,
) -> Result<Config> {
    load_with_defaults(file, env, &Overrides::default(), overrides)
}

/// As [`load`], with `defaults` below everything else: values the file,
/// the environment and `overrides` replace when they set them
/// (`toolstub wrap` keeps its store in the user's data directory unless
/// told otherwise).
pub fn load_with_defaults(
    file: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
    defaults: &Overrides,
    overrides: &Overrides,
) -> Result<Config> {
    let mut table = toml::Table::new();
    apply_overrides(&mut table, defaults)?;
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        // toml's error quotes the line, which may hold a secret: say
        // where and what, not the line.
        let from_file = text.parse::<toml::Table>().map_err(|e| {
            let line = e.span().map_or(0, |span| {
                text.get(..span.start).unwrap_or(&text).matches('\n').count() + 1
            });
            anyhow::anyhow!(
                "invalid TOML in {} at line {line}: {} (the line is not shown: it may hold a secret)",
                path.display(),
                e.message().trim_end()
            )
        })?;
        merge_sections(&mut table, from_file);
    }
    let mut provider_keys = BTreeMap::new();
    for (name, value) in env {
        if let Some(key) = name.strip_prefix("TOOLSTUB_") {
            apply_env(&mut table, &name, key, &value)?;
        } else if let Some(field) = provider_key_field(&name) {
            if !value.trim().is_empty() {
                // GEMINI_API_KEY wins over GOOGLE_API_KEY, whatever the order.
                if name != "GOOGLE_API_KEY" || !provider_keys.contains_key(field) {
                    provider_keys.insert(field, value.trim().to_string());
                }
            }
        }
    }
    for (field, value) in provider_keys {
        let upstream = table
            .entry("upstream".to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let toml::Value::Table(upstream) = upstream {
            upstream
                .entry(field.to_string())
                .or_insert(toml::Value::String(value));
        }
    }
    apply_overrides(&mut table, overrides)?;
    let raw: RawConfig = toml::Value::Table(table)
        .try_into()
        .context("invalid configuration")?;
    validate(raw)
}

/// `top` over `base`, key by key within each section (a section of `top`
/// does not wipe out the keys of `base`'s that it does not set).
fn merge_sections(base: &mut toml::Table, top: toml::Table) {
    for (name, value) in top {
        match (base.get_mut(&name), value) {
            (Some(toml::Value::Table(section)), toml::Value::Table(keys)) => {
                for (key, value) in keys {
                    section.insert(key, value);
                }
            }
            (_, value) => {
                base.insert(name, value);
            }
        }
    }
}

fn apply_overrides(table: &mut toml::Table, overrides: &Overrides) -> Result<()> {
    if let Some(listen) = &overrides.listen {
        set(
            table,
            "server",
            "listen",
            toml::Value::String(listen.clone()),
        );
    }
    if let Some(upstream) = &overrides.upstream {
        set(
            table,
            "upstream",
            "base_url",
            toml::Value::String(upstream.clone()),
        );
    }
    for route in &overrides.routes {
        let Some((prefix, url)) = route.split_once('=') else {
            bail!("--route takes PREFIX=URL, e.g. /anthropic=https://api.anthropic.com: {route:?}");
        };
        let entry = table
            .entry("upstream".to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let toml::Value::Table(upstream) = entry {
            let routes = upstream
                .entry("routes".to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let toml::Value::Table(routes) = routes {
                routes.insert(prefix.to_string(), toml::Value::String(url.to_string()));
            }
        }
    }
    if let Some(db) = &overrides.db {
        set(
            table,
            "store",
            "path",
            toml::Value::String(db.to_string_lossy().into_owned()),
        );
    }
    if let Some(url) = &overrides.store_url {
        set(table, "store", "url", toml::Value::String(url.clone()));
    }
    Ok(())
}

const SECTIONS: [&str; 8] = [
    "server",
    "upstream",
    "store",
    "externalization",
    "recall",
    "operator_api",
    "auth",
    "context_window",
];

/// The `upstream` key a provider's own environment variable fills when the
/// file and `TOOLSTUB_UPSTREAM_*` leave it unset.
fn provider_key_field(name: &str) -> Option<&'static str> {
    match name {
        "OPENAI_API_KEY" => Some("openai_api_key"),
        "ANTHROPIC_API_KEY" => Some("anthropic_api_key"),
        "GEMINI_API_KEY" | "GOOGLE_API_KEY" => Some("gemini_api_key"),
        _ => None,
    }
}

/// `TOOLSTUB_<SECTION>_<KEY>=value`: the value is read as a TOML value when it
/// parses as one (numbers, booleans), as a string otherwise.
fn apply_env(table: &mut toml::Table, name: &str, key: &str, value: &str) -> Result<()> {
    let lower = key.to_ascii_lowercase();
    let Some(section) = SECTIONS
        .iter()
        .find(|s| lower.starts_with(&format!("{s}_")))
    else {
        bail!("unknown environment variable {name}: expected TOOLSTUB_<SECTION>_<KEY> with a section among {SECTIONS:?}");
    };
    let field = &lower[section.len() + 1..];
    // A secret is a string, quoted or not (an all-digit token stays a
    // string, and no type error quotes it).
    let secret = matches!(
        (*section, field),
        (
            "upstream",
            "openai_api_key" | "anthropic_api_key" | "gemini_api_key"
        ) | ("operator_api", "admin_token")
            | ("store", "url")
    );
    let parsed = format!("v = {value}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .filter(|v| (v.is_str() || !secret) && (!v.is_str() || value.starts_with('"')))
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    set(table, section, field, parsed);
    Ok(())
}

fn set(table: &mut toml::Table, section: &str, key: &str, value: toml::Value) {
    let entry = table
        .entry(section.to_string())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if let toml::Value::Table(t) = entry {
        t.insert(key.to_string(), value);
    }
}

/// Where requests go when `upstream.base_url` is not set.
pub const DEFAULT_OPENAI: &str = "https://api.openai.com";
/// Where Anthropic requests go when `upstream.base_url` is not set.
pub const DEFAULT_ANTHROPIC: &str = "https://api.anthropic.com";
/// Where Gemini API requests go when `upstream.base_url` is not set.
pub const DEFAULT_GEMINI: &str = "https://generativelanguage.googleapis.com";

/// An upstream base URL: http or https, a host, no query.
fn base_url(key: &str, raw: &str) -> Result<http::Uri> {
    let base = raw.trim_end_matches('/');
    let url: http::Uri = base
        .parse()
        .with_context(|| format!("{key}: not a URL: {raw:?}"))?;
    match url.scheme_str() {
        Some("http" | "https") => {}
        _ => bail!("{key} must start with http:// or https://: {base}"),
    }
    if url.host().is_none() {
        bail!("{key} has no host: {base}");
    }
    if url.query().is_some() {
        bail!("{key} must not carry a query: {base}");
    }
    Ok(url)
}

/// The per-tool rules: `externalization.tools` in file order, then the
/// older `mime_by_tool` entries (exact names, by name order), each checked
/// with its key named.
fn tool_rules(e: &RawExternalization) -> Result<ToolRules> {
    let mut rules = Vec::with_capacity(e.tools.len() + e.mime_by_tool.len());
    for (i, raw) in e.tools.iter().enumerate() {
        let key = format!("externalization.tools[{i}]");
        let pattern =
            Glob::new(&raw.pattern).with_context(|| format!("{key}.match: invalid pattern"))?;
        if raw.threshold_chars == Some(0) {
            bail!("{key}.threshold_chars must be at least 1");
        }
        if raw.mime.as_deref().is_some_and(|m| m.trim().is_empty()) {
            bail!("{key}.mime must not be empty");
        }
        if raw.threshold_chars.is_none()
            && raw.conversation_budget.is_none()
            && raw.externalize.is_none()
            && raw.mime.is_none()
        {
            bail!("{key} (match = {:?}) sets nothing: give it threshold_chars, conversation_budget, externalize or mime", raw.pattern);
        }
        rules.push(ToolRule {
            pattern,
            threshold_chars: raw.threshold_chars,
            conversation_budget: raw.conversation_budget,
            externalize: raw.externalize,
            mime: raw.mime.clone(),
        });
    }
    for (name, mime) in &e.mime_by_tool {
        if mime.trim().is_empty() {
            bail!("externalization.mime_by_tool.{name:?} must not be empty");
        }
        rules.push(ToolRule {
            pattern: Glob::literal(name),
            threshold_chars: None,
            conversation_budget: None,
            externalize: None,
            mime: Some(mime.clone()),
        });
    }
    Ok(ToolRules(rules))
}

fn validate(raw: RawConfig) -> Result<Config> {
    let listen: SocketAddr = raw
        .server
        .listen
        .parse()
        .with_context(|| format!("server.listen: not an address: {:?}", raw.server.listen))?;
    let default_base = base_url(
        "upstream.base_url",
        raw.upstream.base_url.as_deref().unwrap_or(DEFAULT_OPENAI),
    )?;
    let anthropic_base = match raw.upstream.base_url {
        Some(_) => None,
        None => Some(base_url("upstream.base_url", DEFAULT_ANTHROPIC)?),
    };
    let gemini_base = match raw.upstream.base_url {
        Some(_) => None,
        None => Some(base_url("upstream.base_url", DEFAULT_GEMINI)?),
    };
    let mut routes = Vec::new();
    for (prefix, url) in &raw.upstream.routes {
        let key = format!("upstream.routes.{prefix:?}");
        let trimmed = prefix.trim_end_matches('/');
        let ok = trimmed.starts_with('/')
            && trimmed.len() > 1
            && trimmed
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/-_.~".contains(&b));
        if !ok || trimmed.starts_with("/toolstub") || trimmed == "/healthz" || trimmed == "/metrics"
        {
            bail!("{key}: a route prefix is a path such as \"/anthropic\" (letters, digits, - _ . ~ /), not one of toolstub's own paths");
        }
        routes.push((trimmed.to_string(), base_url(&key, url)?));
    }
    routes.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
    let log_format = match raw.server.log_format.as_str() {
        "text" => LogFormat::Text,
        "json" => LogFormat::Json,
        other => bail!("server.log_format must be \"text\" or \"json\", not {other:?}"),
    };
    let e = &raw.externalization;
    if e.threshold_chars == 0 {
        bail!("externalization.threshold_chars must be at least 1");
    }
    if !(0.0..=100.0).contains(&e.aged_horizon) {
        bail!(
            "externalization.aged_horizon must be between 0 and 100, got {}",
            e.aged_horizon
        );
    }
    if !(0.0..=100.0).contains(&e.first_stub_horizon) {
        bail!(
            "externalization.first_stub_horizon must be between 0 and 100, got {}",
            e.first_stub_horizon
        );
    }
    if !(0.0..=1.0).contains(&e.aged_min_share) {
        bail!(
            "externalization.aged_min_share must be between 0 and 1, got {}",
            e.aged_min_share
        );
    }
    let tools = tool_rules(e)?;
    let window = context_window(&raw.context_window)?;
    let names = RecallToolNames {
        read: raw.recall.read_tool.clone(),
        search: raw.recall.search_tool.clone(),
        list: raw.recall.list_tool.clone(),
    };
    for name in [&names.read, &names.search, &names.list] {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !ok {
            bail!("recall tool names must match [a-zA-Z0-9_-]{{1,64}}: {name:?}");
        }
    }
    if names.read == names.search || names.read == names.list || names.search == names.list {
        bail!("recall tool names must differ");
    }
    let operator_listen: Option<SocketAddr> = match &raw.operator_api.listen {
        Some(addr) => Some(
            addr.parse()
                .with_context(|| format!("operator_api.listen: not an address: {addr:?}"))?,
        ),
        None => None,
    };
    if operator_listen.is_some_and(|a| a == listen && a.port() != 0) {
        bail!("operator_api.listen must differ from server.listen ({listen})");
    }
    if raw
        .operator_api
        .admin_token
        .as_ref()
        .is_some_and(|t| t.expose().trim().is_empty())
    {
        bail!("operator_api.admin_token must not be empty: remove the key to run without a token");
    }
    if let Some(url) = &raw.store.url {
        // The value itself is never echoed: it may hold a password.
        if !(url.0.starts_with("postgres://") || url.0.starts_with("postgresql://")) {
            bail!("store.url must be a postgres:// or postgresql:// URL");
        }
        if raw.store.pool_size == 0 {
            bail!("store.pool_size must be at least 1");
        }
    }
    if raw.upstream.api_key_hosts.is_some() {
        bail!("upstream.api_key_hosts lent every held key to each host it listed; name the hosts per key instead: upstream.openai_api_key_hosts, anthropic_api_key_hosts, gemini_api_key_hosts");
    }
    for (key, hosts) in [
        ("auth.hosts", &raw.auth.hosts),
        (
            "upstream.aws_signing_hosts",
            &raw.upstream.aws_signing_hosts,
        ),
        (
            "upstream.openai_api_key_hosts",
            &raw.upstream.openai_api_key_hosts,
        ),
        (
            "upstream.anthropic_api_key_hosts",
            &raw.upstream.anthropic_api_key_hosts,
        ),
        (
            "upstream.gemini_api_key_hosts",
            &raw.upstream.gemini_api_key_hosts,
        ),
        (
            "upstream.google_token_hosts",
            &raw.upstream.google_token_hosts,
        ),
    ] {
        for host in hosts {
            let plain = !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-.:[]_".contains(&b));
            if !plain {
                bail!("{key}: {host:?} is not a host name (no scheme, path or port)");
            }
        }
    }
    if raw.store.sweep_interval_ms < 100 {
        bail!(
            "store.sweep_interval_ms must be at least 100, got {}",
            raw.store.sweep_interval_ms
        );
    }
    let ms = Duration::from_millis;
    Ok(Config {
        listen,
        max_body_bytes: raw.server.max_body_bytes,
        header_read_timeout: ms(raw.server.header_read_timeout_ms.max(1)),
        body_read_timeout: ms(raw.server.body_read_timeout_ms.max(1)),
        write_timeout: ms(raw.server.write_timeout_ms.max(1)),
        max_connections: raw.server.max_connections.max(1),
        max_buffered_bytes: raw.server.max_buffered_bytes,
        shutdown_grace: ms(raw.server.shutdown_grace_ms),
        max_headers: raw.server.max_headers.max(16),
        log_format,
        log_level: raw.server.log_level.clone(),
        upstream: UpstreamConfig {
            base_url: default_base,
            anthropic_base,
            gemini_base,
            connect_timeout: ms(raw.upstream.connect_timeout_ms.max(1)),
            first_byte_timeout: ms(raw.upstream.first_byte_timeout_ms.max(1)),
            idle_timeout: ms(raw.upstream.idle_timeout_ms.max(1)),
            ca_file: raw.upstream.ca_file.clone(),
            pool_idle_timeout: ms(raw.upstream.pool_idle_timeout_ms),
            pool_max_idle_per_host: raw.upstream.pool_max_idle_per_host,
            routes,
            google_token_hosts: raw.upstream.google_token_hosts.clone(),
            aws_signing_hosts: raw.upstream.aws_signing_hosts.clone(),
            held_keys: HeldKeys {
                openai: raw.upstream.openai_api_key.clone(),
                anthropic: raw.upstream.anthropic_api_key.clone(),
                gemini: raw.upstream.gemini_api_key.clone(),
                openai_hosts: raw.upstream.openai_api_key_hosts.clone(),
                anthropic_hosts: raw.upstream.anthropic_api_key_hosts.clone(),
                gemini_hosts: raw.upstream.gemini_api_key_hosts.clone(),
            },
        },
        store: raw.store.clone(),
        failure_mode: e.failure_mode,
        policy: Policy {
            enabled: e.enabled,
            budget: Budget {
                threshold_chars: e.threshold_chars,
                preview_chars: e.preview_chars,
                turn_inline_budget_chars: e.assistant_turn_inline_budget_chars,
                turn_preview_budget_chars: e.assistant_turn_preview_budget_chars,
                min_preview_chars: e.min_preview_chars,
                conversation_inline_budget_chars: e.conversation_inline_budget_chars,
                conversation_floor_chars: e.conversation_floor_chars,
            },
            recall_enabled: raw.recall.enabled,
            withhold_recall_tools: false,
            recall_names: names,
            tools,
            externalize_errors: e.externalize_errors,
            aging: crate::rewrite::aging::Aging {
                after_turns: e.aged_after_turns,
                floor_chars: e.aged_floor_chars,
                min_share_permille: (e.aged_min_share * 1000.0).round() as u32,
                horizon_permille: (e.aged_horizon * 1000.0).round() as u32,
                after_expiry: e.aged_after_expiry,
            },
            first_stub: crate::rewrite::first_stub::Gate {
                horizon_permille: e
                    .first_stub_gate
                    .then(|| (e.first_stub_horizon * 1000.0).round() as u32),
                min_later: e.first_stub_min_later,
            },
            prompt_cache_ttl_ms: e.prompt_cache_ttl_ms,
            window,
            tools_from_start: raw
                .recall
                .tools_from_start
                .iter()
                .map(|p| {
                    Glob::new(p)
                        .with_context(|| format!("recall.tools_from_start: invalid pattern {p:?}"))
                })
                .collect::<Result<_>>()?,
        },
        recall_max_rounds: raw.recall.max_rounds,
        restore_history: raw.recall.restore_history,
        keepalive: ms(raw.recall.keepalive_ms.max(100)),
        operator_api: OperatorApiConfig {
            enabled: raw.operator_api.enabled,
            listen: operator_listen,
            admin_token: raw.operator_api.admin_token.clone(),
        },
        auth: AuthConfig {
            required: raw.auth.required,
            hosts: raw.auth.hosts.clone(),
            run_secret: None,
        },
        pricing: price_table(&raw.pricing)?,
    })
}

/// `[context_window]`, checked: the config's own entries first, then the
/// shipped table.
fn context_window(raw: &RawContextWindow) -> Result<crate::rewrite::window::Window> {
    if !(raw.bytes_per_token.is_finite() && (0.5..=100.0).contains(&raw.bytes_per_token)) {
        bail!(
            "context_window.bytes_per_token must be between 0.5 and 100, got {}",
            raw.bytes_per_token
        );
    }
    if !(0.0..0.9).contains(&raw.margin) {
        bail!(
            "context_window.margin must be at least 0 and under 0.9, got {}",
            raw.margin
        );
    }
    if !(raw.aim > 0.0 && raw.aim <= 1.0 - raw.margin) {
        bail!(
            "context_window.aim must be over 0 and at most 1 - margin ({}), got {}",
            1.0 - raw.margin,
            raw.aim
        );
    }
    let mut table = Vec::with_capacity(raw.models.len());
    for (i, m) in raw.models.iter().enumerate() {
        let pattern = Glob::new(&m.pattern)
            .with_context(|| format!("context_window.models[{i}].match: invalid pattern"))?;
        table.push((pattern, m.tokens));
    }
    table.extend(crate::rewrite::window::default_table());
    Ok(crate::rewrite::window::Window {
        enabled: raw.enabled,
        table,
        default_tokens: raw.default_tokens,
        bytes_per_token_milli: (raw.bytes_per_token * 1000.0).round() as u64,
        margin_permille: (raw.margin * 1000.0).round() as u32,
        aim_permille: (raw.aim * 1000.0).round() as u32,
    })
}

/// The `[[pricing]]` entries, each checked with its key named.
fn price_table(raw: &[RawPrice]) -> Result<crate::pricing::PriceTable> {
    let mut prices = Vec::with_capacity(raw.len());
    for (i, p) in raw.iter().enumerate() {
        let key = format!("pricing[{i}]");
        let pattern =
            Glob::new(&p.pattern).with_context(|| format!("{key}.match: invalid pattern"))?;
        let fields = [
            ("input", Some(p.input)),
            ("cache_read", Some(p.cache_read)),
            ("cache_write", p.cache_write),
            ("output", Some(p.output)),
        ];
        for (name, value) in fields {
            if value.is_some_and(|v| !v.is_finite() || v < 0.0) {
                bail!(
                    "{key}.{name} must be a price of zero or more (US dollars per million tokens)"
                );
            }
        }
        prices.push(crate::pricing::Price {
            pattern,
            input: p.input,
            cache_read: p.cache_read,
            cache_write: p.cache_write,
            output: p.output,
        });
    }
    Ok(crate::pricing::PriceTable(prices))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env() -> Vec<(String, String)> {
        Vec::new()
    }

    #[test]
    fn provider_keys_come_from_their_own_variables_below_toolstubs_and_never_print() {
        let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let c = load(
            None,
            env(&[
                ("OPENAI_API_KEY", "sk-env"),
                ("GOOGLE_API_KEY", "AIza-google"),
                ("GEMINI_API_KEY", "AIza-gemini"),
                ("TOOLSTUB_UPSTREAM_ANTHROPIC_API_KEY", "sk-ant-toolstub"),
                ("ANTHROPIC_API_KEY", "sk-ant-env"),
                ("TOOLSTUB_AUTH_REQUIRED", "true"),
            ]),
            &Overrides::default(),
        )
        .expect("config");
        let held = &c.upstream.held_keys;
        assert_eq!(held.openai.as_ref().map(Secret::expose), Some("sk-env"));
        assert_eq!(
            held.gemini.as_ref().map(Secret::expose),
            Some("AIza-gemini")
        );
        assert_eq!(
            held.anthropic.as_ref().map(Secret::expose),
            Some("sk-ant-toolstub"),
            "TOOLSTUB_* wins"
        );
        assert_eq!(c.auth.required, Some(true));
        let printed = format!("{c:?}");
        for secret in ["sk-env", "AIza-gemini", "sk-ant-toolstub"] {
            assert!(!printed.contains(secret), "{secret} printed");
        }
        let none = load(None, Vec::new(), &Overrides::default()).expect("config");
        assert!(none.upstream.held_keys.openai.is_none());
        assert_eq!(none.auth.required, None);
    }

    #[test]
    fn defaults_match_the_spec() {
        let c = load(None, no_env(), &Overrides::default()).expect("defaults");
        assert_eq!(c.listen.to_string(), "127.0.0.1:8790");
        assert_eq!(c.upstream.base_url.to_string(), "https://api.openai.com/");
        assert_eq!(
            c.upstream
                .anthropic_base
                .as_ref()
                .map(ToString::to_string)
                .as_deref(),
            Some("https://api.anthropic.com/")
        );
        assert_eq!(
            c.upstream
                .gemini_base
                .as_ref()
                .map(ToString::to_string)
                .as_deref(),
            Some("https://generativelanguage.googleapis.com/")
        );
        let one = Overrides {
            upstream: Some("http://127.0.0.1:9".to_string()),
            ..Overrides::default()
        };
        let c = load(None, no_env(), &one).expect("one upstream");
        assert!(c.upstream.anthropic_base.is_none(), "every path goes there");
        assert!(c.upstream.gemini_base.is_none(), "every path goes there");
        assert_eq!(c.store.path, PathBuf::from("toolstub.db"));
        assert_eq!(c.policy.budget, Budget::default());
        assert_eq!(c.failure_mode, FailureMode::PreserveRaw);
        assert_eq!(c.recall_max_rounds, 8);
        assert_eq!(c.max_body_bytes, 64 * 1024 * 1024);
        assert_eq!(c.store.durability, Durability::Full);
        assert_eq!(c.upstream.idle_timeout, Duration::from_secs(300));
        assert_eq!(c.max_connections, 1024);
        assert_eq!(c.max_buffered_bytes, 256 * 1024 * 1024);
    }

    #[test]
    fn the_fault_bounds_come_from_the_environment() {
        let env = vec![
            (
                "TOOLSTUB_UPSTREAM_IDLE_TIMEOUT_MS".to_string(),
                "1500".to_string(),
            ),
            (
                "TOOLSTUB_SERVER_MAX_CONNECTIONS".to_string(),
                "8".to_string(),
            ),
            (
                "TOOLSTUB_SERVER_MAX_BUFFERED_BYTES".to_string(),
                "1048576".to_string(),
            ),
        ];
        let c = load(None, env, &Overrides::default()).expect("env");
        assert_eq!(c.upstream.idle_timeout, Duration::from_millis(1500));
        assert_eq!(c.max_connections, 8);
        assert_eq!(c.max_buffered_bytes, 1 << 20);
    }

    #[test]
    fn durability_is_read_from_the_file_and_the_environment() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[store]\ndurability = \"normal\"\n").expect("write");
        let c = load(Some(&path), no_env(), &Overrides::default()).expect("file");
        assert_eq!(c.store.durability, Durability::Normal);
        let env = vec![("TOOLSTUB_STORE_DURABILITY".to_string(), "full".to_string())];
        let c = load(Some(&path), env, &Overrides::default()).expect("env");
        assert_eq!(c.store.durability, Durability::Full);
        let env = vec![("TOOLSTUB_STORE_DURABILITY".to_string(), "off".to_string())];
        let err = load(None, env, &Overrides::default()).expect_err("unknown level");
        assert!(format!("{err:#}").contains("off"), "{err:#}");
    }

    #[test]
    fn the_shipped_config_file_is_valid_and_default() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/toolstub.toml");
        let c = load(Some(&path), no_env(), &Overrides::default()).expect("config file");
        assert_eq!(c.policy.budget, Budget::default());
        assert_eq!(c.policy.window, crate::rewrite::window::Window::default());
        assert_eq!(c.listen.to_string(), "127.0.0.1:8790");
    }

    #[test]
    fn context_windows_come_from_the_config_before_the_shipped_table() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/toolstub.toml");
        let shipped = std::fs::read_to_string(path).expect("config file");
        let start = shipped
            .find("# [[context_window.models]]")
            .expect("an example");
        let example: String = shipped[start..]
            .lines()
            .take_while(|l| l.starts_with('#'))
            .map(|l| format!("{}\n", l.trim_start_matches("# ")))
            .collect();
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("c.toml");
        std::fs::write(&file, format!("[context_window]\nmargin = 0.2\n{example}")).expect("write");
        let c = load(Some(&file), no_env(), &Overrides::default()).expect("config");
        let w = &c.policy.window;
        assert_eq!(w.tokens_for(Some("claude-sonnet-4-5")), Some(1_000_000));
        assert_eq!(w.tokens_for(Some("claude-opus-4-1")), Some(200_000));
        assert_eq!(w.margin_permille, 200);
        // From the environment, and turned off.
        let env = vec![
            (
                "TOOLSTUB_CONTEXT_WINDOW_MODELS".to_string(),
                r#"[{ match = "mine", tokens = 0 }]"#.to_string(),
            ),
            (
                "TOOLSTUB_CONTEXT_WINDOW_ENABLED".to_string(),
                "false".to_string(),
            ),
        ];
        let c = load(None, env, &Overrides::default()).expect("config");
        assert_eq!(c.policy.window.tokens_for(Some("mine")), None);
        assert!(!c.policy.window.enabled);
        // Bad values name their key.
        for (text, key) in [
            (
                "[context_window]\nbytes_per_token = 0\n",
                "context_window.bytes_per_token",
            ),
            ("[context_window]\nmargin = 1\n", "context_window.margin"),
            ("[context_window]\naim = 0.95\n", "context_window.aim"),
            (
                "[[context_window.models]]\nmatch = \"[\"\ntokens = 1\n",
                "context_window.models[0].match",
            ),
        ] {
            std::fs::write(&file, text).expect("write");
            let err = load(Some(&file), no_env(), &Overrides::default()).expect_err(key);
            assert!(format!("{err:#}").contains(key), "{err:#}");
        }
    }

    #[test]
    fn the_pricing_example_parses_and_bad_prices_name_their_key() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/toolstub.toml");
        let shipped = std::fs::read_to_string(path).expect("config file");
        let start = shipped.find("# [[pricing]]").expect("a pricing example");
        let example: String = shipped[start..]
            .lines()
            .map(|l| l.strip_prefix("# ").unwrap_or(l))
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n");
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("p.toml");
        std::fs::write(&file, &example).expect("write");
        let c = load(Some(&file), no_env(), &Overrides::default()).expect("the example");
        assert_eq!(c.pricing.0.len(), 2);
        let sonnet = c.pricing.price("claude-sonnet-4-5").expect("priced");
        assert_eq!((sonnet.cache_read, sonnet.cache_write), (0.30, Some(3.75)));
        assert!(c
            .pricing
            .price("gpt-5-codex")
            .is_some_and(|p| p.cache_write.is_none()));
        std::fs::write(
            &file,
            "[[pricing]]\nmatch = \"x\"\ninput = 1\ncache_read = -1\noutput = 1\n",
        )
        .expect("write");
        let err = load(Some(&file), no_env(), &Overrides::default()).expect_err("negative");
        assert!(
            format!("{err:#}").contains("pricing[0].cache_read"),
            "{err:#}"
        );
        std::fs::write(
            &file,
            "[[pricing]]\nmatch = \"[\"\ninput = 1\ncache_read = 1\noutput = 1\n",
        )
        .expect("write");
        let err = load(Some(&file), no_env(), &Overrides::default()).expect_err("bad glob");
        assert!(format!("{err:#}").contains("pricing[0].match"), "{err:#}");
    }

    /// The one list of hosts for every held key is refused: a host listed
    /// for one provider's key must not get another's.
    #[test]
    fn hosts_are_listed_per_held_key() {
        let env = vec![(
            "TOOLSTUB_UPSTREAM_API_KEY_HOSTS".to_string(),
            "[\"gw.example\"]".to_string(),
        )];
        let err = format!(
            "{:#}",
            load(None, env, &Overrides::default()).expect_err("refused")
        );
        assert!(err.contains("openai_api_key_hosts"), "{err}");
        let env = vec![(
            "TOOLSTUB_UPSTREAM_ANTHROPIC_API_KEY_HOSTS".to_string(),
            "[\"gw.example\"]".to_string(),
        )];
        let keys = load(None, env, &Overrides::default())
            .expect("per key")
            .upstream
            .held_keys;
        assert_eq!(keys.anthropic_hosts, ["gw.example"]);
        assert!(keys.openai_hosts.is_empty() && keys.gemini_hosts.is_empty());
    }

    /// "Configured secrets never print": not in a TOML error (which quotes
    /// the line), nor in a type error (which quotes the value).
    #[test]
    fn errors_never_quote_a_secret() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[upstream]\nanthropic_api_key = sk-ant-SECRET123\n").expect("write");
        let err = format!(
            "{:#}",
            load(Some(&path), Vec::new(), &Overrides::default()).expect_err("bad TOML")
        );
        assert!(err.contains("at line 2"), "{err}");
        assert!(!err.contains("SECRET123"), "{err}");
        std::fs::write(&path, "[operator_api]\nadmin_token = 83920174\n").expect("write");
        let err = format!(
            "{:#}",
            load(Some(&path), Vec::new(), &Overrides::default()).expect_err("a number")
        );
        assert!(!err.contains("83920174"), "{err}");
        // From the environment an all-digit token is the string it reads.
        let env = vec![(
            "TOOLSTUB_OPERATOR_API_ADMIN_TOKEN".to_string(),
            "83920174".to_string(),
        )];
        let c = load(None, env, &Overrides::default()).expect("a token of digits");
        let token = c.operator_api.admin_token.expect("set");
        assert_eq!(token.expose(), "83920174");
    }

    #[test]
    fn precedence_is_file_then_env_then_flags() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "[server]\nlisten = \"127.0.0.1:1\"\n[externalization]\nthreshold_chars = 5\n[externalization.mime_by_tool]\nfetch = \"application/json\"\n",
        )
        .expect("write");
        let env = vec![
            (
                "TOOLSTUB_SERVER_LISTEN".to_string(),
                "127.0.0.1:2".to_string(),
            ),
            (
                "TOOLSTUB_EXTERNALIZATION_THRESHOLD_CHARS".to_string(),
                "7".to_string(),
            ),
            (
                "TOOLSTUB_EXTERNALIZATION_FAILURE_MODE".to_string(),
                "reject".to_string(),
            ),
            ("OTHER".to_string(), "ignored".to_string()),
        ];
        let c = load(Some(&path), env.clone(), &Overrides::default()).expect("env");
        assert_eq!(c.listen.to_string(), "127.0.0.1:2");
        assert_eq!(c.policy.budget.threshold_chars, 7);
        assert_eq!(c.failure_mode, FailureMode::Reject);
        assert_eq!(
            c.policy.tools.resolve(Some("fetch"), 1).mime.as_deref(),
            Some("application/json")
        );
        let flags = Overrides {
            listen: Some("127.0.0.1:3".to_string()),
            ..Overrides::default()
        };
        let c = load(Some(&path), env, &flags).expect("flags");
        assert_eq!(c.listen.to_string(), "127.0.0.1:3");
    }

    #[test]
    fn defaults_give_way_to_the_file_the_environment_and_flags() {
        let defaults = Overrides {
            db: Some(PathBuf::from("/data/wrap.db")),
            ..Overrides::default()
        };
        let c =
            load_with_defaults(None, no_env(), &defaults, &Overrides::default()).expect("defaults");
        assert_eq!(c.store.path, PathBuf::from("/data/wrap.db"));
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[store]\nretention_days = 2\n").expect("write");
        let c = load_with_defaults(Some(&path), no_env(), &defaults, &Overrides::default())
            .expect("a file without store.path");
        assert_eq!(
            c.store.path,
            PathBuf::from("/data/wrap.db"),
            "kept beside the file's keys"
        );
        assert_eq!(c.store.retention_days, 2);
        std::fs::write(&path, "[store]\npath = \"file.db\"\n").expect("write");
        let c = load_with_defaults(Some(&path), no_env(), &defaults, &Overrides::default())
            .expect("file");
        assert_eq!(c.store.path, PathBuf::from("file.db"));
        let env = vec![("TOOLSTUB_STORE_PATH".to_string(), "env.db".to_string())];
        let c = load_with_defaults(None, env, &defaults, &Overrides::default()).expect("env");
        assert_eq!(c.store.path, PathBuf::from("env.db"));
        let flags = Overrides {
            db: Some(PathBuf::from("flag.db")),
            ..Overrides::default()
        };
        let c = load_with_defaults(Some(&path), no_env(), &defaults, &flags).expect("flags");
        assert_eq!(c.store.path, PathBuf::from("flag.db"));
    }

    #[test]
    fn unknown_keys_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[server]\nlisten_addr = \"x\"\n").expect("write");
        let err = load(Some(&path), no_env(), &Overrides::default()).expect_err("unknown key");
        assert!(format!("{err:#}").contains("listen_addr"), "{err:#}");
        let err = load(
            None,
            vec![("TOOLSTUB_NOPE_X".to_string(), "1".to_string())],
            &Overrides::default(),
        )
        .expect_err("unknown env");
        assert!(format!("{err:#}").contains("TOOLSTUB_NOPE_X"));
    }

    #[test]
    fn invalid_values_are_explained() {
        let bad = Overrides {
            upstream: Some("ftp://x".to_string()),
            ..Overrides::default()
        };
        let err = load(None, no_env(), &bad).expect_err("bad scheme");
        assert!(format!("{err:#}").contains("http"));
    }

    #[test]
    fn routes_come_from_the_file_the_environment_and_flags() {
        let env = vec![(
            "TOOLSTUB_UPSTREAM_ROUTES".to_string(),
            r#"{ "/anthropic/" = "https://api.anthropic.com" }"#.to_string(),
        )];
        let flags = Overrides {
            routes: vec!["/a/b=http://127.0.0.1:9/base".to_string()],
            ..Overrides::default()
        };
        let c = load(None, env, &flags).expect("routes");
        let routes: Vec<(String, String)> = c
            .upstream
            .routes
            .iter()
            .map(|(p, u)| (p.clone(), u.to_string()))
            .collect();
        assert_eq!(
            routes,
            [
                (
                    "/anthropic".to_string(),
                    "https://api.anthropic.com/".to_string()
                ),
                ("/a/b".to_string(), "http://127.0.0.1:9/base".to_string()),
            ],
            "longest prefix first, trailing slash dropped"
        );
        for bad in [
            "anthropic=https://x",
            "/toolstub=https://x",
            "/a=ftp://x",
            "/a b=https://x",
            "/a",
        ] {
            let flags = Overrides {
                routes: vec![bad.to_string()],
                ..Overrides::default()
            };
            let err = load(None, no_env(), &flags).expect_err(bad);
            let text = format!("{err:#}");
            assert!(text.contains("route"), "{bad}: {text}");
        }
        let c = load(None, no_env(), &Overrides::default()).expect("defaults");
        assert!(!c.restore_history);
        assert_eq!(c.keepalive, Duration::from_secs(5));
        assert!(!c.policy.externalize_errors);
    }

    #[test]
    fn operator_api_settings_are_checked() {
        let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        for token in ["\"\"", "\"  \""] {
            let err = load(
                None,
                env(&[("TOOLSTUB_OPERATOR_API_ADMIN_TOKEN", token)]),
                &Overrides::default(),
            )
            .expect_err("empty token");
            assert!(format!("{err:#}").contains("admin_token"), "{err:#}");
        }
        let c = load(
            None,
            env(&[
                ("TOOLSTUB_OPERATOR_API_ADMIN_TOKEN", "s3cret"),
                ("TOOLSTUB_OPERATOR_API_LISTEN", "127.0.0.1:8791"),
            ]),
            &Overrides::default(),
        )
        .expect("token and listen");
        assert_eq!(
            c.operator_api.admin_token.as_ref().map(Secret::expose),
            Some("s3cret")
        );
        assert_eq!(
            c.operator_api.listen.map(|a| a.to_string()).as_deref(),
            Some("127.0.0.1:8791")
        );
        let err = load(
            None,
            env(&[("TOOLSTUB_OPERATOR_API_LISTEN", "127.0.0.1:8790")]),
            &Overrides::default(),
        )
        .expect_err("same address");
        assert!(format!("{err:#}").contains("differ"), "{err:#}");
        let err = load(
            None,
            env(&[("TOOLSTUB_OPERATOR_API_LISTEN", "nowhere")]),
            &Overrides::default(),
        )
        .expect_err("bad address");
        assert!(
            format!("{err:#}").contains("operator_api.listen"),
            "{err:#}"
        );
        let err = load(
            None,
            env(&[("TOOLSTUB_STORE_SWEEP_INTERVAL_MS", "5")]),
            &Overrides::default(),
        )
        .expect_err("too short");
        assert!(format!("{err:#}").contains("sweep_interval_ms"), "{err:#}");
    }

    #[test]
    fn tool_rules_are_read_in_file_order_with_the_older_mime_table_after_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            r#"
[externalization]
conversation_inline_budget_chars = 150000
conversation_floor_chars = 6000

[[externalization.tools]]
match = "mcp__github__*"
externalize = "never"

[[externalization.tools]]
match = "Read"
conversation_budget = false
threshold_chars = 40000

[[externalization.tools]]
match = "fetch_*"
mime = "text/plain"

[externalization.mime_by_tool]
fetch_json = "application/json"
query = "text/csv"
"#,
        )
        .expect("write");
        let c = load(Some(&path), no_env(), &Overrides::default()).expect("config");
        let b = &c.policy.budget;
        assert_eq!(
            (
                b.conversation_inline_budget_chars,
                b.conversation_floor_chars
            ),
            (150_000, 6_000)
        );
        let patterns: Vec<&str> = c
            .policy
            .tools
            .0
            .iter()
            .map(|r| r.pattern.as_str())
            .collect();
        assert_eq!(
            patterns,
            ["mcp__github__*", "Read", "fetch_*", "fetch_json", "query"]
        );
        let resolve = |name: &str| c.policy.tools.resolve(Some(name), 20_000);
        assert_eq!(
            resolve("mcp__github__search").externalize,
            Externalize::Never
        );
        let read = resolve("Read");
        assert_eq!(
            (read.threshold_chars, read.conversation_budget),
            (40_000, false)
        );
        assert_eq!(
            resolve("fetch_json").mime.as_deref(),
            Some("text/plain"),
            "a [[tools]] rule comes before the older table"
        );
        assert_eq!(resolve("query").mime.as_deref(), Some("text/csv"));
        assert_eq!(
            resolve("Bash"),
            ToolRules::default().resolve(Some("Bash"), 20_000)
        );
        // The same rules from the environment.
        let env = vec![(
            "TOOLSTUB_EXTERNALIZATION_TOOLS".to_string(),
            r#"[{ match = "Bash", externalize = "never" }, { match = "*", threshold_chars = 5000 }]"#
                .to_string(),
        )];
        let c = load(None, env, &Overrides::default()).expect("env");
        let bash = c.policy.tools.resolve(Some("Bash"), 20_000);
        assert_eq!(
            (bash.externalize, bash.threshold_chars),
            (Externalize::Never, 5_000)
        );
        assert_eq!(
            c.policy.budget.conversation_inline_budget_chars, 0,
            "off by default"
        );
    }

    #[test]
    fn bad_tool_rules_stop_the_start_up_with_the_key_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        for (rules, says) in [
            (
                "[[externalization.tools]]\nmatch = \"Read\"\nthreshold_chars = 1\n[[externalization.tools]]\nmatch = \"mcp__[gh]*\"\nexternalize = \"never\"\n",
                "externalization.tools[1].match: invalid pattern: \"mcp__[gh]*\": '[' is not supported",
            ),
            (
                "[[externalization.tools]]\nmatch = \"\"\nexternalize = \"never\"\n",
                "externalization.tools[0].match: invalid pattern: the pattern is empty",
            ),
            (
                "[[externalization.tools]]\nmatch = \"Read\"\n",
                "externalization.tools[0] (match = \"Read\") sets nothing",
            ),
            (
                "[[externalization.tools]]\nmatch = \"Read\"\nthreshold_chars = 0\n",
                "externalization.tools[0].threshold_chars must be at least 1",
            ),
            (
                "[[externalization.tools]]\nmatch = \"Read\"\nexternalize = \"sometimes\"\n",
                "sometimes",
            ),
            (
                "[[externalization.tools]]\nmatch = \"Read\"\nthreshold = 5\n",
                "threshold",
            ),
            (
                "[[externalization.tools]]\npattern = \"Read\"\nmime = \"text/plain\"\n",
                "pattern",
            ),
        ] {
            std::fs::write(&path, rules).expect("write");
            let err = load(Some(&path), no_env(), &Overrides::default()).expect_err(rules);
            let text = format!("{err:#}");
            assert!(text.contains(says), "{rules}\n{text}");
        }
    }
}
