//! Content addressing: the SHA-256 of an output's text and the `ref` the model
//! uses to recall it.
//!
//! A ref is a pure function of the tool call id and the content, so
//! externalizing the same output twice yields the same ref (idempotence) and
//! the same stub bytes (prompt-cache stability).

use sha2::{Digest, Sha256};

/// Hex digits of the digest shown in a stub and appended to a ref.
pub const SHA_PREFIX_HEX: usize = 16;
/// Hex digits of the digest forming a ref when there is no tool call id.
pub const BARE_REF_HEX: usize = 24;
/// A safe call id is cut to this many characters.
pub const CALL_ID_CHARS: usize = 96;

/// The lowercase hex SHA-256 of the UTF-8 text.
pub fn sha256_hex(text: &str) -> String {
    hex(&sha256(text.as_bytes()))
}

/// The SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// `bytes` in lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    let mut hex = String::with_capacity(bytes.len() * 2);
    push_hex(&mut hex, bytes);
    hex
}

/// Appends `bytes` in lowercase hex to `out`.
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    for &byte in bytes {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `tr_` + safe call id + `_` + 16 hex digits, or `tr_` + 24 hex digits
/// without a call id. `sha_hex` is the full hex digest.
pub fn result_ref(tool_call_id: Option<&str>, sha_hex: &str) -> String {
    match tool_call_id {
        Some(id) => format!(
            "tr_{}_{}",
            safe_call_id(id),
            prefix(sha_hex, SHA_PREFIX_HEX)
        ),
        None => format!("tr_{}", prefix(sha_hex, BARE_REF_HEX)),
    }
}

fn prefix(s: &str, n: usize) -> &str {
    s.get(..n).unwrap_or(s)
}

/// Each run of characters outside `[A-Za-z0-9_-]` becomes `_`; leading and
/// trailing `_`/`-` are trimmed; at most 96 characters; `tool` if empty.
pub fn safe_call_id(id: &str) -> String {
    let mut out = String::with_capacity(id.len().min(CALL_ID_CHARS * 2));
    let mut in_run = false;
    for c in id.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('_');
            in_run = true;
        }
    }
    let trimmed = out.trim_matches(['_', '-']);
    let cut = trimmed.get(..CALL_ID_CHARS).unwrap_or(trimmed);
    let cut = cut.trim_end_matches(['_', '-']);
    if cut.is_empty() {
        "tool".to_string()
    } else {
        cut.to_string()
    }
}

/// Whether `s` has the shape of a ref this module builds (used to refuse
/// anything else before it reaches a query).
pub fn looks_like_ref(s: &str) -> bool {
    s.len() <= 3 + CALL_ID_CHARS + 1 + SHA_PREFIX_HEX
        && s.strip_prefix("tr_").is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha_is_the_standard_digest() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn refs_follow_the_spec() {
        let sha = sha256_hex("abc");
        assert_eq!(
            result_ref(Some("call_abc123"), &sha),
            "tr_call_abc123_ba7816bf8f01cfea"
        );
        assert_eq!(result_ref(None, &sha), "tr_ba7816bf8f01cfea414140de");
        assert_eq!(safe_call_id("--a b//c__"), "a_b_c");
        assert_eq!(safe_call_id("ééé"), "tool");
        assert_eq!(safe_call_id(&"x".repeat(200)).len(), 96);
        assert!(looks_like_ref(&result_ref(Some("call 1"), &sha)));
        assert!(!looks_like_ref("tr_x'; DROP TABLE"));
    }
}
