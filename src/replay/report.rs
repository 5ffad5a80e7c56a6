//! What a replay found, per session and in total, as `toolstub estimate`
//! prints it (a table, or one JSON object).

use super::cache::Bill;
use super::price::PriceModel;
use super::Recorded;
use crate::stats::grouped;
use serde::Serialize;
use std::fmt::Write as _;

/// One price model's bills of a session (or of many).
#[derive(Clone, Debug, Serialize)]
pub struct ModelBill {
    pub price_model: PriceModel,
    /// The session sent directly.
    pub direct: Bill,
    /// The session through toolstub, recall rounds included.
    pub toolstub: Bill,
    /// Of `toolstub`, the recall rounds.
    pub recall: Bill,
    pub direct_usd: f64,
    pub toolstub_usd: f64,
    pub recall_usd: f64,
    /// `direct_usd - toolstub_usd`.
    pub saved_usd: f64,
    /// `saved_usd / direct_usd` (0 when nothing was billed).
    pub saved_fraction: f64,
}

impl ModelBill {
    pub fn new(price_model: PriceModel) -> ModelBill {
        ModelBill {
            price_model,
            direct: Bill::default(),
            toolstub: Bill::default(),
            recall: Bill::default(),
            direct_usd: 0.0,
            toolstub_usd: 0.0,
            recall_usd: 0.0,
            saved_usd: 0.0,
            saved_fraction: 0.0,
        }
    }

    /// Prices the bills.
    pub fn finish(&mut self) {
        let m = &self.price_model;
        self.direct_usd = m.dollars(&self.direct);
        self.toolstub_usd = m.dollars(&self.toolstub);
        self.recall_usd = m.dollars(&self.recall);
        self.settle();
    }

    /// The saving from the dollars.
    fn settle(&mut self) {
        self.saved_usd = self.direct_usd - self.toolstub_usd;
        self.saved_fraction = if self.direct_usd > 0.0 {
            self.saved_usd / self.direct_usd
        } else {
            0.0
        };
    }

    fn absorb(&mut self, other: &ModelBill) {
        self.direct.add(other.direct);
        self.toolstub.add(other.toolstub);
        self.recall.add(other.recall);
        self.direct_usd += other.direct_usd;
        self.toolstub_usd += other.toolstub_usd;
        self.recall_usd += other.recall_usd;
        self.settle();
    }
}

/// Direct and through toolstub.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Pair {
    pub direct: u64,
    pub toolstub: u64,
}

/// One recall round charged.
#[derive(Clone, Debug, Serialize)]
pub struct Recall {
    pub request: usize,
    pub quoted: Vec<String>,
}

/// One session replayed.
#[derive(Clone, Debug, Serialize)]
pub struct SessionReport {
    pub name: String,
    pub source: &'static str,
    pub shape: &'static str,
    pub model: Option<String>,
    /// What the replay stood in for where the file records nothing (tool
    /// definitions, system prompt, model), in words.
    pub assumed: Vec<String>,
    /// Blocks of a known size added before every request for it (name, tokens).
    pub placeholders: Vec<(String, u64)>,
    pub requests: usize,
    /// Requests whose body could not be read as its shape (not billed).
    pub unreadable: usize,
    /// Distinct outputs externalized at least once.
    pub outputs_externalized: usize,
    /// Their original characters.
    pub externalized_chars: u64,
    /// Outputs externalized, summed over requests.
    pub externalizations: usize,
    /// Input tokens, summed over requests (recall rounds included).
    pub input_tokens: Pair,
    /// The largest request.
    pub peak_context: Pair,
    /// The model's context window in tokens, from the config's table: the
    /// model each request names as the rewrite reads it, else the
    /// session's, else the default window (the largest of its requests';
    /// `None`: no window applies).
    pub context_window: Option<u64>,
    /// Requests over that window, direct and through toolstub.
    pub over_window: Pair,
    /// The fewest bytes of a request's body per token counted of it
    /// (placeholders aside), over its requests of at least 10,000 such
    /// tokens: what the context-window rescue's ratio is checked against;
    /// 0 when none.
    pub min_bytes_per_token: f64,
    pub recall_rounds: usize,
    /// Requests that came after the provider's cache had expired (more
    /// than its lifetime since the conversation's request before, by the
    /// file's timestamps) and held something the expiry released.
    pub after_expiry: usize,
    /// Tokens read back by those rounds.
    pub recall_read_tokens: u64,
    /// Characters read back by those rounds (what `tool_result_read`
    /// returns of each stubbed output holding what the answer quoted).
    pub recall_read_chars: u64,
    /// Each recall round: the request (0-based) and what its answer quoted
    /// that only the direct request carried (up to 5 identifiers).
    pub recalls: Vec<Recall>,
    /// The session's own provider first (the default price model).
    pub models: Vec<ModelBill>,
    /// At the default price model.
    pub saved_fraction: f64,
}

impl SessionReport {
    pub fn new(session: &Recorded) -> SessionReport {
        SessionReport {
            name: session.name.clone(),
            source: session.source.name(),
            shape: session.shape.name(),
            model: session.model.clone(),
            assumed: session.assumed.clone(),
            placeholders: session.placeholders.clone(),
            requests: 0,
            unreadable: 0,
            outputs_externalized: 0,
            externalized_chars: 0,
            externalizations: 0,
            input_tokens: Pair::default(),
            peak_context: Pair::default(),
            context_window: None,
            over_window: Pair::default(),
            min_bytes_per_token: 0.0,
            recall_rounds: 0,
            after_expiry: 0,
            recall_read_tokens: 0,
            recall_read_chars: 0,
            recalls: Vec::new(),
            models: Vec::new(),
            saved_fraction: 0.0,
        }
    }
}

/// Every session together.
#[derive(Clone, Debug, Serialize)]
pub struct Totals {
    pub sessions: usize,
    pub requests: usize,
    pub unreadable: usize,
    pub outputs_externalized: usize,
    pub externalizations: usize,
    pub input_tokens: Pair,
    /// The largest request of any session.
    pub peak_context: Pair,
    /// Requests over their model's context window, direct and through
    /// toolstub.
    pub over_window: Pair,
    /// Sessions with a request over the window, direct and through toolstub.
    pub sessions_over_window: Pair,
    /// The fewest bytes per token of any session's requests (see
    /// [`SessionReport::min_bytes_per_token`]).
    pub min_bytes_per_token: f64,
    pub recall_rounds: usize,
    /// [`SessionReport::after_expiry`], summed.
    pub after_expiry: usize,
    pub recall_read_tokens: u64,
    pub recall_read_chars: u64,
    /// Recall rounds per output externalized (0 when none was).
    pub recall_rounds_per_output: f64,
    /// Billed input saved, each session at its own provider's price model
    /// (the default), net of recalls.
    pub saved_fraction: f64,
    pub direct_usd: f64,
    pub toolstub_usd: f64,
    /// Each price model over every session.
    pub by_price_model: Vec<ModelBill>,
    /// Sessions that cost more through toolstub (default price model).
    pub sessions_costlier: usize,
    /// The lowest saved fraction of any session (default price model).
    pub worst_saved_fraction: f64,
}

impl Totals {
    pub fn of(reports: &[SessionReport]) -> Totals {
        let mut t = Totals {
            sessions: reports.len(),
            requests: 0,
            unreadable: 0,
            outputs_externalized: 0,
            externalizations: 0,
            input_tokens: Pair::default(),
            peak_context: Pair::default(),
            over_window: Pair::default(),
            sessions_over_window: Pair::default(),
            min_bytes_per_token: 0.0,
            recall_rounds: 0,
            after_expiry: 0,
            recall_read_tokens: 0,
            recall_read_chars: 0,
            recall_rounds_per_output: 0.0,
            saved_fraction: 0.0,
            direct_usd: 0.0,
            toolstub_usd: 0.0,
            by_price_model: Vec::new(),
            sessions_costlier: 0,
            worst_saved_fraction: 0.0,
        };
        let mut worst: Option<f64> = None;
        for r in reports {
            t.requests += r.requests;
            t.unreadable += r.unreadable;
            t.outputs_externalized += r.outputs_externalized;
            t.externalizations += r.externalizations;
            t.input_tokens.direct += r.input_tokens.direct;
            t.input_tokens.toolstub += r.input_tokens.toolstub;
            t.peak_context.direct = t.peak_context.direct.max(r.peak_context.direct);
            t.peak_context.toolstub = t.peak_context.toolstub.max(r.peak_context.toolstub);
            t.over_window.direct += r.over_window.direct;
            t.over_window.toolstub += r.over_window.toolstub;
            t.sessions_over_window.direct += u64::from(r.over_window.direct > 0);
            t.sessions_over_window.toolstub += u64::from(r.over_window.toolstub > 0);
            if r.min_bytes_per_token > 0.0
                && (t.min_bytes_per_token == 0.0 || r.min_bytes_per_token < t.min_bytes_per_token)
            {
                t.min_bytes_per_token = r.min_bytes_per_token;
            }
            t.recall_rounds += r.recall_rounds;
            t.after_expiry += r.after_expiry;
            t.recall_read_tokens += r.recall_read_tokens;
            t.recall_read_chars += r.recall_read_chars;
            if let Some(own) = r.models.first() {
                t.direct_usd += own.direct_usd;
                t.toolstub_usd += own.toolstub_usd;
                if own.saved_usd < 0.0 {
                    t.sessions_costlier += 1;
                }
            }
            worst = Some(worst.map_or(r.saved_fraction, |w: f64| w.min(r.saved_fraction)));
            for m in &r.models {
                match t
                    .by_price_model
                    .iter_mut()
                    .find(|b| b.price_model.name == m.price_model.name)
                {
                    Some(b) => b.absorb(m),
                    None => t.by_price_model.push(m.clone()),
                }
            }
        }
        t.worst_saved_fraction = worst.unwrap_or(0.0);
        if t.outputs_externalized > 0 {
            t.recall_rounds_per_output = t.recall_rounds as f64 / t.outputs_externalized as f64;
        }
        t.by_price_model
            .sort_by(|a, b| a.price_model.name.cmp(b.price_model.name));
        t.saved_fraction = if t.direct_usd > 0.0 {
            (t.direct_usd - t.toolstub_usd) / t.direct_usd
        } else {
            0.0
        };
        t
    }
}

fn percent(f: f64) -> String {
    format!("{:+.1}%", f * 100.0)
}

/// The table `toolstub estimate` prints: one line per session (up to
/// `max_rows`, the costliest first), then the totals.
pub fn table(reports: &[SessionReport], totals: &Totals, max_rows: usize) -> String {
    let mut out = String::new();
    let mut rows: Vec<&SessionReport> = reports.iter().collect();
    rows.sort_by(|a, b| {
        let cost = |r: &SessionReport| r.models.first().map_or(0.0, |m| m.direct_usd);
        cost(b)
            .partial_cmp(&cost(a))
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| a.name.cmp(&b.name))
    });
    let _ = writeln!(
        out,
        "{:<44} {:>5} {:>5} {:>13} {:>13} {:>10} {:>10} {:>8} {:>6} {:>9} {:>9}",
        "session",
        "reqs",
        "outs",
        "input tokens",
        "via toolstub",
        "billed $",
        "toolstub $",
        "saved",
        "recall",
        "peak ctx",
        "over win"
    );
    for r in rows.iter().take(max_rows) {
        let own = r.models.first();
        let name = if r.name.chars().count() > 44 {
            let tail: String = r
                .name
                .chars()
                .rev()
                .take(43)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            format!("…{tail}")
        } else {
            r.name.clone()
        };
        let _ = writeln!(
            out,
            "{:<44} {:>5} {:>5} {:>13} {:>13} {:>10.4} {:>10.4} {:>8} {:>6} {:>9} {:>9}",
            name,
            r.requests,
            r.outputs_externalized,
            grouped(r.input_tokens.direct),
            grouped(r.input_tokens.toolstub),
            own.map_or(0.0, |m| m.direct_usd),
            own.map_or(0.0, |m| m.toolstub_usd),
            percent(r.saved_fraction),
            r.recall_rounds,
            grouped(r.peak_context.direct),
            format!("{}->{}", r.over_window.direct, r.over_window.toolstub)
        );
    }
    if reports.len() > max_rows {
        let _ = writeln!(
            out,
            "({} more sessions; --json lists every one)",
            reports.len() - max_rows
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{} sessions, {} requests, {} outputs externalized, {} recall rounds charged ({:.2} per output externalized; {} characters, {} tokens read back)",
        totals.sessions,
        grouped(totals.requests as u64),
        grouped(totals.outputs_externalized as u64),
        grouped(totals.recall_rounds as u64),
        totals.recall_rounds_per_output,
        grouped(totals.recall_read_chars),
        grouped(totals.recall_read_tokens)
    );
    let _ = writeln!(
        out,
        "input tokens: {} sent directly, {} through toolstub; peak context {} -> {}",
        grouped(totals.input_tokens.direct),
        grouped(totals.input_tokens.toolstub),
        grouped(totals.peak_context.direct),
        grouped(totals.peak_context.toolstub)
    );
    let _ = writeln!(
        out,
        "requests after the provider's cache expired that released kept outputs: {}",
        grouped(totals.after_expiry as u64)
    );
    let _ = writeln!(
        out,
        "requests over the model's context window: {} sent directly, {} through toolstub (in {} and {} sessions)",
        grouped(totals.over_window.direct),
        grouped(totals.over_window.toolstub),
        grouped(totals.sessions_over_window.direct),
        grouped(totals.sessions_over_window.toolstub)
    );
    for m in &totals.by_price_model {
        let p = &m.price_model;
        let _ = writeln!(
            out,
            "{:<9} direct: {} input + {} cache write + {} cache read = ${:.2}; toolstub: {} + {} + {} = ${:.2} (recalls ${:.2}); saved {}",
            p.name,
            grouped(m.direct.input),
            grouped(m.direct.cache_write),
            grouped(m.direct.cache_read),
            m.direct_usd,
            grouped(m.toolstub.input),
            grouped(m.toolstub.cache_write),
            grouped(m.toolstub.cache_read),
            m.toolstub_usd,
            m.recall_usd,
            percent(m.saved_fraction)
        );
    }
    let _ = writeln!(
        out,
        "saved at each session's own provider: {} (${:.2} of ${:.2}), net of recalls; {} sessions cost more, the worst {}",
        percent(totals.saved_fraction),
        totals.direct_usd - totals.toolstub_usd,
        totals.direct_usd,
        totals.sessions_costlier,
        percent(totals.worst_saved_fraction)
    );
    out
}
