//! Percent-decoding of URL parts (RFC 3986 `%XX`), shared by the operator
//! API's query strings, Bedrock's model ids in paths and the check of a
//! SigV4 signature's canonical query.

/// `s` with every `%XX` decoded (and `+` as a space when `plus_is_space`,
/// as in a form-encoded query); `None` on a malformed escape (a `%` not
/// followed by two hex digits, which the crate would keep as it is: a
/// query or path with one is refused rather than read another way) or
/// when the bytes are not UTF-8.
pub fn decode(s: &str, plus_is_space: bool) -> Option<String> {
    let bytes = s.as_bytes();
    let malformed = bytes.iter().enumerate().any(|(i, &b)| {
        b == b'%'
            && !bytes
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    if malformed {
        return None;
    }
    let spaced;
    let s = if plus_is_space {
        spaced = s.replace('+', " ");
        spaced.as_str()
    } else {
        s
    };
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .ok()
        .map(|d| d.into_owned())
}

#[cfg(test)]
mod tests {
    #[test]
    fn escapes_decode_and_malformed_ones_do_not() {
        assert_eq!(super::decode("v1%3A0", false).as_deref(), Some("v1:0"));
        assert_eq!(super::decode("a+b%20c", true).as_deref(), Some("a b c"));
        assert_eq!(super::decode("a+b", false).as_deref(), Some("a+b"));
        assert_eq!(super::decode("bad%2", false), None);
        assert_eq!(super::decode("%ff", false), None, "not UTF-8");
    }
}
