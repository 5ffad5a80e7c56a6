//! `toolstub estimate`: replays the sessions under the given paths (the
//! user's own Claude Code, Codex, opencode and Gemini CLI folders when
//! none) and prints what toolstub would have saved them, offline.
//!
//! Files are replayed on every CPU, each session by one thread; the report
//! lists them in path order whatever thread finished first, so the output
//! is the same on every run.

use super::report::{table, SessionReport, Totals};
use super::sources;
use super::{replay, Prices, Shape};
use crate::rewrite::Policy;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// What to replay and how to print it.
#[derive(Debug, Clone)]
pub struct Options {
    pub paths: Vec<PathBuf>,
    pub config: Option<PathBuf>,
    /// The shapes trajectories are replayed in (other files have their own).
    pub shapes: Vec<Shape>,
    pub json: bool,
    /// Print the requests as read (one JSON line each) instead of replaying.
    pub print_requests: bool,
    /// Sessions listed in the table.
    pub rows: usize,
    /// Charge no recall rounds (see [`Prices::free_recalls`]).
    pub free_recalls: bool,
}

/// The JSON `toolstub estimate --json` prints.
#[derive(Serialize)]
struct Output<'a> {
    sessions: usize,
    saved_fraction: f64,
    totals: &'a Totals,
    /// Files skipped, each with why: no reader knows its format, it holds
    /// no request, or it could not be read.
    files_skipped: Vec<String>,
    per_session: &'a [SessionReport],
}

pub fn run(options: Options) -> Result<()> {
    let config = crate::config::load(
        options.config.as_deref(),
        std::env::vars(),
        &crate::config::Overrides::default(),
    )?;
    let paths = if options.paths.is_empty() {
        let defaults = sources::default_paths();
        if defaults.is_empty() {
            bail!("no PATH given and no session folder found (~/.claude/projects, ~/.codex/sessions, ~/.local/share/opencode, ~/.gemini/tmp/*/chats): name the files or folders to replay");
        }
        defaults
    } else {
        options.paths.clone()
    };
    let files = sources::files(&paths)?;
    if options.print_requests {
        return print_requests(&files, &options.shapes);
    }
    let prices = Prices {
        table: config.pricing.clone(),
        free_recalls: options.free_recalls,
        restore_history: config.restore_history,
    };
    let (reports, skipped) = replay_files(&files, &options.shapes, &config.policy, &prices)?;
    let totals = Totals::of(&reports);
    let mut stdout = std::io::stdout().lock();
    if options.json {
        let out = Output {
            sessions: totals.sessions,
            saved_fraction: totals.saved_fraction,
            totals: &totals,
            files_skipped: skipped,
            per_session: &reports,
        };
        serde_json::to_writer(&mut stdout, &out).context("writing the report")?;
        writeln!(stdout)?;
    } else {
        write!(stdout, "{}", table(&reports, &totals, options.rows))?;
        // What stood in for what the files do not record, once per kind.
        let mut assumed: Vec<(&str, usize)> = Vec::new();
        for a in reports.iter().flat_map(|r| r.assumed.iter()) {
            match assumed.iter_mut().find(|(text, _)| *text == a.as_str()) {
                Some(entry) => entry.1 += 1,
                None => assumed.push((a.as_str(), 1)),
            }
        }
        for (text, sessions) in assumed {
            writeln!(stdout, "assumed in {sessions} sessions: {text}")?;
        }
        if !skipped.is_empty() {
            writeln!(
                stdout,
                "{} files skipped (--json lists each with why):",
                skipped.len()
            )?;
            for s in skipped.iter().take(5) {
                writeln!(stdout, "  {s}")?;
            }
        }
    }
    Ok(())
}

/// Each request of each session of `files`, as it will be replayed: one
/// JSON object a line (`session`, `source`, `shape`, `model`, `assumed`,
/// `placeholders`, `index`, `at`, `body`, `answer`), for checking what a
/// file was read as; a file skipped is said on stderr, with why.
fn print_requests(files: &[PathBuf], shapes: &[Shape]) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    for path in files {
        let sessions = match sources::read(path, shapes) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("skipped {}: {e:#}", path.display());
                continue;
            }
        };
        for session in sessions {
            for (index, r) in session.requests.iter().enumerate() {
                let body: serde_json::Value = serde_json::from_str(&r.body)
                    .with_context(|| format!("{}: request {index}", session.name))?;
                let line = serde_json::json!({
                    "session": session.name,
                    "source": session.source.name(),
                    "shape": session.shape.name(),
                    "model": session.model,
                    "assumed": session.assumed,
                    "placeholders": session.placeholders,
                    "index": index,
                    "at": r.at,
                    "body": body,
                    "answer": r.answer,
                });
                writeln!(stdout, "{line}")?;
            }
        }
    }
    Ok(())
}

/// Every session of `files` replayed, in file order, and the files that
/// held none.
pub fn replay_files(
    files: &[PathBuf],
    shapes: &[Shape],
    policy: &Policy,
    prices: &Prices,
) -> Result<(Vec<SessionReport>, Vec<String>)> {
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, Result<Vec<SessionReport>>)>> = Mutex::new(Vec::new());
    let progress = files.len() > 1 && std::io::stderr().is_terminal();
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(files.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(path) = files.get(i) else {
                    break;
                };
                let reports = sources::read(path, shapes)
                    .map(|sessions| sessions.iter().map(|s| replay(s, policy, prices)).collect());
                if let Ok(mut r) = results.lock() {
                    r.push((i, reports));
                }
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if progress {
                    bar(n, files.len());
                }
            });
        }
    });
    if progress {
        eprintln!();
    }
    let mut results = results
        .into_inner()
        .map_err(|_| anyhow::anyhow!("a replay thread panicked"))?;
    results.sort_by_key(|(i, _)| *i);
    let mut reports = Vec::new();
    let mut skipped = Vec::new();
    for (i, r) in results {
        match r {
            Ok(r) if r.is_empty() => skipped.push(format!(
                "{}: no session with a request in it",
                files[i].display()
            )),
            Ok(r) => reports.extend(r),
            // A file that cannot be read is listed with why, not fatal.
            Err(e) => skipped.push(format!("{}: {e:#}", files[i].display())),
        }
    }
    Ok((reports, skipped))
}

/// One line of progress on stderr: `[=====>    ] 120/301 files`.
fn bar(done: usize, total: usize) {
    const WIDTH: usize = 30;
    let filled = done * WIDTH / total.max(1);
    let mut line = String::with_capacity(WIDTH + 32);
    line.push('\r');
    line.push('[');
    for i in 0..WIDTH {
        line.push(match i.cmp(&filled) {
            std::cmp::Ordering::Less => '=',
            std::cmp::Ordering::Equal => '>',
            std::cmp::Ordering::Greater => ' ',
        });
    }
    line.push_str(&format!("] {done}/{total} files"));
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(line.as_bytes());
    let _ = err.flush();
}
