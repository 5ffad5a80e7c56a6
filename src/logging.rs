//! What the log may hold, whatever level it is set to: no client header.
//!
//! Some libraries the proxy runs a request through log that request at
//! their verbose levels: aws-sigv4 logs the request it signs and its
//! canonical request at trace (every signed header's value, a client's
//! `x-api-key` among them), and the HTTP and TLS libraries log what they
//! read and write at debug and trace. Those crates are held at warnings
//! and errors by a filter beside the configured one (`server.log_level`,
//! `RUST_LOG`): a directive naming them cannot raise them.

use tracing::{Level, Metadata};
use tracing_subscriber::filter::FilterFn;

/// Crates (the first segment of a target) held at [`CEILING`].
const HELD: [&str; 9] = [
    "aws_sigv4",
    "aws_config",
    "aws_runtime",
    "aws_credential_types",
    "hyper",
    "hyper_util",
    "hyper_rustls",
    "h2",
    "rustls",
];
/// Crate families held at [`CEILING`] (every crate whose name starts so).
const HELD_FAMILIES: [&str; 2] = ["aws_smithy", "gcp_auth"];
/// The most verbose level a held crate logs at.
const CEILING: Level = Level::WARN;

/// Whether an event or span may be logged at all.
fn allowed(metadata: &Metadata<'_>) -> bool {
    if *metadata.level() <= CEILING {
        return true;
    }
    let krate = metadata.target().split("::").next().unwrap_or("");
    !(HELD.contains(&krate) || HELD_FAMILIES.iter().any(|f| krate.starts_with(f)))
}

/// The filter to layer over the configured one.
pub fn no_client_headers() -> FilterFn<fn(&Metadata<'_>) -> bool> {
    FilterFn::new(allowed as fn(&Metadata<'_>) -> bool)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::callsite::Identifier;
    use tracing::field::FieldSet;
    use tracing::metadata::Kind;

    struct Site;
    impl tracing::callsite::Callsite for Site {
        fn set_interest(&self, _: tracing::subscriber::Interest) {}
        fn metadata(&self) -> &Metadata<'_> {
            unreachable!("not registered")
        }
    }
    static SITE: Site = Site;

    fn event(target: &'static str, level: Level) -> Metadata<'static> {
        Metadata::new(
            "event",
            target,
            level,
            None,
            None,
            None,
            FieldSet::new(&[], Identifier(&SITE)),
            Kind::EVENT,
        )
    }

    #[test]
    fn header_logging_crates_are_held_at_warnings_and_others_are_not() {
        for target in [
            "aws_sigv4::http_request::sign",
            "aws_smithy_runtime::client::orchestrator",
            "hyper::proto::h1::role",
            "rustls::client::hs",
            "h2",
        ] {
            assert!(!allowed(&event(target, Level::TRACE)), "{target}");
            assert!(!allowed(&event(target, Level::DEBUG)), "{target}");
            assert!(!allowed(&event(target, Level::INFO)), "{target}");
            assert!(allowed(&event(target, Level::WARN)), "{target}");
        }
        for target in ["toolstub::proxy", "hyperbole", "tokio_postgres"] {
            assert!(allowed(&event(target, Level::TRACE)), "{target}");
        }
    }
}
