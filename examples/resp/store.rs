//! The key space: keys copied (they are small), values kept in the server's own type (pooled
//! packets for the packetpipe server, `Bytes` for the tokio-util one), expiry checked lazily on
//! access.
//!
//! An entry is the key's allocation and the kept value, nothing else: a key's expiry, which
//! few keys have, lives in a map of its own, so that a million keys without one do not each
//! carry an empty `Option<Instant>` (16 bytes, a quarter of the packetpipe server's entry).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A string value as the commands take it out of a request, and the form the key space keeps
/// it in.
pub trait Value: Sized {
    /// What an entry holds: the value in its most compact form.
    type Kept: Kept;

    /// A value holding a copy of `bytes` (a small argument, or a number INCR formatted).
    fn copy_from(bytes: &[u8]) -> Self;

    /// The value as an entry keeps it.
    fn keep(self) -> Self::Kept;

    /// Replace the value `slot` keeps with this one, reusing the slot's storage where it can
    /// (a SET that replaces a value then allocates nothing).
    fn keep_in(self, slot: &mut Self::Kept) {
        *slot = self.keep();
    }
}

/// A kept value's bytes, as replies and INCR read them.
pub trait Kept {
    /// Length in bytes.
    fn len(&self) -> usize;

    /// The value's bytes, in order, as one or more slices.
    fn for_each_chunk(&self, f: impl FnMut(&[u8]));
}

/// Counters a test or a benchmark can read from another thread.
#[derive(Debug, Default)]
pub struct Stats {
    /// Requests answered (protocol errors included), published once per batch.
    pub requests: AtomicU64,
}

/// The key space.
pub struct Store<V: Value> {
    map: HashMap<Box<[u8]>, V::Kept>,
    /// The keys that carry an expiry (SET EX/PX). While it is empty, as it is for most key
    /// spaces, a lookup does not consult it.
    expires: HashMap<Box<[u8]>, Instant>,
    /// The time of the request being executed, read at most once per request.
    now: Option<Instant>,
    stats: Arc<Stats>,
}

impl<V: Value> Default for Store<V> {
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

impl<V: Value> Store<V> {
    pub fn new(stats: Arc<Stats>) -> Self {
        Store {
            map: HashMap::new(),
            expires: HashMap::new(),
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
    pub fn get(&mut self, key: &[u8]) -> Option<&mut V::Kept> {
        if !self.expires.is_empty() && self.remove_if_expired(key) {
            return None;
        }
        self.map.get_mut(key)
    }

    /// Whether `key` holds a live value.
    pub fn contains(&mut self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }

    /// Store `value` under `key` (reusing the key's allocation, and the old value's storage
    /// where it can, when the key exists), unless `condition` says otherwise; whether it was
    /// stored.
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
        match expiry {
            // KEEPTTL keeps the expiry of a live key; an expired one is gone with its expiry.
            Expiry::Keep => {
                if !self.expires.is_empty() {
                    self.remove_if_expired(key);
                }
            }
            Expiry::Never => {
                if !self.expires.is_empty() {
                    self.expires.remove(key);
                }
            }
            Expiry::At(at) => match self.expires.get_mut(key) {
                Some(slot) => *slot = at,
                None => {
                    self.expires.insert(key.into(), at);
                }
            },
        }
        self.put(key, value);
        true
    }

    /// Replace the live value of `key` keeping its expiry (INCR), or insert it without one.
    pub fn replace(&mut self, key: &[u8], value: V) {
        if !self.expires.is_empty() {
            self.remove_if_expired(key);
        }
        self.put(key, value);
    }

    /// Remove `key`; whether it held a live value.
    pub fn remove(&mut self, key: &[u8]) -> bool {
        if self.expires.is_empty() {
            return self.map.remove(key).is_some();
        }
        let expired = self.remove_if_expired(key);
        self.expires.remove(key);
        !expired && self.map.remove(key).is_some()
    }

    /// Remove every key.
    pub fn clear(&mut self) {
        self.map.clear();
        self.expires.clear();
    }

    /// Keys stored (expired ones not yet removed included).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Keep `value` under `key`, in place when the key exists.
    fn put(&mut self, key: &[u8], value: V) {
        match self.map.get_mut(key) {
            // Replaced in place: the old value is dropped (its pooled blocks go home) or its
            // storage reused, the key keeps its allocation.
            Some(slot) => value.keep_in(slot),
            None => {
                self.map.insert(key.into(), value.keep());
            }
        }
    }

    /// Remove `key` and its expiry if it has expired; whether it had.
    fn remove_if_expired(&mut self, key: &[u8]) -> bool {
        let Some(&at) = self.expires.get(key) else {
            return false;
        };
        if at > self.now() {
            return false;
        }
        self.expires.remove(key);
        self.map.remove(key);
        true
    }
}
