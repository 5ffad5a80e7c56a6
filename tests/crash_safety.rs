//! Crash safety under load, short form: the same driver as
//! `scripts/crash-safety` (examples/crashsafety.rs), with fewer kills, on the
//! binary cargo builds for the tests. Every ref the upstream received must
//! resolve byte-identical after repeated SIGKILLs and restarts.

#![cfg(unix)]

#[allow(dead_code)]
#[path = "../examples/crashsafety.rs"]
mod crashsafety;

#[path = "support/postgres.rs"]
mod pg;

use std::time::Duration;

#[test]
fn every_ref_the_upstream_saw_survives_repeated_sigkills() {
    let p = crashsafety::Params {
        bin: env!("CARGO_BIN_EXE_toolstub").to_string(),
        kills: 6,
        clients: 4,
        seed: 6,
        min_life: Duration::from_millis(150),
        max_life: Duration::from_millis(700),
        max_chars: 80_000,
        store_url: None,
        replicas: 1,
    };
    let r = crashsafety::run(&p);
    crashsafety::print(&p, &r);
    assert_eq!(r.kills, 6);
    assert!(r.refs_received > 0, "the upstream received refs");
    assert!(r.failures.is_empty(), "{:#?}", r.failures);
    assert_eq!(r.refs_resolved, r.refs_received);
}

/// Issue 16: two replicas on one PostgreSQL, one of them SIGKILLed 20
/// times under rewriting load (and restarted): every ref the upstream
/// received resolves byte-identical, under its tenant only.
#[test]
fn every_ref_survives_sigkills_of_replicas_sharing_postgres() {
    let schema = pg::Schema::create_blocking();
    let p = crashsafety::Params {
        bin: env!("CARGO_BIN_EXE_toolstub").to_string(),
        kills: 20,
        clients: 4,
        seed: 16,
        min_life: Duration::from_millis(150),
        max_life: Duration::from_millis(500),
        max_chars: 80_000,
        store_url: Some(schema.store_url()),
        replicas: 2,
    };
    let r = crashsafety::run(&p);
    crashsafety::print(&p, &r);
    assert_eq!(r.kills, 20);
    assert!(r.refs_received > 0, "the upstream received refs");
    assert!(r.failures.is_empty(), "{:#?}", r.failures);
    assert_eq!(r.refs_resolved, r.refs_received);
}
