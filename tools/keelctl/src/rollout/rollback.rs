//! `rollout undo`: which ReplicaSet a Deployment goes back to, and the patch that puts its pod
//! template back (kubectl's `DeploymentRollbacker`).

use keel_api::Metadata;
use serde_json::{Map, Value, json};

use super::{RolloutError, remove_hash_label, revision, templates_equal};

/// Annotations of the Deployment that a rollback keeps, rather than taking the ReplicaSet's:
/// they describe the Deployment and its controller's bookkeeping, not the revision.
const ANNOTATIONS_TO_SKIP: [&str; 6] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    "deployment.kubernetes.io/revision",
    "deployment.kubernetes.io/revision-history",
    "deployment.kubernetes.io/desired-replicas",
    "deployment.kubernetes.io/max-replicas",
    "deprecated.deployment.rollback.to",
];

/// What `rollout undo` does to a Deployment.
#[derive(Debug, Clone, PartialEq)]
pub enum Rollback {
    /// Send this JSON patch: it fails with a conflict if the Deployment changed since it was
    /// read, so a rollback never overwrites a change it did not see.
    Patch(Value),
    /// Nothing to do; kubectl's words for it, after the object's name.
    Skipped(String),
}

/// Plans the rollback of `deployment` to revision `to` (0: the revision before the newest),
/// among the ReplicaSets it controls, in kubectl's order of checks: the revision exists,
/// the Deployment is not paused, its template differs from the revision's.
pub fn plan(deployment: &Value, owned: &[&Value], to: i64) -> Result<Rollback, RolloutError> {
    if to < 0 {
        return Err(RolloutError::RevisionNotFound(to));
    }
    let rs = replica_set_for(deployment, owned, to)?;
    if deployment["spec"]["paused"].as_bool() == Some(true) {
        return Err(RolloutError::RollbackPaused);
    }
    let template = &rs["spec"]["template"];
    if templates_equal(template, &deployment["spec"]["template"]) {
        // kubectl names the revision asked for: 0 when none was.
        return Ok(Rollback::Skipped(format!(
            "skipped rollback (current template already matches revision {to})"
        )));
    }
    let mut template = template.clone();
    remove_hash_label(&mut template);
    let annotations = annotations_after(deployment, rs);
    let mut ops = Vec::new();
    if let Some(rv) = deployment["metadata"]["resourceVersion"].as_str() {
        ops.push(json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}));
    }
    ops.push(json!({"op": "replace", "path": "/spec/template", "value": template}));
    // `replace` needs the member to exist; a Deployment the controller never annotated has
    // no annotations yet.
    let verb = if deployment["metadata"]["annotations"].is_object() {
        "replace"
    } else {
        "add"
    };
    ops.push(json!({"op": verb, "path": "/metadata/annotations", "value": annotations}));
    Ok(Rollback::Patch(Value::Array(ops)))
}

/// kubectl's `deploymentRevision`: the ReplicaSet of revision `to`, or for 0 the one of the
/// second-highest revision. ReplicaSets whose revision does not parse are passed over.
pub fn replica_set_for<'a>(
    deployment: &Value,
    owned: &[&'a Value],
    to: i64,
) -> Result<&'a Value, RolloutError> {
    let mut latest: Option<(i64, &Value)> = None;
    let mut previous: Option<(i64, &Value)> = None;
    for rs in owned {
        let Ok(v) = revision(rs) else { continue };
        if to > 0 {
            if v == to {
                return Ok(rs);
            }
            continue;
        }
        if latest.is_none_or(|(l, _)| l < v) {
            previous = latest;
            latest = Some((v, rs));
        } else if previous.is_none_or(|(p, _)| p < v) {
            previous = Some((v, rs));
        }
    }
    if to > 0 {
        return Err(RolloutError::RevisionNotFound(to));
    }
    previous
        .map(|(_, rs)| rs)
        .ok_or_else(|| RolloutError::NoHistory(deployment.name().to_string()))
}

/// The Deployment's annotations after the rollback: its own of [`ANNOTATIONS_TO_SKIP`], and
/// every other one from the ReplicaSet (so a change-cause goes back with its revision).
fn annotations_after(deployment: &Value, rs: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(own) = deployment["metadata"]["annotations"].as_object() {
        for key in ANNOTATIONS_TO_SKIP {
            if let Some(v) = own.get(key) {
                out.insert(key.into(), v.clone());
            }
        }
    }
    if let Some(theirs) = rs["metadata"]["annotations"].as_object() {
        for (k, v) in theirs {
            if !ANNOTATIONS_TO_SKIP.contains(&k.as_str()) {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::fixtures::{deployment, replica_set};
    use crate::rollout::owned_replica_sets;

    /// A Deployment at nginx:3 (revision 3) with ReplicaSets for revisions 1-3.
    fn three_revisions() -> (Value, Vec<Value>) {
        let mut d = deployment("nginx:3");
        d["metadata"]["annotations"] = json!({
            "deployment.kubernetes.io/revision": "3",
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
            "kubernetes.io/change-cause": "to 3",
            "team": "web"
        });
        let mut r1 = replica_set("r1", Some("1"), "nginx:1", 0);
        r1["metadata"]["annotations"]["kubernetes.io/change-cause"] = json!("to 1");
        r1["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"] = json!("2");
        let r2 = replica_set("r2", Some("2"), "nginx:2", 1);
        let r3 = replica_set("r3", Some("3"), "nginx:3", 2);
        (d, vec![r1, r2, r3])
    }

    fn image(rs: &Value) -> &str {
        rs["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap()
    }

    #[test]
    fn by_default_the_revision_before_the_newest_is_chosen() {
        let (d, listed) = three_revisions();
        let owned = owned_replica_sets(&d, &listed);
        assert_eq!(image(replica_set_for(&d, &owned, 0).unwrap()), "nginx:2");
        // Whatever the order they come in.
        let reversed: Vec<&Value> = owned.iter().rev().copied().collect();
        assert_eq!(image(replica_set_for(&d, &reversed, 0).unwrap()), "nginx:2");
        assert_eq!(image(replica_set_for(&d, &owned, 1).unwrap()), "nginx:1");
        assert_eq!(image(replica_set_for(&d, &owned, 3).unwrap()), "nginx:3");
    }

    #[test]
    fn missing_revisions_and_history_are_errors() {
        let (d, listed) = three_revisions();
        let owned = owned_replica_sets(&d, &listed);
        assert_eq!(
            replica_set_for(&d, &owned, 7).unwrap_err().to_string(),
            "unable to find specified revision 7 in history"
        );
        assert_eq!(
            plan(&d, &owned, -1).unwrap_err().to_string(),
            "unable to find specified revision -1 in history"
        );
        let only = [owned[2]];
        assert_eq!(
            replica_set_for(&d, &only, 0).unwrap_err().to_string(),
            "no rollout history found for deployment \"nginx\""
        );
        assert_eq!(
            replica_set_for(&d, &[], 0).unwrap_err(),
            RolloutError::NoHistory("nginx".into())
        );
    }

    #[test]
    fn unreadable_revisions_are_passed_over_and_unannotated_ones_are_zero() {
        let d = deployment("nginx:3");
        let listed = [
            replica_set("zero", None, "nginx:0", 0),
            replica_set("bad", Some("x"), "nginx:x", 1),
            replica_set("r3", Some("3"), "nginx:3", 2),
        ];
        let owned = owned_replica_sets(&d, &listed);
        assert_eq!(image(replica_set_for(&d, &owned, 0).unwrap()), "nginx:0");
    }

    #[test]
    fn two_replica_sets_of_the_newest_revision_make_one_the_previous() {
        let d = deployment("nginx:3");
        let listed = [
            replica_set("a", Some("3"), "nginx:a", 0),
            replica_set("b", Some("3"), "nginx:b", 1),
            replica_set("c", Some("1"), "nginx:c", 2),
        ];
        let owned: Vec<&Value> = listed.iter().collect();
        assert_eq!(image(replica_set_for(&d, &owned, 0).unwrap()), "nginx:b");
    }

    #[test]
    fn the_patch_restores_the_template_without_its_hash_and_the_revision_annotations() {
        let (d, listed) = three_revisions();
        let owned = owned_replica_sets(&d, &listed);
        let Rollback::Patch(patch) = plan(&d, &owned, 1).unwrap() else {
            panic!("expected a patch");
        };
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "replace", "path": "/spec/template", "value": {
                    "metadata": {"labels": {"app": "nginx"}},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx:1"}]}
                }},
                {"op": "replace", "path": "/metadata/annotations", "value": {
                    "deployment.kubernetes.io/revision": "3",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}",
                    "kubernetes.io/change-cause": "to 1"
                }}
            ])
        );
    }

    #[test]
    fn the_patch_applies_to_the_deployment_as_kubectl_means_it() {
        let (d, listed) = three_revisions();
        let owned = owned_replica_sets(&d, &listed);
        let Rollback::Patch(patch) = plan(&d, &owned, 0).unwrap() else {
            panic!("expected a patch");
        };
        let patched = keel_patch::parse_json_patch(&patch)
            .unwrap()
            .apply(&d)
            .unwrap();
        assert_eq!(
            patched["spec"]["template"],
            crate::rollout::fixtures::template("nginx:2")
        );
        assert_eq!(
            patched["metadata"]["annotations"],
            json!({"deployment.kubernetes.io/revision": "3",
                   "kubectl.kubernetes.io/last-applied-configuration": "{}"})
        );
        // A Deployment that moved on since it was read is not patched.
        let mut moved = d.clone();
        moved["metadata"]["resourceVersion"] = json!("43");
        assert!(
            keel_patch::parse_json_patch(&patch)
                .unwrap()
                .apply(&moved)
                .is_err()
        );
    }

    #[test]
    fn a_deployment_without_annotations_gets_them_added() {
        let (mut d, listed) = three_revisions();
        d["metadata"].as_object_mut().unwrap().remove("annotations");
        let owned = owned_replica_sets(&d, &listed);
        let Rollback::Patch(patch) = plan(&d, &owned, 1).unwrap() else {
            panic!("expected a patch");
        };
        assert_eq!(patch[2]["op"], "add");
        let patched = keel_patch::parse_json_patch(&patch)
            .unwrap()
            .apply(&d)
            .unwrap();
        assert_eq!(
            patched["metadata"]["annotations"],
            json!({"kubernetes.io/change-cause": "to 1"})
        );
    }

    #[test]
    fn a_paused_deployment_is_refused_after_the_revision_is_found() {
        let (mut d, listed) = three_revisions();
        d["spec"]["paused"] = json!(true);
        let owned = owned_replica_sets(&d, &listed);
        assert_eq!(
            plan(&d, &owned, 1).unwrap_err().to_string(),
            "you cannot rollback a paused deployment; resume it first with 'keelctl rollout resume' and try again"
        );
        assert_eq!(
            plan(&d, &owned, 9).unwrap_err(),
            RolloutError::RevisionNotFound(9)
        );
    }

    #[test]
    fn a_revision_with_the_current_template_is_skipped() {
        let (d, listed) = three_revisions();
        let owned = owned_replica_sets(&d, &listed);
        assert_eq!(
            plan(&d, &owned, 3).unwrap(),
            Rollback::Skipped(
                "skipped rollback (current template already matches revision 3)".into()
            )
        );
        // Rolled back to 2 by hand, before the controller made it the newest revision: the
        // previous revision is 2 again, and kubectl names the revision asked for, 0.
        let mut back = d.clone();
        back["spec"]["template"] = crate::rollout::fixtures::template("nginx:2");
        let owned = owned_replica_sets(&back, &listed);
        assert_eq!(
            plan(&back, &owned, 0).unwrap(),
            Rollback::Skipped(
                "skipped rollback (current template already matches revision 0)".into()
            )
        );
    }
}
