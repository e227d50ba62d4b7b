//! The list and map types of the built-in kinds, from Kubernetes' own OpenAPI document:
//! `builtin-types.json`, written by `scripts/gen-builtin-openapi.py` (the definitions each kind
//! reaches, cut to what merging reads, and the few keel keeps by hand, which the file lists
//! under `handKept`). Parsed once, on first use.

use std::collections::HashMap;
use std::fmt;
use std::sync::LazyLock;

use serde_json::Value;

use super::tree::{Definitions, Node};
use super::{ListStrategy, MergeSchema};

/// `kinds`: `apiVersion/Kind` → definition name; `definitions`: compiled, by name.
struct Types {
    kinds: HashMap<String, String>,
    definitions: Definitions,
}

/// `None` if the embedded file does not parse, which its own test rules out: every kind then
/// has no schema, and strategic patches of built-in kinds are refused rather than guessed.
static TYPES: LazyLock<Option<Types>> = LazyLock::new(|| parse(include_str!("builtin-types.json")));

fn parse(text: &str) -> Option<Types> {
    let doc: Value = serde_json::from_str(text).ok()?;
    let kinds = doc
        .get("kinds")?
        .as_object()?
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect();
    let definitions = Definitions::compile(doc.get("definitions")?.as_object()?);
    Some(Types { kinds, definitions })
}

/// The merge rules of one built-in kind, read through its definition in Kubernetes' document:
/// a field's types are those of the definition its path reaches by `$ref`s, whatever its
/// name. Built with [`BuiltinSchema::for_kind`]; kinds it does not know have none, and the API
/// server refuses strategic patches for them.
#[derive(Clone, Copy)]
pub struct BuiltinSchema {
    /// The kind's definition name (`io.k8s.api.core.v1.Pod`).
    name: &'static str,
    root: &'static Node,
    definitions: &'static Definitions,
}

impl fmt::Debug for BuiltinSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("BuiltinSchema").field(&self.name).finish()
    }
}

impl PartialEq for BuiltinSchema {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for BuiltinSchema {}

impl BuiltinSchema {
    /// The schema of a built-in kind keel serves (`"apps/v1"`, `"Deployment"`). `None` for
    /// anything else (custom resources): no merge keys are known, so a strategic patch cannot
    /// be applied.
    pub fn for_kind(api_version: &str, kind: &str) -> Option<Self> {
        let types = TYPES.as_ref()?;
        let name = types.kinds.get(&format!("{api_version}/{kind}"))?;
        Some(Self {
            name,
            root: types.definitions.get(name)?,
            definitions: &types.definitions,
        })
    }

    /// The schema node of the field at `path`: `None` when the document says nothing of it
    /// (an atomic list, a granular map).
    fn node(&self, path: &[&str]) -> Option<&'static Node> {
        self.definitions.resolve(self.root, path, None)
    }
}

impl MergeSchema for BuiltinSchema {
    fn typed(&self) -> bool {
        true
    }

    fn list_strategy(&self, path: &[&str]) -> ListStrategy {
        self.node(path).map_or(ListStrategy::Replace, |node| {
            self.definitions.list_type(node)
        })
    }

    fn patch_strategy(&self, path: &[&str]) -> ListStrategy {
        self.node(path).map_or(ListStrategy::Replace, |node| {
            self.definitions.patch_list(node)
        })
    }

    fn patch_replaces(&self, path: &[&str]) -> bool {
        self.node(path)
            .is_some_and(|node| node.has_strategy("replace"))
    }

    fn retain_keys(&self, path: &[&str]) -> bool {
        self.node(path)
            .is_some_and(|node| node.has_strategy("retainKeys"))
    }

    fn merge_key_default(&self, path: &[&str], key: &str) -> Option<Value> {
        self.definitions.key_default(self.node(path)?, key)
    }

    fn map_atomic(&self, path: &[&str]) -> bool {
        self.node(path)
            .is_some_and(|node| self.definitions.map_atomic(node))
    }

    /// Maps are what the document types with `additionalProperties`: labels, a ConfigMap's
    /// data, a CRD's schema `properties` (whose values are objects).
    fn keys_are_items(&self, path: &[&str]) -> bool {
        self.node(path)
            .is_some_and(|node| self.definitions.keys_are_items(node))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(k: &[&str]) -> ListStrategy {
        ListStrategy::MergeByKeys(k.iter().map(|s| (*s).to_owned()).collect())
    }

    fn schema(api_version: &str, kind: &str) -> BuiltinSchema {
        BuiltinSchema::for_kind(api_version, kind)
            .unwrap_or_else(|| panic!("no schema for {api_version} {kind}"))
    }

    #[test]
    fn the_embedded_types_parse_and_name_only_definitions_they_have() {
        let types = TYPES.as_ref().expect("builtin-types.json parses");
        assert!(types.kinds.len() >= 37, "{}", types.kinds.len());
        for (kind, name) in &types.kinds {
            assert!(types.definitions.get(name).is_some(), "{kind}: {name}");
        }
    }

    #[test]
    fn only_the_built_in_kinds_have_a_schema() {
        for (api_version, kind) in [
            ("v1", "Pod"),
            ("v1", "ConfigMap"),
            ("apps/v1", "Deployment"),
            ("autoscaling/v1", "HorizontalPodAutoscaler"),
            ("apiextensions.k8s.io/v1beta1", "CustomResourceDefinition"),
            (
                "admissionregistration.k8s.io/v1alpha1",
                "InitializerConfiguration",
            ),
        ] {
            schema(api_version, kind);
        }
        assert!(BuiltinSchema::for_kind("apps/v1", "Pod").is_none());
        assert!(BuiltinSchema::for_kind("v1", "Deployment").is_none());
        assert!(BuiltinSchema::for_kind("example.com/v1", "Widget").is_none());
        assert_eq!(schema("v1", "Pod"), schema("v1", "Pod"));
        assert_ne!(schema("v1", "Pod"), schema("v1", "Service"));
        assert_eq!(
            format!("{:?}", schema("v1", "Pod")),
            r#"BuiltinSchema("io.k8s.api.core.v1.Pod")"#
        );
    }

    #[test]
    fn a_pod_template_has_the_pod_spec_types_wherever_the_kind_keeps_it() {
        for (api_version, kind, template) in [
            ("v1", "Pod", &[][..]),
            ("apps/v1", "Deployment", &["spec", "template"][..]),
            ("batch/v1", "Job", &["spec", "template"][..]),
            (
                "batch/v1",
                "CronJob",
                &["spec", "jobTemplate", "spec", "template"][..],
            ),
        ] {
            let s = schema(api_version, kind);
            let at = |rest: &[&'static str]| [template, rest].concat();
            assert_eq!(
                s.list_strategy(&at(&["spec", "containers"])),
                keys(&["name"]),
                "{kind}"
            );
            assert_eq!(
                s.list_strategy(&at(&["spec", "initContainers", "env"])),
                keys(&["name"]),
                "{kind}"
            );
            assert!(s.retain_keys(&at(&["spec", "volumes"])), "{kind}");
            assert_eq!(
                s.list_strategy(&at(&["spec", "tolerations"])),
                ListStrategy::Replace,
                "{kind}"
            );
        }
        // Not a pod spec, whatever the field's name.
        let d = schema("apps/v1", "Deployment");
        assert_eq!(
            d.list_strategy(&["spec", "containers"]),
            ListStrategy::Replace
        );
        assert_eq!(
            d.list_strategy(&["metadata", "labels", "containers"]),
            ListStrategy::Replace
        );
    }

    #[test]
    fn apply_and_strategic_patches_read_their_own_extensions() {
        let pod = schema("v1", "Pod");
        let ports = ["spec", "containers", "ports"];
        // Server-side apply: x-kubernetes-list-map-keys. Strategic: the merge key, widened by
        // the defaulted protocol (keel's departure).
        assert_eq!(
            pod.list_strategy(&ports),
            keys(&["containerPort", "protocol"])
        );
        assert_eq!(
            pod.patch_strategy(&ports),
            keys(&["containerPort", "protocol"])
        );
        assert_eq!(
            pod.merge_key_default(&ports, "protocol"),
            Some(Value::String("TCP".into()))
        );
        assert_eq!(pod.merge_key_default(&ports, "containerPort"), None);
        // Both keys, with no default for whenUnsatisfiable: strategic keeps Kubernetes' key.
        let spread = ["spec", "topologySpreadConstraints"];
        assert_eq!(
            pod.list_strategy(&spread),
            keys(&["topologyKey", "whenUnsatisfiable"])
        );
        assert_eq!(pod.patch_strategy(&spread), keys(&["topologyKey"]));
        // A patch strategy without a list type: atomic to apply, merged by strategic.
        assert_eq!(
            pod.list_strategy(&["status", "hostIPs"]),
            ListStrategy::Replace
        );
        assert_eq!(pod.patch_strategy(&["status", "hostIPs"]), keys(&["ip"]));
        // Sets and ObjectMeta.
        assert_eq!(
            pod.list_strategy(&["metadata", "finalizers"]),
            ListStrategy::Set
        );
        assert_eq!(
            pod.patch_strategy(&["metadata", "finalizers"]),
            ListStrategy::Set
        );
        assert_eq!(
            pod.list_strategy(&["metadata", "ownerReferences"]),
            keys(&["uid"])
        );
        assert_eq!(
            pod.patch_strategy(&["metadata", "initializers", "pending"]),
            keys(&["name"])
        );
        assert!(pod.map_atomic(&["metadata", "ownerReferences"]));
        assert!(!pod.map_atomic(&["metadata", "labels"]));
        assert!(pod.map_atomic(&["spec", "nodeSelector"]));
        assert!(pod.map_atomic(&["spec", "containers", "env", "valueFrom", "secretKeyRef"]));
        assert!(!pod.map_atomic(&["spec", "containers", "env", "valueFrom"]));
    }

    #[test]
    fn maps_are_atomic_by_their_type_unless_the_field_says_otherwise() {
        for (api_version, kind, path) in [
            ("apps/v1", "Deployment", &["spec", "selector"][..]),
            ("v1", "Service", &["spec", "selector"][..]),
            (
                "networking.k8s.io/v1",
                "NetworkPolicy",
                &["spec", "podSelector"][..],
            ),
            (
                "networking.k8s.io/v1",
                "NetworkPolicy",
                &["spec", "ingress", "from", "namespaceSelector"][..],
            ),
            (
                "policy/v1",
                "PodDisruptionBudget",
                &["spec", "selector"][..],
            ),
            ("apps/v1", "ControllerRevision", &["data"][..]),
        ] {
            assert!(
                schema(api_version, kind).map_atomic(path),
                "{kind} {path:?}"
            );
        }
        // ObjectReference is atomic; a PersistentVolume's claimRef is marked granular.
        let pv = schema("v1", "PersistentVolume");
        assert!(!pv.map_atomic(&["spec", "claimRef"]));
        let binding = schema("rbac.authorization.k8s.io/v1", "RoleBinding");
        assert!(binding.map_atomic(&["roleRef"]));
    }

    #[test]
    fn maps_own_their_keys_as_items_and_structs_do_not() {
        let pod = schema("v1", "Pod");
        assert!(pod.keys_are_items(&["metadata", "labels"]));
        assert!(pod.keys_are_items(&["spec", "nodeSelector"]));
        assert!(pod.keys_are_items(&["spec", "containers", "resources", "limits"]));
        assert!(!pod.keys_are_items(&["spec"]));
        assert!(!pod.keys_are_items(&["spec", "containers"]));
        assert!(!pod.keys_are_items(&["metadata"]));
        let crd = schema("apiextensions.k8s.io/v1", "CustomResourceDefinition");
        let props = [
            "spec",
            "versions",
            "schema",
            "openAPIV3Schema",
            "properties",
        ];
        assert!(crd.keys_are_items(&props));
        assert!(!crd.keys_are_items(&[&props[..], &["spec"]].concat()));
        assert!(crd.keys_are_items(&[&props[..], &["spec", "properties"]].concat()));
    }

    #[test]
    fn strategic_patches_replace_and_retain_where_the_document_says() {
        let pdb = schema("policy/v1", "PodDisruptionBudget");
        assert!(pdb.patch_replaces(&["spec", "selector"]));
        assert!(!pdb.patch_replaces(&["spec"]));
        let d = schema("apps/v1", "Deployment");
        assert!(d.retain_keys(&["spec", "strategy"]));
        assert!(!d.retain_keys(&["spec", "template", "spec", "containers"]));
        // Namespace's spec.finalizers declares nothing, unlike ObjectMeta's.
        let ns = schema("v1", "Namespace");
        assert_eq!(
            ns.patch_strategy(&["spec", "finalizers"]),
            ListStrategy::Replace
        );
        assert_eq!(
            ns.patch_strategy(&["status", "conditions"]),
            keys(&["type"])
        );
    }

    #[test]
    fn keels_own_kind_is_kept_by_hand() {
        let ic = schema(
            "admissionregistration.k8s.io/v1alpha1",
            "InitializerConfiguration",
        );
        assert_eq!(ic.patch_strategy(&["initializers"]), keys(&["name"]));
        assert_eq!(ic.list_strategy(&["initializers"]), keys(&["name"]));
        assert_eq!(
            ic.list_strategy(&["initializers", "rules"]),
            ListStrategy::Replace
        );
        assert_eq!(
            ic.list_strategy(&["metadata", "finalizers"]),
            ListStrategy::Set
        );
    }
}
