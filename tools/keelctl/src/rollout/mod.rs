//! What kubectl's `rollout` commands compute from a Deployment and its ReplicaSets, without
//! I/O: the status line (`status`), the revisions and their table (`history`), the ReplicaSet
//! and patch of a rollback (`undo`), and the patches of `pause`, `resume` and `restart`.
//!
//! Objects are the server's JSON. Each function follows the kubectl v1.32 function named in
//! its doc, including the order in which it checks things, since that order decides which
//! error a user sees.

pub mod history;
pub mod patches;
pub mod rollback;
pub mod status;

use std::time::SystemTime;

use keel_api::Metadata;
use serde_json::Value;

/// The revision of a Deployment's rollout, on the Deployment and on each of its ReplicaSets.
pub const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";
/// Why a revision was made (`kubectl annotate ... kubernetes.io/change-cause=...`); the
/// Deployment controller copies it to the new ReplicaSet.
pub const CHANGE_CAUSE_ANNOTATION: &str = "kubernetes.io/change-cause";
/// The label the Deployment controller adds to a ReplicaSet's template (and selector) to tell
/// its pods from those of the Deployment's other ReplicaSets; never on the Deployment.
pub const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";

/// Why a rollout command refuses or fails; each reads as kubectl's message (after `error: `).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RolloutError {
    /// `status`: the Deployment's `Progressing` condition says `ProgressDeadlineExceeded`. The
    /// rollout is stuck (image pull errors, no room for pods...): look at its pods.
    #[error("deployment {0:?} exceeded its progress deadline")]
    ProgressDeadlineExceeded(String),

    /// `status --revision N`: the Deployment rolls out another revision than the one pinned.
    #[error("desired revision ({desired}) is different from the running revision ({running})")]
    RevisionMismatch { desired: i64, running: i64 },

    /// `status --revision N`: the Deployment's revision annotation is not a number.
    #[error("cannot get the revision of deployment {name:?}: {error}")]
    UnreadableRevision { name: String, error: BadRevision },

    /// `status`: the Deployment was deleted while being watched; a new one of the same name
    /// would be another rollout.
    #[error("object has been deleted")]
    Deleted,

    /// `status --timeout`: the rollout did not finish in time.
    #[error("timed out waiting for the condition")]
    TimedOut,

    /// `history --revision N`: no ReplicaSet has revision N.
    #[error("unable to find the specified revision")]
    HistoryRevisionNotFound,

    /// `undo --to-revision N`: no ReplicaSet has revision N (or N is negative).
    #[error("unable to find specified revision {0} in history")]
    RevisionNotFound(i64),

    /// `undo` without `--to-revision`: the Deployment has no ReplicaSet before its newest.
    #[error("no rollout history found for deployment {0:?}")]
    NoHistory(String),

    /// `undo` of a paused Deployment: the controller would not roll the change out.
    #[error(
        "you cannot rollback a paused deployment; resume it first with 'keelctl rollout resume' and try again"
    )]
    RollbackPaused,

    /// `pause`, `resume` or `restart` refused for one object (`resource` as
    /// `deployments.apps`): already paused, not paused, paused (restart), or not a Deployment.
    #[error("{resource} {name:?} {why}")]
    Refused {
        resource: String,
        name: String,
        why: &'static str,
    },

    /// `restart` twice within one second: the annotation, at second precision, would not
    /// change, so neither would the pods.
    #[error(
        "failed to create patch for {0}: if restart has already been triggered within the past second, please wait before attempting to trigger another"
    )]
    RestartTooSoon(String),

    /// The command does not apply to this kind (e.g. `rollout undo` of a ReplicaSet).
    #[error("{0}")]
    Unsupported(String),
}

/// A revision annotation that is not an integer: Go's `strconv.ParseInt` message, as kubectl
/// shows it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("strconv.ParseInt: parsing {0:?}: invalid syntax")]
pub struct BadRevision(pub String);

/// kubectl's `deploymentutil.Revision`: the revision annotation of a Deployment or
/// ReplicaSet, 0 when it has none.
pub fn revision(object: &Value) -> Result<i64, BadRevision> {
    match &object["metadata"]["annotations"][REVISION_ANNOTATION] {
        Value::Null => Ok(0),
        Value::String(s) => s.parse().map_err(|_| BadRevision(s.clone())),
        other => Err(BadRevision(other.to_string())),
    }
}

/// Whether `owner` is the controller of `object` (`metav1.IsControlledBy`): the first owner
/// reference marked `controller: true` carries the owner's uid.
pub fn is_controlled_by(object: &Value, owner: &Value) -> bool {
    !owner.uid().is_empty() && object.controller_uid() == Some(owner.uid())
}

/// kubectl's `equalIgnoreHash`: two pod templates are the same, `pod-template-hash` aside.
///
/// kubectl compares typed objects, where a missing, null or empty map or list all mean the
/// same; the JSON is normalised so that they do here too.
pub fn templates_equal(a: &Value, b: &Value) -> bool {
    let mut a = a.clone();
    let mut b = b.clone();
    for t in [&mut a, &mut b] {
        remove_hash_label(t);
        normalise(t);
    }
    a == b
}

/// Drops `pod-template-hash` from a template's labels (and the labels if that was the only
/// one, as Go's `omitempty` would).
pub fn remove_hash_label(template: &mut Value) {
    let Some(metadata) = template.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(labels) = metadata.get_mut("labels").and_then(Value::as_object_mut) {
        labels.remove(POD_TEMPLATE_HASH_LABEL);
        if labels.is_empty() {
            metadata.remove("labels");
        }
    }
}

/// Removes nulls and empty lists everywhere, and empty `labels` and `annotations` maps:
/// what Go's typed objects cannot tell from absent fields. (Other empty objects stay: an
/// `emptyDir: {}` is not the same as no `emptyDir`.)
fn normalise(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|key, value| {
                normalise(value);
                match value {
                    Value::Null => false,
                    Value::Array(a) => !a.is_empty(),
                    Value::Object(m) if key == "labels" || key == "annotations" => !m.is_empty(),
                    _ => true,
                }
            });
        }
        Value::Array(items) => items.iter_mut().for_each(normalise),
        _ => {}
    }
}

/// The ReplicaSets `deployment` controls, in kubectl's order (`GetAllReplicaSets`): the old
/// ones in the order listed, then the new one, which is the oldest whose template is the
/// Deployment's. Where two share a revision, the later one counts, so this order matters.
pub fn owned_replica_sets<'a>(deployment: &Value, listed: &'a [Value]) -> Vec<&'a Value> {
    let owned: Vec<&Value> = listed
        .iter()
        .filter(|rs| is_controlled_by(rs, deployment))
        .collect();
    let template = &deployment["spec"]["template"];
    let mut by_age = owned.clone();
    by_age.sort_by(|a, b| {
        created(a)
            .cmp(&created(b))
            .then_with(|| a.name().cmp(b.name()))
    });
    let new = by_age
        .into_iter()
        .find(|rs| templates_equal(&rs["spec"]["template"], template));
    let mut ordered: Vec<&Value> = owned
        .into_iter()
        .filter(|rs| new.is_none_or(|n| !std::ptr::eq(*rs, n)))
        .collect();
    ordered.extend(new);
    ordered
}

/// `creationTimestamp`; none sorts first, as Go's zero time.
fn created(o: &Value) -> Option<SystemTime> {
    o.creation_timestamp()
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Deployments and ReplicaSets as the Deployment controller writes them.

    use serde_json::{Value, json};

    pub const UID: &str = "d-uid";

    pub fn template(image: &str) -> Value {
        json!({
            "metadata": {"labels": {"app": "nginx"}},
            "spec": {"containers": [{"name": "nginx", "image": image}]}
        })
    }

    pub fn deployment(image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "nginx", "namespace": "default", "uid": UID,
                "resourceVersion": "42", "generation": 3,
                "annotations": {"deployment.kubernetes.io/revision": "2"}
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "nginx"}},
                "template": template(image)
            }
        })
    }

    /// A ReplicaSet of revision `revision` (None: no annotation) created at second `second`.
    pub fn replica_set(name: &str, revision: Option<&str>, image: &str, second: u32) -> Value {
        let mut t = template(image);
        t["metadata"]["labels"]["pod-template-hash"] = json!(name);
        let mut annotations = json!({});
        if let Some(r) = revision {
            annotations["deployment.kubernetes.io/revision"] = json!(r);
        }
        json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name, "namespace": "default", "uid": format!("{name}-uid"),
                "creationTimestamp": format!("2024-05-01T10:00:{second:02}Z"),
                "labels": {"app": "nginx", "pod-template-hash": name},
                "annotations": annotations,
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx",
                    "uid": UID, "controller": true, "blockOwnerDeletion": true
                }]
            },
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "nginx", "pod-template-hash": name}},
                "template": t
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;
    use serde_json::json;

    #[test]
    fn revision_is_the_annotation_and_zero_without_it() {
        let mut rs = replica_set("a", Some("7"), "nginx", 0);
        assert_eq!(revision(&rs), Ok(7));
        assert_eq!(revision(&replica_set("a", None, "nginx", 0)), Ok(0));
        rs["metadata"]["annotations"][REVISION_ANNOTATION] = json!("x");
        assert_eq!(
            revision(&rs).unwrap_err().to_string(),
            "strconv.ParseInt: parsing \"x\": invalid syntax"
        );
        rs["metadata"]["annotations"][REVISION_ANNOTATION] = json!(7);
        assert!(revision(&rs).is_err(), "annotations are strings");
    }

    #[test]
    fn only_the_controller_reference_with_the_uid_counts() {
        let d = deployment("nginx");
        let mut rs = replica_set("a", Some("1"), "nginx", 0);
        assert!(is_controlled_by(&rs, &d));
        rs["metadata"]["ownerReferences"][0]["controller"] = json!(false);
        assert!(
            !is_controlled_by(&rs, &d),
            "an owner that is not the controller"
        );
        rs["metadata"]["ownerReferences"][0]["controller"] = json!(true);
        rs["metadata"]["ownerReferences"][0]["uid"] = json!("other");
        assert!(
            !is_controlled_by(&rs, &d),
            "a Deployment of the same name, deleted and created again"
        );
        rs["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("ownerReferences");
        assert!(!is_controlled_by(&rs, &d), "an orphan");
        let mut no_uid = d.clone();
        no_uid["metadata"]["uid"] = json!("");
        rs["metadata"]["ownerReferences"] = json!([{"uid": "", "controller": true}]);
        assert!(!is_controlled_by(&rs, &no_uid));
    }

    #[test]
    fn templates_compare_without_the_hash_label_and_empty_fields() {
        let rs = replica_set("abc", Some("1"), "nginx", 0);
        let d = deployment("nginx");
        assert!(templates_equal(
            &rs["spec"]["template"],
            &d["spec"]["template"]
        ));
        assert!(!templates_equal(
            &rs["spec"]["template"],
            &deployment("nginx:2")["spec"]["template"]
        ));

        let with_empties = json!({
            "metadata": {"labels": {"app": "nginx"}, "annotations": {}, "creationTimestamp": null},
            "spec": {"containers": [{"name": "nginx", "image": "nginx", "env": []}], "volumes": []}
        });
        assert!(templates_equal(&with_empties, &d["spec"]["template"]));
        let empty_dir = json!({
            "metadata": {"labels": {"app": "nginx"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx"}],
                     "volumes": [{"name": "v", "emptyDir": {}}]}
        });
        let mut no_source = empty_dir.clone();
        no_source["spec"]["volumes"][0]
            .as_object_mut()
            .unwrap()
            .remove("emptyDir");
        assert!(!templates_equal(&empty_dir, &no_source));
        let mut other_label = d["spec"]["template"].clone();
        other_label["metadata"]["labels"]["tier"] = json!("web");
        assert!(!templates_equal(&other_label, &d["spec"]["template"]));
    }

    #[test]
    fn the_hash_label_is_removed_and_with_it_labels_left_empty() {
        let mut t = json!({"metadata": {"labels": {"pod-template-hash": "x", "app": "a"}}});
        remove_hash_label(&mut t);
        assert_eq!(t, json!({"metadata": {"labels": {"app": "a"}}}));
        let mut only = json!({"metadata": {"labels": {"pod-template-hash": "x"}}});
        remove_hash_label(&mut only);
        assert_eq!(only, json!({"metadata": {}}));
        let mut none = json!({"spec": {}});
        remove_hash_label(&mut none);
        assert_eq!(none, json!({"spec": {}}));
    }

    #[test]
    fn owned_replica_sets_come_old_first_then_the_new_one() {
        let d = deployment("nginx:2");
        let mut stranger = replica_set("s", Some("9"), "nginx", 0);
        stranger["metadata"]["ownerReferences"][0]["uid"] = json!("other");
        let listed = vec![
            replica_set("a", Some("2"), "nginx:2", 5),
            replica_set("b", Some("1"), "nginx", 1),
            stranger,
            replica_set("c", Some("3"), "nginx:3", 9),
        ];
        let names: Vec<&str> = owned_replica_sets(&d, &listed)
            .into_iter()
            .map(Metadata::name)
            .collect();
        assert_eq!(names, ["b", "c", "a"]);

        // Two with the Deployment's template: the oldest is the new one; equal ages go by name.
        let listed = vec![
            replica_set("z", Some("4"), "nginx:2", 1),
            replica_set("y", Some("2"), "nginx:2", 3),
        ];
        let names: Vec<&str> = owned_replica_sets(&d, &listed)
            .into_iter()
            .map(Metadata::name)
            .collect();
        assert_eq!(names, ["y", "z"]);
        let listed = vec![
            replica_set("z", Some("4"), "nginx:2", 1),
            replica_set("y", Some("2"), "nginx:2", 1),
        ];
        let names: Vec<&str> = owned_replica_sets(&d, &listed)
            .into_iter()
            .map(Metadata::name)
            .collect();
        assert_eq!(names, ["z", "y"]);

        // None with the template (a rollout not started yet): listed order.
        let listed = vec![
            replica_set("b", Some("1"), "nginx", 1),
            replica_set("a", Some("2"), "nginx:1", 0),
        ];
        let names: Vec<&str> = owned_replica_sets(&deployment("nginx:9"), &listed)
            .into_iter()
            .map(Metadata::name)
            .collect();
        assert_eq!(names, ["b", "a"]);
    }
}
