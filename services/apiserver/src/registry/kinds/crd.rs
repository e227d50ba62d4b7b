//! `apiextensions.k8s.io/v1` CustomResourceDefinition: validated as Kubernetes validates a
//! CRD, and given its cleanup finalizer and status on create (`registry::crd`). The custom
//! resources a CRD defines are kinds of their own: `crd::CustomResource`.

use keel_api::{FieldCause, Object};
use serde_json::Value;

use super::{Kind, MergeKeys, builtin_merge_keys};
use crate::registry::crd;

pub struct CustomResourceDefinition;

impl Kind for CustomResourceDefinition {
    /// Its lists all replace, as Kubernetes' types declare no merge key for them.
    fn merge_schema(&self) -> Option<MergeKeys> {
        builtin_merge_keys("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    }

    fn prepare_for_create(&self, obj: &mut Object) {
        crd::prepare_for_create(obj);
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        causes.extend(crd::validate(obj));
    }

    /// On create only (`spec.group` cannot change): a CRD stored before this rule must still
    /// lose its finalizer when deleted.
    fn validate_create(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        // Custom objects are stored under `/registry/<group>/<resource>` as built-in ones
        // are, so a CRD of `clusterrolebindings.rbac.authorization.k8s.io` at another version
        // would read and write the real bindings past every rule of theirs (Kubernetes keeps
        // the two apart by key, and asks for an approval annotation in its own groups).
        let group = obj.as_map().get("spec").and_then(|s| s.get("group"));
        if let Some(group) = group.and_then(Value::as_str)
            && super::builtin_group(group, None)
        {
            causes.push(FieldCause::forbidden(
                "spec.group",
                format!("{group} is the group of built-in resources"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn causes_for_group(group: &str, plural: &str) -> Vec<FieldCause> {
        let crd = Object::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {"group": group, "scope": "Cluster",
                     "names": {"kind": "Thing", "plural": plural},
                     "versions": [{"name": "v9", "served": true, "storage": true,
                                   "schema": {"openAPIV3Schema": {"type": "object"}}}]},
        }))
        .expect("an object");
        let mut causes = Vec::new();
        CustomResourceDefinition.validate(&crd, &mut causes);
        CustomResourceDefinition.validate_create(&crd, &mut causes);
        causes
    }

    /// A CRD of a built-in group would share the built-in resources' keys in etcd: one of
    /// `clusterrolebindings.rbac.authorization.k8s.io` at `v9` would write real bindings
    /// past RBAC's rules.
    #[test]
    fn a_crd_in_a_built_in_group_is_refused() {
        for (group, plural) in [
            ("rbac.authorization.k8s.io", "clusterrolebindings"),
            ("networking.k8s.io", "widgets"),
            ("apiextensions.k8s.io", "things"),
        ] {
            let causes = causes_for_group(group, plural);
            assert!(
                causes.iter().any(|c| c.field == "spec.group"
                    && c.message
                        == format!("Forbidden: {group} is the group of built-in resources")),
                "{group}: {causes:?}"
            );
        }
        // A group of its own under k8s.io is not a built-in one (Gateway API's).
        let causes = causes_for_group("gateway.networking.k8s.io", "gateways");
        assert!(causes.is_empty(), "{causes:?}");
    }
}
