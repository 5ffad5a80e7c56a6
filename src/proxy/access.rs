//! The gate every request passes first: who is calling, and may it use
//! this proxy at all.
//!
//! Three modes, decided per request:
//!
//! - **`toolstub wrap`'s run secret**: wrap's proxy serves only its child,
//!   whose base URLs start with `/run/<secret>` (256 random bits made for
//!   the run), or which sends the secret in `x-toolstub-run-secret` (Codex,
//!   whose base URL is in its arguments, which other users can read). A
//!   request without it is answered 404, whatever it asks; with it, the
//!   prefix or header is taken off and the request is the local case's.
//! - **Keys required** (`auth.required`, or by default when the proxy
//!   listens on a non-loopback address or any client key exists): every
//!   request but `/healthz`, the dashboard's fixed files and (with the
//!   admin token) `/metrics` must present an active client key, else 401
//!   in the API's own format and nothing goes upstream. The key's tenant
//!   is the request's.
//! - **The local case** (no key required): a request is served only from
//!   this machine and never from a web page of another origin
//!   ([`crate::auth::local`]); its tenant is its provider credential's,
//!   as it always was. A request that presents a key is the key's holder
//!   in every mode.
//!
//! Past the gate a caller is authenticated, so the proxy may lend it the
//! credentials it holds (its provider keys, AWS signing, a Google token):
//! each goes only to its provider's hosts ([`super::upstream`],
//! [`super::aws`], [`super::gcp`]). Every client key is taken off the
//! request here ([`crate::auth::presented`]); none goes upstream.
//!
//! Keys are looked up in memory ([`KeyRing`]): the active set is read from
//! the store when the proxy starts, again every second (so every replica
//! of a shared store learns of a key made or revoked within a second),
//! and at once when a key's form is presented that the ring does not
//! know (a key made a moment ago), one read at a time.

use super::error::ProxyError;
use super::Route;
use crate::auth::presented::{self, Presented};
use crate::auth::KeyHash;
use crate::config::{AuthConfig, Secret};
use crate::store::{AsyncResultStore, Tenant};
use http::Request;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

/// How often the ring is read again from the store.
const REFRESH: Duration = Duration::from_secs(1);
/// Reads on a miss start at most this often (a flood of made-up keys
/// costs the store 20 reads a second, one at a time).
const MISS_SPACING: Duration = Duration::from_millis(50);
/// The path prefix of wrap's run secret.
pub const RUN_PREFIX: &str = "/run/";
/// The header that may carry wrap's run secret instead, for a child whose
/// base URL stands where other users can read it (Codex's arguments).
pub const RUN_SECRET_HEADER: &str = "x-toolstub-run-secret";

/// Who a request comes from, once admitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Caller {
    /// The holder of a client key: the key's tenant.
    Key(Tenant),
    /// The local case (and wrap's child): the tenant is the provider
    /// credential's the client sent, or `anonymous`.
    Local,
}

/// What the gate knows of one connection.
#[derive(Clone, Copy, Debug)]
pub(super) struct Peer {
    /// The client's address.
    pub remote: SocketAddr,
    /// The address the client reached.
    pub local: SocketAddr,
}

/// The gate's settings and the key ring.
pub(super) struct Access {
    required: Option<bool>,
    /// `server.listen` is a loopback address.
    loopback: bool,
    hosts: Vec<String>,
    run_secret: Option<Secret>,
    pub(super) keys: Arc<KeyRing>,
}

/// How the proxy admits requests now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    RunSecret,
    KeysRequired,
    Local,
}

impl Access {
    pub(super) fn new(auth: &AuthConfig, listen: SocketAddr, store: AsyncResultStore) -> Access {
        Access {
            required: auth.required,
            loopback: listen.ip().to_canonical().is_loopback(),
            hosts: auth.hosts.clone(),
            run_secret: auth.run_secret.clone(),
            keys: KeyRing::new(store),
        }
    }

    /// The mode requests are admitted in now.
    pub(super) fn mode(&self) -> Mode {
        if self.run_secret.is_some() {
            Mode::RunSecret
        } else if self.keys_required() {
            Mode::KeysRequired
        } else {
            Mode::Local
        }
    }

    /// Takes wrap's run secret off the request's path (first, before the
    /// route is read from it); without it the request is answered 404.
    pub(super) fn enter<B>(&self, req: &mut Request<B>) -> Result<(), ProxyError> {
        match &self.run_secret {
            Some(secret) => strip_run_secret(secret, req),
            None => Ok(()),
        }
    }

    /// Says how requests are admitted (`serve`, at start).
    pub(super) fn announce(&self) {
        match (self.mode(), self.keys.count()) {
            (Mode::KeysRequired, Some(0)) => tracing::warn!(
                "client keys required (auth.required, or listening beyond loopback), and none exists: every request is refused until one is made with `toolstub keys create NAME`"
            ),
            (Mode::KeysRequired, Some(n)) => {
                tracing::info!(active_keys = n, "client keys required: a request without an active key is refused (401)")
            }
            (Mode::KeysRequired, None) => tracing::warn!(
                "client keys required, and they cannot be read from the store yet: requests are refused until they can"
            ),
            (Mode::Local, _) => tracing::info!(
                "no client key required: serving programs on this machine only (a loopback peer, a Host naming this proxy, never a web page of another origin); `toolstub keys create NAME` to share it"
            ),
            (Mode::RunSecret, _) => tracing::info!("serving one run's child only (its run secret)"),
        }
    }

    fn keys_required(&self) -> bool {
        self.required
            .unwrap_or_else(|| !self.loopback || self.keys.any())
    }

    /// Admits `req` (its run secret already taken off by [`Access::enter`])
    /// or says why not; every client key it presents is taken off its
    /// headers and query on the way in.
    pub(super) async fn admit<B>(
        &self,
        peer: &Peer,
        route: Route,
        admin_token_ok: impl FnOnce(&http::HeaderMap) -> bool,
        req: &mut Request<B>,
    ) -> Result<Caller, ProxyError> {
        let presented = presented::presented(req.headers(), req.uri().query());
        let caller = match presented {
            Presented::Key(hash) => Caller::Key(self.keys.tenant_of(hash).await?),
            Presented::Malformed => return Err(ProxyError::Unauthenticated(NO_KEY)),
            Presented::Nothing if self.run_secret.is_some() => Caller::Local,
            Presented::Nothing if self.keys_required() => {
                let open = matches!(route, Route::Healthz | Route::Dashboard)
                    || route == Route::Metrics && admin_token_ok(req.headers());
                if !open {
                    return Err(ProxyError::Unauthenticated(NO_KEY));
                }
                Caller::Local
            }
            Presented::Nothing => {
                if route != Route::Healthz {
                    crate::auth::local::admit(peer.remote, peer.local, req.headers(), &self.hosts)
                        .map_err(|why| ProxyError::Forbidden(why.message()))?;
                }
                Caller::Local
            }
        };
        if presented != Presented::Nothing {
            take_keys_off(req);
        }
        Ok(caller)
    }
}

/// Whether a request carries the admin token where one is set: as
/// `x-toolstub-admin-token`, or as a bearer token (what a metrics scraper
/// sends).
pub(super) fn admin_token_ok(expected: Option<&Secret>, headers: &http::HeaderMap) -> bool {
    let Some(expected) = expected else {
        return true;
    };
    let given = headers
        .get(ADMIN_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .or_else(|| {
            let auth = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
            let (scheme, token) = auth.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
    given.is_some_and(|given| crate::auth::same_secret(given, expected.expose()))
}

/// The request header carrying the admin token.
pub(super) const ADMIN_TOKEN_HEADER: &str = "x-toolstub-admin-token";

const NO_KEY: &str = "this toolstub requires a client key: send it as x-toolstub-key, or in place of the provider's API key (toolstub keys create NAME makes one)";

/// Takes `/run/<secret>` off the path (or the secret's header off the
/// request), or refuses the request (404, as if nothing were there: wrap's
/// proxy answers nothing else).
fn strip_run_secret<B>(secret: &Secret, req: &mut Request<B>) -> Result<(), ProxyError> {
    let nothing = || ProxyError::NotFound("not found".to_string());
    if let Some(given) = req.headers().get(RUN_SECRET_HEADER) {
        let right = given
            .to_str()
            .is_ok_and(|given| crate::auth::same_secret(given, secret.expose()));
        req.headers_mut().remove(RUN_SECRET_HEADER);
        if !right {
            return Err(nothing());
        }
        // Sent both ways, the path's secret is taken off (and checked) too.
        if !req.uri().path().starts_with(RUN_PREFIX) {
            return Ok(());
        }
    }
    let path = req.uri().path();
    let rest = path.strip_prefix(RUN_PREFIX).ok_or_else(nothing)?;
    let (given, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    if !crate::auth::same_secret(given, secret.expose()) {
        return Err(nothing());
    }
    // A client's SigV4 signature covers the path it sent.
    let sent = OriginalPath(path.to_string());
    let tail = if tail.is_empty() { "/" } else { tail };
    let path_and_query = match req.uri().query() {
        Some(q) => format!("{tail}?{q}"),
        None => tail.to_string(),
    };
    let uri = http::Uri::try_from(path_and_query).map_err(|_| nothing())?;
    *req.uri_mut() = uri;
    req.extensions_mut().insert(sent);
    Ok(())
}

/// The path a client sent, before wrap's run secret was taken off it.
#[derive(Clone, Debug)]
pub(super) struct OriginalPath(pub String);

/// Takes every client key off the request's headers and query.
fn take_keys_off<B>(req: &mut Request<B>) {
    presented::take_off(req.headers_mut());
    let without = req.uri().query().and_then(presented::query_without_key);
    if let Some(query) = without {
        let path = req.uri().path();
        let rebuilt = if query.is_empty() {
            path.to_string()
        } else {
            format!("{path}?{query}")
        };
        let mut parts = req.uri().clone().into_parts();
        if let Ok(pq) = http::uri::PathAndQuery::try_from(rebuilt) {
            parts.path_and_query = Some(pq);
            if let Ok(uri) = http::Uri::from_parts(parts) {
                *req.uri_mut() = uri;
            }
        }
    }
}

/// The active client keys, by hash, as last read from the store.
pub struct KeyRing {
    store: AsyncResultStore,
    ring: RwLock<Ring>,
    /// When the last read started; held while a read runs, so reads on a
    /// miss go one at a time.
    reading: tokio::sync::Mutex<Option<Instant>>,
}

#[derive(Default)]
struct Ring {
    by_hash: Arc<HashMap<KeyHash, Tenant>>,
    /// A read has succeeded: until then, whether keys exist is unknown.
    known: bool,
}

impl KeyRing {
    fn new(store: AsyncResultStore) -> Arc<KeyRing> {
        Arc::new(KeyRing {
            store,
            ring: RwLock::new(Ring::default()),
            reading: tokio::sync::Mutex::new(None),
        })
    }

    /// Reads the ring now, then every second in the background for as long
    /// as the ring lives.
    pub(super) async fn start(self: &Arc<KeyRing>) {
        self.read().await;
        let ring: Weak<KeyRing> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(REFRESH);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(ring) = ring.upgrade() else { break };
                ring.read().await;
            }
        });
    }

    /// Whether any key is known to be active. Until a read has succeeded
    /// (a store unreachable since the start) none is: a proxy on loopback
    /// then admits as in the local case, whose checks still hold, and one
    /// beyond loopback requires keys whatever this says.
    pub fn any(&self) -> bool {
        let ring = self.ring.read().unwrap_or_else(|p| p.into_inner());
        !ring.by_hash.is_empty()
    }

    /// How many keys are active, once known.
    pub fn count(&self) -> Option<usize> {
        let ring = self.ring.read().unwrap_or_else(|p| p.into_inner());
        ring.known.then(|| ring.by_hash.len())
    }

    fn lookup(&self, hash: &KeyHash) -> Option<Tenant> {
        let ring = self.ring.read().unwrap_or_else(|p| p.into_inner());
        ring.by_hash.get(hash).cloned()
    }

    /// The tenant of an active key; a key the ring does not know is looked
    /// for in the store once more (a key made a moment ago) before it is
    /// refused.
    async fn tenant_of(&self, hash: KeyHash) -> Result<Tenant, ProxyError> {
        if let Some(tenant) = self.lookup(&hash) {
            return Ok(tenant);
        }
        let asked = Instant::now();
        {
            let mut last = self.reading.lock().await;
            // A read that started after this request asked has seen every
            // key made before it: no need for another.
            if last.is_none_or(|started| started < asked) {
                if let Some(started) = *last {
                    tokio::time::sleep_until((started + MISS_SPACING).into()).await;
                }
                *last = Some(Instant::now());
                self.load().await;
            }
        }
        if let Some(tenant) = self.lookup(&hash) {
            return Ok(tenant);
        }
        if self.count().is_none() {
            return Err(ProxyError::KeysUnknown);
        }
        Err(ProxyError::Unauthenticated(
            "this client key is not known to toolstub (wrong, or revoked)",
        ))
    }

    /// One scheduled read, unless one runs.
    async fn read(&self) {
        let mut last = self.reading.lock().await;
        *last = Some(Instant::now());
        self.load().await;
    }

    async fn load(&self) {
        match load_keys(&self.store).await {
            Ok(keys) => {
                let by_hash = Arc::new(keys.into_iter().collect());
                let mut ring = self.ring.write().unwrap_or_else(|p| p.into_inner());
                *ring = Ring {
                    by_hash,
                    known: true,
                };
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the client keys; the last ones read still hold")
            }
        }
    }
}

/// The active keys as (hash, tenant).
async fn load_keys(
    store: &AsyncResultStore,
) -> Result<Vec<(KeyHash, Tenant)>, crate::store::StoreError> {
    let keys = store.keys().await?;
    Ok(keys.into_iter().map(|k| (k.hash, k.tenant)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    #[test]
    fn admin_tokens_compare_whole() {
        let secret = Secret::new("secret");
        let mut headers = HeaderMap::new();
        assert!(admin_token_ok(None, &headers));
        assert!(!admin_token_ok(Some(&secret), &headers));
        headers.insert(ADMIN_TOKEN_HEADER, "secre".parse().expect("value"));
        assert!(!admin_token_ok(Some(&secret), &headers));
        headers.insert(ADMIN_TOKEN_HEADER, "secret".parse().expect("value"));
        assert!(admin_token_ok(Some(&secret), &headers));
        headers.insert(ADMIN_TOKEN_HEADER, "".parse().expect("value"));
        assert!(
            !admin_token_ok(Some(&Secret::new("")), &headers),
            "an empty token admits no one"
        );
        let mut bearer = HeaderMap::new();
        bearer.insert("authorization", "Bearer secret".parse().expect("value"));
        assert!(
            admin_token_ok(Some(&secret), &bearer),
            "a scraper's bearer token"
        );
        bearer.insert("authorization", "Bearer secrets".parse().expect("value"));
        assert!(!admin_token_ok(Some(&secret), &bearer));
    }
}
