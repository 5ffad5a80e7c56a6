//! The identifying values of list items: what the model most often needs
//! from a long JSON list (the number of the pull request, the id of the
//! product, the login of the user), kept in the synopsis for as many items
//! as a budget allows, in the items' order.
//!
//! **Which values.** In a JSON array of objects, each item's members are
//! ranked by key name (compared without regard to ASCII case):
//!
//! | rank | keys | value shape |
//! |---|---|---|
//! | 0 | `id`, `_id` | token |
//! | 1 | `number`, `sha`, `key`, `slug`, `sku`, `login`, `username`, `handle`, `email`, `uuid`, `guid`, `symbol`, `ticker`, `doi`, `isbn` | token |
//! | 2 | `name`, `title` | text |
//! | 3 | a compound key whose last word is one of the above or `code` (`node_id`, `userId`, `order_key`, `full_name`, `displayName`, `course_code`) | token, or text for names and titles |
//! | 3 | `url`, `uri`, `href`, `link`, `permalink` and keys ending in `url` or `Url` | token |
//! | 3 | `path`, `file`, `filename`, `ref` | token |
//! | 3 | `date` | text |
//!
//! Words of a compound key are split at `_`, `-`, `.`, a space, or a change
//! from a lower-case letter to an upper-case one. A value counts when it is an
//! integer, or a string on one line that is not empty: a *token* has no
//! whitespace and at most 200 characters (a `key` holding prose is not an
//! identifier), *text* any such string. Floats, booleans, nulls, objects and
//! arrays never count.
//!
//! The members of an item's member objects count too, one rank lower and
//! named by their path (`user.login`, `snippet.title`), except their ids
//! (`created_by.id` names another object, not the item). When an item is one
//! object under one key (GraphQL's `{"node": {...}}`, YouTube's
//! `{"playlistItem": {...}}`), that object's members count as the item's own.
//!
//! Each item shows its best [`ITEM_VALUES`] values (lowest rank, then first
//! in the item), in the item's order: `[3] id=153, name="Samsung Laptop
//! v44", slug="samsung-laptop-v44"`. Strings are shown as JSON literals,
//! names and titles clipped to [`NAME_CHARS`] characters, tokens to
//! [`TOKEN_CHARS`], URLs to [`URL_CHARS`]; a clipped literal is followed by
//! `...` outside its quotes, so what is inside the quotes is always the
//! value's own beginning.
//!
//! **Which lists.** Every array of objects up to [`LIST_DEPTH`] containers
//! deep is a list, named by its path with indexes left out (`[]`,
//! `videos[]`, `[].labels[]`), at most [`LISTS`] of them, in the order they
//! are met. A list whose first [`DRY_ITEMS`] items hold no such value, or
//! whose first item is no object, is given up.
//!
//! **The budget.** The lines of all lists together hold at most
//! [`BUDGET_CHARS`] characters as the stub lays them out (each line's
//! `- ` and line break, and the lines that name the lists, counted), and
//! less when the rest of the JSON synopsis is long (keys of 60 characters,
//! long examples), so that a stub stays under 5,000 characters. Shallower lists come first (`[]` before
//! `[].labels[]`), then the order they were met; each list shows its items
//! from the first on while they fit, under a line saying how many there are
//! and how many are shown. 1,500 characters are 15 to 40 items of a
//! typical list (25 of `{id, name, email}` users), and keep a stub near
//! 2,000 characters: on the recorded sessions of Toolathlon (215 agent runs
//! with MCP servers such as WooCommerce, Notion, Canvas, YouTube, W&B and
//! GitHub), the stubs of outputs over 20,000 characters have a median of
//! 1,315 characters and a 90th percentile of 2,293. Beyond the budget an
//! item is one search away (`tool_result_search` for its name or id).
//!
//! The walk that gathers them stops looking at items once their list's
//! budget is spent: a 10 MB array costs the same as before past its first
//! items.

use super::lines::{clip, one_line};

/// What the lines of all lists may hold together, in characters.
pub(crate) const BUDGET_CHARS: usize = 1500;
/// Values shown per item.
pub(crate) const ITEM_VALUES: usize = 4;
/// Lists followed at most.
pub(crate) const LISTS: usize = 4;
/// An array deeper than this many containers is not a list.
pub(crate) const LIST_DEPTH: usize = 5;
/// A list whose first this many items show nothing is given up.
pub(crate) const DRY_ITEMS: usize = 20;
/// A name or title is shown with at most this many characters.
pub(crate) const NAME_CHARS: usize = 60;
/// A token (an id, a key, a SHA) is shown with at most this many characters.
pub(crate) const TOKEN_CHARS: usize = 80;
/// A URL is shown with at most this many characters.
pub(crate) const URL_CHARS: usize = 100;
/// A token longer than this is no identifier.
const TOKEN_MAX: usize = 200;
/// A key is shown with at most this many characters.
const KEY_CHARS: usize = 40;

/// How a value of a key must look to be shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    Token,
    Text,
    Url,
}

/// A key's rank and the shape its values must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rule {
    pub rank: u8,
    pub shape: Shape,
}

const RANK_1: [&str; 15] = [
    "number", "sha", "key", "slug", "sku", "login", "username", "handle", "email", "uuid", "guid",
    "symbol", "ticker", "doi", "isbn",
];
const URLS: [&str; 5] = ["url", "uri", "href", "link", "permalink"];
const PATHS: [&str; 4] = ["path", "file", "filename", "ref"];

fn is_one_of(word: &str, words: &[&str]) -> bool {
    words.iter().any(|w| w.eq_ignore_ascii_case(word))
}

/// The rule for `key` (see the module comment), if it identifies.
pub(crate) fn classify(key: &str) -> Option<Rule> {
    let rule = |rank, shape| Some(Rule { rank, shape });
    if key.eq_ignore_ascii_case("id") || key == "_id" {
        return rule(0, Shape::Token);
    }
    if is_one_of(key, &RANK_1) {
        return rule(1, Shape::Token);
    }
    if key.eq_ignore_ascii_case("name") || key.eq_ignore_ascii_case("title") {
        return rule(2, Shape::Text);
    }
    if is_one_of(key, &URLS) {
        return rule(3, Shape::Url);
    }
    if is_one_of(key, &PATHS) {
        return rule(3, Shape::Token);
    }
    if key.eq_ignore_ascii_case("date") {
        return rule(3, Shape::Text);
    }
    let last = last_word(key)?;
    if last.eq_ignore_ascii_case("url") {
        return rule(3, Shape::Url);
    }
    if last.eq_ignore_ascii_case("name") || last.eq_ignore_ascii_case("title") {
        return rule(3, Shape::Text);
    }
    if last.eq_ignore_ascii_case("id")
        || last.eq_ignore_ascii_case("code")
        || is_one_of(last, &RANK_1)
    {
        return rule(3, Shape::Token);
    }
    None
}

/// The last word of a compound key: after the last `_`, `-`, `.` or space,
/// or from the last upper-case letter that follows a lower-case one. `None`
/// for a key of one word.
fn last_word(key: &str) -> Option<&str> {
    let bytes = key.as_bytes();
    let separator = |b: u8| matches!(b, b'_' | b'-' | b'.' | b' ');
    let mut start = None;
    for i in 1..bytes.len() {
        let b = bytes[i];
        if (separator(bytes[i - 1]) && !separator(b))
            || (b.is_ascii_uppercase() && bytes[i - 1].is_ascii_lowercase())
        {
            start = Some(i);
        }
    }
    Some(&key[start?..]).map(|w| w.trim_end_matches(['_', '-', '.', ' ']))
}

/// A scalar met as the value of an identifying key, as far as needed.
#[derive(Debug)]
pub(crate) enum Captured {
    Int(String),
    Str {
        /// The trimmed string's first [`TOKEN_MAX`] + 1 characters.
        head: String,
        /// The trimmed string's length in characters.
        chars: usize,
        multiline: bool,
        whitespace: bool,
    },
}

impl Captured {
    pub(crate) fn string(v: &str) -> Captured {
        let t = v.trim();
        let end = t
            .char_indices()
            .nth(TOKEN_MAX + 1)
            .map_or(t.len(), |(i, _)| i);
        Captured::Str {
            head: t[..end].to_string(),
            chars: t.chars().count(),
            multiline: t.contains(['\n', '\r']),
            whitespace: t.contains(char::is_whitespace),
        }
    }

    /// The value as shown, when it has the shape `rule` asks for.
    pub(crate) fn shown(&self, rule: Rule) -> Option<String> {
        match self {
            Captured::Int(n) => (rule.shape != Shape::Url).then(|| n.clone()),
            Captured::Str {
                head,
                chars,
                multiline,
                whitespace,
            } => {
                if *chars == 0 || *multiline {
                    return None;
                }
                let cap = match rule.shape {
                    Shape::Text => NAME_CHARS,
                    Shape::Token | Shape::Url if *whitespace || *chars > TOKEN_MAX => return None,
                    Shape::Token => TOKEN_CHARS,
                    Shape::Url => URL_CHARS,
                };
                Some(literal(head, *chars, cap))
            }
        }
    }
}

/// `"value"`, or `"beginning"...` when the value is over `cap` characters.
fn literal(value: &str, chars: usize, cap: usize) -> String {
    if chars <= cap {
        return serde_json::to_string(value).unwrap_or_default();
    }
    let end = value
        .char_indices()
        .nth(cap)
        .map_or(value.len(), |(i, _)| i);
    let mut out = serde_json::to_string(&value[..end]).unwrap_or_default();
    out.push_str("...");
    out
}

/// One identifying value of an item.
#[derive(Debug)]
pub(crate) struct Candidate {
    pub rank: u8,
    /// 0 for the item's own members, 1 for its member objects' members.
    pub level: u8,
    /// The member's place in the item.
    pub order: usize,
    /// `id`, or `user.login` at level 1.
    pub key: String,
    pub value: String,
}

impl Candidate {
    pub(crate) fn new(rule: Rule, level: u8, order: usize, key: &str, value: String) -> Candidate {
        Candidate {
            rank: rule.rank,
            level,
            order,
            key: one_line(key, KEY_CHARS),
            value,
        }
    }
}

/// One list being gathered.
#[derive(Debug)]
struct List {
    /// The path with indexes left out: `[]`, `videos[]`.
    path: String,
    /// How many `[]` the path has (shallower lists are shown first).
    depth: usize,
    lines: Vec<String>,
    chars: usize,
    /// Items looked at that showed nothing, while no item showed anything.
    dry: usize,
    closed: bool,
    /// Arrays met at this path, and their items in all.
    instances: usize,
    items: usize,
}

/// The lists of one JSON value (see the module comment).
#[derive(Debug, Default)]
pub(crate) struct Lists {
    lists: Vec<List>,
}

impl Lists {
    /// Whether any list may still take an item, or a new one be opened.
    pub(crate) fn room(&self) -> bool {
        self.lists.len() < LISTS || self.lists.iter().any(List::wants)
    }

    /// The list for an array at `path` (its indexes written), opened if new.
    pub(crate) fn open(&mut self, path: &str) -> Option<usize> {
        let normal = without_indexes(path);
        if let Some(i) = self.lists.iter().position(|l| l.path == normal) {
            return Some(i);
        }
        if self.lists.len() >= LISTS {
            return None;
        }
        let depth = normal.matches("[]").count();
        self.lists.push(List {
            path: normal,
            depth,
            lines: Vec::new(),
            chars: 0,
            dry: 0,
            closed: false,
            instances: 0,
            items: 0,
        });
        Some(self.lists.len() - 1)
    }

    /// Whether list `i` takes more items.
    pub(crate) fn wants(&self, i: usize) -> bool {
        self.lists.get(i).is_some_and(List::wants)
    }

    /// An item of list `i` that is no object: the array is no list.
    pub(crate) fn not_an_object(&mut self, i: usize) {
        if let Some(l) = self.lists.get_mut(i) {
            if l.lines.is_empty() {
                l.closed = true;
            }
        }
    }

    /// One array at list `i`'s path ended, with `len` items.
    pub(crate) fn ended(&mut self, i: usize, len: usize) {
        if let Some(l) = self.lists.get_mut(i) {
            l.instances += 1;
            l.items += len;
        }
    }

    /// An item of list `i` at `path`, with its candidates; `promote` when the
    /// item is one object under one key.
    pub(crate) fn item(&mut self, i: usize, path: &str, mut cands: Vec<Candidate>, promote: bool) {
        let Some(l) = self.lists.get_mut(i) else {
            return;
        };
        if !promote {
            cands.retain(|c| c.level == 0 || c.rank > 0);
            for c in &mut cands {
                c.rank += c.level;
            }
        }
        if cands.is_empty() {
            if l.lines.is_empty() {
                l.dry += 1;
                if l.dry >= DRY_ITEMS {
                    l.closed = true;
                }
            }
            return;
        }
        cands.sort_by_key(|c| (c.rank, c.order));
        cands.truncate(ITEM_VALUES);
        cands.sort_by_key(|c| c.order);
        let values: Vec<String> = cands
            .iter()
            .map(|c| format!("{}={}", c.key, c.value))
            .collect();
        let line = super::lines::clip_line(format!(
            "{} {}",
            one_line(path, KEY_CHARS),
            values.join(", ")
        ));
        l.chars += line.chars().count();
        l.lines.push(line);
    }

    /// The lines to show, within `budget` characters (at most
    /// [`BUDGET_CHARS`]; less when the rest of a synopsis is long): for each
    /// list shown, a line saying what it is, then one line per item. Every
    /// line counts as the stub lays it out (its text, the `- ` before it and
    /// the line break), headers included. `cut` when the JSON text was cut
    /// short (counts are of the items before the cut).
    pub(crate) fn render(&self, cut: bool, budget: usize) -> Vec<String> {
        let mut order: Vec<&List> = self.lists.iter().filter(|l| !l.lines.is_empty()).collect();
        order.sort_by_key(|l| l.depth);
        let mut left = budget.min(BUDGET_CHARS);
        let mut out = Vec::new();
        for l in order {
            let single = l.instances == 1 && l.depth == 1;
            let complete = if cut { " complete before the cut" } else { "" };
            let header = |fit: usize, all: bool| {
                let text = if single && all {
                    format!(
                        "Identifying values of the items of {} ({} items{complete}, all shown):",
                        l.path, l.items
                    )
                } else if single {
                    format!(
                        "Identifying values of the items of {} ({} items{complete}; {fit} shown, in order):",
                        l.path, l.items
                    )
                } else {
                    format!(
                        "Identifying values of the items of {} ({fit} shown, in order):",
                        l.path
                    )
                };
                clip(&text, super::lines::LINE_CAP)
            };
            // The longest the header can be: not all shown, as many digits
            // as the items.
            let header_cost = laid_out(&header(l.items.max(l.lines.len()), false));
            let Some(room) = left.checked_sub(header_cost) else {
                continue;
            };
            let fit = l
                .lines
                .iter()
                .scan(0usize, |used, line| {
                    *used += laid_out(line);
                    Some(*used)
                })
                .take_while(|&used| used <= room)
                .count();
            if fit == 0 {
                continue;
            }
            let shown = &l.lines[..fit];
            let header = header(fit, fit == l.lines.len() && l.items == fit);
            let cost = laid_out(&header) + shown.iter().map(|s| laid_out(s)).sum::<usize>();
            left = left.saturating_sub(cost);
            out.push(header);
            out.extend(shown.iter().cloned());
        }
        out
    }
}

/// What a line costs in the stub: its characters, the `- ` before it and
/// the line break after it.
pub(crate) fn laid_out(line: &str) -> usize {
    line.chars().count() + 3
}

impl List {
    fn wants(&self) -> bool {
        !self.closed && self.chars < BUDGET_CHARS
    }
}

/// `a[3].b[12]` as `a[].b[]`.
fn without_indexes(path: &str) -> String {
    let mut out = String::with_capacity(path.len() + 2);
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push_str("[]");
            }
            ']' if in_index => in_index = false,
            _ if in_index => {}
            _ => out.push(c),
        }
    }
    out.push_str("[]");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(key: &str) -> Option<(u8, Shape)> {
        classify(key).map(|r| (r.rank, r.shape))
    }

    #[test]
    fn keys_are_ranked_by_name() {
        assert_eq!(rank("id"), Some((0, Shape::Token)));
        assert_eq!(rank("ID"), Some((0, Shape::Token)));
        assert_eq!(rank("_id"), Some((0, Shape::Token)));
        assert_eq!(rank("number"), Some((1, Shape::Token)));
        assert_eq!(rank("sha"), Some((1, Shape::Token)));
        assert_eq!(rank("Login"), Some((1, Shape::Token)));
        assert_eq!(rank("title"), Some((2, Shape::Text)));
        assert_eq!(rank("node_id"), Some((3, Shape::Token)));
        assert_eq!(rank("userId"), Some((3, Shape::Token)));
        assert_eq!(rank("INVOICE_ID"), Some((3, Shape::Token)));
        assert_eq!(rank("Customer Id"), Some((3, Shape::Token)));
        assert_eq!(rank("displayName"), Some((3, Shape::Text)));
        assert_eq!(rank("full_name"), Some((3, Shape::Text)));
        assert_eq!(rank("course_code"), Some((3, Shape::Token)));
        assert_eq!(rank("html_url"), Some((3, Shape::Url)));
        assert_eq!(rank("avatarUrl"), Some((3, Shape::Url)));
        assert_eq!(rank("permalink"), Some((3, Shape::Url)));
        assert_eq!(rank("path"), Some((3, Shape::Token)));
        assert_eq!(rank("Date"), Some((3, Shape::Text)));
        for not in [
            "identity",
            "ids",
            "valid",
            "state",
            "price",
            "body",
            "description",
            "code",
            "id_",
            "named",
            "hidden",
            "width",
        ] {
            assert_eq!(rank(not), None, "{not}");
        }
    }

    #[test]
    fn values_must_have_the_shape_of_their_key() {
        let token = classify("sha").expect("rule");
        let name = classify("title").expect("rule");
        let url = classify("url").expect("rule");
        assert_eq!(
            Captured::Int("42".into()).shown(token).as_deref(),
            Some("42")
        );
        assert_eq!(Captured::Int("42".into()).shown(url), None);
        assert_eq!(
            Captured::string("a1b2c3").shown(token).as_deref(),
            Some("\"a1b2c3\"")
        );
        assert_eq!(Captured::string("two words").shown(token), None);
        assert_eq!(
            Captured::string("two words").shown(name).as_deref(),
            Some("\"two words\"")
        );
        assert_eq!(Captured::string("a\nb").shown(name), None);
        assert_eq!(Captured::string("  ").shown(name), None);
        let long = "x".repeat(70);
        assert_eq!(
            Captured::string(&long).shown(name),
            Some(format!("\"{}\"...", "x".repeat(NAME_CHARS)))
        );
        assert_eq!(Captured::string(&"y".repeat(201)).shown(token), None);
        assert_eq!(
            Captured::string("say \"hi\"").shown(name).as_deref(),
            Some(r#""say \"hi\"""#)
        );
    }

    #[test]
    fn paths_lose_their_indexes() {
        assert_eq!(without_indexes(""), "[]");
        assert_eq!(without_indexes("videos"), "videos[]");
        assert_eq!(without_indexes("[3].labels"), "[].labels[]");
        assert_eq!(without_indexes("a[0].b[12].c"), "a[].b[].c[]");
    }

    #[test]
    fn items_show_their_best_values_in_their_own_order() {
        let mut lists = Lists::default();
        let l = lists.open("").expect("list");
        let c = |key: &str, level: u8, order: usize, value: &str| {
            let rule = classify(key.rsplit('.').next().unwrap_or(key)).expect(key);
            Candidate::new(rule, level, order, key, value.to_string())
        };
        lists.item(
            l,
            "[0]",
            vec![
                c("url", 0, 0, "\"https://x/1\""),
                c("id", 0, 1, "1"),
                c("node_id", 0, 2, "\"N1\""),
                c("number", 0, 3, "7"),
                c("title", 0, 4, "\"Fix\""),
                c("user.login", 1, 5, "\"ada\""),
                c("user.id", 1, 6, "99"),
            ],
            false,
        );
        lists.ended(l, 1);
        assert_eq!(
            lists.render(false, BUDGET_CHARS),
            [
                "Identifying values of the items of [] (1 items, all shown):",
                "[0] id=1, number=7, title=\"Fix\", user.login=\"ada\""
            ]
        );
        // One object under one key: its members are the item's own.
        let mut lists = Lists::default();
        let l = lists.open("edges").expect("list");
        lists.item(
            l,
            "edges[0]",
            vec![
                c("node.id", 1, 0, "\"R1\""),
                c("node.name", 1, 1, "\"run\""),
            ],
            true,
        );
        lists.ended(l, 1);
        assert_eq!(
            lists.render(true, BUDGET_CHARS)[1],
            "edges[0] node.id=\"R1\", node.name=\"run\""
        );
        assert!(lists.render(true, BUDGET_CHARS)[0].contains("complete before the cut"));
    }

    #[test]
    fn the_budget_goes_to_shallow_lists_first() {
        let mut lists = Lists::default();
        let outer = lists.open("").expect("list");
        let inner = lists.open("[0].labels").expect("list");
        let rule = classify("name").expect("rule");
        for i in 0..200 {
            lists.item(
                inner,
                &format!("[{i}].labels[0]"),
                vec![Candidate::new(rule, 0, 0, "name", format!("\"label {i}\""))],
                false,
            );
            if lists.wants(outer) {
                lists.item(
                    outer,
                    &format!("[{i}]"),
                    vec![Candidate::new(rule, 0, 0, "name", format!("\"item {i}\""))],
                    false,
                );
            }
        }
        lists.ended(outer, 200);
        let lines = lists.render(false, BUDGET_CHARS);
        assert!(
            lines[0].starts_with("Identifying values of the items of [] (200 items;"),
            "{lines:?}"
        );
        assert_eq!(lines[1], "[0] name=\"item 0\"");
        // Headers, bullets and line breaks included.
        let total: usize = lines.iter().map(|l| laid_out(l)).sum();
        assert!(total <= BUDGET_CHARS, "{total}");
        assert!(total > BUDGET_CHARS - 30, "{total}: the budget is used");
        assert!(
            !lines.iter().any(|l| l.contains("labels")),
            "the outer list took it all"
        );
    }

    #[test]
    fn a_list_shown_all_but_one_is_held_to_the_budget() {
        // The header saying "N shown" is longer than "all shown": the room
        // is reckoned with the longer one (once a subtraction overflowed).
        let rule = classify("name").expect("rule");
        for n in 1..60usize {
            let mut lists = Lists::default();
            let l = lists.open("").expect("list");
            for i in 0..n {
                lists.item(
                    l,
                    &format!("[{i}]"),
                    vec![Candidate::new(
                        rule,
                        0,
                        0,
                        "name",
                        format!("\"{}\"", "x".repeat(40)),
                    )],
                    false,
                );
            }
            lists.ended(l, n);
            let inner = lists.open("[0].more").expect("list");
            for i in 0..n {
                lists.item(
                    inner,
                    &format!("[{i}].more[0]"),
                    vec![Candidate::new(rule, 0, 0, "name", "\"y\"".to_string())],
                    false,
                );
            }
            for budget in [0, 10, 100, 500, 900, 1400, BUDGET_CHARS] {
                let total: usize = lists
                    .render(false, budget)
                    .iter()
                    .map(|l| laid_out(l))
                    .sum();
                assert!(total <= budget, "{n} items, budget {budget}: {total}");
            }
        }
    }

    #[test]
    fn dry_lists_and_lists_of_scalars_are_given_up() {
        let mut lists = Lists::default();
        let l = lists.open("").expect("list");
        for i in 0..DRY_ITEMS {
            assert!(lists.wants(l));
            lists.item(l, &format!("[{i}]"), Vec::new(), false);
        }
        assert!(!lists.wants(l));
        let s = lists.open("tags").expect("list");
        lists.not_an_object(s);
        assert!(!lists.wants(s));
        assert!(lists.render(false, BUDGET_CHARS).is_empty());
    }
}
