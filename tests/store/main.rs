//! The result store, one module per area, shared
//! fixtures at the top. Every test opens its own database in a temp dir.

mod harness;

use harness::{both, Store};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use toolstub::store::{Clock, Durability, NewOutput, StoreConfig, StoreError, Tenant, OFFSET_UNIT};
use toolstub::synopsis::{synopsize, Hints, Kind};

fn config() -> StoreConfig {
    StoreConfig {
        sweep_interval: None,
        ..StoreConfig::default()
    }
}

/// A store on the test's backend (the `()` stands where a guard used to:
/// the store owns its data's place).
fn open() -> ((), Store) {
    ((), Store::open(config()))
}

/// A store whose clock the test moves.
fn open_with_clock(cfg: StoreConfig) -> ((), Store, Arc<AtomicI64>) {
    let now = Arc::new(AtomicI64::new(1_700_000_000_000));
    let clock_now = now.clone();
    let cfg = StoreConfig {
        clock: Clock::from_fn(move || clock_now.load(Ordering::SeqCst)),
        ..cfg
    };
    ((), Store::open(cfg), now)
}

fn output(session: &str, call: &str, tool: &str, text: &str) -> NewOutput {
    NewOutput {
        session_id: session.to_string(),
        tool_call_id: Some(call.to_string()),
        tool_name: Some(tool.to_string()),
        mime_type: None,
        preview_chars: 2000,
        synopsis: synopsize(
            text,
            Hints {
                mime: None,
                preview_chars: 2000,
            },
        ),
        text: text.to_string().into(),
        sha256: None,
        stub: None,
    }
}

fn alice() -> Tenant {
    Tenant::new("aaaaaaaaaaaaaaaa").unwrap()
}

fn bob() -> Tenant {
    Tenant::new("bbbbbbbbbbbbbbbb").unwrap()
}

/// Deterministic pseudo-random words (xorshift), for large originals.
fn words(seed: u64, chars: usize) -> String {
    const VOCAB: &[&str] = &[
        "alpha",
        "beta",
        "gamma",
        "delta",
        "error",
        "retry",
        "timeout",
        "ok",
        "日本語",
        "😀",
        "café",
        "row",
        "column",
        "value",
        "null",
        "true",
    ];
    let mut x = seed | 1;
    let mut s = String::with_capacity(chars + 16);
    let mut n = 0;
    while n < chars {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let w = VOCAB[(x % VOCAB.len() as u64) as usize];
        s.push_str(w);
        s.push(if x.is_multiple_of(11) { '\n' } else { ' ' });
        n += w.chars().count() + 1;
    }
    s
}

mod put {
    use super::*;

    both! {
        fn put_derives_ref_hash_and_length_and_is_idempotent() {
            let (_d, store) = open();
            let text = "{\"users\":[{\"id\":1}]}";
            let first = store
                .put_one(&alice(), output("s1", "call_1", "read_file", text))
                .unwrap();
            let sha = toolstub::refs::sha256_hex(text);
            assert_eq!(
                first.result_ref,
                toolstub::refs::result_ref(Some("call_1"), &sha)
            );
            assert_eq!(first.sha256, sha);
            assert_eq!(first.original_chars, text.chars().count() as u64);
            assert!(first.created);
            let again = store
                .put_one(&alice(), output("s1", "call_1", "read_file", text))
                .unwrap();
            assert_eq!(again.result_ref, first.result_ref);
            assert!(!again.created);
            // Same content under another call id: a second row, one original.
            store
                .put_one(&alice(), output("s1", "call_2", "read_file", text))
                .unwrap();
            let stats = store.stats().unwrap();
            assert_eq!(stats.live_outputs, 2);
            assert_eq!(stats.originals, 1);
            assert_eq!(stats.original_bytes, text.len() as u64);
        }

        fn metadata_round_trips_with_the_synopsis() {
            let (_d, store) = open();
            let text = "name,score\nAda,99\nLin,98\n";
            let mut out = output("s1", "c1", "query", text);
            out.mime_type = Some("text/csv".to_string());
            out.preview_chars = 1234;
            let synopsis = out.synopsis.clone();
            let r = store.put_one(&alice(), out).unwrap();
            let meta = store.meta(&alice(), &r.result_ref).unwrap();
            assert_eq!(meta.session_id, "s1");
            assert_eq!(meta.tool_call_id.as_deref(), Some("c1"));
            assert_eq!(meta.tool_name.as_deref(), Some("query"));
            assert_eq!(meta.mime_type.as_deref(), Some("text/csv"));
            assert_eq!(meta.preview_chars, 1234);
            assert_eq!(meta.original_chars, 25);
            assert_eq!(meta.synopsis_kind, Kind::Csv);
            assert_eq!(meta.synopsis, synopsis);
            assert_eq!(meta.offset_unit, OFFSET_UNIT);
            assert_eq!(meta.sha256, r.sha256);
            assert!(meta.created_at > 1_600_000_000_000);
        }

        fn several_outputs_of_one_request_commit_together() {
            let (_d, store) = open();
            let outs = vec![
                output("s1", "a", "t", "first output"),
                output("s1", "b", "t", "second output"),
                output("s1", "c", "t", "first output"),
            ];
            let stored = store.put(&alice(), outs).unwrap();
            assert_eq!(stored.len(), 3);
            assert!(stored.iter().all(|s| s.created));
            for s in &stored {
                store.read(&alice(), &s.result_ref, 0, -1).unwrap();
            }
            assert_eq!(store.stats().unwrap().originals, 2);
        }

        fn a_bad_output_fails_its_request_only() {
            let (_d, store) = open();
            let mut bad = output("s1", "a", "t", "x");
            bad.session_id.clear();
            let err = store
                .put(&alice(), vec![output("s1", "ok", "t", "fine"), bad])
                .unwrap_err();
            assert!(matches!(err, StoreError::InvalidArgument(_)), "{err}");
            assert!(store
                .list(&alice(), Some("s1"), None, 10)
                .unwrap()
                .is_empty());
        }

        fn empty_and_large_multibyte_originals_round_trip() {
            let (_d, store) = open();
            let empty = store.put_one(&alice(), output("s", "e", "t", "")).unwrap();
            let w = store.read(&alice(), &empty.result_ref, 0, -1).unwrap();
            assert_eq!(
                (w.content.as_str(), w.total_chars, w.has_more),
                ("", 0, false)
            );
            let big = words(7, 300_000);
            let r = store
                .put_one(&alice(), output("s", "big", "t", &big))
                .unwrap();
            let w = store.read(&alice(), &r.result_ref, 0, -1).unwrap();
            assert_eq!(w.content, big);
            assert_eq!(w.total_chars, big.chars().count() as u64);
        }
    }
}

mod read {
    use super::*;

    fn stored(store: &Store, text: &str) -> String {
        store
            .put_one(&alice(), output("s", "c", "t", text))
            .unwrap()
            .result_ref
    }

    both! {
        /// A NUL (a `cat` of a binary file) is stored on both backends, at
        /// its offset: PostgreSQL's text holds none, so it reads back there
        /// as U+FFFD, one character for one.
        fn a_nul_is_stored_and_keeps_every_offset() {
            let (_d, store) = open();
            let text = "bin\0ary\0tail";
            let r = store
                .put_one(&alice(), output("s", "c\0", "cat\0", text))
                .unwrap()
                .result_ref;
            let w = store.read(&alice(), &r, 3, 5).unwrap();
            assert!(matches!(w.content.as_str(), "\0ary\0" | "\u{FFFD}ary\u{FFFD}"), "{:?}", w.content);
            assert_eq!((w.total_chars, w.next_offset), (12, Some(8)));
            assert_eq!(store.read(&alice(), &r, 8, -1).unwrap().content, "tail");
            assert_eq!(store.list(&alice(), Some("s"), None, 10).unwrap().len(), 1);
        }

        fn windows_follow_code_points() {
            let (_d, store) = open();
            // CJK (3 bytes) and emoji (4 bytes): byte offsets would differ.
            let text = "日本語😀テキスト🎉end";
            let r = stored(&store, text);
            let w = store.read(&alice(), &r, 0, 3).unwrap();
            assert_eq!(w.content, "日本語");
            assert_eq!(
                (w.offset, w.total_chars, w.has_more, w.next_offset),
                (0, 12, true, Some(3))
            );
            let w = store.read(&alice(), &r, 3, 1).unwrap();
            assert_eq!(w.content, "😀");
            let w = store.read(&alice(), &r, 8, 10).unwrap();
            assert_eq!(w.content, "🎉end");
            assert_eq!((w.has_more, w.next_offset), (false, None));
        }

        fn offset_zero_past_the_end_minus_one_and_limit_zero() {
            let (_d, store) = open();
            let r = stored(&store, "abcdef");
            let all = store.read(&alice(), &r, 0, -1).unwrap();
            assert_eq!(
                (all.content.as_str(), all.has_more, all.limit),
                ("abcdef", false, -1)
            );
            let tail = store.read(&alice(), &r, 4, -1).unwrap();
            assert_eq!(tail.content, "ef");
            let past = store.read(&alice(), &r, 6, 10).unwrap();
            assert_eq!(
                (past.content.as_str(), past.has_more, past.next_offset),
                ("", false, None)
            );
            let far = store.read(&alice(), &r, 1_000_000, -1).unwrap();
            assert_eq!(
                (far.content.as_str(), far.offset, far.total_chars),
                ("", 1_000_000, 6)
            );
            let zero = store.read(&alice(), &r, 2, 0).unwrap();
            assert_eq!(
                (zero.content.as_str(), zero.has_more, zero.next_offset),
                ("", true, Some(2))
            );
            let huge = store.read(&alice(), &r, 1, i64::MAX).unwrap();
            assert_eq!(huge.content, "bcdef");
        }

        fn invalid_arguments_are_clear_errors() {
            let (_d, store) = open();
            let r = stored(&store, "abc");
            let e = store.read(&alice(), &r, -1, 10).unwrap_err();
            assert!(matches!(e, StoreError::InvalidArgument(_)));
            assert!(
                e.to_string().contains("offset must be 0 or more, got -1"),
                "{e}"
            );
            let e = store.read(&alice(), &r, 0, -2).unwrap_err();
            assert!(e.to_string().contains("limit must be -1"), "{e}");
            let e = store
                .read(&alice(), "tr_nope_0000000000000000", 0, 1)
                .unwrap_err();
            assert!(matches!(e, StoreError::NotFound { .. }));
            assert!(e.to_string().contains("tr_nope_0000000000000000"));
        }

        fn windows_across_chunk_boundaries_reassemble_exactly() {
            let (_d, store) = open();
            let text = words(3, 50_000);
            let chars: Vec<char> = text.chars().collect();
            let r = stored(&store, &text);
            for (offset, limit) in [
                (0, 4096),
                (4000, 200),
                (4095, 2),
                (8190, 9000),
                (49_990, 100),
            ] {
                let w = store.read(&alice(), &r, offset, limit).unwrap();
                let end = (offset + limit).min(chars.len() as i64) as usize;
                let want: String = chars[offset as usize..end].iter().collect();
                assert_eq!(w.content, want, "offset {offset} limit {limit}");
            }
            // Paging with next_offset covers the text exactly once.
            let mut paged = String::new();
            let mut at = 0;
            loop {
                let w = store.read(&alice(), &r, at, 7_777).unwrap();
                paged.push_str(&w.content);
                match w.next_offset {
                    Some(n) => at = n as i64,
                    None => break,
                }
            }
            assert_eq!(paged, text);
        }
    }
}

mod search {
    use super::*;

    both! {
        fn exact_non_overlapping_matches_with_code_point_offsets() {
            let (_d, store) = open();
            let r = store
                .put_one(&alice(), output("s", "c", "t", "aaaaa"))
                .unwrap()
                .result_ref;
            let found = store.search(&alice(), &r, "aaa", 20, 1).unwrap();
            let offsets: Vec<u64> = found.matches.iter().map(|m| m.offset).collect();
            assert_eq!(offsets, [0]);
            assert_eq!(found.total_matches, 1);
            let r = store
                .put_one(&alice(), output("s", "c2", "t", "aaaaaa"))
                .unwrap()
                .result_ref;
            let found = store.search(&alice(), &r, "aaa", 20, 0).unwrap();
            let offsets: Vec<u64> = found.matches.iter().map(|m| m.offset).collect();
            assert_eq!(offsets, [0, 3]);
        }

        fn overlapping_query_text_is_matched_without_overlap() {
            // "aaa" occurs at 0, 1 and 2 in "aaaaa" overlapping; non-overlapping
            // scanning takes 0, then resumes at 3 where only "aa" is left, so a
            // query of "aa" is the one that yields 0 and 2.
            let (_d, store) = open();
            let r = store
                .put_one(&alice(), output("s", "c", "t", "aaaaa"))
                .unwrap()
                .result_ref;
            let offsets = |q: &str| -> Vec<u64> {
                store
                    .search(&alice(), &r, q, 20, 0)
                    .unwrap()
                    .matches
                    .iter()
                    .map(|m| m.offset)
                    .collect()
            };
            assert_eq!(offsets("aaa"), [0]);
            assert_eq!(offsets("aa"), [0, 2]);
            assert_eq!(offsets("a"), [0, 1, 2, 3, 4]);
        }

        fn case_sensitive_multibyte_offsets_and_snippets() {
            let (_d, store) = open();
            let text = "日本語 Error; error 😀ERROR Error!";
            let r = store
                .put_one(&alice(), output("s", "c", "t", text))
                .unwrap()
                .result_ref;
            let found = store.search(&alice(), &r, "Error", 20, 2).unwrap();
            let got: Vec<(u64, &str)> = found
                .matches
                .iter()
                .map(|m| (m.offset, m.snippet.as_str()))
                .collect();
            assert_eq!(got, [(4, "語 Error; "), (24, "R Error!")]);
            let found = store.search(&alice(), &r, "😀", 20, 0).unwrap();
            assert_eq!(found.matches[0].offset, 17);
            assert_eq!(found.matches[0].snippet, "😀");
        }

        fn limit_caps_matches_but_not_the_total() {
            let (_d, store) = open();
            let text = "x-".repeat(100);
            let r = store
                .put_one(&alice(), output("s", "c", "t", &text))
                .unwrap()
                .result_ref;
            let found = store.search(&alice(), &r, "x", 3, 0).unwrap();
            assert_eq!(found.matches.len(), 3);
            assert_eq!(found.total_matches, 100);
            assert!(store
                .search(&alice(), &r, "x", 0, 0)
                .unwrap()
                .matches
                .is_empty());
        }

        fn matches_across_chunk_boundaries_are_found() {
            let (_d, store) = open();
            let mut text = "z".repeat(4094);
            text.push_str("NEEDLE");
            text.push_str(&"z".repeat(5000));
            let r = store
                .put_one(&alice(), output("s", "c", "t", &text))
                .unwrap()
                .result_ref;
            let found = store.search(&alice(), &r, "NEEDLE", 5, 3).unwrap();
            assert_eq!(found.matches.len(), 1);
            assert_eq!(found.matches[0].offset, 4094);
            assert_eq!(found.matches[0].snippet, "zzzNEEDLEzzz");
        }

        fn empty_query_is_an_invalid_argument() {
            let (_d, store) = open();
            let r = store
                .put_one(&alice(), output("s", "c", "t", "abc"))
                .unwrap()
                .result_ref;
            assert!(matches!(
                store.search(&alice(), &r, "", 5, 3),
                Err(StoreError::InvalidArgument(_))
            ));
        }
    }
}

mod session_search {
    use super::*;

    fn fill(store: &Store) -> Vec<String> {
        let texts = [
            "INFO start\nWARN retry once\nERROR failed to open file config.toml\nINFO done",
            "the quick brown fox jumps over the lazy dog",
            "database connection timeout after 30s; retry scheduled",
            "東京 の 天気 は 晴れ; café crème",
        ];
        let refs = texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                store
                    .put_one(
                        &alice(),
                        output("s1", &format!("c{i}"), &format!("tool{i}"), t),
                    )
                    .unwrap()
                    .result_ref
            })
            .collect();
        store
            .put_one(
                &alice(),
                output("s2", "other", "t", "retry in another session"),
            )
            .unwrap();
        store.flush_index().unwrap();
        refs
    }

    both! {
        fn the_writer_indexes_in_the_background_once_puts_stop() {
            // Puts come first; the index fills in the writer's quiet time, with
            // no search or flush asking for it.
            let (_d, store) = open();
            for i in 0..3 {
                store
                    .put_one(
                        &alice(),
                        output("s", &format!("c{i}"), "t", &words(i, 30_000)),
                    )
                    .unwrap();
            }
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while store.stats().unwrap().unindexed_chunks > 0 {
                assert!(std::time::Instant::now() < deadline, "never indexed");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            assert_eq!(store.flush_index().unwrap(), 0, "nothing was left to index");
        }

        fn ranked_hits_name_ref_offset_and_snippet() {
            let (_d, store) = open();
            let refs = fill(&store);
            let hits = store
                .search_session(&alice(), "s1", "failed open", 10, 10)
                .unwrap();
            assert_eq!(hits.len(), 1);
            assert_eq!(hits[0].result_ref, refs[0]);
            assert_eq!(hits[0].tool_name.as_deref(), Some("tool0"));
            assert_eq!(hits[0].offset, 33);
            assert_eq!(hits[0].snippet, "nce\nERROR failed to open f");
            assert!(hits[0].score > 0.0);
            // "retry" is in two outputs of s1 and one of s2: only s1's come back.
            let hits = store
                .search_session(&alice(), "s1", "retry", 10, 5)
                .unwrap();
            let mut got: Vec<&str> = hits.iter().map(|h| h.result_ref.as_str()).collect();
            got.sort();
            let mut want = vec![refs[0].as_str(), refs[2].as_str()];
            want.sort();
            assert_eq!(got, want);
            // Case-insensitive, diacritics folded by the index.
            let hits = store.search_session(&alice(), "s1", "CAFE", 10, 5).unwrap();
            assert_eq!(hits.len(), 1);
            assert_eq!(hits[0].result_ref, refs[3]);
            let hits = store.search_session(&alice(), "s1", "東京", 10, 5).unwrap();
            assert_eq!(hits[0].offset, 0);
        }

        fn better_matches_rank_first_and_limit_applies() {
            let (_d, store) = open();
            let r_many = store
                .put_one(&alice(), output("s", "a", "t", &"timeout ".repeat(50)))
                .unwrap();
            store
                .put_one(
                    &alice(),
                    output("s", "b", "t", &format!("timeout {}", "filler ".repeat(300))),
                )
                .unwrap();
            store.flush_index().unwrap();
            let hits = store
                .search_session(&alice(), "s", "timeout", 10, 5)
                .unwrap();
            assert_eq!(hits.len(), 2);
            assert_eq!(hits[0].result_ref, r_many.result_ref);
            assert!(hits[0].score >= hits[1].score);
            assert_eq!(
                store
                    .search_session(&alice(), "s", "timeout", 1, 5)
                    .unwrap()
                    .len(),
                1
            );
        }

        fn equal_passages_rank_newest_first_on_both_backends() {
            // Five outputs alike but for one letter: every passage scores
            // the same for "timeout", and the newest come first.
            let (_d, store) = open();
            let refs: Vec<String> = "abcde"
                .chars()
                .map(|c| {
                    let text = format!("timeout while reading case{c} from the pool");
                    store
                        .put_one(&alice(), output("s", &format!("c{c}"), "t", &text))
                        .unwrap()
                        .result_ref
                })
                .collect();
            store.flush_index().unwrap();
            let hits = store
                .search_session(&alice(), "s", "timeout", 3, 5)
                .unwrap();
            let got: Vec<&str> = hits.iter().map(|h| h.result_ref.as_str()).collect();
            assert_eq!(got, [&refs[4], &refs[3], &refs[2]]);
        }

        fn a_word_across_a_chunk_boundary_of_minified_json_is_found() {
            // No whitespace: the chunk boundary falls between JSON tokens,
            // never inside an id.
            let (_d, store) = open();
            let text: String = (0..600)
                .map(|i| format!("{{\"request_id\":\"req{i:05}zq\",\"status\":\"ok\"}},"))
                .collect();
            let r = store
                .put_one(&alice(), output("s", "c", "t", &text))
                .unwrap()
                .result_ref;
            store.flush_index().unwrap();
            for i in 0..600 {
                let id = format!("req{i:05}zq");
                let hits = store.search_session(&alice(), "s", &id, 5, 5).unwrap();
                assert_eq!(hits.len(), 1, "{id}");
                assert_eq!(hits[0].result_ref, r);
            }
        }

        fn only_the_newest_matching_passages_are_ranked() {
            // An old output with the best passage for "needle" and the only
            // "unicorn"; then a newer one of more than RANK_CANDIDATES
            // chunks, each with one "needle".
            let (_d, store) = open();
            let old = store
                .put_one(
                    &alice(),
                    output("s", "old", "t", &format!("unicorn {}", "needle ".repeat(400))),
                )
                .unwrap()
                .result_ref;
            let part = format!("needle {}", words(7, 1_000));
            let big = part.repeat(4 * 1_100);
            let new = store
                .put_one(&alice(), output("s", "new", "t", &big))
                .unwrap()
                .result_ref;
            store.flush_index().unwrap();
            store.analyze();
            let hits = store
                .search_session(&alice(), "s", "needle", 5, 5)
                .unwrap();
            assert_eq!(hits.len(), 5);
            assert!(
                hits.iter().all(|h| h.result_ref == new),
                "the old passage is past the newest candidates: {hits:?}"
            );
            // The last candidate is the 1000th matching chunk from the end:
            // no hit before it.
            let chunks = 4 * 1_100 * part.chars().count() / 4096;
            let first = ((chunks - 1_000) * 4096) as u64;
            assert!(hits.iter().all(|h| h.offset + 8192 >= first), "{hits:?}");
            // A word of the old output alone: its passages are all the
            // candidates, so it is found.
            let hits = store
                .search_session(&alice(), "s", "unicorn", 5, 5)
                .unwrap();
            assert_eq!(hits.len(), 1);
            assert_eq!(hits[0].result_ref, old);
            // Both words: only the old passage has them.
            let hits = store
                .search_session(&alice(), "s", "unicorn needle", 5, 5)
                .unwrap();
            assert_eq!(hits.len(), 1);
            assert_eq!(hits[0].result_ref, old);
        }

        fn statistics_change_the_plan_never_the_hits() {
            // PostgreSQL walks the session before it has statistics and
            // uses the GIN index for rare words after: the same hits.
            let (_d, store) = open();
            let mut refs = Vec::new();
            for i in 0..40 {
                let rare = if i % 13 == 0 { " zanzibar" } else { "" };
                let text = format!("{}{rare} {}", words(i, 6_000), "common ".repeat(i as usize));
                refs.push(
                    store
                        .put_one(&alice(), output("s", &format!("c{i}"), "t", &text))
                        .unwrap()
                        .result_ref,
                );
            }
            store
                .put_one(&alice(), output("other", "x", "t", "zanzibar common"))
                .unwrap();
            store.flush_index().unwrap();
            let queries = ["zanzibar", "common", "zanzibar common", "common nosuchword"];
            let before: Vec<_> = queries
                .iter()
                .map(|q| store.search_session(&alice(), "s", q, 10, 20).unwrap())
                .collect();
            store.analyze();
            for (q, before) in queries.iter().zip(&before) {
                let after = store.search_session(&alice(), "s", q, 10, 20).unwrap();
                assert_eq!(&after, before, "{q}");
                assert!(!after.is_empty(), "{q}");
            }
            let zanzibar: Vec<&str> = before[0].iter().map(|h| h.result_ref.as_str()).collect();
            assert_eq!(zanzibar.len(), 4, "{zanzibar:?}");
            assert!(zanzibar.iter().all(|r| [&refs[0], &refs[13], &refs[26], &refs[39]]
                .iter()
                .any(|x| x.as_str() == *r)));
        }

        fn no_passage_with_all_words_falls_back_to_any_word() {
            let (_d, store) = open();
            let refs = fill(&store);
            let hits = store
                .search_session(&alice(), "s1", "fox zebra", 10, 5)
                .unwrap();
            assert_eq!(hits.len(), 1);
            assert_eq!(hits[0].result_ref, refs[1]);
            // Both words exist, never in one passage: any-word ranking.
            let hits = store
                .search_session(&alice(), "s1", "fox timeout", 10, 5)
                .unwrap();
            let mut got: Vec<&str> = hits.iter().map(|h| h.result_ref.as_str()).collect();
            got.sort();
            let mut want = vec![refs[1].as_str(), refs[2].as_str()];
            want.sort();
            assert_eq!(got, want);
        }

        fn fts_syntax_in_the_query_never_errors() {
            let (_d, store) = open();
            fill(&store);
            for q in [
                "\"",
                "\"unbalanced",
                "*",
                "retry*",
                "NEAR(retry once)",
                "retry NEAR once",
                "-retry",
                "NOT",
                "AND",
                "OR retry",
                "retry AND",
                "((",
                ")",
                "col:retry",
                "^retry",
                "{a b}:c",
                "",
                "   ",
                "'",
                "retry'; DROP TABLE outputs; --",
                "a\"b\"c",
                "\u{0}",
            ] {
                let hits = store.search_session(&alice(), "s1", q, 10, 5);
                assert!(hits.is_ok(), "query {q:?}: {hits:?}");
            }
            assert!(store
                .search_session(&alice(), "s1", "***", 10, 5)
                .unwrap()
                .is_empty());
            assert_eq!(
                store
                    .search_session(&alice(), "s1", "\"retry\" AND", 10, 5)
                    .unwrap()
                    .len(),
                2
            );
        }

        fn hits_in_large_originals_point_at_the_word() {
            let (_d, store) = open();
            let mut text = words(1, 40_000);
            text.push_str(" needleword ");
            text.push_str(&words(2, 40_000));
            let r = store
                .put_one(&alice(), output("s", "c", "t", &text))
                .unwrap();
            store.flush_index().unwrap();
            let hits = store
                .search_session(&alice(), "s", "needleword", 5, 4)
                .unwrap();
            assert_eq!(hits.len(), 1);
            let w = store
                .read(&alice(), &r.result_ref, hits[0].offset as i64, 10)
                .unwrap();
            assert_eq!(w.content, "needleword");
            assert!(hits[0].snippet.contains("needleword"));
        }
    }
}

mod list {
    use super::*;

    both! {
        fn newest_first_ties_broken_by_insertion_and_filter_before_limit() {
            let (_d, store, now) = open_with_clock(config());
            for i in 0..6 {
                if i % 2 == 0 {
                    now.fetch_add(1000, Ordering::SeqCst);
                }
                let tool = if i % 3 == 0 { "grep" } else { "read_file" };
                store
                    .put_one(
                        &alice(),
                        output("s1", &format!("c{i}"), tool, &format!("output {i}")),
                    )
                    .unwrap();
            }
            store
                .put_one(&alice(), output("s2", "x", "grep", "elsewhere"))
                .unwrap();
            let all = store.list(&alice(), Some("s1"), None, 50).unwrap();
            let calls: Vec<String> = all
                .iter()
                .map(|o| o.result_ref.split('_').nth(1).unwrap().to_string())
                .collect();
            assert_eq!(calls, ["c5", "c4", "c3", "c2", "c1", "c0"]);
            // Two created in the same millisecond come back last-stored first.
            assert_eq!(all[0].created_at, all[1].created_at);
            let grep = store.list(&alice(), Some("s1"), Some("grep"), 1).unwrap();
            assert_eq!(grep.len(), 1);
            assert!(grep[0].result_ref.starts_with("tr_c3_"));
            assert_eq!(grep[0].kind, Kind::Text);
            assert_eq!(grep[0].original_chars, 8);
            assert_eq!(
                store
                    .list(&alice(), Some("s1"), Some("grep"), 50)
                    .unwrap()
                    .len(),
                2
            );
            assert_eq!(
                store.list(&alice(), None, Some("grep"), 50).unwrap().len(),
                3
            );
            assert!(store
                .list(&alice(), Some("s1"), None, 0)
                .unwrap()
                .is_empty());
            assert!(store
                .list(&alice(), Some("nope"), None, 10)
                .unwrap()
                .is_empty());
        }
    }
}

mod tenancy {
    use super::*;

    both! {
        fn one_tenant_never_sees_anothers_rows() {
            let (_d, store) = open();
            let secret = "bob's secret deployment key rotation log";
            let r = store
                .put_one(&bob(), output("shared-session", "c1", "t", secret))
                .unwrap();
            store
                .put_one(
                    &alice(),
                    output("shared-session", "c9", "t", "alice's own output"),
                )
                .unwrap();
            store.flush_index().unwrap();
            let e = store.read(&alice(), &r.result_ref, 0, -1).unwrap_err();
            assert!(matches!(e, StoreError::NotFound { .. }), "{e}");
            assert!(matches!(
                store.meta(&alice(), &r.result_ref),
                Err(StoreError::NotFound { .. })
            ));
            assert!(matches!(
                store.search(&alice(), &r.result_ref, "secret", 5, 5),
                Err(StoreError::NotFound { .. })
            ));
            let listed = store
                .list(&alice(), Some("shared-session"), None, 50)
                .unwrap();
            assert_eq!(listed.len(), 1);
            assert!(listed.iter().all(|o| o.result_ref != r.result_ref));
            assert_eq!(store.list(&alice(), None, None, 50).unwrap().len(), 1);
            assert!(store
                .search_session(&alice(), "shared-session", "secret", 10, 5)
                .unwrap()
                .is_empty());
            // Bob sees his own.
            assert_eq!(
                store.read(&bob(), &r.result_ref, 0, -1).unwrap().content,
                secret
            );
            assert_eq!(
                store
                    .search_session(&bob(), "shared-session", "secret", 10, 5)
                    .unwrap()
                    .len(),
                1
            );
        }

        fn a_session_search_answers_the_same_whatever_another_tenant_holds() {
            // The attack: Alice searches her session for a word she does
            // not hold, with words she does, and reads in the answer
            // whether the word is in Bob's outputs (a session of the same
            // name). It must read the same as a word no one holds.
            let (_d, store) = open();
            let report = store
                .put_one(&alice(), output("shared", "a1", "t", "alpha beta quarterly report"))
                .unwrap()
                .result_ref;
            let summary = store
                .put_one(&alice(), output("shared", "a2", "t", "alpha summary of the week"))
                .unwrap()
                .result_ref;
            store
                .put_one(&bob(), output("shared", "b1", "t", "zebulon alpha merger plans"))
                .unwrap();
            store.flush_index().unwrap();
            store.analyze();
            let search = |q: &str| store.search_session(&alice(), "shared", q, 10, 8).unwrap();
            // A word only Bob's output holds: the answer of a word nowhere.
            let bobs = search("alpha beta zebulon");
            let nowhere = search("alpha beta qxjvwyz");
            assert_eq!(bobs, nowhere);
            assert_eq!(bobs.len(), 1, "only the passage with both of her words: {bobs:?}");
            assert_eq!(bobs[0].result_ref, report);
            assert_eq!(search("zebulon"), search("qxjvwyz"));
            assert!(search("zebulon").is_empty());
            // A word both hold: exactly Alice's hits.
            let mut both: Vec<String> = search("alpha").into_iter().map(|h| h.result_ref).collect();
            both.sort();
            let mut hers = vec![report.clone(), summary.clone()];
            hers.sort();
            assert_eq!(both, hers);
            // Nor does the ranking move when Bob stores the word again and
            // again (a score weighing the word by the whole index would).
            let before = search("alpha beta");
            let alpha_before = search("alpha");
            for i in 0..30 {
                store
                    .put_one(&bob(), output("shared", &format!("b{i}x"), "t", &format!("alpha {i} beta")))
                    .unwrap();
                store
                    .put_one(&bob(), output("elsewhere", &format!("e{i}"), "t", &format!("alpha alpha {i}")))
                    .unwrap();
            }
            store.flush_index().unwrap();
            store.analyze();
            assert_eq!(search("alpha beta"), before);
            assert_eq!(search("alpha"), alpha_before);
            assert_eq!(search("alpha beta zebulon"), search("alpha beta qxjvwyz"));
        }

        fn same_content_and_call_id_in_two_tenants_is_two_rows_one_original() {
            let (_d, store) = open();
            let a = store
                .put_one(&alice(), output("s", "c", "t", "same text"))
                .unwrap();
            let b = store
                .put_one(&bob(), output("s", "c", "t", "same text"))
                .unwrap();
            assert_eq!(a.result_ref, b.result_ref);
            assert!(a.created && b.created);
            assert_eq!(store.stats().unwrap().originals, 1);
        }

        fn tenant_ids_are_validated_and_derived_from_credentials() {
            assert!(Tenant::new("").is_err());
            assert!(Tenant::new("has space").is_err());
            assert_eq!(Tenant::anonymous().as_str(), "anonymous");
            let t = Tenant::from_credential("Bearer sk-test");
            assert_eq!(t.as_str().len(), 16);
            assert_ne!(t, Tenant::from_credential("Bearer sk-other"));
        }
    }
}

mod retention {
    use super::*;

    const DAY: i64 = 86_400_000;

    both! {
        fn old_outputs_expire_and_say_so() {
            let (_d, store, now) = open_with_clock(config());
            let old = store
                .put_one(&alice(), output("s", "old", "t", "old output text"))
                .unwrap();
            now.fetch_add(20 * DAY, Ordering::SeqCst);
            let young = store
                .put_one(&alice(), output("s", "young", "t", "young output"))
                .unwrap();
            store.flush_index().unwrap();
            now.fetch_add(11 * DAY, Ordering::SeqCst);
            let report = store.sweep().unwrap();
            assert_eq!(report.expired_by_age, 1);
            assert_eq!(report.freed_bytes, 15);
            let e = store.read(&alice(), &old.result_ref, 0, -1).unwrap_err();
            assert!(matches!(e, StoreError::Expired { .. }), "{e}");
            assert!(e.to_string().contains("expired"), "{e}");
            assert!(matches!(
                store.meta(&alice(), &old.result_ref),
                Err(StoreError::Expired { .. })
            ));
            assert!(matches!(
                store.search(&alice(), &old.result_ref, "old", 1, 1),
                Err(StoreError::Expired { .. })
            ));
            // Expired differs from never existed, and from another tenant's view.
            assert!(matches!(
                store.read(&alice(), "tr_never_0123456789abcdef", 0, 1),
                Err(StoreError::NotFound { .. })
            ));
            assert!(matches!(
                store.read(&bob(), &old.result_ref, 0, 1),
                Err(StoreError::NotFound { .. })
            ));
            assert_eq!(
                store
                    .read(&alice(), &young.result_ref, 0, -1)
                    .unwrap()
                    .content,
                "young output"
            );
            let listed = store.list(&alice(), Some("s"), None, 10).unwrap();
            assert_eq!(listed.len(), 1);
            assert!(store
                .search_session(&alice(), "s", "old", 10, 5)
                .unwrap()
                .is_empty());
            let stats = store.stats().unwrap();
            assert_eq!(
                (stats.live_outputs, stats.expired_outputs, stats.originals),
                (1, 1, 1)
            );
        }

        fn held_is_true_only_for_the_tenants_live_outputs() {
            let (_d, store, now) = open_with_clock(StoreConfig {
                retention_days: 1,
                ..config()
            });
            let old = store.put_one(&alice(), output("s", "a", "t", "old")).unwrap();
            now.fetch_add(DAY + 1, Ordering::SeqCst);
            let new = store.put_one(&alice(), output("s", "b", "t", "new")).unwrap();
            store.sweep().unwrap();
            let refs = [
                new.result_ref.clone(),
                old.result_ref.clone(),
                "r_missing".to_string(),
                new.result_ref.clone(),
            ];
            assert_eq!(
                store.held(&alice(), &refs).unwrap(),
                [true, false, false, true]
            );
            assert_eq!(
                store.held(&bob(), &refs).unwrap(),
                [false, false, false, false]
            );
        }

        fn storing_an_expired_output_again_revives_it() {
            let (_d, store, now) = open_with_clock(config());
            let r = store
                .put_one(&alice(), output("s", "c", "t", "revive me"))
                .unwrap();
            now.fetch_add(31 * DAY, Ordering::SeqCst);
            store.sweep().unwrap();
            assert!(store.read(&alice(), &r.result_ref, 0, -1).is_err());
            let again = store
                .put_one(&alice(), output("s", "c", "t", "revive me"))
                .unwrap();
            assert!(again.created);
            assert_eq!(
                store.read(&alice(), &r.result_ref, 0, -1).unwrap().content,
                "revive me"
            );
        }

        fn shared_originals_survive_until_the_last_output_expires() {
            let (_d, store, now) = open_with_clock(config());
            let a = store
                .put_one(&alice(), output("s", "a", "t", "shared"))
                .unwrap();
            now.fetch_add(10 * DAY, Ordering::SeqCst);
            let b = store
                .put_one(&alice(), output("s", "b", "t", "shared"))
                .unwrap();
            now.fetch_add(25 * DAY, Ordering::SeqCst);
            let report = store.sweep().unwrap();
            assert_eq!((report.expired_by_age, report.freed_bytes), (1, 0));
            assert!(store.read(&alice(), &a.result_ref, 0, -1).is_err());
            assert_eq!(
                store.read(&alice(), &b.result_ref, 0, -1).unwrap().content,
                "shared"
            );
        }

        fn total_size_cap_expires_oldest_first() {
            let cfg = StoreConfig {
                max_bytes: Some(2500),
                ..config()
            };
            let (_d, store, now) = open_with_clock(cfg);
            let mut refs = Vec::new();
            for i in 0..5 {
                now.fetch_add(1, Ordering::SeqCst);
                let text = format!("{i}{}", "x".repeat(999));
                refs.push(
                    store
                        .put_one(&alice(), output("s", &format!("c{i}"), "t", &text))
                        .unwrap()
                        .result_ref,
                );
            }
            store.flush_index().unwrap();
            let report = store.sweep().unwrap();
            assert_eq!(report.expired_by_size, 3);
            assert_eq!(report.freed_bytes, 3000);
            for (i, r) in refs.iter().enumerate() {
                let res = store.read(&alice(), r, 0, 1);
                if i < 3 {
                    assert!(matches!(res, Err(StoreError::Expired { .. })), "{i}");
                } else {
                    assert!(res.is_ok(), "{i}");
                }
            }
            assert_eq!(store.stats().unwrap().original_bytes, 2000);
        }

        fn hidden_exchanges_and_response_ids_count_in_the_size_cap_oldest_first() {
            use toolstub::store::{Exchange, ResponseId};
            let cfg = StoreConfig {
                max_bytes: Some(2500),
                ..config()
            };
            let (_d, store, now) = open_with_clock(cfg);
            let exchange = |key: &str, bytes: usize| Exchange {
                key: key.to_string(),
                session_id: "s".to_string(),
                replacement: "x".repeat(bytes),
            };
            now.fetch_add(1, Ordering::SeqCst);
            assert!(store.put_exchange(&alice(), exchange("k_old", 1000)).unwrap());
            now.fetch_add(1, Ordering::SeqCst);
            let out = store
                .put_one(&alice(), output("s", "c", "t", &"y".repeat(1000)))
                .unwrap();
            now.fetch_add(1, Ordering::SeqCst);
            store
                .put_response_id(
                    &alice(),
                    ResponseId {
                        client_id: "resp_c".to_string(),
                        upstream_id: "resp_u".to_string(),
                        output: "z".repeat(1000),
                    },
                )
                .unwrap();
            now.fetch_add(1, Ordering::SeqCst);
            assert!(store.put_exchange(&alice(), exchange("k_new", 400)).unwrap());
            store.flush_index().unwrap();
            // 3,406 bytes against 2,500: the oldest thing, an exchange, goes.
            let report = store.sweep().unwrap();
            assert_eq!((report.dropped_by_size, report.expired_by_size), (1, 0), "{report:?}");
            assert_eq!(report.freed_bytes, 1000);
            let keys = ["k_old".to_string(), "k_new".to_string()];
            let kept: Vec<String> = store
                .exchanges(&alice(), &keys)
                .unwrap()
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            assert_eq!(kept, ["k_new"], "the newest exchange a live conversation needs is kept");
            assert!(store.read(&alice(), &out.result_ref, 0, 1).is_ok());
            assert!(store.response_id(&alice(), "resp_c").unwrap().is_some());
            // Under a smaller cap the next oldest goes: the original.
            let clock_now = now.clone();
            let store = store.reopen(StoreConfig {
                max_bytes: Some(1500),
                clock: Clock::from_fn(move || clock_now.load(Ordering::SeqCst)),
                ..config()
            });
            let report = store.sweep().unwrap();
            assert_eq!((report.dropped_by_size, report.expired_by_size), (0, 1), "{report:?}");
            assert!(matches!(
                store.read(&alice(), &out.result_ref, 0, 1),
                Err(StoreError::Expired { .. })
            ));
            assert!(store.response_id(&alice(), "resp_c").unwrap().is_some());
            assert_eq!(store.exchanges(&alice(), &keys).unwrap().len(), 1);
        }

        fn tombstones_are_capped_under_a_size_cap() {
            // A 1-byte cap keeps at most 10,000 tombstones (the floor).
            let cfg = StoreConfig {
                max_bytes: Some(1),
                ..config()
            };
            let (_d, store, now) = open_with_clock(cfg);
            let mut refs = Vec::new();
            for batch in 0..21 {
                now.fetch_add(1, Ordering::SeqCst);
                let outputs: Vec<NewOutput> = (0..500)
                    .map(|i| {
                        output(
                            "s",
                            &format!("c{batch}_{i}"),
                            "t",
                            &format!("out {batch} {i}"),
                        )
                    })
                    .collect();
                refs.extend(
                    store
                        .put(&alice(), outputs)
                        .unwrap()
                        .into_iter()
                        .map(|s| s.result_ref),
                );
            }
            assert_eq!(refs.len(), 10_500);
            store.flush_index().unwrap();
            let mut purged = 0;
            for _ in 0..200 {
                let report = store.sweep().unwrap();
                purged += report.purged_tombstones;
                if !report.more {
                    break;
                }
            }
            assert_eq!(
                purged, 500,
                "the oldest 500 tombstones over the cap are forgotten"
            );
            // The oldest ref now reads as unknown, the newest as expired.
            assert!(matches!(
                store.read(&alice(), &refs[0], 0, 1),
                Err(StoreError::NotFound { .. })
            ));
            assert!(matches!(
                store.read(&alice(), &refs[10_499], 0, 1),
                Err(StoreError::Expired { .. })
            ));
        }

        fn tombstones_are_forgotten_after_their_own_retention() {
            let (_d, store, now) = open_with_clock(StoreConfig {
                tombstone_days: 5,
                ..config()
            });
            let r = store
                .put_one(&alice(), output("s", "c", "t", "gone"))
                .unwrap();
            now.fetch_add(31 * DAY, Ordering::SeqCst);
            store.sweep().unwrap();
            assert!(matches!(
                store.read(&alice(), &r.result_ref, 0, 1),
                Err(StoreError::Expired { .. })
            ));
            now.fetch_add(6 * DAY, Ordering::SeqCst);
            assert_eq!(store.sweep().unwrap().purged_tombstones, 1);
            assert!(matches!(
                store.read(&alice(), &r.result_ref, 0, 1),
                Err(StoreError::NotFound { .. })
            ));
        }

        fn the_background_sweeper_expires_without_being_asked() {
            let now = Arc::new(AtomicI64::new(1_700_000_000_000));
            let clock_now = now.clone();
            let store = Store::open(StoreConfig {
                sweep_interval: Some(std::time::Duration::from_millis(20)),
                clock: Clock::from_fn(move || clock_now.load(Ordering::SeqCst)),
                ..StoreConfig::default()
            });
            let r = store
                .put_one(&alice(), output("s", "c", "t", "background"))
                .unwrap();
            now.fetch_add(31 * DAY, Ordering::SeqCst);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            loop {
                match store.read(&alice(), &r.result_ref, 0, 1) {
                    Err(StoreError::Expired { .. }) => break,
                    Ok(_) => assert!(std::time::Instant::now() < deadline, "never expired"),
                    Err(e) => panic!("{e}"),
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            drop(store); // stops both threads promptly
        }
    }
}

mod concurrency {
    use super::*;

    both! {
        fn concurrent_puts_of_the_same_content_store_it_once() {
            let (_d, store) = open();
            let text = words(9, 20_000);
            let results: Vec<_> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..8)
                    .map(|_| {
                        s.spawn(|| {
                            store
                                .put_one(&alice(), output("s", "same", "t", &text))
                                .unwrap()
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(results.iter().filter(|r| r.created).count(), 1);
            assert!(results
                .iter()
                .all(|r| r.result_ref == results[0].result_ref));
            let stats = store.stats().unwrap();
            assert_eq!((stats.live_outputs, stats.originals), (1, 1));
        }

        fn stores_opened_at_once_on_a_new_database_migrate_it_once() {
            // Replicas starting together: each applies the migrations it is
            // missing under the backend's lock, so all of them end up on one
            // schema and see each other's outputs.
            let stores = Store::open_at_once(4, config());
            let refs: Vec<String> = stores
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    s.put_one(&alice(), output("s", &format!("c{i}"), "t", &format!("from {i}")))
                        .unwrap()
                        .result_ref
                })
                .collect();
            for s in &stores {
                for (i, r) in refs.iter().enumerate() {
                    assert_eq!(s.read(&alice(), r, 0, -1).unwrap().content, format!("from {i}"));
                }
            }
        }

        fn two_store_handles_on_one_database_agree() {
            // Two processes (here: two stores, replicas on PostgreSQL)
            // writing the same content.
            let a = Store::open(config());
            let b = a.twin(config());
            let text = words(4, 10_000);
            std::thread::scope(|s| {
                s.spawn(|| {
                    for i in 0..20 {
                        a.put_one(&alice(), output("s", &format!("c{i}"), "t", &text))
                            .unwrap();
                    }
                });
                s.spawn(|| {
                    for i in 0..20 {
                        b.put_one(&alice(), output("s", &format!("c{i}"), "t", &text))
                            .unwrap();
                    }
                });
            });
            let stats = a.stats().unwrap();
            assert_eq!((stats.live_outputs, stats.originals), (20, 1));
        }

        fn readers_run_while_writing() {
            let (_d, store) = open();
            let r = store
                .put_one(&alice(), output("s", "c", "t", &words(5, 100_000)))
                .unwrap();
            std::thread::scope(|s| {
                for t in 0..4 {
                    let store = &store;
                    let r = &r;
                    s.spawn(move || {
                        for i in 0..50 {
                            let w = store.read(&alice(), &r.result_ref, i * 100, 500).unwrap();
                            assert_eq!(w.content.chars().count(), 500);
                            if t == 0 {
                                store
                                    .put_one(
                                        &alice(),
                                        output("s", &format!("w{i}"), "t", &format!("w{i}")),
                                    )
                                    .unwrap();
                            }
                        }
                    });
                }
            });
        }
    }
}

mod file {
    //! Who can read the store's files: their owner alone. A new database
    //! file is made 0600 before SQLite opens it; SQLite gives `-wal` and
    //! `-shm` the main file's mode. A file that exists keeps its mode.
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &std::path::Path) -> u32 {
        std::fs::metadata(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .permissions()
            .mode()
            & 0o777
    }

    #[test]
    fn a_new_store_and_its_wal_and_shm_are_its_owners_alone() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.db");
        let store = Store::sqlite_file(db.clone(), config());
        store
            .put_one(&alice(), output("s", "c", "t", "some output"))
            .unwrap();
        // Open: the WAL and the shared-memory index exist beside the file.
        for path in [
            db.clone(),
            dir.path().join("t.db-wal"),
            dir.path().join("t.db-shm"),
        ] {
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
        drop(store);
        assert_eq!(mode(&db), 0o600);
    }

    #[test]
    fn an_existing_files_mode_is_left_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.db");
        drop(Store::sqlite_file(db.clone(), config()));
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o640)).unwrap();
        let store = Store::sqlite_file(db.clone(), config());
        store
            .put_one(&alice(), output("s", "c", "t", "some output"))
            .unwrap();
        assert_eq!(mode(&db), 0o640);
        assert_eq!(
            mode(&dir.path().join("t.db-wal")),
            0o640,
            "SQLite copies the file's mode"
        );
    }

    /// `auto_vacuum` must be set before the first write (switching to WAL
    /// writes the header): retention's `incremental_vacuum` does nothing
    /// on a file without it.
    #[test]
    fn a_new_file_gives_freed_pages_back_incrementally() {
        let dir = tempfile::tempdir().unwrap();
        drop(Store::sqlite_file(dir.path().join("t.db"), config()));
        let conn = rusqlite::Connection::open(dir.path().join("t.db")).unwrap();
        let mode: i64 = conn
            .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, 2, "INCREMENTAL");
    }
}

mod durability {
    //! Once `put` returns, the original survives `kill -9`. The child is this
    //! test binary re-run with `--exact durability::child_writer`; with
    //! `TOOLSTUB_STORE_CHILD_DB` set it writes outputs forever and prints
    //! `REF <seed> <ref>` after each put returns. The parent kills it with
    //! SIGKILL after a random number of reports and checks every reported ref.
    //! Odd rounds run the child with `Durability::Normal` (no fsync per
    //! commit), which promises exactly this much: a process kill loses
    //! nothing that was reported.
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    const CHILD_ENV: &str = "TOOLSTUB_STORE_CHILD_DB";

    fn content(seed: u64) -> String {
        // 100 to ~300k characters, multi-byte words.
        let size = [100usize, 5_000, 60_000, 300_000][(seed % 4) as usize];
        format!("seed {seed}\n{}", words(seed, size))
    }

    #[test]
    fn child_writer() {
        let Ok(db) = std::env::var(CHILD_ENV) else {
            return; // only does something when the parent runs it
        };
        let start: u64 = std::env::var("TOOLSTUB_STORE_CHILD_SEED")
            .unwrap()
            .parse()
            .unwrap();
        let durability = match std::env::var("TOOLSTUB_STORE_CHILD_DURABILITY").as_deref() {
            Ok("normal") => Durability::Normal,
            _ => Durability::Full,
        };
        let config = StoreConfig {
            durability,
            ..config()
        };
        let store = Store::sqlite_file(db.into(), config);
        let mut seed = start;
        loop {
            // Alternate single puts and batches of three (one transaction).
            let batch: Vec<u64> = if seed.is_multiple_of(2) {
                vec![seed]
            } else {
                vec![seed, seed + 1, seed + 2]
            };
            let outs = batch
                .iter()
                .map(|s| output("durable", &format!("call{s}"), "t", &content(*s)))
                .collect();
            let stored = store.put(&alice(), outs).unwrap();
            let mut out = std::io::stdout().lock();
            for (s, r) in batch.iter().zip(&stored) {
                use std::io::Write;
                writeln!(out, "REF {s} {}", r.result_ref).unwrap();
                out.flush().unwrap();
            }
            seed += batch.len() as u64;
        }
    }

    #[test]
    fn stored_outputs_survive_sigkill() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("durable.db");
        let exe = std::env::current_exe().unwrap();
        let mut rng = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1;
        eprintln!("durability rng seed {rng}");
        let mut reported: Vec<(u64, String)> = Vec::new();
        for round in 0..6u64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let kill_after = 1 + (rng % 12) as usize;
            let mut child = Command::new(&exe)
                .args([
                    "--exact",
                    "durability::child_writer",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env(CHILD_ENV, &db)
                .env("TOOLSTUB_STORE_CHILD_SEED", (round * 1_000_000).to_string())
                .env(
                    "TOOLSTUB_STORE_CHILD_DURABILITY",
                    if round % 2 == 1 { "normal" } else { "full" },
                )
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let stdout = child.stdout.take().unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            let reader = std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if let Some(rest) = line.strip_prefix("REF ") {
                        let (seed, r) = rest.split_once(' ').unwrap();
                        if tx
                            .send((seed.parse::<u64>().unwrap(), r.to_string()))
                            .is_err()
                        {
                            break;
                        }
                    }
                }
            });
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut seen = 0;
            while seen < kill_after {
                let left = deadline.saturating_duration_since(Instant::now());
                match rx.recv_timeout(left) {
                    Ok(item) => {
                        reported.push(item);
                        seen += 1;
                    }
                    Err(_) => panic!("child reported only {seen} refs in round {round}"),
                }
            }
            // Kill at a random moment inside the next put (busy-wait up to ~2 ms).
            let spin = Instant::now() + Duration::from_micros(rng % 2000);
            while Instant::now() < spin {
                std::hint::spin_loop();
            }
            child.kill().unwrap(); // SIGKILL on Unix
            child.wait().unwrap();
            reader.join().unwrap();
            // Lines the child printed before it died still count.
            reported.extend(rx.try_iter());
            // Reopen (recovery) and check everything reported so far.
            let store = Store::sqlite_file(db.clone(), config());
            for (seed, r) in &reported {
                let w = store
                    .read(&alice(), r, 0, -1)
                    .unwrap_or_else(|e| panic!("round {round}: ref {r} lost: {e}"));
                assert_eq!(w.content, content(*seed), "round {round}: ref {r} differs");
            }
        }
        assert!(reported.len() >= 6);
    }
}

mod exchanges {
    use super::*;
    use toolstub::store::Exchange;

    fn exchange(key: &str, replacement: &str) -> Exchange {
        Exchange {
            key: key.to_string(),
            session_id: "s1".to_string(),
            replacement: replacement.to_string(),
        }
    }

    both! {
        fn the_first_exchange_for_a_key_wins_and_survives_a_reopen() {
            let store = Store::open(config());
            assert!(store.put_exchange(&alice(), exchange("k1", "[1]")).unwrap());
            assert!(!store.put_exchange(&alice(), exchange("k1", "[2]")).unwrap());
            assert!(store.put_exchange(&alice(), exchange("k2", "[3]")).unwrap());
            let store = store.reopen(config());
            let keys = vec![
                "k2".to_string(),
                "k1".to_string(),
                "k9".to_string(),
                "k1".to_string(),
            ];
            assert_eq!(
                store.exchanges(&alice(), &keys).unwrap(),
                [
                    ("k1".to_string(), "[1]".to_string()),
                    ("k2".to_string(), "[3]".to_string())
                ]
            );
        }

        fn another_tenant_never_sees_an_exchange() {
            let (_dir, store) = open();
            store
                .put_exchange(&alice(), exchange("k", "alice's"))
                .unwrap();
            assert!(store
                .exchanges(&bob(), &["k".to_string()])
                .unwrap()
                .is_empty());
            store.put_exchange(&bob(), exchange("k", "bob's")).unwrap();
            assert_eq!(
                store.exchanges(&alice(), &["k".to_string()]).unwrap()[0].1,
                "alice's"
            );
        }

        fn retention_deletes_old_exchanges() {
            let (_dir, store, now) = open_with_clock(StoreConfig {
                retention_days: 1,
                ..config()
            });
            store.put_exchange(&alice(), exchange("old", "x")).unwrap();
            now.fetch_add(86_400_000 + 1, Ordering::SeqCst);
            store.put_exchange(&alice(), exchange("new", "y")).unwrap();
            store.sweep().unwrap();
            let keys = vec!["old".to_string(), "new".to_string()];
            assert_eq!(
                store.exchanges(&alice(), &keys).unwrap(),
                [("new".to_string(), "y".to_string())]
            );
        }
    }
}

mod response_ids {
    use super::*;
    use toolstub::store::ResponseId;

    fn id(client: &str, upstream: &str) -> ResponseId {
        ResponseId {
            client_id: client.to_string(),
            upstream_id: upstream.to_string(),
            output: "[]".to_string(),
        }
    }

    both! {
        fn a_client_id_maps_to_its_upstream_id_per_tenant() {
            let (_dir, store) = open();
            store
                .put_response_id(&alice(), id("resp_1", "resp_3"))
                .unwrap();
            assert_eq!(
                store.response_id(&alice(), "resp_1").unwrap(),
                Some(id("resp_1", "resp_3"))
            );
            assert_eq!(store.response_id(&bob(), "resp_1").unwrap(), None);
            assert_eq!(store.response_id(&alice(), "resp_2").unwrap(), None);
            store
                .put_response_id(&alice(), id("resp_1", "resp_4"))
                .unwrap();
            assert_eq!(
                store
                    .response_id(&alice(), "resp_1")
                    .unwrap()
                    .map(|m| m.upstream_id),
                Some("resp_4".to_string())
            );
        }

        fn retention_deletes_old_ids() {
            let (_dir, store, now) = open_with_clock(StoreConfig {
                retention_days: 1,
                ..config()
            });
            store.put_response_id(&alice(), id("old", "x")).unwrap();
            now.fetch_add(86_400_000 + 1, Ordering::SeqCst);
            store.put_response_id(&alice(), id("new", "y")).unwrap();
            store.sweep().unwrap();
            assert_eq!(store.response_id(&alice(), "old").unwrap(), None);
            assert!(store.response_id(&alice(), "new").unwrap().is_some());
        }
    }
}

mod answers {
    use super::*;
    use toolstub::store::{Answer, Exchange, ResponseId};

    both! {
        fn an_answer_keeps_its_exchange_and_its_id_together() {
            let (_dir, store) = open();
            let answer = Answer {
                exchange: Some(Exchange {
                    key: "k".to_string(),
                    session_id: "s".to_string(),
                    replacement: "[1]".to_string(),
                }),
                response_id: Some(ResponseId {
                    client_id: "resp_a".to_string(),
                    upstream_id: "resp_b".to_string(),
                    output: "[]".to_string(),
                }),
            };
            assert!(store.put_answer(&alice(), answer.clone()).unwrap());
            assert!(
                !store.put_answer(&alice(), answer).unwrap(),
                "the exchange was kept already"
            );
            assert_eq!(
                store.exchanges(&alice(), &["k".to_string()]).unwrap().len(),
                1
            );
            assert_eq!(
                store
                    .response_id(&alice(), "resp_a")
                    .unwrap()
                    .map(|m| m.upstream_id),
                Some("resp_b".to_string())
            );
            assert!(!store.put_answer(&alice(), Answer::default()).unwrap());
        }
    }
}

mod cache_clock {
    //! Prompt-cache expiries: per conversation (tenant, session), the
    //! requests, named by their message counts, that found the provider's
    //! prompt cache expired; decided once in the store, so every retry and
    //! every replica answer alike.
    use super::*;

    /// The cache's lifetime in these tests (five minutes).
    const TTL: i64 = 300_000;

    /// No expiry point.
    const NONE: [u32; 0] = [];

    /// A config whose clock the test moves, to open and reopen stores with.
    fn clocked() -> (StoreConfig, Arc<AtomicI64>) {
        let now = Arc::new(AtomicI64::new(1_700_000_000_000));
        let clock_now = now.clone();
        let cfg = StoreConfig {
            clock: Clock::from_fn(move || clock_now.load(Ordering::SeqCst)),
            ..config()
        };
        (cfg, now)
    }

    /// Alice's session "s" asked about from one thread per message count
    /// at once, the threads taking turns on `stores`: each count and its
    /// answer.
    fn at_once(stores: &[&Store], messages: &[u32]) -> Vec<(u32, Vec<u32>)> {
        let start = std::sync::Barrier::new(messages.len());
        std::thread::scope(|s| {
            let handles: Vec<_> = messages
                .iter()
                .enumerate()
                .map(|(i, &n)| {
                    let (store, start) = (stores[i % stores.len()], &start);
                    s.spawn(move || {
                        start.wait();
                        (n, store.cache_expiries(&alice(), "s", n, TTL).unwrap())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    /// Waits until `store`'s clock moves on (tenant, session) landed and
    /// left the clock at (`at`, `messages`): a call that records nothing
    /// moves the clock without waiting for it. SQLite's writer runs its
    /// jobs in order, so an index flush (a job queued after them) is all
    /// the wait; on PostgreSQL the row is polled, for ten seconds at most.
    fn lands(store: &Store, tenant: &Tenant, session: &str, at: i64, messages: i64) {
        if harness::db() == harness::Db::Sqlite {
            store.flush_index().unwrap();
        }
        let sql = format!(
            "SELECT count(*) FROM session_clocks WHERE tenant = '{}' AND session_id = '{session}' \
             AND last_at = {at} AND last_messages = {messages}",
            tenant.as_str()
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while store.count(&sql) != 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the clock of {session} never became ({at}, {messages})"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    both! {
        fn a_first_request_records_nothing() {
            let (_d, store, now) = open_with_clock(config());
            assert_eq!(store.cache_expiries(&alice(), "s", 3, TTL).unwrap(), NONE);
            // Its retry, however late, is still the first request.
            now.fetch_add(10 * TTL, Ordering::SeqCst);
            assert_eq!(store.cache_expiries(&alice(), "s", 3, TTL).unwrap(), NONE);
            assert_eq!(store.count("SELECT count(*) FROM cache_expiries"), 0);
        }

        fn a_request_after_the_ttl_records_itself_and_its_retries_answer_alike() {
            let (cfg, now) = clocked();
            let store = Store::open(cfg.clone());
            assert_eq!(store.cache_expiries(&alice(), "s", 2, TTL).unwrap(), NONE);
            // Exactly the ttl later: not past it.
            now.fetch_add(TTL, Ordering::SeqCst);
            assert_eq!(store.cache_expiries(&alice(), "s", 4, TTL).unwrap(), NONE);
            now.fetch_add(TTL + 1, Ordering::SeqCst);
            assert_eq!(store.cache_expiries(&alice(), "s", 6, TTL).unwrap(), [6]);
            // Its retry at once, and after another ttl, get the same answer.
            assert_eq!(store.cache_expiries(&alice(), "s", 6, TTL).unwrap(), [6]);
            now.fetch_add(2 * TTL, Ordering::SeqCst);
            assert_eq!(store.cache_expiries(&alice(), "s", 6, TTL).unwrap(), [6]);
            // The next request within the ttl of the last call: no new point.
            assert_eq!(store.cache_expiries(&alice(), "s", 8, TTL).unwrap(), [6]);
            now.fetch_add(TTL + 1, Ordering::SeqCst);
            assert_eq!(store.cache_expiries(&alice(), "s", 10, TTL).unwrap(), [6, 10]);
            // The decision is durable: a reopened store answers the same.
            now.fetch_add(2 * TTL, Ordering::SeqCst);
            let store = store.reopen(cfg);
            assert_eq!(store.cache_expiries(&alice(), "s", 10, TTL).unwrap(), [6, 10]);
            assert_eq!(store.cache_expiries(&alice(), "s", 6, TTL).unwrap(), [6]);
        }

        fn a_request_with_fewer_messages_never_records() {
            let (_d, store, now) = open_with_clock(config());
            assert_eq!(store.cache_expiries(&alice(), "s", 10, TTL).unwrap(), NONE);
            now.fetch_add(3 * TTL, Ordering::SeqCst);
            // Retries of older requests (or a fork from before): nothing.
            assert_eq!(store.cache_expiries(&alice(), "s", 5, TTL).unwrap(), NONE);
            now.fetch_add(3 * TTL, Ordering::SeqCst);
            assert_eq!(store.cache_expiries(&alice(), "s", 9, TTL).unwrap(), NONE);
            assert_eq!(store.count("SELECT count(*) FROM cache_expiries"), 0);
            // They still moved the clock: the next request is within the ttl.
            assert_eq!(store.cache_expiries(&alice(), "s", 11, TTL).unwrap(), NONE);
        }

        fn points_are_answered_up_to_the_requests_messages() {
            let (_d, store, now) = open_with_clock(config());
            store.cache_expiries(&alice(), "s", 1, TTL).unwrap();
            for n in [4, 8, 12] {
                now.fetch_add(TTL + 1, Ordering::SeqCst);
                assert_eq!(store.cache_expiries(&alice(), "s", n, TTL).unwrap().last(), Some(&n));
            }
            assert_eq!(store.cache_expiries(&alice(), "s", 3, TTL).unwrap(), NONE);
            assert_eq!(store.cache_expiries(&alice(), "s", 4, TTL).unwrap(), [4]);
            assert_eq!(store.cache_expiries(&alice(), "s", 11, TTL).unwrap(), [4, 8]);
            assert_eq!(store.cache_expiries(&alice(), "s", 13, TTL).unwrap(), [4, 8, 12]);
        }

        /// Two branches of one conversation (a message edited and sent
        /// again) share its session and clock, not the points each
        /// recorded after they parted; a point from before they parted is
        /// both branches' history.
        fn a_fork_gets_only_the_points_of_its_own_branch() {
            let (_d, store, now) = open_with_clock(config());
            let a = |n: usize| format!("a{n}");
            // Branch b is a up to 4 messages, its own from the fifth on.
            let b = |n: usize| if n <= 4 { format!("a{n}") } else { format!("b{n}") };
            assert!(store.cache_expiries_on(&alice(), "s", 2, TTL, a).unwrap().is_empty());
            now.fetch_add(2 * TTL, Ordering::SeqCst);
            assert_eq!(store.cache_expiries_on(&alice(), "s", 4, TTL, a).unwrap(), [4]);
            now.fetch_add(2 * TTL, Ordering::SeqCst);
            assert_eq!(store.cache_expiries_on(&alice(), "s", 6, TTL, a).unwrap(), [4, 6]);
            // b at 8 messages, after a pause: its own point at 8; a's at 6
            // is not on b.
            now.fetch_add(2 * TTL, Ordering::SeqCst);
            assert_eq!(store.cache_expiries_on(&alice(), "s", 8, TTL, b).unwrap(), [4, 8]);
            assert_eq!(store.cache_expiries_on(&alice(), "s", 8, TTL, b).unwrap(), [4, 8]);
            // a, continuing, sees neither of b's.
            assert_eq!(store.cache_expiries_on(&alice(), "s", 9, TTL, a).unwrap(), [4, 6]);
            // The branches share the clock: a at 9 moved it, so b's next
            // request, within the ttl of it, records nothing.
            assert_eq!(store.cache_expiries_on(&alice(), "s", 10, TTL, b).unwrap(), [4, 8]);
            assert_eq!(store.count("SELECT count(*) FROM cache_expiries"), 3);
        }

        fn one_session_id_under_two_tenants_is_two_conversations() {
            let (_d, store, now) = open_with_clock(config());
            store.cache_expiries(&alice(), "s", 2, TTL).unwrap();
            now.fetch_add(2 * TTL, Ordering::SeqCst);
            assert_eq!(store.cache_expiries(&alice(), "s", 4, TTL).unwrap(), [4]);
            // Bob's "s" is new to the store: alice's clock and point are not his.
            assert_eq!(store.cache_expiries(&bob(), "s", 4, TTL).unwrap(), NONE);
            assert_eq!(store.cache_expiries(&bob(), "s", 6, TTL).unwrap(), NONE);
            now.fetch_add(2 * TTL, Ordering::SeqCst);
            assert_eq!(store.cache_expiries(&bob(), "s", 8, TTL).unwrap(), [8]);
            // And bob's calls moved neither alice's clock nor her points.
            assert_eq!(store.cache_expiries(&alice(), "s", 8, TTL).unwrap(), [4, 8]);
            assert_eq!(store.cache_expiries(&bob(), "s", 8, TTL).unwrap(), [8]);
            // Another session of one tenant is another conversation too.
            assert_eq!(store.cache_expiries(&alice(), "t", 8, TTL).unwrap(), NONE);
        }

        fn no_ttl_never_expires_but_moves_the_clock() {
            let (_d, store, now) = open_with_clock(config());
            store.cache_expiries(&alice(), "s", 2, TTL).unwrap();
            now.fetch_add(100 * TTL, Ordering::SeqCst);
            assert_eq!(store.cache_expiries(&alice(), "s", 4, 0).unwrap(), NONE);
            assert_eq!(store.cache_expiries(&alice(), "s", 5, -1).unwrap(), NONE);
            // Its retry with a ttl is a retry; the next request is within it.
            assert_eq!(store.cache_expiries(&alice(), "s", 5, TTL).unwrap(), NONE);
            assert_eq!(store.cache_expiries(&alice(), "s", 6, TTL).unwrap(), NONE);
            assert_eq!(store.count("SELECT count(*) FROM cache_expiries"), 0);
        }

        fn the_sweep_forgets_old_clocks_and_their_points() {
            const DAY: i64 = 86_400_000;
            let (_d, store, now) = open_with_clock(StoreConfig {
                retention_days: 1,
                ..config()
            });
            for tenant in [alice(), bob()] {
                store.cache_expiries(&tenant, "old", 2, TTL).unwrap();
            }
            now.fetch_add(2 * TTL, Ordering::SeqCst);
            for tenant in [alice(), bob()] {
                assert_eq!(store.cache_expiries(&tenant, "old", 4, TTL).unwrap(), [4]);
            }
            now.fetch_add(DAY / 2, Ordering::SeqCst);
            store.cache_expiries(&alice(), "young", 2, TTL).unwrap();
            now.fetch_add(2 * TTL, Ordering::SeqCst);
            assert_eq!(store.cache_expiries(&alice(), "young", 4, TTL).unwrap(), [4]);
            // "old" was last used more than a day ago, "young" not.
            now.fetch_add(DAY / 2, Ordering::SeqCst);
            store.sweep().unwrap();
            assert_eq!(store.count("SELECT count(*) FROM session_clocks"), 1);
            assert_eq!(store.count("SELECT count(*) FROM cache_expiries"), 1);
            assert_eq!(store.cache_expiries(&alice(), "young", 4, TTL).unwrap(), [4]);
            // A forgotten conversation starts again as a first request.
            assert_eq!(store.cache_expiries(&alice(), "old", 6, TTL).unwrap(), NONE);
            assert_eq!(store.cache_expiries(&bob(), "old", 4, TTL).unwrap(), NONE);
        }

        fn without_retention_the_sweep_keeps_every_clock() {
            let (_d, store, now) = open_with_clock(StoreConfig {
                retention_days: 0,
                ..config()
            });
            store.cache_expiries(&alice(), "s", 2, TTL).unwrap();
            now.fetch_add(2 * TTL, Ordering::SeqCst);
            assert_eq!(store.cache_expiries(&alice(), "s", 4, TTL).unwrap(), [4]);
            now.fetch_add(10 * 365 * 86_400_000, Ordering::SeqCst);
            store.sweep().unwrap();
            assert_eq!(store.count("SELECT count(*) FROM session_clocks"), 1);
            assert_eq!(store.cache_expiries(&alice(), "s", 4, TTL).unwrap(), [4]);
        }

        fn concurrent_requests_of_one_session_decide_once() {
            // Eight calls at once, half of them on a second store on the
            // same data (a second replica on PostgreSQL, a second process's
            // writer on SQLite).
            let (cfg, now) = clocked();
            let a = Store::open(cfg.clone());
            let b = a.twin(cfg);
            let stores = [&a, &b];
            // A new session, eight first requests at once: one clock.
            assert!(at_once(&stores, &[2; 8]).iter().all(|(_, p)| p.is_empty()));
            // One new request after the ttl, eight attempts at once: one
            // point, and every attempt answered with it.
            now.fetch_add(2 * TTL, Ordering::SeqCst);
            for (_, answer) in at_once(&stores, &[5; 8]) {
                assert_eq!(answer, [5]);
            }
            assert_eq!(a.count("SELECT count(*) FROM session_clocks"), 1);
            assert_eq!(a.count("SELECT count(*) FROM cache_expiries"), 1);
            // Eight different new requests at once, after the ttl: the
            // first to hold the clock records itself; the others find the
            // clock just moved (and the request with fewer messages than
            // the point does not see it).
            now.fetch_add(2 * TTL, Ordering::SeqCst);
            let answers = at_once(&stores, &[10, 11, 12, 13, 14, 15, 16, 17]);
            let points = a.count("SELECT count(*) FROM cache_expiries");
            assert_eq!(points, 2, "{answers:?}");
            let first = answers
                .iter()
                .find(|(n, p)| p.last() == Some(n))
                .map(|(n, _)| *n)
                .expect("one request recorded itself");
            for (n, answer) in &answers {
                let expected: Vec<u32> = if *n >= first { vec![5, first] } else { vec![5] };
                assert_eq!(answer, &expected, "{answers:?}");
            }
        }
    }

    both! {
        fn a_call_that_records_nothing_moves_the_clock_without_waiting() {
            let (cfg, now) = clocked();
            let a = Store::open(cfg.clone());
            let t0 = now.load(Ordering::SeqCst);
            // A first request: answered from the read, its clock started
            // by a move nobody waits for, which lands.
            assert_eq!(a.cache_expiries(&alice(), "s", 2, TTL).unwrap(), NONE);
            lands(&a, &alice(), "s", t0, 2);
            now.fetch_add(TTL / 2, Ordering::SeqCst);
            assert_eq!(a.cache_expiries(&alice(), "s", 4, TTL).unwrap(), NONE);
            lands(&a, &alice(), "s", t0 + TTL / 2, 4);
            // Another replica (which knows nothing of a's moves in flight)
            // finds the clock moved: more than the ttl after the first
            // request, within it of the second, so not expired.
            let b = a.twin(cfg);
            now.fetch_add(TTL / 2 + 1, Ordering::SeqCst);
            assert_eq!(b.cache_expiries(&alice(), "s", 6, TTL).unwrap(), NONE);
            lands(&b, &alice(), "s", t0 + TTL + 1, 6);
            assert_eq!(a.count("SELECT count(*) FROM cache_expiries"), 0);
            // Past the ttl of the last request, the next one records
            // itself, once, whichever replica asks.
            now.fetch_add(TTL + 1, Ordering::SeqCst);
            assert_eq!(a.cache_expiries(&alice(), "s", 8, TTL).unwrap(), [8]);
            assert_eq!(b.cache_expiries(&alice(), "s", 8, TTL).unwrap(), [8]);
            assert_eq!(b.cache_expiries(&alice(), "s", 9, TTL).unwrap(), [8]);
            assert_eq!(a.count("SELECT count(*) FROM cache_expiries"), 1);
        }

        fn a_clock_move_goes_forward_only_and_never_records() {
            let (cfg, now) = clocked();
            let a = Store::open(cfg);
            // A replica whose clock the test sets apart from a's.
            let b_now = Arc::new(AtomicI64::new(0));
            let b = a.twin(StoreConfig {
                clock: {
                    let b_now = b_now.clone();
                    Clock::from_fn(move || b_now.load(Ordering::SeqCst))
                },
                ..config()
            });
            let t0 = now.load(Ordering::SeqCst);
            assert_eq!(a.cache_expiries(&alice(), "s", 4, TTL).unwrap(), NONE);
            lands(&a, &alice(), "s", t0, 4);
            // From a replica behind: more messages, an older time. The
            // clock takes the messages and keeps its time.
            b_now.store(t0 - 2 * TTL, Ordering::SeqCst);
            assert_eq!(b.cache_expiries(&alice(), "s", 9, TTL).unwrap(), NONE);
            lands(&b, &alice(), "s", t0, 9);
            // Fewer messages (a retry of an older request, or a fork) long
            // after the ttl: not a new request, so no point; the clock
            // takes the time and keeps its messages.
            now.fetch_add(3 * TTL, Ordering::SeqCst);
            assert_eq!(a.cache_expiries(&alice(), "s", 3, TTL).unwrap(), NONE);
            lands(&a, &alice(), "s", t0 + 3 * TTL, 9);
            assert_eq!(a.count("SELECT count(*) FROM cache_expiries"), 0);
            // So the next request, from either replica, is within the ttl.
            now.fetch_add(TTL / 2, Ordering::SeqCst);
            b_now.store(now.load(Ordering::SeqCst), Ordering::SeqCst);
            assert_eq!(b.cache_expiries(&alice(), "s", 10, TTL).unwrap(), NONE);
            assert_eq!(a.cache_expiries(&alice(), "s", 11, TTL).unwrap(), NONE);
            lands(&a, &alice(), "s", t0 + 3 * TTL + TTL / 2, 11);
            assert_eq!(a.count("SELECT count(*) FROM cache_expiries"), 0);
        }

        fn a_first_requests_clock_is_what_another_replica_decides_on() {
            let (cfg, now) = clocked();
            let a = Store::open(cfg.clone());
            let b = a.twin(cfg);
            let t0 = now.load(Ordering::SeqCst);
            assert_eq!(a.cache_expiries(&alice(), "s", 2, TTL).unwrap(), NONE);
            lands(&a, &alice(), "s", t0, 2);
            // The next request, past the ttl, on the other replica: the
            // clock a's first request started makes it a new request that
            // found the cache expired; its retry on a answers alike.
            now.fetch_add(TTL + 1, Ordering::SeqCst);
            assert_eq!(b.cache_expiries(&alice(), "s", 4, TTL).unwrap(), [4]);
            assert_eq!(a.cache_expiries(&alice(), "s", 4, TTL).unwrap(), [4]);
            assert_eq!(a.count("SELECT count(*) FROM cache_expiries"), 1);
        }
    }
}

mod ledger {
    use super::*;
    use toolstub::store::{LedgerBatch, LedgerEntry, OutputTokens, ReportQuery};
    use toolstub::usage::Usage;

    fn saving(session: &str, at: i64, tool: &str, first_seen: bool, tokens: u64) -> LedgerEntry {
        LedgerEntry {
            session_id: session.to_string(),
            at,
            model: Some("gpt-x".to_string()),
            tool: Some(tool.to_string()),
            kind: Some(Kind::Json),
            first_seen,
            outputs: 1,
            chars_saved: tokens * 4,
            tokens_saved: tokens,
            ..LedgerEntry::default()
        }
    }

    fn turn(session: &str, at: i64, input: u64, cache_read: u64) -> LedgerEntry {
        LedgerEntry {
            session_id: session.to_string(),
            at,
            requests: 1,
            rounds: 1,
            usage: Usage {
                input,
                cache_read,
                cache_write: 5,
                output: 2,
            },
            ..LedgerEntry::default()
        }
    }

    both! {
        /// A client's model or tool name holding a NUL does not fail the
        /// batch it is in (every tenant's rows of the last moments).
        fn a_nul_in_a_name_fails_no_batch() {
            let (_d, s) = open();
            let a = alice();
            let mut odd = saving("s", 1, "Re\0ad", true, 7);
            odd.model = Some("gpt\0x".to_string());
            let entries = vec![(a.clone(), odd), (a.clone(), turn("s", 2, 10, 20))];
            s.record(LedgerBatch { entries, tokens: Vec::new(), ..Default::default() }).unwrap();
            let report = s.report(Some(&a), ReportQuery::default()).unwrap();
            assert_eq!((report.totals.requests, report.totals.tokens_saved), (1, 7));
        }

        fn ledger_rows_past_retention_are_summed_per_day_and_totals_kept() {
            let cfg = StoreConfig {
                retention_days: 30,
                ..config()
            };
            let (_d, s, now) = open_with_clock(cfg);
            let a = alice();
            let t0 = now.load(Ordering::SeqCst);
            let day = 86_400_000;
            s.record(LedgerBatch {
                entries: vec![
                    (a.clone(), turn("s_old", t0, 100, 900)),
                    (a.clone(), saving("s_old", t0, "Read", true, 700)),
                    (a.clone(), turn("s_old", t0 + 1_000, 50, 1000)),
                    (a.clone(), saving("s_old", t0 + 1_000, "Read", false, 700)),
                    (a.clone(), turn("s_old", t0 + day, 10, 0)),
                ],
                tokens: Vec::new(),
                ..Default::default()
            })
            .unwrap();
            let before = s.report(Some(&a), ReportQuery::default()).unwrap().totals;
            now.fetch_add(40 * day, Ordering::SeqCst);
            s.record(LedgerBatch {
                entries: vec![(a.clone(), turn("s_new", t0 + 40 * day, 1, 1))],
                tokens: Vec::new(),
                ..Default::default()
            })
            .unwrap();
            let report = s.sweep().unwrap();
            assert_eq!(report.ledger_rolled_up, 5, "{report:?}");
            let r = s.report(Some(&a), ReportQuery::default()).unwrap();
            let t = r.totals;
            assert_eq!(
                (t.requests, t.tokens_saved, t.tokens_saved_first_seen, t.input_tokens, t.cache_read_tokens),
                (before.requests + 1, before.tokens_saved, before.tokens_saved_first_seen,
                 before.input_tokens + 1, before.cache_read_tokens + 1),
                "every total kept"
            );
            let tools: Vec<(&str, u64)> = r.by_tool.iter().map(|(n, s)| (n.as_str(), s.tokens_saved)).collect();
            assert_eq!(tools, vec![("Read", 1400)]);
            let sessions: Vec<&str> = r.sessions.iter().map(|(id, _)| id.as_str()).collect();
            assert_eq!(sessions, ["s_new"], "a summed row is no session");
            // Swept again: the per-day rows stay as they are.
            let again = s.sweep().unwrap();
            assert_eq!(again.ledger_rolled_up, 0);
            assert_eq!(s.report(Some(&a), ReportQuery::default()).unwrap().totals, t);
        }

        fn ledger_rows_over_their_share_of_max_bytes_are_summed_per_hour() {
            // An eighth of 8 MiB over 128 bytes a row is under the floor:
            // 10,000 rows as written are kept.
            let cfg = StoreConfig {
                max_bytes: Some(8 << 20),
                ..config()
            };
            let (_d, s, now) = open_with_clock(cfg);
            let a = alice();
            let t0 = now.load(Ordering::SeqCst);
            let kept = s.put_one(&a, output("live", "c1", "Read", &"x".repeat(30_000))).unwrap();
            let hour = 3_600_000;
            let rows = 16_000;
            let entries = (0..rows)
                .map(|i| {
                    let at = t0 + i * 1_000;
                    let session = format!("s{}", i / 100);
                    if i % 2 == 0 {
                        (a.clone(), turn(&session, at, 10, 20))
                    } else {
                        (a.clone(), saving(&session, at, "Read", i % 4 == 1, 7))
                    }
                })
                .collect();
            s.record(LedgerBatch { entries, tokens: Vec::new(), ..Default::default() }).unwrap();
            let before = s.report(Some(&a), ReportQuery::default()).unwrap();
            let before_hourly = s.report(Some(&a), ReportQuery { bucket_ms: hour, ..ReportQuery::default() }).unwrap();
            let report = s.sweep().unwrap();
            // Down to three quarters of the cap: the oldest 8,500 go.
            assert_eq!(report.ledger_rolled_up, 8_500, "{report:?}");
            assert!(!report.more, "{report:?}");
            assert_eq!(report.expired_by_size, 0, "the ledger's share evicts no output");
            assert_eq!(s.sweep().unwrap().ledger_rolled_up, 0, "under the cap now");
            let after = s.report(Some(&a), ReportQuery { bucket_ms: hour, ..ReportQuery::default() }).unwrap();
            assert_eq!(after.totals.requests, before.totals.requests);
            assert_eq!(after.totals.tokens_saved, before.totals.tokens_saved);
            assert_eq!(after.totals.tokens_saved_first_seen, before.totals.tokens_saved_first_seen);
            assert_eq!(after.totals.input_tokens, before.totals.input_tokens);
            let tools: Vec<(&str, u64)> = after.by_tool.iter().map(|(n, s)| (n.as_str(), s.outputs)).collect();
            assert_eq!(tools, vec![("Read", 8_000)]);
            // Each hour's series point sums to what it did before.
            let points = |r: &toolstub::store::Report| -> Vec<(i64, u64, u64, u64)> {
                r.series.iter().map(|(at, s)| (*at, s.requests, s.outputs, s.tokens_saved)).collect()
            };
            assert_eq!(points(&after), points(&before_hourly));
            // The newest rows keep their sessions; the summed ones lost theirs.
            let sessions = s.report(Some(&a), ReportQuery { sessions: 1000, ..ReportQuery::default() }).unwrap().sessions;
            let ids: Vec<&str> = sessions.iter().map(|(id, _)| id.as_str()).collect();
            assert_eq!(ids.len(), 75, "{ids:?}");
            assert!(ids.contains(&"s85") && ids.contains(&"s159") && !ids.contains(&"s84"));
            assert!(s.read(&a, &kept.result_ref, 0, 10).is_ok(), "the live output stays");
        }

        fn reports_sum_by_tool_kind_time_and_session_per_tenant() {
            let (_d, s) = open();
            let (a, b) = (alice(), Tenant::new("bbbbbbbbbbbbbbbb").unwrap());
            let stored = s.put_one(&a, output("s1", "c1", "Read", &"x".repeat(30_000))).unwrap();
            let batch = LedgerBatch {
                entries: vec![
                    (a.clone(), turn("s1", 1_000, 100, 900)),
                    (a.clone(), saving("s1", 1_000, "Read", true, 700)),
                    (a.clone(), turn("s1", 61_000, 50, 1000)),
                    (a.clone(), saving("s1", 61_000, "Read", false, 700)),
                    (a.clone(), saving("s1", 61_000, "Bash", true, 300)),
                    (a.clone(), turn("s2", 130_000, 10, 0)),
                    (b.clone(), turn("s9", 1_000, 1, 1)),
                    (b.clone(), saving("s9", 1_000, "Read", true, 5)),
                ],
                tokens: vec![(
                    a.clone(),
                    OutputTokens {
                        result_ref: stored.result_ref.clone(),
                        original_tokens: 3_750,
                        stub_tokens: 250,
                    },
                )],
                ..Default::default()
            };
            s.record(batch).unwrap();
            let r = s.report(Some(&a), ReportQuery::default()).unwrap();
            let t = r.totals;
            assert_eq!((t.requests, t.rounds, t.outputs, t.outputs_first_seen), (3, 3, 3, 2));
            assert_eq!((t.tokens_saved, t.tokens_saved_first_seen, t.tokens_saved_repeated), (1700, 1000, 700));
            assert_eq!((t.input_tokens, t.cache_read_tokens, t.cache_write_tokens, t.output_tokens), (160, 1900, 15, 6));
            assert_eq!(t.chars_saved, 6800);
            assert_eq!((t.first_at, t.last_at), (1_000, 130_000));
            let tools: Vec<(&str, u64)> = r.by_tool.iter().map(|(n, s)| (n.as_str(), s.tokens_saved)).collect();
            assert_eq!(tools, vec![("Read", 1400), ("Bash", 300)]);
            assert_eq!(r.by_kind.len(), 1);
            assert_eq!(r.by_kind[0].0, "json");
            let series: Vec<(i64, u64, u64)> = r.series.iter().map(|(at, s)| (*at, s.requests, s.tokens_saved)).collect();
            assert_eq!(series, vec![(0, 1, 700), (60_000, 1, 1000), (120_000, 1, 0)]);
            let sessions: Vec<(&str, u64)> = r.sessions.iter().map(|(id, s)| (id.as_str(), s.requests)).collect();
            assert_eq!(sessions, vec![("s2", 1), ("s1", 2)], "most recently active first");
            assert_eq!(r.by_model.len(), 2, "{:?}", r.by_model);
            let priced = r.by_model.iter().find(|m| m.model.as_deref() == Some("gpt-x")).unwrap();
            assert_eq!((priced.first_seen_tokens, priced.repeated_tokens), (1000, 700));

            // One session; another tenant; every tenant (the CLI).
            let one = s.report(Some(&a), ReportQuery { session: Some("s2".into()), ..ReportQuery::default() }).unwrap();
            assert_eq!((one.totals.requests, one.totals.tokens_saved), (1, 0));
            let other = s.report(Some(&b), ReportQuery::default()).unwrap();
            assert_eq!((other.totals.requests, other.totals.tokens_saved), (1, 5));
            let all = s.report(None, ReportQuery { sessions: 1, ..ReportQuery::default() }).unwrap();
            assert_eq!(all.totals.requests, 4);
            assert_eq!(all.sessions.len(), 1);

            // Token counts land on the output, once.
            let meta = s.meta(&a, &stored.result_ref).unwrap();
            assert_eq!((meta.original_tokens, meta.stub_tokens), (Some(3_750), Some(250)));
            s.record(LedgerBatch {
                entries: Vec::new(),
                tokens: vec![(a.clone(), OutputTokens { result_ref: stored.result_ref.clone(), original_tokens: 1, stub_tokens: 1 })],
                ..Default::default()
            }).unwrap();
            assert_eq!(s.meta(&a, &stored.result_ref).unwrap().original_tokens, Some(3_750));
            // Nothing recorded: zeros, no rows.
            let empty = s.report(Some(&Tenant::new("cccccccccccccccc").unwrap()), ReportQuery::default()).unwrap();
            assert_eq!(empty.totals, toolstub::store::Sums::default());
            assert!(empty.series.is_empty() && empty.sessions.is_empty());
        }
    }
}

mod keys {
    //! Client keys: only their hash is stored; one active key per name;
    //! every handle on the database sees every key; retention never
    //! touches them.
    use super::*;
    use toolstub::auth::{ClientKey, KeyHash};

    fn key() -> ClientKey {
        ClientKey::generate().expect("random")
    }

    /// Every replica reads the keys each second: on SQLite from a read
    /// connection, so the answer comes while the writer waits. Here the
    /// writer is held by another connection's write lock, a put waits
    /// behind it, and the keys are read all the same.
    #[test]
    fn keys_are_read_while_the_sqlite_writer_waits() {
        let store = Store::open(config());
        let made = store.create_key("alice", key().hash, 1_000).unwrap();
        let db = store.sqlite_path().expect("a SQLite store");
        let holder = rusqlite::Connection::open(&db).unwrap();
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        std::thread::scope(|s| {
            let put = s.spawn(|| store.put_one(&alice(), output("s", "c", "t", "waits")));
            std::thread::sleep(std::time::Duration::from_millis(100));
            assert_eq!(store.keys().unwrap(), std::slice::from_ref(&made));
            assert!(!put.is_finished(), "the writer was waiting all along");
            holder.execute_batch("ROLLBACK").unwrap();
            put.join().unwrap().unwrap();
        });
    }

    both! {
        fn a_key_is_recorded_listed_revoked_and_its_name_freed() {
            let (_d, store) = open();
            let (a, b) = (key(), key());
            let alice = store.create_key("alice", a.hash, 1_000).unwrap();
            assert_eq!(
                (alice.name.as_str(), alice.hash, &alice.tenant, alice.created_at),
                ("alice", a.hash, &a.hash.tenant(), 1_000)
            );
            assert_eq!(store.keys().unwrap(), std::slice::from_ref(&alice));
            // A second active key of one name: refused, naming it, nothing written.
            let e = store.create_key("alice", b.hash, 2_000).unwrap_err();
            assert!(matches!(e, StoreError::InvalidArgument(_)), "{e}");
            assert!(e.to_string().contains("\"alice\""), "{e}");
            assert_eq!(store.keys().unwrap(), std::slice::from_ref(&alice));
            // One hash is one key: never recorded twice, under any name.
            let e = store.create_key("carol", a.hash, 2_000).unwrap_err();
            assert!(matches!(e, StoreError::InvalidArgument(_)), "{e}");
            for bad in ["", "a b", "x\n", &"n".repeat(65)] {
                let e = store.create_key(bad, key().hash, 2_000).unwrap_err();
                assert!(matches!(e, StoreError::InvalidArgument(_)), "{bad:?}: {e}");
            }
            let bob = store.create_key("bob", b.hash, 3_000).unwrap();
            assert_eq!(store.keys().unwrap(), [alice.clone(), bob.clone()], "by name");
            assert!(store.revoke_key("alice", 4_000).unwrap());
            assert!(!store.revoke_key("alice", 5_000).unwrap(), "none active any more");
            assert!(!store.revoke_key("nobody", 5_000).unwrap());
            assert_eq!(store.keys().unwrap(), std::slice::from_ref(&bob));
            // The name is free again; the revoked key's hash is not.
            let e = store.create_key("alice", a.hash, 6_000).unwrap_err();
            assert!(matches!(e, StoreError::InvalidArgument(_)), "{e}");
            let c = key();
            let again = store.create_key("alice", c.hash, 6_000).unwrap();
            assert_eq!(again.tenant, c.hash.tenant());
            assert_ne!(again.tenant, alice.tenant);
            assert_eq!(store.keys().unwrap(), [again, bob]);
        }

        fn a_key_made_by_one_handle_is_seen_by_another() {
            // Two processes on one SQLite file; two replicas on one
            // PostgreSQL database.
            let a = Store::open(config());
            let b = a.twin(config());
            let k = key();
            let made = a.create_key("ci-bot", k.hash, 1_000).unwrap();
            assert_eq!(b.keys().unwrap(), [made]);
            assert!(b.revoke_key("ci-bot", 2_000).unwrap());
            assert!(a.keys().unwrap().is_empty());
            // Both record one name at once: one wins, the other is refused.
            let (x, y) = (key(), key());
            let (ra, rb) = std::thread::scope(|s| {
                let ta = s.spawn(|| a.create_key("deploy", x.hash, 3_000));
                let tb = s.spawn(|| b.create_key("deploy", y.hash, 3_000));
                (ta.join().unwrap(), tb.join().unwrap())
            });
            assert_eq!(ra.is_ok() as u8 + rb.is_ok() as u8, 1, "{ra:?} {rb:?}");
            let won = ra.or(rb).unwrap();
            assert_eq!(a.keys().unwrap(), std::slice::from_ref(&won));
            assert_eq!(b.keys().unwrap(), [won]);
        }

        fn retention_and_the_size_cap_never_touch_keys() {
            let (_d, store, now) = open_with_clock(StoreConfig {
                retention_days: 1,
                max_bytes: Some(1),
                ..config()
            });
            let k = key();
            let record = store.create_key("old", k.hash, now.load(Ordering::SeqCst)).unwrap();
            store
                .put_one(&alice(), output("s", "c", "t", &words(3, 20_000)))
                .unwrap();
            let years = 10 * 365 * 86_400_000;
            let report = store.sweep_at(now.load(Ordering::SeqCst) + years).unwrap();
            assert!(report.expired_by_age + report.expired_by_size > 0, "{report:?}");
            assert_eq!(store.keys().unwrap(), [record]);
        }

        fn the_database_holds_a_keys_hash_never_the_key() {
            let (_d, store) = open();
            let k = key();
            store.create_key("alice", k.hash, 1_000).unwrap();
            let body = &k.secret["tsk_".len()..];
            match store.sqlite_path() {
                Some(db) => {
                    let mut bytes = Vec::new();
                    for suffix in ["", "-wal"] {
                        let path = format!("{}{suffix}", db.display());
                        bytes.extend(std::fs::read(&path).unwrap_or_default());
                    }
                    let has = |needle: &str| {
                        bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
                    };
                    // The search can find what is there: the hash is.
                    assert!(has(&k.hash.hex()), "the hash is stored");
                    assert!(!has(body), "the key is not");
                }
                None => {
                    let rows = store
                        .postgres_texts("SELECT row_to_json(k)::text FROM client_keys k")
                        .expect("rows");
                    assert_eq!(rows.len(), 1);
                    assert!(rows[0].contains(&k.hash.hex()), "{rows:?}");
                    assert!(!rows[0].contains(body), "{rows:?}");
                }
            }
            assert_eq!(KeyHash::of(&k.secret), k.hash);
        }
    }
}

mod write_health {
    //! On SQLite, `health()` (what `/healthz` says) tells whether the file
    //! can be written: reads keep working on a full disk, writes fail. The
    //! fault is the kernel's own: this test binary re-runs itself as a
    //! child (`--exact write_health::child_file_size_limit`) that lowers
    //! its RLIMIT_FSIZE to one byte, so every write to the store's files
    //! fails as on a full disk, then raises it again.
    use super::*;
    use std::process::Command;
    use std::time::Duration;
    use toolstub::store::Health;

    const CHILD_ENV: &str = "TOOLSTUB_STORE_HEALTH_CHILD";
    /// The child's `health_probe_after`.
    const PROBE_AFTER: Duration = Duration::from_millis(200);

    /// Sets the soft limit on the size of files this process writes.
    fn file_size_limit(bytes: Option<u64>) {
        // SAFETY: getrlimit/setrlimit read and write a local struct; the
        // soft limit stays within the hard one.
        unsafe {
            let mut limit = std::mem::zeroed::<libc::rlimit>();
            assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit), 0);
            limit.rlim_cur = bytes.map_or(limit.rlim_max, |b| b as libc::rlim_t);
            assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
        }
    }

    fn degraded(health: &Health, words: &str) {
        match health {
            Health::Degraded(why) => assert!(why.contains(words), "{why}"),
            Health::Ok => panic!("healthy while writes fail ({words})"),
        }
    }

    #[test]
    fn child_file_size_limit() {
        if std::env::var_os(CHILD_ENV).is_none() {
            return; // only does something when the parent runs it
        }
        // SAFETY: ignoring SIGXFSZ (a write past the limit then fails
        // with EFBIG instead of killing the process).
        unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
        let store = Store::open(StoreConfig {
            health_probe_after: PROBE_AFTER,
            ..config()
        });
        let first = store
            .put_one(&alice(), output("s", "c0", "t", "written before the fault"))
            .unwrap();
        assert_eq!(store.health(), Health::Ok);
        // An idle store finds out by its probe.
        file_size_limit(Some(1));
        std::thread::sleep(PROBE_AFTER * 2);
        degraded(&store.health(), "a write probe failed");
        // A put fails, and says so; reads still work.
        let e = store
            .put_one(&alice(), output("s", "c1", "t", &words(1, 50_000)))
            .unwrap_err();
        assert!(matches!(e, StoreError::CommitFailed(_)), "{e}");
        degraded(&store.health(), "the last write failed");
        assert_eq!(
            store
                .read(&alice(), &first.result_ref, 0, -1)
                .unwrap()
                .content,
            "written before the fault"
        );
        // The fault gone, the probe finds the store writable again.
        file_size_limit(None);
        std::thread::sleep(PROBE_AFTER * 2);
        assert_eq!(store.health(), Health::Ok);
        // And a write that succeeds heals it at once.
        file_size_limit(Some(1));
        assert!(store
            .put_one(&alice(), output("s", "c2", "t", &words(2, 50_000)))
            .is_err());
        degraded(&store.health(), "the last write failed");
        file_size_limit(None);
        store
            .put_one(&alice(), output("s", "c3", "t", &words(3, 50_000)))
            .unwrap();
        assert_eq!(store.health(), Health::Ok);
        println!("HEALTH PLAYED");
    }

    #[test]
    fn sqlite_health_is_degraded_while_the_file_cannot_be_written() {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "write_health::child_file_size_limit",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_ENV, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("HEALTH PLAYED"),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    both! {
        fn a_store_that_writes_is_healthy() {
            let (_d, store) = open();
            store.put_one(&alice(), output("s", "c", "t", "text")).unwrap();
            assert_eq!(store.health(), Health::Ok);
        }
    }
}
