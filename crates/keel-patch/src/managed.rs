//! `metadata.managedFields`: who owns which fields of an object, as Kubernetes records it for
//! server-side apply (docs/server-side-apply.md §2 and §4): the entries, their identity and
//! order, and the words of an apply's conflicts.

use std::cmp::Ordering;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::fieldpath::{FieldsV1Error, Path, Set};

/// How a manager came to own its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    /// A server-side apply: the manager owns what its configuration says.
    Apply,
    /// Any other write: the manager owns what it changed.
    Update,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One entry of `metadata.managedFields`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub manager: String,
    pub operation: Operation,
    /// The group/version the manager wrote in (`apps/v1`, `v1`).
    pub api_version: String,
    /// RFC 3339, to the second; absent when the entry's fields were never changed by it.
    pub time: Option<String>,
    /// `status` or `scale` for a write through that subresource.
    pub subresource: String,
    /// Shared: copying the entries of an object copies no field sets.
    pub fields: Arc<Set>,
}

/// Why `metadata.managedFields` could not be read: the field's path and what is wrong, in
/// Kubernetes' words where it has them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metadata.managedFields[{index}]{field}: {why}")]
pub struct ManagedFieldsError {
    pub index: usize,
    /// `.operation`, `.fieldsType`, ... (empty: the entry itself).
    pub field: String,
    pub why: String,
}

impl Entry {
    /// What makes two entries one (Kubernetes' `BuildManagerIdentifier`): manager, operation,
    /// subresource, and for an Update the apiVersion. One applier has one entry per
    /// subresource whatever version it applies in.
    pub fn identity(&self) -> (String, Operation, String, String) {
        let version = match self.operation {
            Operation::Apply => String::new(),
            Operation::Update => self.api_version.clone(),
        };
        (
            self.manager.clone(),
            self.operation,
            version,
            self.subresource.clone(),
        )
    }

    /// Whether this is `w`'s entry (the same [`Entry::identity`], compared in place).
    pub fn is(&self, w: &Writer) -> bool {
        self.operation == w.operation
            && self.manager == w.manager
            && self.subresource == w.subresource
            && (self.operation == Operation::Apply || self.api_version == w.api_version)
    }

    /// The manager as a conflict names it: `"kubectl"`, `"kube-controller-manager" using
    /// apps/v1` for an Update, with ` with subresource "status"` after a subresource's.
    pub fn describe(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }

    /// The entry as JSON, in Kubernetes' field order.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), json!(self.manager));
        m.insert("operation".into(), json!(self.operation.as_str()));
        m.insert("apiVersion".into(), json!(self.api_version));
        if let Some(t) = &self.time {
            m.insert("time".into(), json!(t));
        }
        m.insert("fieldsType".into(), json!("FieldsV1"));
        m.insert("fieldsV1".into(), self.fields.to_fields_v1_value());
        if !self.subresource.is_empty() {
            m.insert("subresource".into(), json!(self.subresource));
        }
        Value::Object(m)
    }
}

/// The entries of a `metadata.managedFields` value (absent or null: none).
pub fn parse(v: Option<&Value>) -> Result<Vec<Entry>, ManagedFieldsError> {
    let items = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(ManagedFieldsError {
                index: 0,
                field: String::new(),
                why: "must be a list of entries".into(),
            });
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let bad = |field: &str, why: String| ManagedFieldsError {
            index,
            field: field.to_string(),
            why,
        };
        let text = |f: &str| {
            item.get(f)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let operation = match text("operation").as_str() {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            other => {
                return Err(bad(
                    ".operation",
                    format!(
                        "Unsupported value: {other:?}: supported values: \"Apply\", \"Update\""
                    ),
                ));
            }
        };
        let fields_type = text("fieldsType");
        if fields_type != "FieldsV1" {
            return Err(bad(
                ".fieldsType",
                format!("Unsupported value: {fields_type:?}: supported values: \"FieldsV1\""),
            ));
        }
        let fields = match item.get("fieldsV1") {
            None | Some(Value::Null) => Set::new(),
            Some(v) => Set::from_fields_v1(v)
                .map_err(|e: FieldsV1Error| bad(".fieldsV1", e.to_string()))?,
        };
        out.push(Entry {
            manager: text("manager"),
            operation,
            api_version: text("apiVersion"),
            time: item.get("time").and_then(Value::as_str).map(str::to_string),
            subresource: text("subresource"),
            fields: Arc::new(fields),
        });
    }
    Ok(out)
}

/// Kubernetes' order of entries (`sortEncodedManagedFields`): Apply before Update, then the
/// oldest first (no time counts as the oldest), then by manager, apiVersion, subresource.
pub fn sort(entries: &mut [Entry]) {
    entries.sort_by(order);
}

fn order(a: &Entry, b: &Entry) -> Ordering {
    a.operation
        .cmp(&b.operation)
        .then_with(|| compare_times(a.time.as_deref(), b.time.as_deref()))
        .then_with(|| a.manager.cmp(&b.manager))
        .then_with(|| a.api_version.cmp(&b.api_version))
        .then_with(|| a.subresource.cmp(&b.subresource))
}

fn compare_times(a: Option<&str>, b: Option<&str>) -> Ordering {
    // RFC 3339 in UTC to the second (`2025-01-02T03:04:05Z`) sorts as text.
    a.unwrap_or("").cmp(b.unwrap_or(""))
}

/// The entries as `metadata.managedFields`, sorted; empty entries are left out.
pub fn to_value(entries: &[Entry]) -> Value {
    let mut entries: Vec<&Entry> = entries.iter().filter(|e| !e.fields.is_empty()).collect();
    entries.sort_by(|a, b| order(a, b));
    Value::Array(entries.into_iter().map(Entry::to_value).collect())
}

/// The manager of a write that is not an apply (Kubernetes' `managerOrUserAgent`): its
/// `fieldManager`, else its User-Agent up to the first `/`, printable characters only, at most
/// 128 bytes; `unknown` when nothing is left. `kubectl/v1.32.9 (linux/amd64) ...` is `kubectl`.
pub fn manager_of(field_manager: Option<&str>, user_agent: &str) -> String {
    if let Some(m) = field_manager.filter(|m| !m.is_empty()) {
        return m.to_string();
    }
    let head = user_agent.split('/').next().unwrap_or("");
    let mut out = String::new();
    for c in head.chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > 128 {
            break;
        }
        out.push(c);
    }
    if out.is_empty() {
        "unknown".into()
    } else {
        out
    }
}

/// Who writes: a manager, how, in which version, through which subresource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Writer {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub subresource: String,
}

impl Writer {
    /// The identity of its entry ([`Entry::identity`]).
    pub fn identity(&self) -> (String, Operation, String, String) {
        self.entry(Set::new(), None).identity()
    }

    fn entry(&self, fields: Set, time: Option<String>) -> Entry {
        Entry {
            manager: self.manager.clone(),
            operation: self.operation,
            api_version: self.api_version.clone(),
            time,
            subresource: self.subresource.clone(),
            fields: Arc::new(fields),
        }
    }
}

/// The fields each other manager owns among `changed` (what the write adds or modifies):
/// an apply's conflicts (docs/server-side-apply.md §4.1). An Update never conflicts: it takes
/// them ([`record_update`]).
pub fn conflicts(entries: &[Entry], writer: &Writer, changed: &Set) -> Vec<Conflict> {
    entries
        .iter()
        .filter(|e| !e.is(writer))
        .filter_map(|e| {
            let taken = e.fields.intersection(changed);
            (!taken.is_empty()).then(|| Conflict {
                manager: e.describe(),
                paths: taken.paths(),
            })
        })
        .collect()
}

/// The entries after an Update by `writer` that changed `changed` and removed `removed`
/// (§2.4): every other manager loses what it changed, removed fields (and all below them)
/// leave every set, and the
/// writer's entry gains what it changed, its time `now`. A write that changed nothing leaves
/// the entries as they were.
pub fn record_update(
    entries: &[Entry],
    writer: &Writer,
    changed: &Set,
    removed: &Set,
    now: &str,
) -> Vec<Entry> {
    if changed.is_empty() && removed.is_empty() {
        return entries.to_vec();
    }
    let mut out: Vec<Entry> = Vec::with_capacity(entries.len() + 1);
    let mut mine: Option<Entry> = None;
    for e in entries {
        let mut e = e.clone();
        if e.is(writer) {
            e.fields = Arc::new(e.fields.union(changed).without_below(removed));
            e.api_version = writer.api_version.clone();
            if !changed.is_empty() {
                e.time = Some(now.to_string());
            }
            mine = Some(e);
            continue;
        }
        e.fields = Arc::new(e.fields.difference(changed).without_below(removed));
        out.push(e);
    }
    let mine = mine.unwrap_or_else(|| writer.entry(changed.clone(), Some(now.to_string())));
    out.push(mine);
    out.retain(|e| !e.fields.is_empty());
    sort(&mut out);
    out
}

/// The entries after an apply by `writer` of a configuration whose fields are `applied`, taking
/// `forced` (the conflicts it overrode with `force`) from their owners (§2.4, §4.1): the
/// applier's set is replaced, not unioned, and its time is `now` when the object changed.
pub fn record_apply(
    entries: &[Entry],
    writer: &Writer,
    applied: &Set,
    forced: &Set,
    object_changed: bool,
    now: &str,
) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::with_capacity(entries.len() + 1);
    let mut time = None;
    for e in entries {
        if e.is(writer) {
            time = e.time.clone();
            continue;
        }
        let mut e = e.clone();
        if !forced.is_empty() {
            e.fields = Arc::new(e.fields.difference(forced));
        }
        out.push(e);
    }
    if object_changed {
        time = Some(now.to_string());
    }
    out.push(writer.entry(applied.clone(), time));
    out.retain(|e| !e.fields.is_empty());
    sort(&mut out);
    out
}

/// The most Update entries an object keeps (Kubernetes' `DefaultMaxUpdateManagers`).
pub const MAX_UPDATE_MANAGERS: usize = 10;

/// The manager older Update entries are merged into when there are too many.
pub const ANCIENT_CHANGES: &str = "ancient-changes";

/// Keeps at most [`MAX_UPDATE_MANAGERS`] Update entries (Kubernetes' `capManagers`,
/// docs/server-side-apply.md §2.7): oldest first, the second entry of an apiVersion starts an
/// `ancient-changes` entry of that version from the first, and it and later ones of that
/// version are merged into it, until few enough are left. Its time is the newest merged.
pub fn cap_updates(entries: &mut Vec<Entry>) {
    let updates = entries
        .iter()
        .filter(|e| e.operation == Operation::Update)
        .count();
    if updates <= MAX_UPDATE_MANAGERS {
        return;
    }
    let mut excess = updates - MAX_UPDATE_MANAGERS;
    let (mut olds, applies): (Vec<Entry>, Vec<Entry>) = std::mem::take(entries)
        .into_iter()
        .partition(|e| e.operation == Operation::Update);
    olds.sort_by(|a, b| {
        compare_times(a.time.as_deref(), b.time.as_deref())
            .then_with(|| a.identity().cmp(&b.identity()))
    });
    let mut kept: Vec<Entry> = Vec::with_capacity(olds.len());
    // Per apiVersion: the index in `kept` of the first entry seen, or of its bucket.
    let mut first: std::collections::HashMap<String, usize> = Default::default();
    for e in olds {
        if excess == 0 {
            kept.push(e);
            continue;
        }
        match first.get(&e.api_version).copied() {
            None => {
                first.insert(e.api_version.clone(), kept.len());
                kept.push(e);
            }
            Some(i) => {
                let bucket = &mut kept[i];
                bucket.manager = ANCIENT_CHANGES.into();
                bucket.subresource = String::new();
                bucket.fields = Arc::new(bucket.fields.union(&e.fields));
                if compare_times(bucket.time.as_deref(), e.time.as_deref()) == Ordering::Less {
                    bucket.time = e.time.clone();
                }
                excess -= 1;
            }
        }
    }
    // A bucket made now is one with an older bucket of its version.
    let mut merged: Vec<Entry> = Vec::with_capacity(kept.len());
    for e in kept {
        match merged.iter_mut().find(|m| m.identity() == e.identity()) {
            Some(m) => {
                m.fields = Arc::new(m.fields.union(&e.fields));
                if compare_times(m.time.as_deref(), e.time.as_deref()) == Ordering::Less {
                    m.time = e.time;
                }
            }
            None => merged.push(e),
        }
    }
    entries.extend(applies);
    entries.extend(merged);
    sort(entries);
}

/// One manager's fields an apply would take from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// [`Entry::describe`] of the owner.
    pub manager: String,
    pub paths: Vec<Path>,
}

/// The message of an apply refused for its conflicts, in Kubernetes' words
/// (`conflict.go`): `Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas`,
/// or a line per path when there are several; and a cause per path, as the 409's
/// `details.causes` lists them (`FieldManagerConflict`, `conflict with <manager>`, the path).
pub fn conflict_message(conflicts: &[Conflict]) -> (String, Vec<(String, String)>) {
    let mut sorted: Vec<&Conflict> = conflicts.iter().filter(|c| !c.paths.is_empty()).collect();
    sorted.sort_by(|a, b| a.manager.cmp(&b.manager));
    let total: usize = sorted.iter().map(|c| c.paths.len()).sum();
    let causes: Vec<(String, String)> = sorted
        .iter()
        .flat_map(|c| {
            c.paths
                .iter()
                .map(|p| (format!("conflict with {}", c.manager), p.to_string()))
        })
        .collect();
    let message = if total == 1 {
        let (m, p) = &causes[0];
        format!("Apply failed with 1 conflict: {m}: {p}")
    } else {
        let mut s = format!("Apply failed with {total} conflicts: ");
        let blocks: Vec<String> = sorted
            .iter()
            .map(|c| {
                let lines: Vec<String> = c.paths.iter().map(|p| format!("- {p}")).collect();
                format!("conflicts with {}:\n{}", c.manager, lines.join("\n"))
            })
            .collect();
        s.push_str(&blocks.join("\n"));
        s
    };
    (message, causes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fieldpath::PathElement;

    fn path(fields: &[&str]) -> Vec<PathElement> {
        fields
            .iter()
            .map(|f| PathElement::Field(f.to_string()))
            .collect()
    }

    fn entry(manager: &str, op: Operation, time: Option<&str>, field: &[&str]) -> Entry {
        let mut fields = Set::new();
        fields.insert(&path(field));
        Entry {
            manager: manager.into(),
            operation: op,
            api_version: "apps/v1".into(),
            time: time.map(str::to_string),
            subresource: String::new(),
            fields: fields.into(),
        }
    }

    #[test]
    fn more_than_ten_updaters_leave_ancient_changes_as_kubernetes_caps_them() {
        // TestApplyGroupsManySeparateUpdates: one apply, then twenty updaters.
        let mut entries = vec![entry(
            "apply_test",
            Operation::Apply,
            Some("2025-01-01T00:00:00Z"),
            &["data", "a"],
        )];
        for i in 0..20 {
            let time = format!("2025-01-01T00:00:{i:02}Z");
            let field = format!("k{i}");
            entries.push(entry(
                &format!("updater{i}"),
                Operation::Update,
                Some(&time),
                &["data", &field],
            ));
            cap_updates(&mut entries);
        }
        assert_eq!(entries.len(), 11);
        assert_eq!(entries[0].manager, "apply_test");
        assert_eq!(entries[1].manager, ANCIENT_CHANGES);
        // The bucket holds every field the merged updaters owned, and the newest of their times.
        assert!(entries[1].fields.has(&path(&["data", "k0"])));
        assert!(entries[1].fields.has(&path(&["data", "k10"])));
        assert_eq!(entries[1].time.as_deref(), Some("2025-01-01T00:00:10Z"));
        assert_eq!(entries[10].manager, "updater19");
    }

    #[test]
    fn entries_read_write_and_sort_as_kubernetes_has_them() {
        let live = json!([
            {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "apps/v1",
             "time": "2025-01-02T03:04:05Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:status": {"f:replicas": {}}}, "subresource": "status"},
            {"manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1",
             "time": "2025-01-02T03:04:09Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:replicas": {}}}},
        ]);
        let entries = parse(Some(&live)).unwrap();
        assert_eq!(entries[1].operation, Operation::Apply);
        assert_eq!(to_value(&entries), json!([live[1], live[0]]), "Apply first");
        assert_eq!(
            entries[0].describe(),
            r#""kube-controller-manager" with subresource "status" using apps/v1"#
        );
        assert_eq!(entries[1].describe(), r#""kubectl""#);
        let mut bad = live.clone();
        bad[1]["operation"] = json!("Patch");
        let e = parse(Some(&bad)).unwrap_err();
        assert_eq!((e.index, e.field.as_str()), (1, ".operation"));
        bad[1]["operation"] = json!("Apply");
        bad[1]["fieldsType"] = json!("FieldsV2");
        assert_eq!(parse(Some(&bad)).unwrap_err().field, ".fieldsType");
    }

    #[test]
    fn an_applier_is_one_entry_whatever_its_version_an_updater_one_per_version() {
        let mut a = entry("kubectl", Operation::Apply, None, &["spec"]);
        let mut b = a.clone();
        b.api_version = "apps/v1beta1".into();
        assert_eq!(a.identity(), b.identity());
        a.operation = Operation::Update;
        b.operation = Operation::Update;
        assert_ne!(a.identity(), b.identity());
    }

    #[test]
    fn empty_entries_go_and_the_oldest_update_comes_first() {
        let entries = vec![
            entry("b", Operation::Update, Some("2025-01-02T03:04:06Z"), &["x"]),
            entry("a", Operation::Update, Some("2025-01-02T03:04:07Z"), &["y"]),
            Entry {
                fields: Arc::default(),
                ..entry("gone", Operation::Apply, None, &["z"])
            },
        ];
        let out = to_value(&entries);
        let managers: Vec<&str> = out
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(managers, ["b", "a"]);
    }

    fn set(paths: &[&[&str]]) -> Set {
        let mut s = Set::new();
        for p in paths {
            s.insert(&path(p));
        }
        s
    }

    fn writer(manager: &str, operation: Operation) -> Writer {
        Writer {
            manager: manager.into(),
            operation,
            api_version: "apps/v1".into(),
            subresource: String::new(),
        }
    }

    /// The seeds' walkthrough with `--server-side` (issue 32's "Done when"), as bookkeeping.
    #[test]
    fn two_appliers_conflict_force_takes_over_and_the_loser_keeps_the_rest() {
        let now = "2025-01-02T03:04:05Z";
        let kubectl = writer("kubectl", Operation::Apply);
        let mine = set(&[&["spec", "replicas"], &["spec", "image"]]);
        let entries = record_apply(&[], &kubectl, &mine, &Set::new(), true, now);
        // `other` sets replicas to another value: a conflict naming kubectl.
        let other = writer("other", Operation::Apply);
        let replicas = set(&[&["spec", "replicas"]]);
        let found = conflicts(&entries, &other, &replicas);
        assert_eq!(
            conflict_message(&found).0,
            r#"Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas"#
        );
        // Forced: other owns replicas, kubectl only the image.
        let entries = record_apply(&entries, &other, &replicas, &replicas, true, now);
        let owners: Vec<(String, String)> = entries
            .iter()
            .map(|e| (e.manager.clone(), e.fields.to_fields_v1()))
            .collect();
        assert_eq!(
            owners,
            [
                (
                    "kubectl".to_string(),
                    r#"{"f:spec":{"f:image":{}}}"#.to_string()
                ),
                (
                    "other".to_string(),
                    r#"{"f:spec":{"f:replicas":{}}}"#.to_string()
                ),
            ]
        );
        // kubectl applies again without replicas: no conflict, replicas stays other's.
        let image = set(&[&["spec", "image"]]);
        assert!(conflicts(&entries, &kubectl, &Set::new()).is_empty());
        let entries = record_apply(&entries, &kubectl, &image, &Set::new(), false, now);
        assert!(
            entries
                .iter()
                .any(|e| e.manager == "other" && *e.fields == replicas)
        );
    }

    #[test]
    fn an_update_takes_what_it_changes_and_removed_fields_leave_every_set() {
        let now = "2025-01-02T03:04:05Z";
        let applied = set(&[&["spec", "replicas"], &["spec", "paused"]]);
        let entries = record_apply(
            &[],
            &writer("kubectl", Operation::Apply),
            &applied,
            &Set::new(),
            true,
            now,
        );
        let hpa = writer("hpa", Operation::Update);
        let after = record_update(
            &entries,
            &hpa,
            &set(&[&["spec", "replicas"]]),
            &set(&[&["spec", "paused"]]),
            "2025-01-02T03:04:09Z",
        );
        assert_eq!(
            after.len(),
            1,
            "kubectl's entry is empty and goes: {after:?}"
        );
        assert_eq!(after[0].manager, "hpa");
        assert_eq!(after[0].time.as_deref(), Some("2025-01-02T03:04:09Z"));
        let unchanged = record_update(&after, &hpa, &Set::new(), &Set::new(), "later");
        assert_eq!(
            unchanged, after,
            "a write that changes nothing keeps the entries"
        );
    }

    #[test]
    fn a_manager_is_its_field_manager_or_its_user_agents_name() {
        let kubectl = "kubectl/v1.32.9 (linux/amd64) kubernetes/abc";
        assert_eq!(manager_of(None, kubectl), "kubectl");
        assert_eq!(manager_of(Some("helm"), kubectl), "helm");
        assert_eq!(manager_of(Some(""), "curl/8.0"), "curl");
        assert_eq!(manager_of(None, ""), "unknown");
        assert_eq!(manager_of(None, "a\u{7}b"), "ab");
        assert_eq!(manager_of(None, &"é".repeat(100)).len(), 128);
    }

    #[test]
    fn conflicts_are_worded_as_kubernetes_words_them() {
        let replicas = Path(path(&["spec", "replicas"]));
        let one = [Conflict {
            manager: r#""kubectl""#.into(),
            paths: vec![replicas.clone()],
        }];
        let (message, causes) = conflict_message(&one);
        assert_eq!(
            message,
            r#"Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas"#
        );
        assert_eq!(
            causes,
            [(
                r#"conflict with "kubectl""#.to_string(),
                ".spec.replicas".to_string()
            )]
        );
        let image = Path(path(&["spec", "image"]));
        let two = [
            Conflict {
                manager: r#""other" using apps/v1"#.into(),
                paths: vec![image],
            },
            Conflict {
                manager: r#""kubectl""#.into(),
                paths: vec![replicas],
            },
        ];
        assert_eq!(
            conflict_message(&two).0,
            "Apply failed with 2 conflicts: conflicts with \"kubectl\":\n- .spec.replicas\n\
             conflicts with \"other\" using apps/v1:\n- .spec.image"
        );
    }
}
