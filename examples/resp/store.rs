//! The key space: keys copied (they are small), values of the server's own type (a
//! `PacketChain` of pooled packets for the packetpipe server, `Bytes` for the tokio-util one),
//! expiry checked lazily on access.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A stored string value, as the commands need it.
pub trait Value: Sized {
    /// A value holding a copy of `bytes` (a small argument, or a number INCR formatted).
    fn copy_from(bytes: &[u8]) -> Self;

    /// Length in bytes.
    fn len(&self) -> usize;

    /// The value's bytes, in order, as one or more slices.
    fn for_each_chunk(&self, f: impl FnMut(&[u8]));
}

struct Entry<V> {
    value: V,
    expires: Option<Instant>,
}

impl<V> Entry<V> {
    fn expired(&self, now: &mut Option<Instant>) -> bool {
        match self.expires {
            None => false,
            Some(at) => at <= *now.get_or_insert_with(Instant::now),
        }
    }
}

/// Counters a test or a benchmark can read from another thread.
#[derive(Debug, Default)]
pub struct Stats {
    /// Requests answered (protocol errors included), published once per batch.
    pub requests: AtomicU64,
}

/// The key space.
pub struct Store<V> {
    map: HashMap<Box<[u8]>, Entry<V>>,
    /// Some key may carry an expiry (set by SET EX/PX, cleared by FLUSHALL): lookups then check
    /// it, which costs a second lookup when the entry has expired.
    expiring: bool,
    /// The time of the request being executed, read at most once per request.
    now: Option<Instant>,
    stats: Arc<Stats>,
}

impl<V> Default for Store<V> {
    fn default() -> Self {
        Store::new(Arc::default())
    }
}

/// What SET should do when the key exists or does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    Always,
    /// NX: only if the key does not exist.
    IfAbsent,
    /// XX: only if it does.
    IfPresent,
}

/// The expiry SET gives the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// None (a plain SET removes an earlier one).
    Never,
    At(Instant),
    /// KEEPTTL: whatever the key had.
    Keep,
}

impl<V> Store<V> {
    pub fn new(stats: Arc<Stats>) -> Self {
        Store {
            map: HashMap::new(),
            expiring: false,
            now: None,
            stats,
        }
    }

    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// A new request is being executed: the clock is read again when an expiry needs it.
    pub fn begin_request(&mut self) {
        self.now = None;
    }

    /// Count `n` answered requests.
    pub fn answered(&self, n: u64) {
        self.stats.requests.fetch_add(n, Ordering::Relaxed);
    }

    /// The current time (read once per request).
    pub fn now(&mut self) -> Instant {
        *self.now.get_or_insert_with(Instant::now)
    }

    /// The live value of `key`, removing it if it has expired.
    pub fn get(&mut self, key: &[u8]) -> Option<&mut V> {
        if self.expiring && self.remove_if_expired(key) {
            return None;
        }
        self.map.get_mut(key).map(|entry| &mut entry.value)
    }

    /// Whether `key` holds a live value.
    pub fn contains(&mut self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }

    /// Store `value` under `key` (reusing the key's allocation when it exists), unless
    /// `condition` says otherwise; whether it was stored.
    pub fn set(&mut self, key: &[u8], value: V, condition: Condition, expiry: Expiry) -> bool {
        let exists = match condition {
            Condition::Always => None,
            _ => Some(self.contains(key)),
        };
        match (condition, exists) {
            (Condition::IfAbsent, Some(true)) | (Condition::IfPresent, Some(false)) => {
                return false
            }
            _ => {}
        }
        let expires = match expiry {
            Expiry::Never => None,
            Expiry::At(at) => {
                self.expiring = true;
                Some(at)
            }
            Expiry::Keep => {
                let mut now = self.now;
                let kept = self
                    .map
                    .get(key)
                    .filter(|entry| !entry.expired(&mut now))
                    .and_then(|entry| entry.expires);
                self.now = now;
                kept
            }
        };
        if let Some(entry) = self.map.get_mut(key) {
            // Replaced in place: the old value is dropped (its pooled blocks go home), the key
            // keeps its allocation.
            entry.value = value;
            entry.expires = expires;
            return true;
        }
        self.map.insert(key.into(), Entry { value, expires });
        true
    }

    /// Replace the live value of `key` keeping its expiry (INCR), or insert it without one.
    pub fn replace(&mut self, key: &[u8], value: V) {
        match self.get(key) {
            Some(old) => *old = value,
            None => {
                self.map.insert(
                    key.into(),
                    Entry {
                        value,
                        expires: None,
                    },
                );
            }
        }
    }

    /// Remove `key`; whether it held a live value.
    pub fn remove(&mut self, key: &[u8]) -> bool {
        let mut now = self.now;
        let live = self
            .map
            .remove(key)
            .is_some_and(|entry| !entry.expired(&mut now));
        self.now = now;
        live
    }

    /// Remove every key.
    pub fn clear(&mut self) {
        self.map.clear();
        self.expiring = false;
    }

    /// Keys stored (expired ones not yet removed included).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    fn remove_if_expired(&mut self, key: &[u8]) -> bool {
        let mut now = self.now;
        let expired = self
            .map
            .get(key)
            .is_some_and(|entry| entry.expired(&mut now));
        self.now = now;
        if expired {
            self.map.remove(key);
        }
        expired
    }
}
