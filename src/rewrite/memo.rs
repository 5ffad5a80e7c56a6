//! A bounded, process-wide memo of what the rewrite derives from one tool
//! output's text: its SHA-256 and its synopsis.
//!
//! Every turn resends the whole history, so most outputs in a request were
//! seen before. A cheap content key (xxh3-128 of the output's bytes as they
//! came, their length, and the MIME hint) finds them again without decoding,
//! re-hashing or re-summarizing.
//! Memoizing a pure function keeps the rewrite pure: a hit returns exactly
//! what a miss would compute.

use crate::synopsis::Synopsis;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// What the rewrite knows of one text.
#[derive(Clone, Debug)]
pub struct Facts {
    pub sha256: String,
    /// The text's length in characters.
    pub chars: usize,
    /// The synopsis and the preview budget it was computed at.
    pub synopsis: (usize, Synopsis),
}

impl Facts {
    /// Roughly the heap bytes an entry holds (its strings), for the memo's
    /// size gauge.
    fn approx_bytes(&self) -> usize {
        let s = &self.synopsis.1;
        let lines = |v: &[String]| v.iter().map(|l| l.len() + 24).sum::<usize>();
        std::mem::size_of::<Facts>()
            + self.sha256.len()
            + s.title.len()
            + s.sample.len()
            + lines(&s.summary)
            + lines(&s.structure)
            + lines(&s.notable_items)
    }
}

/// The hash and length of an output's identifying bytes, whether they are
/// decoded text (not JSON as sent: a text may spell another output's
/// literal, quotes and escapes included), and its MIME type.
type Key = (u128, usize, bool, Option<String>);

pub struct Memo {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    map: HashMap<Key, Arc<Facts>>,
    /// Insertion order, for eviction (first in, first out).
    order: VecDeque<Key>,
    /// The sum of the entries' `approx_bytes`.
    bytes: usize,
}

impl Memo {
    /// A memo holding at most `capacity` entries (0: remembers nothing).
    pub fn new(capacity: usize) -> Memo {
        Memo {
            capacity,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The content key of an output's bytes (as they came, encoded or not:
    /// `decoded` says which).
    pub fn key(identity: &[u8], decoded: bool, mime: Option<&str>) -> Key {
        (
            xxhash_rust::xxh3::xxh3_128(identity),
            identity.len(),
            decoded,
            mime.map(str::to_string),
        )
    }

    pub fn get(&self, key: &Key) -> Option<Arc<Facts>> {
        if self.capacity == 0 {
            return None;
        }
        let inner = match self.inner.lock() {
            Ok(i) => i,
            Err(poisoned) => poisoned.into_inner(),
        };
        inner.map.get(key).cloned()
    }

    pub fn put(&self, key: Key, facts: Facts) {
        if self.capacity == 0 {
            return;
        }
        let mut inner = match self.inner.lock() {
            Ok(i) => i,
            Err(poisoned) => poisoned.into_inner(),
        };
        if inner.map.contains_key(&key) {
            return;
        }
        while inner.map.len() >= self.capacity {
            match inner.order.pop_front() {
                Some(old) => {
                    if let Some(gone) = inner.map.remove(&old) {
                        inner.bytes = inner.bytes.saturating_sub(gone.approx_bytes());
                    }
                }
                None => break,
            }
        }
        inner.bytes += facts.approx_bytes();
        inner.order.push_back(key.clone());
        inner.map.insert(key, Arc::new(facts));
    }

    pub fn len(&self) -> usize {
        self.with_inner(|i| i.map.len())
    }

    /// Roughly the heap bytes the entries hold.
    pub fn bytes(&self) -> usize {
        self.with_inner(|i| i.bytes)
    }

    fn with_inner<T>(&self, f: impl FnOnce(&Inner) -> T) -> T {
        match self.inner.lock() {
            Ok(i) => f(&i),
            Err(poisoned) => f(&poisoned.into_inner()),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
