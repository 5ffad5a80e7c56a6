//! Python literals as `repr` writes them (some harnesses save a message's
//! `tool_calls` as `str(list)`): dicts, lists, tuples, strings in either
//! quote with their escapes, numbers, `True`, `False`, `None`. Read into
//! JSON values; anything else is `None`. Bounded: nesting deeper than
//! [`MAX_DEPTH`] is refused, never recursed into.

use serde_json::{Map, Number, Value};

/// The deepest nesting read.
pub const MAX_DEPTH: usize = 128;

/// The value `text` is the `repr` of, if it is one (surrounding blanks
/// allowed).
pub fn parse(text: &str) -> Option<Value> {
    let mut p = Parser {
        s: text.as_bytes(),
        text,
        at: 0,
    };
    let v = p.value(0)?;
    p.blanks();
    (p.at == p.s.len()).then_some(v)
}

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    at: usize,
}

impl Parser<'_> {
    fn blanks(&mut self) {
        while self.s.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        self.blanks();
        if self.s.get(self.at) == Some(&b) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Option<Value> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.blanks();
        match *self.s.get(self.at)? {
            b'{' => {
                self.at += 1;
                let mut map = Map::new();
                if self.eat(b'}') {
                    return Some(Value::Object(map));
                }
                loop {
                    let key = match self.value(depth + 1)? {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    if !self.eat(b':') {
                        return None;
                    }
                    let v = self.value(depth + 1)?;
                    map.insert(key, v);
                    if self.eat(b',') {
                        if self.eat(b'}') {
                            return Some(Value::Object(map));
                        }
                        continue;
                    }
                    return self.eat(b'}').then_some(Value::Object(map));
                }
            }
            open @ (b'[' | b'(') => {
                self.at += 1;
                let close = if open == b'[' { b']' } else { b')' };
                let mut items = Vec::new();
                if self.eat(close) {
                    return Some(Value::Array(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    if self.eat(b',') {
                        if self.eat(close) {
                            return Some(Value::Array(items));
                        }
                        continue;
                    }
                    return self.eat(close).then_some(Value::Array(items));
                }
            }
            b'\'' | b'"' => self.string().map(Value::String),
            _ => self.word(),
        }
    }

    /// A quoted string (no prefix), its escapes decoded.
    fn string(&mut self) -> Option<String> {
        let (value, end) = crate::synopsis::python_string(self.text.get(self.at..)?)?;
        self.at += end?;
        Some(value)
    }

    /// `True`, `False`, `None`, or a number.
    fn word(&mut self) -> Option<Value> {
        let start = self.at;
        while self
            .s
            .get(self.at)
            .is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.' | b'_'))
        {
            self.at += 1;
        }
        let word = self.text.get(start..self.at)?;
        match word {
            "True" => Some(Value::Bool(true)),
            "False" => Some(Value::Bool(false)),
            "None" => Some(Value::Null),
            _ => {
                let clean = word.replace('_', "");
                if let Ok(i) = clean.parse::<i64>() {
                    return Some(Value::Number(i.into()));
                }
                clean
                    .parse::<f64>()
                    .ok()
                    .and_then(Number::from_f64)
                    .map(Value::Number)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reprs_are_read_as_json() {
        let text = r#"[{'id': 'toolu_1', 'type': 'function', 'function': {'name': 'route', 'arguments': '{"query": "a\\nb"}'}}, ("x", 1, -2.5, True, None)]"#;
        assert_eq!(
            parse(text),
            Some(json!([
                {"id": "toolu_1", "type": "function",
                 "function": {"name": "route", "arguments": "{\"query\": \"a\\nb\"}"}},
                ["x", 1, -2.5, true, null]
            ]))
        );
        assert_eq!(parse(r#"'it\'s \x41\u00e9'"#), Some(json!("it's Aé")));
        assert_eq!(parse("[1, 2,]"), Some(json!([1, 2])));
        assert_eq!(parse("{}"), Some(json!({})));
    }

    #[test]
    fn what_is_not_a_repr_is_none() {
        for bad in [
            "", "[", "[1 2]", "{'a' 1}", "'open", "nan?", "[1] x", "{1: }", "'\\x4'",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        let deep = "[".repeat(MAX_DEPTH + 10) + &"]".repeat(MAX_DEPTH + 10);
        assert_eq!(parse(&deep), None);
    }
}
