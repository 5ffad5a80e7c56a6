//! Crash safety under load (issue 6 item 2), short form: the same driver as
//! `scripts/crash-safety` (examples/crashsafety.rs), with fewer kills, on the
//! binary cargo builds for the tests. Every ref the upstream received must
//! resolve byte-identical after repeated SIGKILLs and restarts.

#![cfg(unix)]

#[allow(dead_code)]
#[path = "../examples/crashsafety.rs"]
mod crashsafety;

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
    };
    let r = crashsafety::run(&p);
    crashsafety::print(&p, &r);
    assert_eq!(r.kills, 6);
    assert!(r.refs_received > 0, "the upstream received refs");
    assert!(r.failures.is_empty(), "{:#?}", r.failures);
    assert_eq!(r.refs_resolved, r.refs_received);
}
