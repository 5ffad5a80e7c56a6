//! Reading recorded sessions from the files agents keep, whatever the
//! format: a path is a file or a folder (walked, in name order), and each
//! file is recognised by its content, not its name.
//!
//! - [`trajectory`]: mini-swe-agent `*.traj.json`;
//! - [`claude_code`]: Claude Code `*.jsonl` session files;
//! - [`codex`]: Codex `rollout-*.jsonl` files.

pub mod claude_code;
pub mod codex;
pub mod trajectory;

use super::{Recorded, Shape};
use anyhow::{Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The files under `paths` that may hold sessions (`.json` and `.jsonl`),
/// each once, folders walked recursively, in path order.
pub fn files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).with_context(|| format!("{}", p.display()))?;
        if meta.is_dir() {
            walk(p, &mut out).with_context(|| format!("reading the folder {}", p.display()))?;
        } else {
            out.push(p.clone());
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            walk(&path, out)?;
        } else if kind.is_file()
            && path
                .extension()
                .is_some_and(|e| e == "json" || e == "jsonl")
        {
            out.push(path);
        }
    }
    Ok(())
}

/// The user's own session folders: Claude Code's (`$CLAUDE_CONFIG_DIR` or
/// `~/.claude`, its `projects/`) and Codex's (`$CODEX_HOME` or `~/.codex`,
/// its `sessions/`), those that exist.
pub fn default_paths() -> Vec<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let dir = |var: &str, default: &str| -> Option<PathBuf> {
        std::env::var_os(var)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(default)))
    };
    [
        dir("CLAUDE_CONFIG_DIR", ".claude").map(|d| d.join("projects")),
        dir("CODEX_HOME", ".codex").map(|d| d.join("sessions")),
    ]
    .into_iter()
    .flatten()
    .filter(|p| p.is_dir())
    .collect()
}

/// The model most requests name (the first of them on a tie): a session's
/// side calls may name a smaller one.
pub fn main_model<'a>(models: impl Iterator<Item = &'a str>) -> Option<String> {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for m in models {
        match counts.iter_mut().find(|(name, _)| *name == m) {
            Some(c) => c.1 += 1,
            None => counts.push((m, 1)),
        }
    }
    let best = counts.iter().map(|c| c.1).max()?;
    counts
        .into_iter()
        .find(|c| c.1 == best)
        .map(|c| c.0.to_string())
}

/// The sessions of one file: a trajectory in each of `shapes`, a Claude
/// Code or Codex file in its own shape. A file of none of these formats
/// gives none (`Ok(vec![])`).
pub fn read(path: &Path, shapes: &[Shape]) -> Result<Vec<Recorded>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    let name = path.display().to_string();
    if let Ok(value) = serde_json::from_str::<Value>(&text) {
        if trajectory::recognizes(&value) {
            return Ok(trajectory::read(&name, &value, shapes));
        }
    }
    let entries: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    if codex::recognizes(&entries) {
        return Ok(codex::read(&name, &entries));
    }
    if claude_code::recognizes(&entries) {
        return Ok(claude_code::read(&name, &entries));
    }
    Ok(Vec::new())
}

/// What a model wrote in a tool call's arguments: their string values.
pub fn strings(value: &Value) -> String {
    super::prompt::strings(value, super::prompt::Framing::Keep)
}

/// `value` as compact JSON with every object's keys sorted (what Claude
/// Code hashes its messages over), whatever order the map keeps.
pub fn canonical(value: &Value) -> String {
    fn write(v: &Value, out: &mut String) {
        match v {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    if let Some(v) = map.get(k) {
                        write(v, out);
                    }
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// Seconds since the epoch of an RFC 3339 UTC time
/// (`2026-12-02T07:09:39.944Z`); `None` for anything else.
pub fn epoch_seconds(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute) = (num(11..13)?, num(14..16)?);
    let rest = s.get(17..)?;
    let end = rest.find(['Z', '+', '-'])?;
    if &rest[end..] != "Z" && &rest[end..] != "+00:00" {
        return None;
    }
    let seconds: f64 = rest[..end].parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + hour * 3_600 + minute * 60) as f64 + seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_read_as_utc_seconds() {
        assert_eq!(epoch_seconds("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(
            epoch_seconds("2026-12-02T07:09:39.500Z"),
            Some(1_796_195_379.5)
        );
        assert_eq!(
            epoch_seconds("2000-03-01T00:00:00+00:00"),
            Some(951_868_800.0)
        );
        assert_eq!(epoch_seconds("yesterday"), None);
        assert_eq!(epoch_seconds("2026-12-02T07:09:39+02:00"), None);
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let v: Value =
            serde_json::from_str(r#"{"role":"user","content":[{"type":"text","text":"é\n"}]}"#)
                .unwrap_or(Value::Null);
        assert_eq!(
            canonical(&v),
            r#"{"content":[{"text":"é\n","type":"text"}],"role":"user"}"#
        );
    }
}
