//! The `code` kind: source files and snippets described by their line count,
//! imported modules and defined symbols. Lightweight line rules, not an AST.
//!
//! The design's line-anchored patterns (Python imports and definitions, JS
//! bindings, Rust `use`/`fn`, `package`, `public class`) fire on prose such as
//! "use the", "let me", "import data", "class of" or "package manager", and know
//! only three languages. Here each pattern must also look syntactically like
//! code (a module path, a name followed by `(`, `{`, `:` or `=`, a trailing
//! `;`), and Go, Java, C/C++ (preprocessor lines included), C#, shell, Ruby,
//! PHP, SQL, Perl and Tcl forms are known too. A text is code when it starts
//! with an interpreter line (`#!/...`) or `<?php`, or when it has at least two
//! such definition or import lines, or one plus two lines of code punctuation
//! (braces, `;`, Python block openers and docstring quotes, bare calls such as
//! `main()`, assignments of calls, comment openers), is not mostly prose
//! (sentences and lines of wrapped paragraphs, outside Python's
//! triple-quoted strings), and, when none of those lines starts at the left
//! margin, is not a long document quoting a few indented signatures or a
//! rendered manual (`NAME`, `FUNCTIONS` headings). Unified diffs and man page
//! sources (troff requests such as `.SH`) are never code, and lines inside
//! Markdown code fences, reStructuredText literal blocks (`::`,
//! `.. code-block::`) and `>>>` sessions do not count: a patch, a man page,
//! `pydoc` output or a README is read as text. Symbols are declarations only
//! (a statement such as `match plan(app, x) {` is none); `tests/accuracy.rs`
//! holds them to what universal-ctags finds declared in real files.

use super::lines::{clip, collapse_whitespace, count_lines, split_lines};
use super::{Input, Kind, Synopsis};

/// Imported modules listed in the structure.
const IMPORT_LIMIT: usize = 12;
/// Each import is shown with at most this many characters.
const IMPORT_CHARS: usize = 180;
/// Symbols listed in the notable items.
const SYMBOL_LIMIT: usize = 24;
/// Each symbol is shown with at most this many characters.
const SYMBOL_CHARS: usize = 200;
/// When no definition or import starts at the left margin, at least one
/// non-blank line in this many must be a definition, an import or a line of
/// code punctuation: a long document that merely quotes a few indented
/// signatures (rendered API docs such as `pydoc` output) is not code.
const MIN_CODE_SHARE: usize = 10;
/// A text where at least one non-blank line in this many is a troff request
/// is a man page source, whatever example code it quotes.
const TROFF_SHARE: usize = 10;
/// All symbols together are shown with at most this many characters.
const SYMBOLS_TOTAL_CHARS: usize = 2800;
/// Texts at least this large are scanned in two halves on two threads (a
/// thread costs tens of microseconds; scanning 64 KB, about half a
/// millisecond).
const PARALLEL_BYTES: usize = 64 * 1024;

pub fn summarize(input: &Input<'_>) -> Option<Synopsis> {
    let scan = input.code_scan();
    if !scan.is_code() {
        return None;
    }
    let lines = count_lines(input.text);
    let mut s = Synopsis::new(Kind::Code, "Code output");
    s.summary
        .push(format!("Code-like output with {lines} lines."));
    s.structure.push(format!("line_count: {lines}"));
    if !scan.imports.is_empty() {
        s.structure.push(clip(
            &format!("imports: {}", scan.imports.join(", ")),
            super::LINE_CAP,
        ));
    }
    // Hostile names could make 24 symbols of 200 characters; the total keeps
    // a default stub under 5,000 characters.
    let mut budget = SYMBOLS_TOTAL_CHARS;
    for symbol in &scan.symbols {
        let n = symbol.chars().count();
        if n > budget {
            break;
        }
        budget -= n;
        s.notable_items.push(symbol.clone());
    }
    Some(s)
}

/// What one pass over the lines found.
#[derive(Debug, Default)]
pub struct Scan {
    /// Lines that define or import something, in a form only code takes.
    strong: usize,
    /// Lines ending or opening like code (`{`, `}`, `;`, `=>`, `):`, `fi`, `end`).
    syntax: usize,
    /// Lines of prose (sentences, lines of wrapped paragraphs) outside
    /// Python's triple-quoted strings.
    prose: usize,
    /// Lines of prose inside triple-quoted strings (as the part's own
    /// start saw them): they swap with `prose` when the part turns out to
    /// start inside a string.
    prose_in_strings: usize,
    /// Definition or import lines at the left margin (not inside a block).
    strong_unindented: usize,
    /// Non-blank lines looked at (outside code fences and diff headers).
    lines: usize,
    /// A `#!` first line or a `<?php` opening.
    script_opening: bool,
    /// troff requests at the left margin (`.TH`, `.SH`, `.B`): a man page source.
    troff_requests: usize,
    /// Section headings of rendered documentation (`NAME`, `FUNCTIONS`).
    doc_headings: usize,
    /// Hunk headers and file headers of a unified diff.
    diff_hunks: usize,
    diff_files: usize,
    imports: Vec<String>,
    symbols: Vec<String>,
}

impl Scan {
    pub fn of(text: &str) -> Scan {
        if text.len() >= PARALLEL_BYTES {
            // Two halves on two threads, cut at the line start nearest after
            // the middle; the second half is scanned again (rarely) if the
            // first ends inside a quoted block or a triple-quoted string.
            let bytes = text.as_bytes();
            if let Some(cut) = memchr::memchr(b'\n', bytes.get(text.len() / 2..).unwrap_or(&[]))
                .map(|i| text.len() / 2 + i + 1)
                .filter(|&cut| cut < text.len())
            {
                let (head, tail) = text.split_at(cut);
                let after_text = split_lines(head)
                    .last()
                    .is_some_and(|line| !line.trim_ascii().is_empty());
                let ((tail_scan, _), (head_scan, head_end)) = crate::parallel::beside(
                    "toolstub-scan",
                    || Scan::part(tail, false, Context::default(), after_text),
                    || Scan::part(head, true, Context::default(), false),
                );
                // A triple-quoted string open at the cut only swaps which of
                // the tail's prose-like lines count; a quoted block or a
                // pending function head changes what the tail's lines are.
                let tail_scan = if head_end.quote.is_some() || head_end.pending.is_some() {
                    Scan::part(tail, false, head_end, after_text).0
                } else if head_end.docstring {
                    tail_scan.with_strings_swapped()
                } else {
                    tail_scan
                };
                return head_scan.followed_by(tail_scan);
            }
        }
        Scan::part(text, true, Context::default(), false).0
    }

    /// Scans `text`; `at_start` when it opens the output (a `#!` or `<?php`
    /// first line counts only there), `context` where it starts (inside a
    /// quoted block or a triple-quoted string), `after_text` when the line
    /// before it is not blank. Also says where it ends.
    fn part(text: &str, at_start: bool, context: Context, after_text: bool) -> (Scan, Context) {
        let mut scan = Scan::default();
        let mut above_text = after_text;
        let Context {
            mut quote,
            mut docstring,
            mut pending,
        } = context;
        for (n, line) in split_lines(text).enumerate() {
            let trimmed = line.trim_ascii();
            let under_text = std::mem::replace(&mut above_text, !trimmed.is_empty());
            if trimmed.is_empty() {
                continue;
            }
            if at_start && n == 0 && (is_shebang(trimmed) || trimmed.starts_with("<?php")) {
                scan.script_opening = true;
                continue;
            }
            // A shell function whose brace is on this line, if any.
            let function_above = pending.take();
            // `trimmed` is a slice of `line`: its offset is the indentation.
            let indent = trimmed.as_ptr() as usize - line.as_ptr() as usize;
            // Most lines open with a letter or a blank: the rare forms
            // below are looked for only when their first or last byte fits.
            let bytes = trimmed.as_bytes();
            let (first, last) = (
                bytes.first().copied().unwrap_or(b' '),
                bytes.last().copied().unwrap_or(b' '),
            );
            if let Some(Quote::Literal(at)) = quote {
                if indent > at {
                    continue;
                }
                quote = None;
            }
            if let Some(marker) = FenceLine::of(trimmed) {
                quote = match quote {
                    Some(Quote::Fence(open)) if marker.closes(open) => None,
                    Some(open) => Some(open),
                    None if marker.is_underline(under_text) => None,
                    None => Some(Quote::Fence(marker.fence)),
                };
                continue;
            }
            if quote.is_some() {
                continue;
            }
            // An interactive session quoted in documentation (`>>> f(x)`).
            if first == b'>' && trimmed.starts_with(">>>") {
                continue;
            }
            if is_troff_request(line) {
                scan.troff_requests += 1;
                scan.lines += 1;
                continue;
            }
            if line.starts_with("@@ -") {
                scan.diff_hunks += 1;
                continue;
            }
            if line.starts_with("diff --git ") || line.starts_with("+++ ") {
                scan.diff_files += 1;
                continue;
            }
            if indent == 0 && first.is_ascii_uppercase() && is_doc_heading(trimmed) {
                scan.doc_headings += 1;
            }
            if let Some(function) = function_above.filter(|_| matches!(trimmed, "{" | "(")) {
                scan.declared(function);
                continue;
            }
            if let Some(name) = shell_function_head(trimmed) {
                pending = Some(PendingFunction {
                    symbol: format!("function {name}"),
                    at_margin: indent == 0,
                });
            }
            // Python's triple-quoted strings: their lines are documentation
            // of the code around them, not prose that outweighs it.
            let quotes = triple_quotes(trimmed);
            let string = match (quotes, docstring) {
                (0, false) => Strings::Outside,
                (0, true) => Strings::Inside,
                _ => Strings::Delimiter,
            };
            scan.line(line, trimmed, string);
            docstring ^= quotes % 2 == 1;
            if (last == b':' || first == b'.') && opens_literal_block(trimmed) {
                quote = Some(Quote::Literal(indent));
            }
        }
        (
            scan,
            Context {
                quote,
                docstring,
                pending,
            },
        )
    }

    /// The scan of a text from the scans of its two parts, as one scan of
    /// the whole would have found it: counts add up; imports and symbols
    /// keep their order, caps and (for imports) de-duplication.
    fn followed_by(mut self, tail: Scan) -> Scan {
        self.strong += tail.strong;
        self.syntax += tail.syntax;
        self.prose += tail.prose;
        self.prose_in_strings += tail.prose_in_strings;
        self.strong_unindented += tail.strong_unindented;
        self.lines += tail.lines;
        self.troff_requests += tail.troff_requests;
        self.doc_headings += tail.doc_headings;
        self.diff_hunks += tail.diff_hunks;
        self.diff_files += tail.diff_files;
        for module in tail.imports {
            if self.imports.len() < IMPORT_LIMIT && !self.imports.contains(&module) {
                self.imports.push(module);
            }
        }
        let room = SYMBOL_LIMIT.saturating_sub(self.symbols.len());
        self.symbols.extend(tail.symbols.into_iter().take(room));
        self
    }

    pub fn is_code(&self) -> bool {
        if self.diff_hunks > 0 && self.diff_files > 0 {
            return false;
        }
        // A man page source that shows an example program is still a document.
        if self.troff_requests * TROFF_SHARE >= self.lines.max(1) {
            return false;
        }
        if self.script_opening {
            return true;
        }
        // Rendered documentation (a man page, `pydoc`) whose code is all
        // indented signatures and examples.
        if self.doc_headings >= 2 && self.strong_unindented == 0 {
            return false;
        }
        let evidence = self.strong >= 2 || (self.strong >= 1 && self.syntax >= 2);
        let code_lines = self.strong + self.syntax;
        // Only indented code (quoted in documentation) must also be dense.
        let dense = self.strong_unindented > 0 || code_lines * MIN_CODE_SHARE >= self.lines;
        evidence && self.prose <= 2 * code_lines && dense
    }

    /// Whether the text is code written at the left margin, as source files
    /// are. Code that only appears indented (a script inside a YAML block
    /// scalar, examples in rendered documentation) does not count.
    pub fn is_code_at_margin(&self) -> bool {
        self.is_code() && (self.script_opening || self.strong_unindented > 0)
    }

    /// A declaration found over two lines (a shell function's head, then
    /// its brace): the brace line counts as the definition.
    fn declared(&mut self, function: PendingFunction) {
        self.lines += 1;
        self.strong += 1;
        if function.at_margin {
            self.strong_unindented += 1;
        }
        self.listed(&function.symbol);
    }

    /// A symbol for the notable items, within the list's caps.
    fn listed(&mut self, symbol: &str) {
        if self.symbols.len() < SYMBOL_LIMIT {
            self.symbols.push(collapse_whitespace(symbol, SYMBOL_CHARS));
        }
    }

    fn imported(&mut self, module: &str) {
        let module = collapse_whitespace(module, IMPORT_CHARS);
        if self.imports.len() < IMPORT_LIMIT && !self.imports.contains(&module) {
            self.imports.push(module);
        }
    }

    /// The scan of a part that starts inside a triple-quoted string, from
    /// its scan made as if it did not.
    fn with_strings_swapped(mut self) -> Scan {
        std::mem::swap(&mut self.prose, &mut self.prose_in_strings);
        self
    }

    /// One non-blank line, and where it stands against triple-quoted strings
    /// (whose sentences document the code and are not counted as prose).
    fn line(&mut self, line: &str, trimmed: &str, string: Strings) {
        let indented = line.starts_with([' ', '\t']);
        self.lines += 1;
        let found = classify(trimmed, indented);
        if found.is_some() && !indented {
            self.strong_unindented += 1;
        }
        match found {
            Some(Found::Import(module)) => {
                self.strong += 1;
                self.imported(module);
            }
            Some(Found::Imports(list)) => {
                self.strong += 1;
                for module in imported_modules(list) {
                    self.imported(module);
                }
            }
            Some(Found::Symbol(symbol)) => {
                self.strong += 1;
                self.listed(&symbol);
            }
            Some(Found::Statement) => self.strong += 1,
            None => {
                if ends_like_code(trimmed) {
                    self.syntax += 1;
                } else if string != Strings::Delimiter && reads_like_prose(trimmed) {
                    match string {
                        Strings::Inside => self.prose_in_strings += 1,
                        _ => self.prose += 1,
                    }
                }
            }
        }
    }
}

/// A Markdown code fence as opened: its mark (`` ` `` or `~`) and length.
/// Lines inside one are quoted code, not the text's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fence {
    mark: u8,
    len: usize,
}

/// A line that is a fence mark (three or more `` ` `` or `~`), with or
/// without an info string after it.
struct FenceLine {
    fence: Fence,
    bare: bool,
}

impl FenceLine {
    fn of(trimmed: &str) -> Option<FenceLine> {
        let mark = *trimmed.as_bytes().first()?;
        if mark != b'`' && mark != b'~' {
            return None;
        }
        let len = trimmed.bytes().take_while(|&b| b == mark).count();
        let info = trimmed[len..].trim_ascii();
        // "```x```" is inline code, not a fence (CommonMark).
        if len < 3 || (mark == b'`' && info.contains('`')) {
            return None;
        }
        Some(FenceLine {
            fence: Fence { mark, len },
            bare: info.is_empty(),
        })
    }

    /// Closes `open`: the same mark, at least as many, nothing after them.
    fn closes(&self, open: Fence) -> bool {
        self.bare && self.fence.mark == open.mark && self.fence.len >= open.len
    }

    /// A reStructuredText (or setext) underline, not a fence: a bare row of
    /// `~` right under a non-blank line. Python docstrings underline their
    /// titles so (`pygments.styles.vim` over `~~~~~~~`, often a few short),
    /// and taking that for a fence hid the whole module from the scan. A
    /// Markdown fence comes after a blank line or carries an info string.
    fn is_underline(&self, under_text: bool) -> bool {
        self.bare && self.fence.mark == b'~' && under_text
    }
}

/// How many triple-quote delimiters (`"""`, `'''`) a line has at its ends,
/// where docstrings and multi-line strings open and close (`"""Summary`,
/// `text."""`, `x = """`, a bare `"""`); a quote mid-line is taken for
/// part of a one-line string. O(1): most lines hold no such thing.
fn triple_quotes(line: &str) -> usize {
    let delimiter = |s: &str| s.starts_with("\"\"\"") || s.starts_with("'''");
    // The string prefixes are ASCII: skipped as bytes (a pattern of chars
    // cost more per line than the rest of this check).
    let prefix = line
        .bytes()
        .take_while(|b| matches!(b, b'r' | b'u' | b'b' | b'f' | b'R' | b'U' | b'B' | b'F'))
        .count();
    let body = &line[prefix..];
    let opens = delimiter(body);
    let end = line
        .as_bytes()
        .get(line.len().saturating_sub(3)..)
        .unwrap_or(b"");
    let closes = line.len() >= 3 && (end == b"\"\"\"" || end == b"'''");
    match (opens, closes) {
        // `"""` alone, or `"""x"""`.
        (true, true) => 1 + usize::from(body.len() >= 6),
        (true, false) | (false, true) => 1,
        (false, false) => 0,
    }
}

/// Where a line stands against Python's triple-quoted strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Strings {
    Outside,
    Inside,
    /// The line holds a `"""` or `'''`: part of a string either way.
    Delimiter,
}

/// Where a line of the scan stands, carried from one half of a text to
/// the next.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Context {
    quote: Option<Quote>,
    /// Inside a Python triple-quoted string.
    docstring: bool,
    /// The line before was `name()`: a shell function if this one is `{`.
    pending: Option<PendingFunction>,
}

/// A shell function's head (`usage()`) waiting for its brace on the next line.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PendingFunction {
    symbol: String,
    at_margin: bool,
}

/// A block whose lines are quoted examples, not the text's own code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Quote {
    /// A Markdown fence.
    Fence(Fence),
    /// A reStructuredText literal block, opened by a line indented this
    /// much: the lines indented more are in it.
    Literal(usize),
}

/// A line that opens a reStructuredText literal block: a paragraph ending
/// in `::` (`For example::`) or a directive (`.. code-block:: python`).
/// Documentation (and docstrings) quote their example code so.
fn opens_literal_block(trimmed: &str) -> bool {
    (trimmed.starts_with(".. ") && trimmed.contains("::"))
        || (trimmed.len() > 2 && trimmed.ends_with("::") && !trimmed.ends_with(":::"))
}

/// A section heading of rendered documentation at the left margin: man
/// pages (`NAME`, `SYNOPSIS`, `DESCRIPTION`) and `pydoc` (`FUNCTIONS`,
/// `CLASSES`, `DATA`). Their indented signatures read like code.
fn is_doc_heading(trimmed: &str) -> bool {
    matches!(
        trimmed,
        "NAME"
            | "SYNOPSIS"
            | "DESCRIPTION"
            | "OPTIONS"
            | "COMMANDS"
            | "EXIT STATUS"
            | "RETURN VALUE"
            | "ERRORS"
            | "ENVIRONMENT"
            | "FILES"
            | "EXAMPLES"
            | "NOTES"
            | "BUGS"
            | "AUTHOR"
            | "AUTHORS"
            | "SEE ALSO"
            | "COPYRIGHT"
            | "HISTORY"
            | "STANDARDS"
            | "CONFORMING TO"
            | "REPORTING BUGS"
            | "CLASSES"
            | "FUNCTIONS"
            | "DATA"
            | "FILE"
            | "PACKAGE CONTENTS"
            | "SUBMODULES"
            | "MODULE REFERENCE"
            | "MODULE DOCS"
            | "VERSION"
            | "CREDITS"
    )
}

enum Found<'a> {
    Import(&'a str),
    /// `import a, b.c as d` (Python) or `import a.b.C` (Java): a list.
    Imports(&'a str),
    Symbol(String),
    /// A binding or declaration that is code but names nothing worth listing.
    Statement,
}

/// Whether `word` may stand before the keyword of a definition. A `match`
/// compiles to a switch on length and first bytes, far cheaper per line
/// than a walk of a list (written in braces, which rustfmt leaves as it
/// is, so the words stay several to a line).
fn is_modifier(word: &str) -> bool {
    matches! { word,
        "pub" | "pub(crate)" | "pub(super)" | "pub(self)" | "export" | "default" | "async"
        | "public" | "private" | "protected" | "internal" | "static" | "final" | "abstract"
        | "sealed" | "partial" | "override" | "virtual" | "readonly" | "unsafe" | "extern"
        | "inline" | "declare" | "const" | "open" | "data" | "synchronized" | "native"
        | "strictfp"
    }
}

fn classify(line: &str, indented: bool) -> Option<Found<'_>> {
    // The body of a block comment (` * class Example {` in Javadoc) quotes
    // code; a statement starting with `*` (a dereference) declares nothing.
    if line.starts_with('*') {
        return None;
    }
    if let Some(found) = preprocessor(line) {
        return Some(found);
    }
    // Strip modifiers, remembering the ones a symbol's label keeps.
    let mut rest = line;
    let mut is_pub = false;
    let mut is_export = false;
    let mut is_async = false;
    let mut modifiers = 0;
    while let Some((word, after)) = split_word(rest) {
        if !is_modifier(word) || after.is_empty() {
            break;
        }
        // `extern crate x;` is an import, not a modifier before `crate`.
        if word == "extern" && after.starts_with("crate ") {
            break;
        }
        // `const x = ...` and `const fn` both start with a modifier-like word.
        if word == "const" && !after.starts_with("fn ") {
            break;
        }
        match word {
            "pub" | "pub(crate)" | "pub(super)" | "pub(self)" => is_pub = true,
            "export" => is_export = true,
            "async" => is_async = true,
            _ => {}
        }
        modifiers += 1;
        rest = after;
    }
    let (keyword, after) = split_word(rest)?;
    // `impl<T> Trait for X {`: the generics stick to the keyword.
    let (keyword, after) = match keyword.strip_prefix("impl") {
        Some(generics) if generics.starts_with('<') => {
            ("impl", rest.trim_start()["impl".len()..].trim_start())
        }
        _ => (keyword, after),
    };
    let symbol = |kw: &str, name: &str| {
        // Sized once: `export async ` at most stands before the keyword.
        let mut label = String::with_capacity(16 + kw.len() + name.len());
        if is_export && matches!(kw, "function" | "class") {
            label.push_str("export ");
        }
        if is_pub && kw == "fn" {
            label.push_str("pub ");
        }
        if is_async && matches!(kw, "def" | "fn" | "function") {
            label.push_str("async ");
        }
        label.push_str(kw);
        label.push(' ');
        label.push_str(name);
        Some(Found::Symbol(label))
    };
    match keyword {
        "import" if modifiers == 0 => import(after).map(Found::Imports),
        "sub" if modifiers == 0 => {
            // Perl: `sub name {`, `sub name;`.
            let (name, tail) = split_identifier(after)?;
            matches!(tail.trim(), "{" | ";" | "").then(|| Found::Symbol(format!("sub {name}")))
        }
        "my" | "our" | "local" if modifiers == 0 => {
            // Perl: `my $x = ...;`, `our @ISA = ...;`, `my ($a, $b) = @_;`.
            (after.starts_with(['$', '@', '%', '(']) && after.ends_with(';'))
                .then_some(Found::Statement)
        }
        "from" if modifiers == 0 => python_from_import(after).map(Found::Import),
        "use" if modifiers <= 1 => use_path(after).map(Found::Import),
        "using" if modifiers == 0 => {
            let path = after.strip_suffix(';')?.trim();
            let path = path.strip_prefix("static ").unwrap_or(path);
            let path = path.rsplit('=').next()?.trim();
            is_path(path, ".").then_some(Found::Import(path))
        }
        "require" | "require_relative" | "require_once" | "include" | "include_once" => {
            quoted_argument(after).map(Found::Import)
        }
        "extern" => {
            let name = after.strip_prefix("crate ")?.strip_suffix(';')?;
            let name = name.split(" as ").next()?.trim();
            is_identifier(name).then_some(Found::Import(name))
        }
        "package" if modifiers == 0 && after.starts_with("require ") => {
            // Tcl: `package require http 2.7`, `package require -exact Tcl 8.6`.
            let module = after["require ".len()..]
                .split_whitespace()
                .find(|w| !w.starts_with('-'))?;
            is_path(module, ":").then_some(Found::Import(module))
        }
        "package"
            if modifiers == 0
                && (after.starts_with("ifneeded ") || after.starts_with("provide ")) =>
        {
            // Tcl: `package provide http 1.0`, `package ifneeded http 1.0 [list ...]`.
            let (_, rest) = split_word(after)?;
            let (name, version) = split_word(rest)?;
            (is_path(name, ":") && version.starts_with(|c: char| c.is_ascii_digit()))
                .then_some(Found::Statement)
        }
        "proc" if modifiers == 0 => {
            // Tcl: `proc name {args} {`, `proc ::ns::name args {`.
            let (name, tail) = after.split_once(' ')?;
            (is_path(name.trim_start_matches("::"), ":") && tail.ends_with('{'))
                .then(|| Found::Symbol(format!("proc {name}")))
        }
        "package" if modifiers == 0 && after.contains("::") => {
            // Perl: `package Carp::Heavy;`.
            let name = after.strip_suffix(';')?.trim();
            is_path(name, ":").then_some(Found::Statement)
        }
        "package" if modifiers == 0 => {
            let name = after.strip_suffix(';').unwrap_or(after).trim();
            (is_path(name, ".") && name.chars().all(|c| !c.is_uppercase()))
                .then_some(Found::Statement)
        }
        "namespace" if after.starts_with("eval ") => {
            // Tcl: `namespace eval ::http {`.
            let name = after["eval ".len()..].trim_end_matches('{').trim();
            (after.ends_with('{') && is_path(name.trim_start_matches("::"), ":"))
                .then(|| Found::Symbol(format!("namespace {name}")))
        }
        "namespace" => {
            let name = after.trim_end_matches([';', '{']).trim();
            (is_path(name, ".\\:") && (after.ends_with([';', '{']) || !name.contains(' ')))
                .then(|| Found::Symbol(format!("namespace {name}")))
        }
        "class" | "struct" | "enum" | "interface" | "trait" | "record" | "union" => {
            let name = type_name(after)?;
            symbol(keyword, name)
        }
        "module" => {
            let name = after.trim_end_matches(['{', ';']).trim();
            (name.starts_with(|c: char| c.is_ascii_uppercase()) && is_path(name, ":."))
                .then(|| Found::Symbol(format!("module {name}")))
        }
        "impl" => impl_block(after).map(Found::Symbol),
        "def" => {
            let name = after.strip_prefix("self.").unwrap_or(after);
            let (name, tail) = split_identifier(name)?;
            let tail = tail.trim_start();
            (tail.is_empty() || tail.starts_with(['(', ':', ';']) || tail.starts_with("= "))
                .then(|| symbol("def", name))?
        }
        "fn" => {
            let (name, tail) = split_identifier(after)?;
            tail.starts_with(['(', '<']).then(|| symbol("fn", name))?
        }
        "func" => go_func(after).map(Found::Symbol),
        "function" => {
            let (name, tail) = split_identifier(after.trim_start_matches('*').trim_start())?;
            let tail = tail.trim_start();
            (tail.starts_with('(') || tail.starts_with('{') || tail.starts_with('<'))
                .then(|| symbol("function", name))?
        }
        "const" | "let" | "var" | "val" => binding(after).then_some(Found::Statement),
        "type" => type_alias(after).map(Found::Symbol),
        "mod" => {
            let (name, tail) = split_identifier(after)?;
            matches!(tail.trim(), ";" | "{").then(|| Found::Symbol(format!("mod {name}")))
        }
        "macro_rules!" => {
            let (name, _) = split_identifier(after)?;
            Some(Found::Symbol(format!("macro_rules! {name}")))
        }
        _ => dunder_assignment(line)
            .or_else(|| shell_function(line))
            .or_else(|| sql(line))
            .or_else(|| c_like_function(rest, modifiers > 0, indented)),
    }
}

/// A shell function: `name() {`, `name () {`, `name() (` (a subshell body),
/// `name() { body; }` on one line. Shell names may hold `-`, `.` and `:`;
/// the parentheses are always empty. (`function name {` is the keyword
/// form, read with the other `function` forms.)
fn shell_function(line: &str) -> Option<Found<'static>> {
    // The name's characters are ASCII: the first byte outside them (the
    // first byte of a non-ASCII char too) ends it, at a char boundary.
    let end = line
        .bytes()
        .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':')))
        .unwrap_or(line.len());
    let name = &line[..end];
    let body = line[end..].trim_start().strip_prefix("()")?.trim_start();
    let opens = matches!(body, "{" | "(") || body.starts_with("{ ") || body.starts_with("( ");
    (is_shell_function_name(name) && opens).then(|| Found::Symbol(format!("function {name}")))
}

/// A name a shell function may have: `usage`, `_comp_x`, `git-sh-setup`,
/// `ns::f`; not a keyword of the languages that take the same shape
/// (`if () {` is no declaration anywhere).
fn is_shell_function_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && !matches!(
            name,
            "if" | "for"
                | "while"
                | "until"
                | "switch"
                | "case"
                | "select"
                | "catch"
                | "return"
                | "elif"
                | "else"
                | "do"
                | "function"
                | "match"
        )
}

/// A shell function's head alone on its line (`usage()`, `die ()`), its
/// brace on the next: the name, if so. A dotted name (`apt_pkg.init()`) is
/// a method call.
fn shell_function_head(line: &str) -> Option<&str> {
    let name = line.strip_suffix("()")?.trim_end();
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b':'));
    (plain && is_shell_function_name(name)).then_some(name)
}

/// Python's module attributes: `__all__ = [`, `__version__ = "1.0"`. Only
/// Python names things `__so__`, and small package files often hold little
/// else.
fn dunder_assignment(line: &str) -> Option<Found<'static>> {
    if !line.starts_with("__") {
        return None;
    }
    let (name, tail) = split_identifier(line)?;
    let dunder = name.len() > 4 && name.starts_with("__") && name.ends_with("__");
    let tail = tail.trim_start();
    (dunder && tail.starts_with('=') && !tail.starts_with("==")).then_some(Found::Statement)
}

/// `#include <stdio.h>`, `#define NAME`, `#import`, and the conditionals
/// (`#ifdef X`, `#if defined(X)`, `#endif`, `#pragma once`). A space after `#`
/// (as in `# define __THROW`) is allowed only in forms a shell or Python
/// comment does not take: an upper-case macro name, a bare `# endif`.
fn preprocessor(line: &str) -> Option<Found<'_>> {
    let after_hash = line.strip_prefix('#')?;
    let spaced = after_hash.starts_with([' ', '\t']);
    let directive = after_hash.trim_start();
    if let Some(found) = conditional(directive, spaced) {
        return Some(found);
    }
    if let Some(target) = directive
        .strip_prefix("include")
        .or_else(|| directive.strip_prefix("import"))
    {
        // `<stdio.h>` or `"x.h"`, optionally followed by a comment.
        let target = target.trim();
        let close = match target.chars().next()? {
            '<' => '>',
            '"' => '"',
            _ => return None,
        };
        let (inner, tail) = target[1..].split_once(close)?;
        let tail = tail.trim();
        let tail_ok = tail.is_empty() || tail.starts_with("/*") || tail.starts_with("//");
        return (tail_ok && !inner.is_empty()).then_some(Found::Import(inner));
    }
    let name = directive.strip_prefix("define ")?;
    let (name, _) = split_identifier(name.trim_start())?;
    if spaced && !is_macro_name(name) {
        return None;
    }
    Some(Found::Symbol(format!("define {name}")))
}

/// `#ifdef X`, `#ifndef X`, `#undef X`, `#if ...`, `#elif ...`, `#else`,
/// `#endif`, `#pragma ...`, `#error ...`: code, but nothing to list.
fn conditional(directive: &str, spaced: bool) -> Option<Found<'static>> {
    let (word, rest) = split_word(directive)?;
    // What may follow a directive on its line: nothing, or a C comment.
    let bare = |rest: &str| rest.is_empty() || rest.starts_with("/*") || rest.starts_with("//");
    let ok = match word {
        "ifdef" | "ifndef" | "undef" => {
            let (name, tail) = split_identifier(rest)?;
            bare(tail.trim()) && (!spaced || is_macro_name(name))
        }
        "endif" | "else" => bare(rest),
        "if" | "elif" => {
            !spaced || rest.starts_with("defined") || rest.starts_with('!') || is_macro_name(rest)
        }
        "pragma" | "error" | "warning" => !spaced && !rest.is_empty(),
        _ => false,
    };
    ok.then_some(Found::Statement)
}

/// A C macro name as conventionally written: upper case, digits and `_`.
fn is_macro_name(name: &str) -> bool {
    split_identifier(name).is_some_and(|(id, rest)| {
        rest.trim().is_empty()
            && id.len() > 1
            && id
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    })
}

/// `import x`, `import a.b as c`, `import a.b.C;`, `import static a.b.c;`,
/// `import x from 'y'`, `import { a } from "y"`, `import "fmt"`, `import (`.
fn import(after: &str) -> Option<&str> {
    let after = after.trim();
    if let Some(quoted) = quoted_argument(after) {
        return Some(quoted);
    }
    if after == "(" {
        return Some("(block)");
    }
    if let Some(idx) = after.find(" from ") {
        // JS/TS: the module is the quoted string after `from`.
        return quoted_argument(after[idx + 6..].trim_end_matches(';'));
    }
    let after = after.strip_prefix("static ").unwrap_or(after);
    let after = after.strip_suffix(';').unwrap_or(after).trim_end();
    // Java `a.b.C`, `a.b.*`; Python `a, b.c as d`.
    let modules_ok = after.split(',').all(|part| {
        let (module, alias) = part
            .trim()
            .split_once(" as ")
            .map_or((part.trim(), None), |(m, a)| (m, Some(a)));
        is_path(module, ".*") && alias.is_none_or(|a| is_identifier(a.trim()))
    });
    modules_ok.then_some(after)
}

/// The modules of an import list (`a, b.c as d` gives `a` and `b.c`).
fn imported_modules(list: &str) -> impl Iterator<Item = &str> {
    list.split(',')
        .map(|part| part.split(" as ").next().unwrap_or(part).trim())
        .filter(|module| !module.is_empty())
}

/// `from a.b import c` / `from . import x`.
fn python_from_import(after: &str) -> Option<&str> {
    let (module, tail) = after.split_once(' ')?;
    let names = tail.trim_start().strip_prefix("import ")?.trim();
    let module_ok =
        module.chars().all(|c| c == '.') || is_path(module.trim_start_matches('.'), ".");
    let names_ok = names == "*"
        || names.starts_with('(')
        || names
            .split(',')
            .all(|n| n.split(" as ").all(|p| is_identifier(p.trim())));
    (module_ok && names_ok).then_some(module)
}

/// Rust `use a::b;` / `use a::{b, c};`, PHP `use App\Models\User;`, Perl
/// `use strict;` / `use POSIX qw(floor);`.
fn use_path(after: &str) -> Option<&str> {
    let after = after.trim();
    if let Some(path) = after.strip_suffix(';') {
        let path = path.split(" as ").next()?.trim();
        let root = path.split("::{").next()?;
        if is_path(root, ":\\") || path.contains("::{") {
            return Some(root);
        }
        // Perl: `use Carp ();`, `use POSIX qw(floor);`, `use parent -norequire, 'X';`.
        let (module, args) = split_word(path)?;
        let perl_args = args.starts_with(['(', '\'', '"', '-'])
            || args.starts_with("qw")
            || args.starts_with(|c: char| c.is_ascii_digit());
        return (is_path(module, ":") && perl_args).then_some(module);
    }
    let root = after.strip_suffix('{')?.trim().strip_suffix("::")?;
    is_path(root, ":").then_some(root)
}

/// `'x'`, `"x"`, `('x')`, `("x")`; the text inside the quotes.
fn quoted_argument(after: &str) -> Option<&str> {
    let s = after.trim().trim_end_matches(';').trim();
    let s = s
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .unwrap_or(s)
        .trim();
    let quote = s.chars().next().filter(|c| matches!(c, '"' | '\'' | '`'))?;
    let inner = s[1..].strip_suffix(quote)?;
    (!inner.is_empty() && !inner.contains(quote) && !inner.contains(' ')).then_some(inner)
}

/// A type declaration's name: an identifier followed by what only code puts
/// there (`:`, `(`, `{`, `<`, `;`, `extends`, `implements`, `<` as in Ruby, or
/// nothing at all).
fn type_name(after: &str) -> Option<&str> {
    let (name, tail) = split_identifier(after)?;
    let tail = tail.trim_start();
    let ok = tail.is_empty()
        || tail.starts_with([':', '(', '{', '<', ';', '='])
        || [
            "extends ",
            "implements ",
            "where ",
            "final ",
            "sealed ",
            "< ",
        ]
        .iter()
        .any(|w| tail.starts_with(w));
    ok.then_some(name)
}

/// `impl Foo {`, `impl<T> Trait for Foo<T> {`, `impl<T: Into<String>> Foo<T> {`.
fn impl_block(after: &str) -> Option<String> {
    let body = after.trim().strip_suffix('{')?.trim();
    let body = if body.starts_with('<') {
        after_generics(body)?.trim()
    } else {
        body
    };
    let first = body.chars().next()?;
    (first.is_alphabetic() || first == '_').then(|| format!("impl {body}"))
}

/// What follows the generic parameter list that opens `s` (`<T, F: Fn() -> u8>`):
/// angle brackets nest, and the `>` of an arrow `->` closes nothing.
fn after_generics(s: &str) -> Option<&str> {
    let bytes = s.as_bytes();
    let mut depth = 0usize;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'<' => depth += 1,
            b'>' if i > 0 && bytes[i - 1] == b'-' => {}
            b'>' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return s.get(i + 1..);
                }
            }
            _ => {}
        }
    }
    None
}

/// Go: `func name(`, `func (r *T) name(`.
fn go_func(after: &str) -> Option<String> {
    let after = after.trim_start();
    let after = match after.strip_prefix('(') {
        Some(receiver) => receiver.split_once(')')?.1.trim_start(),
        None => after,
    };
    let (name, tail) = split_identifier(after)?;
    tail.starts_with(['(', '[']).then(|| format!("func {name}"))
}

/// Go/TS/Rust: `type X struct {`, `type X interface {`, `type X = ...`, `type X int`.
fn type_alias(after: &str) -> Option<String> {
    let (name, tail) = split_identifier(after)?;
    let tail = tail.trim_start();
    if tail.starts_with("struct") {
        return Some(format!("struct {name}"));
    }
    if tail.starts_with("interface") {
        return Some(format!("interface {name}"));
    }
    let ok = tail.starts_with('=')
        || tail.starts_with('<')
        || tail.starts_with('[')
        || tail.ends_with(';')
        || split_identifier(tail).is_some_and(|(_, t)| t.trim().is_empty());
    ok.then(|| format!("type {name}"))
}

/// `x = `, `mut x =`, `x: T =`, `{ a, b } =`, `[a, b] =`, `x;`.
fn binding(after: &str) -> bool {
    let after = after.strip_prefix("mut ").unwrap_or(after).trim_start();
    if after.starts_with(['{', '[']) {
        return has(after, "} =") || has(after, "] =");
    }
    let Some((_, tail)) = split_identifier(after) else {
        return false;
    };
    let tail = tail.trim_start();
    tail.starts_with('=') || tail.starts_with(':') || tail == ";" || tail.starts_with(';')
}

/// SQL statements, upper case (the usual style), or any case ending in `;` or `(`.
fn sql(line: &str) -> Option<Found<'_>> {
    let ends_statement = line.ends_with(';') || line.ends_with('(');
    if !ends_statement && !line.as_bytes().first().is_some_and(u8::is_ascii_uppercase) {
        return None;
    }
    let mut words = line.split_whitespace();
    let first = words.next()?;
    let upper = first.chars().all(|c| c.is_ascii_uppercase());
    if !(upper || ends_statement) {
        return None;
    }
    let second = words.next().unwrap_or("");
    let kw = first.to_ascii_uppercase();
    let kw2 = second.to_ascii_uppercase();
    match (kw.as_str(), kw2.as_str()) {
        ("CREATE", _) => {
            let rest: Vec<&str> = std::iter::once(second).chain(words).collect();
            let mut it = rest.iter().skip_while(|w| {
                matches!(
                    w.to_ascii_uppercase().as_str(),
                    "OR" | "REPLACE" | "TEMP" | "TEMPORARY" | "UNIQUE" | "VIRTUAL" | "MATERIALIZED"
                )
            });
            let object = it.next()?.to_ascii_lowercase();
            let mut name = *it.next()?;
            if name.eq_ignore_ascii_case("IF") {
                name = it.nth(2)?;
            }
            let name = name.trim_end_matches(['(', ';']);
            matches!(
                object.as_str(),
                "table"
                    | "view"
                    | "index"
                    | "function"
                    | "procedure"
                    | "trigger"
                    | "type"
                    | "schema"
                    | "sequence"
            )
            .then(|| Found::Symbol(format!("{object} {name}")))
        }
        ("INSERT", "INTO")
        | ("DELETE", "FROM")
        | ("ALTER", "TABLE")
        | ("DROP", "TABLE")
        | ("DROP", "INDEX")
        | ("DROP", "VIEW") => Some(Found::Statement),
        ("SELECT", _)
            if upper && (line.contains(" FROM ") || line.ends_with(',') || ends_statement) =>
        {
            Some(Found::Statement)
        }
        ("UPDATE", _) if upper && line.contains(" SET ") => Some(Found::Statement),
        ("GRANT" | "REVOKE" | "ALTER" | "DROP" | "COMMENT" | "TRUNCATE" | "SET", _)
            if upper && line.ends_with(';') =>
        {
            Some(Found::Statement)
        }
        _ => None,
    }
}

/// C, C++, Java, C#: `int main(int argc, char **argv) {`,
/// `public static void main(String[] args) {`, `static int f(void)` (the brace
/// on the next line). The return type and the name must both be there, the
/// line must not end a statement, and it must end in `{` unless a modifier or a
/// known type starts it at the left margin.
///
/// Only a declaration's form is taken: the parameter list closes on the line
/// and nothing but qualifiers (`const`, `noexcept`, `throws X`, `-> T`, a C++
/// initializer list) stands between it and the brace; the name is no keyword;
/// and the words before it look like a type. Statements of brace languages
/// take the same shape (`match plan(app, body) {`, `text: match (a, b) {`,
/// `where P: FnOnce() -> F {`, `inner: Arc::new(Inner {`,
/// `match f().await? {`) and were listed as functions before.
fn c_like_function(line: &str, had_modifier: bool, indented: bool) -> Option<Found<'_>> {
    // Byte searches: most lines are looked at here, and `str::find` of a
    // char cost several times a `memchr` on a line's bytes.
    let open = memchr::memchr(b'(', line.as_bytes())?;
    let head = line[..open].trim_end();
    let tail = line[open..].trim_end();
    if tail.ends_with(';') || memchr::memchr2(b' ', b'*', head.as_bytes()).is_none() {
        return None;
    }
    let name_start = head
        .char_indices()
        .rev()
        .find(|&(_, c)| !(c.is_alphanumeric() || c == '_' || c == ':' || c == '~'))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let name = &head[name_start..];
    let before = head[..name_start].trim();
    if name.is_empty()
        || before.is_empty()
        || !is_path(name.trim_start_matches('~'), ":")
        || is_not_type(name)
    {
        return None;
    }
    let type_words_ok = before.split_whitespace().all(|w| {
        let w = w.trim_matches(['*', '&']);
        w.is_empty()
            || (!is_not_type(w)
                // A type starts with a letter or `_` (not `12`, a listing's
                // line number) and never ends in a lone `:` (a field, a
                // label, a `where` bound).
                && w.starts_with(|c: char| c.is_alphabetic() || c == '_' || c == ':')
                && (!w.ends_with(':') || w.ends_with("::"))
                && w.chars().all(|c| {
                    c.is_alphanumeric() || matches!(c, '_' | ':' | '<' | '>' | ',' | '[' | ']')
                }))
    });
    if !type_words_ok {
        return None;
    }
    // What follows the parameter list: qualifiers and the brace at most.
    let rest = tail.get(closing_paren(tail)? + 1..)?.trim();
    let opens_body = rest.ends_with('{');
    let qualifiers = rest.strip_suffix('{').unwrap_or(rest).trim();
    if !only_qualifiers(qualifiers) {
        return None;
    }
    const C_TYPES: &[&str] = &[
        "void", "int", "char", "long", "short", "unsigned", "signed", "float", "double", "bool",
        "size_t", "auto", "struct", "template", "string", "String", "boolean", "byte",
    ];
    let first = before.split_whitespace().next().unwrap_or("");
    let closes = opens_body || qualifiers.starts_with("throws ");
    let declared = (had_modifier || C_TYPES.contains(&first)) && !indented && !opens_body;
    (closes || declared).then(|| Found::Symbol(format!("function {name}")))
}

/// Whether `word` starts statements or expressions, never a type or a
/// function name: a `match` on the word (as [`is_modifier`]), which
/// compares only against the words of its length, where a walk of a list
/// called `memcmp` for each of them, several times on every line of code.
fn is_not_type(word: &str) -> bool {
    matches! { word,
        "if" | "for" | "while" | "switch" | "return" | "else" | "new" | "throw" | "case"
        | "sizeof" | "catch" | "do" | "and" | "or" | "not" | "the" | "a" | "an" | "is"
        | "to" | "of" | "in" | "match" | "where" | "let" | "mut" | "await" | "yield"
        | "loop" | "go" | "defer" | "unless" | "until" | "elif" | "foreach" | "lock"
        | "using" | "with" | "typeof" | "delete" | "assert" | "echo" | "print" | "func"
        | "fn" | "select" | "__attribute__" | "__declspec" | "decltype" | "operator"
    }
}

/// The byte index of the `)` that closes the `(` opening `s`, if on this line.
fn closing_paren(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, b) in s.bytes().enumerate() {
        match b {
            b'(' => depth += 1,
            b')' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// What may stand between a function's parameter list and its body: nothing,
/// `const`, `noexcept`, `override`, `final`, `volatile`, `mutable`, `throws X`,
/// a trailing return type `-> T`, or a C++ initializer list `: a(x), b(y)`;
/// never a method call (`.await?`), a match arm (`=>`) or an assignment.
fn only_qualifiers(q: &str) -> bool {
    if q.is_empty() {
        return true;
    }
    if has(q, "=>") || has(q, " = ") || q.starts_with(['.', '?', '=', ')', '[']) {
        return false;
    }
    if q.starts_with("->") || q.starts_with(':') {
        return true;
    }
    q.split_whitespace().next().is_some_and(|w| {
        matches!(
            w,
            "const"
                | "noexcept"
                | "override"
                | "final"
                | "volatile"
                | "mutable"
                | "throws"
                | "&"
                | "&&"
        )
    })
}

fn ends_like_code(line: &str) -> bool {
    ends_like_c_family(line)
        || python_block(line)
        || is_call_statement(line)
        || closes_brackets(line)
        || opens_call(line)
        || assigns_expression(line)
}

/// A line that only closes what earlier lines opened: `)`, `])`, `),`, `]`.
fn closes_brackets(line: &str) -> bool {
    matches!(line.as_bytes().first(), Some(b')' | b']' | b'}'))
        && line.len() <= 8
        && line.bytes().any(|b| matches!(b, b')' | b']'))
        && line
            .bytes()
            .all(|b| matches!(b, b')' | b']' | b'}' | b',' | b';'))
}

/// A call whose arguments follow on the next lines: `warnings.warn(`,
/// `setup(`, `parser = argparse.ArgumentParser(`.
fn opens_call(line: &str) -> bool {
    let Some(head) = line.strip_suffix('(') else {
        return false;
    };
    let callee = head.rsplit_once(" = ").map_or(head, |(target, callee)| {
        if is_name_path(target.trim()) {
            callee
        } else {
            ""
        }
    });
    is_name_path(callee.trim())
}

/// An assignment of a call, a subscript or an opened literal:
/// `path = os.path.join(a, b)`, `Key = Tuple[str, ...]`, `__all__ = [`.
/// Configuration files assign strings, numbers and arrays (`name = "x"`,
/// `members = ["a"]`), never calls or subscripts of a name, and open a
/// literal only in forms that carry no other code signal.
fn assigns_expression(line: &str) -> bool {
    // What it assigns ends the line: `)`, `]`, or an opened `[` / `(`.
    if !matches!(
        line.as_bytes().last(),
        Some(b')' | b']' | b'[' | b'(' | b';')
    ) {
        return false;
    }
    let Some(at) = spaced_equals(line) else {
        return false;
    };
    let (target, value) = (&line[..at - 1], &line[at + 2..]);
    if !is_name_path(target.trim()) {
        return false;
    }
    let value = value.trim();
    let value = value.strip_suffix(';').unwrap_or(value);
    if matches!(value, "[" | "(") {
        return true;
    }
    if is_call_statement(value) {
        return true;
    }
    // A subscript: a name directly followed by `[`, closed at the end.
    let end = value
        .find(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '.')))
        .unwrap_or(value.len());
    end > 0 && value[end..].starts_with('[') && value.ends_with(']') && is_name_path(&value[..end])
}

/// Where a line's first ` = ` (an assignment, not `==`) has its `=`.
fn spaced_equals(line: &str) -> Option<usize> {
    let bytes = line.as_bytes();
    memchr::memchr_iter(b'=', bytes)
        .find(|&i| i > 0 && bytes[i - 1] == b' ' && bytes.get(i + 1) == Some(&b' '))
}

/// Identifiers joined by dots: `x`, `self.items`, `os.path.join`.
fn is_name_path(s: &str) -> bool {
    !s.is_empty() && s.split('.').all(is_identifier)
}

fn ends_like_c_family(line: &str) -> bool {
    line.ends_with(['{', '}', ';'])
        || line.ends_with("=>")
        || line.ends_with("):")
        || line.starts_with("//")
        || line.starts_with("/*")
        || line.starts_with("-- ")
        || line.starts_with("#[")
        || (line.starts_with('@') && line[1..].starts_with(|c: char| c.is_ascii_alphabetic()))
        || matches!(
            line,
            "end" | "fi" | "done" | "esac" | "else" | "then" | "do" | ";;"
        )
}

/// Python block openers that prose does not take (`else:`, `try:`,
/// `except ValueError:`, `for x in y:`, `if x == y:`, `with f() as g:`) and
/// docstring delimiters.
fn python_block(line: &str) -> bool {
    if line.starts_with("\"\"\"") || line.starts_with("'''") {
        return true;
    }
    let Some(head) = line.strip_suffix(':') else {
        return false;
    };
    match split_word(head) {
        Some(("else" | "try" | "finally", "")) => true,
        Some(("except", rest)) => rest.is_empty() || split_identifier(rest).is_some(),
        Some(("elif", _)) => true,
        Some(("if" | "while", rest)) => has(rest, "==") || has(rest, "!=") || rest.contains('('),
        Some(("for", rest)) => rest
            .split_once(" in ")
            .is_some_and(|(target, _)| target.split(',').all(|t| is_identifier(t.trim()))),
        Some(("with", rest)) => rest.contains('(') && has(rest, " as "),
        _ => false,
    }
}

/// A statement that is only a call: `main()`, `os.exit(run(args))`,
/// `require('./cli.js')(process)`; a name, directly an opening parenthesis,
/// and a closing one at the end.
fn is_call_statement(line: &str) -> bool {
    let line = line.strip_suffix(';').unwrap_or(line);
    if !line.ends_with(')') {
        return false;
    }
    // ASCII callees are read as bytes: the callee is dotted parts, each a
    // letter, `_` or `$` and then letters, digits, `_` or `$`.
    let bytes = line.as_bytes();
    let mut part_start = true;
    for &b in bytes {
        match b {
            b'(' => return !part_start,
            b'.' if !part_start => part_start = true,
            b'0'..=b'9' if !part_start => {}
            b if b.is_ascii_alphabetic() || b == b'_' || b == b'$' => part_start = false,
            b if b >= 0x80 => return is_call_statement_chars(line),
            _ => return false,
        }
    }
    false
}

/// [`is_call_statement`] read char by char (callees with non-ASCII names),
/// `line` without its `;`.
fn is_call_statement_chars(line: &str) -> bool {
    let end = line
        .find(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '$' | '.')))
        .unwrap_or(line.len());
    end > 0
        && line[end..].starts_with('(')
        && line[..end]
            .split('.')
            .all(|part| split_identifier(part).is_some_and(|(_, r)| r.is_empty()))
}

/// A troff request: `.` and one to three letters at the left margin, then a
/// blank or the end of the line (`.TH LS 1`, `.SH NAME`, `.B`, `.br`).
fn is_troff_request(line: &str) -> bool {
    let Some(rest) = line.strip_prefix('.') else {
        return false;
    };
    let letters = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
    (1..=3).contains(&letters) && rest[letters..].chars().next().is_none_or(|c| c == ' ')
}

/// Whether a first line is an interpreter line (`#!/bin/sh`, `#! /usr/bin/env perl`).
fn is_shebang(line: &str) -> bool {
    line.strip_prefix("#!")
        .is_some_and(|rest| rest.trim_start().starts_with('/'))
}

/// A line of prose. A sentence: at least ten words, most of them starting
/// with a letter (a row of numbers in a data table is not prose), ending
/// like one. Or a line of a wrapped paragraph, which mostly does not end
/// so: at least eight words, three in four starting with a letter, none of
/// the punctuation code is made of, and no comment marker opening it
/// (comments are the code's own prose).
/// The shortest line taken for a line of a wrapped paragraph.
const PARAGRAPH_LINE_BYTES: usize = 40;

fn reads_like_prose(line: &str) -> bool {
    // Eight words take at least fifteen bytes.
    if line.len() < 15 {
        return false;
    }
    let sentence_end = line.ends_with(['.', '?', '!', ',']);
    // A wrapped line of a paragraph opens with a word (not a timestamp,
    // a bracket or a comment marker); decided before the byte pass.
    // A wrapped paragraph's line of eight words or more is long; code's
    // lines mostly are not.
    let paragraph_opening = line.len() >= PARAGRAPH_LINE_BYTES
        && line
            .as_bytes()
            .first()
            .is_some_and(|&b| b.is_ascii_alphabetic() || b >= 0x80 || b == b'(' || b == b'`');
    if !sentence_end && !paragraph_opening {
        return false;
    }
    let (mut words, mut lettered) = (0usize, 0usize);
    let mut in_word = false;
    let mut code_marks = false;
    for &b in line.as_bytes() {
        if b.is_ascii_whitespace() {
            in_word = false;
            continue;
        }
        if !in_word {
            in_word = true;
            words += 1;
            lettered += usize::from(b.is_ascii_alphabetic() || b >= 0x80);
        }
        if matches!(
            b,
            b'=' | b';' | b'{' | b'}' | b'<' | b'>' | b'$' | b'\\' | b'|'
        ) {
            code_marks = true;
            if !sentence_end {
                return false;
            }
        }
    }
    if sentence_end && words >= 10 && lettered * 2 > words {
        return true;
    }
    paragraph_opening && !code_marks && words >= 8 && lettered * 4 >= words * 3
}

/// The first whitespace-delimited word and the rest (trimmed at its start).
fn split_word(s: &str) -> Option<(&str, &str)> {
    // ASCII whitespace only: it separates every keyword this module knows,
    // and a byte scan keeps the per-line cost low.
    let s = s.trim_ascii_start();
    if s.is_empty() {
        return None;
    }
    match s.bytes().position(|b| b.is_ascii_whitespace()) {
        Some(i) => Some((&s[..i], s[i..].trim_ascii_start())),
        None => Some((s, "")),
    }
}

/// A leading identifier (`[A-Za-z_$][A-Za-z0-9_$]*`, letters and digits
/// in the Unicode sense) and the rest.
///
/// Nearly every line goes through here, some several times: ASCII bytes are
/// judged as bytes, and the char-by-char reading
/// ([`split_identifier_chars`]) takes over only at a non-ASCII byte, where
/// it decides the same way.
fn split_identifier(s: &str) -> Option<(&str, &str)> {
    let bytes = s.as_bytes();
    let first = *bytes.first()?;
    if first >= 0x80 || first.is_ascii_whitespace() {
        return split_identifier_chars(s);
    }
    if !(first.is_ascii_alphabetic() || first == b'_' || first == b'$') {
        return None;
    }
    for (i, &b) in bytes.iter().enumerate().skip(1) {
        if b >= 0x80 {
            return split_identifier_chars(s);
        }
        if !(b.is_ascii_alphanumeric() || b == b'_' || b == b'$') {
            return Some((&s[..i], &s[i..]));
        }
    }
    Some((s, ""))
}

/// [`split_identifier`] read char by char (Unicode whitespace, letters and
/// digits).
fn split_identifier_chars(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    let first = s.chars().next()?;
    if !(first.is_alphabetic() || first == '_' || first == '$') {
        return None;
    }
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
        .unwrap_or(s.len());
    Some((&s[..end], &s[end..]))
}

fn is_identifier(s: &str) -> bool {
    split_identifier(s).is_some_and(|(_, rest)| rest.is_empty())
}

/// Identifiers joined by any of the `separators` (`a.b.c`, `std::io`, `App\X`),
/// which are ASCII: a byte is looked up among them, not a `char` searched
/// for in a string (which cost more than the rest of the check).
fn is_path(s: &str, separators: &str) -> bool {
    let separators = separators.as_bytes();
    !s.is_empty()
        && s.chars()
            .next()
            .is_some_and(|c| c.is_alphabetic() || c == '_' || c == '@' || c == '\\')
        && s.chars().all(|c| {
            if c.is_ascii() {
                let b = c as u8;
                b.is_ascii_alphanumeric() || b == b'_' || b == b'@' || separators.contains(&b)
            } else {
                c.is_alphanumeric()
            }
        })
}

/// Whether `needle` occurs in `hay`: a search for its first byte and a
/// comparison. The lines looked in are short and the needles a few ASCII
/// bytes, where setting up the standard library's substring searcher on
/// every call cost more than the search.
fn has(hay: &str, needle: &str) -> bool {
    let (hay, needle) = (hay.as_bytes(), needle.as_bytes());
    let Some((&first, rest)) = needle.split_first() else {
        return true;
    };
    memchr::memchr_iter(first, hay).any(|i| hay[i + 1..].starts_with(rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scanned in two halves or in one pass, a text gives the same scan.
    #[test]
    fn split_scans_match_whole_scans() {
        // A few imports, repeated in both halves (each is listed once).
        let unit = |i: usize| {
            let import = if i.is_multiple_of(100) {
                format!("use std::collections::Map{};\n", (i / 100) % 4)
            } else {
                String::new()
            };
            format!(
                "{import}pub fn handler_{i}(x: u32) -> u32 {{\n    let y = x + {i};\n    y\n}}\nThis sentence reads like prose and not like code at all {i}.\n"
            )
        };
        let body: String = (0..4000).map(unit).collect();
        let half = body.len() / 2;
        let mut texts = vec![
            body.clone(),
            format!("#!/bin/sh\n{body}"),
            // A fence opened before the middle and closed after it.
            format!(
                "{}```\n{}```\n{}",
                &body[..half - 40],
                "x = 1\n".repeat(400),
                &body[half - 40..]
            ),
            // A fence opened before the middle and never closed.
            format!("{}```\n{}", &body[..half - 40], &body[half - 40..]),
            format!("diff --git a/x b/x\n+++ b/x\n@@ -1 +1 @@\n{body}"),
        ];
        texts.push(texts[0].replace('\n', "\r\n"));
        for text in &texts {
            assert!(text.len() >= PARALLEL_BYTES);
            let split = format!("{:?}", Scan::of(text));
            let whole = format!("{:?}", Scan::part(text, true, Context::default(), false).0);
            assert_eq!(split, whole, "{}", &text[..60]);
        }
    }

    #[test]
    fn the_word_sets_hold_their_words_only() {
        assert!(is_modifier("pub(crate)") && is_modifier("strictfp") && !is_modifier("class"));
        assert!(is_not_type("__declspec") && is_not_type("if"));
        assert!(!is_not_type("int") && !is_not_type(""));
    }

    /// The byte readings of identifiers and calls decide as the char
    /// readings do, non-ASCII letters, digits and blanks included.
    #[test]
    fn byte_readings_agree_with_char_readings() {
        let samples = [
            "",
            " x",
            "\u{a0}x",
            "x",
            "x1 y",
            "_a$b(c)",
            "1x",
            "é(x)",
            "aé(x)",
            "a.é(x)",
            "a²(x)",
            "a.b.c(d)",
            "a..b()",
            ".a()",
            "a.()",
            "a.1b()",
            "$()",
            "a ()",
            "Ωmega.x()",
            "f(x);",
            "x\u{2003}(y)",
            "٣a()",
            "a٣()",
            "ab\u{a0}",
            "f()",
            "(x)",
        ];
        for s in samples {
            assert_eq!(split_identifier(s), split_identifier_chars(s), "{s:?}");
            let line = s.strip_suffix(';').unwrap_or(s);
            let chars = line.ends_with(')') && is_call_statement_chars(line);
            assert_eq!(is_call_statement(s), chars, "{s:?}");
            for needle in ["==", " as ", "(", "é", ""] {
                assert_eq!(has(s, needle), s.contains(needle), "{s:?} {needle:?}");
            }
        }
    }

    fn code(text: &str) -> Option<Synopsis> {
        let input = Input::new(text, "", 100);
        summarize(&input)
    }

    #[test]
    fn python_imports_and_symbols() {
        let s =
            code("import os\n\nclass Runner:\n    pass\n\ndef main():\n    return os.getcwd()\n")
                .expect("code");
        assert_eq!(s.structure, ["line_count: 7", "imports: os"]);
        assert_eq!(s.notable_items, ["class Runner", "def main"]);
    }

    #[test]
    fn prose_openings_are_not_code() {
        let prose = "use the force, they said.\nlet me explain how this works in practice.\n\
                     import data from the old system first.\nclass of 2020 graduates met again.\n\
                     package manager updates are weekly.\n";
        assert!(code(prose).is_none());
    }

    #[test]
    fn many_languages() {
        let cases: &[(&str, &str)] = &[
            ("package main\n\nimport \"fmt\"\n\nfunc main() {\n}\n", "func main"),
            ("import java.util.List;\n\npublic class Foo {\n  public static void main(String[] args) {\n  }\n}\n", "class Foo"),
            ("#include <stdio.h>\n\nint main(int argc, char **argv) {\n  return 0;\n}\n", "function main"),
            ("using System;\n\nnamespace App {\n  public sealed class Program {\n  }\n}\n", "class Program"),
            ("#!/bin/sh\nset -e\nbuild() {\n  make\n}\n", ""),
            ("require 'json'\n\nmodule Tools\n  def self.run(x)\n  end\nend\n", "module Tools"),
            ("<?php\nnamespace App\\Http;\nuse App\\Models\\User;\nfunction handle($r) {\n}\n", "function handle"),
            ("CREATE TABLE users (\n  id INTEGER PRIMARY KEY\n);\nINSERT INTO users VALUES (1);\n", "table users"),
            ("use std::io;\n\npub struct Store {\n}\n\nimpl Store {\n    pub fn open() {}\n}\n", "impl Store"),
        ];
        for (text, symbol) in cases {
            let s = code(text).unwrap_or_else(|| panic!("not code: {text}"));
            if !symbol.is_empty() {
                assert!(
                    s.notable_items.iter().any(|i| i == symbol),
                    "{symbol} in {:?}",
                    s.notable_items
                );
            }
        }
    }

    /// Statements of brace languages take a function's shape (a name, a
    /// parenthesis, a brace) but are not declarations: none is a symbol.
    #[test]
    fn statements_are_not_function_symbols() {
        let rust = "use std::sync::Arc;\n\
            pub fn handle(app: &App) -> Result<(), E> {\n\
            \x20   let mut rewritten = match plan(app, body.clone(), Mode::WithRefs).await? {\n\
            \x20       Plan::Unchanged(why) => {\n\
            \x20           return forward(app).await;\n\
            \x20       }\n\
            \x20   };\n\
            \x20   match rewrite_with(body, &app.config.policy, &app.memo) {\n\
            \x20       Ok(x) => x,\n\
            \x20   }\n\
            \x20   let t = Thing {\n\
            \x20       text: match (o.text, &o.content) {\n\
            \x20           _ => 1,\n\
            \x20       },\n\
            \x20       inner: Arc::new(Inner {\n\
            \x20       }),\n\
            \x20   };\n\
            \x20   for (i, reason) in selection.reasons.iter().enumerate() {\n\
            \x20   }\n\
            \x20   match f() {\n\
            \x20   }\n\
            }\n\
            fn trace<F, P>(p: P) -> F\n\
            \x20   where P: FnOnce() -> F {\n\
            }\n\
            impl<T, F: FnMut(T)> AllEntries<T, F> {\n\
            }\n\
            impl<T: Into<String>> Drop for Holder<T> {\n\
            }\n\
            pub(crate) enum Plan {\n\
            \x20   Unchanged(&'static str),\n\
            }\n";
        let s = code(rust).expect("code");
        assert_eq!(
            s.notable_items,
            [
                "pub fn handle",
                "fn trace",
                "impl AllEntries<T, F>",
                "impl Drop for Holder<T>",
                "enum Plan"
            ]
        );
    }

    /// Real declarations of C-family languages are still found.
    #[test]
    fn c_family_declarations_stay_symbols() {
        let cases: &[(&str, &str)] = &[
            ("#include <x.h>\nint main(int argc, char **argv) {\n}\n", "function main"),
            ("#include <x.h>\nstatic int helper(void)\n{\n}\n", "function helper"),
            ("#include <x>\nvoid Foo::bar(int x) const {\n}\n", "function Foo::bar"),
            ("#include <x>\nFoo::~Foo() noexcept {\n}\nstd::string Foo::name() const {\n}\n", "function Foo::name"),
            ("import java.io.File;\npublic class A {\n  public void run() throws IOException {\n  }\n}\n", "function run"),
            ("#include <x>\nauto f(int x) -> int {\n}\n", "function f"),
        ];
        for (text, symbol) in cases {
            let s = code(text).unwrap_or_else(|| panic!("not code: {text}"));
            assert!(
                s.notable_items.iter().any(|i| i == symbol),
                "{symbol} in {:?}",
                s.notable_items
            );
        }
    }

    #[test]
    fn short_python_with_import_lists_is_code() {
        let s = code("import subprocess, shlex\nout = subprocess.run(shlex.split(cmd), capture_output=True)\nprint(out.stdout, out.returncode)\n")
            .expect("code");
        assert_eq!(s.structure[1], "imports: subprocess, shlex");
        let s = code("import numpy as np, os.path\nx = np.zeros(3)\nprint(x)\n").expect("code");
        assert_eq!(s.structure[1], "imports: numpy, os.path");
        // A package file: an import, a call over several lines, dunders.
        assert!(code(
            "import warnings\nwarnings.warn(\n    \"deprecated\",\n    DeprecationWarning,\n)\n"
        )
        .is_some());
        assert!(
            code("from .base import (\n    Signal,\n)\n__all__ = [\n    \"Signal\",\n]\n")
                .is_some()
        );
        assert!(code("from typing import Any, Callable, Tuple\nParseFloat = Callable[[str], Any]\nKey = Tuple[str, ...]\n").is_some());
        // Configuration assigns values, not calls: still not code.
        assert!(
            code("[package]\nname = \"x\"\nversion = \"1.0\"\nmembers = [\n  \"a\",\n]\n")
                .is_none()
        );
    }

    #[test]
    fn a_docstring_underline_is_no_fence() {
        let py = "\"\"\"\n    pygments.styles.vim\n    ~~~~~~~~~~~~~~~~~~~\n\n    A style.\n\"\"\"\nfrom pygments.style import Style\n\nclass VimStyle(Style):\n    pass\n";
        assert_eq!(code(py).expect("code").notable_items, ["class VimStyle"]);
    }

    #[test]
    fn shell_functions_are_symbols() {
        let sh = "usage() {\n  echo usage\n}\ndie () {\n  exit 1\n}\nsay() { echo \"$@\"; }\nloop() (\n  true\n)\ncleanup()\n{\n  rm -f x\n}\nfunction main {\n  usage\n}\n";
        assert_eq!(
            code(sh).expect("code").notable_items,
            [
                "function usage",
                "function die",
                "function say",
                "function loop",
                "function cleanup",
                "function main"
            ]
        );
        // A call alone on a line is no function head.
        let py = "import os\nmain()\nprint(os.sep)\n";
        assert!(code(py).expect("code").notable_items.is_empty());
    }

    #[test]
    fn documentation_quoting_code_is_not_code() {
        let pydoc = "Help on module pprint:\n\nNAME\n    pprint - Support to pretty-print lists.\n\nCLASSES\n    builtins.object\n        PrettyPrinter\n\n    class PrettyPrinter(builtins.object)\n     |  Methods defined here:\n     |  \n     |  __init__(self, indent=1, width=80)\n\nFUNCTIONS\n    isreadable(object)\n        Determine if saferepr(object) is readable by eval().\n\n    pformat(object, indent=1, width=80)\n        Format a Python object into a pretty-printed representation.\n";
        assert!(code(pydoc).is_none());
        let rst = "List objects in a bucket\n^^^^^^^^^^^^^^^^^^^^^^^^\n\nThe following example shows how to list the objects in a bucket.\n\n.. code-block:: python\n\n    import boto3\n\n    s3 = boto3.resource('s3')\n    for obj in s3.Bucket('b').objects.all():\n        print(obj.key)\n\nContents of ``job.scala``::\n\n    import com.amazonaws.services.glue.GlueContext\n    import com.amazonaws.services.glue.Job\n";
        assert!(code(rst).is_none());
        let readme = "This directory contains test cases that are known to leak references.\nThe idea is that you can import these modules while in the interpreter\nand call the leak function repeatedly.  This will only be helpful if\nthe interpreter was built in debug mode.  If the total ref count\ndoesn't increase, the bug has been fixed and the file should be removed\nfrom the repository.\n\ndef leak():\n    def inner_leak():\n        pass\n    inner_leak()\n\nOnce the leak is fixed, the test case should be moved into an appropriate\ntest (even if it was originally from the test suite).  This ensures the\nregression doesn't happen again.  And if it does, it should be easier\nto track down.\n";
        assert!(code(readme).is_none());
        // A module whose docstring is long is still code.
        let module = format!(
            "\"\"\"\n{}\"\"\"\nimport os\nimport sys\n\ndef main():\n    pass\n",
            "A long paragraph of documentation that wraps over many lines here\n".repeat(30)
        );
        assert!(code(&module).is_some());
    }

    #[test]
    fn diffs_and_markdown_are_not_code() {
        let diff = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n import os\n-def a():\n+def b():\n class X:\n";
        assert!(code(diff).is_none());
        let md = "# Usage\n\n```rust\nuse toolstub::x;\nfn main() {}\n```\n\nThat is all there is to it, really, and more.\n";
        assert!(code(md).is_none());
    }
}
