//! Percent-decoding of URL parts (RFC 3986 `%XX`), shared by the operator
//! API's query strings, Bedrock's model ids in paths and the check of a
//! SigV4 signature's canonical query.

/// `s` with every `%XX` decoded (and `+` as a space when `plus_is_space`,
/// as in a form-encoded query); `None` on a malformed escape or when the
/// bytes are not UTF-8.
pub fn decode(s: &str, plus_is_space: bool) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'%' => {
                let hex = |j: usize| bytes.get(j).and_then(|&c| char::from(c).to_digit(16));
                let (hi, lo) = (hex(i + 1)?, hex(i + 2)?);
                // Two hex digits: at most 0xff.
                out.push(u8::try_from(hi * 16 + lo).unwrap_or(u8::MAX));
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
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
