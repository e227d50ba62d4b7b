//! The kinds: one module per kind, each with every rule its objects follow, in the spirit of
//! Kubernetes' `RESTCreateStrategy`, `RESTUpdateStrategy` and `RESTDeleteStrategy`. The phases
//! (`strategy`, `validation`, `deletion`, `patch`, the admission pipelines) are generic and ask
//! the [`Kind`]; no kind's name is matched on anywhere else (`layers.rs` checks it). A custom
//! resource is a kind too: `crd::CustomResource` implements [`Kind`] from its CRD's schema.
//!
//! Adding a built-in kind: its `ResourceInfo` in `keel_api::resource` (the names and scope
//! clients know too), a module here implementing [`Kind`], and one line in [`builtin`]
//! (DESIGN.md, "Adding a kind").

mod admissionpolicy;
mod clusterrole;
mod clusterrolebinding;
mod configmap;
mod controllerrevision;
mod crd;
mod cronjob;
mod custom;
mod daemonset;
mod deployment;
mod endpoints;
mod endpointslice;
mod event;
mod horizontalpodautoscaler;
mod ingress;
mod ingressclass;
mod initializerconfiguration;
mod job;
mod lease;
mod limitrange;
mod namespace;
mod networkpolicy;
mod node;
mod persistentvolume;
mod persistentvolumeclaim;
mod pod;
mod poddisruptionbudget;
mod priorityclass;
mod replicaset;
mod resourcequota;
mod review;
mod role;
mod rolebinding;
mod secret;
mod service;
mod serviceaccount;
mod statefulset;
mod storageclass;
mod webhookconfiguration;
mod workload;

use std::sync::Arc;

use keel_api::{ApiError, FieldCause, Object, ResourceInfo, Target};
use keel_patch::MergeSchema;
use serde_json::{Map, Value, json};

use super::allocator::Allocations;
use super::builtin_schema;
use super::rbac::GrantKind;

pub use namespace::{NAMESPACE_FINALIZER, PROTECTED_NAMESPACES};
use review::Review;
pub use review::ReviewKind;

/// The rules of one kind. Every method has the default of a kind with no rule of its own, so
/// a kind implements only what sets it apart.
pub trait Kind: Send + Sync {
    /// Subresources beyond `status` (which `ResourceInfo::status_subresource` says):
    /// `finalize`, `scale`, `eviction`. Discovery lists them; requests may address them.
    fn subresources(&self) -> &'static [&'static str] {
        &[]
    }

    /// Where its objects keep what their `scale` subresource shows, if they have one.
    fn scale(&self) -> Option<keel_api::scale::ScalePaths> {
        None
    }

    /// Whether objects expire some time after their last write (Events: `--event-ttl`).
    fn expires(&self) -> bool {
        false
    }

    /// The fields a field selector may name besides `metadata.name` and `metadata.namespace`
    /// (Kubernetes' `GetAttrs` / `SelectableFields`), each a dotted path into the object.
    fn selectable_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// The fields of `obj` (an object of the kind, or a merge or strategic merge patch of one)
    /// its schema does not declare, as Kubernetes names them (`spec.replica`); at most ten.
    /// What `fieldValidation` warns of, or refuses under `Strict`. Built-in kinds: Kubernetes'
    /// schemas.
    fn unknown_fields(&self, info: &ResourceInfo, obj: &Map<String, Value>) -> Vec<String> {
        builtin_schema::unknown_fields(info, obj)
    }

    /// Drops the fields of a new or updated object its schema does not declare, as Kubernetes
    /// does when it decodes into its types, whatever `fieldValidation` says.
    fn prune(&self, info: &ResourceInfo, obj: &mut Object) {
        builtin_schema::prune(info, obj.as_map_mut());
    }

    /// The `status` a new object starts with when the kind has a status subresource (the
    /// client's is dropped); `None`: no status at all.
    fn initial_status(&self) -> Option<Value> {
        Some(json!({}))
    }

    /// What a new object gets besides the system fields and its status (Kubernetes'
    /// `PrepareForCreate`).
    fn prepare_for_create(&self, _obj: &mut Object) {}

    /// Kubernetes' defaults of the kind (`SetDefaults_*`), on create and on every update.
    fn defaults(&self, _obj: &mut Object) {}

    /// The kind's own fields' rules, after the metadata's (Kubernetes' `Validate`).
    fn validate(&self, _obj: &Object, _causes: &mut Vec<FieldCause>) {}

    /// Fields of `old` that an update of the object itself may not change (Kubernetes'
    /// `ValidateUpdate`), checked on `new` as it will be stored: after
    /// [`Kind::prepare_for_update`] and [`Kind::defaults`].
    fn validate_update(&self, _new: &Object, _old: &Object, _causes: &mut Vec<FieldCause>) {}

    /// Rules only a create is judged by, after [`Kind::validate`]'s (what an object stored
    /// before a rule came must still be able to change, or be deleted by, past it).
    fn validate_create(&self, _obj: &Object, _causes: &mut Vec<FieldCause>) {}

    /// What an update of the object itself keeps from `old`, and what it may not do given
    /// `old`'s state, once the system fields are kept (Kubernetes' `PrepareForUpdate`).
    fn prepare_for_update(&self, _new: &mut Object, _old: &Object, _causes: &mut Vec<FieldCause>) {}

    /// The `finalize` subresource (for kinds that list it): what moves from `new` into
    /// `out`, a copy of the stored object.
    fn finalize(&self, _out: &mut Object, _new: &Object) {}

    /// Whether finalizers the kind keeps outside `metadata.finalizers` hold the object back
    /// from removal (a Namespace's `spec.finalizers`).
    fn held_by_own_finalizers(&self, _obj: &Object) -> bool {
        false
    }

    /// Whether a Delete may proceed against the stored object.
    fn check_delete(&self, _t: &Target, _stored: &Object) -> Result<(), ApiError> {
        Ok(())
    }

    /// What the first Delete of an object held by finalizers changes besides
    /// `deletionTimestamp`.
    fn prepare_for_deletion(&self, _obj: &mut Object) {}

    /// The list and map types of its fields, for strategic merge patch and server-side
    /// apply; `None`: strategic patches are refused (and apply treats every list as atomic).
    /// A built-in kind's are `keel_patch::BuiltinSchema`'s (which clients share).
    fn merge_schema(&self) -> Option<MergeKeys> {
        None
    }

    /// Which of the four RBAC kinds it is, if one: its writes grant rights.
    fn grant_kind(&self) -> Option<GrantKind> {
        None
    }

    /// Which review it is, for the reviews: created and answered, never stored.
    fn review(&self) -> Option<ReviewKind> {
        None
    }

    /// The values of the cluster's shared ranges its objects hold (a Service's cluster IP and
    /// node ports), which the registry allocates and releases; `None`: they hold none.
    fn allocations(&self) -> Option<&dyn Allocations> {
        None
    }

    /// The last rules of every write, after validation: a custom object is pruned and checked
    /// against its CRD's schema.
    fn admit(&self, _obj: &mut Object) -> Result<(), ApiError> {
        Ok(())
    }

    /// [`Kind::admit`] of an update of `old` (a custom object's transition rules read it);
    /// `status`: a write of the status subresource.
    fn admit_update(&self, obj: &mut Object, _old: &Object, _status: bool) -> Result<(), ApiError> {
        self.admit(obj)
    }

    /// `obj` in the version objects of the kind are stored at.
    fn to_storage_version(&self, _obj: &mut Object) {}

    /// Whether an Update must name the `resourceVersion` it replaces (custom objects, as in
    /// Kubernetes).
    fn update_needs_resource_version(&self) -> bool {
        false
    }

    /// Columns `get` shows beyond the built-in ones (a CRD's `additionalPrinterColumns`).
    fn printer_columns(&self) -> &[Value] {
        &[]
    }

    /// The OpenAPI v3 schema a CRD gives its objects (read anew on every call).
    fn openapi_schema(&self) -> Option<Value> {
        None
    }
}

/// `m[field]` is `default` unless set (absent, null and `""` are unset), as Kubernetes'
/// `SetDefaults_*` fill a Go zero value.
pub(super) fn set_default(m: &mut Map<String, Value>, field: &str, default: Value) {
    let v = m.entry(field).or_insert(Value::Null);
    if v.is_null() || *v == json!("") {
        *v = default;
    }
}

/// `obj.spec`, if it is an object.
pub(super) fn spec_mut(obj: &mut Object) -> Option<&mut Map<String, Value>> {
    obj.as_map_mut()
        .get_mut("spec")
        .and_then(Value::as_object_mut)
}

/// The objects in the list at `m[field]`, if any.
pub(super) fn items_mut<'a>(
    m: &'a mut Map<String, Value>,
    field: &str,
) -> impl Iterator<Item = &'a mut Map<String, Value>> {
    m.get_mut(field)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// The merge keys of a kind's lists, shared by the patches that use them.
pub type MergeKeys = Arc<dyn MergeSchema + Send + Sync>;

/// The list and map types of a built-in kind, from Kubernetes' OpenAPI document
/// (`keel_patch` embeds them, for clients' patches too).
fn builtin_merge_keys(api_version: &str, kind: &str) -> Option<MergeKeys> {
    keel_patch::BuiltinSchema::for_kind(api_version, kind).map(|s| Arc::new(s) as MergeKeys)
}

/// A resource as the registry serves it: what it is, and its kind's rules.
#[derive(Clone)]
pub struct Served {
    pub info: Arc<ResourceInfo>,
    pub kind: Arc<dyn Kind>,
}

/// The built-in kinds, each registered once: the resource (group and plural) its
/// `ResourceInfo` in `keel_api` names, and its rules.
fn registrations() -> Vec<(&'static str, &'static str, Arc<dyn Kind>)> {
    use keel_api::resource::{AUTHENTICATION_GROUP, AUTHORIZATION_GROUP, RBAC_GROUP};
    vec![
        ("", "namespaces", Arc::new(namespace::Namespace::new())),
        ("", "pods", Arc::new(pod::Pod::new())),
        ("", "configmaps", Arc::new(configmap::ConfigMap::new())),
        ("", "events", Arc::new(event::Event::new())),
        (
            "apps",
            "replicasets",
            Arc::new(replicaset::ReplicaSet::new()),
        ),
        (
            "apps",
            "deployments",
            Arc::new(deployment::Deployment::new()),
        ),
        (
            "coordination.k8s.io",
            "leases",
            Arc::new(lease::Lease::new()),
        ),
        (RBAC_GROUP, "roles", Arc::new(role::Role)),
        (
            RBAC_GROUP,
            "rolebindings",
            Arc::new(rolebinding::RoleBinding),
        ),
        (
            RBAC_GROUP,
            "clusterroles",
            Arc::new(clusterrole::ClusterRole),
        ),
        (
            RBAC_GROUP,
            "clusterrolebindings",
            Arc::new(clusterrolebinding::ClusterRoleBinding),
        ),
        (
            super::crd::GROUP,
            super::crd::RESOURCE,
            Arc::new(crd::CustomResourceDefinition),
        ),
        (
            super::initializers::CONFIG_GROUP,
            super::initializers::CONFIG_RESOURCE,
            Arc::new(initializerconfiguration::InitializerConfiguration),
        ),
        (
            super::webhooks::GROUP,
            super::webhooks::MUTATING,
            Arc::new(webhookconfiguration::WebhookConfiguration { mutating: true }),
        ),
        (
            super::webhooks::GROUP,
            super::webhooks::VALIDATING,
            Arc::new(webhookconfiguration::WebhookConfiguration { mutating: false }),
        ),
        (
            super::webhooks::GROUP,
            super::webhooks::policy::POLICIES,
            Arc::new(admissionpolicy::ValidatingAdmissionPolicy),
        ),
        (
            super::webhooks::GROUP,
            super::webhooks::policy::BINDINGS,
            Arc::new(admissionpolicy::ValidatingAdmissionPolicyBinding),
        ),
        ("", "secrets", Arc::new(secret::Secret::new())),
        (
            "",
            "serviceaccounts",
            Arc::new(serviceaccount::ServiceAccount::new()),
        ),
        ("", "services", Arc::new(service::Service::new())),
        ("", "endpoints", Arc::new(endpoints::Endpoints::new())),
        (
            "",
            "persistentvolumeclaims",
            Arc::new(persistentvolumeclaim::PersistentVolumeClaim::new()),
        ),
        (
            "",
            "persistentvolumes",
            Arc::new(persistentvolume::PersistentVolume::new()),
        ),
        (
            "",
            "resourcequotas",
            Arc::new(resourcequota::ResourceQuota::new()),
        ),
        ("", "limitranges", Arc::new(limitrange::LimitRange::new())),
        ("", "nodes", Arc::new(node::Node::new())),
        (
            "apps",
            "statefulsets",
            Arc::new(statefulset::StatefulSet::new()),
        ),
        ("apps", "daemonsets", Arc::new(daemonset::DaemonSet::new())),
        (
            "apps",
            "controllerrevisions",
            Arc::new(controllerrevision::ControllerRevision::new()),
        ),
        ("batch", "jobs", Arc::new(job::Job::new())),
        ("batch", "cronjobs", Arc::new(cronjob::CronJob::new())),
        (
            "networking.k8s.io",
            "ingresses",
            Arc::new(ingress::Ingress::new()),
        ),
        (
            "networking.k8s.io",
            "ingressclasses",
            Arc::new(ingressclass::IngressClass::new()),
        ),
        (
            "networking.k8s.io",
            "networkpolicies",
            Arc::new(networkpolicy::NetworkPolicy::new()),
        ),
        (
            "discovery.k8s.io",
            "endpointslices",
            Arc::new(endpointslice::EndpointSlice::new()),
        ),
        ("events.k8s.io", "events", Arc::new(event::Event::new())),
        (
            "autoscaling",
            "horizontalpodautoscalers",
            Arc::new(horizontalpodautoscaler::HorizontalPodAutoscaler::new()),
        ),
        (
            "policy",
            "poddisruptionbudgets",
            Arc::new(poddisruptionbudget::PodDisruptionBudget::new()),
        ),
        (
            "scheduling.k8s.io",
            "priorityclasses",
            Arc::new(priorityclass::PriorityClass::new()),
        ),
        (
            "storage.k8s.io",
            "storageclasses",
            Arc::new(storageclass::StorageClass::new()),
        ),
        (
            AUTHORIZATION_GROUP,
            "selfsubjectaccessreviews",
            Arc::new(Review(ReviewKind::SelfSubjectAccessReview)),
        ),
        (
            AUTHORIZATION_GROUP,
            "selfsubjectrulesreviews",
            Arc::new(Review(ReviewKind::SelfSubjectRulesReview)),
        ),
        (
            AUTHORIZATION_GROUP,
            "subjectaccessreviews",
            Arc::new(Review(ReviewKind::SubjectAccessReview)),
        ),
        (
            AUTHENTICATION_GROUP,
            "selfsubjectreviews",
            Arc::new(Review(ReviewKind::SelfSubjectReview)),
        ),
    ]
}

/// Every built-in resource with its kind's rules; its `ResourceInfo` lists the subresources
/// the kind has. A resource without a registered kind is served with no rules of its own
/// (the test below keeps that from happening).
pub fn builtin() -> Vec<Served> {
    let kinds = registrations();
    keel_api::builtin_resources()
        .into_iter()
        .chain(keel_api::review_resources())
        .map(|mut info| {
            let kind = kinds
                .iter()
                .find(|(g, r, _)| *g == info.gvr.group && *r == info.gvr.resource)
                .map_or_else(unknown, |(_, _, k)| k.clone());
            info.subresources = kind.subresources().iter().map(|s| s.to_string()).collect();
            info.selectable_fields = kind
                .selectable_fields()
                .iter()
                .map(|s| s.to_string())
                .collect();
            Served {
                info: Arc::new(info),
                kind,
            }
        })
        .collect()
}

/// A kind with no rules of its own.
struct Plain;

impl Kind for Plain {}

/// Whether `group` holds a built-in resource (`resource` given: that one), at any version.
/// Custom objects are stored under `/registry/<group>/<resource>` as built-in ones are, so a
/// CRD may not define a resource there.
pub fn builtin_group(group: &str, resource: Option<&str>) -> bool {
    // Made once: a server with thousands of CRDs asks for each at every sync.
    static BUILTIN: std::sync::LazyLock<Vec<(String, String)>> = std::sync::LazyLock::new(|| {
        builtin()
            .into_iter()
            .map(|s| (s.info.gvr.group.clone(), s.info.gvr.resource.clone()))
            .collect()
    });
    BUILTIN
        .iter()
        .any(|(g, r)| g == group && resource.is_none_or(|want| want == r))
}

/// The rules of a resource no longer served: none of its own.
pub fn unknown() -> Arc<dyn Kind> {
    Arc::new(Plain)
}

/// Test helpers: a built-in resource and its kind, by kind name.
#[cfg(test)]
pub mod testing {
    use super::*;

    pub fn served(kind: &str) -> Served {
        builtin()
            .into_iter()
            .find(|s| s.info.kind == kind)
            .unwrap_or_else(|| panic!("no built-in kind {kind}"))
    }

    pub fn info(kind: &str) -> Arc<ResourceInfo> {
        served(kind).info
    }

    pub fn kind(kind: &str) -> Arc<dyn Kind> {
        served(kind).kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_resource_has_exactly_one_kind_and_every_kind_a_resource() {
        let resources: Vec<ResourceInfo> = keel_api::builtin_resources()
            .into_iter()
            .chain(keel_api::review_resources())
            .collect();
        let kinds = registrations();
        for r in &resources {
            let n = kinds
                .iter()
                .filter(|(g, res, _)| *g == r.gvr.group && *res == r.gvr.resource)
                .count();
            assert_eq!(n, 1, "{} has {n} kinds registered", r.gvr);
        }
        for (g, res, _) in &kinds {
            assert!(
                resources
                    .iter()
                    .any(|r| r.gvr.group == *g && r.gvr.resource == *res),
                "{res}.{g} is registered but no such resource is served"
            );
        }
    }

    #[test]
    fn every_stored_built_in_kind_has_list_and_map_types() {
        // From Kubernetes' OpenAPI document (keel's own InitializerConfiguration by hand):
        // strategic patches and server-side apply of every kind keel stores know its lists.
        for r in keel_api::builtin_resources() {
            let schema = keel_patch::BuiltinSchema::for_kind(&r.api_version(), &r.kind);
            assert!(
                schema.is_some(),
                "{} {} has no types",
                r.api_version(),
                r.kind
            );
            let served = builtin()
                .into_iter()
                .find(|s| s.info.gvr == r.gvr)
                .unwrap_or_else(|| panic!("{} not served", r.gvr));
            assert!(
                served.kind.merge_schema().is_some(),
                "{} {} has no merge schema",
                r.api_version(),
                r.kind
            );
        }
    }

    #[test]
    fn resources_list_their_kinds_subresources() {
        assert_eq!(testing::info("Namespace").subresources, ["finalize"]);
        assert_eq!(testing::info("Pod").subresources, ["eviction"]);
        assert_eq!(testing::info("Deployment").subresources, ["scale"]);
        assert!(testing::info("ConfigMap").subresources.is_empty());
    }

    #[test]
    fn the_rbac_kinds_and_only_they_grant_rights() {
        for (kind, grants) in [
            ("Role", Some(GrantKind::Role)),
            ("ClusterRole", Some(GrantKind::ClusterRole)),
            ("RoleBinding", Some(GrantKind::RoleBinding)),
            ("ClusterRoleBinding", Some(GrantKind::ClusterRoleBinding)),
            ("ConfigMap", None),
            ("Pod", None),
        ] {
            assert_eq!(testing::kind(kind).grant_kind(), grants, "{kind}");
        }
    }
}
