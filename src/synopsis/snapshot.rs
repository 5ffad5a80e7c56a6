//! The `snapshot` kind: a page's accessibility tree as a browser tool sends
//! it (Playwright MCP's `browser_snapshot`, and the page state after every
//! click or navigation), described by what a model acts on next: the
//! interactive elements' roles, names and refs.
//!
//! **The form.** One element a line, indented two spaces a level, as a
//! YAML list: `- role "name" [attribute] [ref=e170]`, a `:` when children
//! or a text follow (`- link "Home" [ref=e12]:`, `- generic [ref=e5]: Sign
//! in`), the whole key in single quotes when YAML needs them (`- 'cell
//! "Poster #400" [ref=e91]'`), and property lines (`- /url: /login`,
//! `- text: Login`). Around it Playwright MCP writes Markdown: `### Page
//! state`, `- Page URL: ...`, `- Page Title: ...`, `- Page Snapshot:`, then
//! the tree in a ```` ```yaml ```` fence; other sections (`### Ran
//! Playwright code`, `### New console messages`) come before it.
//!
//! **Detection** (after json and xml, before the tables and yaml, so that a
//! tree is never read as a YAML list of strings): the text holds `[ref=`;
//! the tree is the lines inside ```` ```yaml ```` fences when there are any
//! (a fence the text ends in counts, as a cut does), else every line. Then
//! nine in ten of the tree's non-empty lines are list items (`- ...`), half
//! of those read as elements or property lines, and at least three elements
//! have a ref (one is enough with Playwright's `Page URL` or `Page Snapshot`
//! line). Outside the fences, no more lines than inside, unless those
//! Playwright lines are there: a document that shows a snapshot as an
//! example stays the document. A YAML file, a log or a Markdown list almost
//! never has refs on nine lines in ten, and is left to its own kind.
//!
//! **What is kept.** The page's URL and title, the Markdown sections around
//! the tree, the number of elements and how many have refs, the counts by
//! role (most frequent first), the first headings, and then the interactive
//! elements with a ref (`button`, `link`, `textbox`, `searchbox`, `checkbox`,
//! `radio`, `combobox`, `listbox`, `option`, `menuitem`,
//! `menuitemcheckbox`, `menuitemradio`, `tab`, `switch`, `slider`,
//! `spinbutton`, `treeitem`), one a line as the tree writes them: role,
//! name (JSON-quoted, clipped to [`NAME_CHARS`] characters with `...` after
//! the quotes), the states that change what a click does (`checked`,
//! `disabled`, `expanded`, `selected`, `pressed`) and the ref. Their lines
//! hold at most [`BUDGET_CHARS`] characters together, in document order;
//! when they do not all fit, form controls (everything but links) are
//! chosen first and links take the room left, and a line says how many are
//! shown of how many. Pages are mostly links (navigation, footers, lists of
//! results), while the element a task needs next is most often a field or a
//! button; 2,000 characters are 40 to 60 elements, a stub of about 3,000
//! characters, and an element not shown is found by searching the original
//! for its name (`"Submit" [ref=`).

use super::lines::{clip, clip_line, one_line, split_lines, LINE_CAP};
use super::{Input, Kind, Synopsis};
use std::collections::BTreeMap;

/// What the interactive elements' lines may hold together, in characters.
pub(crate) const BUDGET_CHARS: usize = 2000;
/// An element's name is shown with at most this many characters.
pub(crate) const NAME_CHARS: usize = 60;
/// A ref longer than this is not Playwright's.
const REF_MAX: usize = 16;
/// Headings named in the structure, at most.
const HEADINGS: usize = 8;

/// The roles a model clicks, types into or picks from.
const INTERACTIVE: [&str; 17] = [
    "button",
    "link",
    "textbox",
    "searchbox",
    "checkbox",
    "radio",
    "combobox",
    "listbox",
    "option",
    "menuitem",
    "menuitemcheckbox",
    "menuitemradio",
    "tab",
    "switch",
    "slider",
    "spinbutton",
    "treeitem",
];

/// The states shown with an element (others, such as `cursor=pointer` or
/// `active`, are left out).
const STATES: [&str; 5] = ["checked", "disabled", "expanded", "selected", "pressed"];

/// One line of the tree, read.
#[derive(Debug, PartialEq, Eq)]
enum Line<'a> {
    /// `- role "name" [attr] [ref=e1]: text`
    Element {
        role: &'a str,
        /// The name, decoded.
        name: Option<String>,
        reference: Option<&'a str>,
        /// The shown states, as written (`checked`, `checked=mixed`).
        states: Vec<&'a str>,
    },
    /// `- /url: ...`, `- /placeholder: ...`
    Property,
    /// A list item that is neither.
    OtherItem,
    /// Not a list item.
    Other,
}

pub fn summarize(input: &Input<'_>) -> Option<Synopsis> {
    let text = input.text;
    memchr::memmem::find(text.as_bytes(), b"[ref=")?;
    let fenced = has_yaml_fence(text);
    let mut page = Page::default();
    let mut tree = Tree::default();
    let mut in_fence = false;
    for line in split_lines(text) {
        let trimmed = line.trim();
        if let Some(after) = trimmed.strip_prefix("```") {
            in_fence = !in_fence && after.trim() == "yaml";
            continue;
        }
        if trimmed.is_empty() {
            continue;
        }
        if (fenced && !in_fence) || (!fenced && page.is_preamble(trimmed)) {
            page.outside(trimmed);
            continue;
        }
        tree.line(line);
    }
    if !tree.accepted(&page) {
        return None;
    }
    Some(describe(&page, &tree))
}

/// Whether a line of the text opens a ```` ```yaml ```` fence. Only the
/// blanks before each fence are read back (not its whole line: on one long
/// line of many fences that was quadratic).
fn has_yaml_fence(text: &str) -> bool {
    let bytes = text.as_bytes();
    memchr::memmem::find_iter(bytes, b"```yaml").any(|at| {
        let blanks = bytes[..at]
            .iter()
            .rev()
            .take_while(|b| matches!(b, b' ' | b'\t'))
            .count();
        at == blanks || bytes[at - blanks - 1] == b'\n'
    })
}

/// What the Markdown around the tree says.
#[derive(Default)]
struct Page {
    url: Option<String>,
    title: Option<String>,
    /// A `Page Snapshot` line was there.
    snapshot_seen: bool,
    /// What it says besides (`(Span 1 of 502)`), as written.
    snapshot_note: Option<String>,
    /// `### ` headings, in order.
    sections: Vec<String>,
    /// Non-empty lines outside the fences.
    lines: usize,
}

impl Page {
    fn outside(&mut self, trimmed: &str) {
        if trimmed.is_empty() {
            return;
        }
        self.lines += 1;
        if let Some(url) = trimmed.strip_prefix("- Page URL:") {
            self.url
                .get_or_insert_with(|| one_line(url.trim(), LINE_CAP));
        } else if let Some(title) = trimmed.strip_prefix("- Page Title:") {
            self.title
                .get_or_insert_with(|| one_line(title.trim(), LINE_CAP));
        } else if let Some(rest) = trimmed.strip_prefix("- Page Snapshot") {
            let rest = rest.trim().trim_end_matches(':').trim();
            if !self.snapshot_seen && !rest.is_empty() {
                self.snapshot_note = Some(one_line(&format!("Page Snapshot {rest}"), 80));
            }
            self.snapshot_seen = true;
        } else if let Some(heading) = trimmed.strip_prefix("### ") {
            if self.sections.len() < 8 {
                self.sections.push(one_line(heading.trim(), 40));
            }
        }
    }

    /// Whether Playwright's own lines are there.
    fn is_playwright(&self) -> bool {
        self.url.is_some() || self.snapshot_seen
    }

    /// Playwright's lines about the page, in a text without fences.
    fn is_preamble(&self, trimmed: &str) -> bool {
        trimmed.starts_with("### ")
            || trimmed.starts_with("- Page URL:")
            || trimmed.starts_with("- Page Title:")
            || trimmed.starts_with("- Page Snapshot")
    }
}

/// An interactive element kept for the synopsis.
struct Shown {
    /// Its place among the interactive elements.
    index: usize,
    line: String,
}

/// What the tree's lines add up to.
#[derive(Default)]
struct Tree {
    nonempty: usize,
    items: usize,
    /// Elements and property lines.
    read: usize,
    elements: usize,
    with_ref: usize,
    roles: BTreeMap<String, usize>,
    headings: Vec<String>,
    interactive: usize,
    links: usize,
    /// Form controls and links kept while each group's lines fit the budget.
    controls_kept: Vec<Shown>,
    controls_chars: usize,
    links_kept: Vec<Shown>,
    links_chars: usize,
    depth: usize,
}

impl Tree {
    fn line(&mut self, line: &str) {
        self.nonempty += 1;
        let indent = line.len() - line.trim_start_matches(' ').len();
        let parsed = read_line(line.trim());
        if parsed != Line::Other {
            self.items += 1;
        }
        let Line::Element {
            role,
            name,
            reference,
            states,
        } = parsed
        else {
            if parsed == Line::Property {
                self.read += 1;
            }
            return;
        };
        self.read += 1;
        self.elements += 1;
        self.depth = self.depth.max(indent / 2 + 1);
        match self.roles.get_mut(role) {
            Some(n) => *n += 1,
            None => {
                self.roles.insert(role.to_string(), 1);
            }
        }
        if role == "heading" && self.headings.len() < HEADINGS {
            if let Some(name) = &name {
                self.headings.push(quoted(name, 40));
            }
        }
        let Some(reference) = reference else {
            return;
        };
        self.with_ref += 1;
        if !INTERACTIVE.contains(&role) {
            return;
        }
        let index = self.interactive;
        self.interactive += 1;
        let is_link = role == "link";
        if is_link {
            self.links += 1;
        }
        let (kept, chars) = if is_link {
            (&mut self.links_kept, &mut self.links_chars)
        } else {
            (&mut self.controls_kept, &mut self.controls_chars)
        };
        if *chars >= BUDGET_CHARS {
            return;
        }
        let mut shown = String::from(role);
        if let Some(name) = &name {
            shown.push(' ');
            shown.push_str(&quoted(name, NAME_CHARS));
        }
        for state in states {
            shown.push_str(" [");
            shown.push_str(state);
            shown.push(']');
        }
        shown.push_str(" [ref=");
        shown.push_str(reference);
        shown.push(']');
        let shown = clip_line(shown);
        let n = shown.chars().count();
        if *chars + n <= BUDGET_CHARS {
            *chars += n;
            kept.push(Shown { index, line: shown });
        }
    }

    fn accepted(&self, page: &Page) -> bool {
        let enough_refs = self.with_ref >= 3 || (self.with_ref >= 1 && page.is_playwright());
        enough_refs
            && self.items * 10 >= self.nonempty * 9
            && self.read * 2 >= self.items
            && (page.lines <= self.nonempty || page.is_playwright())
    }

    /// The interactive elements shown: form controls first, links in the
    /// room left, in document order.
    fn shown(&self) -> Vec<&Shown> {
        let mut left = BUDGET_CHARS.saturating_sub(self.controls_chars);
        let mut out: Vec<&Shown> = self.controls_kept.iter().collect();
        for link in &self.links_kept {
            let n = link.line.chars().count();
            if n > left {
                break;
            }
            left -= n;
            out.push(link);
        }
        out.sort_by_key(|s| s.index);
        out
    }
}

/// `"name"` as a JSON string, clipped to `cap` characters with `...` after
/// the quotes.
fn quoted(name: &str, cap: usize) -> String {
    match name.char_indices().nth(cap) {
        None => serde_json::to_string(name).unwrap_or_default(),
        Some((end, _)) => {
            let mut out = serde_json::to_string(&name[..end]).unwrap_or_default();
            out.push_str("...");
            out
        }
    }
}

/// Reads one trimmed line of the tree.
fn read_line(line: &str) -> Line<'_> {
    let Some(item) = line.strip_prefix("- ") else {
        return if line == "-" {
            Line::OtherItem
        } else {
            Line::Other
        };
    };
    if let Some(property) = item.strip_prefix('/') {
        let name_end = property
            .bytes()
            .position(|b| !b.is_ascii_alphabetic())
            .unwrap_or(property.len());
        return if name_end > 0 && property[name_end..].starts_with(':') {
            Line::Property
        } else {
            Line::OtherItem
        };
    }
    // A key YAML had to quote: `'...'`, `''` for a quote inside.
    if let Some(quoted) = item.strip_prefix('\'') {
        let Some(end) = closing_single_quote(quoted) else {
            return Line::OtherItem;
        };
        let after = &quoted[end + 1..];
        if !(after.is_empty() || after.starts_with(':')) {
            return Line::OtherItem;
        }
        // `''` is never in a role or a ref; in a name it is one quote.
        return match read_key(&quoted[..end], true) {
            Some(Line::Element {
                role,
                name,
                reference,
                states,
            }) => Line::Element {
                role,
                name: name.map(|n| n.replace("''", "'")),
                reference,
                states,
            },
            _ => Line::OtherItem,
        };
    }
    read_key(item, false).unwrap_or(Line::OtherItem)
}

/// The end of a single-quoted YAML scalar (its closing quote's index).
fn closing_single_quote(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\'' {
            if bytes.get(i + 1) == Some(&b'\'') {
                i += 2;
                continue;
            }
            return Some(i);
        }
        i += 1;
    }
    None
}

/// `role "name" [attr]... [ref=e1]` then, unless `whole`, an optional `:`
/// and a value.
fn read_key(key: &str, whole: bool) -> Option<Line<'_>> {
    let role_end = key
        .bytes()
        .position(|b| !b.is_ascii_lowercase())
        .unwrap_or(key.len());
    if role_end == 0 {
        return None;
    }
    let role = &key[..role_end];
    let mut rest = &key[role_end..];
    let mut name = None;
    if let Some(after) = rest.strip_prefix(" \"") {
        let (decoded, used) = json_like_string(after)?;
        name = Some(decoded);
        rest = &after[used..];
    }
    let mut reference = None;
    let mut states = Vec::new();
    while let Some(after) = rest.strip_prefix(" [") {
        let end = after.find(']')?;
        let attr = &after[..end];
        if let Some(r) = attr.strip_prefix("ref=") {
            if r.is_empty()
                || r.len() > REF_MAX
                || !r.bytes().all(|b| b.is_ascii_alphanumeric())
                || !r.bytes().any(|b| b.is_ascii_digit())
            {
                return None;
            }
            reference = Some(r);
        } else if STATES
            .iter()
            .any(|s| attr == *s || attr.strip_prefix(s).is_some_and(|v| v.starts_with('=')))
        {
            states.push(attr);
        }
        rest = &after[end + 1..];
    }
    let ok = if whole {
        rest.is_empty()
    } else {
        rest.is_empty() || rest.starts_with(':')
    };
    ok.then_some(Line::Element {
        role,
        name,
        reference,
        states,
    })
}

/// A name written as Playwright writes it (JSON escapes), from after its
/// opening quote: the decoded name and the bytes used, closing quote
/// included.
fn json_like_string(text: &str) -> Option<(String, usize)> {
    let bytes = text.as_bytes();
    let mut i = 0;
    loop {
        let at = i + memchr::memchr2(b'"', b'\\', &bytes[i..])?;
        if bytes[at] == b'"' {
            let raw = &text[..at];
            let decoded = if raw.contains('\\') {
                let mut literal = String::with_capacity(raw.len() + 2);
                literal.push('"');
                literal.push_str(raw);
                literal.push('"');
                serde_json::from_str::<String>(&literal).unwrap_or_else(|_| raw.to_string())
            } else {
                raw.to_string()
            };
            return Some((decoded, at + 1));
        }
        i = at + 2;
        if i > bytes.len() {
            return None;
        }
    }
}

fn describe(page: &Page, tree: &Tree) -> Synopsis {
    let mut s = Synopsis::new(Kind::Snapshot, "Accessibility snapshot");
    s.summary.push(clip_line(format!(
        "Accessibility snapshot of a page (one element a line, as a browser tool writes it): {} elements, {} with a ref, {} interactive.",
        tree.elements, tree.with_ref, tree.interactive
    )));
    if let Some(url) = &page.url {
        s.summary.push(clip_line(format!("Page URL: {url}")));
    }
    if let Some(title) = &page.title {
        s.summary.push(clip_line(format!("Page Title: {title}")));
    }
    if let Some(note) = &page.snapshot_note {
        s.summary.push(note.clone());
    }
    if !page.sections.is_empty() {
        s.summary.push(clip_line(format!(
            "Sections around the tree: {}.",
            page.sections.join(", ")
        )));
    }
    let mut roles: Vec<(&String, &usize)> = tree.roles.iter().collect();
    roles.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    let roles: Vec<String> = roles.iter().map(|(r, n)| format!("{r} {n}")).collect();
    s.structure
        .push(clip(&format!("roles: {}", roles.join(", ")), LINE_CAP));
    s.structure
        .push(format!("depth: {} levels", tree.depth.max(1)));
    if !tree.headings.is_empty() {
        s.structure.push(clip(
            &format!("headings: {}", tree.headings.join(", ")),
            LINE_CAP,
        ));
    }
    let shown = tree.shown();
    if tree.interactive == 0 {
        s.notable_items
            .push("No interactive element has a ref.".to_string());
        return s;
    }
    let header = if shown.len() == tree.interactive {
        format!(
            "Interactive elements (role, name, ref), all {} in document order:",
            tree.interactive
        )
    } else {
        format!(
            "Interactive elements (role, name, ref): {} of {} in document order, within {BUDGET_CHARS} characters, form controls first, then links ({} links in all); search the original for a name to find another:",
            shown.len(),
            tree.interactive,
            tree.links
        )
    };
    s.notable_items.push(clip_line(header));
    s.notable_items
        .extend(shown.into_iter().map(|e| e.line.clone()));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn syn(text: &str) -> Option<Synopsis> {
        summarize(&Input::new(text, "", 2000))
    }

    #[test]
    fn a_yaml_fence_opens_a_line() {
        for (text, fence) in [
            ("```yaml\n", true),
            ("x\n```yaml\n", true),
            ("x\n \t ```yaml\n", true),
            ("x ```yaml\n", false),
            ("x\n- a ```yaml", false),
            ("```yml\n", false),
        ] {
            assert_eq!(has_yaml_fence(text), fence, "{text:?}");
        }
    }

    const PLAYWRIGHT: &str = "### Ran Playwright code\n```js\nawait page.goto('https://example.com/login');\n```\n\n### Page state\n- Page URL: https://example.com/login\n- Page Title: Sign in\n- Page Snapshot:\n```yaml\n- generic [ref=e1]:\n  - banner [ref=e2]:\n    - link \"Home\" [ref=e3] [cursor=pointer]:\n      - /url: /\n    - heading \"Sign in to \\\"Example\\\"\" [level=1] [ref=e4]\n  - main [ref=e5]:\n    - textbox \"Email\" [ref=e6]\n    - textbox \"Password\" [ref=e7]\n    - checkbox \"Remember me\" [checked] [ref=e8]\n    - button \"Submit\" [disabled] [ref=e9] [cursor=pointer]\n    - 'cell \"Poster #400\" [ref=e10]'\n    - 'link \"It''s #1\" [ref=e11]':\n      - /url: \"#top\"\n    - text: Forgot?\n```\n";

    #[test]
    fn playwright_page_state_is_a_snapshot() {
        let s = syn(PLAYWRIGHT).expect("snapshot");
        assert_eq!(s.kind, Kind::Snapshot);
        assert_eq!(
            s.summary,
            [
                "Accessibility snapshot of a page (one element a line, as a browser tool writes it): 12 elements, 11 with a ref, 6 interactive.",
                "Page URL: https://example.com/login",
                "Page Title: Sign in",
                "Sections around the tree: Ran Playwright code, Page state."
            ]
        );
        assert_eq!(
            s.structure,
            [
                "roles: link 2, textbox 2, banner 1, button 1, cell 1, checkbox 1, generic 1, heading 1, main 1, text 1",
                "depth: 3 levels",
                "headings: \"Sign in to \\\"Example\\\"\""
            ]
        );
        assert_eq!(
            s.notable_items,
            [
                "Interactive elements (role, name, ref), all 6 in document order:",
                "link \"Home\" [ref=e3]",
                "textbox \"Email\" [ref=e6]",
                "textbox \"Password\" [ref=e7]",
                "checkbox \"Remember me\" [checked] [ref=e8]",
                "button \"Submit\" [disabled] [ref=e9]",
                "link \"It's #1\" [ref=e11]"
            ]
        );
    }

    #[test]
    fn lines_are_read_as_playwright_writes_them() {
        assert_eq!(
            read_line("- button \"OK\" [ref=e1]"),
            Line::Element {
                role: "button",
                name: Some("OK".into()),
                reference: Some("e1"),
                states: vec![]
            }
        );
        assert_eq!(
            read_line("- generic [ref=f1e22]: Some text: with colons"),
            Line::Element {
                role: "generic",
                name: None,
                reference: Some("f1e22"),
                states: vec![]
            }
        );
        assert_eq!(
            read_line("- checkbox \"A\" [checked=mixed] [ref=e2]"),
            Line::Element {
                role: "checkbox",
                name: Some("A".into()),
                reference: Some("e2"),
                states: vec!["checked=mixed"]
            }
        );
        assert_eq!(read_line("- /url: https://x"), Line::Property);
        assert_eq!(
            read_line("- button \"unterminated [ref=e1]"),
            Line::OtherItem
        );
        assert_eq!(read_line("- Button [ref=e1]"), Line::OtherItem);
        assert_eq!(read_line("- button [ref=e 1]"), Line::OtherItem);
        assert_eq!(read_line("- button [ref=e1] trailing"), Line::OtherItem);
        assert_eq!(read_line("key: value"), Line::Other);
    }

    #[test]
    fn a_bare_tree_is_a_snapshot_and_its_budget_holds() {
        let mut text = String::from("- generic [ref=e1]:\n");
        for i in 0..400 {
            text.push_str(&format!(
                "  - link \"Result number {i}\" [ref=e{}]:\n    - /url: /r/{i}\n",
                2 * i + 2
            ));
            if i % 50 == 0 {
                text.push_str(&format!("  - textbox \"Field {i}\" [ref=e{}]\n", 2 * i + 3));
            }
        }
        let s = syn(&text).expect("snapshot");
        assert!(
            s.notable_items[0].starts_with("Interactive elements (role, name, ref): "),
            "{:?}",
            s.notable_items[0]
        );
        assert!(
            s.notable_items[0].contains("of 408 in document order"),
            "{:?}",
            s.notable_items[0]
        );
        let lines = &s.notable_items[1..];
        let chars: usize = lines.iter().map(|l| l.chars().count()).sum();
        assert!(chars <= BUDGET_CHARS, "{chars}");
        // Every form control, then links while room lasts, in document order.
        assert_eq!(lines.iter().filter(|l| l.starts_with("textbox")).count(), 8);
        assert_eq!(lines[0], "link \"Result number 0\" [ref=e2]");
        assert_eq!(lines[1], "textbox \"Field 0\" [ref=e3]");
        assert!(
            lines[lines.len() - 1].starts_with("textbox \"Field 350\""),
            "{lines:?}"
        );
    }

    #[test]
    fn yaml_logs_and_documents_are_not_snapshots() {
        for text in [
            // YAML, even one that mentions refs.
            "jobs:\n  build:\n    steps:\n      - uses: actions/checkout@v4 # [ref=e1]\n      - run: make\n",
            "- name: a [ref=e1]\n  value: 1\n- name: b [ref=e2]\n  value: 2\n- name: c [ref=e3]\n  value: 3\n",
            // A log.
            "2026-01-01 INFO clicked [ref=e1]\n2026-01-01 INFO clicked [ref=e2]\n2026-01-01 INFO clicked [ref=e3]\n",
            // A Markdown list.
            "- item one\n- item two\n- button [ref=e1]\n- see [ref=e2] and [ref=e3]\n- more\n- more\n",
            // Too few refs without Playwright's lines.
            "- button \"a\" [ref=e1]\n- button \"b\"\n",
            // A document showing a snapshot as an example.
            &format!(
                "# Snapshots\n\n{}\n```yaml\n- button \"a\" [ref=e1]\n- button \"b\" [ref=e2]\n- button \"c\" [ref=e3]\n```\n",
                "Some prose about how snapshots work.\n".repeat(10)
            ),
        ] {
            assert!(syn(text).is_none(), "{text}");
        }
    }

    #[test]
    fn a_cut_tree_is_read_as_far_as_it_goes() {
        let cut = &PLAYWRIGHT[..PLAYWRIGHT.find("    - checkbox").expect("checkbox") + 12];
        let s = syn(cut).expect("snapshot");
        assert_eq!(s.notable_items.len(), 4, "{:?}", s.notable_items);
    }
}
