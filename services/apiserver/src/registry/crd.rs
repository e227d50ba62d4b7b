//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`): what a CRD must say, what it is
//! given on create (its cleanup finalizer, its status), and the resources it defines: one per
//! served version, with its schema compiled for validation, pruning and strategic merge keys.
//! Pure functions; the registry serves what they derive (its CRD serving loop).

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use keel_api::validation::{dns1123_label, dns1123_subdomain};
use keel_api::{FieldCause, GroupVersionResource, Metadata, Object, ResourceInfo};
use serde_json::{Map, Value, json};

use super::crd_schema::CrdSchema;
use super::webhooks::conversion::{self, ConversionWebhook};
use crate::storage::CachedObject;

pub const GROUP: &str = "apiextensions.k8s.io";
pub const RESOURCE: &str = "customresourcedefinitions";
/// Held by every CRD until the objects of its resource are gone (Kubernetes' name).
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// Whether `info` is the CRD resource itself.
pub fn is_crd(info: &ResourceInfo) -> bool {
    info.gvr.group == GROUP && info.gvr.resource == RESOURCE
}

/// One served version of a custom resource, as the registry applies it.
#[derive(Clone)]
pub struct CustomResource {
    pub info: Arc<ResourceInfo>,
    /// The CRD's name (`<plural>.<group>`).
    pub crd: String,
    /// The `resourceVersion` of the CRD it was made from.
    pub crd_version: String,
    /// The version objects are stored at; reads of another version change only `apiVersion`.
    pub storage_version: String,
    /// What the schema compiles to, on first use: a CRD whose objects nobody writes or reads
    /// costs its schema, not its compiled validators too. Shared by the copies that only
    /// change `source`.
    compiled: Arc<OnceLock<Compiled>>,
    /// `additionalPrinterColumns`, as the CRD has them.
    pub printer_columns: Vec<Value>,
    /// The CRD's JSON as stored (the watch cache's own bytes, when served from it): the
    /// version's `openAPIV3Schema` is read from it when it is needed (OpenAPI, compiling it),
    /// not held parsed, which costs several times its JSON.
    source: Bytes,
    /// Where the version is in the CRD's `spec.versions`.
    version_index: usize,
    /// The CRD is being deleted: no new objects.
    pub terminating: bool,
    /// `subresources.scale`: where its objects keep what their `Scale` shows.
    pub scale: Option<keel_api::scale::ScalePaths>,
    /// `spec.conversion.strategy: Webhook`: where objects are converted between versions
    /// (`None`: only `apiVersion` changes).
    pub conversion: Option<Arc<ConversionWebhook>>,
}

/// What a version's schema compiles to.
struct Compiled {
    /// Validation and pruning; `None` when the version has no schema (anything goes).
    schema: Option<CrdSchema>,
    /// Merge keys for strategic merge patch (`x-kubernetes-list-map-keys`).
    merge: Arc<keel_patch::OpenApiSchema>,
}

/// The parts of a stored CRD its versions' schemas are read from, borrowed from its JSON.
#[derive(serde::Deserialize)]
struct SourceCrd<'a> {
    #[serde(borrow)]
    spec: SourceSpec<'a>,
}

#[derive(serde::Deserialize)]
struct SourceSpec<'a> {
    #[serde(borrow, default)]
    versions: Vec<SourceVersion<'a>>,
}

#[derive(serde::Deserialize)]
struct SourceVersion<'a> {
    #[serde(borrow, default)]
    schema: Option<SourceSchema<'a>>,
}

#[derive(serde::Deserialize)]
struct SourceSchema<'a> {
    #[serde(borrow, default, rename = "openAPIV3Schema")]
    openapi_v3_schema: Option<&'a serde_json::value::RawValue>,
}

impl CustomResource {
    fn compiled(&self) -> &Compiled {
        self.compiled.get_or_init(|| {
            let schema = self.openapi_schema();
            Compiled {
                schema: schema.as_ref().and_then(|s| match CrdSchema::new(s, "") {
                    Ok(compiled) => Some(compiled),
                    // Stored before a check refused it: served without a schema.
                    Err(causes) => {
                        tracing::warn!(crd = %self.crd, version = %self.info.gvr.version,
                            ?causes, "a served version's schema does not compile");
                        None
                    }
                }),
                merge: Arc::new(keel_patch::OpenApiSchema::new(
                    schema.unwrap_or(Value::Null),
                )),
            }
        })
    }

    /// The version's `openAPIV3Schema` as the CRD has it (`None`: none), parsed from the
    /// CRD's JSON on every call.
    pub fn openapi_schema(&self) -> Option<Value> {
        let crd: SourceCrd<'_> = serde_json::from_slice(&self.source).ok()?;
        let raw = crd
            .spec
            .versions
            .get(self.version_index)?
            .schema
            .as_ref()?
            .openapi_v3_schema?;
        serde_json::from_str(raw.get())
            .ok()
            .filter(Value::is_object)
    }

    /// Whether `source` is the very bytes it reads its schema from (not only equal ones).
    pub fn reads_from(&self, source: &Bytes) -> bool {
        self.source.as_ptr() == source.as_ptr() && self.source.len() == source.len()
    }

    /// The same resource reading its schema from `source`, an identical copy of its CRD's
    /// JSON (the watch cache's), sharing what it compiled: a resource first served from a CRD
    /// read from etcd stops holding its own copy once the watch cache has the CRD.
    pub fn with_source(&self, source: Bytes) -> CustomResource {
        CustomResource {
            source,
            ..self.clone()
        }
    }

    /// Validation and pruning; `None` when the version has no schema (anything goes).
    pub fn schema(&self) -> Option<&CrdSchema> {
        self.compiled().schema.as_ref()
    }

    /// Merge keys for strategic merge patch (`x-kubernetes-list-map-keys`).
    pub fn merge(&self) -> Arc<keel_patch::OpenApiSchema> {
        self.compiled().merge.clone()
    }
}

/// A CRD to serve: parsed already (read from etcd), or the watch cache's entry, parsed only if
/// it changed since it was served.
pub enum Crd<'a> {
    Parsed(&'a Object),
    Cached(&'a CachedObject),
}

impl Crd<'_> {
    pub fn name(&self) -> &str {
        match self {
            Crd::Parsed(o) => o.name(),
            Crd::Cached(c) => keel_api::Selectable::name(*c),
        }
    }

    pub fn version(&self) -> String {
        match self {
            Crd::Parsed(o) => o.resource_version().to_string(),
            Crd::Cached(c) => c.rv().to_string(),
        }
    }

    /// Its JSON as the watch cache holds it, if it comes from there.
    pub fn source(&self) -> Option<&Bytes> {
        match self {
            Crd::Parsed(_) => None,
            Crd::Cached(c) => Some(c.json()),
        }
    }

    pub fn object(&self) -> Option<Object> {
        match self {
            Crd::Parsed(o) => Some((*o).clone()),
            Crd::Cached(c) => c.object().ok(),
        }
    }
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_str().unwrap_or("")
}

/// Everything wrong with a CRD, with Kubernetes' field paths.
pub fn validate(crd: &Object) -> Vec<FieldCause> {
    let root = Value::Object(crd.as_map().clone());
    let spec = &root["spec"];
    let mut causes = Vec::new();
    if !spec.is_object() {
        causes.push(FieldCause::required("spec"));
        return causes;
    }
    conversion::validate_crd(spec, &mut causes);
    let group = str_at(spec, &["group"]);
    if group.is_empty() {
        causes.push(FieldCause::required("spec.group"));
    } else {
        for e in dns1123_subdomain(group) {
            causes.push(FieldCause::invalid("spec.group", group, e));
        }
        if !group.contains('.') {
            causes.push(FieldCause::invalid(
                "spec.group",
                group,
                "should be a domain with at least one dot",
            ));
        }
    }
    let names = &spec["names"];
    let plural = str_at(names, &["plural"]);
    let kind = str_at(names, &["kind"]);
    for (field, value) in [
        ("plural", plural),
        ("singular", str_at(names, &["singular"])),
    ] {
        let path = format!("spec.names.{field}");
        if value.is_empty() {
            if field == "plural" {
                causes.push(FieldCause::required(path));
            }
            continue;
        }
        for e in dns1123_label(value) {
            causes.push(FieldCause::invalid(path.clone(), value, e));
        }
    }
    if kind.is_empty() {
        causes.push(FieldCause::required("spec.names.kind"));
    } else if !kind.starts_with(|c: char| c.is_ascii_alphabetic())
        || !kind.chars().all(|c| c.is_ascii_alphanumeric())
    {
        causes.push(FieldCause::invalid(
            "spec.names.kind",
            kind,
            "must be a letter followed by letters and digits (CamelCase)",
        ));
    }
    for list in ["shortNames", "categories"] {
        let field = format!("spec.names.{list}");
        match names[list].as_array() {
            None if names[list].is_null() => {}
            None => causes.push(FieldCause::type_error(field, "a list of strings")),
            Some(items) => {
                for (i, s) in items.iter().enumerate() {
                    let path = format!("{field}[{i}]");
                    match s.as_str() {
                        Some(s) => {
                            for e in dns1123_label(s) {
                                causes.push(FieldCause::invalid(path.clone(), s, e));
                            }
                        }
                        None => causes.push(FieldCause::type_error(path, "a string")),
                    }
                }
            }
        }
    }
    if !plural.is_empty() && !group.is_empty() && crd.name() != format!("{plural}.{group}") {
        causes.push(FieldCause::invalid(
            "metadata.name",
            crd.name(),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    let scope = str_at(spec, &["scope"]);
    if !matches!(scope, "Namespaced" | "Cluster") {
        causes.push(FieldCause::not_supported(
            "spec.scope",
            scope,
            &["Cluster", "Namespaced"],
        ));
    }
    versions(spec, &mut causes);
    causes
}

fn versions(spec: &Value, causes: &mut Vec<FieldCause>) {
    let Some(versions) = spec["versions"].as_array().filter(|v| !v.is_empty()) else {
        causes.push(FieldCause::required("spec.versions"));
        return;
    };
    let mut seen = BTreeSet::new();
    let mut storage = 0;
    for (i, v) in versions.iter().enumerate() {
        let path = format!("spec.versions[{i}]");
        let name = str_at(v, &["name"]);
        if name.is_empty() {
            causes.push(FieldCause::required(format!("{path}.name")));
        } else {
            for e in dns1123_label(name) {
                causes.push(FieldCause::invalid(format!("{path}.name"), name, e));
            }
            if !seen.insert(name) {
                causes.push(FieldCause::duplicate(format!("{path}.name"), name));
            }
        }
        for flag in ["served", "storage"] {
            if !v[flag].is_boolean() {
                causes.push(FieldCause::required(format!("{path}.{flag}")));
            }
        }
        if v["storage"] == json!(true) {
            storage += 1;
        }
        let schema = &v["schema"]["openAPIV3Schema"];
        let schema_path = format!("{path}.schema.openAPIV3Schema");
        if schema.is_null() {
            causes.push(FieldCause::required(schema_path));
        } else {
            causes.extend(CrdSchema::check(schema, &schema_path));
        }
        let status = &v["subresources"]["status"];
        if !status.is_null() && !status.is_object() {
            causes.push(FieldCause::type_error(
                format!("{path}.subresources.status"),
                "an object",
            ));
        }
        scale_subresource(&v["subresources"]["scale"], &path, causes);
        printer_columns(&v["additionalPrinterColumns"], &path, causes);
        selectable_fields(&v["selectableFields"], &path, causes);
    }
    if storage != 1 {
        causes.push(FieldCause::invalid(
            "spec.versions",
            &storage.to_string(),
            "must have exactly one version marked as storage version",
        ));
    }
}

fn printer_columns(columns: &Value, path: &str, causes: &mut Vec<FieldCause>) {
    let Some(columns) = columns.as_array() else {
        if !columns.is_null() {
            causes.push(FieldCause::type_error(
                format!("{path}.additionalPrinterColumns"),
                "a list",
            ));
        }
        return;
    };
    for (i, c) in columns.iter().enumerate() {
        let p = format!("{path}.additionalPrinterColumns[{i}]");
        for field in ["name", "type", "jsonPath"] {
            if str_at(c, &[field]).is_empty() {
                causes.push(FieldCause::required(format!("{p}.{field}")));
            }
        }
        let t = str_at(c, &["type"]);
        if !t.is_empty() && !matches!(t, "integer" | "number" | "string" | "boolean" | "date") {
            causes.push(FieldCause::not_supported(
                format!("{p}.type"),
                t,
                &["boolean", "date", "integer", "number", "string"],
            ));
        }
        let j = str_at(c, &["jsonPath"]);
        if !j.is_empty() && !j.starts_with('.') {
            causes.push(FieldCause::invalid(
                format!("{p}.jsonPath"),
                j,
                "must be a simple JSON path starting with '.'",
            ));
        }
    }
}

/// At most this many selectable fields per version, as Kubernetes allows.
const MAX_SELECTABLE_FIELDS: usize = 8;

/// A version's `selectableFields` (Kubernetes 1.31): at most 8, each a `jsonPath` to a field
/// outside `metadata`, none twice.
fn selectable_fields(fields: &Value, path: &str, causes: &mut Vec<FieldCause>) {
    let p = format!("{path}.selectableFields");
    let Some(fields) = fields.as_array() else {
        if !fields.is_null() {
            causes.push(FieldCause::type_error(p, "a list"));
        }
        return;
    };
    if fields.len() > MAX_SELECTABLE_FIELDS {
        causes.push(FieldCause::too_long(&p, MAX_SELECTABLE_FIELDS));
    }
    let mut seen = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        let p = format!("{p}[{i}].jsonPath");
        let j = str_at(f, &["jsonPath"]);
        if j.is_empty() {
            causes.push(FieldCause::required(p));
        } else if !j.starts_with('.') || j.len() < 2 || j.contains(['[', ' ', '*']) {
            causes.push(FieldCause::invalid(
                p,
                j,
                "must be a simple JSON path starting with '.'",
            ));
        } else if j == ".metadata" || j.starts_with(".metadata.") {
            causes.push(FieldCause::invalid(
                p,
                j,
                "must not point to metadata: metadata.name and metadata.namespace are always selectable",
            ));
        } else if seen.contains(&j) {
            causes.push(FieldCause::duplicate(p, j));
        } else {
            seen.push(j);
        }
    }
}

/// The field labels of a version's `selectableFields` (`.spec.color` selects as
/// `spec.color`).
fn selectable_field_labels(fields: &Value) -> Vec<String> {
    fields
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["jsonPath"].as_str()?.strip_prefix('.'))
        .map(str::to_string)
        .collect()
}

/// What a new CRD is given: its cleanup finalizer, `singular` defaulted from the kind, and
/// a status that says its names are accepted and it is established (every API server serves
/// it within a second).
pub fn prepare_for_create(crd: &mut Object) {
    let finalizers = crd
        .metadata_mut()
        .entry("finalizers")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Some(list) = finalizers.as_array_mut()
        && !list.iter().any(|f| f == CLEANUP_FINALIZER)
    {
        list.push(json!(CLEANUP_FINALIZER));
    }
    let root = crd.as_map_mut();
    if let Some(names) = root
        .get_mut("spec")
        .and_then(|s| s.get_mut("names"))
        .and_then(Value::as_object_mut)
    {
        let kind = names
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_ascii_lowercase();
        let singular = names.get("singular").and_then(Value::as_str).unwrap_or("");
        if singular.is_empty() && !kind.is_empty() {
            names.insert("singular".into(), json!(kind));
        }
    }
    let accepted = root
        .get("spec")
        .map(|s| s["names"].clone())
        .unwrap_or(Value::Null);
    let stored: Vec<Value> = root
        .get("spec")
        .and_then(|s| s["versions"].as_array())
        .map(|vs| {
            vs.iter()
                .filter(|v| v["storage"] == json!(true))
                .map(|v| v["name"].clone())
                .collect()
        })
        .unwrap_or_default();
    root.insert(
        "status".into(),
        json!({
            "acceptedNames": accepted,
            "storedVersions": stored,
            "conditions": [
                condition("NamesAccepted", "True", "NoConflicts", "no conflicts found"),
                condition("Established", "True", "InitialNamesAccepted", "the initial names have been accepted"),
            ],
        }),
    );
}

fn condition(kind: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": chrono_now(),
    })
}

fn chrono_now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// The resources a (valid) CRD defines: one per served version. A version whose schema no
/// longer compiles (a CRD stored before a rule) is served without one.
pub fn resources(crd: &Object) -> Vec<CustomResource> {
    let source = Bytes::from(crd.to_vec());
    resources_from(crd, source)
}

/// [`resources`] of `crd`, whose JSON `source` is (the watch cache's bytes: the resources
/// read their schemas from it, and hold no copy).
pub fn resources_from(crd: &Object, source: Bytes) -> Vec<CustomResource> {
    let root = Value::Object(crd.as_map().clone());
    let spec = &root["spec"];
    let group = str_at(spec, &["group"]);
    let names = &spec["names"];
    let plural = str_at(names, &["plural"]);
    let kind = str_at(names, &["kind"]);
    if group.is_empty() || plural.is_empty() || kind.is_empty() {
        return Vec::new();
    }
    let singular = match str_at(names, &["singular"]) {
        "" => kind.to_ascii_lowercase(),
        s => s.to_string(),
    };
    let strings = |list: &str| -> Vec<String> {
        names[list]
            .as_array()
            .map(|l| {
                l.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (short_names, categories) = (strings("shortNames"), strings("categories"));
    let namespaced = str_at(spec, &["scope"]) != "Cluster";
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    let storage_version = versions
        .iter()
        .find(|v| v["storage"] == json!(true))
        .map(|v| str_at(v, &["name"]).to_string())
        .unwrap_or_default();
    let terminating = crd.deletion_timestamp().is_some();
    let conversion = conversion::of_crd(spec).map(Arc::new);
    versions
        .iter()
        .enumerate()
        .filter(|(_, v)| v["served"] == json!(true))
        .map(|(version_index, v)| {
            let version = str_at(v, &["name"]);
            let scale = keel_api::scale::ScalePaths::from_crd(&v["subresources"]["scale"]);
            CustomResource {
                info: Arc::new(ResourceInfo {
                    converted_by_server: conversion.is_some(),
                    gvr: GroupVersionResource::new(group, version, plural),
                    singular: singular.clone(),
                    kind: kind.to_string(),
                    short_names: short_names.clone(),
                    namespaced,
                    status_subresource: v["subresources"]["status"].is_object(),
                    create_only: false,
                    subresources: if scale.is_some() {
                        vec!["scale".to_string()]
                    } else {
                        Vec::new()
                    },
                    categories: categories.clone(),
                    selectable_fields: selectable_field_labels(&v["selectableFields"]),
                }),
                crd: crd.name().to_string(),
                crd_version: crd.resource_version().to_string(),
                storage_version: storage_version.clone(),
                compiled: Arc::new(OnceLock::new()),
                source: source.clone(),
                version_index,
                printer_columns: v["additionalPrinterColumns"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default(),
                terminating,
                scale,
                conversion: conversion.clone(),
            }
        })
        .collect()
}

/// Kubernetes' checks of a version's `subresources.scale`: `specReplicasPath` a JSON path
/// under `.spec`, `statusReplicasPath` one under `.status`, and `labelSelectorPath`, if any,
/// under either.
fn scale_subresource(scale: &Value, version_path: &str, causes: &mut Vec<FieldCause>) {
    match scale {
        Value::Null => return,
        Value::Object(_) => {}
        _ => {
            causes.push(FieldCause::type_error(
                format!("{version_path}.subresources.scale"),
                "an object",
            ));
            return;
        }
    }
    let simple = |p: &str| {
        p.strip_prefix('.')
            .is_some_and(|rest| rest.split('.').all(|f| !f.is_empty()))
    };
    for (field, under, required) in [
        ("specReplicasPath", &[".spec."][..], true),
        ("statusReplicasPath", &[".status."][..], true),
        ("labelSelectorPath", &[".spec.", ".status."][..], false),
    ] {
        let at = format!("{version_path}.subresources.scale.{field}");
        let p = str_at(scale, &[field]);
        if p.is_empty() {
            if required {
                causes.push(FieldCause::required(at));
            }
            continue;
        }
        if !simple(p) || !under.iter().any(|u| p.starts_with(u)) {
            let why = match under {
                [one] => format!("should be a json path under {}", one.trim_end_matches('.')),
                _ => "should be a json path under either .spec or .status".to_string(),
            };
            causes.push(FieldCause::invalid(at, p, why));
        }
    }
}

/// `obj` at the version its resource stores objects at (a conversion webhook's objects are
/// the registry's to convert: `Caller::convert_objects`).
pub fn to_storage_version(custom: &CustomResource, obj: &mut Object) {
    if custom.conversion.is_none() && custom.info.gvr.version != custom.storage_version {
        let v = format!("{}/{}", custom.info.gvr.group, custom.storage_version);
        obj.as_map_mut()
            .insert("apiVersion".into(), Value::String(v));
    }
}

/// `obj`, as stored, at the version the request named.
pub fn to_request_version(info: &ResourceInfo, mut obj: Object) -> Object {
    keel_api::conversion::to_served(info, &mut obj);
    obj
}

/// The schema errors after which Kubernetes does not judge validation rules
/// (apiextensions' `hasBlockingErr`).
const RULES_BLOCKED_BY: [&str; 5] = [
    "FieldValueNotSupported",
    "FieldValueRequired",
    "FieldValueTooLong",
    "FieldValueTooMany",
    "FieldValueTypeInvalid",
];

/// A custom object made ready for storage: unknown fields pruned, then validated against its
/// version's schema (metadata is validated with every object's).
pub fn prune_and_validate(custom: &CustomResource, obj: &mut Object) -> Vec<FieldCause> {
    prune_and_validate_update(custom, obj, None, false)
}

/// [`prune_and_validate`], for an update of `old` (as stored, at the same version): the
/// schema's validation rules judge both (transition rules, on `oldSelf`). Rules are judged
/// once the schema holds. A write of the status subresource (`status`) is checked as
/// Kubernetes' status strategy checks it: the schema on `status` alone, as its own root (what
/// is wrong elsewhere is not the writer's to fix), then every rule from the root, none
/// ratcheted.
pub fn prune_and_validate_update(
    custom: &CustomResource,
    obj: &mut Object,
    old: Option<&Object>,
    status: bool,
) -> Vec<FieldCause> {
    let Some(schema) = custom.schema() else {
        return Vec::new();
    };
    let mut value = Value::Object(std::mem::take(obj.as_map_mut()));
    let pruned = schema.prune(&mut value);
    if !pruned.is_empty() {
        tracing::debug!(resource = %custom.info.gvr, name = obj.name(), ?pruned, "unknown fields pruned");
    }
    // Kubernetes' order: pruning, defaulting, validation.
    schema.default(&mut value);
    let mut causes = schema.validate(&value);
    if status {
        // The status as its own root: its fields named from it in what the schema says.
        causes.retain(|c| c.field == "status" || c.field.starts_with("status."));
        for c in &mut causes {
            if let Some(inner) = c.field.strip_prefix("status.") {
                c.message = c
                    .message
                    .replace(&format!("{} in body", c.field), &format!("{inner} in body"));
            }
        }
    }
    // Kubernetes judges the rules unless the schema found a value of the wrong type, shape
    // or size, which rules could not read: then it says they were not judged.
    if causes
        .iter()
        .any(|c| RULES_BLOCKED_BY.contains(&c.reason.as_str()))
    {
        if schema.has_rules() {
            causes.push(FieldCause {
                reason: "FieldValueInvalid".into(),
                message: "Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation".into(),
                field: "<nil>".into(),
            });
        }
    } else {
        let old = old.map(|o| Value::Object(o.as_map().clone()));
        causes.extend(schema.check_rules(&value, old.as_ref(), !status));
    }
    if let Value::Object(map) = value {
        *obj.as_map_mut() = map;
    } else {
        *obj.as_map_mut() = Map::new();
    }
    causes
}

/// A stored custom object as a read serves it: defaulted by `custom`'s schema (Kubernetes
/// defaults what it decodes from etcd, so a default added to a CRD shows on objects written
/// before it; nothing is written back).
pub fn default_read(custom: &CustomResource, obj: &mut Value) {
    if let Some(schema) = custom.schema() {
        schema.default(obj);
    }
}

/// [`default_read`] of an object's JSON; JSON that does not parse as an object is left as it is.
pub fn default_read_json(custom: &CustomResource, json: Bytes) -> Bytes {
    let Ok(mut value @ Value::Object(_)) = serde_json::from_slice::<Value>(&json) else {
        return json;
    };
    default_read(custom, &mut value);
    serde_json::to_vec(&value).map_or(json, Bytes::from)
}

/// The fields of a custom object (or a merge patch of one) its version's schema would prune;
/// at most ten.
pub fn unknown_fields(custom: &CustomResource, obj: &Map<String, Value>) -> Vec<String> {
    let Some(schema) = custom.schema() else {
        return Vec::new();
    };
    let mut value = Value::Object(obj.clone());
    let mut pruned = schema.prune(&mut value);
    pruned.truncate(10);
    pruned
}

/// A custom object pruned and checked against its version's schema, or `Invalid` naming each
/// wrong field.
pub fn validate_object(
    custom: &CustomResource,
    obj: &mut Object,
    old: Option<&Object>,
    status: bool,
) -> Result<(), keel_api::ApiError> {
    let causes = prune_and_validate_update(custom, obj, old, status);
    if causes.is_empty() {
        Ok(())
    } else {
        Err(keel_api::ApiError::invalid(
            super::errors::kind_target(&custom.info, obj.name()),
            causes,
        ))
    }
}

/// The CRD resource itself.
pub fn crd_gvr() -> GroupVersionResource {
    GroupVersionResource::new(GROUP, "v1", RESOURCE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn network_crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "networks.samplecrd.k8s.io"},
            "spec": {
                "group": "samplecrd.k8s.io",
                "scope": "Namespaced",
                "names": {"kind": "Network", "plural": "networks", "shortNames": ["net"], "categories": ["all", "samplecrd"]},
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [{"name": "CIDR", "type": "string", "jsonPath": ".spec.cidr"}],
                    "schema": {"openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "required": ["cidr"], "properties": {
                                "cidr": {"type": "string"}, "gateway": {"type": "string"}}},
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                        }
                    }}
                }]
            }
        })
    }

    fn obj(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    fn fields(causes: &[FieldCause]) -> Vec<&str> {
        causes.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn the_network_crd_is_valid_and_defines_one_resource_per_served_version() {
        let crd = obj(network_crd());
        assert_eq!(validate(&crd), vec![]);
        let rs = resources(&crd);
        assert_eq!(rs.len(), 1);
        let r = &rs[0];
        assert_eq!(
            r.info.gvr,
            GroupVersionResource::new("samplecrd.k8s.io", "v1", "networks")
        );
        assert_eq!(r.info.kind, "Network");
        assert_eq!(r.info.singular, "network");
        assert_eq!(r.info.short_names, ["net"]);
        assert_eq!(r.info.categories, ["all", "samplecrd"]);
        assert!(r.info.namespaced && r.info.status_subresource);
        assert!(r.schema().is_some());
        assert_eq!(r.printer_columns.len(), 1);
    }

    #[test]
    fn selectable_fields_select_as_their_paths_and_are_checked() {
        let mut v = network_crd();
        v["spec"]["versions"][0]["selectableFields"] =
            json!([{"jsonPath": ".spec.cidr"}, {"jsonPath": ".spec.gateway"}]);
        let crd = obj(v.clone());
        assert_eq!(validate(&crd), vec![]);
        assert_eq!(
            resources(&crd)[0].info.selectable_fields,
            ["spec.cidr", "spec.gateway"]
        );
        v["spec"]["versions"][0]["selectableFields"] = json!([
            {"jsonPath": "spec.cidr"},
            {"jsonPath": ".metadata.labels"},
            {"jsonPath": ".spec.gateway"},
            {"jsonPath": ".spec.gateway"},
            {},
        ]);
        let causes = validate(&obj(v.clone()));
        assert_eq!(
            fields(&causes),
            [
                "spec.versions[0].selectableFields[0].jsonPath",
                "spec.versions[0].selectableFields[1].jsonPath",
                "spec.versions[0].selectableFields[3].jsonPath",
                "spec.versions[0].selectableFields[4].jsonPath",
            ]
        );
        v["spec"]["versions"][0]["selectableFields"] = json!(
            (0..9)
                .map(|i| json!({"jsonPath": format!(".spec.f{i}")}))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            fields(&validate(&obj(v))),
            ["spec.versions[0].selectableFields"]
        );
    }

    #[test]
    fn a_scale_subresource_names_paths_under_spec_and_status() {
        let mut v = network_crd();
        v["spec"]["versions"][0]["subresources"]["scale"] = json!({
            "specReplicasPath": ".status.replicas", "labelSelectorPath": ".metadata.labels"});
        let causes = validate(&obj(v.clone()));
        let at = "spec.versions[0].subresources.scale";
        let mine: Vec<String> = causes
            .iter()
            .filter(|c| c.field.starts_with(at))
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        assert_eq!(
            mine,
            [
                format!(
                    "{at}.specReplicasPath: Invalid value: \".status.replicas\": should be a json path under .spec"
                ),
                format!("{at}.statusReplicasPath: Required value"),
                format!(
                    "{at}.labelSelectorPath: Invalid value: \".metadata.labels\": should be a json path under either .spec or .status"
                ),
            ]
        );
        v["spec"]["versions"][0]["subresources"]["scale"] = json!({
            "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector"});
        assert!(validate(&obj(v.clone())).is_empty());
        let served = resources(&obj(v));
        assert_eq!(served[0].info.subresources, ["scale"]);
        assert!(served[0].scale.is_some());
    }

    #[test]
    fn each_served_version_reads_its_own_schema_from_the_crds_json() {
        let mut v = network_crd();
        let mut v2 = v["spec"]["versions"][0].clone();
        v2["name"] = json!("v2");
        v2["storage"] = json!(false);
        v2["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["extra"] =
            json!({"type": "string"});
        let mut unserved = v2.clone();
        unserved["name"] = json!("v0");
        unserved["served"] = json!(false);
        v["spec"]["versions"] = json!([unserved, v["spec"]["versions"][0], v2]);
        let crd = obj(v.clone());
        let source = Bytes::from(crd.to_vec());
        let served = resources_from(&crd, source.clone());
        assert_eq!(served.len(), 2);
        for (r, i) in served.iter().zip([1, 2]) {
            assert!(r.reads_from(&source));
            assert_eq!(
                r.openapi_schema().as_ref(),
                Some(&v["spec"]["versions"][i]["schema"]["openAPIV3Schema"])
            );
        }
        // A copy of the same JSON serves the same schemas, sharing what was compiled.
        assert!(served[1].schema().is_some());
        let copy = Bytes::from(crd.to_vec());
        let moved = served[1].with_source(copy.clone());
        assert!(moved.reads_from(&copy) && !moved.reads_from(&source));
        assert!(Arc::ptr_eq(&moved.compiled, &served[1].compiled));
        assert_eq!(moved.openapi_schema(), served[1].openapi_schema());
        // A version without a schema has none.
        v["spec"]["versions"][1]["schema"] = Value::Null;
        assert_eq!(resources(&obj(v))[0].openapi_schema(), None);
    }

    #[test]
    fn a_crd_names_every_wrong_field() {
        let mut v = network_crd();
        v["metadata"]["name"] = json!("nets.samplecrd.k8s.io");
        v["spec"]["group"] = json!("apps");
        v["spec"]["scope"] = json!("Everywhere");
        v["spec"]["names"]["kind"] = json!("net-work");
        v["spec"]["versions"][0]["storage"] = json!(false);
        v["spec"]["versions"][0]["additionalPrinterColumns"][0]["type"] = json!("color");
        let causes = validate(&obj(v));
        let f = fields(&causes);
        for want in [
            "metadata.name",
            "spec.group",
            "spec.scope",
            "spec.names.kind",
            "spec.versions",
            "spec.versions[0].additionalPrinterColumns[0].type",
        ] {
            assert!(f.contains(&want), "{want} missing from {f:?}");
        }
        let mut v = network_crd();
        v["spec"]["versions"][0]
            .as_object_mut()
            .unwrap()
            .remove("schema");
        assert_eq!(
            fields(&validate(&obj(v))),
            ["spec.versions[0].schema.openAPIV3Schema"]
        );
        let mut v = network_crd();
        v["spec"]["versions"] = json!([]);
        assert_eq!(fields(&validate(&obj(v))), ["spec.versions"]);
    }

    #[test]
    fn a_new_crd_holds_its_cleanup_finalizer_and_says_it_is_established() {
        let mut crd = obj(network_crd());
        prepare_for_create(&mut crd);
        assert_eq!(crd.finalizers(), [CLEANUP_FINALIZER]);
        let v = crd.into_value();
        assert_eq!(v["spec"]["names"]["singular"], "network");
        assert_eq!(v["status"]["acceptedNames"]["kind"], "Network");
        assert_eq!(v["status"]["storedVersions"], json!(["v1"]));
        assert_eq!(v["status"]["conditions"][1]["type"], "Established");
        assert_eq!(v["status"]["conditions"][1]["status"], "True");
    }

    #[test]
    fn custom_objects_are_pruned_then_validated() {
        let rs = resources(&obj(network_crd()));
        let mut o = obj(json!({
            "apiVersion": "samplecrd.k8s.io/v1", "kind": "Network",
            "metadata": {"name": "n", "labels": {"a": "b"}},
            "spec": {"gateway": "10.0.0.1", "color": "blue"},
            "extra": 1
        }));
        let causes = prune_and_validate(&rs[0], &mut o);
        assert_eq!(fields(&causes), ["spec.cidr"]);
        let v = o.into_value();
        assert!(v.get("extra").is_none() && v["spec"].get("color").is_none());
        assert_eq!(v["metadata"]["labels"]["a"], "b");
    }
}
