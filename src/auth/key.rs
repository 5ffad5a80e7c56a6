//! Client keys: `tsk_` and 43 characters of base64url, 256 random bits
//! from the operating system. A key is shown once, when it is made; the
//! store keeps only its SHA-256 ([`KeyHash`]), which is all a check needs:
//! a key of 256 random bits cannot be found from its hash, so no slow,
//! salted hash is needed (as for a password), and a check is one hash and
//! one lookup.

use crate::store::Tenant;

/// Every client key starts with this, so that a key sent in place of a
/// provider's credential is told from one at a glance.
pub const PREFIX: &str = "tsk_";
/// Characters after the prefix: 32 bytes in base64url without padding.
const BODY_CHARS: usize = 43;
/// A key's length.
pub const KEY_CHARS: usize = PREFIX.len() + BODY_CHARS;

/// A new key: the secret, shown once, and the hash the store keeps.
pub struct ClientKey {
    pub secret: String,
    pub hash: KeyHash,
}

impl std::fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientKey")
            .field("secret", &"<redacted>")
            .field("hash", &self.hash)
            .finish()
    }
}

impl ClientKey {
    /// A new key from the operating system's random source.
    pub fn generate() -> Result<ClientKey, getrandom::Error> {
        let secret = format!("{PREFIX}{}", super::random_secret()?);
        let hash = KeyHash::of(&secret);
        Ok(ClientKey { secret, hash })
    }
}

/// The SHA-256 of a key: what the store keeps and a check looks up.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyHash(pub [u8; 32]);

impl std::fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyHash({})", self.hex())
    }
}

impl KeyHash {
    pub fn of(secret: &str) -> KeyHash {
        KeyHash(crate::refs::sha256(secret.as_bytes()))
    }

    /// 64 lowercase hex digits, as the store keeps it.
    pub fn hex(&self) -> String {
        crate::refs::hex(&self.0)
    }

    /// The hash a store row holds, back from its hex form.
    pub fn from_hex(hex: &str) -> Option<KeyHash> {
        if hex.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(KeyHash(out))
    }

    /// The tenant of requests this key authenticates: `k-` and the first
    /// 16 hex digits of the hash (a form no credential's hash takes).
    pub fn tenant(&self) -> Tenant {
        Tenant::named(format!("k-{}", crate::refs::hex(&self.0[..8])))
    }
}

/// Whether `value` has a client key's form (it may still be unknown or
/// revoked): the prefix, then 43 base64url characters.
pub fn looks_like_key(value: &str) -> bool {
    value.len() == KEY_CHARS
        && value.starts_with(PREFIX)
        && value.as_bytes()[PREFIX.len()..]
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
}

/// A key's name: what `toolstub keys` lists and revokes it by.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_has_its_form_and_only_its_hash_names_its_tenant() {
        let a = ClientKey::generate().expect("random");
        let b = ClientKey::generate().expect("random");
        assert_ne!(a.secret, b.secret);
        assert!(looks_like_key(&a.secret), "{}", a.secret);
        assert_eq!(a.secret.len(), KEY_CHARS);
        assert_eq!(KeyHash::of(&a.secret), a.hash);
        assert_eq!(KeyHash::from_hex(&a.hash.hex()), Some(a.hash));
        assert_ne!(a.hash.tenant(), b.hash.tenant());
        let tenant = a.hash.tenant();
        assert!(tenant.as_str().starts_with("k-") && tenant.as_str().len() == 18);
        // No credential's hash takes a key's tenant's form.
        assert_ne!(Tenant::from_credential(&a.secret), tenant);
        assert!(!format!("{a:?}").contains(&a.secret), "never printed");
    }

    #[test]
    fn only_the_keys_form_looks_like_a_key() {
        let body = "A".repeat(BODY_CHARS);
        assert!(looks_like_key(&format!("tsk_{body}")));
        assert!(!looks_like_key(&format!("tsk_{}", &body[1..])));
        assert!(!looks_like_key(&format!("tsk_{body}A")));
        assert!(!looks_like_key(&format!("sk-_{body}")));
        assert!(!looks_like_key(&format!("tsk_{}=", &body[1..])));
        assert!(!looks_like_key(""));
        assert_eq!(KeyHash::from_hex("zz"), None);
        assert_eq!(KeyHash::from_hex(&"g".repeat(64)), None);
    }

    #[test]
    fn names_are_plain() {
        assert!(valid_name("alice"));
        assert!(valid_name("ci-bot_2.prod@team"));
        assert!(!valid_name(""));
        assert!(!valid_name("a b"));
        assert!(!valid_name(&"a".repeat(65)));
    }
}
