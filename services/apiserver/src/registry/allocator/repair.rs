//! The repair of a range (Kubernetes' `ipallocator/controller.Repair` and its node port twin),
//! pure: the bitmap rebuilt from the values the Services hold, each value held but not marked
//! marked, and a value marked but held by none (a leak: a create that crashed between its
//! allocation and its write, or a release that never came) freed only once repairs in a row
//! have found it so, over a time no request can outlast, so that an allocation whose object
//! is still being written is never taken for a leak.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::bitmap::Bitmap;
use super::range::{Range, Value};

/// Repairs in a row that must find a value leaked before it is freed (Kubernetes'
/// `numRepairsBeforeLeakCleanup`).
pub const REPAIRS_BEFORE_LEAK_CLEANUP: u32 = 3;

/// The values found leaked by the last repairs: by offset, how many repairs in a row found
/// each so, and when the first did. At most one entry per value of the range.
#[derive(Debug, Default)]
pub struct Leaks {
    seen: HashMap<usize, Leak>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Leak {
    repairs: u32,
    since: Instant,
}

/// What one repair makes of a range.
#[derive(Debug)]
pub struct Repair {
    /// The bitmap to write: every value held, and the leaks not freed yet.
    pub bitmap: Bitmap,
    /// Values held by an object but not marked (marked now).
    pub marked: Vec<Value>,
    /// Values held by more than one object (Kubernetes' `ClusterIPAlreadyAllocated`).
    pub duplicates: Vec<Value>,
    /// Values held by an object but not in the range, as the object has them.
    pub out_of_range: Vec<String>,
    /// Leaks freed by this repair.
    pub freed: Vec<Value>,
    /// Leaks kept marked until a later repair.
    pub leaked: Vec<Value>,
    /// The leaks to remember once this repair is written.
    leaks: HashMap<usize, Leak>,
}

impl Leaks {
    /// Remembers what `repair` found, once its bitmap is written.
    pub fn commit(&mut self, repair: Repair) {
        self.seen = repair.leaks;
    }
}

/// Rebuilds `range`'s bitmap from `held` (every value the objects hold, as they write them),
/// given what is `stored` (`None`: nothing usable) and the `leaks` earlier repairs found. A
/// leak is freed when this is at least the [`REPAIRS_BEFORE_LEAK_CLEANUP`]th repair in a row
/// to find it and the first did so at least `grace` before `now`.
pub fn plan(
    range: &Range,
    stored: Option<&Bitmap>,
    held: impl IntoIterator<Item = String>,
    leaks: &Leaks,
    now: Instant,
    grace: Duration,
) -> Repair {
    let mut bitmap = Bitmap::new(range.max());
    let mut out = Repair {
        bitmap: Bitmap::new(0),
        marked: Vec::new(),
        duplicates: Vec::new(),
        out_of_range: Vec::new(),
        freed: Vec::new(),
        leaked: Vec::new(),
        leaks: HashMap::new(),
    };
    for v in held {
        let Some((value, i)) = range
            .parse_value(&v)
            .and_then(|value| Some((value, range.offset_of(value)?)))
        else {
            out.out_of_range.push(v);
            continue;
        };
        if !bitmap.set(i) {
            out.duplicates.push(value);
        } else if !stored.is_some_and(|s| s.has(i)) {
            out.marked.push(value);
        }
    }
    for i in stored.iter().flat_map(|s| s.iter()) {
        if bitmap.has(i) {
            continue;
        }
        let leak = match leaks.seen.get(&i) {
            Some(l) => Leak {
                repairs: l.repairs + 1,
                since: l.since,
            },
            None => Leak {
                repairs: 1,
                since: now,
            },
        };
        let value = range.value_at(i);
        if leak.repairs >= REPAIRS_BEFORE_LEAK_CLEANUP && now.duration_since(leak.since) >= grace {
            out.freed.push(value);
        } else {
            bitmap.set(i);
            out.leaked.push(value);
            out.leaks.insert(i, leak);
        }
    }
    out.bitmap = bitmap;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::allocator::range::PortRange;

    fn ports() -> Range {
        Range::Ports(PortRange::parse("30000-30099").unwrap())
    }

    fn bitmap(values: &[Value]) -> Bitmap {
        let r = ports();
        let mut b = Bitmap::new(r.max());
        for v in values {
            b.set(r.offset_of(*v).unwrap());
        }
        b
    }

    fn values(b: &Bitmap) -> Vec<Value> {
        b.iter().map(|i| ports().value_at(i)).collect()
    }

    fn held(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn values_held_but_not_marked_are_marked_and_oddities_reported() {
        let stored = bitmap(&[30001]);
        let now = Instant::now();
        let r = plan(
            &ports(),
            Some(&stored),
            held(&["30001", "30002", "30002", "40000", "x"]),
            &Leaks::default(),
            now,
            Duration::ZERO,
        );
        assert_eq!(values(&r.bitmap), [30001, 30002]);
        assert_eq!(r.marked, [30002]);
        assert_eq!(r.duplicates, [30002]);
        assert_eq!(r.out_of_range, ["40000", "x"]);
        assert!(r.freed.is_empty() && r.leaked.is_empty());
    }

    #[test]
    fn a_leak_is_freed_on_the_third_repair_in_a_row_and_not_before_the_grace() {
        let grace = Duration::from_secs(120);
        let stored = bitmap(&[30001, 30005]);
        let mut leaks = Leaks::default();
        let start = Instant::now();
        let repair = |leaks: &Leaks, at: Duration| {
            plan(
                &ports(),
                Some(&stored),
                held(&["30001"]),
                leaks,
                start + at,
                grace,
            )
        };
        let first = repair(&leaks, Duration::ZERO);
        assert_eq!(
            (first.leaked.clone(), first.freed.clone()),
            (vec![30005], vec![])
        );
        assert_eq!(values(&first.bitmap), [30001, 30005], "kept for now");
        leaks.commit(first);
        let second = repair(&leaks, Duration::from_secs(60));
        assert_eq!(second.leaked, [30005]);
        leaks.commit(second);
        // The third repair in a row, but within the grace: kept.
        let third = repair(&leaks, Duration::from_secs(90));
        assert_eq!(third.leaked, [30005]);
        leaks.commit(third);
        let fourth = repair(&leaks, Duration::from_secs(120));
        assert_eq!(fourth.freed, [30005]);
        assert_eq!(values(&fourth.bitmap), [30001]);
        leaks.commit(fourth);
        assert!(leaks.seen.is_empty());
    }

    #[test]
    fn a_leak_that_stops_being_one_starts_counting_again() {
        let mut leaks = Leaks::default();
        let now = Instant::now();
        let leaked = bitmap(&[30005]);
        for _ in 0..2 {
            let r = plan(
                &ports(),
                Some(&leaked),
                held(&[]),
                &leaks,
                now,
                Duration::ZERO,
            );
            leaks.commit(r);
        }
        // Held again (its create landed): no longer a leak.
        let r = plan(
            &ports(),
            Some(&leaked),
            held(&["30005"]),
            &leaks,
            now,
            Duration::ZERO,
        );
        assert!(r.leaked.is_empty());
        leaks.commit(r);
        let r = plan(
            &ports(),
            Some(&leaked),
            held(&[]),
            &leaks,
            now,
            Duration::ZERO,
        );
        assert_eq!(r.leaked, [30005], "the first repair of a new run");
    }

    #[test]
    fn without_a_usable_stored_bitmap_the_held_values_are_all_there_is() {
        let r = plan(
            &ports(),
            None,
            held(&["30003"]),
            &Leaks::default(),
            Instant::now(),
            Duration::ZERO,
        );
        assert_eq!(values(&r.bitmap), [30003]);
        assert_eq!(r.marked, [30003]);
    }
}
