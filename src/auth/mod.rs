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

pub use key::{ClientKey, KeyHash};
