//! The command line: `toolstub serve`, `wrap`, `synopsis`, `results`,
//! `stats`, `keys`, `estimate`.
//! Parsing is clap's; each subcommand is one function that returns an error
//! with context, printed once by [`main`] (`wrap` exits with its child's
//! code, [`crate::wrap::main`]).

use crate::refs::sha256_hex;
use crate::stub::{render, RecallToolNames, StubHeader};
use crate::synopsis::{synopsize, Hints, Kind, Synopsis};
use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

/// The default per-stub preview budget.
pub const DEFAULT_PREVIEW_CHARS: usize = 2000;

#[derive(Parser, Debug)]
#[command(
    name = "toolstub",
    version,
    about = "A reverse proxy for LLM APIs that turns oversized tool outputs into typed, deterministic stubs."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the proxy (defaults: 127.0.0.1:8790; Anthropic requests to https://api.anthropic.com, the rest to https://api.openai.com; store ./toolstub.db).
    Serve(ServeArgs),
    /// Run one command (an agent: claude, codex, gemini, python agent.py, ...) through toolstub: a proxy on a free loopback port, the command pointed at it (ANTHROPIC_BASE_URL, OPENAI_BASE_URL, GOOGLE_GEMINI_BASE_URL; Codex also through -c options), its terminal, signals and exit code passed through, a summary on stderr at the end. Its store: ~/.local/share/toolstub/toolstub.db unless --db, the config or TOOLSTUB_STORE_* say otherwise.
    #[command(
        after_help = "Examples:\n  toolstub wrap -- claude\n  toolstub wrap -- codex exec 'fix the tests'\n  toolstub wrap -- gemini -p 'fix the tests' --yolo\n  toolstub wrap --upstream http://127.0.0.1:8000 -- python agent.py\n  toolstub wrap --proxy http://127.0.0.1:8790 -- claude\n\nA non-empty ANTHROPIC_BASE_URL, OPENAI_BASE_URL or GOOGLE_GEMINI_BASE_URL in the environment becomes the proxy's upstream for that API (--upstream replaces them)."
    )]
    Wrap(WrapArgs),
    /// Print the stub (without a ref) that toolstub would put in place of one tool output.
    Synopsis(SynopsisArgs),
    /// The operator's view of the result store: list, read and search stored originals.
    Results(results::ResultsArgs),
    /// What toolstub saved, from the store's ledger: totals, per tool and per session (every tenant's unless --tenant).
    Stats(results::StatsArgs),
    /// Client keys, in the store `serve` uses (--config, --db, --store-url as for serve): create one (shown once), list the active ones, revoke one.
    #[command(
        after_help = "Examples:\n  toolstub keys create alice\n  toolstub keys list\n  toolstub keys revoke alice\n  toolstub keys --store-url postgres://toolstub@db/toolstub create ci-bot\n\nThe store keeps only each key's SHA-256: a key is shown once, when it is made, and never again."
    )]
    Keys(results::KeysArgs),
    /// What toolstub would save on recorded sessions, offline: each request replayed through the real rewrite and billed at the providers' cache prices, net of the recalls its stubs would cause.
    #[command(
        after_help = "PATH: files or folders of sessions, each file recognised by its content: Claude Code session files (~/.claude/projects/**/*.jsonl) and its --output-format stream-json logs, Codex rollouts (~/.codex/sessions/**/rollout-*.jsonl), opencode's database (~/.local/share/opencode/opencode.db), its storage folder or its `run --format json` output, Gemini CLI chat files (~/.gemini/tmp/*/chats/session-*), Chat Completions message logs (a run's `messages`, a list of runs), Responses API input item lists (the Agents SDK's to_input_list()), mini-swe-agent trajectories (*.traj.json). With none, your own Claude Code, Codex, opencode and Gemini CLI folders. Each session is replayed in its own API's shape, with the tool definitions and system prompt the file records, or the placeholders --print-requests names. A file no reader knows is listed as skipped, with why. Nothing is sent anywhere and nothing is stored.\n\nExamples:\n  toolstub estimate\n  toolstub estimate --json ~/.claude/projects\n  toolstub estimate --config config/toolstub.toml --shape all trajs/"
    )]
    Estimate(EstimateArgs),
}

#[derive(Args, Debug)]
struct EstimateArgs {
    /// Print one JSON object (sessions, saved_fraction, totals, per_session) instead of the table.
    #[arg(long)]
    json: bool,
    /// The configuration whose policy is replayed and whose [[pricing]] prices the sessions (the defaults otherwise).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The shape trajectories are replayed in: chat, anthropic, responses, gemini or all (repeatable; default chat). Every other format is replayed in its own.
    #[arg(long = "shape", value_name = "SHAPE")]
    shapes: Vec<String>,
    /// Sessions listed in the table, the costliest first.
    #[arg(long, value_name = "N", default_value_t = 20)]
    rows: usize,
    /// Print each request as it will be replayed (one JSON object a line: session, source, shape, model, assumed, placeholders, index, at, body, answer) instead of replaying; files skipped are said on stderr.
    #[arg(long, conflicts_with = "json")]
    print_requests: bool,
    /// Charge no recall round: what the policy would save if the model never needed a stub read back (the most it could save, not an estimate).
    #[arg(long)]
    free_recalls: bool,
    /// Files or folders to replay.
    #[arg(value_name = "PATH")]
    paths: Vec<PathBuf>,
}

#[derive(Args, Debug)]
struct ServeArgs {
    /// A TOML configuration file (every key is documented in config/toolstub.toml).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on (server.listen).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// The API to forward to (upstream.base_url): every path goes there,
    /// e.g. https://api.openai.com or https://api.anthropic.com.
    #[arg(long, value_name = "URL")]
    upstream: Option<String>,
    /// Another upstream for paths under a prefix (upstream.routes), e.g.
    /// `--route /anthropic=https://api.anthropic.com`: requests to
    /// /anthropic/v1/messages go to https://api.anthropic.com/v1/messages.
    /// Repeatable.
    #[arg(long = "route", value_name = "PREFIX=URL")]
    routes: Vec<String>,
    /// The SQLite file holding the originals (store.path).
    #[arg(long, value_name = "FILE")]
    db: Option<PathBuf>,
    /// Store in PostgreSQL instead (store.url, or TOOLSTUB_STORE_URL), e.g.
    /// postgres://toolstub:secret@db:5432/toolstub.
    #[arg(long, value_name = "URL")]
    store_url: Option<String>,
}

#[derive(Args, Debug)]
struct WrapArgs {
    #[command(flatten)]
    serve: ServeArgs,
    /// Use the toolstub already running at URL (e.g. http://127.0.0.1:8790)
    /// instead of starting one; the summary is then its counts over the
    /// command's run.
    #[arg(
        long,
        value_name = "URL",
        conflicts_with_all = ["config", "listen", "upstream", "routes", "db", "store_url", "log_file"]
    )]
    proxy: Option<String>,
    /// Append the proxy's log to FILE; without it the proxy logs nothing, so
    /// the command's terminal stays its own.
    #[arg(long, value_name = "FILE")]
    log_file: Option<PathBuf>,
    /// Print no summary when the command exits.
    #[arg(long)]
    quiet: bool,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<std::ffi::OsString>,
}

impl From<WrapArgs> for crate::wrap::Wrap {
    fn from(args: WrapArgs) -> crate::wrap::Wrap {
        let proxy = match args.proxy {
            Some(url) => crate::wrap::ProxySource::Running(url),
            None => crate::wrap::ProxySource::Own {
                config_file: args.serve.config,
                overrides: crate::config::Overrides {
                    listen: args.serve.listen,
                    upstream: args.serve.upstream,
                    db: args.serve.db,
                    store_url: args.serve.store_url,
                    routes: args.serve.routes,
                },
                log_file: args.log_file,
            },
        };
        crate::wrap::Wrap {
            proxy,
            quiet: args.quiet,
            command: args.command,
        }
    }
}

#[derive(Args, Debug)]
struct SynopsisArgs {
    /// A MIME type hint (for example application/json); detection otherwise works from content.
    #[arg(long, value_name = "M")]
    mime: Option<String>,
    /// The tool name shown in the stub header.
    #[arg(long = "tool", value_name = "NAME")]
    tool: Option<String>,
    /// The preview budget in characters (used by the `unknown` head/tail sample).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_PREVIEW_CHARS)]
    preview_chars: usize,
    /// Print {"kind", "synopsis", "stub"} as one JSON object instead of the stub.
    #[arg(long)]
    json: bool,
    /// The file holding the tool output; `-` or nothing reads standard input.
    #[arg(value_name = "FILE|-")]
    file: Option<PathBuf>,
}

/// Runs the command line and maps failures to exit code 2 with the error chain.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Wrap(args) => return crate::wrap::main(args.into()),
        Command::Serve(args) => serve(args),
        Command::Synopsis(args) => synopsis(args),
        Command::Results(args) => results::run(args),
        Command::Stats(args) => results::stats(args),
        Command::Keys(args) => results::keys(args),
        Command::Estimate(args) => estimate(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("toolstub: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn serve(args: ServeArgs) -> Result<()> {
    let overrides = crate::config::Overrides {
        listen: args.listen,
        upstream: args.upstream,
        db: args.db,
        store_url: args.store_url,
        routes: args.routes,
    };
    let config = crate::config::load(args.config.as_deref(), std::env::vars(), &overrides)?;
    init_logging(&config);
    crate::proxy::memory::configure_malloc();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(crate::proxy::serve(config))
}

/// Logs to standard error, as text or JSON lines. `RUST_LOG` wins over
/// `server.log_level` when set; neither lets a client's headers in
/// ([`crate::logging`]).
fn init_logging(config: &crate::config::Config) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.log_level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let headers = crate::logging::no_client_headers();
    match config.log_format {
        crate::config::LogFormat::Json => builder.json().finish().with(headers).init(),
        crate::config::LogFormat::Text => builder.finish().with(headers).init(),
    }
}

fn estimate(args: EstimateArgs) -> Result<()> {
    use crate::replay::Shape;
    let mut shapes = Vec::new();
    for name in &args.shapes {
        if name == "all" {
            shapes.extend(Shape::ALL);
        } else {
            shapes.push(Shape::parse(name).with_context(|| {
                format!("--shape {name:?}: chat, anthropic, responses, gemini or all")
            })?);
        }
    }
    if shapes.is_empty() {
        shapes.push(Shape::Chat);
    }
    shapes.sort();
    shapes.dedup();
    crate::replay::estimate::run(crate::replay::estimate::Options {
        paths: args.paths,
        config: args.config,
        shapes,
        json: args.json,
        print_requests: args.print_requests,
        rows: args.rows,
        free_recalls: args.free_recalls,
    })
}

fn synopsis(args: SynopsisArgs) -> Result<()> {
    let bytes = read_input(args.file.as_deref())?;
    // A proxy only ever sees text: invalid UTF-8 is decoded lossily, never a crash.
    let text = String::from_utf8_lossy(&bytes);
    let synopsis = synopsize(
        &text,
        Hints {
            mime: args.mime.as_deref(),
            preview_chars: args.preview_chars,
        },
    );
    let sha = sha256_hex(&text);
    let header = StubHeader {
        tool_name: args.tool.as_deref(),
        original_chars: text.chars().count(),
        preview_budget: args.preview_chars,
        result_ref: None,
        sha256: Some(&sha),
        reason: None,
    };
    let stub = render(&synopsis, &header, &RecallToolNames::default());
    let mut out = std::io::stdout().lock();
    if args.json {
        let report = SynopsisReport {
            kind: synopsis.kind,
            synopsis: &synopsis,
            stub: &stub,
        };
        serde_json::to_writer(&mut out, &report).context("writing JSON to standard output")?;
        out.write_all(b"\n")?;
    } else {
        writeln!(out, "{stub}").context("writing to standard output")?;
    }
    Ok(())
}

/// The `--json` output, fields in the documented order.
#[derive(serde::Serialize)]
struct SynopsisReport<'a> {
    kind: Kind,
    synopsis: &'a Synopsis,
    stub: &'a str,
}

fn read_input(file: Option<&std::path::Path>) -> Result<Vec<u8>> {
    match file {
        None => read_stdin(),
        Some(path) if path.as_os_str() == "-" => read_stdin(),
        Some(path) => {
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
        }
    }
}

fn read_stdin() -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::io::stdin()
        .read_to_end(&mut bytes)
        .context("reading standard input")?;
    Ok(bytes)
}

/// `toolstub results list|read|search`, `stats` and `keys`: the store seen
/// by an operator.
mod results {
    use crate::store::{AsyncResultStore, Backend, StoreConfig, Tenant};
    use anyhow::{bail, Context, Result};
    use clap::{Args, Subcommand};
    use std::io::Write;
    use std::path::PathBuf;

    #[derive(Args, Debug)]
    pub struct ResultsArgs {
        /// The store file.
        #[arg(
            long,
            value_name = "FILE",
            default_value = "./toolstub.db",
            global = true
        )]
        db: PathBuf,
        /// A PostgreSQL store instead of the file (as `serve --store-url`).
        #[arg(
            long,
            value_name = "URL",
            env = "TOOLSTUB_STORE_URL",
            global = true,
            hide_env_values = true
        )]
        store_url: Option<String>,
        /// The tenant id (16 hex digits of the credential's SHA-256, or `anonymous`).
        #[arg(long, value_name = "ID", default_value = Tenant::ANONYMOUS, global = true)]
        tenant: String,
        /// Print JSON instead of a table.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        action: Action,
    }

    #[derive(Subcommand, Debug)]
    enum Action {
        /// List stored outputs, newest first.
        List {
            /// Only this session.
            #[arg(long)]
            session: Option<String>,
            /// Only this tool (applied before --limit).
            #[arg(long)]
            tool_name: Option<String>,
            #[arg(long, default_value_t = 50)]
            limit: usize,
        },
        /// Print characters [offset, offset+limit) of an original (code points).
        Read {
            #[arg(long = "ref", value_name = "REF")]
            result_ref: String,
            #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
            offset: i64,
            /// -1 reads to the end.
            #[arg(long, default_value_t = 20_000, allow_hyphen_values = true)]
            limit: i64,
        },
        /// Exact search in one original (--ref) or ranked search across a session (--session).
        Search {
            /// The text to find.
            query: String,
            /// Search this original (exact, case-sensitive).
            #[arg(long = "ref", value_name = "REF")]
            result_ref: Option<String>,
            /// Search this session's outputs (ranked, BM25).
            #[arg(long)]
            session: Option<String>,
            #[arg(long, default_value_t = 20)]
            limit: usize,
            /// Characters of context on each side of a match.
            #[arg(long, default_value_t = 300)]
            context_chars: usize,
        },
    }

    #[derive(Args, Debug)]
    pub struct StatsArgs {
        /// The store file (default: ./toolstub.db if it exists, else the store `toolstub wrap` uses).
        #[arg(long, value_name = "FILE")]
        db: Option<PathBuf>,
        /// A PostgreSQL store instead of the file (as `serve --store-url`).
        #[arg(
            long,
            value_name = "URL",
            env = "TOOLSTUB_STORE_URL",
            hide_env_values = true
        )]
        store_url: Option<String>,
        /// A configuration file whose [[pricing]] table prices the saving.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Only this tenant (16 hex digits of the credential's SHA-256, or `anonymous`).
        #[arg(long, value_name = "ID")]
        tenant: Option<String>,
        /// Only this session.
        #[arg(long)]
        session: Option<String>,
        /// At most this many sessions, most recently active first.
        #[arg(long, default_value_t = 20)]
        sessions: usize,
        /// Print the JSON of the operator API's GET /toolstub/v1/stats instead of tables.
        #[arg(long)]
        json: bool,
    }

    /// `toolstub stats`.
    pub fn stats(args: StatsArgs) -> Result<()> {
        let db = match (&args.db, &args.store_url) {
            (Some(db), _) => Some(db.clone()),
            (None, Some(_)) => None,
            (None, None) => {
                let here = PathBuf::from("./toolstub.db");
                match crate::wrap::default_store() {
                    Some(wrapped) if !here.exists() && wrapped.exists() => Some(wrapped),
                    _ => Some(here),
                }
            }
        };
        let store = open_store(db.as_ref(), args.store_url.as_deref())?;
        let tenant = args
            .tenant
            .as_deref()
            .map(|t| Tenant::new(t.to_string()).context("invalid --tenant"))
            .transpose()?;
        let prices = match &args.config {
            Some(file) => {
                crate::config::load(Some(file), Vec::new(), &crate::config::Overrides::default())?
                    .pricing
            }
            None => crate::pricing::PriceTable::default(),
        };
        let query = crate::store::ReportQuery {
            session: args.session.clone(),
            bucket_ms: 3_600_000,
            sessions: args.sessions,
        };
        let report = store
            .rt
            .block_on(store.store.report(tenant.as_ref(), query))?;
        let response = crate::stats::StatsResponse::of(&report, &prices);
        let mut out = std::io::stdout().lock();
        if args.json {
            return print_json(&mut out, &response);
        }
        let scope = match (&tenant, &args.session) {
            (Some(t), Some(s)) => format!("tenant {t}, session {s}"),
            (Some(t), None) => format!("tenant {t}"),
            (None, Some(s)) => format!("session {s}, every tenant"),
            (None, None) => "every tenant".to_string(),
        };
        let place = match &db {
            Some(db) if args.store_url.is_none() => db.display().to_string(),
            _ => "the PostgreSQL store".to_string(),
        };
        write!(out, "{}", crate::stats::summary(&response, &scope, &place))
            .context("writing to standard output")?;
        let n = |v: u64| crate::stats::grouped(v);
        if !report.by_tool.is_empty() {
            writeln!(out, "\nBy tool").context("writing to standard output")?;
            let rows: Vec<Vec<String>> = report
                .by_tool
                .iter()
                .map(|(tool, s)| {
                    vec![
                        tool.clone(),
                        n(s.outputs),
                        n(s.tokens_saved),
                        n(s.tokens_saved_first_seen),
                        n(s.tokens_saved_repeated),
                        n(s.chars_saved),
                    ]
                })
                .collect();
            print_table(
                &mut out,
                &[
                    "TOOL",
                    "OUTPUTS",
                    "TOKENS SAVED",
                    "FIRST SEEN",
                    "SENT AGAIN",
                    "CHARS SAVED",
                ],
                &[false, true, true, true, true, true],
                &rows,
            )?;
        }
        if !report.sessions.is_empty() {
            writeln!(out, "\nBy session (most recently active first)")
                .context("writing to standard output")?;
            let rows: Vec<Vec<String>> = report
                .sessions
                .iter()
                .map(|(id, s)| {
                    vec![
                        if id.is_empty() {
                            "-".to_string()
                        } else {
                            id.clone()
                        },
                        n(s.requests),
                        n(s.input_tokens + s.cache_read_tokens + s.cache_write_tokens),
                        n(s.tokens_saved),
                        n(s.recall_calls),
                        utc(s.last_at),
                    ]
                })
                .collect();
            print_table(
                &mut out,
                &[
                    "SESSION",
                    "TURNS",
                    "TOKENS SENT",
                    "TOKENS SAVED",
                    "RECALL CALLS",
                    "LAST (UTC)",
                ],
                &[false, true, true, true, true, false],
                &rows,
            )?;
        }
        Ok(())
    }

    /// A store opened for the command line, with its runtime.
    struct Opened {
        store: AsyncResultStore,
        rt: tokio::runtime::Runtime,
    }

    fn open_store(db: Option<&PathBuf>, store_url: Option<&str>) -> Result<Opened> {
        let overrides = crate::config::Overrides {
            db: db.cloned(),
            store_url: store_url.map(str::to_string),
            ..crate::config::Overrides::default()
        };
        let config = crate::config::load(None, Vec::new(), &overrides)?;
        let backend = Backend::of(&config);
        if let Backend::Sqlite(path) = &backend {
            if !path.exists() {
                bail!(
                    "no store at {} (pass --db FILE or --store-url URL)",
                    path.display()
                );
            }
        }
        open_backend(backend)
    }

    /// The store at `backend`, for one command: no background sweep, one
    /// reader.
    fn open_backend(backend: Backend) -> Result<Opened> {
        let config = StoreConfig {
            sweep_interval: None,
            readers: 1,
            ..StoreConfig::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        let store = rt
            .block_on(AsyncResultStore::open(backend, config))
            .context("opening the store")?;
        Ok(Opened { store, rt })
    }

    pub fn run(args: ResultsArgs) -> Result<()> {
        let Opened { store, rt } = open_store(Some(&args.db), args.store_url.as_deref())?;
        let tenant = Tenant::new(args.tenant.clone()).context("invalid --tenant")?;
        let mut out = std::io::stdout().lock();
        match args.action {
            Action::List {
                session,
                tool_name,
                limit,
            } => {
                let rows = rt.block_on(store.list(
                    &tenant,
                    session.as_deref(),
                    tool_name.as_deref(),
                    limit,
                ))?;
                if args.json {
                    print_json(&mut out, &serde_json::json!({ "results": rows }))?;
                } else {
                    let table: Vec<Vec<String>> = rows
                        .iter()
                        .map(|r| {
                            vec![
                                r.result_ref.clone(),
                                r.session_id.clone(),
                                r.tool_name.clone().unwrap_or_else(|| "-".to_string()),
                                r.kind.to_string(),
                                r.original_chars.to_string(),
                                utc(r.created_at),
                            ]
                        })
                        .collect();
                    print_table(
                        &mut out,
                        &["REF", "SESSION", "TOOL", "KIND", "CHARS", "CREATED (UTC)"],
                        &[false, false, false, false, true, false],
                        &table,
                    )?;
                }
            }
            Action::Read {
                result_ref,
                offset,
                limit,
            } => {
                let window = rt.block_on(store.read(&tenant, &result_ref, offset, limit))?;
                if args.json {
                    let meta = rt.block_on(store.meta(&tenant, &result_ref))?;
                    print_json(
                        &mut out,
                        &serde_json::json!({
                            "ref": result_ref,
                            "content": window.content,
                            "offset": window.offset,
                            "limit": window.limit,
                            "total_chars": window.total_chars,
                            "has_more": window.has_more,
                            "next_offset": window.next_offset,
                            "offset_unit": crate::store::OFFSET_UNIT,
                            "metadata": meta,
                        }),
                    )?;
                } else {
                    out.write_all(window.content.as_bytes())
                        .context("writing to standard output")?;
                    out.flush().context("writing to standard output")?;
                    let shown = window.content.chars().count() as u64;
                    let more = match window.next_offset {
                        Some(n) => format!("more from --offset {n}"),
                        None => "end of output".to_string(),
                    };
                    eprintln!(
                        "\n[characters {}..{} of {}; {more}]",
                        window.offset.min(window.total_chars),
                        window.offset.min(window.total_chars) + shown,
                        window.total_chars
                    );
                }
            }
            Action::Search {
                query,
                result_ref,
                session,
                limit,
                context_chars,
            } => match (result_ref, session) {
                (Some(r), _) => {
                    let found =
                        rt.block_on(store.search(&tenant, &r, &query, limit, context_chars))?;
                    if args.json {
                        print_json(&mut out, &found)?;
                    } else {
                        let table: Vec<Vec<String>> = found
                            .matches
                            .iter()
                            .map(|m| vec![m.offset.to_string(), one_line(&m.snippet)])
                            .collect();
                        print_table(&mut out, &["OFFSET", "SNIPPET"], &[true, false], &table)?;
                        writeln!(
                            out,
                            "{} of {} matches",
                            found.matches.len(),
                            found.total_matches
                        )?;
                    }
                }
                (None, Some(session)) => {
                    let hits = rt.block_on(store.search_session(
                        &tenant,
                        &session,
                        &query,
                        limit,
                        context_chars,
                    ))?;
                    if args.json {
                        print_json(&mut out, &serde_json::json!({ "hits": hits }))?;
                    } else {
                        let table: Vec<Vec<String>> = hits
                            .iter()
                            .map(|h| {
                                vec![
                                    score(h.score),
                                    h.result_ref.clone(),
                                    h.tool_name.clone().unwrap_or_else(|| "-".to_string()),
                                    h.offset.to_string(),
                                    one_line(&h.snippet),
                                ]
                            })
                            .collect();
                        print_table(
                            &mut out,
                            &["SCORE", "REF", "TOOL", "OFFSET", "SNIPPET"],
                            &[true, false, false, true, false],
                            &table,
                        )?;
                    }
                }
                (None, None) => bail!(
                    "search needs --ref REF (one output) or --session ID (ranked, whole session)"
                ),
            },
        }
        Ok(())
    }

    #[derive(Args, Debug)]
    pub struct KeysArgs {
        /// A TOML configuration file: its [store] section names the store, as for `serve`.
        #[arg(long, value_name = "FILE", global = true)]
        config: Option<PathBuf>,
        /// The SQLite file holding the store (store.path).
        #[arg(long, value_name = "FILE", global = true)]
        db: Option<PathBuf>,
        /// A PostgreSQL store instead (store.url, or TOOLSTUB_STORE_URL).
        #[arg(long, value_name = "URL", global = true)]
        store_url: Option<String>,
        #[command(subcommand)]
        action: KeysAction,
    }

    #[derive(Subcommand, Debug)]
    enum KeysAction {
        /// Make a key named NAME: printed once, as the last line of the output.
        Create {
            /// What the key is listed and revoked by: 1 to 64 of A-Z a-z 0-9 - _ . @
            name: String,
        },
        /// The active keys: name, tenant and when each was made (never a key or a hash).
        List,
        /// Revoke the active key named NAME: proxies refuse it once they next read the keys.
        Revoke { name: String },
    }

    /// `toolstub keys`: the store is the one `serve` would open with the
    /// same flags, configuration and environment (the backend chosen by
    /// [`Backend::of`]). Only `create` makes a new SQLite
    /// file; `list` and `revoke` need the store to be there.
    pub fn keys(args: KeysArgs) -> Result<()> {
        let overrides = crate::config::Overrides {
            db: args.db,
            store_url: args.store_url,
            ..crate::config::Overrides::default()
        };
        let config = crate::config::load(args.config.as_deref(), std::env::vars(), &overrides)?;
        let backend = Backend::of(&config);
        if let (Backend::Sqlite(path), false) =
            (&backend, matches!(args.action, KeysAction::Create { .. }))
        {
            if !path.exists() {
                bail!(
                    "no store at {} (pass --db FILE, --store-url URL or --config FILE)",
                    path.display()
                );
            }
        }
        let opened = open_backend(backend)?;
        let mut out = std::io::stdout().lock();
        match args.action {
            KeysAction::Create { name } => create_key(&opened, &name, &mut out),
            KeysAction::List => list_keys(&opened, &mut out),
            KeysAction::Revoke { name } => revoke_key(&opened, &name, &mut out),
        }
    }

    /// Makes a key, records its hash, and prints it once: last, alone on
    /// its line, after a line naming it, its tenant and the store.
    fn create_key(opened: &Opened, name: &str, out: &mut impl Write) -> Result<()> {
        if !crate::auth::key::valid_name(name) {
            bail!("invalid key name {name:?}: use 1 to 64 of A-Z a-z 0-9 - _ . @");
        }
        let key = crate::auth::ClientKey::generate()
            .context("drawing a key from the operating system's random source")?;
        let record = opened
            .rt
            .block_on(
                opened
                    .store
                    .create_key(name, key.hash, crate::store::system_now_ms()),
            )
            .with_context(|| format!("cannot create key {name:?}"))?;
        writeln!(
            out,
            "created key {name:?} (tenant {}) in {}; it is shown once, below, and the store keeps only its hash:",
            record.tenant,
            opened.store.describe()
        )
        .context("writing to standard output")?;
        writeln!(out, "{}", key.secret).context("writing to standard output")?;
        out.flush().context("writing to standard output")
    }

    fn list_keys(opened: &Opened, out: &mut impl Write) -> Result<()> {
        let keys = opened.rt.block_on(opened.store.keys())?;
        let rows: Vec<Vec<String>> = keys
            .iter()
            .map(|k| vec![k.name.clone(), k.tenant.to_string(), rfc3339(k.created_at)])
            .collect();
        print_table(
            out,
            &["NAME", "TENANT", "CREATED (UTC)"],
            &[false, false, false],
            &rows,
        )
    }

    fn revoke_key(opened: &Opened, name: &str, out: &mut impl Write) -> Result<()> {
        let revoked = opened
            .rt
            .block_on(opened.store.revoke_key(name, crate::store::system_now_ms()))
            .with_context(|| format!("cannot revoke key {name:?}"))?;
        if !revoked {
            bail!("no active key is named {name:?} (toolstub keys list shows them)");
        }
        writeln!(out, "revoked key {name:?}").context("writing to standard output")
    }

    /// Unix milliseconds as RFC 3339 in UTC (`2023-11-14T22:13:20Z`).
    fn rfc3339(ms: i64) -> String {
        utc_as(ms, "%Y-%m-%dT%H:%M:%SZ")
    }

    fn print_json<T: serde::Serialize>(out: &mut impl Write, value: &T) -> Result<()> {
        serde_json::to_writer_pretty(&mut *out, value)
            .context("writing JSON to standard output")?;
        writeln!(out).context("writing to standard output")?;
        Ok(())
    }

    /// A snippet on one table line: control characters escaped (so a newline
    /// cannot break the table), at most 100 characters.
    fn one_line(s: &str) -> String {
        let mut escaped = String::with_capacity(s.len());
        for c in s.chars() {
            match c {
                '\n' => escaped.push_str("\\n"),
                '\r' => escaped.push_str("\\r"),
                '\t' => escaped.push_str("\\t"),
                c if c.is_control() => escaped.extend(c.escape_default()),
                c => escaped.push(c),
            }
        }
        crate::synopsis::clip(&escaped, 100)
    }

    /// A BM25 score readable at any magnitude.
    fn score(s: f64) -> String {
        if s != 0.0 && s.abs() < 0.01 {
            format!("{s:.2e}")
        } else {
            format!("{s:.3}")
        }
    }

    /// Columns padded to their widest cell (in characters); `right` aligns numbers.
    fn print_table(
        out: &mut impl Write,
        header: &[&str],
        right: &[bool],
        rows: &[Vec<String>],
    ) -> Result<()> {
        let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
        for row in rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: Vec<&str>| -> String {
            let mut s = String::new();
            for (i, cell) in cells.iter().enumerate() {
                let pad = widths[i].saturating_sub(cell.chars().count());
                let last = i + 1 == cells.len();
                if right.get(i).copied().unwrap_or(false) {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(cell);
                } else {
                    s.push_str(cell);
                    if !last {
                        s.push_str(&" ".repeat(pad));
                    }
                }
                if !last {
                    s.push_str("  ");
                }
            }
            s
        };
        writeln!(out, "{}", line(header.to_vec())).context("writing to standard output")?;
        for row in rows {
            writeln!(out, "{}", line(row.iter().map(String::as_str).collect()))
                .context("writing to standard output")?;
        }
        if rows.is_empty() {
            writeln!(out, "(none)").context("writing to standard output")?;
        }
        Ok(())
    }

    /// Unix milliseconds as `YYYY-MM-DD HH:MM:SS` (UTC).
    fn utc(ms: i64) -> String {
        utc_as(ms, "%Y-%m-%d %H:%M:%S")
    }

    /// Unix milliseconds in UTC, in `format` (`?` out of chrono's range).
    fn utc_as(ms: i64, format: &str) -> String {
        chrono::DateTime::from_timestamp_millis(ms)
            .map_or_else(|| "?".to_string(), |t| t.format(format).to_string())
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn times_print_in_utc() {
            assert_eq!(utc(1_700_000_000_000), "2023-11-14 22:13:20");
            assert_eq!(rfc3339(1_700_000_000_999), "2023-11-14T22:13:20Z");
            assert_eq!(utc(-1), "1969-12-31 23:59:59");
            assert_eq!(utc(i64::MAX), "?");
        }

        #[test]
        fn snippets_stay_on_one_line_and_keep_unicode() {
            assert_eq!(one_line("a\nb\t日本😀\u{7}"), "a\\nb\\t日本😀\\u{7}");
            assert_eq!(score(0.000_012_3), "1.23e-5");
            assert_eq!(score(2.5), "2.500");
        }

        #[test]
        fn utc_formats_known_instants() {
            assert_eq!(rfc3339(1_700_000_000_000), "2023-11-14T22:13:20Z");
            assert_eq!(utc(0), "1970-01-01 00:00:00");
            assert_eq!(utc(1_700_000_000_000), "2023-11-14 22:13:20");
            assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
        }

        #[test]
        fn tables_align_columns() {
            let mut out = Vec::new();
            let rows = vec![
                vec!["a".to_string(), "1".to_string()],
                vec!["日本語".to_string(), "100".to_string()],
            ];
            print_table(&mut out, &["NAME", "N"], &[false, true], &rows).unwrap();
            assert_eq!(
                String::from_utf8(out).unwrap(),
                "NAME    N\na       1\n日本語   100\n"
            );
        }
    }
}
