//! Initializers (dynamic admission), the pure part: `InitializerConfiguration`s (defaults,
//! validation, merged in name order), the `pending` list a Create gets, the rules on writes to
//! `metadata.initializers`, and the Pod spec frozen once a Pod is initialized.

use std::time::Duration;

use keel_api::validation::dns1123_subdomain;
use keel_api::{FieldCause, Metadata, Object, ResourceInfo};
use serde_json::{Map, Value, json};

/// The group, version and resource of `InitializerConfiguration`.
pub const CONFIG_GROUP: &str = "admissionregistration.k8s.io";
pub const CONFIG_VERSION: &str = "v1alpha1";
pub const CONFIG_RESOURCE: &str = "initializerconfigurations";

/// The annotation prefix by which an object opts in to an initializer: the annotation
/// `initializer.kubernetes.io/envoy: "true"` asks for the initializer named `envoy.…`.
pub const OPT_IN_PREFIX: &str = "initializer.kubernetes.io/";

const DEFAULT_TIMEOUT_SECONDS: i64 = 30;
const MAX_TIMEOUT_SECONDS: i64 = 3600;

/// What the server does when an initializer has not finished in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Drop the initializer's name: the object goes on without it.
    Ignore,
    /// Delete the object.
    Fail,
}

impl FailurePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Ignore => "Ignore",
            FailurePolicy::Fail => "Fail",
        }
    }
}

/// One rule: which resources an initializer applies to (`*` matches any).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    groups: Vec<String>,
    versions: Vec<String>,
    resources: Vec<String>,
}

impl Rule {
    fn matches(&self, info: &ResourceInfo) -> bool {
        let any = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
        any(&self.groups, &info.gvr.group)
            && any(&self.versions, &info.gvr.version)
            && any(&self.resources, &info.gvr.resource)
    }
}

/// One initializer of a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Initializer {
    pub name: String,
    rules: Vec<Rule>,
    pub timeout: Duration,
    pub failure_policy: FailurePolicy,
}

impl Initializer {
    /// The timeout and policy of an initializer no configuration names (an opt-in by
    /// annotation, or a `pending` entry the client wrote).
    fn unconfigured(name: &str) -> Initializer {
        Initializer {
            name: name.to_string(),
            rules: Vec::new(),
            timeout: Duration::from_secs(DEFAULT_TIMEOUT_SECONDS as u64),
            failure_policy: FailurePolicy::Ignore,
        }
    }
}

/// Every configured initializer, configurations merged in name order (the order storage lists
/// them in); within one, in its own order. A name configured twice keeps its first place.
#[derive(Debug, Clone, Default)]
pub struct Initializers(Vec<Initializer>);

impl Initializers {
    /// From the stored configurations, in name order. Stored objects were validated on their
    /// way in; anything unreadable is skipped.
    pub fn from_configs<'a>(configs: impl IntoIterator<Item = &'a Value>) -> Initializers {
        let mut all: Vec<Initializer> = Vec::new();
        for config in configs {
            for i in config["initializers"].as_array().into_iter().flatten() {
                let Some(name) = i["name"].as_str() else {
                    continue;
                };
                if all.iter().any(|x| x.name == name) {
                    continue;
                }
                let strings = |v: &Value| -> Vec<String> {
                    v.as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                };
                let rules = i["rules"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|r| Rule {
                        groups: strings(&r["apiGroups"]),
                        versions: strings(&r["apiVersions"]),
                        resources: strings(&r["resources"]),
                    })
                    .collect();
                let seconds = i["timeoutSeconds"]
                    .as_i64()
                    .unwrap_or(DEFAULT_TIMEOUT_SECONDS)
                    .clamp(1, MAX_TIMEOUT_SECONDS);
                all.push(Initializer {
                    name: name.to_string(),
                    rules,
                    timeout: Duration::from_secs(seconds as u64),
                    failure_policy: match i["failurePolicy"].as_str() {
                        Some("Fail") => FailurePolicy::Fail,
                        _ => FailurePolicy::Ignore,
                    },
                });
            }
        }
        Initializers(all)
    }

    /// The configured initializer of this name, or the defaults for one no configuration names.
    pub fn get(&self, name: &str) -> Initializer {
        self.0
            .iter()
            .find(|i| i.name == name)
            .cloned()
            .unwrap_or_else(|| Initializer::unconfigured(name))
    }

    /// The names a new object of `info` gets in `pending`: those it already lists (its client
    /// asked), then every configured initializer whose rules match it, then those it opts in
    /// to by annotation; each once.
    pub fn pending_for_create(&self, info: &ResourceInfo, obj: &Object) -> Vec<String> {
        let mut names: Vec<String> = obj
            .pending_initializers()
            .into_iter()
            .map(str::to_string)
            .collect();
        let mut add = |name: &str| {
            if !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        };
        if info.gvr.resource != CONFIG_RESOURCE {
            for i in &self.0 {
                if i.rules.iter().any(|r| r.matches(info)) {
                    add(&i.name);
                }
            }
        }
        let annotations = obj
            .metadata()
            .and_then(|m| m.get("annotations"))
            .and_then(Value::as_object);
        for (key, value) in annotations.into_iter().flatten() {
            let Some(short) = key.strip_prefix(OPT_IN_PREFIX) else {
                continue;
            };
            if short.is_empty() || value.as_str() != Some("true") {
                continue;
            }
            // The configured initializer whose first segment is the short name, else the
            // conventional `<short>.initializer.kubernetes.io`.
            let configured = self
                .0
                .iter()
                .find(|i| i.name.split('.').next() == Some(short));
            match configured {
                Some(i) => add(&i.name),
                None => add(&format!("{short}.initializer.kubernetes.io")),
            }
        }
        names
    }
}

/// Sets `metadata.initializers.pending` to `names`; with none, removes `metadata.initializers`
/// (an initialized object carries no such field, as in Kubernetes).
pub fn set_pending(obj: &mut Object, names: &[String]) {
    let meta = obj.metadata_mut();
    if names.is_empty() {
        meta.remove("initializers");
    } else {
        let pending: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
        meta.insert("initializers".into(), json!({"pending": pending}));
    }
}

/// `metadata.initializers` as written, normalized: no field once nothing is pending.
pub fn normalize(obj: &mut Object) {
    let names: Vec<String> = obj
        .pending_initializers()
        .into_iter()
        .map(str::to_string)
        .collect();
    let present = obj
        .metadata()
        .is_some_and(|m| m.contains_key("initializers"));
    if present {
        set_pending(obj, &names);
    }
}

/// An initializer's name: a DNS subdomain of at least three segments
/// (`envoy.initializer.kubernetes.io`), as Kubernetes requires.
fn initializer_name(field: &str, name: &str) -> Vec<FieldCause> {
    let mut causes: Vec<FieldCause> = dns1123_subdomain(name)
        .into_iter()
        .map(|why| FieldCause::invalid(field, name, why))
        .collect();
    if causes.is_empty() && name.split('.').count() < 3 {
        causes.push(FieldCause::invalid(
            field,
            name,
            "should be a domain with at least three segments separated by dots",
        ));
    }
    causes
}

/// The shape of `metadata.initializers` on any object: a list of valid, distinct names.
pub fn validate_pending(obj: &Object, causes: &mut Vec<FieldCause>) {
    let Some(init) = obj.metadata().and_then(|m| m.get("initializers")) else {
        return;
    };
    if init.is_null() {
        return;
    }
    let Some(init) = init.as_object() else {
        causes.push(FieldCause::type_error("metadata.initializers", "an object"));
        return;
    };
    let pending = match init.get("pending") {
        None | Some(Value::Null) => return,
        Some(Value::Array(p)) => p,
        Some(_) => {
            causes.push(FieldCause::type_error(
                "metadata.initializers.pending",
                "a list",
            ));
            return;
        }
    };
    let mut seen: Vec<&str> = Vec::new();
    for (i, p) in pending.iter().enumerate() {
        let field = format!("metadata.initializers.pending[{i}].name");
        match p.get("name").and_then(Value::as_str) {
            None => causes.push(FieldCause::required(field)),
            Some(name) if seen.contains(&name) => {
                causes.push(FieldCause::duplicate(field, name));
            }
            Some(name) => {
                causes.extend(initializer_name(&field, name));
                seen.push(name);
            }
        }
    }
}

/// An update may only remove names from `pending`: what remains keeps its order, nothing is
/// added or moved, and an initialized object stays initialized.
pub fn check_pending_update(old: &Object, new: &Object) -> Option<FieldCause> {
    let before = old.pending_initializers();
    let after = new.pending_initializers();
    let mut rest = before.iter();
    let only_removed = after.iter().all(|name| rest.any(|b| b == name));
    (!only_removed).then(|| {
        FieldCause::forbidden(
            "metadata.initializers.pending",
            format!(
                "initializers may only be removed, not added or reordered (pending was {before:?}, would be {after:?})"
            ),
        )
    })
}

/// What may change in the spec of an initialized Pod, as Kubernetes' pod update validation
/// words it.
const POD_SPEC_FROZEN: &str = "pod updates may not change fields other than `spec.containers[*].image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds` or `spec.tolerations` (only additions to existing tolerations)";

/// Kubernetes' rule that an initialized Pod's spec is fixed, but for container images, the
/// active deadline and added tolerations. `None` when `new`'s spec is an allowed successor.
pub fn check_pod_spec_update(old: &Object, new: &Object) -> Option<FieldCause> {
    let empty = Map::new();
    let old_spec = old.as_map().get("spec").and_then(Value::as_object);
    let new_spec = new.as_map().get("spec").and_then(Value::as_object);
    let (old_spec, new_spec) = (old_spec.unwrap_or(&empty), new_spec.unwrap_or(&empty));
    // The new spec with every allowed change undone must be the old one.
    let mut undone = new_spec.clone();
    for list in ["containers", "initContainers"] {
        let (Some(Value::Array(olds)), Some(Value::Array(news))) =
            (old_spec.get(list), undone.get_mut(list))
        else {
            continue;
        };
        if olds.len() != news.len() {
            continue; // a container added or removed: differs below
        }
        for (o, n) in olds.iter().zip(news.iter_mut()) {
            if let (Some(n), Some(image)) = (n.as_object_mut(), o.get("image")) {
                n.insert("image".into(), image.clone());
            }
        }
    }
    match old_spec.get("activeDeadlineSeconds") {
        Some(v) => undone.insert("activeDeadlineSeconds".into(), v.clone()),
        None => undone.remove("activeDeadlineSeconds"),
    };
    let old_tolerations = old_spec
        .get("tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let new_tolerations = new_spec
        .get("tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if old_tolerations.iter().all(|t| new_tolerations.contains(t)) {
        match old_spec.get("tolerations") {
            Some(v) => undone.insert("tolerations".into(), v.clone()),
            None => undone.remove("tolerations"),
        };
    }
    (undone != *old_spec).then(|| FieldCause::forbidden("spec", POD_SPEC_FROZEN))
}

/// The defaults of an `InitializerConfiguration` (keel's `timeoutSeconds` 30 and
/// `failurePolicy` Ignore), on create and on every update.
pub fn config_defaults(obj: &mut Object) {
    let Some(Value::Array(list)) = obj.as_map_mut().get_mut("initializers") else {
        return;
    };
    for i in list.iter_mut().filter_map(Value::as_object_mut) {
        for (field, default) in [
            ("timeoutSeconds", json!(DEFAULT_TIMEOUT_SECONDS)),
            ("failurePolicy", json!("Ignore")),
        ] {
            let v = i.entry(field).or_insert_with(|| default.clone());
            if v.is_null() {
                *v = default;
            }
        }
    }
}

/// Validates an `InitializerConfiguration`: names of three or more segments, each once; rules
/// with groups, versions and resources (`*` alone or names, no subresources); a timeout of 1 to
/// 3600 seconds; `failurePolicy` `Ignore` or `Fail`.
pub fn validate_config(root: &Map<String, Value>, causes: &mut Vec<FieldCause>) {
    let list = super::fields::optional_list(root, "initializers", causes);
    let mut names: Vec<&str> = Vec::new();
    for (i, init) in list.iter().enumerate() {
        let path = format!("initializers[{i}]");
        let Some(init) = init.as_object() else {
            causes.push(FieldCause::type_error(path, "an object"));
            continue;
        };
        match init.get("name").and_then(Value::as_str) {
            None | Some("") => causes.push(FieldCause::required(format!("{path}.name"))),
            Some(name) if names.contains(&name) => {
                causes.push(FieldCause::duplicate(format!("{path}.name"), name));
            }
            Some(name) => {
                causes.extend(initializer_name(&format!("{path}.name"), name));
                names.push(name);
            }
        }
        match init.get("rules") {
            None | Some(Value::Null) => {}
            Some(Value::Array(rules)) => {
                for (j, rule) in rules.iter().enumerate() {
                    rule_fields(&format!("{path}.rules[{j}]"), rule, causes);
                }
            }
            Some(_) => causes.push(FieldCause::type_error(format!("{path}.rules"), "a list")),
        }
        if let Some(t) = init.get("timeoutSeconds") {
            match t.as_i64() {
                Some(s) if (1..=MAX_TIMEOUT_SECONDS).contains(&s) => {}
                _ => causes.push(FieldCause::invalid_value(
                    format!("{path}.timeoutSeconds"),
                    t,
                    format!("must be a whole number of seconds from 1 to {MAX_TIMEOUT_SECONDS}"),
                )),
            }
        }
        if let Some(p) = init.get("failurePolicy") {
            let s = p.as_str().map_or_else(|| p.to_string(), str::to_string);
            if !matches!(s.as_str(), "Ignore" | "Fail") {
                causes.push(FieldCause::not_supported(
                    format!("{path}.failurePolicy"),
                    &s,
                    &["Fail", "Ignore"],
                ));
            }
        }
    }
}

fn rule_fields(path: &str, rule: &Value, causes: &mut Vec<FieldCause>) {
    for field in ["apiGroups", "apiVersions", "resources"] {
        let f = format!("{path}.{field}");
        let Some(list) = rule.get(field).and_then(Value::as_array) else {
            causes.push(FieldCause::required(f));
            continue;
        };
        if list.is_empty() {
            causes.push(FieldCause::required(f));
            continue;
        }
        let items: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
        if items.len() != list.len() {
            causes.push(FieldCause::type_error(f, "a list of strings"));
            continue;
        }
        if items.contains(&"*") && items.len() > 1 {
            causes.push(FieldCause::invalid(
                f.clone(),
                "*",
                "if '*' is present, it must be the only entry",
            ));
        }
        if field == "resources" {
            for (k, r) in items.iter().enumerate() {
                if r.contains('/') {
                    causes.push(FieldCause::invalid(
                        format!("{f}[{k}]"),
                        r,
                        "must not specify subresources",
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(resource: &str) -> ResourceInfo {
        keel_api::builtin_resources()
            .into_iter()
            .find(|r| r.gvr.resource == resource)
            .unwrap()
    }

    fn obj(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    fn config(name: &str, inits: Value) -> Value {
        json!({"apiVersion": "admissionregistration.k8s.io/v1alpha1", "kind": "InitializerConfiguration",
               "metadata": {"name": name}, "initializers": inits})
    }

    fn pods_rule() -> Value {
        json!([{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}])
    }

    #[test]
    fn matching_initializers_are_pending_in_configuration_then_list_order() {
        let a = config(
            "a",
            json!([{"name": "second.example.com", "rules": pods_rule()},
                   {"name": "third.example.com", "rules": [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}]}]),
        );
        let b = config(
            "b",
            json!([{"name": "second.example.com", "rules": pods_rule()},
                   {"name": "cms.example.com", "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]}]),
        );
        let inits = Initializers::from_configs([&a, &b]);
        let pod = obj(json!({"metadata": {"name": "p"}}));
        assert_eq!(
            inits.pending_for_create(&info("pods"), &pod),
            ["second.example.com", "third.example.com"]
        );
        let cm = obj(json!({"metadata": {"name": "c"}}));
        assert_eq!(
            inits.pending_for_create(&info("configmaps"), &cm),
            ["third.example.com", "cms.example.com"]
        );
    }

    #[test]
    fn an_annotation_opts_in_by_short_name() {
        let c = config(
            "c",
            json!([{"name": "envoy.initializer.example.io", "rules": []}]),
        );
        let inits = Initializers::from_configs([&c]);
        let opted = obj(json!({"metadata": {"name": "p",
            "annotations": {"initializer.kubernetes.io/envoy": "true", "initializer.kubernetes.io/log": "true",
                            "initializer.kubernetes.io/off": "false"}}}));
        let mut got = inits.pending_for_create(&info("pods"), &opted);
        got.sort();
        assert_eq!(
            got,
            [
                "envoy.initializer.example.io",
                "log.initializer.kubernetes.io"
            ]
        );
        let plain = obj(json!({"metadata": {"name": "p"}}));
        assert!(inits.pending_for_create(&info("pods"), &plain).is_empty());
    }

    #[test]
    fn defaults_and_unconfigured_initializers() {
        let mut c = obj(config(
            "c",
            json!([{"name": "a.b.c", "rules": pods_rule()}]),
        ));
        config_defaults(&mut c);
        assert_eq!(c.as_map()["initializers"][0]["timeoutSeconds"], 30);
        assert_eq!(c.as_map()["initializers"][0]["failurePolicy"], "Ignore");
        let inits = Initializers::from_configs([&c.clone().into_value()]);
        assert_eq!(inits.get("a.b.c").timeout, Duration::from_secs(30));
        assert_eq!(inits.get("x.y.z").failure_policy, FailurePolicy::Ignore);
    }

    #[test]
    fn configurations_are_validated_with_field_paths() {
        let c = config(
            "c",
            json!([{"name": "two.dots", "rules": [{"apiGroups": ["*", "apps"], "apiVersions": [], "resources": ["pods/status"]}],
                    "timeoutSeconds": 0, "failurePolicy": "Sometimes"},
                   {"name": "a.b.c"}, {"name": "a.b.c"}]),
        );
        let mut causes = Vec::new();
        validate_config(c.as_object().unwrap(), &mut causes);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "initializers[0].name",
                "initializers[0].rules[0].apiGroups",
                "initializers[0].rules[0].apiVersions",
                "initializers[0].rules[0].resources[0]",
                "initializers[0].timeoutSeconds",
                "initializers[0].failurePolicy",
                "initializers[2].name",
            ]
        );
    }

    #[test]
    fn pending_may_only_shrink() {
        let with = |names: &[&str]| {
            let mut o = obj(json!({"metadata": {"name": "p"}}));
            set_pending(
                &mut o,
                &names.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            );
            o
        };
        let old = with(&["a.b.c", "d.e.f"]);
        assert!(check_pending_update(&old, &with(&["d.e.f"])).is_none());
        assert!(check_pending_update(&old, &with(&[])).is_none());
        assert!(check_pending_update(&old, &with(&["d.e.f", "a.b.c"])).is_some());
        assert!(check_pending_update(&old, &with(&["a.b.c", "d.e.f", "g.h.i"])).is_some());
        assert!(check_pending_update(&with(&[]), &with(&["a.b.c"])).is_some());
        let mut emptied = old.clone();
        emptied.metadata_mut()["initializers"] = json!({"pending": []});
        normalize(&mut emptied);
        assert!(!emptied.metadata().unwrap().contains_key("initializers"));
    }

    #[test]
    fn an_initialized_pods_spec_is_frozen_but_for_images_deadline_and_added_tolerations() {
        let pod = |spec: Value| obj(json!({"metadata": {"name": "p"}, "spec": spec}));
        let old = pod(json!({"containers": [{"name": "app", "image": "nginx:1"}],
                             "tolerations": [{"key": "a", "operator": "Exists"}]}));
        let image = pod(json!({"containers": [{"name": "app", "image": "nginx:2"}],
                               "tolerations": [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}],
                               "activeDeadlineSeconds": 60}));
        assert!(check_pod_spec_update(&old, &image).is_none());
        let added = pod(
            json!({"containers": [{"name": "app", "image": "nginx:1"}, {"name": "envoy", "image": "envoy"}],
                               "tolerations": [{"key": "a", "operator": "Exists"}]}),
        );
        let cause = check_pod_spec_update(&old, &added).unwrap();
        assert_eq!(cause.field, "spec");
        let dropped = pod(json!({"containers": [{"name": "app", "image": "nginx:1"}]}));
        assert!(check_pod_spec_update(&old, &dropped).is_some());
    }

    #[test]
    fn pending_names_are_checked_on_every_object() {
        let o = obj(
            json!({"metadata": {"name": "p", "initializers": {"pending": [{"name": "a.b.c"}, {"name": "a.b.c"}, {"name": "short.x"}, {}]}}}),
        );
        let mut causes = Vec::new();
        validate_pending(&o, &mut causes);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "metadata.initializers.pending[1].name",
                "metadata.initializers.pending[2].name",
                "metadata.initializers.pending[3].name"
            ]
        );
    }
}
