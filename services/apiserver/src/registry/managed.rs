//! `metadata.managedFields` on every write, and server-side apply (docs/server-side-apply.md):
//! a create, update or non-apply patch records what its manager changed as an `Update` entry;
//! an apply merges its manager's configuration into the object, removes what the manager
//! applied before and no longer does, and refuses to change fields other managers own unless
//! forced. Both run inside the write's mutation, against the object it replaces, so writes the
//! coalescer batches are judged in order.

use std::sync::Arc;
use std::time::SystemTime;

use keel_api::{ApiError, FieldCause, Metadata, Object, Reason, ResourceInfo, Target};
use keel_patch::fieldpath::{self, Set};
use keel_patch::managed::{self, Entry, Operation, Writer};
use serde_json::{Map, Value, json};

use super::kinds::{Kind, MergeKeys};
use super::strategy::Subresource;
use crate::storage::{Draft, write_entries};

/// The manager of the API server's own writes (the built-in namespaces, `default/kubernetes`).
pub const SERVER_MANAGER: &str = "keel-apiserver";

/// The annotation client-side `kubectl apply` keeps its last configuration in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The manager `kubectl apply --server-side` applies as: the only one whose conflicts with
/// fields its client-side `last-applied-configuration` still holds are forgiven (§7.2).
const KUBECTL: &str = "kubectl";

/// The longest annotation value kept (Kubernetes' limit on all annotations together).
const MAX_LAST_APPLIED_BYTES: usize = 256 * 1024;

/// The rules an object's fields are owned by: its kind's lists and maps, or, for a kind with
/// none, every list atomic and every map granular.
pub fn schema(kind: &dyn Kind) -> MergeKeys {
    kind.merge_schema()
        .unwrap_or_else(|| Arc::new(keel_patch::DeducedSchema))
}

/// Now, as `managedFields` times are written: RFC 3339, UTC, to the second.
fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// What a request's object says of `managedFields` (§2.6).
enum Requested {
    /// Nothing: the live entries go on.
    Absent,
    /// `[]` or `[{}]`: the object is stored with none, and updates do not track it again
    /// until an apply.
    Reset,
    /// Entries that replace the live ones (a client renaming managers, kubectl migrating
    /// client-side apply).
    Entries(Vec<Entry>),
    /// Entries that do not read: ignored, as Kubernetes ignores them.
    Unreadable,
}

/// What `new`, a request's object, asks of its entries, where `current` holds `entries`: a
/// body that carries them unchanged (a patch of other fields leaves them) asks nothing.
fn requested(new: &Object, entries: &[Entry]) -> Requested {
    match entries_field(new) {
        None | Some(Value::Null) => Requested::Absent,
        Some(Value::Array(items))
            if items.is_empty() || (items.len() == 1 && items[0] == json!({})) =>
        {
            Requested::Reset
        }
        Some(v) => match managed::parse(Some(v)) {
            Ok(asked) if asked.as_slice() == entries => Requested::Absent,
            Ok(asked) if !asked.is_empty() => Requested::Entries(asked),
            _ => Requested::Unreadable,
        },
    }
}

/// `obj`'s `metadata.managedFields`, as JSON.
fn entries_field(obj: &Object) -> Option<&Value> {
    obj.metadata().and_then(|m| m.get("managedFields"))
}

/// Whether `new` is `current` but for the times of its entries (Kubernetes'
/// `IgnoreManagedFieldsTimestampsTransformer`): the objects equal, and the same entries,
/// whatever their `time` (and so their order, which follows the times).
pub fn equal_but_times(new: &Draft, current: &Draft) -> bool {
    let same = |a: &Entry, b: &Entry| {
        a.manager == b.manager
            && a.operation == b.operation
            && a.api_version == b.api_version
            && a.subresource == b.subresource
            && a.fields == b.fields
    };
    // Each way, so that entries given twice are not the same as two different ones.
    let within = |xs: &[Entry], ys: &[Entry]| xs.iter().all(|x| ys.iter().any(|y| same(x, y)));
    new.object == current.object
        && new.entries.len() == current.entries.len()
        && within(&new.entries, &current.entries)
        && within(&current.entries, &new.entries)
}

/// A create by `manager`: it owns every field of the new object as it will be stored,
/// defaults included (Kubernetes defaults while decoding, before it records), on top of the
/// entries the request carries, if any.
pub fn record_create(kind: &dyn Kind, manager: &str, obj: &mut Object) {
    let start = match requested(obj, &[]) {
        Requested::Entries(e) => e,
        _ => Vec::new(),
    };
    obj.metadata_mut().remove("managedFields");
    let writer = Writer {
        manager: manager.to_string(),
        operation: Operation::Update,
        api_version: obj.api_version().to_string(),
        subresource: String::new(),
    };
    match fieldpath::changed_fields(&Map::new(), obj.as_map(), &*schema(kind)) {
        Ok(fields) => {
            let mut entries = managed::record_update(&start, &writer, &fields, &Set::new(), &now());
            managed::cap_updates(&mut entries);
            write_entries(obj, &entries);
        }
        Err(e) => {
            // As Kubernetes: bookkeeping never fails a write; the object goes untracked.
            tracing::warn!(error = %e, "managedFields not recorded for a create");
        }
    }
}

/// An update by `manager` through `sub`, from `current` to `new` (both as they are stored;
/// `new` may carry the entries its request asks for): the manager takes what it added or
/// changed from every other manager, and what it removed leaves every manager's set (§2.3,
/// §2.4). An object that has no entries stays untracked.
pub fn record_update(
    kind: &dyn Kind,
    manager: &str,
    sub: Subresource,
    current: &Draft,
    mut new: Object,
) -> Draft {
    let asked = requested(&new, &current.entries);
    new.metadata_mut().remove("managedFields");
    // A subresource's write ignores the entries its body carries (its object is the live one
    // but for the subresource's part).
    let start: Arc<Vec<Entry>> = match (sub, asked) {
        (Subresource::Main, Requested::Reset) => Arc::default(),
        (Subresource::Main, Requested::Entries(e)) => Arc::new(e),
        _ => current.entries.clone(),
    };
    if start.is_empty() {
        return Draft {
            object: new,
            entries: start,
        };
    }
    let diff =
        match fieldpath::compare_fields(current.object.as_map(), new.as_map(), &*schema(kind)) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "managedFields not updated for a write");
                return Draft {
                    object: new,
                    entries: start,
                };
            }
        };
    let writer = Writer {
        manager: manager.to_string(),
        operation: Operation::Update,
        api_version: new.api_version().to_string(),
        subresource: sub.name().to_string(),
    };
    let mut entries = managed::record_update(&start, &writer, &diff.changed, &diff.removed, &now());
    managed::cap_updates(&mut entries);
    Draft {
        object: new,
        entries: Arc::new(entries),
    }
}

/// An apply's request: who applies what, through which part of the object.
pub struct Apply {
    pub manager: String,
    pub force: bool,
    pub sub: Subresource,
    /// The configuration, as the client sent it (YAML or JSON, parsed).
    pub config: Value,
}

/// What an apply made of the object: the object (its `managedFields` not yet set) and the
/// entries to store with it once the update's rules have run.
pub struct Applied {
    pub object: Object,
    pub entries: Vec<Entry>,
}

/// A Go `GroupVersionKind`'s words: `apps/v1, Kind=Deployment`, `/v1, Kind=ConfigMap`.
fn gvk_string(api_version: &str, kind: &str) -> String {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    format!("{group}/{version}, Kind={kind}")
}

/// Checks an apply's configuration and turns it into one of the object itself: a Scale's
/// replicas become the object's, and fields the subresource does not write are dropped (the
/// kind's reset fields, §6.2), so that nobody owns them.
fn object_config(
    info: &ResourceInfo,
    t: &Target,
    apply: &Apply,
    scale: Option<keel_api::scale::ScalePaths>,
) -> Result<Value, ApiError> {
    let Value::Object(config) = &apply.config else {
        return Err(ApiError::bad_request(
            t.clone(),
            "an apply configuration must be an object",
        ));
    };
    let text = |m: &Map<String, Value>, f: &str| -> String {
        m.get(f).and_then(Value::as_str).unwrap_or("").to_string()
    };
    let (api_version, kind) = match apply.sub {
        Subresource::Scale => ("autoscaling/v1".to_string(), "Scale".to_string()),
        _ => (info.api_version(), info.kind.clone()),
    };
    if text(config, "apiVersion") != api_version || text(config, "kind") != kind {
        return Err(ApiError::bad_request(
            t.clone(),
            format!(
                "invalid object type: {}",
                gvk_string(&text(config, "apiVersion"), &text(config, "kind"))
            ),
        ));
    }
    let meta = config.get("metadata").and_then(Value::as_object);
    if meta.is_some_and(|m| m.get("managedFields").is_some_and(|v| !v.is_null())) {
        return Err(ApiError::bad_request(
            t.clone(),
            "metadata.managedFields must be nil",
        ));
    }
    // The object's identity, as a subresource's configuration names it.
    let identity = || {
        let mut m = Map::new();
        m.insert("apiVersion".into(), info.api_version().into());
        m.insert("kind".into(), info.kind.clone().into());
        let mut md = Map::new();
        for f in ["name", "namespace", "uid", "resourceVersion"] {
            if let Some(v) = meta.and_then(|m| m.get(f)) {
                md.insert(f.into(), v.clone());
            }
        }
        m.insert("metadata".into(), Value::Object(md));
        m
    };
    Ok(match apply.sub {
        Subresource::Main if info.status_subresource => {
            let mut c = config.clone();
            c.remove("status");
            Value::Object(c)
        }
        Subresource::Main => Value::Object(config.clone()),
        Subresource::Finalize => {
            return Err(ApiError::new(
                Reason::MethodNotAllowed,
                t.clone(),
                "an apply of finalize is not supported: replace it (PUT)",
            ));
        }
        Subresource::Status => {
            let mut c = identity();
            if let Some(s) = config.get("status") {
                c.insert("status".into(), s.clone());
            }
            Value::Object(c)
        }
        Subresource::Scale => {
            let mut c = Object::from_value(Value::Object(identity()))
                .map_err(|e| ApiError::bad_request(t.clone(), e.to_string()))?;
            if config.get("spec").and_then(|s| s.get("replicas")).is_some() {
                let replicas = keel_api::scale::replicas(&apply.config, t)?;
                let paths = scale.ok_or_else(|| ApiError::not_found(t.clone()))?;
                keel_api::scale::set_replicas(&mut c, &paths, replicas);
            }
            c.into_value()
        }
    })
}

/// The apply of `apply` to `current` (served at the request's version) and its entries
/// (`None`: the object does not exist, and the apply creates it). Conflicts are a 409 in
/// Kubernetes' words, unless forced, or forgiven to `kubectl` where its client-side
/// `last-applied-configuration` still holds the live value (§7.2).
pub fn apply(
    info: &ResourceInfo,
    kind: &dyn Kind,
    t: &Target,
    apply: &Apply,
    current: Option<(&Object, &[Entry])>,
) -> Result<Applied, ApiError> {
    let config = object_config(info, t, apply, kind.scale())?;
    let schema = schema(kind);
    let (current, entries) = match current {
        Some((object, entries)) => (Some(object), entries),
        None => (None, &[][..]),
    };
    let empty = Map::new();
    let live = current.map_or(&empty, |c| c.as_map());
    let mut entries = std::borrow::Cow::Borrowed(entries);
    if let (Some(_), true) = (current, entries.is_empty()) {
        // An object nobody is recorded as owning: what it holds is `before-first-apply`'s,
        // which an apply changing it conflicts with (§2.9).
        if let Ok(fields) = fieldpath::field_set_of(live, &*schema) {
            entries.to_mut().push(Entry {
                manager: "before-first-apply".into(),
                operation: Operation::Update,
                api_version: info.api_version(),
                // An Update from nothing to the live object, now (Kubernetes'
                // skipNonApplied manager).
                time: Some(now()),
                subresource: String::new(),
                fields: fields.into(),
            });
        }
    }
    let writer = Writer {
        manager: apply.manager.clone(),
        operation: Operation::Apply,
        api_version: info.api_version(),
        subresource: apply.sub.name().to_string(),
    };
    let now = now();
    let run = |force: bool| {
        keel_patch::apply::apply(live, &config, &*schema, &entries, &writer, force, &now)
    };
    let applied = match run(apply.force) {
        Ok(a) => a,
        Err(keel_patch::apply::ApplyError::Conflicts(found)) => {
            let unforgiven = match current {
                Some(c) if apply.manager == KUBECTL => forgiven_by_last_applied(c, live, &*schema)
                    .map(|allowed| {
                        found
                            .iter()
                            .filter_map(|c| {
                                let paths: Vec<_> = c
                                    .paths
                                    .iter()
                                    .filter(|p| !allowed.has(&p.0))
                                    .cloned()
                                    .collect();
                                (!paths.is_empty()).then(|| managed::Conflict {
                                    manager: c.manager.clone(),
                                    paths,
                                })
                            })
                            .collect()
                    })
                    .unwrap_or(found),
                _ => found,
            };
            if !unforgiven.is_empty() {
                return Err(conflict_error(t, &unforgiven));
            }
            run(true).map_err(|e| invalid_config(t, e))?
        }
        Err(e) => return Err(invalid_config(t, e)),
    };
    let Value::Object(mut object) = applied.object else {
        return Err(ApiError::internal(
            "an apply made something that is not an object",
        ));
    };
    // A configuration's `managedFields: null` (allowed: it names no entries) is no field.
    if let Some(Value::Object(meta)) = object.get_mut("metadata") {
        meta.remove("managedFields");
    }
    if apply.manager == KUBECTL
        && let Some(c) = current
    {
        keep_last_applied_current(c, &mut object, &apply.config);
    }
    let object = Object::from_value(Value::Object(object))
        .map_err(|e| ApiError::bad_request(t.clone(), e.to_string()))?;
    Ok(Applied {
        object,
        entries: applied.entries,
    })
}

fn invalid_config(t: &Target, e: keel_patch::apply::ApplyError) -> ApiError {
    ApiError::bad_request(
        t.clone(),
        format!("the apply configuration cannot be applied: {e}"),
    )
}

/// The 409 of an apply's conflicts (`details.causes`: one per path).
fn conflict_error(t: &Target, conflicts: &[managed::Conflict]) -> ApiError {
    let (message, causes) = managed::conflict_message(conflicts);
    let mut e = ApiError::new(Reason::Conflict, t.clone(), message);
    e.causes = causes
        .into_iter()
        .map(|(message, field)| FieldCause {
            reason: "FieldManagerConflict".into(),
            message,
            field,
        })
        .collect();
    e
}

/// The fields of `current`'s `last-applied-configuration` whose value the live object still
/// has: what client-side apply set and nobody changed since (Kubernetes'
/// `lastAppliedManager`). `None` when there is no such annotation at the live version.
fn forgiven_by_last_applied(
    current: &Object,
    live_map: &Map<String, Value>,
    schema: &dyn keel_patch::MergeSchema,
) -> Option<Set> {
    let last: Value = serde_json::from_str(current.annotation(LAST_APPLIED)?).ok()?;
    if last.get("apiVersion").and_then(Value::as_str) != Some(current.api_version()) {
        return None;
    }
    let Value::Object(last_map) = &last else {
        return None;
    };
    let mine = fieldpath::to_field_set(&last, schema).ok()?;
    let added_or_changed = fieldpath::changed_fields(last_map, live_map, schema).ok()?;
    let removed_or_changed = fieldpath::changed_fields(live_map, last_map, schema).ok()?;
    Some(
        mine.difference(&added_or_changed)
            .difference(&removed_or_changed),
    )
}

/// After an apply by `kubectl`, an object that still has a client-side
/// `last-applied-configuration` gets the applied configuration there, so that a later
/// client-side apply starts from it (Kubernetes' `lastAppliedUpdater`).
fn keep_last_applied_current(current: &Object, object: &mut Map<String, Value>, config: &Value) {
    if current.annotation(LAST_APPLIED).is_none() {
        return;
    }
    let mut config = config.clone();
    if let Some(Value::Object(a)) = config
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
    {
        a.remove(LAST_APPLIED);
    }
    let Some(annotations) = object
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let text = format!("{config}\n");
    if text.len() > MAX_LAST_APPLIED_BYTES {
        annotations.remove(LAST_APPLIED);
    } else {
        annotations.insert(LAST_APPLIED.into(), Value::String(text));
    }
}

/// Checks a write's `fieldManager` (Kubernetes' `ValidateFieldManager`): at most 128 bytes,
/// printable characters only. `kind` names the options (`PatchOptions`, `CreateOptions`,
/// `UpdateOptions`) in the 422.
pub fn check_field_manager(manager: &str, kind: &str) -> Result<(), ApiError> {
    let why = if manager.len() > 128 {
        Some(FieldCause {
            reason: "FieldValueTooLong".into(),
            message: "Too long: may not be more than 128 bytes".into(),
            field: "fieldManager".into(),
        })
    } else {
        manager
            .char_indices()
            .find(|(_, c)| c.is_control())
            .map(|(i, c)| FieldCause {
                reason: "FieldValueInvalid".into(),
                message: format!(
                    "Invalid value: {manager:?}: invalid character U+{:04X} (at position {i})",
                    c as u32
                ),
                field: "fieldManager".into(),
            })
    };
    match why {
        None => Ok(()),
        Some(cause) => Err(options_invalid(kind, cause)),
    }
}

/// A 422 about a request's options, as Kubernetes words it:
/// `PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: ...`.
pub fn options_invalid(kind: &str, cause: FieldCause) -> ApiError {
    ApiError {
        reason: Reason::Invalid,
        message: format!(
            "{kind}.meta.k8s.io \"\" is invalid: {}: {}",
            cause.field, cause.message
        ),
        target: Target::new("meta.k8s.io", kind, ""),
        causes: vec![cause],
        retry_after_seconds: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Object {
        Object::from_value(v).expect("an object")
    }

    fn entry(time: &str, manager: &str) -> Value {
        json!({"manager": manager, "operation": "Apply", "apiVersion": "v1", "time": time,
               "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}})
    }

    fn cm(entries: Value, data: Value) -> Draft {
        Draft::from_object(obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "managedFields": entries}, "data": data})))
    }

    #[test]
    fn objects_equal_but_for_their_entries_times_are_equal_but_times() {
        let a = cm(
            json!([entry("2020-01-01T00:00:00Z", "x")]),
            json!({"a": "1"}),
        );
        let later = cm(
            json!([entry("2026-01-01T00:00:00Z", "x")]),
            json!({"a": "1"}),
        );
        assert!(equal_but_times(&later, &a));
        // Anything else that differs counts: the data, a manager, an entry more, a member
        // that one has and the other lacks in its place.
        let other_data = cm(
            json!([entry("2026-01-01T00:00:00Z", "x")]),
            json!({"a": "2"}),
        );
        assert!(!equal_but_times(&other_data, &a));
        let other_manager = cm(
            json!([entry("2020-01-01T00:00:00Z", "y")]),
            json!({"a": "1"}),
        );
        assert!(!equal_but_times(&other_manager, &a));
        let more = cm(
            json!([
                entry("2020-01-01T00:00:00Z", "x"),
                entry("2020-01-01T00:00:00Z", "y")
            ]),
            json!({"a": "1"}),
        );
        assert!(!equal_but_times(&more, &a));
        let mut swapped = a.clone();
        swapped.object.as_map_mut().remove("data");
        swapped
            .object
            .as_map_mut()
            .insert("binaryData".into(), json!({"a": "1"}));
        assert!(!equal_but_times(&swapped, &a));
        let mut no_entries = a.clone();
        no_entries.entries = Arc::default();
        assert!(!equal_but_times(&no_entries, &a));
        // One entry twice is not two entries.
        let x_and_y = cm(
            json!([
                entry("2020-01-01T00:00:00Z", "x"),
                entry("2020-01-01T00:00:00Z", "y")
            ]),
            json!({"a": "1"}),
        );
        let x_twice = cm(
            json!([
                entry("2020-01-01T00:00:00Z", "x"),
                entry("2021-01-01T00:00:00Z", "x")
            ]),
            json!({"a": "1"}),
        );
        assert!(!equal_but_times(&x_twice, &x_and_y));
        // The same entries in another order (their times order them) are the same.
        let two =
            |t1: &str, t2: &str| cm(json!([entry(t1, "x"), entry(t2, "y")]), json!({"a": "1"}));
        let mut reordered = two("2020-01-01T00:00:00Z", "2020-01-01T00:00:00Z");
        Arc::make_mut(&mut reordered.entries).reverse();
        assert!(equal_but_times(
            &reordered,
            &two("2020-01-01T00:00:00Z", "2021-01-01T00:00:00Z")
        ));
    }
}
