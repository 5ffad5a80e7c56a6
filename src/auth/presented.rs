//! The client key a request presents, and taking it off before the request
//! goes upstream.
//!
//! A client presents its key as `x-toolstub-key: KEY`, beside its own
//! provider credential (Claude Code's `ANTHROPIC_CUSTOM_HEADERS`), or in
//! the place of one: `Authorization: Bearer KEY`, `x-api-key: KEY`,
//! `api-key: KEY`, `x-goog-api-key: KEY` or the Gemini API's `?key=KEY`,
//! which is what a client configured with only an API key can send (the
//! virtual keys of gateways). A value in one of those places is a client
//! key when it has a key's form ([`super::key::looks_like_key`]); no
//! provider issues keys of that form. Every client key is taken off the
//! request before it goes anywhere: a key never leaves the proxy.

use super::key::{looks_like_key, KeyHash};
use http::header::{HeaderName, HeaderValue, AUTHORIZATION};
use http::HeaderMap;

/// The header a client key may come in beside a provider's credential.
pub const KEY_HEADER: HeaderName = HeaderName::from_static("x-toolstub-key");

/// The headers that carry a provider's API key as their whole value.
const API_KEY_HEADERS: [HeaderName; 3] = [
    HeaderName::from_static("x-api-key"),
    HeaderName::from_static("api-key"),
    HeaderName::from_static("x-goog-api-key"),
];

/// What a request presents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presented {
    /// No client key.
    Nothing,
    /// A key's hash, to look up.
    Key(KeyHash),
    /// An `x-toolstub-key` that cannot be a key: refused as a wrong key is.
    Malformed,
}

/// The client key `headers` (and the query) present: `x-toolstub-key`
/// first, else one in a provider credential's place.
pub fn presented(headers: &HeaderMap, query: Option<&str>) -> Presented {
    if let Some(value) = headers.get(KEY_HEADER) {
        return match value.to_str().map(str::trim) {
            Ok(key) if looks_like_key(key) => Presented::Key(KeyHash::of(key)),
            _ => Presented::Malformed,
        };
    }
    match in_place(headers).or_else(|| query.and_then(in_query)) {
        Some(key) => Presented::Key(KeyHash::of(key)),
        None => Presented::Nothing,
    }
}

/// A key in a provider credential's header (any of its values).
fn in_place(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get_all(AUTHORIZATION)
        .iter()
        .find_map(|v| bearer_key(v.to_str().ok()?));
    bearer.or_else(|| {
        API_KEY_HEADERS.iter().find_map(|name| {
            headers.get_all(name).iter().find_map(|v| {
                let value = v.to_str().ok()?.trim();
                looks_like_key(value).then_some(value)
            })
        })
    })
}

/// The key of an `Authorization: Bearer KEY` value.
fn bearer_key(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && looks_like_key(token)).then_some(token)
}

/// A key in one of the query's `key` parameters (the Gemini API's).
fn in_query(query: &str) -> Option<&str> {
    query
        .split('&')
        .filter_map(|pair| pair.strip_prefix("key="))
        .find(|k| looks_like_key(k))
}

/// Takes every client key off `headers`: `x-toolstub-key`, and each value
/// of a provider credential header that is a key (a header given twice
/// included). Other credentials stay, to go upstream as the client sent
/// them.
pub fn take_off(headers: &mut HeaderMap) {
    headers.remove(KEY_HEADER);
    let names = std::iter::once(AUTHORIZATION).chain(API_KEY_HEADERS);
    for name in names {
        let is_key = |v: &HeaderValue| {
            v.to_str().is_ok_and(|v| {
                bearer_key(v).is_some() || name != AUTHORIZATION && looks_like_key(v.trim())
            })
        };
        if !headers.get_all(&name).iter().any(is_key) {
            continue;
        }
        let kept: Vec<HeaderValue> = headers
            .get_all(&name)
            .iter()
            .filter(|v| !is_key(v))
            .cloned()
            .collect();
        headers.remove(&name);
        for value in kept {
            headers.append(name.clone(), value);
        }
    }
}

/// The query without the `key` parameters that hold a client key; `None`
/// when there is none to take off.
pub fn query_without_key(query: &str) -> Option<String> {
    in_query(query)?;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| !pair.strip_prefix("key=").is_some_and(looks_like_key))
        .collect();
    Some(kept.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(c: char) -> String {
        format!("tsk_{}", c.to_string().repeat(43))
    }

    fn with(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).expect("name"),
                v.parse().expect("value"),
            );
        }
        h
    }

    #[test]
    fn a_key_is_found_beside_or_in_place_of_a_credential() {
        let (a, b) = (key('a'), key('b'));
        let of = |k: &str| Presented::Key(KeyHash::of(k));
        let query = format!("alt=sse&key={a}");
        let cases: Vec<(HeaderMap, Option<&str>, Presented)> = vec![
            (with(&[("x-toolstub-key", &a)]), None, of(&a)),
            (
                with(&[("x-toolstub-key", &a), ("x-api-key", "sk-ant-own")]),
                None,
                of(&a),
            ),
            (
                with(&[
                    ("x-toolstub-key", &a),
                    ("authorization", &format!("Bearer {b}")),
                ]),
                None,
                of(&a),
            ),
            (
                with(&[("authorization", &format!("bearer {a}"))]),
                None,
                of(&a),
            ),
            (with(&[("x-api-key", &a)]), None, of(&a)),
            (with(&[("x-goog-api-key", &a)]), None, of(&a)),
            (with(&[("api-key", &a)]), None, of(&a)),
            (with(&[]), Some(&query), of(&a)),
            (
                with(&[("x-api-key", "sk-ant-own")]),
                None,
                Presented::Nothing,
            ),
            (
                with(&[("authorization", "Bearer sk-own")]),
                None,
                Presented::Nothing,
            ),
            (with(&[]), Some("key=AIza-own"), Presented::Nothing),
            (
                with(&[("x-toolstub-key", "guess")]),
                None,
                Presented::Malformed,
            ),
            (with(&[]), None, Presented::Nothing),
        ];
        for (i, (headers, query, want)) in cases.into_iter().enumerate() {
            assert_eq!(presented(&headers, query), want, "case {i}");
        }
    }

    #[test]
    fn only_keys_are_taken_off() {
        let a = key('a');
        let mut h = with(&[
            ("x-toolstub-key", &a),
            ("authorization", &format!("Bearer {a}")),
            ("x-api-key", "sk-ant-own"),
            ("x-goog-api-key", &a),
            ("anthropic-version", "2023-06-01"),
        ]);
        take_off(&mut h);
        assert_eq!(h.len(), 2, "{h:?}");
        assert_eq!(h["x-api-key"], "sk-ant-own");
        assert!(h.contains_key("anthropic-version"));
        let mut twice = with(&[
            ("authorization", "Bearer sk-own"),
            ("authorization", &format!("Bearer {a}")),
            ("x-api-key", "sk-ant-own"),
            ("x-api-key", &a),
        ]);
        assert_eq!(presented(&twice, None), Presented::Key(KeyHash::of(&a)));
        take_off(&mut twice);
        assert_eq!(
            format!("{twice:?}"),
            format!(
                "{:?}",
                with(&[
                    ("authorization", "Bearer sk-own"),
                    ("x-api-key", "sk-ant-own")
                ])
            ),
            "a key given as a second value comes off too"
        );
        assert_eq!(
            query_without_key(&format!("key=AIza-own&key={a}")).as_deref(),
            Some("key=AIza-own")
        );
        let mut own = with(&[("authorization", "Bearer sk-own")]);
        take_off(&mut own);
        assert_eq!(own["authorization"], "Bearer sk-own");
        assert_eq!(
            query_without_key(&format!("alt=sse&key={a}&x=1")).as_deref(),
            Some("alt=sse&x=1")
        );
        assert_eq!(query_without_key("alt=sse&key=AIza-own"), None);
    }
}
