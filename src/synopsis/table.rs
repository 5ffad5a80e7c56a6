//! The `csv` and `tsv` kinds: a regular delimited table described by its
//! columns, its data-row count and its first data row.
//!
//! The design's rule (at least 2 non-blank rows, a header of at least 2
//! columns, the first 10 rows all as wide as the header) accepts English prose
//! and source code whose lines happen to hold the same number of commas. Two
//! plausibility checks over those first rows refuse them: prose puts a space
//! after every delimiter in long, many-word lines; code leaves brackets open
//! across cells; tab-indented code starts most lines with an empty cell.

use super::lines::{clip_line, collapse_whitespace, one_line};
use super::{Input, Kind, Synopsis};

/// The first data row is shown with at most this many characters.
const FIRST_ROW_SAMPLE_CHARS: usize = 180;
/// Rows (header included) that must all have the header's width.
const REGULAR_ROWS: usize = 10;
/// A column name is shown with at most this many characters.
const COLUMN_CHARS: usize = 60;

pub fn summarize_tsv(input: &Input<'_>) -> Option<Synopsis> {
    memchr::memchr(b'\t', input.text.as_bytes())?;
    summarize_table(input.text, b'\t', Kind::Tsv)
}

pub fn summarize_csv(input: &Input<'_>) -> Option<Synopsis> {
    memchr::memchr(b',', input.text.as_bytes())?;
    summarize_table(input.text, b',', Kind::Csv)
}

/// The most columns a table may have. A wider first row is not read into
/// cells: one 10 MB line of `a,a,a,...` made 5 million strings (280 MB)
/// only to be refused for having one row.
const MAX_COLUMNS: usize = 4096;

fn summarize_table(text: &str, delimiter: u8, kind: Kind) -> Option<Synopsis> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(delimiter)
        .from_reader(text.as_bytes());
    let mut record = csv::ByteRecord::new();
    let mut head: Vec<Vec<String>> = Vec::new();
    let mut rows = 0usize;
    while reader.read_byte_record(&mut record).ok()? {
        if record
            .iter()
            .all(|cell| cell.iter().all(u8::is_ascii_whitespace))
        {
            continue;
        }
        if head.len() < REGULAR_ROWS {
            let width = head.first().map_or(record.len(), Vec::len);
            if record.len() != width || !(2..=MAX_COLUMNS).contains(&width) {
                return None;
            }
            head.push(
                record
                    .iter()
                    .map(|cell| String::from_utf8_lossy(cell).into_owned())
                    .collect(),
            );
            // Everything that decides "table or not" is in the first rows:
            // refuse prose and code before reading the rest of the text.
            if head.len() == REGULAR_ROWS && !plausible_table(&head, delimiter) {
                return None;
            }
        }
        rows += 1;
    }
    let header = head.first()?;
    if rows < 2 || (head.len() < REGULAR_ROWS && !plausible_table(&head, delimiter)) {
        return None;
    }

    let columns: Vec<String> = header
        .iter()
        .enumerate()
        .map(|(i, cell)| match cell.trim() {
            "" => format!("column_{}", i + 1),
            name => one_line(name, COLUMN_CHARS),
        })
        .collect();
    let data_rows = rows - 1;
    let separator = if delimiter == b'\t' { "\t" } else { "," };
    let first_row = collapse_whitespace(&head[1].join(separator), FIRST_ROW_SAMPLE_CHARS);
    let name = kind.as_str().to_ascii_uppercase();

    let mut s = Synopsis::new(kind, &format!("{name} table output"));
    s.summary.push(format!(
        "{name} table with rows: {data_rows} and columns: {}.",
        columns.len()
    ));
    s.structure
        .push(clip_line(format!("columns: {}", columns.join(", "))));
    s.structure.push(format!("rows: {data_rows}"));
    s.structure
        .push(clip_line(format!("first row sample: {first_row}")));
    Some(s)
}

/// Refuses prose and code that merely look regular. `rows` are the first
/// non-blank rows, header included, all of one width.
fn plausible_table(rows: &[Vec<String>], delimiter: u8) -> bool {
    let n = rows.len();
    let majority = |count: usize| count * 2 >= n;

    let sentence_rows = rows.iter().filter(|row| reads_like_prose(row)).count();
    if majority(sentence_rows) {
        return false;
    }
    // A trace whose lines carry a process id (`   12345:<TAB>...`, as
    // `LD_DEBUG` writes them): a prefix, not a column.
    let traced = rows.iter().filter(|row| is_pid_prefix(&row[0])).count();
    if majority(traced) {
        return false;
    }
    // Indented lines (a man page's option list, `-a, --all`): text laid
    // out for reading, where a table's first cell starts at the margin.
    let indented = rows
        .iter()
        .filter(|row| row[0].starts_with("  ") || row[0].starts_with(" \t"))
        .count();
    if majority(indented) {
        return false;
    }
    // A list whose items hold commas (acknowledgements, changelog bullets).
    let list_items = rows.iter().filter(|row| is_list_item(&row[0])).count();
    if majority(list_items) {
        return false;
    }
    let unbalanced_rows = rows
        .iter()
        .filter(|row| row.iter().any(|cell| !brackets_balance(cell)))
        .count();
    if majority(unbalanced_rows) {
        return false;
    }
    if delimiter == b'\t' && rows[0][0].trim().is_empty() {
        // Tab-indented code: the "header" itself is an indented line.
        let indented = rows.iter().filter(|row| row[0].trim().is_empty()).count();
        if majority(indented) {
            return false;
        }
    }
    true
}

/// A row of prose. Long: at least eight words, and every cell after the
/// first starts with a space (as text after a comma does) or the row is
/// mostly words of a sentence (more than four words per cell on average).
/// Short: every cell after the first is a phrase after a comma and a space
/// (`Yes, that works for me`, `- Google LLC, for patches`); a table's cells
/// are values (`Ada, 99`, `New York, United States`).
fn reads_like_prose(row: &[String]) -> bool {
    let words: usize = row.iter().map(|c| c.split_whitespace().count()).sum();
    let spaced = row[1..].iter().all(|c| c.starts_with(' '));
    if words >= 8 && (spaced || words > 4 * row.len()) {
        return true;
    }
    spaced && row[1..].iter().all(|c| is_phrase(c))
}

/// Words of a sentence rather than a value: two or more, one of them in
/// lower case.
fn is_phrase(cell: &str) -> bool {
    let mut words = 0;
    let mut lower = false;
    for word in cell.split_whitespace() {
        words += 1;
        lower |= word.starts_with(char::is_lowercase);
    }
    words >= 2 && lower
}

/// A process id ending a line's prefix: digits and a colon, padded or not.
fn is_pid_prefix(cell: &str) -> bool {
    cell.trim_start()
        .strip_suffix(':')
        .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
}

/// A Markdown or plain-text list item: `- x`, `* x`, `+ x`, `1. x`, `2) x`.
fn is_list_item(cell: &str) -> bool {
    let cell = cell.trim_start();
    if let Some(rest) = cell.strip_prefix(['-', '*', '+', '•']) {
        return rest.starts_with(' ');
    }
    let digits = cell.bytes().take_while(u8::is_ascii_digit).count();
    digits > 0 && (cell[digits..].starts_with(". ") || cell[digits..].starts_with(") "))
}

/// Whether (), [] and {} balance within one cell. Quoted CSV cells may hold
/// anything, but real tables rarely leave a bracket open in most rows.
fn brackets_balance(cell: &str) -> bool {
    let mut depth = [0i32; 3];
    for b in cell.bytes() {
        match b {
            b'(' => depth[0] += 1,
            b')' => depth[0] -= 1,
            b'[' => depth[1] += 1,
            b']' => depth[1] -= 1,
            b'{' => depth[2] += 1,
            b'}' => depth[2] -= 1,
            _ => {}
        }
    }
    depth == [0, 0, 0]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csv(text: &str) -> Option<Synopsis> {
        summarize_csv(&Input::new(text, "", 100))
    }

    #[test]
    fn regular_table() {
        let s = csv("name,score\nAda,99\n\nLin,98\n").expect("csv");
        assert_eq!(
            s.structure,
            [
                "columns: name, score",
                "rows: 2",
                "first row sample: Ada,99"
            ]
        );
    }

    #[test]
    fn empty_header_cells_are_named() {
        let s = csv(",b\n1,2\n").expect("csv");
        assert_eq!(s.structure[0], "columns: column_1, b");
    }

    #[test]
    fn rows_wider_than_the_column_cap_are_not_a_table() {
        let row = |n: usize| {
            (0..n)
                .map(|i| format!("c{i}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        let table = |n: usize| format!("{}\n{}\n{}\n", row(n), row(n), row(n));
        assert!(csv(&table(MAX_COLUMNS)).is_some());
        assert!(csv(&table(MAX_COLUMNS + 1)).is_none());
    }

    #[test]
    fn irregular_rows_are_not_a_table() {
        assert!(csv("a,b\n1,2,3\n").is_none());
        assert!(csv("a,b\n").is_none());
        assert!(csv("a\n1\n").is_none());
    }

    #[test]
    fn prose_with_even_commas_is_not_a_table() {
        let prose = "Well, I think the weather will change by the evening, or so they say.\n\
                     Still, nobody in the village believed the old forecast, not even the baker.\n";
        assert!(csv(prose).is_none());
    }

    #[test]
    fn short_lines_with_a_comma_are_not_a_table() {
        let prose = "Yes, that works for me\nThanks, see you soon\nWell, I do not know\n";
        assert!(csv(prose).is_none());
        let options = "       -a, --all\n       -A, --almost-all\n       -b, --escape\n";
        assert!(csv(options).is_none());
        let list = "- Anand Kumria, for patches\n- Sjoerd Simons, for patches\n- Trent Lloyd, for migrating to GitHub\n";
        assert!(csv(list).is_none());
        // Values after a comma and a space are still a table.
        let spaced = "city, country\nNew York, United States\nParis, France\n";
        assert_eq!(csv(spaced).expect("csv").structure[1], "rows: 2");
    }

    #[test]
    fn a_trace_with_pid_prefixes_is_not_a_table() {
        let trace = "     11839:\tfind library=libc.so.6 [0]; searching\n     11839:\t search cache=/etc/ld.so.cache\n     11840:\t  trying file=/lib/libc.so.6\n";
        assert!(summarize_tsv(&Input::new(trace, "", 100)).is_none());
    }

    #[test]
    fn code_with_even_commas_is_not_a_table() {
        let code = "let x = foo(a, b);\nlet y = bar(c, d);\nlet z = baz(e, f);\n";
        assert!(csv(code).is_none());
    }
}
