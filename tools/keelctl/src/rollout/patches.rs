//! `rollout pause`, `resume` and `restart`: the strategic merge patch each sends, or why it
//! refuses (kubectl's `ObjectPauser`, `ObjectResumer` and `ObjectRestarter`).
//!
//! `resource` names the object's resource in refusals as kubectl does (`deployments.apps`).

use keel_api::Metadata;
use serde_json::{Value, json};

use super::RolloutError;

/// The pod-template annotation `restart` sets: a new value is a new template, so the
/// Deployment controller replaces every pod.
pub const RESTARTED_AT_ANNOTATION: &str = "kubectl.kubernetes.io/restartedAt";

fn is_deployment(object: &Value) -> bool {
    object["kind"] == "Deployment"
}

fn is_paused(object: &Value) -> bool {
    object["spec"]["paused"].as_bool() == Some(true)
}

fn refused(resource: &str, object: &Value, why: &'static str) -> RolloutError {
    RolloutError::Refused {
        resource: resource.to_string(),
        name: object.name().to_string(),
        why,
    }
}

/// `{"spec":{"paused":true}}`, for a Deployment not paused yet.
pub fn pause(resource: &str, object: &Value) -> Result<Value, RolloutError> {
    if !is_deployment(object) {
        return Err(refused(resource, object, "pausing is not supported"));
    }
    if is_paused(object) {
        return Err(refused(resource, object, "is already paused"));
    }
    Ok(json!({"spec": {"paused": true}}))
}

/// `{"spec":{"paused":null}}` (kubectl's patch drops the field, false being its default),
/// for a paused Deployment.
pub fn resume(resource: &str, object: &Value) -> Result<Value, RolloutError> {
    if !is_deployment(object) {
        return Err(refused(resource, object, "resuming is not supported"));
    }
    if !is_paused(object) {
        return Err(refused(resource, object, "is not paused"));
    }
    Ok(json!({"spec": {"paused": null}}))
}

/// Sets [`RESTARTED_AT_ANNOTATION`] to `now` (RFC 3339, to the second) on the pod template of
/// a Deployment that is not paused.
pub fn restart(resource: &str, object: &Value, now: &str) -> Result<Value, RolloutError> {
    if !is_deployment(object) {
        return Err(refused(resource, object, "restarting is not supported"));
    }
    if is_paused(object) {
        return Err(refused(
            resource,
            object,
            "can't restart paused deployment (run rollout resume first)",
        ));
    }
    let current = &object["spec"]["template"]["metadata"]["annotations"][RESTARTED_AT_ANNOTATION];
    if current.as_str() == Some(now) {
        return Err(RolloutError::RestartTooSoon(object.name().to_string()));
    }
    Ok(json!({"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT_ANNOTATION: now}}}}}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::fixtures::{deployment, replica_set};

    const DEPLOYMENTS: &str = "deployments.apps";

    fn paused() -> Value {
        let mut d = deployment("nginx");
        d["spec"]["paused"] = json!(true);
        d
    }

    #[test]
    fn pause_and_resume_flip_spec_paused() {
        assert_eq!(
            pause(DEPLOYMENTS, &deployment("nginx")).unwrap(),
            json!({"spec": {"paused": true}})
        );
        assert_eq!(
            resume(DEPLOYMENTS, &paused()).unwrap(),
            json!({"spec": {"paused": null}})
        );
        let mut explicit = deployment("nginx");
        explicit["spec"]["paused"] = json!(false);
        assert!(pause(DEPLOYMENTS, &explicit).is_ok());
    }

    #[test]
    fn pausing_twice_and_resuming_a_running_deployment_are_refused() {
        assert_eq!(
            pause(DEPLOYMENTS, &paused()).unwrap_err().to_string(),
            "deployments.apps \"nginx\" is already paused"
        );
        assert_eq!(
            resume(DEPLOYMENTS, &deployment("nginx"))
                .unwrap_err()
                .to_string(),
            "deployments.apps \"nginx\" is not paused"
        );
    }

    #[test]
    fn restart_stamps_the_pod_template() {
        let now = "2024-05-01T10:00:00Z";
        assert_eq!(
            restart(DEPLOYMENTS, &deployment("nginx"), now).unwrap(),
            json!({"spec": {"template": {"metadata": {"annotations": {
                "kubectl.kubernetes.io/restartedAt": "2024-05-01T10:00:00Z"}}}}})
        );
        let mut restarted = deployment("nginx");
        restarted["spec"]["template"]["metadata"]["annotations"] =
            json!({RESTARTED_AT_ANNOTATION: "2024-05-01T09:00:00Z"});
        assert!(restart(DEPLOYMENTS, &restarted, now).is_ok());
        assert_eq!(
            restart(DEPLOYMENTS, &restarted, "2024-05-01T09:00:00Z")
                .unwrap_err()
                .to_string(),
            "failed to create patch for nginx: if restart has already been triggered within the past second, please wait before attempting to trigger another"
        );
        assert_eq!(
            restart(DEPLOYMENTS, &paused(), now)
                .unwrap_err()
                .to_string(),
            "deployments.apps \"nginx\" can't restart paused deployment (run rollout resume first)"
        );
    }

    #[test]
    fn only_deployments_are_paused_resumed_or_restarted() {
        let rs = replica_set("a", Some("1"), "nginx", 0);
        let r = "replicasets.apps";
        assert_eq!(
            pause(r, &rs).unwrap_err().to_string(),
            "replicasets.apps \"a\" pausing is not supported"
        );
        assert_eq!(
            resume(r, &rs).unwrap_err().to_string(),
            "replicasets.apps \"a\" resuming is not supported"
        );
        assert_eq!(
            restart(r, &rs, "now").unwrap_err().to_string(),
            "replicasets.apps \"a\" restarting is not supported"
        );
    }
}
