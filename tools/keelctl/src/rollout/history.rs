//! `rollout history`: a Deployment's revisions, one per ReplicaSet it controls, as kubectl's
//! `DeploymentHistoryViewer` reads and prints them.

use std::collections::BTreeMap;

use keel_api::Metadata;
use serde_json::{Value, json};

use super::{BadRevision, CHANGE_CAUSE_ANNOTATION, revision};

/// A Deployment's revisions: each revision's ReplicaSet, by revision number.
#[derive(Debug, Default)]
pub struct History<'a> {
    pub revisions: BTreeMap<i64, &'a Value>,
    /// ReplicaSets skipped because their revision annotation is not a number, with why:
    /// kubectl logs a warning for each.
    pub unreadable: Vec<(&'a Value, BadRevision)>,
}

impl<'a> History<'a> {
    /// The history of the ReplicaSets a Deployment controls, in kubectl's order (see
    /// [`super::owned_replica_sets`]): of two with one revision, the later is kept.
    pub fn of(owned: &[&'a Value]) -> History<'a> {
        let mut history = History::default();
        for rs in owned {
            match revision(rs) {
                Ok(n) => {
                    history.revisions.insert(n, rs);
                }
                Err(e) => history.unreadable.push((rs, e)),
            }
        }
        history
    }

    /// The `REVISION  CHANGE-CAUSE` table, aligned as kubectl's tabwriter aligns it (column
    /// width the widest cell plus two), or kubectl's sentence when there is no revision.
    pub fn table(&self) -> String {
        if self.revisions.is_empty() {
            return "No rollout history found.".into();
        }
        let rows: Vec<(String, String)> = self
            .revisions
            .iter()
            .map(|(n, rs)| {
                let cause = change_cause(rs).unwrap_or("<none>");
                (n.to_string(), cause.to_string())
            })
            .collect();
        let width = rows
            .iter()
            .map(|(n, _)| n.chars().count())
            .chain(std::iter::once("REVISION".len()))
            .max()
            .unwrap_or(0)
            + 2;
        let mut out = String::new();
        for (n, cause) in
            std::iter::once(("REVISION".to_string(), "CHANGE-CAUSE".to_string())).chain(rows)
        {
            out.push_str(&format!("{n:<width$}{cause}\n"));
        }
        out
    }

    /// The pod template of revision `n` as kubectl shows it: the ReplicaSet's template, with
    /// the ReplicaSet's change-cause among its annotations.
    pub fn template(&self, n: i64) -> Option<Value> {
        self.revisions.get(&n).map(|rs| template_of(rs))
    }
}

/// A ReplicaSet's change-cause: its own annotation, else its template's.
fn change_cause(rs: &Value) -> Option<&str> {
    rs.annotation(CHANGE_CAUSE_ANNOTATION)
        .filter(|c| !c.is_empty())
        .or_else(|| {
            rs["spec"]["template"]["metadata"]["annotations"][CHANGE_CAUSE_ANNOTATION].as_str()
        })
        .filter(|c| !c.is_empty())
}

fn template_of(rs: &Value) -> Value {
    let mut template = rs["spec"]["template"].clone();
    if let Some(cause) = rs
        .annotation(CHANGE_CAUSE_ANNOTATION)
        .filter(|c| !c.is_empty())
        && let Some(t) = template.as_object_mut()
    {
        let metadata = t.entry("metadata").or_insert_with(|| json!({}));
        if let Some(m) = metadata.as_object_mut() {
            let annotations = m.entry("annotations").or_insert_with(|| json!({}));
            if let Some(a) = annotations.as_object_mut() {
                a.insert(CHANGE_CAUSE_ANNOTATION.into(), cause.into());
            }
        }
    }
    template
}

/// kubectl's warning for a skipped ReplicaSet.
pub fn unreadable_warning(rs: &Value, deployment: &Value, e: &BadRevision) -> String {
    format!(
        "unable to get revision from replicaset {} for deployment {} in namespace {}: {e}",
        rs.name(),
        deployment.name(),
        deployment.namespace()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::fixtures::{deployment, replica_set};

    fn with_cause(mut rs: Value, cause: &str) -> Value {
        rs["metadata"]["annotations"][CHANGE_CAUSE_ANNOTATION] = json!(cause);
        rs
    }

    #[test]
    fn the_table_lists_revisions_in_order_with_their_change_cause() {
        let owned = [
            with_cause(
                replica_set("c", Some("10"), "nginx:3", 2),
                "kubectl set image deployment/nginx nginx=nginx:3",
            ),
            replica_set("a", Some("1"), "nginx", 0),
            with_cause(replica_set("b", Some("2"), "nginx:2", 1), "bump"),
        ];
        let refs: Vec<&Value> = owned.iter().collect();
        assert_eq!(
            History::of(&refs).table(),
            "REVISION  CHANGE-CAUSE\n\
             1         <none>\n\
             2         bump\n\
             10        kubectl set image deployment/nginx nginx=nginx:3\n"
        );
    }

    #[test]
    fn wide_revision_numbers_widen_the_column() {
        let owned = [replica_set("a", Some("1234567890"), "nginx", 0)];
        let refs: Vec<&Value> = owned.iter().collect();
        assert_eq!(
            History::of(&refs).table(),
            "REVISION    CHANGE-CAUSE\n1234567890  <none>\n"
        );
    }

    #[test]
    fn no_replica_set_means_no_history() {
        assert_eq!(History::of(&[]).table(), "No rollout history found.");
    }

    #[test]
    fn a_replica_set_without_revision_is_revision_zero_and_garbled_ones_are_skipped() {
        let owned = [
            replica_set("a", None, "nginx", 0),
            replica_set("g", Some("x"), "nginx", 0),
        ];
        let refs: Vec<&Value> = owned.iter().collect();
        let h = History::of(&refs);
        assert_eq!(h.table(), "REVISION  CHANGE-CAUSE\n0         <none>\n");
        assert_eq!(h.unreadable.len(), 1);
        let (rs, e) = &h.unreadable[0];
        assert_eq!(
            unreadable_warning(rs, &deployment("nginx"), e),
            "unable to get revision from replicaset g for deployment nginx in namespace default: strconv.ParseInt: parsing \"x\": invalid syntax"
        );
    }
    #[test]
    fn of_two_replica_sets_with_one_revision_the_later_counts() {
        let owned = [
            with_cause(replica_set("old", Some("3"), "nginx", 0), "first"),
            with_cause(replica_set("new", Some("3"), "nginx:2", 1), "second"),
        ];
        let refs: Vec<&Value> = owned.iter().collect();
        let h = History::of(&refs);
        assert_eq!(h.table(), "REVISION  CHANGE-CAUSE\n3         second\n");
        assert_eq!(
            h.template(3).unwrap()["spec"]["containers"][0]["image"],
            "nginx:2"
        );
    }

    #[test]
    fn the_change_cause_falls_back_to_the_template_and_joins_it_when_shown() {
        let mut rs = replica_set("a", Some("1"), "nginx", 0);
        rs["spec"]["template"]["metadata"]["annotations"] =
            json!({CHANGE_CAUSE_ANNOTATION: "from the template"});
        let owned = [
            rs,
            with_cause(replica_set("b", Some("2"), "nginx:2", 1), "own"),
        ];
        let refs: Vec<&Value> = owned.iter().collect();
        let h = History::of(&refs);
        assert_eq!(
            h.table(),
            "REVISION  CHANGE-CAUSE\n1         from the template\n2         own\n"
        );
        let t = h.template(2).unwrap();
        assert_eq!(
            t["metadata"],
            json!({"labels": {"app": "nginx", "pod-template-hash": "b"},
                   "annotations": {CHANGE_CAUSE_ANNOTATION: "own"}})
        );
        assert_eq!(
            h.template(1).unwrap()["metadata"]["annotations"][CHANGE_CAUSE_ANNOTATION],
            "from the template"
        );
        assert!(h.template(3).is_none());
    }
}
