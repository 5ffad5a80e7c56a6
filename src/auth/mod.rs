//! Who a caller is: client keys (the proxy's own credentials for its
//! clients), and the tenants that only a secret can name.
//!
//! A tenant must come from a secret the caller proves it holds: a client
//! key the store knows, a provider credential (whose hash names its
//! tenant: only its holder can present it), or a SigV4 signature checked
//! against the secret key that made it. Each kind of tenant has its own
//! form, so that no credential's hash can name a key's tenant, nor the
//! reverse: a key's tenant is `k-` and 16 hex digits, a verified AWS
//! identity's `aws-` and 16 hex digits, a provider credential's 16 hex
//! digits, and a request with none is `anonymous`.

pub mod key;
pub mod local;

pub use key::{ClientKey, KeyHash};

pub mod presented;

/// 256 random bits from the operating system, in base64url (43
/// characters): a secret no one can guess (`toolstub wrap`'s run secret).
pub fn random_secret() -> Result<String, getrandom::Error> {
    use base64::Engine;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// Whether `given` is `expected`, in time that does not depend on where
/// they differ (a secret checked byte by byte would tell a guesser how
/// many leading bytes were right). Both are hashed first, so neither
/// length shows either.
pub fn same_secret(given: &str, expected: &str) -> bool {
    use subtle::ConstantTimeEq;
    let (a, b) = (
        crate::refs::sha256(given.as_bytes()),
        crate::refs::sha256(expected.as_bytes()),
    );
    !expected.is_empty() && bool::from(a.ct_eq(&b))
}
