//! Shard balancing, the pure part: how many shards a replica aims at, and what it does in one
//! round to get there.

use std::collections::{BTreeMap, BTreeSet};

/// Rounds in a row a replica must have found itself above its fair share before it hands shards
/// over. One round's count can be a transient (acquisitions racing, a replica seen by some
/// peers a moment before the others), and a handover costs a drain and a relist.
pub(crate) const SETTLE_ROUNDS: u32 = 2;

/// How many shards `me` aims at, given how many each live replica holds now (`held` has every
/// live replica, `me` included; `me` is added with 0 if missing).
///
/// `count` is split evenly; the remainder (one more each) goes to the replicas that hold the
/// most now, ties broken by identity. Every replica computing this from the same view gets
/// targets that sum to `count`, each the floor or the ceiling of `count / live`; and a balanced
/// state stays put, since a replica holding the ceiling keeps its claim to it.
pub(crate) fn fair_share(count: u32, me: &str, held: &BTreeMap<String, u32>) -> u32 {
    let live = held.len() + usize::from(!held.contains_key(me));
    let live = u32::try_from(live).unwrap_or(u32::MAX).max(1);
    let (floor, extra) = (count / live, count % live);
    let mine = held.get(me).copied().unwrap_or(0);
    let ahead = held
        .iter()
        .filter(|(id, n)| **n > mine || (**n == mine && id.as_str() < me))
        .count();
    floor + u32::from(ahead < extra as usize)
}

/// What a replica does about its shards in one round.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Free shards to take.
    pub acquire: Vec<u32>,
    /// Held shards to hand over: no new work, drain in-flight work, release.
    pub drain: Vec<u32>,
    /// Draining shards to keep after all (the surplus went away).
    pub keep: Vec<u32>,
}

/// The round's plan of a replica that should hold `target` shards.
///
/// - `held`: the shards it holds (the draining ones included: they are its until released);
/// - `draining`: those it is handing over;
/// - `free`: shards nobody holds (no lease, released, or expired);
/// - `settled`: whether it has been above its target for [`SETTLE_ROUNDS`] rounds: only then
///   does it start handing over (keeping a shard needs no patience);
/// - `offset`: where to start taking from `free`; random, so that replicas short of shards
///   do not all reach for the same ones.
pub(crate) fn plan(
    target: u32,
    held: &BTreeSet<u32>,
    draining: &BTreeSet<u32>,
    free: &[u32],
    settled: bool,
    offset: usize,
) -> Plan {
    let target = target as usize;
    let draining: Vec<u32> = held.intersection(draining).copied().collect();
    let mut plan = Plan::default();
    if held.len() <= target {
        plan.keep = draining;
        let want = (target - held.len()).min(free.len());
        if want > 0 {
            let start = offset % free.len();
            plan.acquire = free
                .iter()
                .cycle()
                .skip(start)
                .take(want)
                .copied()
                .collect();
        }
        return plan;
    }
    let surplus = held.len() - target;
    if draining.len() > surplus {
        plan.keep = draining[..draining.len() - surplus].to_vec();
    } else if settled {
        // The highest-numbered first: any choice is as good, a fixed one is testable.
        plan.drain = held
            .iter()
            .rev()
            .filter(|s| !draining.contains(s))
            .take(surplus - draining.len())
            .copied()
            .collect();
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(counts: &[(&str, u32)]) -> BTreeMap<String, u32> {
        counts.iter().map(|(id, n)| (id.to_string(), *n)).collect()
    }

    fn set(shards: &[u32]) -> BTreeSet<u32> {
        shards.iter().copied().collect()
    }

    #[test]
    fn targets_are_the_floor_or_the_ceiling_and_sum_to_the_count() {
        for count in [1, 2, 7, 31, 32, 33, 64, 100, 1024] {
            for live in 1..=40u32 {
                for skew in 0..3u32 {
                    let view: BTreeMap<String, u32> = (0..live)
                        .map(|i| (format!("r{i:02}"), (i * 7 + skew) % 5))
                        .collect();
                    let targets: Vec<u32> =
                        view.keys().map(|me| fair_share(count, me, &view)).collect();
                    assert_eq!(
                        targets.iter().sum::<u32>(),
                        count,
                        "{count} shards over {live}"
                    );
                    for t in &targets {
                        assert!(
                            *t == count / live || *t == count.div_ceil(live),
                            "{count} over {live}: {targets:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_extra_shards_stay_with_those_that_hold_them() {
        let view = held(&[("a", 10), ("b", 11), ("c", 11)]);
        assert_eq!(fair_share(32, "a", &view), 10);
        assert_eq!(fair_share(32, "b", &view), 11);
        assert_eq!(fair_share(32, "c", &view), 11);
        // Ties go by identity.
        let view = held(&[("a", 8), ("b", 8), ("c", 8)]);
        assert_eq!(fair_share(32, "a", &view), 11);
        assert_eq!(fair_share(32, "b", &view), 11);
        assert_eq!(fair_share(32, "c", &view), 10);
    }

    #[test]
    fn a_replica_missing_from_the_view_counts_itself() {
        let view = held(&[("a", 16), ("b", 16)]);
        assert_eq!(fair_share(32, "new", &view), 10);
        // Until `a` sees the newcomer, it counts two replicas.
        assert_eq!(fair_share(32, "a", &view), 16);
        assert_eq!(fair_share(32, "alone", &BTreeMap::new()), 32);
    }

    #[test]
    fn below_the_target_it_takes_free_shards_from_the_offset_and_keeps_what_drains() {
        let p = plan(4, &set(&[1, 2]), &set(&[2]), &[5, 6, 7, 8], false, 3);
        assert_eq!(p.acquire, [8, 5]);
        assert_eq!(p.keep, [2]);
        assert!(p.drain.is_empty());
        let p = plan(4, &set(&[1]), &set(&[]), &[9], false, 7);
        assert_eq!(p.acquire, [9]);
        assert_eq!(
            plan(1, &set(&[1]), &set(&[]), &[9], false, 0),
            Plan::default()
        );
    }

    #[test]
    fn above_the_target_it_drains_the_surplus_only_once_settled() {
        let held_now = set(&[1, 2, 3, 4, 5]);
        assert_eq!(
            plan(3, &held_now, &set(&[]), &[9], false, 0),
            Plan::default()
        );
        let p = plan(3, &held_now, &set(&[]), &[9], true, 0);
        assert_eq!(p.drain, [5, 4]);
        assert!(p.acquire.is_empty(), "never takes while above its target");
        // Already draining one: drains one more.
        assert_eq!(plan(3, &held_now, &set(&[2]), &[], true, 0).drain, [5]);
        // Draining enough: nothing to do.
        assert_eq!(
            plan(3, &held_now, &set(&[2, 3]), &[], true, 0),
            Plan::default()
        );
    }

    #[test]
    fn a_surplus_that_shrank_keeps_the_draining_shards_it_no_longer_needs_to_give() {
        let p = plan(4, &set(&[1, 2, 3, 4, 5]), &set(&[3, 4, 5]), &[], false, 0);
        assert_eq!(p.keep, [3, 4]);
        assert!(p.drain.is_empty());
    }

    /// A tiny deterministic generator (xorshift64*): the simulation must be reproducible.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// One replica of the simulation: its settle counter, what it is draining, and the plan it
    /// made from a view that others may have changed since (its writes are compare-and-swaps
    /// against the versions it read).
    #[derive(Default)]
    struct Replica {
        surplus_rounds: u32,
        draining: BTreeSet<u32>,
        pending: Option<(Vec<u64>, Plan)>,
    }

    /// The lease table: holder and version of each shard.
    struct Table {
        holder: Vec<Option<usize>>,
        version: Vec<u64>,
    }

    impl Table {
        fn counts(&self, replicas: usize) -> Vec<u32> {
            let mut c = vec![0; replicas];
            for r in self.holder.iter().flatten() {
                c[*r] += 1;
            }
            c
        }
    }

    fn id(r: usize) -> String {
        format!("replica-{r}")
    }

    /// Replicas read the table, plan, and write later (others may act in between), in random
    /// order; a drained shard is released at the replica's next write. Returns the table after
    /// `steps` (each one replica's read or write), and the step of the last change. Up to 12
    /// replicas settle within about 200 steps.
    fn simulate(
        count: u32,
        replicas: usize,
        start: Vec<Option<usize>>,
        rng: &mut Rng,
        steps: usize,
    ) -> (Table, usize) {
        let mut table = Table {
            version: vec![0; start.len()],
            holder: start,
        };
        let mut rs: Vec<Replica> = (0..replicas).map(|_| Replica::default()).collect();
        let mut last_change = 0;
        for step in 0..steps {
            let me = rng.below(replicas);
            let r = &mut rs[me];
            match r.pending.take() {
                None => {
                    let counts = table.counts(replicas);
                    let view: BTreeMap<String, u32> =
                        (0..replicas).map(|i| (id(i), counts[i])).collect();
                    let target = fair_share(count, &id(me), &view);
                    let mine: BTreeSet<u32> = (0..count)
                        .filter(|s| table.holder[*s as usize] == Some(me))
                        .collect();
                    r.draining.retain(|s| mine.contains(s));
                    r.surplus_rounds = if mine.len() > target as usize {
                        r.surplus_rounds + 1
                    } else {
                        0
                    };
                    let free: Vec<u32> = (0..count)
                        .filter(|s| table.holder[*s as usize].is_none())
                        .collect();
                    let p = plan(
                        target,
                        &mine,
                        &r.draining,
                        &free,
                        r.surplus_rounds >= SETTLE_ROUNDS,
                        rng.below(1000),
                    );
                    r.pending = Some((table.version.clone(), p));
                }
                Some((seen, p)) => {
                    for s in &p.keep {
                        r.draining.remove(s);
                    }
                    r.draining.extend(&p.drain);
                    // Drained shards (no work in flight here) are released.
                    for s in std::mem::take(&mut r.draining) {
                        let s = s as usize;
                        if table.holder[s] == Some(me) && table.version[s] == seen[s] {
                            table.holder[s] = None;
                            table.version[s] += 1;
                            last_change = step;
                        }
                    }
                    for s in p.acquire {
                        let s = s as usize;
                        if table.version[s] == seen[s] && table.holder[s].is_none() {
                            table.holder[s] = Some(me);
                            table.version[s] += 1;
                            last_change = step;
                        }
                    }
                }
            }
            // One holder per shard is the table's shape; the sum can only fall short.
            assert!(table.holder.iter().flatten().count() <= count as usize);
        }
        (table, last_change)
    }

    fn sorted(mut v: Vec<u32>) -> Vec<u32> {
        v.sort_unstable();
        v
    }

    /// A start: each shard free or held by a random replica (some replicas far above their
    /// share, some with nothing).
    fn arbitrary_start(count: u32, replicas: usize, rng: &mut Rng) -> Vec<Option<usize>> {
        let bias = rng.below(replicas);
        (0..count)
            .map(|_| match rng.below(4) {
                0 => None,
                1 => Some(bias),
                _ => Some(rng.below(replicas)),
            })
            .collect()
    }

    #[test]
    fn three_replicas_converge_to_10_11_11_and_four_to_8_each_from_any_start() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for (replicas, want) in [(3, vec![10, 11, 11]), (4, vec![8, 8, 8, 8])] {
            for _ in 0..200 {
                let start = arbitrary_start(32, replicas, &mut rng);
                let (table, last_change) = simulate(32, replicas, start, &mut rng, 1000);
                assert_eq!(sorted(table.counts(replicas)), want);
                assert!(last_change < 500, "settled, then still moving");
            }
        }
    }

    #[test]
    fn every_replica_count_converges_to_the_floor_or_the_ceiling_and_then_stays() {
        let mut rng = Rng(42);
        for count in [1u32, 5, 32, 33, 100] {
            for replicas in 1..=12usize {
                for _ in 0..10 {
                    let start = arbitrary_start(count, replicas, &mut rng);
                    let (table, last_change) = simulate(count, replicas, start, &mut rng, 2000);
                    let counts = table.counts(replicas);
                    let live = replicas as u32;
                    assert_eq!(counts.iter().sum::<u32>(), count, "{counts:?}");
                    assert!(
                        counts
                            .iter()
                            .all(|c| *c == count / live || *c == count.div_ceil(live)),
                        "{count} over {replicas}: {counts:?}"
                    );
                    assert!(last_change < 1000, "{count} over {replicas}: still moving");
                }
            }
        }
    }

    #[test]
    fn a_balanced_state_does_not_move() {
        let mut rng = Rng(7);
        // 11, 11, 10 is where 3 replicas end; 8 each for 4.
        let start: Vec<Option<usize>> = (0..32).map(|s| Some(s % 3)).collect();
        let (table, last_change) = simulate(32, 3, start, &mut rng, 2000);
        assert_eq!(table.counts(3), [11, 11, 10]);
        assert_eq!(last_change, 0, "nothing moved");
    }
}
