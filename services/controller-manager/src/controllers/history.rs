//! Revision history, as Kubernetes' `controller/history` keeps it for StatefulSets and
//! DaemonSets: ControllerRevisions owned by the workload, each holding its pod template as a
//! patch that replaces it (`{"spec": {"template": {..., "$patch": "replace"}}}`), numbered in
//! the order they were (last) in use, named `<owner>-<hash of the data>`.

use std::sync::Arc;

use keel_api::Metadata;
use keel_client::{ApiError, Client, DeleteParams, GroupVersionResource, PatchType, Reason};
use serde_json::{Value, json};

use super::deployment::pod_template_hash;
use crate::objects;

/// A revision's data: the owner's template as a patch that replaces it, as Kubernetes stores it.
pub fn revision_data(set: &Value) -> Value {
    let mut template = set["spec"]["template"].clone();
    if let Some(t) = template.as_object_mut() {
        t.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": template}})
}

/// The template a revision holds.
pub fn revision_template(revision: &Value) -> Value {
    let mut t = revision["data"]["spec"]["template"].clone();
    if let Some(m) = t.as_object_mut() {
        m.remove("$patch");
    }
    t
}

pub fn revision_number(r: &Value) -> i64 {
    r["revision"].as_i64().unwrap_or(0)
}

/// The revision of the owner's template: found among its revisions (sorted by number; made
/// the newest if it was an old one: a rollback), or created, named `<owner>-<hash>`. `None`
/// when a name collision was recorded in the owner's `status.collisionCount` (the owner's
/// update brings it back).
pub async fn update_revision(
    client: &Client,
    owner_gvr: &GroupVersionResource,
    set: &Value,
    revisions: &mut Vec<Arc<Value>>,
) -> Result<Option<Arc<Value>>, ApiError> {
    let data = revision_data(set);
    let latest = revisions.last().map(|r| revision_number(r)).unwrap_or(0);
    if let Some(same) = revisions.iter().find(|r| r["data"] == data).cloned() {
        if revision_number(&same) == latest {
            return Ok(Some(same));
        }
        let patch = json!({"revision": latest + 1, "metadata": {"resourceVersion": same.resource_version()}});
        let bumped = client
            .patch(
                &objects::controllerrevisions(),
                set.namespace(),
                same.name(),
                PatchType::Merge,
                &patch,
            )
            .await?;
        return Ok(Some(Arc::new(bumped)));
    }
    let collisions = set["status"]["collisionCount"].as_i64();
    let name = format!(
        "{}-{}",
        set.name(),
        pod_template_hash(&data, collisions.filter(|c| *c > 0))
    );
    let revision = json!({
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {
            "name": name, "namespace": set.namespace(),
            "labels": set["spec"]["template"]["metadata"]["labels"],
            "ownerReferences": [objects::controller_reference(set)],
        },
        "data": data,
        "revision": latest + 1,
    });
    match client
        .create(&objects::controllerrevisions(), set.namespace(), &revision)
        .await
    {
        Ok(created) => {
            let created = Arc::new(created);
            revisions.push(created.clone());
            Ok(Some(created))
        }
        Err(e) if e.reason == Reason::AlreadyExists => {
            let existing = client
                .get(&objects::controllerrevisions(), set.namespace(), &name)
                .await?;
            if existing.controller_uid() == Some(set.uid()) && existing["data"] == data {
                return Ok(Some(Arc::new(existing)));
            }
            let body = json!({"metadata": {"resourceVersion": set.resource_version()},
                "status": {"collisionCount": collisions.unwrap_or(0) + 1}});
            match client
                .patch_subresource(
                    owner_gvr,
                    set.namespace(),
                    set.name(),
                    "status",
                    PatchType::Merge,
                    serde_json::to_vec(&body).unwrap_or_default(),
                )
                .await
            {
                Ok(_) => Ok(None),
                Err(e) if matches!(e.reason, Reason::Conflict | Reason::NotFound) => Ok(None),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Deletes old revisions beyond `revisionHistoryLimit`, oldest first, never one `in_use`
/// (the current and update revisions, one a Pod still runs).
pub async fn prune(
    client: &Client,
    set: &Value,
    revisions: &[Arc<Value>],
    in_use: impl Fn(&Value) -> bool,
) -> Result<(), ApiError> {
    let limit =
        usize::try_from(set["spec"]["revisionHistoryLimit"].as_i64().unwrap_or(10)).unwrap_or(0);
    let live: Vec<&Arc<Value>> = revisions.iter().filter(|r| !in_use(r)).collect();
    let excess = live.len().saturating_sub(limit);
    for r in live.into_iter().take(excess) {
        let params = DeleteParams::default();
        match client
            .delete(
                &objects::controllerrevisions(),
                r.namespace(),
                r.name(),
                &params,
            )
            .await
        {
            Ok(_) => {}
            Err(e) if e.reason == Reason::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revision_holds_the_template_as_a_replacing_patch() {
        let s = json!({"spec": {"template": {"metadata": {"labels": {"app": "web"}}, "spec": {}}}});
        let data = revision_data(&s);
        assert_eq!(data["spec"]["template"]["$patch"], "replace");
        assert_eq!(
            revision_template(&json!({"data": data})),
            s["spec"]["template"]
        );
        assert_eq!(revision_number(&json!({"revision": 3})), 3);
    }
}
