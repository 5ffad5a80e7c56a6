//! `toolstub wrap [OPTIONS] -- COMMAND [ARGS...]`: one agent run through
//! toolstub with one command.
//!
//! The proxy starts in this process on a free loopback port (or a running
//! one is used, `--proxy URL`); COMMAND runs as a child with this terminal
//! (stdin, stdout and stderr inherited; the proxy logs only to `--log-file`)
//! and pointed at the proxy; when it has exited the proxy drains, a short
//! [`Summary`] goes to standard error, and wrap exits with the child's code
//! (128 + the signal's number if a signal ended it).
//!
//! How the child is pointed at the proxy ([`Endpoints`]):
//! - every child gets `ANTHROPIC_BASE_URL` and `OPENAI_BASE_URL` (Claude
//!   Code, the Anthropic and OpenAI SDKs, the Agents SDK, most tools) and
//!   `GOOGLE_GEMINI_BASE_URL` (Gemini CLI; nothing is written to
//!   `~/.gemini`);
//! - Claude Code on the clouds keeps its choice: every child gets
//!   `ANTHROPIC_VERTEX_BASE_URL` (Vertex AI, `CLAUDE_CODE_USE_VERTEX`: the
//!   proxy sends each path to the region it names), and
//!   `ANTHROPIC_FOUNDRY_BASE_URL` when the environment names a Foundry
//!   endpoint (`ANTHROPIC_FOUNDRY_BASE_URL`, or the resource of
//!   `ANTHROPIC_FOUNDRY_RESOURCE`), and `ANTHROPIC_BEDROCK_BASE_URL`
//!   (Amazon Bedrock, `CLAUDE_CODE_USE_BEDROCK`: the proxy sends it to the
//!   runtime endpoint of `AWS_REGION` and signs it with the AWS credentials
//!   of the environment, the child told not to sign, with
//!   `CLAUDE_CODE_SKIP_BEDROCK_AUTH=1`, unless it holds a Bedrock API key:
//!   [`signs_for_bedrock_child`]);
//! - a program named `opencode` gets `OPENCODE_CONFIG_CONTENT` with its
//!   Anthropic, OpenAI and Google providers' `baseURL` at the proxy (merged
//!   into any inline config of the user's, whose own `baseURL`s stay);
//! - a program named `codex` also gets `-c` options, right after the
//!   program name, that select a provider of its own whose `base_url` is the
//!   proxy (`wire_api = "responses"`, no WebSocket). Codex ignores
//!   `OPENAI_BASE_URL`, and its built-in provider moved elsewhere
//!   (`openai_base_url`) opens a WebSocket first, which the proxy can only
//!   tunnel, not rewrite. Nothing is written to `~/.codex`.
//!
//! Where upstream goes: as `serve` has it, unless the child's environment
//! already names an endpoint: a non-empty `ANTHROPIC_BASE_URL`,
//! `OPENAI_BASE_URL`, `GOOGLE_GEMINI_BASE_URL`, `ANTHROPIC_VERTEX_BASE_URL`
//! `ANTHROPIC_FOUNDRY_BASE_URL` or `ANTHROPIC_BEDROCK_BASE_URL` becomes the
//! upstream of that API (through a route prefix of the proxy,
//! [`ANTHROPIC_ROUTE`] / [`OPENAI_ROUTE`] / [`GEMINI_ROUTE`] /
//! [`VERTEX_ROUTE`] / [`FOUNDRY_ROUTE`] / [`BEDROCK_ROUTE`]), so wrap
//! never sends traffic elsewhere than the child would have. `--upstream`
//! wins over both, and wrap says so.
//!
//! Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to wrap by a process
//! (`kill`) are forwarded to the child; the same signals sent by the
//! terminal (Ctrl-C) are not, because the child, in the same foreground
//! process group, has received them already (forwarding would deliver a
//! second Ctrl-C, which Claude Code takes as "exit").
//!
//! Its store, when nothing names another, is `toolstub.db` in the user's
//! data folder ([`default_store`]); the folders wrap makes for it are
//! created 0700 and the database 0600 (by the store), so no other user of
//! the machine reads what the agent's tools printed. Folders that exist
//! keep their mode.
//!
//! Architecture invariant: this module owns the child process and the
//! summary; it knows no wire format and runs the proxy as tests do, through
//! [`crate::proxy::Server`].

use crate::config::Overrides;
use crate::proxy::Server;
use anyhow::{bail, Context, Result};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// The route prefix through which the child's own `OPENAI_BASE_URL` is
/// reached.
pub const OPENAI_ROUTE: &str = "/wrap/openai";
/// The route prefix through which the child's own `ANTHROPIC_BASE_URL` is
/// reached.
pub const ANTHROPIC_ROUTE: &str = "/wrap/anthropic";
/// The route prefix through which the child's own `GOOGLE_GEMINI_BASE_URL`
/// is reached.
pub const GEMINI_ROUTE: &str = "/wrap/gemini";
/// The route prefix through which the child's own
/// `ANTHROPIC_VERTEX_BASE_URL` is reached.
pub const VERTEX_ROUTE: &str = "/wrap/vertex";
/// The route prefix through which the child's Foundry endpoint is reached.
pub const FOUNDRY_ROUTE: &str = "/wrap/foundry";
/// The route prefix through which the child's own
/// `ANTHROPIC_BEDROCK_BASE_URL` is reached.
pub const BEDROCK_ROUTE: &str = "/wrap/bedrock";

/// wrap's own failure before the command ran (as `env` and `docker run`).
const FAILED: u8 = 125;
/// The command exists but cannot be run.
const NOT_EXECUTABLE: u8 = 126;
/// The command was not found.
const NOT_FOUND: u8 = 127;

/// How long a running proxy (`--proxy`) may take to answer.
const PROXY_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the child's proxy comes from.
#[derive(Debug)]
pub enum ProxySource {
    /// Started here, with `serve`'s settings.
    Own {
        config_file: Option<PathBuf>,
        overrides: Overrides,
        log_file: Option<PathBuf>,
    },
    /// A toolstub already running at this base URL.
    Running(String),
}

/// One `toolstub wrap` invocation.
#[derive(Debug)]
pub struct Wrap {
    pub proxy: ProxySource,
    /// No summary at the end.
    pub quiet: bool,
    /// The program and its arguments.
    pub command: Vec<OsString>,
}

/// The command could not be started; its exit code says why.
#[derive(Debug, thiserror::Error)]
#[error("cannot run {program}")]
struct SpawnFailed {
    program: String,
    code: u8,
    source: std::io::Error,
}

/// Runs `wrap` and returns the child's exit code (or wrap's own: 125 when
/// it failed, 126 / 127 when the command cannot run / was not found).
pub fn main(wrap: Wrap) -> ExitCode {
    match run(wrap) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("toolstub wrap: {err:#}");
            let code = err.downcast_ref::<SpawnFailed>().map_or(FAILED, |e| e.code);
            ExitCode::from(code)
        }
    }
}

fn run(wrap: Wrap) -> Result<u8> {
    let Some((program, args)) = wrap.command.split_first() else {
        bail!("no command to run: toolstub wrap [OPTIONS] -- COMMAND [ARGS...]");
    };
    #[cfg(unix)]
    signals::install().context("installing the signal handlers")?;
    let inherited = Inherited::from_env();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let proxy = start(wrap.proxy, &inherited).await?;
        for note in &proxy.notes {
            say(&format!("toolstub wrap: {note}"));
        }
        let command = child_command(program, args, &proxy.endpoints, &inherited);
        let status = run_child(command, program).await;
        let summary = proxy.running.finish().await;
        // A command that never ran has nothing to sum up.
        if !wrap.quiet && status.is_ok() {
            match summary {
                Ok(lines) => lines
                    .iter()
                    .for_each(|line| say(&format!("toolstub: {line}"))),
                Err(err) => say(&format!("toolstub wrap: no summary: {err:#}")),
            }
        }
        status
    })
}

/// One line on standard error; a closed one is no reason to fail.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// The variables of wrap's environment that decide where the child's
/// requests go.
#[derive(Clone, Debug, Default)]
struct Inherited {
    openai_base_url: Option<String>,
    anthropic_base_url: Option<String>,
    gemini_base_url: Option<String>,
    vertex_base_url: Option<String>,
    /// `ANTHROPIC_FOUNDRY_BASE_URL`, or the one Claude Code makes of
    /// `ANTHROPIC_FOUNDRY_RESOURCE`.
    foundry_base_url: Option<String>,
    bedrock_base_url: Option<String>,
    /// `OPENAI_API_KEY` is set: Codex's provider reads its key from it.
    openai_api_key: bool,
    /// An HTTP proxy variable is set: the child must not send loopback
    /// requests through it.
    http_proxy: bool,
}

impl Inherited {
    fn from_env() -> Inherited {
        let get = |name: &str| {
            std::env::var_os(name)
                .and_then(|v| v.into_string().ok())
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        Inherited {
            openai_base_url: get("OPENAI_BASE_URL"),
            anthropic_base_url: get("ANTHROPIC_BASE_URL"),
            gemini_base_url: get("GOOGLE_GEMINI_BASE_URL"),
            vertex_base_url: get("ANTHROPIC_VERTEX_BASE_URL"),
            foundry_base_url: get("ANTHROPIC_FOUNDRY_BASE_URL").or_else(|| {
                get("ANTHROPIC_FOUNDRY_RESOURCE")
                    .map(|r| format!("https://{r}.services.ai.azure.com/anthropic"))
            }),
            bedrock_base_url: get("ANTHROPIC_BEDROCK_BASE_URL"),
            openai_api_key: get("OPENAI_API_KEY").is_some(),
            http_proxy: ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"]
                .iter()
                .any(|n| get(n).is_some() || get(&n.to_ascii_lowercase()).is_some()),
        }
    }
}

/// Where the child's clients are pointed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Endpoints {
    /// The proxy's base URL, `http://127.0.0.1:PORT`.
    base: String,
    /// `OPENAI_BASE_URL` and Codex's provider `base_url`.
    openai: String,
    /// `ANTHROPIC_BASE_URL`.
    anthropic: String,
    /// `GOOGLE_GEMINI_BASE_URL` (Gemini CLI adds `/v1beta/...`).
    gemini: String,
    /// `ANTHROPIC_VERTEX_BASE_URL` (Claude Code adds `/projects/...`).
    vertex: String,
    /// `ANTHROPIC_FOUNDRY_BASE_URL` (Claude Code adds `/v1/messages`), when
    /// the proxy knows where Foundry requests go.
    foundry: Option<String>,
    /// `ANTHROPIC_BEDROCK_BASE_URL` (Claude Code adds `/model/...`).
    bedrock: String,
    /// The run's secret, in every URL above when set.
    run_secret: Option<String>,
}

impl Endpoints {
    fn plain(base: &str) -> Endpoints {
        let base = base.trim_end_matches('/').to_string();
        Endpoints {
            openai: format!("{base}/v1"),
            anthropic: base.clone(),
            gemini: base.clone(),
            vertex: format!("{base}/v1"),
            foundry: None,
            bedrock: base.clone(),
            base,
            run_secret: None,
        }
    }
}

/// A proxy ready for the child.
struct Started {
    endpoints: Endpoints,
    running: Running,
    /// Said once on standard error before the child starts.
    notes: Vec<String>,
}

enum Running {
    Own {
        server: Server,
        /// The SQLite file, named in the summary.
        store: Option<PathBuf>,
    },
    Remote {
        url: String,
        before: Summary,
    },
}

impl Running {
    /// Drains an own proxy and summarizes what it did.
    async fn finish(self) -> Result<Vec<String>> {
        match self {
            Running::Own { server, store } => {
                let app = server.app.clone();
                server.shutdown().await;
                let summary = Summary::from_metrics(&app.metrics.render());
                Ok(summary.lines(store.as_deref(), None))
            }
            Running::Remote { url, before } => {
                let after = remote_summary(&url).await?;
                Ok(after.since(&before).lines(None, Some(&url)))
            }
        }
    }
}

async fn start(source: ProxySource, inherited: &Inherited) -> Result<Started> {
    match source {
        ProxySource::Running(url) => {
            let url = url.trim_end_matches('/').to_string();
            let (status, _) = crate::proxy::get_text(&url, "/healthz", PROXY_TIMEOUT)
                .await
                .with_context(|| format!("no toolstub answers at {url} (--proxy)"))?;
            if !status.is_success() {
                bail!("{url}/healthz answered {status}: is it a toolstub? (--proxy)");
            }
            let before = remote_summary(&url).await?;
            let mut notes = Vec::new();
            for (name, value) in inherited.base_urls() {
                notes.push(format!(
                    "{name}={value} is replaced by the proxy at {url}: its upstream applies"
                ));
            }
            Ok(Started {
                endpoints: Endpoints::plain(&url),
                running: Running::Remote { url, before },
                notes,
            })
        }
        ProxySource::Own {
            config_file,
            mut overrides,
            log_file,
        } => {
            let mut notes = Vec::new();
            let routes = match &overrides.upstream {
                Some(upstream) => {
                    for (name, value) in inherited.base_urls() {
                        notes.push(format!(
                            "{name}={value} is not used: --upstream sends every request to {upstream}"
                        ));
                    }
                    InheritedRoutes::default()
                }
                None => InheritedRoutes::of(inherited)?,
            };
            // The child's endpoints first: a --route of the same prefix wins.
            let mut all = routes.routes.clone();
            all.append(&mut overrides.routes);
            overrides.routes = all;
            overrides
                .listen
                .get_or_insert_with(|| "127.0.0.1:0".to_string());
            let defaults = Overrides {
                db: default_store(),
                ..Overrides::default()
            };
            let config = crate::config::load_with_defaults(
                config_file.as_deref(),
                utf8_env(),
                &defaults,
                &overrides,
            )?;
            if config.store.url.is_none() {
                if let Some(dir) = config
                    .store
                    .path
                    .parent()
                    .filter(|d| !d.as_os_str().is_empty())
                {
                    create_private_dir(dir).with_context(|| {
                        format!("cannot create the store's directory {}", dir.display())
                    })?;
                }
            }
            if let Some(path) = &log_file {
                log_to(&config, path)?;
            }
            crate::proxy::memory::configure_malloc();
            let store = config
                .store
                .url
                .is_none()
                .then(|| config.store.path.clone());
            let upstream = config.upstream.base_url.to_string();
            // The child's base URLs carry a secret of this run's: the proxy
            // answers nothing without it, so no other process on the
            // machine can use the credentials it lends (AWS signing, a
            // Google token, a held provider key) nor read the run's outputs.
            let secret = crate::auth::random_secret().context("making the run's secret")?;
            let mut config = config;
            config.auth.run_secret = Some(crate::config::Secret::new(secret.clone()));
            let server = Server::start(config).await?;
            tracing::info!(listen = %server.addr, %upstream, routes = ?routes.routes, db = %server.app.store.describe(), "toolstub wrap: proxy started");
            crate::proxy::memory::spawn_trimmer();
            let mut endpoints = Endpoints::plain(&format!(
                "http://{}{}{secret}",
                server.addr,
                crate::proxy::RUN_PREFIX
            ));
            endpoints.run_secret = Some(secret);
            if let Some(path) = &routes.openai_path {
                endpoints.openai = format!("{}{OPENAI_ROUTE}{path}", endpoints.base);
            }
            if let Some(path) = &routes.anthropic_path {
                endpoints.anthropic = format!("{}{ANTHROPIC_ROUTE}{path}", endpoints.base);
            }
            if let Some(path) = &routes.gemini_path {
                endpoints.gemini = format!("{}{GEMINI_ROUTE}{path}", endpoints.base);
            }
            if let Some(path) = &routes.vertex_path {
                endpoints.vertex = format!("{}{VERTEX_ROUTE}{path}", endpoints.base);
            }
            if let Some(path) = &routes.bedrock_path {
                endpoints.bedrock = format!("{}{BEDROCK_ROUTE}{path}", endpoints.base);
            }
            if let Some(path) = &routes.foundry_path {
                endpoints.foundry = Some(format!("{}{FOUNDRY_ROUTE}{path}", endpoints.base));
            }
            Ok(Started {
                endpoints,
                running: Running::Own { server, store },
                notes,
            })
        }
    }
}

impl Inherited {
    fn base_urls(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            ("OPENAI_BASE_URL", self.openai_base_url.as_deref()),
            ("ANTHROPIC_BASE_URL", self.anthropic_base_url.as_deref()),
            ("GOOGLE_GEMINI_BASE_URL", self.gemini_base_url.as_deref()),
            ("ANTHROPIC_VERTEX_BASE_URL", self.vertex_base_url.as_deref()),
            (
                "ANTHROPIC_FOUNDRY_BASE_URL",
                self.foundry_base_url.as_deref(),
            ),
            (
                "ANTHROPIC_BEDROCK_BASE_URL",
                self.bedrock_base_url.as_deref(),
            ),
        ]
        .into_iter()
        .filter_map(|(name, value)| value.map(|v| (name, v)))
    }
}

/// The routes that keep the child's own endpoints: `PREFIX=ORIGIN` for the
/// proxy's config, and the path the child's base URL keeps after the prefix
/// (`https://gw.example/openai/v1` becomes route `/wrap/openai` to
/// `https://gw.example` and child URL `<proxy>/wrap/openai/openai/v1`), so
/// every request reaches exactly the URL it would have without wrap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct InheritedRoutes {
    routes: Vec<String>,
    openai_path: Option<String>,
    anthropic_path: Option<String>,
    gemini_path: Option<String>,
    vertex_path: Option<String>,
    foundry_path: Option<String>,
    bedrock_path: Option<String>,
}

impl InheritedRoutes {
    fn of(inherited: &Inherited) -> Result<InheritedRoutes> {
        let mut out = InheritedRoutes::default();
        for (name, value) in inherited.base_urls() {
            let (origin, path) = split_base_url(value)
                .with_context(|| format!("{name}={value} cannot be the proxy's upstream"))?;
            let prefix = match name {
                "OPENAI_BASE_URL" => {
                    out.openai_path = Some(path);
                    OPENAI_ROUTE
                }
                "GOOGLE_GEMINI_BASE_URL" => {
                    out.gemini_path = Some(path);
                    GEMINI_ROUTE
                }
                "ANTHROPIC_VERTEX_BASE_URL" => {
                    out.vertex_path = Some(path);
                    VERTEX_ROUTE
                }
                "ANTHROPIC_FOUNDRY_BASE_URL" => {
                    out.foundry_path = Some(path);
                    FOUNDRY_ROUTE
                }
                "ANTHROPIC_BEDROCK_BASE_URL" => {
                    out.bedrock_path = Some(path);
                    BEDROCK_ROUTE
                }
                _ => {
                    out.anthropic_path = Some(path);
                    ANTHROPIC_ROUTE
                }
            };
            out.routes.push(format!("{prefix}={origin}"));
        }
        Ok(out)
    }
}

/// `https://host:port/some/path/` as (`https://host:port`, `/some/path`).
fn split_base_url(url: &str) -> Result<(String, String)> {
    let uri: http::Uri = url.parse().context("not a URL")?;
    let scheme = match uri.scheme_str() {
        Some(s @ ("http" | "https")) => s,
        _ => bail!("not an http:// or https:// URL"),
    };
    let Some(authority) = uri.authority() else {
        bail!("no host");
    };
    if uri.query().is_some() {
        bail!("a base URL with a query is not supported");
    }
    let path = uri.path().trim_end_matches('/').to_string();
    Ok((format!("{scheme}://{authority}"), path))
}

/// Creates `dir` and its missing parents with mode 0700 (the store's
/// folder is its owner's alone, as the store's files are); folders that
/// exist keep their mode.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// wrap's store when nothing else names one: `toolstub.db` in the user's
/// data directory (`$XDG_DATA_HOME/toolstub`, else
/// `~/.local/share/toolstub`), so running an agent leaves no file in the
/// project it works on; `./toolstub.db` when there is no home.
pub(crate) fn default_store() -> Option<PathBuf> {
    let dir = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|home| home.join(".local").join("share"))
        })?;
    Some(dir.join("toolstub").join("toolstub.db"))
}

/// The environment for the configuration (`TOOLSTUB_*`); a variable that
/// is not UTF-8 is none of toolstub's.
fn utf8_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// The proxy's log, appended to `path` (never to the child's terminal).
fn log_to(config: &crate::config::Config, path: &Path) -> Result<()> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::EnvFilter;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open the log file {}", path.display()))?;
    let filter = EnvFilter::try_new(&config.log_level).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(file));
    let headers = crate::logging::no_client_headers();
    let installed = match config.log_format {
        crate::config::LogFormat::Json => builder.json().finish().with(headers).try_init(),
        crate::config::LogFormat::Text => builder.finish().with(headers).try_init(),
    };
    installed.map_err(|e| anyhow::anyhow!("cannot start logging: {e}"))
}

/// The child: the command with the proxy's endpoints in its environment
/// (and, for Codex, in its options).
fn child_command(
    program: &OsStr,
    args: &[OsString],
    endpoints: &Endpoints,
    inherited: &Inherited,
) -> std::process::Command {
    let mut command = std::process::Command::new(program);
    if is_codex(program) {
        // Codex's provider is given in its arguments, which every user of
        // the machine can read (`ps`): the URL there leaves the run's
        // secret out, and Codex sends it in a header from its environment.
        let secret = endpoints.run_secret.as_deref();
        let url = match secret {
            Some(secret) => {
                endpoints
                    .openai
                    .replacen(&format!("{}{secret}", crate::proxy::RUN_PREFIX), "", 1)
            }
            None => endpoints.openai.clone(),
        };
        command.args(codex_options(
            &url,
            inherited.openai_api_key,
            secret.is_some(),
        ));
        if let Some(secret) = secret {
            command.env(CODEX_SECRET_VARIABLE, secret);
        }
    }
    if is_opencode(program) {
        let existing = std::env::var("OPENCODE_CONFIG_CONTENT").ok();
        let own = std::env::current_dir()
            .map(|cwd| opencode_file_base_urls(&cwd))
            .unwrap_or_default();
        if let Some(config) = opencode_config(existing.as_deref(), endpoints, &own) {
            command.env("OPENCODE_CONFIG_CONTENT", config);
        }
    }
    command
        .args(args)
        .env("OPENAI_BASE_URL", &endpoints.openai)
        .env("ANTHROPIC_BASE_URL", &endpoints.anthropic)
        .env("GOOGLE_GEMINI_BASE_URL", &endpoints.gemini)
        .env("ANTHROPIC_VERTEX_BASE_URL", &endpoints.vertex)
        .env("ANTHROPIC_BEDROCK_BASE_URL", &endpoints.bedrock);
    if let Some(foundry) = &endpoints.foundry {
        command.env("ANTHROPIC_FOUNDRY_BASE_URL", foundry);
    }
    if signs_for_bedrock_child() {
        command.env("CLAUDE_CODE_SKIP_BEDROCK_AUTH", "1");
    }
    if inherited.http_proxy {
        for name in ["NO_PROXY", "no_proxy"] {
            let current = std::env::var(name).unwrap_or_default();
            command.env(name, with_no_proxy_host(&current, &endpoints.base));
        }
    }
    command
}

/// Whether the proxy, not Claude Code, signs the child's Bedrock requests:
/// Claude Code on Bedrock (`CLAUDE_CODE_USE_BEDROCK`) that would sign with
/// the environment's AWS credentials (no Bedrock API key, and the user did
/// not choose `CLAUDE_CODE_SKIP_BEDROCK_AUTH` either way). The proxy reads
/// the same credentials, but an SSO, assume-role or credential-process
/// profile hands each process keys of its own, so a signature the child
/// made would not check against the proxy's and every request would go
/// out signed for the proxy's address (403). Unsigned, the child's
/// requests (admitted by the run secret) are signed by the proxy.
fn signs_for_bedrock_child() -> bool {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    set("CLAUDE_CODE_USE_BEDROCK")
        && !set("AWS_BEARER_TOKEN_BEDROCK")
        && std::env::var_os("CLAUDE_CODE_SKIP_BEDROCK_AUTH").is_none()
}

/// `current` (a NO_PROXY list) with the proxy's host added, unless listed.
fn with_no_proxy_host(current: &str, base: &str) -> String {
    let host = base
        .parse::<http::Uri>()
        .ok()
        .and_then(|u| u.host().map(str::to_string))
        .unwrap_or_else(|| "127.0.0.1".to_string());
    let listed = current.split(',').any(|h| h.trim() == host);
    match (listed, current.trim().is_empty()) {
        (true, _) => current.to_string(),
        (false, true) => host,
        (false, false) => format!("{current},{host}"),
    }
}

/// A program named `codex` (a path to one included).
fn is_codex(program: &OsStr) -> bool {
    Path::new(program)
        .file_name()
        .is_some_and(|name| name == "codex")
}

fn is_opencode(program: &OsStr) -> bool {
    Path::new(program)
        .file_name()
        .is_some_and(|name| name == "opencode")
}

/// opencode's inline configuration (`OPENCODE_CONFIG_CONTENT`, merged over
/// its config files) with the `baseURL` of its Anthropic, OpenAI and Google
/// providers at the proxy, the rest of `existing` kept. Its providers (the
/// AI SDK's) append the API's path to a base URL that ends in the version
/// (`.../v1`, `.../v1beta`), where Claude Code's ends before it. A
/// provider whose `baseURL` `existing` sets, or the config files do
/// (`own`), is left as it is: that is where its traffic goes. `None` when
/// `existing` is not a JSON object (left as the user wrote it).
fn opencode_config(
    existing: Option<&str>,
    endpoints: &Endpoints,
    own: &std::collections::BTreeSet<String>,
) -> Option<String> {
    let mut config = match existing.filter(|e| !e.trim().is_empty()) {
        Some(text) => serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .filter(serde_json::Value::is_object)?,
        None => serde_json::json!({}),
    };
    for (provider, url) in [
        ("anthropic", format!("{}/v1", endpoints.anthropic)),
        ("openai", endpoints.openai.clone()),
        ("google", format!("{}/v1beta", endpoints.gemini)),
    ] {
        if own.contains(provider) {
            continue;
        }
        let options = config
            .as_object_mut()?
            .entry("provider")
            .or_insert_with(|| serde_json::json!({}))
            .as_object_mut()?
            .entry(provider)
            .or_insert_with(|| serde_json::json!({}))
            .as_object_mut()?
            .entry("options")
            .or_insert_with(|| serde_json::json!({}))
            .as_object_mut()?;
        // A base URL the user gave is where they send it: kept, not
        // through the proxy (wrap never sends traffic elsewhere).
        options
            .entry("baseURL")
            .or_insert(serde_json::Value::String(url));
    }
    Some(config.to_string())
}

/// The providers whose `baseURL` opencode's config files set: `$OPENCODE_CONFIG`,
/// the global `opencode.json[c]` (`$XDG_CONFIG_HOME/opencode`, else
/// `~/.config/opencode`) and the project's, in `cwd` and its parents.
fn opencode_file_base_urls(cwd: &Path) -> std::collections::BTreeSet<String> {
    let mut files: Vec<PathBuf> = Vec::new();
    if let Some(path) = std::env::var_os("OPENCODE_CONFIG") {
        files.push(PathBuf::from(path));
    }
    let config_home = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
    let mut dirs: Vec<PathBuf> = config_home
        .map(|c| c.join("opencode"))
        .into_iter()
        .collect();
    dirs.extend(cwd.ancestors().map(Path::to_path_buf));
    for dir in dirs {
        for name in ["opencode.json", "opencode.jsonc", "config.json"] {
            files.push(dir.join(name));
        }
    }
    let mut own = std::collections::BTreeSet::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        // opencode's files are JSON with comments and trailing commas.
        let Ok(Some(value)) = jsonc_parser::parse_to_serde_value(&text, &Default::default()) else {
            continue;
        };
        if let Some(providers) = value.get("provider").and_then(|p| p.as_object()) {
            for (name, provider) in providers {
                if provider.pointer("/options/baseURL").is_some() {
                    own.insert(name.clone());
                }
            }
        }
    }
    own
}

/// The provider id wrap gives Codex.
const CODEX_PROVIDER: &str = "toolstub_wrap";
/// The variable that hands Codex the run's secret (not `TOOLSTUB_*`: a
/// `toolstub` the child runs reads those as its own settings).
const CODEX_SECRET_VARIABLE: &str = "CODEX_TOOLSTUB_RUN_SECRET";

/// `-c` options making Codex use the proxy over HTTP: a provider of its own
/// (`wire_api = "responses"`, `supports_websockets = false`), its key from
/// `OPENAI_API_KEY` when that is set, else Codex's own login
/// (`requires_openai_auth`).
fn codex_options(base_url: &str, key_in_env: bool, secret_in_env: bool) -> Vec<String> {
    let quoted = |s: &str| toml::Value::String(s.to_string()).to_string();
    let mut auth = if key_in_env {
        format!("env_key={}", quoted("OPENAI_API_KEY"))
    } else {
        "requires_openai_auth=true".to_string()
    };
    if secret_in_env {
        auth.push_str(&format!(
            ",env_http_headers={{{}={}}}",
            quoted(crate::proxy::RUN_SECRET_HEADER),
            quoted(CODEX_SECRET_VARIABLE)
        ));
    }
    vec![
        "-c".to_string(),
        format!("model_provider={}", quoted(CODEX_PROVIDER)),
        "-c".to_string(),
        format!(
            "model_providers.{CODEX_PROVIDER}={{name={},base_url={},wire_api=\"responses\",supports_websockets=false,{auth}}}",
            quoted("OpenAI through toolstub"),
            quoted(base_url),
        ),
    ]
}

/// Runs the child to its end; its exit code, or 128 + the signal that
/// ended it.
async fn run_child(mut command: std::process::Command, program: &OsStr) -> Result<u8> {
    let child = command.spawn().map_err(|source| SpawnFailed {
        program: program.to_string_lossy().into_owned(),
        code: match source.kind() {
            std::io::ErrorKind::NotFound => NOT_FOUND,
            std::io::ErrorKind::PermissionDenied => NOT_EXECUTABLE,
            _ => FAILED,
        },
        source,
    })?;
    #[cfg(unix)]
    signals::child_started(child.id());
    let status = tokio::task::spawn_blocking(move || wait(child))
        .await
        .context("waiting for the command")??;
    Ok(exit_code(status))
}

fn wait(mut child: std::process::Child) -> Result<std::process::ExitStatus> {
    #[cfg(unix)]
    signals::wait_exited(child.id()).context("waiting for the command")?;
    child.wait().context("waiting for the command")
}

fn exit_code(status: std::process::ExitStatus) -> u8 {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return u8::try_from(128 + signal).unwrap_or(u8::MAX);
        }
    }
    status
        .code()
        .and_then(|code| u8::try_from(code & 0xff).ok())
        .unwrap_or(FAILED)
}

/// Signal forwarding: async-signal-safe handlers that pass a signal on to
/// the child with `kill`.
#[cfg(unix)]
mod signals {
    use std::sync::atomic::{AtomicI32, Ordering};

    /// The child's pid while it runs; 0 before it starts, -1 once it has
    /// exited (its pid may then belong to another process).
    static CHILD: AtomicI32 = AtomicI32::new(0);
    /// A signal that came before the child started, passed on once it has.
    static PENDING: AtomicI32 = AtomicI32::new(0);

    const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

    /// Whether a process sent the signal (`kill`, `sigqueue`), not the
    /// kernel on the terminal's behalf (Ctrl-C, a hangup), which signals
    /// the whole foreground process group, the child included. Linux says
    /// so in `si_code` (<= 0 from a process, `SI_KERNEL` from the tty);
    /// elsewhere every signal is taken as sent by a process.
    fn sent_by_a_process(info: *const libc::siginfo_t) -> bool {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO
            // handler; a null one is checked first.
            info.is_null() || unsafe { (*info).si_code } <= 0
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        {
            let _ = info;
            true
        }
    }

    extern "C" fn on_signal(
        signo: libc::c_int,
        info: *mut libc::siginfo_t,
        _context: *mut libc::c_void,
    ) {
        let child = CHILD.load(Ordering::SeqCst);
        if child < 0 {
            // The child is gone and the proxy drains: the signal's own
            // effect, on wrap.
            // SAFETY: signal and raise are async-signal-safe.
            unsafe {
                libc::signal(signo, libc::SIG_DFL);
                libc::raise(signo);
            }
            return;
        }
        if !sent_by_a_process(info) {
            return;
        }
        if child == 0 {
            PENDING.store(signo, Ordering::SeqCst);
        } else {
            // SAFETY: kill is async-signal-safe; the pid is the child's,
            // not yet reaped (see `wait_exited`).
            unsafe {
                libc::kill(child, signo);
            }
        }
    }

    /// Installs the forwarding handlers (before the child starts).
    pub fn install() -> std::io::Result<()> {
        for signo in FORWARDED {
            // SAFETY: a zeroed sigaction is a valid starting value; the
            // handler only touches atomics and async-signal-safe calls.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    on_signal;
                action.sa_sigaction = handler as libc::sighandler_t;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                if libc::sigaction(signo, &action, std::ptr::null_mut()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }

    /// The child runs: signals go to it from now on, a pending one first.
    pub fn child_started(pid: u32) {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return;
        };
        CHILD.store(pid, Ordering::SeqCst);
        let pending = PENDING.swap(0, Ordering::SeqCst);
        if pending != 0 {
            // SAFETY: the child has not been waited for yet.
            unsafe {
                libc::kill(pid, pending);
            }
        }
    }

    /// Waits until the child has exited without reaping it, then stops
    /// forwarding: a signal can never reach a process that took its pid.
    pub fn wait_exited(pid: u32) -> std::io::Result<()> {
        let id = libc::id_t::from(pid);
        loop {
            // SAFETY: waitid fills the zeroed siginfo_t it is given.
            let rc = unsafe {
                let mut info: libc::siginfo_t = std::mem::zeroed();
                libc::waitid(libc::P_PID, id, &mut info, libc::WEXITED | libc::WNOWAIT)
            };
            if rc == 0 {
                CHILD.store(-1, Ordering::SeqCst);
                return Ok(());
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }
}

/// What the proxy did for the child, read from its metrics (the one place
/// to add a figure: a field, its metric in [`Summary::from_metrics`], its
/// words in [`Summary::lines`]). Every figure is a counter, so a running
/// proxy's are read before and after the child and subtracted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Requests to the APIs (not `/healthz`, `/metrics` or the operator API).
    pub requests: u64,
    pub externalized: u64,
    pub chars_saved: u64,
    /// o200k_base tokens saved (originals minus stubs).
    pub tokens_saved: u64,
    pub recall_calls: u64,
    pub store_errors: u64,
}

impl Summary {
    /// Reads the figures from the Prometheus text of `/metrics`.
    pub fn from_metrics(text: &str) -> Summary {
        let mut s = Summary::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<u64>() else {
                continue;
            };
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            let field = match name {
                "toolstub_requests_total" if !is_own_route(labels) => &mut s.requests,
                "toolstub_outputs_externalized_total" => &mut s.externalized,
                "toolstub_chars_saved_total" => &mut s.chars_saved,
                "toolstub_tokens_saved_total" => &mut s.tokens_saved,
                "toolstub_recall_calls_total" => &mut s.recall_calls,
                "toolstub_store_errors_total" => &mut s.store_errors,
                _ => continue,
            };
            *field += value;
        }
        s
    }

    /// The figures counted since `before`.
    pub fn since(&self, before: &Summary) -> Summary {
        Summary {
            requests: self.requests.saturating_sub(before.requests),
            externalized: self.externalized.saturating_sub(before.externalized),
            chars_saved: self.chars_saved.saturating_sub(before.chars_saved),
            tokens_saved: self.tokens_saved.saturating_sub(before.tokens_saved),
            recall_calls: self.recall_calls.saturating_sub(before.recall_calls),
            store_errors: self.store_errors.saturating_sub(before.store_errors),
        }
    }

    /// The summary's lines: the figures; where the originals are (an own
    /// proxy's SQLite file); whose traffic it is (a running proxy's).
    pub fn lines(&self, store: Option<&Path>, remote: Option<&str>) -> Vec<String> {
        let mut figures = format!(
            "{}, {} externalized, {} ({}) saved, {} answered",
            counted(self.requests, "request", "requests"),
            counted(self.externalized, "tool output", "tool outputs"),
            counted(self.chars_saved, "character", "characters"),
            counted(self.tokens_saved, "token", "tokens"),
            counted(self.recall_calls, "recall call", "recall calls"),
        );
        if self.store_errors > 0 {
            figures.push_str(&format!(
                ", {} (see the log)",
                counted(self.store_errors, "store error", "store errors")
            ));
        }
        if let Some(url) = remote {
            figures.push_str(&format!(
                " (by {url} while the command ran, every client's)"
            ));
        }
        let mut lines = vec![figures];
        if let Some(path) = store.filter(|_| self.externalized > 0) {
            let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
            lines.push(format!(
                "originals kept in {0} (toolstub stats --db {0}; toolstub results --db {0} list)",
                path.display()
            ));
        }
        lines
    }
}

/// A request label set of the proxy's own routes.
fn is_own_route(labels: &str) -> bool {
    ["healthz", "metrics", "operator"]
        .iter()
        .any(|route| labels.contains(&format!("route=\"{route}\"")))
}

/// `n` with thousands separators and the noun that goes with it.
fn counted(n: u64, one: &str, many: &str) -> String {
    let noun = if n == 1 { one } else { many };
    format!("{} {noun}", crate::stats::grouped(n))
}

async fn remote_summary(url: &str) -> Result<Summary> {
    let (status, text) = crate::proxy::get_text(url, "/metrics", PROXY_TIMEOUT)
        .await
        .with_context(|| format!("reading {url}/metrics"))?;
    if !status.is_success() {
        bail!("{url}/metrics answered {status}");
    }
    Ok(Summary::from_metrics(&text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;

    #[test]
    fn the_summary_reads_the_proxys_own_metrics() {
        let m = Metrics::default();
        m.request("messages", 200);
        m.request("responses", 502);
        m.request("healthz", 200);
        m.request("metrics", 200);
        m.request("operator", 200);
        m.externalized("json", "single_threshold");
        m.externalized("text", "turn_budget");
        m.chars_saved(123_456);
        m.tokens_saved("json", true, 30_000);
        m.tokens_saved("text", false, 1_000);
        m.recall_call("tool_result_read");
        m.recall_call("tool_result_search");
        m.recall_call("tool_result_read");
        m.store_error("put");
        let s = Summary::from_metrics(&m.render());
        assert_eq!(
            s,
            Summary {
                requests: 2,
                externalized: 2,
                chars_saved: 123_456,
                tokens_saved: 31_000,
                recall_calls: 3,
                store_errors: 1,
            }
        );
        assert_eq!(
            s.lines(Some(Path::new("/data/t.db")), None),
            [
                "2 requests, 2 tool outputs externalized, 123,456 characters (31,000 tokens) saved, 3 recall calls answered, 1 store error (see the log)",
                "originals kept in /data/t.db (toolstub stats --db /data/t.db; toolstub results --db /data/t.db list)",
            ]
        );
        let before = Summary {
            requests: 1,
            externalized: 1,
            chars_saved: 456,
            tokens_saved: 1_000,
            recall_calls: 3,
            store_errors: 1,
        };
        assert_eq!(
            s.since(&before).lines(None, Some("http://p")),
            ["1 request, 1 tool output externalized, 123,000 characters (30,000 tokens) saved, 0 recall calls answered (by http://p while the command ran, every client's)"]
        );
        assert_eq!(
            Summary::default().lines(Some(Path::new("/x.db")), None),
            ["0 requests, 0 tool outputs externalized, 0 characters (0 tokens) saved, 0 recall calls answered"],
            "no store line when nothing was stored"
        );
    }

    #[test]
    fn numbers_are_grouped() {
        assert_eq!(counted(0, "a", "b"), "0 b");
        assert_eq!(counted(1, "a", "b"), "1 a");
        assert_eq!(counted(999, "a", "b"), "999 b");
        assert_eq!(counted(1000, "a", "b"), "1,000 b");
        assert_eq!(counted(12_345_678, "a", "b"), "12,345,678 b");
    }

    #[test]
    fn inherited_base_urls_become_routes_that_keep_every_url() {
        let inherited = Inherited {
            openai_base_url: Some("https://gw.example:8443/openai/v1/".to_string()),
            anthropic_base_url: Some("http://10.0.0.2:9000".to_string()),
            gemini_base_url: Some("https://gemini-gw.example/google/".to_string()),
            vertex_base_url: Some("https://vertex-gw.example/v1".to_string()),
            foundry_base_url: Some("https://res-1.services.ai.azure.com/anthropic".to_string()),
            ..Inherited::default()
        };
        let routes = InheritedRoutes::of(&inherited).expect("routes");
        assert_eq!(
            routes,
            InheritedRoutes {
                routes: vec![
                    "/wrap/openai=https://gw.example:8443".to_string(),
                    "/wrap/anthropic=http://10.0.0.2:9000".to_string(),
                    "/wrap/gemini=https://gemini-gw.example".to_string(),
                    "/wrap/vertex=https://vertex-gw.example".to_string(),
                    "/wrap/foundry=https://res-1.services.ai.azure.com".to_string(),
                ],
                openai_path: Some("/openai/v1".to_string()),
                anthropic_path: Some(String::new()),
                gemini_path: Some("/google".to_string()),
                vertex_path: Some("/v1".to_string()),
                foundry_path: Some("/anthropic".to_string()),
                bedrock_path: None,
            }
        );
        for bad in ["gw.example/v1", "ftp://gw/v1", "https://gw/v1?x=1"] {
            let inherited = Inherited {
                openai_base_url: Some(bad.to_string()),
                ..Inherited::default()
            };
            let err = InheritedRoutes::of(&inherited).expect_err(bad);
            assert!(format!("{err:#}").contains("OPENAI_BASE_URL"), "{err:#}");
        }
        assert_eq!(
            InheritedRoutes::of(&Inherited::default()).expect("none"),
            InheritedRoutes::default()
        );
    }

    #[test]
    fn opencode_gets_its_providers_base_urls_and_keeps_its_config() {
        assert!(is_opencode(OsStr::new("/x/node_modules/.bin/opencode")));
        assert!(!is_opencode(OsStr::new("opencode-helper")));
        let endpoints = Endpoints::plain("http://127.0.0.1:9");
        let config: serde_json::Value = serde_json::from_str(
            &opencode_config(None, &endpoints, &Default::default()).expect("config"),
        )
        .expect("json");
        assert_eq!(
            config["provider"]["anthropic"]["options"]["baseURL"],
            "http://127.0.0.1:9/v1"
        );
        assert_eq!(
            config["provider"]["openai"]["options"]["baseURL"],
            "http://127.0.0.1:9/v1"
        );
        assert_eq!(
            config["provider"]["google"]["options"]["baseURL"],
            "http://127.0.0.1:9/v1beta"
        );
        let mine = r#"{"model":"anthropic/claude-x","provider":{"anthropic":{"options":{"timeout":5,"baseURL":"https://gw"}},"ollama":{"npm":"x"}}}"#;
        let merged: serde_json::Value = serde_json::from_str(
            &opencode_config(Some(mine), &endpoints, &Default::default()).expect("config"),
        )
        .expect("json");
        assert_eq!(merged["model"], "anthropic/claude-x");
        assert_eq!(merged["provider"]["anthropic"]["options"]["timeout"], 5);
        assert_eq!(
            merged["provider"]["anthropic"]["options"]["baseURL"], "https://gw",
            "the user's own endpoint kept"
        );
        assert_eq!(
            merged["provider"]["openai"]["options"]["baseURL"],
            "http://127.0.0.1:9/v1"
        );
        assert_eq!(merged["provider"]["ollama"]["npm"], "x");
        assert_eq!(
            opencode_config(Some("[1]"), &endpoints, &Default::default()),
            None
        );
        assert_eq!(
            opencode_config(Some("{not json"), &endpoints, &Default::default()),
            None
        );
        // A provider whose base URL the config files set is left to them.
        let own: std::collections::BTreeSet<String> = ["anthropic".to_string()].into();
        let left: serde_json::Value =
            serde_json::from_str(&opencode_config(None, &endpoints, &own).expect("config"))
                .expect("json");
        assert!(left["provider"].get("anthropic").is_none(), "{left}");
        assert_eq!(
            left["provider"]["openai"]["options"]["baseURL"],
            "http://127.0.0.1:9/v1"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let project = dir.path().join("repo").join("src");
        std::fs::create_dir_all(&project).expect("dirs");
        std::fs::write(
            dir.path().join("repo").join("opencode.jsonc"),
            "{\n  // my gateway\n  \"provider\": { \"anthropic\": { \"options\": { \"baseURL\": \"https://gw/v1\", }, }, /* x */ },\n}\n",
        )
        .expect("config");
        assert!(opencode_file_base_urls(&project).contains("anthropic"));
    }

    #[test]
    fn codex_gets_a_provider_of_its_own() {
        assert!(is_codex(OsStr::new("codex")));
        assert!(is_codex(OsStr::new("/opt/node_modules/.bin/codex")));
        assert!(!is_codex(OsStr::new("codex-helper")));
        assert!(!is_codex(OsStr::new("claude")));
        let options = codex_options("http://127.0.0.1:4242/v1", true, false);
        assert_eq!(
            options,
            [
                "-c",
                "model_provider=\"toolstub_wrap\"",
                "-c",
                "model_providers.toolstub_wrap={name=\"OpenAI through toolstub\",base_url=\"http://127.0.0.1:4242/v1\",wire_api=\"responses\",supports_websockets=false,env_key=\"OPENAI_API_KEY\"}",
            ]
        );
        let provider = options[3].split_once('=').expect("key=value").1;
        let parsed: toml::Table = format!("p = {provider}")
            .parse()
            .expect("the value is TOML");
        assert_eq!(
            parsed["p"]["base_url"].as_str(),
            Some("http://127.0.0.1:4242/v1")
        );
        assert!(
            codex_options("http://x/v1", false, false)[3].ends_with(",requires_openai_auth=true}")
        );
    }

    #[test]
    fn no_proxy_gains_the_proxys_host_once() {
        let base = "http://127.0.0.1:4242";
        assert_eq!(with_no_proxy_host("", base), "127.0.0.1");
        assert_eq!(
            with_no_proxy_host("localhost,.corp", base),
            "localhost,.corp,127.0.0.1"
        );
        assert_eq!(
            with_no_proxy_host("localhost, 127.0.0.1", base),
            "localhost, 127.0.0.1"
        );
    }

    #[test]
    fn endpoints_point_at_the_proxy() {
        assert_eq!(
            Endpoints::plain("http://127.0.0.1:9/"),
            Endpoints {
                base: "http://127.0.0.1:9".to_string(),
                openai: "http://127.0.0.1:9/v1".to_string(),
                anthropic: "http://127.0.0.1:9".to_string(),
                gemini: "http://127.0.0.1:9".to_string(),
                vertex: "http://127.0.0.1:9/v1".to_string(),
                foundry: None,
                bedrock: "http://127.0.0.1:9".to_string(),
                run_secret: None,
            }
        );
    }
}
