//! Per-tool policy: rules matched by tool-name pattern that give a tool a
//! threshold of its own, keep it out of the conversation budget, keep its
//! outputs inline, or give a MIME hint (`[[externalization.tools]]`).
//!
//! Resolution is ssh_config's: each setting comes from the first rule, in
//! the configured order, that matches the tool's name and sets it; a
//! setting no matching rule sets keeps its global value. So a narrow rule
//! placed before a broad one overrides it for the settings it names and
//! inherits the others.
//!
//! Patterns are tiny globs: `*` matches any run of characters (none
//! included), `?` exactly one, everything else itself, case-sensitively.
//! `[`, `]`, `{`, `}` and `\` are refused rather than read literally, so a
//! pattern written for a richer glob dialect fails at start-up instead of
//! silently matching nothing.
//!
//! Architecture invariant: pure; a resolution depends only on the rules and
//! the name (no hash-map order: the rules are a `Vec` in configured order).

use std::fmt;

/// One element of a pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    Char(char),
    /// `?`
    One,
    /// `*`
    Any,
}

/// A tool-name pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glob {
    source: String,
    tokens: Vec<Token>,
}

/// Why a pattern was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobError(String);

impl fmt::Display for GlobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GlobError {}

impl Glob {
    /// Parses a pattern (`*` and `?` are wildcards).
    pub fn new(pattern: &str) -> Result<Glob, GlobError> {
        if pattern.is_empty() {
            return Err(GlobError("the pattern is empty".to_string()));
        }
        if pattern.trim() != pattern {
            return Err(GlobError(format!(
                "{pattern:?} begins or ends with whitespace"
            )));
        }
        let mut tokens = Vec::with_capacity(pattern.len());
        for c in pattern.chars() {
            let token = match c {
                '*' => Token::Any,
                '?' => Token::One,
                '[' | ']' | '{' | '}' | '\\' => {
                    return Err(GlobError(format!(
                        "{pattern:?}: {c:?} is not supported (only * and ? are wildcards; write one rule per alternative)"
                    )))
                }
                c if c.is_control() => {
                    return Err(GlobError(format!(
                        "{pattern:?} holds a control character"
                    )))
                }
                c => Token::Char(c),
            };
            // `**` is `*`.
            if token == Token::Any && tokens.last() == Some(&Token::Any) {
                continue;
            }
            tokens.push(token);
        }
        Ok(Glob {
            source: pattern.to_string(),
            tokens,
        })
    }

    /// A pattern matching exactly `name` (no wildcards).
    pub fn literal(name: &str) -> Glob {
        Glob {
            source: name.to_string(),
            tokens: name.chars().map(Token::Char).collect(),
        }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether `name` matches the whole pattern. Each star backtracks at
    /// most once per character of the name (the classic rule: on a
    /// mismatch, let the last star swallow one more character), so a
    /// hostile name of any length costs at most (name x pattern) steps, and
    /// nothing is allocated.
    pub fn matches(&self, name: &str) -> bool {
        // `p` indexes the tokens, `n` the name's bytes (always at a
        // character boundary).
        let (mut p, mut n) = (0, 0);
        // The last star seen and where in the name it started matching.
        let mut star: Option<(usize, usize)> = None;
        while let Some(c) = name[n..].chars().next() {
            match self.tokens.get(p) {
                Some(Token::Any) => {
                    star = Some((p, n));
                    p += 1;
                }
                Some(Token::One) => {
                    p += 1;
                    n += c.len_utf8();
                }
                Some(Token::Char(t)) if *t == c => {
                    p += 1;
                    n += c.len_utf8();
                }
                _ => match star {
                    Some((sp, sn)) => {
                        let swallowed = name[sn..].chars().next().map_or(1, char::len_utf8);
                        p = sp + 1;
                        n = sn + swallowed;
                        star = Some((sp, n));
                    }
                    None => return false,
                },
            }
        }
        self.tokens[p..].iter().all(|t| *t == Token::Any)
    }
}

/// Whether a tool's outputs may be externalized.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Externalize {
    /// By the thresholds and budgets (the default).
    #[default]
    Auto,
    /// Never: the tool's outputs always stay inline (they still count
    /// toward the turn and conversation budgets, as any inline output).
    Never,
}

/// One rule: a pattern and the settings it overrides (`None`: not set).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolRule {
    pub pattern: Glob,
    pub threshold_chars: Option<usize>,
    /// Whether the tool's outputs fall under the conversation budget.
    pub conversation_budget: Option<bool>,
    pub externalize: Option<Externalize>,
    pub mime: Option<String>,
}

/// The rules, in configured order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolRules(pub Vec<ToolRule>);

/// What the rules say of one tool, with the global values filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolPolicy {
    pub threshold_chars: usize,
    /// Whether the conversation budget applies (true unless a rule says not).
    pub conversation_budget: bool,
    pub externalize: Externalize,
    pub mime: Option<String>,
}

impl ToolRules {
    /// Resolves the settings for a tool. An output whose tool name is
    /// unknown is matched as the empty name (only patterns such as `*`
    /// match it). `threshold_chars` is the global value a rule may override.
    pub fn resolve(&self, name: Option<&str>, threshold_chars: usize) -> ToolPolicy {
        let mut resolved = ToolPolicy {
            threshold_chars,
            conversation_budget: true,
            externalize: Externalize::Auto,
            mime: None,
        };
        if self.0.is_empty() {
            return resolved;
        }
        let name = name.unwrap_or("");
        let (mut threshold, mut conversation, mut externalize, mut mime) = (None, None, None, None);
        for rule in self.0.iter().filter(|r| r.pattern.matches(name)) {
            threshold = threshold.or(rule.threshold_chars);
            conversation = conversation.or(rule.conversation_budget);
            externalize = externalize.or(rule.externalize);
            if mime.is_none() {
                mime.clone_from(&rule.mime);
            }
        }
        resolved.threshold_chars = threshold.unwrap_or(threshold_chars);
        resolved.conversation_budget = conversation.unwrap_or(true);
        resolved.externalize = externalize.unwrap_or_default();
        resolved.mime = mime;
        resolved
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(p: &str) -> Glob {
        Glob::new(p).expect("valid pattern")
    }

    #[test]
    fn stars_and_question_marks_match_as_in_a_shell() {
        let cases: &[(&str, &str, bool)] = &[
            ("Read", "Read", true),
            ("Read", "read", false),
            ("Read", "ReadX", false),
            ("Read", "Rea", false),
            ("mcp__github__*", "mcp__github__get_file", true),
            ("mcp__github__*", "mcp__github__", true),
            ("mcp__github__*", "mcp__gitlab__get_file", false),
            ("*", "", true),
            ("*", "anything at all", true),
            ("?", "", false),
            ("?", "é", true),
            ("a?c", "aéc", true),
            ("*é", "xxé", true),
            ("é*ß", "éaaß", true),
            ("é*ß", "éaaßx", false),
            ("?", "ab", false),
            ("*_file", "read_file", true),
            ("*_file", "read_file_2", false),
            ("a*b*c", "abc", true),
            ("a*b*c", "aXbYbZc", true),
            ("a*b*c", "aXbYbZ", false),
            ("a*b?c", "abbbxc", true),
            ("a**b", "ab", true),
            ("*a*a*a*a*b", &"a".repeat(200), false),
            ("mcp__*__search", "mcp__docs__search", true),
            ("mcp__*__search", "mcp__docs__search_all", false),
        ];
        for (pattern, name, expected) in cases {
            assert_eq!(glob(pattern).matches(name), *expected, "{pattern} ~ {name}");
        }
    }

    /// The obvious exponential matcher, as the reference.
    fn naive(p: &[char], n: &[char]) -> bool {
        match p.split_first() {
            None => n.is_empty(),
            Some(('*', rest)) => (0..=n.len()).any(|k| naive(rest, &n[k..])),
            Some(('?', rest)) => !n.is_empty() && naive(rest, &n[1..]),
            Some((c, rest)) => n.first() == Some(c) && naive(rest, &n[1..]),
        }
    }

    proptest::proptest! {
        #[test]
        fn matching_agrees_with_the_obvious_definition(
            pattern in "[ab*?é]{1,8}",
            name in "[abé]{0,10}",
        ) {
            let p: Vec<char> = pattern.chars().collect();
            let n: Vec<char> = name.chars().collect();
            proptest::prop_assert_eq!(glob(&pattern).matches(&name), naive(&p, &n));
        }
    }

    #[test]
    fn a_literal_pattern_has_no_wildcards() {
        let g = Glob::literal("we*ird?");
        assert!(g.matches("we*ird?"));
        assert!(!g.matches("weXirdY"));
        assert_eq!(g.as_str(), "we*ird?");
    }

    #[test]
    fn unsupported_patterns_are_refused_with_a_reason() {
        for (pattern, says) in [
            ("", "empty"),
            (" Read", "whitespace"),
            ("Read ", "whitespace"),
            ("mcp__[ab]*", "'['"),
            ("{Read,Bash}", "'{'"),
            ("Read\\*", "'\\\\'"),
            ("Re\u{7}ad", "control"),
        ] {
            let err = Glob::new(pattern).expect_err(pattern).to_string();
            assert!(err.contains(says), "{pattern:?}: {err}");
        }
    }

    fn rule(pattern: &str) -> ToolRule {
        ToolRule {
            pattern: glob(pattern),
            threshold_chars: None,
            conversation_budget: None,
            externalize: None,
            mime: None,
        }
    }

    #[test]
    fn each_setting_comes_from_the_first_matching_rule_that_sets_it() {
        let rules = ToolRules(vec![
            ToolRule {
                externalize: Some(Externalize::Auto),
                ..rule("mcp__github__get_file")
            },
            ToolRule {
                externalize: Some(Externalize::Never),
                mime: Some("application/json".to_string()),
                ..rule("mcp__github__*")
            },
            ToolRule {
                threshold_chars: Some(5_000),
                mime: Some("text/plain".to_string()),
                ..rule("mcp__*")
            },
            ToolRule {
                conversation_budget: Some(false),
                ..rule("Read")
            },
        ]);
        let get_file = rules.resolve(Some("mcp__github__get_file"), 20_000);
        assert_eq!(
            get_file,
            ToolPolicy {
                threshold_chars: 5_000,
                conversation_budget: true,
                externalize: Externalize::Auto,
                mime: Some("application/json".to_string()),
            }
        );
        let search = rules.resolve(Some("mcp__github__search"), 20_000);
        assert_eq!(search.externalize, Externalize::Never);
        assert_eq!(search.mime.as_deref(), Some("application/json"));
        assert_eq!(search.threshold_chars, 5_000);
        let docs = rules.resolve(Some("mcp__docs__search"), 20_000);
        assert_eq!(docs.externalize, Externalize::Auto);
        assert_eq!(docs.mime.as_deref(), Some("text/plain"));
        let read = rules.resolve(Some("Read"), 20_000);
        assert!(!read.conversation_budget);
        assert_eq!(read.threshold_chars, 20_000);
        let unnamed = rules.resolve(None, 20_000);
        assert_eq!(unnamed, ToolRules::default().resolve(None, 20_000));
        let everything = ToolRules(vec![ToolRule {
            externalize: Some(Externalize::Never),
            ..rule("*")
        }]);
        assert_eq!(
            everything.resolve(None, 1).externalize,
            Externalize::Never,
            "an unknown tool is the empty name, which * matches"
        );
    }
}
