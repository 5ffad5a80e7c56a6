//! The command line: `toolstub synopsis` (and, as they land, `serve` and
//! `results`). Parsing is clap's; each subcommand is one function that returns
//! an error with context, printed once by [`main`].

use crate::refs::sha256_hex;
use crate::stub::{render, RecallToolNames, StubHeader};
use crate::synopsis::{synopsize, Hints, Kind, Synopsis};
use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

/// The default per-stub preview budget (SPEC section 2).
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
    /// Print the stub (without a ref) that toolstub would put in place of one tool output.
    Synopsis(SynopsisArgs),
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
        Command::Synopsis(args) => synopsis(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("toolstub: {err:#}");
            ExitCode::from(2)
        }
    }
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
