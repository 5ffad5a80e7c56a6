//! The local case: a proxy that requires no key serves only its own
//! machine, and only programs on it, never a web page.
//!
//! With no key required (`toolstub serve` on a loopback address with no
//! client key made), a request is served only when all of these hold:
//!
//! - its peer is a loopback address (a proxy told to listen on every
//!   interface without keys still answers no other machine);
//! - its `Host` names the proxy: the address it was reached on, `localhost`,
//!   `127.0.0.1`, `[::1]` or a name in `auth.hosts`, with the port it was
//!   reached on (or none). A page whose own name was re-pointed at
//!   127.0.0.1 (DNS rebinding) sends its own name, and is refused;
//! - it does not come from a page of another origin: an `Origin` other
//!   than the proxy's own (`http://`, `localhost`, the address it was
//!   reached on or a name in `auth.hosts`, and its own port), or a
//!   `Sec-Fetch-Site` other than `same-origin` or `none`, is refused. A
//!   browser adds these to the requests a page makes, a blind `text/plain`
//!   POST among them; a page of another local server (another port or
//!   loopback address) is another origin. Programs such as the agents'
//!   CLIs and SDKs send neither.
//!
//! Pure: the caller gives the peer, the local address and the headers.

use http::{header, HeaderMap};
use std::net::SocketAddr;

/// Why a request was refused in the local case (said to the client).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// From another machine.
    NotLoopback,
    /// A `Host` that names someone else, or none.
    Host,
    /// From a web page of another origin.
    CrossOrigin,
}

impl Refusal {
    pub fn message(self) -> &'static str {
        match self {
            Refusal::NotLoopback => "this toolstub requires no client key and so serves only its own machine; use a client key (toolstub keys create NAME) to reach it from elsewhere",
            Refusal::Host => "the Host header does not name this toolstub (its address, localhost, or a name in auth.hosts)",
            Refusal::CrossOrigin => "requests from web pages of another origin are refused",
        }
    }
}

/// Checks a request in the local case; `local` is the address the client
/// reached, `names` the configured extra host names.
pub fn admit(
    peer: SocketAddr,
    local: SocketAddr,
    headers: &HeaderMap,
    names: &[String],
) -> Result<(), Refusal> {
    if !peer.ip().to_canonical().is_loopback() {
        return Err(Refusal::NotLoopback);
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .ok_or(Refusal::Host)?;
    if !names_proxy(host, local, names) {
        return Err(Refusal::Host);
    }
    // A browser says where a request comes from: only the proxy's own page
    // (`same-origin`) or the person typing its address (`none`) may ask.
    if let Some(site) = headers.get("sec-fetch-site") {
        let own = [b"same-origin".as_slice(), b"none"]
            .iter()
            .any(|ok| site.as_bytes().eq_ignore_ascii_case(ok));
        if !own {
            return Err(Refusal::CrossOrigin);
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let own = origin
            .to_str()
            .ok()
            .and_then(|o| o.strip_prefix("http://"))
            .is_some_and(|authority| is_own_origin(authority, local, names));
        if !own {
            return Err(Refusal::CrossOrigin);
        }
    }
    Ok(())
}

/// Whether an `Origin`'s `host[:port]` is the proxy's own page, exactly:
/// `localhost`, the address it was reached on or a configured name, with
/// its own port (a browser leaves the port out only for 80). A page of
/// another local server (another port, another loopback address) is
/// another origin.
fn is_own_origin(authority: &str, local: SocketAddr, names: &[String]) -> bool {
    let (host, port) = split_authority(authority);
    if port.unwrap_or(80) != local.port() {
        return false;
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.to_canonical() == local.ip().to_canonical())
        || names.iter().any(|n| n.eq_ignore_ascii_case(host))
}

/// Whether `authority` (`host[:port]`) names the proxy reached at `local`:
/// `localhost`, a loopback address or the one it was reached on, or a
/// configured name; with the port it was reached on, or none.
fn names_proxy(authority: &str, local: SocketAddr, names: &[String]) -> bool {
    let (host, port) = split_authority(authority);
    if port.is_some_and(|p| p != local.port()) {
        return false;
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.to_canonical().is_loopback() || ip == local.ip())
        || names.iter().any(|n| n.eq_ignore_ascii_case(host))
}

/// `host[:port]` split; an IPv6 host keeps its brackets. A port that is
/// not a number reads as 0, which no listener has.
fn split_authority(authority: &str) -> (&str, Option<u16>) {
    let port = |p: &str| Some(p.parse().unwrap_or(0));
    match authority.strip_prefix('[') {
        Some(rest) => match rest.find(']') {
            Some(end) => {
                let (host, after) = authority.split_at(end + 2);
                match after.strip_prefix(':') {
                    Some(p) => (host, port(p)),
                    None if after.is_empty() => (host, None),
                    None => (authority, Some(0)),
                }
            }
            None => (authority, Some(0)),
        },
        None => match authority.rsplit_once(':') {
            Some((host, p)) => (host, port(p)),
            None => (authority, None),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                v.parse().expect("value"),
            );
        }
        h
    }

    const LOCAL: &str = "127.0.0.1:8790";

    fn check(peer: &str, pairs: &[(&str, &str)]) -> Result<(), Refusal> {
        let names = vec!["toolstub.internal".to_string()];
        admit(
            peer.parse().expect("peer"),
            LOCAL.parse().expect("local"),
            &headers(pairs),
            &names,
        )
    }

    #[test]
    fn programs_on_this_machine_are_served() {
        for host in [
            "127.0.0.1:8790",
            "localhost:8790",
            "LOCALHOST",
            "[::1]:8790",
            "127.0.0.1",
            "toolstub.internal:8790",
        ] {
            assert_eq!(
                check("127.0.0.1:50000", &[("host", host)]),
                Ok(()),
                "{host}"
            );
        }
        assert_eq!(
            check(
                "[::1]:50000",
                &[
                    ("host", "localhost:8790"),
                    ("origin", "http://localhost:8790")
                ]
            ),
            Ok(()),
            "the dashboard's own page"
        );
        assert_eq!(
            check(
                "127.0.0.1:1",
                &[
                    ("host", "localhost:8790"),
                    ("sec-fetch-site", "same-origin")
                ]
            ),
            Ok(())
        );
    }

    #[test]
    fn other_machines_are_refused() {
        assert_eq!(
            check("10.0.0.7:50000", &[("host", "127.0.0.1:8790")]),
            Err(Refusal::NotLoopback)
        );
    }

    #[test]
    fn a_rebound_name_or_another_port_is_refused() {
        for host in [
            "attacker.example:8790",
            "attacker.example",
            "127.0.0.1:8791",
            "localhost.attacker.example:8790",
            "127.0.0.1:x",
            "[::1]x",
            "[::1",
            "",
        ] {
            assert_eq!(
                check("127.0.0.1:50000", &[("host", host)]),
                Err(Refusal::Host),
                "{host:?}"
            );
        }
        assert_eq!(check("127.0.0.1:50000", &[]), Err(Refusal::Host));
    }

    #[test]
    fn a_page_of_another_origin_is_refused() {
        for origin in [
            "http://attacker.example",
            "null",
            "http://localhost:3000",
            "https://localhost:8790",
            "file://",
            // Pages of other local servers: port 80, another loopback
            // address on the proxy's port.
            "http://localhost",
            "http://127.0.0.1",
            "http://[::1]",
            "http://127.0.0.2:8790",
        ] {
            assert_eq!(
                check(
                    "127.0.0.1:50000",
                    &[("host", "127.0.0.1:8790"), ("origin", origin)]
                ),
                Err(Refusal::CrossOrigin),
                "{origin}"
            );
        }
        for site in ["cross-site", "same-site", "CROSS-SITE"] {
            assert_eq!(
                check(
                    "127.0.0.1:50000",
                    &[("host", "127.0.0.1:8790"), ("sec-fetch-site", site)]
                ),
                Err(Refusal::CrossOrigin),
                "{site}"
            );
        }
    }
}
