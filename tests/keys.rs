//! `toolstub keys create|list|revoke` on the real binary, against a temp
//! SQLite file (named by `--db` or by a `--config` file, as for `serve`)
//! and a PostgreSQL schema (`--store-url`). What is checked: a key is
//! printed once, alone on the last line, after a line naming it, its
//! tenant and the store; the store holds its hash, never the key; a bad
//! or taken name and an unknown revocation fail with a clear message;
//! `list` shows names, tenants and times, never a key or a hash.

#[path = "support/postgres.rs"]
mod pg;

use std::process::{Command, Output};
use toolstub::auth::key::looks_like_key;
use toolstub::auth::KeyHash;
use toolstub::store::{AsyncResultStore, Backend, PostgresOptions, StoreConfig};

const BIN: &str = env!("CARGO_BIN_EXE_toolstub");

/// `toolstub keys ARGS` with no TOOLSTUB_* setting of the test's own
/// environment (the binary refuses ones it does not know).
fn keys(args: &[&str]) -> Output {
    let mut command = Command::new(BIN);
    command.arg("keys").args(args);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("TOOLSTUB_") {
            command.env_remove(name);
        }
    }
    command.output().expect("running toolstub keys")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn describe(out: &Output) -> String {
    format!(
        "{:?}\n--- stdout ---\n{}--- stderr ---\n{}",
        out.status,
        stdout(out),
        stderr(out)
    )
}

/// Runs `create NAME`; returns the key (the last line) after checking the
/// line before it.
fn create(store: &[&str], name: &str, place: &str) -> String {
    let mut args = store.to_vec();
    args.extend(["create", name]);
    let out = keys(&args);
    assert!(out.status.success(), "{}", describe(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{}", describe(&out));
    let key = lines[1].to_string();
    assert!(looks_like_key(&key), "the last line is the key: {key:?}");
    let tenant = KeyHash::of(&key).tenant();
    assert!(lines[0].contains(&format!("{name:?}")), "{}", lines[0]);
    assert!(lines[0].contains(tenant.as_str()), "{}", lines[0]);
    assert!(lines[0].contains(place), "names the store: {}", lines[0]);
    assert!(!lines[0].contains(&key[4..]), "the key once only");
    key
}

/// Checks a failure: not zero, nothing on stdout, `words` on stderr.
fn refused(out: &Output, words: &[&str]) {
    assert!(!out.status.success(), "{}", describe(out));
    assert_eq!(stdout(out), "", "no key, no table: {}", describe(out));
    for w in words {
        assert!(stderr(out).contains(w), "{w:?}: {}", describe(out));
    }
}

/// The whole life of two keys on one store, named by `store` (flags).
fn play(store: &[&str], place: &str, recorded: impl Fn() -> Vec<(String, KeyHash)>) {
    let with = |more: &[&str]| {
        let mut args = store.to_vec();
        args.extend(more);
        keys(&args)
    };
    let alice = create(store, "alice", place);
    // A taken name, a bad name: refused, and no key printed.
    refused(&with(&["create", "alice"]), &["\"alice\"", "already"]);
    refused(&with(&["create", "a b"]), &["invalid key name", "\"a b\""]);
    let bob = create(store, "ci-bot.prod@team", place);
    // What the store holds: each printed key's hash, by name.
    let mut want = vec![
        ("alice".to_string(), KeyHash::of(&alice)),
        ("ci-bot.prod@team".to_string(), KeyHash::of(&bob)),
    ];
    want.sort();
    assert_eq!(recorded(), want);
    let out = with(&["list"]);
    assert!(out.status.success(), "{}", describe(&out));
    let table = stdout(&out);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["NAME", "TENANT", "CREATED", "(UTC)"]);
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(row[..2], ["alice", KeyHash::of(&alice).tenant().as_str()]);
    let created = row[2];
    assert!(
        created.len() == 20 && created.ends_with('Z') && created.as_bytes()[10] == b'T',
        "RFC 3339 in UTC: {created}"
    );
    for secret in [&alice, &bob] {
        assert!(!table.contains(&secret[4..]), "no key listed: {table}");
        assert!(
            !table.contains(&KeyHash::of(secret).hex()),
            "no hash: {table}"
        );
    }
    // Revoked once; then there is no active key of that name.
    let out = with(&["revoke", "alice"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        stdout(&out).contains("revoked key \"alice\""),
        "{}",
        describe(&out)
    );
    refused(&with(&["revoke", "alice"]), &["no active key", "\"alice\""]);
    assert_eq!(recorded(), [want[1].clone()]);
    // The name is free again, for a new key.
    let again = create(store, "alice", place);
    assert_ne!(again, alice);
    let out = with(&["list"]);
    assert_eq!(stdout(&out).lines().count(), 3, "{}", describe(&out));
}

/// Every active key of a store, as (name, hash), read through the store.
fn recorded_in(backend: Backend) -> Vec<(String, KeyHash)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let config = StoreConfig {
            sweep_interval: None,
            ..StoreConfig::default()
        };
        let store = AsyncResultStore::open(backend, config)
            .await
            .expect("opening the store");
        let keys = store.keys().await.expect("keys");
        keys.into_iter().map(|k| (k.name, k.hash)).collect()
    })
}

#[test]
fn keys_on_a_sqlite_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("keys.db");
    let db_flag = db.to_str().expect("utf-8 path");
    // list and revoke need a store; create makes one.
    refused(&keys(&["--db", db_flag, "list"]), &["no store at"]);
    assert!(!db.exists());
    play(&["--db", db_flag], db_flag, || {
        recorded_in(Backend::Sqlite(db.clone()))
    });
    // Made by the CLI: the file is its owner's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&db).expect("db").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // The same store through a configuration file, as `serve` reads it.
    let config = dir.path().join("toolstub.toml");
    std::fs::write(
        &config,
        format!("[store]\npath = {:?}\n", db.to_str().expect("utf-8")),
    )
    .expect("config");
    let out = keys(&["--config", config.to_str().expect("utf-8"), "list"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        stdout(&out).contains("ci-bot.prod@team"),
        "{}",
        describe(&out)
    );
}

#[test]
fn the_sqlite_file_holds_no_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("keys.db");
    let db_flag = db.to_str().expect("utf-8 path");
    let key = create(&["--db", db_flag], "alice", db_flag);
    let mut bytes = std::fs::read(&db).expect("db");
    bytes.extend(std::fs::read(dir.path().join("keys.db-wal")).unwrap_or_default());
    let has = |needle: &str| bytes.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(
        has(&KeyHash::of(&key).hex()),
        "the hash is there to be found"
    );
    assert!(!has(&key[4..]), "the key is not");
}

#[test]
fn keys_on_a_postgres_store_by_store_url() {
    let schema = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(pg::Schema::create());
    let url = schema.store_url();
    let options = || PostgresOptions {
        url: url.clone(),
        pool_size: 1,
        connect_timeout: std::time::Duration::from_secs(10),
        ca_file: None,
    };
    play(&["--store-url", &url], "postgres 127.0.0.1", || {
        recorded_in(Backend::Postgres(options()))
    });
    let out = keys(&["--store-url", &url, "list"]);
    assert!(
        !stdout(&out).contains("toolstub@") && !stderr(&out).contains(":toolstub@"),
        "no credential echoed: {}",
        describe(&out)
    );
    drop(schema);
}

#[test]
fn a_store_that_cannot_be_reached_is_a_clear_failure() {
    let out = keys(&[
        "--store-url",
        "postgres://toolstub:secret-password@127.0.0.1:1/none",
        "create",
        "alice",
    ]);
    assert!(!out.status.success(), "{}", describe(&out));
    assert_eq!(
        stdout(&out),
        "",
        "no key for a store that did not record it"
    );
    assert!(
        !stderr(&out).contains("secret-password"),
        "{}",
        describe(&out)
    );
    assert!(stderr(&out).contains("\"alice\""), "{}", describe(&out));
}
