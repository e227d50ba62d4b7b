//! The last object this replica wrote at each key. A write that reads the watch cache right
//! after its own previous write would otherwise start from the state before it (the cache
//! learns of writes from etcd a moment later), lose the compare-and-swap and pay a second round
//! trip. Only ever a hint: the newer of it and the cache is used, and the compare-and-swap still
//! decides.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;

/// Keys remembered before the map is emptied (bounded memory).
pub const RECENT_WRITES: usize = 10_000;

/// One write: the bytes stored (as etcd holds them, without `resourceVersion`) and the
/// revision that wrote them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub bytes: Bytes,
    pub rv: i64,
}

/// Recent writes by etcd key. A std `Mutex`: held for a map operation, never across an await.
pub struct RecentWrites {
    by_key: Mutex<HashMap<String, Written>>,
    capacity: usize,
}

impl RecentWrites {
    pub fn new(capacity: usize) -> RecentWrites {
        RecentWrites {
            by_key: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    /// What this replica last wrote at `key`, if it still remembers.
    pub fn get(&self, key: &str) -> Option<Written> {
        self.by_key
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    /// Records what this replica just wrote at `key` (`None`: it removed the object).
    pub fn remember(&self, key: &str, written: Option<Written>) {
        let mut by_key = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        match written {
            Some(w) => {
                // Emptying beats an LRU here: the map is a hint, and a burst of distinct keys
                // simply starts it over.
                if by_key.len() >= self.capacity && !by_key.contains_key(key) {
                    by_key.clear();
                }
                by_key.insert(key.to_string(), w);
            }
            None => {
                by_key.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(name: &str) -> Written {
        Written {
            bytes: Bytes::from(name.to_string()),
            rv: 1,
        }
    }

    #[test]
    fn remembers_the_last_write_and_forgets_removals() {
        let r = RecentWrites::new(10);
        r.remember("/a", Some(obj("a")));
        r.remember("/a", Some(obj("a2")));
        assert_eq!(r.get("/a").unwrap(), obj("a2"));
        r.remember("/a", None);
        assert!(r.get("/a").is_none());
    }

    #[test]
    fn memory_stays_bounded() {
        let r = RecentWrites::new(3);
        for k in ["/a", "/b", "/c"] {
            r.remember(k, Some(obj(k)));
        }
        // Rewriting a known key keeps the others.
        r.remember("/c", Some(obj("c")));
        assert!(r.get("/a").is_some());
        // A new key past the bound starts over.
        r.remember("/d", Some(obj("d")));
        assert!(r.get("/a").is_none());
        assert!(r.get("/d").is_some());
    }
}
