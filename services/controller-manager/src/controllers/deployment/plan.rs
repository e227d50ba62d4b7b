//! The pure core of the Deployment controller: how many Pods each ReplicaSet should have next,
//! as Kubernetes' rolling update and recreate strategies decide it, and the template hash that
//! names a ReplicaSet. No I/O: every rule is unit-tested below.
//!
//! The plans read ReplicaSets through [`Rs`]; the caller only plans from ReplicaSets that are
//! settled (their controller has observed their generation and has exactly `spec.replicas`
//! Pods), so `available` counts Pods that exist. That is what keeps `maxSurge` and
//! `maxUnavailable` true at every moment rather than only on average.

use serde_json::Value;

/// What the plans need of one ReplicaSet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rs {
    /// `spec.replicas`.
    pub spec: i64,
    /// `status.availableReplicas`.
    pub available: i64,
}

/// The strategy of a Deployment, with `maxSurge` and `maxUnavailable` resolved to numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    Recreate,
    RollingUpdate {
        max_surge: i64,
        max_unavailable: i64,
    },
}

impl Strategy {
    /// Reads `spec.strategy` of a Deployment with `replicas` desired Pods; absent fields take
    /// Kubernetes' defaults (RollingUpdate, 25% and 25%).
    pub fn of(deployment: &Value, replicas: i64) -> Result<Strategy, String> {
        let s = &deployment["spec"]["strategy"];
        match s["type"].as_str().unwrap_or("RollingUpdate") {
            "Recreate" => Ok(Strategy::Recreate),
            "RollingUpdate" => {
                let ru = &s["rollingUpdate"];
                let (max_surge, max_unavailable) =
                    resolve_fenceposts(&ru["maxSurge"], &ru["maxUnavailable"], replicas)?;
                Ok(Strategy::RollingUpdate {
                    max_surge,
                    max_unavailable,
                })
            }
            other => Err(format!(
                "spec.strategy.type: Unsupported value: {other:?}: supported values: \"Recreate\", \"RollingUpdate\""
            )),
        }
    }

    /// `maxUnavailable` (0 for Recreate, which takes everything down anyway).
    pub fn max_unavailable(&self) -> i64 {
        match self {
            Strategy::Recreate => 0,
            Strategy::RollingUpdate {
                max_unavailable, ..
            } => *max_unavailable,
        }
    }

    pub fn max_surge(&self) -> i64 {
        match self {
            Strategy::Recreate => 0,
            Strategy::RollingUpdate { max_surge, .. } => *max_surge,
        }
    }
}

/// An int-or-percent field against `total`: percentages round up (`maxSurge`) or down
/// (`maxUnavailable`); absent means 25%.
pub fn int_or_percent(v: &Value, total: i64, round_up: bool, field: &str) -> Result<i64, String> {
    match v {
        Value::Null => int_or_percent(&Value::String("25%".into()), total, round_up, field),
        Value::Number(n) => n
            .as_i64()
            .filter(|n| *n >= 0)
            .ok_or_else(|| format!("{field}: must be a non-negative integer or a percentage")),
        Value::String(s) => {
            let p: i64 = s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .filter(|p| *p >= 0)
                .ok_or_else(|| format!("{field}: invalid value {s:?}: must be an integer or a percentage like \"25%\""))?;
            let scaled = p.saturating_mul(total);
            Ok(if round_up {
                (scaled + 99) / 100
            } else {
                scaled / 100
            })
        }
        other => Err(format!("{field}: invalid value {other}")),
    }
}

/// `maxSurge` and `maxUnavailable` as numbers. Both zero would never make progress, so
/// `maxUnavailable` becomes 1 then, as in Kubernetes; it never exceeds `replicas`.
pub fn resolve_fenceposts(
    surge: &Value,
    unavailable: &Value,
    replicas: i64,
) -> Result<(i64, i64), String> {
    let s = int_or_percent(
        surge,
        replicas,
        true,
        "spec.strategy.rollingUpdate.maxSurge",
    )?;
    let mut u = int_or_percent(
        unavailable,
        replicas,
        false,
        "spec.strategy.rollingUpdate.maxUnavailable",
    )?;
    if s == 0 && u == 0 {
        u = 1;
    }
    Ok((s, u.min(replicas)))
}

/// The new ReplicaSet's next size in a rolling update: up as far as `maxSurge` allows counting
/// every ReplicaSet's `spec.replicas`, or down to `replicas` if it is above.
pub fn new_rs_target(replicas: i64, max_surge: i64, new: &Rs, olds: &[Rs]) -> i64 {
    if new.spec >= replicas {
        return replicas;
    }
    let all: i64 = new.spec + olds.iter().map(|r| r.spec).sum::<i64>();
    let max_total = replicas + max_surge;
    if all >= max_total {
        return new.spec;
    }
    new.spec + (max_total - all).min(replicas - new.spec)
}

/// The old ReplicaSets' next sizes in a rolling update (index into `olds`, new size), `olds`
/// given oldest first. Never takes available Pods below `replicas - maxUnavailable`: first the
/// old ReplicaSets' unavailable Pods go, then available ones, oldest ReplicaSet first.
pub fn old_rs_targets(
    replicas: i64,
    max_unavailable: i64,
    new: &Rs,
    olds: &[Rs],
) -> Vec<(usize, i64)> {
    let all: i64 = new.spec + olds.iter().map(|r| r.spec).sum::<i64>();
    let min_available = replicas - max_unavailable;
    let new_unavailable = (new.spec - new.available).max(0);
    let mut budget = all - min_available - new_unavailable;
    if budget <= 0 {
        return Vec::new();
    }
    let mut sizes: Vec<i64> = olds.iter().map(|r| r.spec).collect();
    // Unhealthy Pods first: they serve nothing, so removing them costs no availability.
    for (i, r) in olds.iter().enumerate() {
        if budget <= 0 {
            break;
        }
        let unhealthy = (r.spec - r.available).max(0).min(budget);
        sizes[i] -= unhealthy;
        budget -= unhealthy;
    }
    // Then available ones, down to the minimum available.
    let available: i64 = new.available + olds.iter().map(|r| r.available).sum::<i64>();
    let mut surplus = (available - min_available).max(0);
    for size in sizes.iter_mut() {
        if surplus <= 0 {
            break;
        }
        let down = (*size).min(surplus);
        *size -= down;
        surplus -= down;
    }
    sizes
        .into_iter()
        .enumerate()
        .filter(|(i, s)| *s != olds[*i].spec)
        .collect()
}

/// The `pod-template-hash` of a template: FNV-1a (32 bit) of its canonical JSON (and of the
/// collision count, when there is one), its decimal digits spelled in Kubernetes' safe
/// alphabet, as Kubernetes names ReplicaSets (`nginx-5d59d67564`).
pub fn pod_template_hash(template: &Value, collision_count: Option<i64>) -> String {
    let mut canonical = String::new();
    write_canonical(template, &mut canonical);
    let mut h: u32 = 0x811c_9dc5;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u32::from(*b);
            h = h.wrapping_mul(0x0100_0193);
        }
    };
    feed(canonical.as_bytes());
    if let Some(c) = collision_count {
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&(c as u32).to_le_bytes());
        feed(&bytes);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    h.to_string()
        .bytes()
        .map(|b| ALPHABET[usize::from(b) % ALPHABET.len()] as char)
        .collect()
}

/// JSON with object keys sorted at every level: the same template always hashes the same.
fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            out.push('{');
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Whether a ReplicaSet's template is the Deployment's, ignoring the `pod-template-hash` label
/// the ReplicaSet carries.
pub fn same_template(rs_template: &Value, deployment_template: &Value) -> bool {
    let mut t = rs_template.clone();
    if let Some(labels) = t["metadata"]["labels"].as_object_mut() {
        labels.remove("pod-template-hash");
    }
    strip_empty(&mut t);
    let mut d = deployment_template.clone();
    strip_empty(&mut d);
    t == d
}

/// Empty maps and nulls say nothing: `labels: {}` equals no labels, in lists too (kubectl's
/// `rollout undo` writes a container's `resources: {}` and `creationTimestamp: null`, as Go
/// serializes a template).
fn strip_empty(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for x in m.values_mut() {
                strip_empty(x);
            }
            m.retain(|_, x| !(x.is_null() || x.as_object().is_some_and(|o| o.is_empty())));
        }
        Value::Array(a) => a.iter_mut().for_each(strip_empty),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rs(spec: i64, available: i64) -> Rs {
        Rs { spec, available }
    }

    #[test]
    fn percentages_round_up_for_surge_and_down_for_unavailable() {
        let d = |s: Value, u: Value| {
            json!({"spec": {"strategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": s, "maxUnavailable": u}}}})
        };
        // 25% of 2 is 0.5: surge rounds up to 1, unavailable down to 0.
        assert_eq!(
            Strategy::of(&d(json!("25%"), json!("25%")), 2),
            Ok(Strategy::RollingUpdate {
                max_surge: 1,
                max_unavailable: 0
            })
        );
        assert_eq!(
            Strategy::of(&d(json!("50%"), json!("50%")), 3),
            Ok(Strategy::RollingUpdate {
                max_surge: 2,
                max_unavailable: 1
            })
        );
        assert_eq!(
            Strategy::of(&d(json!(0), json!(0)), 3),
            Ok(Strategy::RollingUpdate {
                max_surge: 0,
                max_unavailable: 1
            }),
            "both zero would never progress"
        );
        assert_eq!(
            Strategy::of(&d(json!(2), json!(5)), 3),
            Ok(Strategy::RollingUpdate {
                max_surge: 2,
                max_unavailable: 3
            })
        );
        assert_eq!(
            Strategy::of(&json!({"spec": {}}), 4),
            Ok(Strategy::RollingUpdate {
                max_surge: 1,
                max_unavailable: 1
            }),
            "Kubernetes' defaults"
        );
        assert_eq!(
            Strategy::of(&json!({"spec": {"strategy": {"type": "Recreate"}}}), 4),
            Ok(Strategy::Recreate)
        );
        assert!(Strategy::of(&d(json!("x%"), json!(1)), 2).is_err());
        assert!(Strategy::of(&d(json!(-1), json!(1)), 2).is_err());
        assert!(Strategy::of(&json!({"spec": {"strategy": {"type": "Blue"}}}), 2).is_err());
    }

    #[test]
    fn the_new_replica_set_grows_within_max_surge() {
        // 2 replicas, surge 1: with the old at 2 the new may have 1.
        assert_eq!(new_rs_target(2, 1, &rs(0, 0), &[rs(2, 2)]), 1);
        assert_eq!(
            new_rs_target(2, 1, &rs(1, 0), &[rs(2, 2)]),
            1,
            "at the limit"
        );
        assert_eq!(new_rs_target(2, 1, &rs(1, 1), &[rs(1, 1)]), 2);
        assert_eq!(new_rs_target(2, 1, &rs(0, 0), &[]), 2, "a first rollout");
        assert_eq!(new_rs_target(2, 0, &rs(0, 0), &[rs(2, 2)]), 0, "no surge");
        assert_eq!(new_rs_target(1, 1, &rs(10, 10), &[]), 1, "scaled down");
        assert_eq!(new_rs_target(10, 3, &rs(2, 2), &[]), 10, "scaled up");
    }

    #[test]
    fn old_replica_sets_shrink_within_max_unavailable() {
        // 2 replicas, 0 unavailable: the old waits until the new one's Pod is available.
        assert_eq!(old_rs_targets(2, 0, &rs(1, 0), &[rs(2, 2)]), vec![]);
        assert_eq!(old_rs_targets(2, 0, &rs(1, 1), &[rs(2, 2)]), vec![(0, 1)]);
        assert_eq!(old_rs_targets(2, 0, &rs(2, 2), &[rs(1, 1)]), vec![(0, 0)]);
        // 4 replicas, 1 unavailable, no surge: one old Pod goes at once.
        assert_eq!(old_rs_targets(4, 1, &rs(0, 0), &[rs(4, 4)]), vec![(0, 3)]);
        // Unhealthy old Pods go first and cost nothing, as far as the new ReplicaSet's own
        // unavailable Pods leave room.
        assert_eq!(old_rs_targets(4, 1, &rs(1, 0), &[rs(4, 2)]), vec![(0, 3)]);
        assert_eq!(old_rs_targets(4, 2, &rs(0, 0), &[rs(4, 2)]), vec![(0, 2)]);
        // Oldest first across several old ReplicaSets.
        assert_eq!(
            old_rs_targets(4, 2, &rs(0, 0), &[rs(2, 2), rs(2, 2)]),
            vec![(0, 0)]
        );
    }

    /// Whatever the plans do, step by step with every Pod becoming available before the next
    /// step, total Pods never exceed replicas + surge and available never drop below
    /// replicas - unavailable, and the rollout ends with only the new ReplicaSet.
    #[test]
    fn a_simulated_rollout_keeps_both_bounds_and_finishes() {
        for replicas in 0..8 {
            for surge in 0..3 {
                for unavailable in 0..3 {
                    let (surge, unavailable) =
                        resolve_fenceposts(&json!(surge), &json!(unavailable), replicas).unwrap();
                    let mut new = rs(0, 0);
                    let mut olds = vec![rs(replicas, replicas)];
                    for _ in 0..100 {
                        let target = new_rs_target(replicas, surge, &new, &olds);
                        if target != new.spec {
                            new.spec = target;
                        } else {
                            let downs = old_rs_targets(replicas, unavailable, &new, &olds);
                            if downs.is_empty() && new.available == new.spec {
                                break;
                            }
                            for (i, s) in downs {
                                olds[i].spec = s;
                                olds[i].available = olds[i].available.min(s);
                            }
                        }
                        let total = new.spec + olds.iter().map(|r| r.spec).sum::<i64>();
                        assert!(
                            total <= replicas + surge,
                            "{replicas} {surge} {unavailable}"
                        );
                        // The new Pods become available.
                        new.available = new.spec;
                        let avail = new.available + olds.iter().map(|r| r.available).sum::<i64>();
                        assert!(avail >= replicas - unavailable);
                    }
                    assert_eq!(new.spec, replicas);
                    assert!(
                        olds.iter().all(|r| r.spec == 0),
                        "{replicas} {surge} {unavailable}"
                    );
                }
            }
        }
    }

    #[test]
    fn template_hashes_are_stable_and_distinct() {
        let a = json!({"metadata": {"labels": {"app": "nginx"}}, "spec": {"containers": [{"name": "nginx", "image": "nginx:1.7.9"}]}});
        let same_reordered = json!({"spec": {"containers": [{"image": "nginx:1.7.9", "name": "nginx"}]}, "metadata": {"labels": {"app": "nginx"}}});
        let b = json!({"metadata": {"labels": {"app": "nginx"}}, "spec": {"containers": [{"name": "nginx", "image": "nginx:1.8"}]}});
        let h = pod_template_hash(&a, None);
        assert_eq!(h, pod_template_hash(&same_reordered, None));
        assert_ne!(h, pod_template_hash(&b, None));
        assert_ne!(h, pod_template_hash(&a, Some(1)));
        assert!(h.len() <= 10 && !h.is_empty());
        assert!(
            h.bytes()
                .all(|c| b"bcdfghjklmnpqrstvwxz2456789".contains(&c))
        );
    }

    #[test]
    fn templates_compare_without_the_hash_label() {
        let d = json!({"metadata": {"labels": {"app": "nginx"}}, "spec": {"containers": []}});
        let r = json!({"metadata": {"labels": {"app": "nginx", "pod-template-hash": "abc"}}, "spec": {"containers": []}});
        assert!(same_template(&r, &d));
        // As kubectl's rollout undo writes the template back.
        let undone = json!({"metadata": {"creationTimestamp": null, "labels": {"app": "nginx"}},
                            "spec": {"containers": [{"name": "a", "resources": {}}]}});
        let rs = json!({"metadata": {"labels": {"app": "nginx", "pod-template-hash": "abc"}},
                        "spec": {"containers": [{"name": "a"}]}});
        assert!(same_template(&rs, &undone));
        let other = json!({"metadata": {"labels": {"app": "web", "pod-template-hash": "abc"}}, "spec": {"containers": []}});
        assert!(!same_template(&other, &d));
        let annotated = json!({"metadata": {"labels": {"app": "nginx"}, "annotations": {}}, "spec": {"containers": []}});
        assert!(same_template(&annotated, &d));
    }
}
