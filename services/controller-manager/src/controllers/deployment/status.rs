//! A Deployment's status from its ReplicaSets: counts, and the `Available` and `Progressing`
//! conditions with Kubernetes' reasons and messages (what `kubectl rollout status` reads).

use std::time::{Duration, SystemTime};

use keel_api::Metadata;
use serde_json::{Map, Value, json};

use crate::objects;

pub const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
pub const RS_UPDATED: &str = "ReplicaSetUpdated";
pub const NEW_RS_CREATED: &str = "NewReplicaSetCreated";
pub const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
pub const TIMED_OUT: &str = "ProgressDeadlineExceeded";
pub const PAUSED: &str = "DeploymentPaused";
pub const RESUMED: &str = "DeploymentResumed";

/// What happened in this sync that the `Progressing` condition reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    None,
    CreatedNewRs,
}

pub struct Input<'a> {
    pub deployment: &'a Value,
    pub new_rs: Option<&'a Value>,
    pub all: &'a [&'a Value],
    pub max_unavailable: i64,
    pub event: Event,
    pub now: SystemTime,
}

/// The status to write, and when to look again (to notice a passed progress deadline).
pub fn compute(input: &Input<'_>) -> (Value, Option<Duration>) {
    let d = input.deployment;
    let replicas = objects::spec_replicas(d);
    let sum = |f: &str| -> i64 { input.all.iter().map(|r| objects::status_i64(r, f)).sum() };
    let total = sum("replicas");
    let available = sum("availableReplicas");
    let updated = input
        .new_rs
        .map(|r| objects::status_i64(r, "replicas"))
        .unwrap_or(0);
    let old = &d["status"];
    let mut status = Map::new();
    status.insert("observedGeneration".into(), json!(d.generation()));
    status.insert("replicas".into(), json!(total));
    status.insert("updatedReplicas".into(), json!(updated));
    status.insert("readyReplicas".into(), json!(sum("readyReplicas")));
    status.insert("availableReplicas".into(), json!(available));
    status.insert(
        "unavailableReplicas".into(),
        json!((replicas - available).max(0)),
    );
    if let Some(c) = old.get("collisionCount") {
        status.insert("collisionCount".into(), c.clone());
    }
    let now = objects::format_time(input.now);
    let mut conditions: Vec<Value> = old["conditions"].as_array().cloned().unwrap_or_default();

    let (avail_status, avail_reason, avail_msg) = if available >= replicas - input.max_unavailable {
        (
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
        )
    } else {
        (
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
        )
    };
    set_condition(
        &mut conditions,
        condition("Available", avail_status, avail_reason, avail_msg, &now),
    );

    let rs_name = input.new_rs.map(Metadata::name).unwrap_or("");
    let paused = d["spec"]["paused"].as_bool().unwrap_or(false);
    let current = conditions
        .iter()
        .find(|c| c["type"] == "Progressing")
        .cloned();
    let current_reason = current
        .as_ref()
        .and_then(|c| c["reason"].as_str())
        .unwrap_or("");
    let mut recheck = None;
    if paused {
        if current_reason != PAUSED {
            set_condition(
                &mut conditions,
                condition(
                    "Progressing",
                    "Unknown",
                    PAUSED,
                    "Deployment is paused",
                    &now,
                ),
            );
        }
    } else if current_reason == PAUSED {
        set_condition(
            &mut conditions,
            condition(
                "Progressing",
                "Unknown",
                RESUMED,
                "Deployment is resumed",
                &now,
            ),
        );
    } else if input.event == Event::CreatedNewRs {
        set_condition(
            &mut conditions,
            condition(
                "Progressing",
                "True",
                NEW_RS_CREATED,
                &format!("Created new replica set \"{rs_name}\""),
                &now,
            ),
        );
    } else {
        let complete = updated == replicas
            && total == replicas
            && available == replicas
            && input.new_rs.is_some();
        let progressed = updated > objects::status_i64(d, "updatedReplicas")
            || available > objects::status_i64(d, "availableReplicas")
            || sum("readyReplicas") > objects::status_i64(d, "readyReplicas")
            || total - updated
                < objects::status_i64(d, "replicas") - objects::status_i64(d, "updatedReplicas");
        if complete {
            if current_reason != NEW_RS_AVAILABLE {
                set_progressing(
                    &mut conditions,
                    &current,
                    condition(
                        "Progressing",
                        "True",
                        NEW_RS_AVAILABLE,
                        &format!("ReplicaSet \"{rs_name}\" has successfully progressed."),
                        &now,
                    ),
                );
            }
        } else if progressed || current.is_none() {
            let reason = if current.is_none() {
                FOUND_NEW_RS
            } else {
                RS_UPDATED
            };
            let msg = if current.is_none() {
                format!("Found new replica set \"{rs_name}\"")
            } else {
                format!("ReplicaSet \"{rs_name}\" is progressing.")
            };
            set_progressing(
                &mut conditions,
                &current,
                condition("Progressing", "True", reason, &msg, &now),
            );
        } else if current_reason != TIMED_OUT {
            // No progress since the condition's lastUpdateTime: past the deadline, it failed.
            let deadline =
                Duration::from_secs(d["spec"]["progressDeadlineSeconds"].as_u64().unwrap_or(600));
            let since = current
                .as_ref()
                .and_then(|c| c["lastUpdateTime"].as_str())
                .and_then(objects::parse_time)
                .unwrap_or(input.now);
            let due = since + deadline;
            match due.duration_since(input.now) {
                Ok(left) if !left.is_zero() => recheck = Some(left + Duration::from_secs(1)),
                _ => set_condition(
                    &mut conditions,
                    condition(
                        "Progressing",
                        "False",
                        TIMED_OUT,
                        &format!("ReplicaSet \"{rs_name}\" has timed out progressing."),
                        &now,
                    ),
                ),
            }
        }
    }
    conditions.sort_by(|a, b| {
        let rank = |c: &Value| if c["type"] == "Available" { 0 } else { 1 };
        rank(a).cmp(&rank(b))
    });
    status.insert("conditions".into(), Value::Array(conditions));
    (Value::Object(status), recheck)
}

fn condition(kind: &str, status: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({
        "type": kind, "status": status, "lastUpdateTime": now, "lastTransitionTime": now,
        "reason": reason, "message": message,
    })
}

/// Kubernetes' `SetDeploymentCondition`: the same status and reason is no change at all; the
/// same status keeps its `lastTransitionTime`.
fn set_condition(conditions: &mut Vec<Value>, mut new: Value) {
    if let Some(i) = conditions.iter().position(|c| c["type"] == new["type"]) {
        let cur = &conditions[i];
        if cur["status"] == new["status"] && cur["reason"] == new["reason"] {
            return;
        }
        if cur["status"] == new["status"] {
            new["lastTransitionTime"] = cur["lastTransitionTime"].clone();
        }
        conditions.remove(i);
    }
    conditions.push(new);
}

/// Progress moves `lastUpdateTime` even with the same reason (that is what the deadline is
/// measured from); `lastTransitionTime` stays while the status stays True.
fn set_progressing(conditions: &mut Vec<Value>, current: &Option<Value>, mut new: Value) {
    if let Some(cur) = current
        && cur["status"] == "True"
    {
        new["lastTransitionTime"] = cur["lastTransitionTime"].clone();
    }
    conditions.retain(|c| c["type"] != "Progressing");
    conditions.push(new);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs(name: &str, replicas: i64, available: i64) -> Value {
        json!({"metadata": {"name": name}, "status": {
            "replicas": replicas, "readyReplicas": available, "availableReplicas": available}})
    }

    fn progressing(status: &Value) -> (String, String) {
        let c = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Progressing")
            .unwrap();
        (
            c["status"].as_str().unwrap().into(),
            c["reason"].as_str().unwrap().into(),
        )
    }

    fn at(s: &str) -> SystemTime {
        objects::parse_time(s).unwrap()
    }

    #[test]
    fn a_finished_rollout_is_available_and_progressed() {
        let d = json!({"metadata": {"generation": 3}, "spec": {"replicas": 2}, "status": {}});
        let new = rs("web-1", 2, 2);
        let old = rs("web-0", 0, 0);
        let (s, recheck) = compute(&Input {
            deployment: &d,
            new_rs: Some(&new),
            all: &[&new, &old],
            max_unavailable: 0,
            event: Event::None,
            now: at("2026-01-01T00:00:00Z"),
        });
        assert_eq!(s["observedGeneration"], 3);
        assert_eq!(
            (s["updatedReplicas"].clone(), s["availableReplicas"].clone()),
            (json!(2), json!(2))
        );
        assert_eq!(progressing(&s), ("True".into(), NEW_RS_AVAILABLE.into()));
        assert_eq!(s["conditions"][0]["type"], "Available");
        assert_eq!(s["conditions"][0]["status"], "True");
        assert!(recheck.is_none());
    }

    #[test]
    fn no_progress_past_the_deadline_times_out() {
        let d0 = json!({"spec": {"replicas": 2, "progressDeadlineSeconds": 10}, "status": {}});
        let new = rs("web-1", 1, 0);
        let old = rs("web-0", 2, 2);
        let input = |d: &Value, now| {
            compute(&Input {
                deployment: d,
                new_rs: Some(&new),
                all: &[&new, &old],
                max_unavailable: 0,
                event: Event::None,
                now: at(now),
            })
        };
        let (s1, _) = input(&d0, "2026-01-01T00:00:00Z");
        assert_eq!(progressing(&s1).1, FOUND_NEW_RS);
        let d1 = json!({"spec": {"replicas": 2, "progressDeadlineSeconds": 10}, "status": s1});
        let (s2, recheck) = input(&d1, "2026-01-01T00:00:04Z");
        assert_eq!(
            progressing(&s2).1,
            FOUND_NEW_RS,
            "no progress, within the deadline"
        );
        assert_eq!(recheck, Some(Duration::from_secs(7)));
        let (s3, _) = input(&d1, "2026-01-01T00:00:11Z");
        assert_eq!(progressing(&s3), ("False".into(), TIMED_OUT.into()));
        assert_eq!(
            s3["conditions"][0]["status"], "True",
            "the old Pods are still available"
        );
    }

    #[test]
    fn progress_moves_the_update_time_and_pausing_is_reported() {
        let d = json!({"spec": {"replicas": 2}, "status": {"updatedReplicas": 0, "conditions": [
            {"type": "Progressing", "status": "True", "reason": FOUND_NEW_RS,
             "lastUpdateTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        let new = rs("web-1", 1, 0);
        let (s, _) = compute(&Input {
            deployment: &d,
            new_rs: Some(&new),
            all: &[&new],
            max_unavailable: 1,
            event: Event::None,
            now: at("2026-01-01T00:01:00Z"),
        });
        let p = s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Progressing")
            .unwrap()
            .clone();
        assert_eq!(p["reason"], RS_UPDATED);
        assert_eq!(p["lastUpdateTime"], "2026-01-01T00:01:00Z");
        assert_eq!(p["lastTransitionTime"], "2026-01-01T00:00:00Z");

        let paused = json!({"spec": {"replicas": 2, "paused": true}, "status": {}});
        let (s, _) = compute(&Input {
            deployment: &paused,
            new_rs: Some(&new),
            all: &[&new],
            max_unavailable: 1,
            event: Event::None,
            now: at("2026-01-01T00:01:00Z"),
        });
        assert_eq!(progressing(&s), ("Unknown".into(), PAUSED.into()));
    }
}
