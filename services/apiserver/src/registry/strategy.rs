//! The create and update rules of each kind (Kubernetes' `RESTCreateStrategy` and
//! `RESTUpdateStrategy`): decoding a body, system fields on create, immutable fields and the
//! `status` and `finalize` subresources on update, defaults. Pure functions: no I/O, so every
//! rule is unit-tested.

use std::time::SystemTime;

use keel_api::{ApiError, FieldCause, Metadata, Object, ResourceInfo, Target};
use serde_json::{Map, Value, json};

use super::errors::kind_target;
use super::initializers;
use super::kinds::Kind;
use crate::storage::{resource_version, target};

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// The object; `status` is ignored when the resource has a status subresource.
    Main,
    /// Only `status`; everything else is ignored.
    Status,
    /// A Namespace's `finalize`: only `spec.finalizers`; everything else is ignored.
    Finalize,
    /// A workload's `scale` (an `autoscaling/v1` Scale): only `spec.replicas`, by PATCH.
    Scale,
}

impl Subresource {
    /// Its name on a request's path (`""` for the object itself).
    pub fn name(self) -> &'static str {
        match self {
            Subresource::Main => "",
            Subresource::Status => "status",
            Subresource::Scale => "scale",
            Subresource::Finalize => "finalize",
        }
    }

    /// The subresources of `info` a client may address, by name (discovery lists them).
    /// (`eviction` is created only, by the request layer's `Evict`, never read or written as
    /// the others are: not a `Subresource` of get, patch or update.)
    pub fn served(info: &ResourceInfo) -> Vec<&str> {
        let status = info.status_subresource.then_some("status");
        status
            .into_iter()
            .chain(info.subresources.iter().map(String::as_str))
            .collect()
    }

    /// The subresource a request names (`""`: the object itself), or `NotFound`.
    pub fn parse(info: &ResourceInfo, s: &str, target: &Target) -> Result<Subresource, ApiError> {
        match s {
            "" => Ok(Subresource::Main),
            "status" if info.status_subresource => Ok(Subresource::Status),
            "finalize" if info.has_subresource("finalize") => Ok(Subresource::Finalize),
            "scale" if info.has_subresource("scale") => Ok(Subresource::Scale),
            other => Err(ApiError::not_found(target.clone()).with_message(format!(
                "{} has no subresource {other:?}",
                info.qualified_name()
            ))),
        }
    }
}

trait WithMessage {
    fn with_message(self, m: String) -> Self;
}

impl WithMessage for ApiError {
    fn with_message(mut self, m: String) -> Self {
        self.message = m;
        self
    }
}

/// Metadata fields only the server sets.
const SYSTEM_FIELDS: [&str; 6] = [
    "uid",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "resourceVersion",
];

/// Parses a request body into an object of this resource: apiVersion and kind must match the
/// resource (they are filled in when absent).
pub fn decode(info: &ResourceInfo, bytes: &[u8]) -> Result<Object, ApiError> {
    let mut obj = parse_object(info, bytes)?;
    let want_av = info.api_version();
    let t = target(info, obj.name());
    let av = obj.api_version().to_string();
    if av.is_empty() {
        obj.as_map_mut()
            .insert("apiVersion".into(), Value::String(want_av.clone()));
    } else if av != want_av {
        return Err(ApiError::bad_request(
            t,
            format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            ),
        ));
    }
    let kind = obj.kind().to_string();
    if kind.is_empty() {
        obj.as_map_mut()
            .insert("kind".into(), Value::String(info.kind.clone()));
    } else if kind != info.kind {
        return Err(ApiError::bad_request(
            t,
            format!(
                "the kind in the data ({kind}) does not match the resource {} (kind {})",
                info.qualified_name(),
                info.kind
            ),
        ));
    }
    Ok(obj)
}

/// Parses JSON bytes into an object, mapping every failure to a typed error naming the resource.
pub fn parse_object(info: &ResourceInfo, bytes: &[u8]) -> Result<Object, ApiError> {
    use keel_api::ObjectError;
    Object::from_slice(bytes).map_err(|e| {
        let t = target(info, "");
        match e {
            ObjectError::TooLarge { .. } => ApiError::too_large(t, e.to_string()),
            ObjectError::TooDeep => ApiError::bad_request(t, e.to_string()),
            _ => ApiError::bad_request(
                t,
                format!("the body is not a valid {} object: {e}", info.kind),
            ),
        }
    })
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// Sets the system fields of a new object, its status, and its kind's create rules and
/// defaults.
pub fn prepare_for_create(info: &ResourceInfo, kind: &dyn Kind, obj: &mut Object) {
    let meta = obj.metadata_mut();
    for f in SYSTEM_FIELDS {
        meta.remove(f);
    }
    meta.insert(
        "uid".into(),
        Value::String(uuid::Uuid::new_v4().to_string()),
    );
    meta.insert("creationTimestamp".into(), Value::String(now()));
    meta.insert("generation".into(), json!(1));
    if !info.namespaced {
        meta.remove("namespace");
    }
    if info.status_subresource {
        match kind.initial_status() {
            Some(status) => obj.as_map_mut().insert("status".into(), status),
            None => obj.as_map_mut().remove("status"),
        };
    }
    kind.prepare_for_create(obj);
    initializers::normalize(obj);
    kind.defaults(obj);
}

/// Kubernetes' refusal of a Create whose object names a revision (its storage's
/// `ErrResourceVersionSetOnCreate`).
pub const RESOURCE_VERSION_ON_CREATE: &str =
    "resourceVersion should not be set on objects to be created";

/// Whether a Create may go on with the `metadata.resourceVersion` its client sent (`rv`, read
/// before [`prepare_for_create`] clears it): empty or `"0"` may; a revision may not, since a
/// client cannot choose where its object is stored. As Kubernetes, a value that is not a
/// revision at all is ignored (and cleared).
pub fn check_create_resource_version(t: &Target, rv: &str) -> Result<(), ApiError> {
    match resource_version::parse(rv) {
        Ok(Some(n)) if n != 0 => Err(ApiError::bad_request(t.clone(), RESOURCE_VERSION_ON_CREATE)),
        _ => Ok(()),
    }
}

/// Whether `k` is of the spec: what `generation` counts changes of (everything but
/// `metadata`, `status`, `apiVersion` and `kind`).
fn is_spec(k: &str) -> bool {
    !matches!(k, "metadata" | "status" | "apiVersion" | "kind")
}

/// Whether the spec of `a` and `b` differ (compared in place, whatever the maps' key order).
fn spec_differs(a: &Object, b: &Object) -> bool {
    let spec = |o: &Object| o.as_map().iter().filter(|(k, _)| is_spec(k)).count();
    spec(a) != spec(b)
        || a.as_map()
            .iter()
            .filter(|(k, _)| is_spec(k))
            .any(|(k, v)| b.as_map().get(k) != Some(v))
}

/// Builds the object to store from the one a client sent (`new`) and the stored one (`old`):
/// the system fields stay the server's, name and namespace cannot change, `status` and the
/// rest are split by subresource, and `generation` moves when the spec does.
pub fn prepare_for_update(
    info: &ResourceInfo,
    kind: &dyn Kind,
    mut new: Object,
    old: &Object,
    sub: Subresource,
) -> Result<Object, ApiError> {
    let t = target(info, old.name());
    // As Kubernetes: the uid an object carries is a precondition of its write, whichever part
    // the write addresses (a status for an earlier object of the same name is refused).
    if !new.uid().is_empty() && new.uid() != old.uid() {
        return Err(ApiError::conflict(
            t.clone(),
            format!(
                "Precondition failed: UID in precondition: {}, UID in object meta: {}",
                new.uid(),
                old.uid()
            ),
        ));
    }
    if sub == Subresource::Status {
        let mut out = old.clone();
        match new.as_map_mut().remove("status") {
            Some(s) => out.as_map_mut().insert("status".into(), s),
            None => out.as_map_mut().remove("status"),
        };
        return Ok(out);
    }
    let mut causes = Vec::new();
    if new.name() != old.name() {
        causes.push(FieldCause::invalid(
            "metadata.name",
            new.name(),
            "field is immutable",
        ));
    }
    if info.namespaced && !new.namespace().is_empty() && new.namespace() != old.namespace() {
        causes.push(FieldCause::invalid(
            "metadata.namespace",
            new.namespace(),
            "field is immutable",
        ));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(kind_target(info, &t.name), causes));
    }
    if sub == Subresource::Finalize {
        let mut out = old.clone();
        kind.finalize(&mut out, &new);
        return Ok(out);
    }
    if old.deletion_timestamp().is_some() {
        let before = old.finalizers();
        let added: Vec<String> = new
            .finalizers()
            .into_iter()
            .filter(|f| !before.contains(f))
            .map(str::to_string)
            .collect();
        if !added.is_empty() {
            return Err(ApiError::invalid(
                kind_target(info, &t.name),
                vec![FieldCause::forbidden(
                    "metadata.finalizers",
                    format!(
                        "no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                    ),
                )],
            ));
        }
    }
    let empty = Map::new();
    let old_meta = old.metadata().unwrap_or(&empty);
    {
        let meta = new.metadata_mut();
        for f in SYSTEM_FIELDS {
            match old_meta.get(f) {
                Some(v) => meta.insert(f.into(), v.clone()),
                None => meta.remove(f),
            };
        }
        if let Some(ns) = old_meta.get("namespace") {
            meta.insert("namespace".into(), ns.clone());
        }
        // A cluster-scoped object has none, whatever the request says (Kubernetes'
        // `BeforeUpdate`): Helm charts put one on their ClusterRoles.
        if !info.namespaced {
            meta.remove("namespace");
        }
    }
    if info.status_subresource {
        match old.as_map().get("status") {
            Some(s) => new.as_map_mut().insert("status".into(), s.clone()),
            None => new.as_map_mut().remove("status"),
        };
    }
    // Initializers leave `pending` one by one.
    initializers::normalize(&mut new);
    let mut causes: Vec<FieldCause> = initializers::check_pending_update(old, &new)
        .into_iter()
        .collect();
    kind.prepare_for_update(&mut new, old, &mut causes);
    if !causes.is_empty() {
        return Err(ApiError::invalid(kind_target(info, &t.name), causes));
    }
    kind.defaults(&mut new);
    // As Kubernetes' `ValidateUpdate`: of the object as it will be stored, defaults and all.
    kind.validate_update(&new, old, &mut causes);
    if !causes.is_empty() {
        return Err(ApiError::invalid(kind_target(info, &t.name), causes));
    }
    if spec_differs(&new, old) {
        let generation = old.generation() + 1;
        new.metadata_mut()
            .insert("generation".into(), json!(generation));
    }
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::kinds::testing::{info, kind};
    use keel_api::Reason;

    fn prepare_for_create(i: &ResourceInfo, o: &mut Object) {
        super::prepare_for_create(i, &*kind(&i.kind), o)
    }

    fn prepare_for_update(
        i: &ResourceInfo,
        new: Object,
        old: &Object,
        sub: Subresource,
    ) -> Result<Object, ApiError> {
        super::prepare_for_update(i, &*kind(&i.kind), new, old, sub)
    }

    fn validate(i: &ResourceInfo, o: &Object) -> Result<(), ApiError> {
        crate::registry::validation::validate(i, &*kind(&i.kind), o)
    }

    fn has_finalizers(i: &ResourceInfo, o: &Object) -> bool {
        crate::registry::deletion::has_finalizers(&*kind(&i.kind), o)
    }

    fn obj(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    #[test]
    fn create_sets_system_fields_and_ignores_client_values() {
        let i = info("Pod");
        let mut o = obj(
            json!({"metadata": {"name": "p", "uid": "mine", "generation": 7, "resourceVersion": "9"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Running"}}),
        );
        prepare_for_create(&i, &mut o);
        assert_ne!(o.uid(), "mine");
        assert_eq!(o.generation(), 1);
        assert_eq!(o.resource_version(), "");
        assert_eq!(o.as_map()["status"], json!({"phase": "Pending"}));
    }

    #[test]
    fn a_create_may_not_choose_its_resource_version() {
        let t = Target::new("", "configmaps", "a");
        for ok in ["", "0", "not-a-revision"] {
            check_create_resource_version(&t, ok).unwrap();
        }
        let e = check_create_resource_version(&t, "42").unwrap_err();
        assert_eq!(e.reason, Reason::BadRequest);
        assert_eq!(
            e.message,
            "resourceVersion should not be set on objects to be created"
        );
        assert_eq!(e.target, t);
    }

    #[test]
    fn main_update_keeps_status_and_bumps_generation_on_spec_change() {
        let i = info("Deployment");
        let mut old = obj(
            json!({"metadata": {"name": "d", "uid": "u", "generation": 3},
            "spec": {"replicas": 1}, "status": {"replicas": 1}}),
        );
        // As stored: with the kind's defaults.
        kind("Deployment").defaults(&mut old);
        let new = obj(
            json!({"metadata": {"name": "d"}, "spec": {"replicas": 2}, "status": {"replicas": 99}}),
        );
        let out = prepare_for_update(&i, new, &old, Subresource::Main).unwrap();
        assert_eq!(out.generation(), 4);
        assert_eq!(out.uid(), "u");
        assert_eq!(out.as_map()["status"], json!({"replicas": 1}));
        let same =
            obj(json!({"metadata": {"name": "d", "labels": {"a": "b"}}, "spec": {"replicas": 1}}));
        assert_eq!(
            prepare_for_update(&i, same, &old, Subresource::Main)
                .unwrap()
                .generation(),
            3
        );
    }

    #[test]
    fn status_update_changes_only_status() {
        let i = info("Deployment");
        let old = obj(json!({"metadata": {"name": "d", "generation": 1}, "spec": {"replicas": 1}}));
        let new = obj(
            json!({"metadata": {"name": "d", "labels": {"x": "y"}}, "spec": {"replicas": 5}, "status": {"replicas": 1}}),
        );
        let out = prepare_for_update(&i, new, &old, Subresource::Status).unwrap();
        assert_eq!(out.as_map()["spec"], json!({"replicas": 1}));
        assert_eq!(out.as_map()["status"], json!({"replicas": 1}));
        assert_eq!(out.label("x"), None);
    }

    /// Helm charts put a namespace on their ClusterRoles: an update of a cluster-scoped
    /// object drops it, as Kubernetes' `BeforeUpdate` does (a create already did).
    #[test]
    fn an_update_of_a_cluster_scoped_object_drops_a_namespace() {
        let i = info("ClusterRole");
        let old = obj(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "r", "uid": "u"}, "rules": []}),
        );
        let mut sent = old.clone();
        sent.set_meta_str("namespace", "charts");
        let new = prepare_for_update(&i, sent, &old, Subresource::Main).unwrap();
        assert_eq!(new.namespace(), "");
        validate(&i, &new).unwrap();
    }

    #[test]
    fn renames_and_foreign_uids_are_refused() {
        let i = info("ConfigMap");
        let old = obj(json!({"metadata": {"name": "a", "uid": "u"}}));
        let e = prepare_for_update(
            &i,
            obj(json!({"metadata": {"name": "b"}})),
            &old,
            Subresource::Main,
        )
        .unwrap_err();
        assert_eq!(e.reason, Reason::Invalid);
        let e = prepare_for_update(
            &i,
            obj(json!({"metadata": {"name": "a", "uid": "v"}})),
            &old,
            Subresource::Main,
        )
        .unwrap_err();
        assert_eq!(e.reason, Reason::Conflict);
    }

    #[test]
    fn no_finalizer_may_be_added_while_deleting() {
        let i = info("ConfigMap");
        let old = obj(
            json!({"metadata": {"name": "a", "deletionTimestamp": "t", "finalizers": ["x/a"]}}),
        );
        let new = obj(json!({"metadata": {"name": "a", "finalizers": ["x/a", "x/b"]}}));
        assert!(prepare_for_update(&i, new, &old, Subresource::Main).is_err());
    }

    fn deployment(spec: Value) -> Object {
        let mut spec = spec;
        spec["selector"] = json!({"matchLabels": {"app": "a"}});
        spec["template"] = json!({"metadata": {"labels": {"app": "a"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}});
        obj(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "x"}, "spec": spec}))
    }

    fn fields(e: &ApiError) -> Vec<&str> {
        e.causes.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn deployments_get_kubernetes_defaults_on_create_and_update() {
        let i = info("Deployment");
        let mut d = deployment(json!({}));
        prepare_for_create(&i, &mut d);
        let spec = &d.as_map()["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(
            spec["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
        );
        assert_eq!(spec["revisionHistoryLimit"], 10);
        assert_eq!(spec["progressDeadlineSeconds"], 600);
        assert!(spec.get("minReadySeconds").is_none());
        validate(&i, &d).unwrap();

        // Given values stay; a partly given rolling update is completed.
        let mut d = deployment(json!({"revisionHistoryLimit": 2,
            "strategy": {"rollingUpdate": {"maxSurge": 3}}}));
        prepare_for_create(&i, &mut d);
        let spec = &d.as_map()["spec"];
        assert_eq!(spec["revisionHistoryLimit"], 2);
        assert_eq!(
            spec["strategy"]["rollingUpdate"],
            json!({"maxSurge": 3, "maxUnavailable": "25%"})
        );

        // Recreate gets no rolling update; an update is defaulted too.
        let old = d.clone();
        let new = deployment(json!({"strategy": {"type": "Recreate"}}));
        let out = prepare_for_update(&i, new, &old, Subresource::Main).unwrap();
        assert_eq!(
            out.as_map()["spec"]["strategy"],
            json!({"type": "Recreate"})
        );
        assert_eq!(out.as_map()["spec"]["progressDeadlineSeconds"], 600);
        validate(&i, &out).unwrap();

        // A ReplicaSet gets its replicas and nothing more.
        let mut rs = obj(json!({"metadata": {"name": "r"}, "spec": {}}));
        prepare_for_create(&info("ReplicaSet"), &mut rs);
        assert_eq!(rs.as_map()["spec"], json!({"replicas": 1}));
    }

    #[test]
    fn namespaces_start_held_by_the_kubernetes_finalizer() {
        let i = info("Namespace");
        let mut ns = obj(json!({"metadata": {"name": "team-a"}}));
        prepare_for_create(&i, &mut ns);
        assert_eq!(ns.as_map()["spec"], json!({"finalizers": ["kubernetes"]}));
        assert_eq!(ns.as_map()["status"], json!({"phase": "Active"}));
        let mut ns2 =
            obj(json!({"metadata": {"name": "b"}, "spec": {"finalizers": ["example.com/x"]}}));
        prepare_for_create(&i, &mut ns2);
        assert_eq!(
            ns2.as_map()["spec"]["finalizers"],
            json!(["example.com/x", "kubernetes"])
        );
        validate(&i, &ns2).unwrap();
        assert!(has_finalizers(&i, &ns));

        // A plain update keeps spec.finalizers; only `finalize` changes them, and nothing else.
        let cleared = obj(json!({"metadata": {"name": "team-a", "labels": {"a": "b"}},
            "spec": {"finalizers": []}}));
        let out = prepare_for_update(&i, cleared.clone(), &ns, Subresource::Main).unwrap();
        assert_eq!(out.as_map()["spec"]["finalizers"], json!(["kubernetes"]));
        assert_eq!(out.label("a"), Some("b"));
        let out = prepare_for_update(&i, cleared, &ns, Subresource::Finalize).unwrap();
        assert_eq!(out.as_map()["spec"]["finalizers"], json!([]));
        assert_eq!(out.label("a"), None);
        assert!(!has_finalizers(&i, &out));

        let bad = obj(json!({"metadata": {"name": "c"}, "spec": {"finalizers": ["mine", 3]}}));
        assert_eq!(
            fields(&validate(&i, &bad).unwrap_err()),
            ["spec.finalizers[0]", "spec.finalizers[1]"]
        );
        let t = Target::default();
        assert_eq!(
            Subresource::parse(&i, "finalize", &t).unwrap(),
            Subresource::Finalize
        );
        assert!(Subresource::parse(&info("Pod"), "finalize", &t).is_err());
    }

    #[test]
    fn decode_refuses_a_foreign_kind() {
        let e = decode(
            &info("ConfigMap"),
            br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"}}"#,
        )
        .unwrap_err();
        assert_eq!(e.reason, Reason::BadRequest);
        let e = decode(
            &info("ConfigMap"),
            br#"{"apiVersion":"apps/v1","kind":"ConfigMap"}"#,
        )
        .unwrap_err();
        assert_eq!(e.reason, Reason::BadRequest);
        let o = decode(&info("ConfigMap"), br#"{"metadata":{"name":"x"}}"#).unwrap();
        assert_eq!(o.kind(), "ConfigMap");
    }
}
