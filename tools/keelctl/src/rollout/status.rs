//! `rollout status`: the one line that says where a Deployment's rollout is, from its status
//! alone (kubectl's `DeploymentStatusViewer.Status`).

use keel_api::Metadata;
use serde_json::Value;

use super::{RolloutError, revision};

/// The reason of the `Progressing` condition when the rollout made no progress for
/// `spec.progressDeadlineSeconds`.
const TIMED_OUT_REASON: &str = "ProgressDeadlineExceeded";

/// Where a rollout is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// kubectl's line, without its newline.
    pub message: String,
    /// The rollout is complete: every replica updated and available, no old one left.
    pub done: bool,
}

/// The status line of `deployment`; with `pinned` > 0, an error if the Deployment rolls out
/// another revision.
///
/// Until the controller has observed the current spec (`status.observedGeneration` below
/// `metadata.generation`) the counts describe an older spec, so they are not read.
pub fn deployment_status(deployment: &Value, pinned: i64) -> Result<Progress, RolloutError> {
    let name = deployment.name();
    if pinned > 0 {
        let running = revision(deployment).map_err(|error| RolloutError::UnreadableRevision {
            name: name.to_string(),
            error,
        })?;
        if running != pinned {
            return Err(RolloutError::RevisionMismatch {
                desired: pinned,
                running,
            });
        }
    }
    let status = &deployment["status"];
    let int = |v: &Value| v.as_i64().unwrap_or(0);
    let generation = int(&deployment["metadata"]["generation"]);
    if generation > int(&status["observedGeneration"]) {
        return Ok(waiting(
            "Waiting for deployment spec update to be observed...".into(),
        ));
    }
    if progressing_reason(status) == Some(TIMED_OUT_REASON) {
        return Err(RolloutError::ProgressDeadlineExceeded(name.to_string()));
    }
    let updated = int(&status["updatedReplicas"]);
    let replicas = int(&status["replicas"]);
    let available = int(&status["availableReplicas"]);
    let message = |what: String| {
        waiting(format!(
            "Waiting for deployment {name:?} rollout to finish: {what}..."
        ))
    };
    if let Some(wanted) = deployment["spec"]["replicas"].as_i64()
        && updated < wanted
    {
        return Ok(message(format!(
            "{updated} out of {wanted} new replicas have been updated"
        )));
    }
    if replicas > updated {
        return Ok(message(format!(
            "{} old replicas are pending termination",
            replicas - updated
        )));
    }
    if available < updated {
        return Ok(message(format!(
            "{available} of {updated} updated replicas are available"
        )));
    }
    Ok(Progress {
        message: format!("deployment {name:?} successfully rolled out"),
        done: true,
    })
}

fn waiting(message: String) -> Progress {
    Progress {
        message,
        done: false,
    }
}

/// The reason of the `Progressing` condition, if there is one.
fn progressing_reason(status: &Value) -> Option<&str> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Progressing")?["reason"]
        .as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::fixtures::deployment;
    use serde_json::json;

    /// The fixture Deployment (generation 3, 2 replicas) with this status.
    fn with_status(status: Value) -> Value {
        let mut d = deployment("nginx");
        d["status"] = status;
        d
    }

    fn message(status: Value) -> (String, bool) {
        let p = deployment_status(&with_status(status), 0).unwrap();
        (p.message, p.done)
    }

    fn observed(extra: Value) -> Value {
        let mut s = json!({"observedGeneration": 3});
        s.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        s
    }

    #[test]
    fn an_unobserved_spec_is_waited_for_whatever_the_counts() {
        let waiting = (
            "Waiting for deployment spec update to be observed...".to_string(),
            false,
        );
        assert_eq!(message(json!({})), waiting);
        assert_eq!(
            message(
                json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
                           "availableReplicas": 2})
            ),
            waiting
        );
        // Even a stuck rollout: the condition is about the older spec.
        assert_eq!(
            message(json!({"observedGeneration": 2, "conditions": [
                {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]})),
            waiting
        );
    }

    #[test]
    fn each_stage_of_a_rolling_update_has_its_line() {
        let line = |what: &str| {
            (
                format!("Waiting for deployment \"nginx\" rollout to finish: {what}..."),
                false,
            )
        };
        assert_eq!(
            message(observed(json!({"replicas": 2, "updatedReplicas": 0}))),
            line("0 out of 2 new replicas have been updated")
        );
        assert_eq!(
            message(observed(json!({"replicas": 3, "updatedReplicas": 1}))),
            line("1 out of 2 new replicas have been updated")
        );
        assert_eq!(
            message(observed(json!({"replicas": 3, "updatedReplicas": 2}))),
            line("1 old replicas are pending termination")
        );
        assert_eq!(
            message(observed(
                json!({"replicas": 2, "updatedReplicas": 2, "availableReplicas": 1})
            )),
            line("1 of 2 updated replicas are available")
        );
        assert_eq!(
            message(observed(
                json!({"replicas": 2, "updatedReplicas": 2, "availableReplicas": 2})
            )),
            (
                "deployment \"nginx\" successfully rolled out".to_string(),
                true
            )
        );
        // A newer generation observed counts as observed.
        assert!(
            message(
                json!({"observedGeneration": 4, "replicas": 2, "updatedReplicas": 2,
                           "availableReplicas": 2})
            )
            .1
        );
    }

    #[test]
    fn scaled_to_zero_is_rolled_out_once_old_pods_are_gone() {
        let mut d = with_status(observed(json!({"replicas": 1})));
        d["spec"]["replicas"] = json!(0);
        assert_eq!(
            deployment_status(&d, 0).unwrap().message,
            "Waiting for deployment \"nginx\" rollout to finish: 1 old replicas are pending termination..."
        );
        d["status"] = observed(json!({}));
        assert!(deployment_status(&d, 0).unwrap().done);
    }

    #[test]
    fn without_spec_replicas_the_update_count_is_not_checked() {
        let mut d = with_status(observed(json!({"replicas": 0, "updatedReplicas": 0})));
        d["spec"].as_object_mut().unwrap().remove("replicas");
        assert!(deployment_status(&d, 0).unwrap().done);
    }

    #[test]
    fn a_stuck_rollout_is_an_error_once_observed() {
        let stuck = observed(json!({"replicas": 2, "updatedReplicas": 1, "conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
        ]}));
        let e = deployment_status(&with_status(stuck), 0).unwrap_err();
        assert_eq!(e, RolloutError::ProgressDeadlineExceeded("nginx".into()));
        assert_eq!(
            e.to_string(),
            "deployment \"nginx\" exceeded its progress deadline"
        );
        // Other reasons of Progressing, and the reason on another condition, are progress.
        let progressing = observed(
            json!({"replicas": 2, "updatedReplicas": 2, "availableReplicas": 2,
            "conditions": [
                {"type": "Available", "status": "False", "reason": "ProgressDeadlineExceeded"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}
            ]}),
        );
        assert!(
            deployment_status(&with_status(progressing), 0)
                .unwrap()
                .done
        );
    }

    #[test]
    fn a_pinned_revision_must_be_the_running_one() {
        let done = observed(json!({"replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}));
        let d = with_status(done);
        assert!(deployment_status(&d, 2).unwrap().done);
        let e = deployment_status(&d, 3).unwrap_err();
        assert_eq!(
            e.to_string(),
            "desired revision (3) is different from the running revision (2)"
        );
        let mut unannotated = d.clone();
        unannotated["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("annotations");
        assert_eq!(
            deployment_status(&unannotated, 1).unwrap_err(),
            RolloutError::RevisionMismatch {
                desired: 1,
                running: 0
            }
        );
        let mut garbled = d.clone();
        garbled["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = json!("two");
        assert_eq!(
            deployment_status(&garbled, 1).unwrap_err().to_string(),
            "cannot get the revision of deployment \"nginx\": strconv.ParseInt: parsing \"two\": invalid syntax"
        );
        // Not pinned: the annotation is not read at all.
        assert!(deployment_status(&garbled, 0).unwrap().done);
    }
}
