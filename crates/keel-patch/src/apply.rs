//! Server-side apply over JSON objects (structured-merge-diff's `Apply`,
//! docs/server-side-apply.md §4 and §5): a manager's configuration merged into the live object
//! as the kind's schema says, the fields it applied before and no longer does removed unless
//! another manager owns them, conflicts with other owners found, and `managedFields`
//! brought up to date.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::fieldpath::{
    FieldSetError, PathElement, Set, atomic, changed_fields, item_key, keys_are_items, to_field_set,
};
use crate::managed::{Conflict, Entry, Writer, conflicts, record_apply};
use crate::{ListStrategy, MergeSchema};

/// What an apply made.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// The object (without `metadata.managedFields`, which `entries` are).
    pub object: Value,
    pub entries: Vec<Entry>,
}

/// Why an apply was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApplyError {
    /// Fields other managers own and the configuration would change (without `force`).
    #[error("{} conflict(s)", .0.len())]
    Conflicts(Vec<Conflict>),
    /// A configuration the schema cannot key (an item without its key field, ...).
    #[error(transparent)]
    Invalid(#[from] FieldSetError),
}

/// Applies `config` by `writer` (its operation is Apply) to `live`, whose managers are
/// `entries`, at time `now`; `force` takes conflicting fields from their owners.
pub fn apply(
    live: &Map<String, Value>,
    config: &Value,
    schema: &dyn MergeSchema,
    entries: &[Entry],
    writer: &Writer,
    force: bool,
    now: &str,
) -> Result<Applied, ApplyError> {
    let applied = to_field_set(config, schema)?;
    let Value::Object(config) = config else {
        return Err(ApplyError::Invalid(FieldSetError {
            path: String::new(),
            why: "a configuration is an object".into(),
        }));
    };
    let live = &without_entries(live);
    let mut merged = merge_fields(live, config, schema, &mut Vec::new());
    // What the applier applied before and no longer does goes, unless it is owned
    // (structured-merge-diff's `prune`), found by walking its previous set only.
    let mut gone = Set::new();
    if let Some(last) = entries.iter().find(|e| e.is(writer)).map(|e| &e.fields) {
        // Only what it no longer applies can go (what it applies is owned, and so is every
        // item and key on the way to it): an applier that applies what it applied before,
        // the common case, costs nothing more here.
        let dropped = last.difference(&applied);
        if !dropped.is_empty() {
            // The configuration owns its identity too (`metadata.name`, ...), which no entry
            // records (Kubernetes strips it after structured-merge-diff has pruned with it):
            // so `metadata` stays when the last label an applier applied goes.
            let owners: Vec<&Set> = entries
                .iter()
                .filter(|e| !e.is(writer))
                .map(|e| &*e.fields)
                .chain([&applied, crate::fieldpath::never_owned()])
                .collect();
            let mut walk = Prune {
                schema,
                fields: Vec::new(),
                at: Vec::new(),
                gone: &mut gone,
            };
            let level = Level {
                last,
                dropped: &dropped,
                owners,
                removed: false,
                unowned: false,
            };
            walk.fields_of(&level, &merged);
        }
    }
    let removed = !gone.is_empty();
    if removed {
        remove_fields(&mut merged, &gone, schema, &mut Vec::new());
    }
    let change = changed_fields(live, &merged, schema)?;
    let found = conflicts(entries, writer, &change);
    if !found.is_empty() && !force {
        return Err(ApplyError::Conflicts(found));
    }
    // What the applier takes from others: nothing unless it conflicted (and was forced).
    let mut forced = Set::new();
    if !found.is_empty() {
        for e in entries.iter().filter(|e| !e.is(writer)) {
            forced.union_with(&e.fields.intersection(&change));
        }
    }
    let object_changed = merged != *live;
    let mut entries = record_apply(entries, writer, &applied, &forced, object_changed, now);
    // What left the object leaves every manager's set, with all below it (an item that went
    // with what another manager owned inside it).
    if removed {
        for e in &mut entries {
            e.fields = Arc::new(e.fields.without_below(&gone));
        }
        entries.retain(|e| !e.fields.is_empty());
    }
    Ok(Applied {
        object: Value::Object(merged),
        entries,
    })
}

/// `config` merged into `live`: the configuration's scalars, atomic lists and atomic maps win;
/// maps merge key by key; keyed lists and sets merge item by item, in structured-merge-diff
/// v4.4.2's order ([`merged_order`]). A null configuration leaves a granular map or an
/// associative list that has items as it is (structured-merge-diff reads the null as that
/// container, empty).
pub fn merge(
    live: Option<&Value>,
    config: &Value,
    schema: &dyn MergeSchema,
    fields: &mut Vec<String>,
) -> Value {
    match (live, config) {
        (Some(Value::Object(l)), Value::Object(c)) if !atomic(schema, fields) => {
            Value::Object(merge_fields(l, c, schema, fields))
        }
        (Some(Value::Object(l)), Value::Null) if !l.is_empty() && !atomic(schema, fields) => {
            Value::Object(l.clone())
        }
        (Some(Value::Array(l)), Value::Array(_) | Value::Null) => {
            let c: &[Value] = match config {
                Value::Array(c) => c,
                _ => &[],
            };
            let owned = fields.clone();
            let path: Vec<&str> = owned.iter().map(String::as_str).collect();
            let identity: Box<dyn Fn(&Value) -> Value> = match schema.list_strategy(&path) {
                ListStrategy::Replace => return config.clone(),
                ListStrategy::Set => Box::new(|v: &Value| v.clone()),
                ListStrategy::MergeByKeys(keys) => {
                    let defaults: Vec<Option<Value>> = keys
                        .iter()
                        .map(|k| schema.merge_key_default(&path, k))
                        .collect();
                    Box::new(move |v: &Value| {
                        Value::Array(
                            keys.iter()
                                .zip(&defaults)
                                .map(|(k, d)| {
                                    v.get(k)
                                        .cloned()
                                        .or_else(|| d.clone())
                                        .unwrap_or(Value::Null)
                                })
                                .collect(),
                        )
                    })
                }
            };
            if config.is_null() && l.is_empty() {
                return Value::Null;
            }
            // Identities as text: equal values print alike (maps print in key order).
            let config_ids: Vec<String> = c.iter().map(|v| identity(v).to_string()).collect();
            let live_ids: Vec<String> = l.iter().map(|v| identity(v).to_string()).collect();
            let mut out = Vec::with_capacity(l.len() + c.len());
            for step in merged_order(&live_ids, &config_ids) {
                out.push(match step {
                    Step::Live(j) => l[j].clone(),
                    Step::Config(i, before) => merge(before.map(|j| &l[j]), &c[i], schema, fields),
                });
            }
            Value::Array(out)
        }
        _ => config.clone(),
    }
}

/// One item of a merged set or keyed list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The live list's item at this index, which the configuration does not have.
    Live(usize),
    /// The configuration's item at this index, merged into the live item at the other index
    /// (none: the item is new, or the live list holds it more than once).
    Config(usize, Option<usize>),
}

/// The order of a merged set or keyed list, from its items' identities, as
/// structured-merge-diff v4.4.2 merges one (`typed/merge.go` `visitListItems`, Kubernetes
/// 1.32): the two lists are walked together; an item both have is taken when both reach it,
/// and a live item the configuration also has is passed over while it is not the next of
/// those the configuration orders; a live item the configuration does not have stays where it
/// is; a configuration item is taken when the live list is not on an item to keep. So the
/// shared items follow the configuration's order, the live list's own items keep their
/// places, and a new item comes after the configuration item before it. (v4.1.2 kept the
/// live order and appended new items.) `live` may hold an identity twice: each copy the
/// configuration does not have stays, and the configuration's item is merged into none.
fn merged_order(live: &[String], config: &[String]) -> Vec<Step> {
    let mut in_config: HashMap<&str, usize> = HashMap::with_capacity(config.len());
    for (i, id) in config.iter().enumerate() {
        in_config.entry(id.as_str()).or_insert(i);
    }
    // The live index of each identity, or none when the live list holds it twice.
    let mut in_live: HashMap<&str, Option<usize>> = HashMap::with_capacity(live.len());
    for (j, id) in live.iter().enumerate() {
        in_live
            .entry(id.as_str())
            .and_modify(|at| *at = None)
            .or_insert(Some(j));
    }
    let mut shared = config
        .iter()
        .map(String::as_str)
        .filter(|id| in_live.contains_key(id));
    let mut next_shared = shared.next();
    let mut taken: HashSet<&str> = HashSet::with_capacity(config.len());
    let mut out = Vec::with_capacity(live.len() + config.len());
    let (mut li, mut ri) = (0, 0);
    while li < live.len() || ri < config.len() {
        let progress = (li, ri);
        if li < live.len() && ri < config.len() {
            let id = live[li].as_str();
            if id == config[ri] {
                taken.insert(id);
                out.push(Step::Config(ri, in_live.get(id).copied().flatten()));
                li += 1;
                ri += 1;
                next_shared = shared.next();
                continue;
            }
            if in_config.contains_key(id) && next_shared.is_some_and(|n| n != id) {
                // A shared item, but not the one the configuration orders next.
                li += 1;
                continue;
            }
        }
        if li < live.len() {
            let id = live[li].as_str();
            if !in_config.contains_key(id) {
                out.push(Step::Live(li));
                li += 1;
                continue;
            } else if taken.contains(id) {
                li += 1;
            }
        }
        if ri < config.len() {
            let id = config[ri].as_str();
            taken.insert(id);
            out.push(Step::Config(ri, in_live.get(id).copied().flatten()));
            ri += 1;
            if next_shared == Some(id) {
                next_shared = shared.next();
            }
        }
        if (li, ri) == progress {
            // Unreachable with a configuration of distinct items (each is taken before the
            // walk ends); a guard, so that no input loops forever.
            li += 1;
        }
    }
    out
}

/// `live` without `metadata.managedFields`, which are no field of the object: copied once,
/// and neither merged nor compared.
fn without_entries(live: &Map<String, Value>) -> Map<String, Value> {
    live.iter()
        .map(|(k, v)| match (k.as_str(), v) {
            ("metadata", Value::Object(md)) => (
                k.clone(),
                Value::Object(
                    md.iter()
                        .filter(|(f, _)| f.as_str() != "managedFields")
                        .map(|(f, v)| (f.clone(), v.clone()))
                        .collect(),
                ),
            ),
            _ => (k.clone(), v.clone()),
        })
        .collect()
}

/// The fields of `c` merged into those of `l` ([`merge`] of two maps).
fn merge_fields(
    l: &Map<String, Value>,
    c: &Map<String, Value>,
    schema: &dyn MergeSchema,
    fields: &mut Vec<String>,
) -> Map<String, Value> {
    let mut out = l.clone();
    for (k, v) in c {
        fields.push(k.clone());
        let merged = merge(l.get(k), v, schema, fields);
        fields.pop();
        out.insert(k.clone(), merged);
    }
    out
}

/// [`remove_all`] of an object's fields.
fn remove_fields(
    m: &mut Map<String, Value>,
    gone: &Set,
    schema: &dyn MergeSchema,
    fields: &mut Vec<String>,
) {
    for e in gone.members() {
        if let PathElement::Field(k) = e {
            m.remove(k);
        }
    }
    for (e, below) in gone.children() {
        if let PathElement::Field(k) = e
            && let Some(child) = m.get_mut(k)
        {
            fields.push(k.clone());
            remove_all(child, below, schema, fields);
            fields.pop();
            if child.is_null() && schema.typed() {
                m.remove(k);
            }
        }
    }
}

/// Removes every path of `gone` from `obj` in one walk (structured-merge-diff's
/// `RemoveItems`): a field, a keyed item with all it holds, a set's value. A map or list
/// this leaves empty becomes null, as structured-merge-diff leaves it: a typed kind's field
/// is then removed ([`MergeSchema::typed`]: Kubernetes' Go structs omit it), and a custom
/// resource whose schema does not allow the null is refused (422).
fn remove_all(obj: &mut Value, gone: &Set, schema: &dyn MergeSchema, fields: &mut Vec<String>) {
    match obj {
        Value::Object(m) => {
            remove_fields(m, gone, schema, fields);
            if m.is_empty() {
                *obj = Value::Null;
            }
        }
        Value::Array(items) => {
            let owned = fields.clone();
            let names: Vec<&str> = owned.iter().map(String::as_str).collect();
            let strategy = schema.list_strategy(&names);
            let id_of = |item: &Value| item_element(item, &strategy, schema, &names);
            items.retain(|item| id_of(item).is_none_or(|id| !gone.members().contains(&id)));
            if !gone.children().is_empty() {
                for item in items.iter_mut() {
                    if let Some(below) = id_of(item).and_then(|id| gone.children().get(&id)) {
                        remove_all(item, below, schema, fields);
                    }
                }
            }
            if items.is_empty() {
                *obj = Value::Null;
            }
        }
        _ => {}
    }
}

/// The walk of an applier's previous set that finds what its apply removes, with the result
/// of structured-merge-diff's `prune` (`merge/update.go`) but without its three walks of the
/// whole object:
/// 1. everything the applier applied before is removed, its structs' fields made members
///    (`EnsureNamedFieldsAreMembers`: a struct field goes with what was applied below it);
/// 2. what was removed is put back where any manager, the applier's new configuration
///    included, owns it (a struct field while anything below it is owned, a map key, list
///    item or set value only when owned itself), so an unowned item goes with all inside it;
/// 3. of what step 2 left removed, only what the applier had applied goes.
///
/// So a path of the previous set goes when a path at or above it that step 1 removed, and
/// the object has, is owned by nobody; only paths the applier no longer applies can.
struct Prune<'a> {
    schema: &'a dyn MergeSchema,
    /// The field path of the current container (list items add no segment).
    fields: Vec<String>,
    at: Vec<PathElement>,
    gone: &'a mut Set,
}

/// Where the walk of [`Prune`] is, below one container.
struct Level<'a> {
    /// The applier's previous set here.
    last: &'a Set,
    /// What of it the applier no longer applies: the paths walked.
    dropped: &'a Set,
    /// Every manager's set here, the applier's new one included.
    owners: Vec<&'a Set>,
    /// Whether step 1 removed the container.
    removed: bool,
    /// Whether a path at or above the container that step 1 removed is owned by nobody.
    unowned: bool,
}

impl Prune<'_> {
    /// The walk below the object or struct `obj`.
    fn fields_of(&mut self, level: &Level<'_>, obj: &Map<String, Value>) {
        let struct_fields = !keys_are_items(self.schema, &self.fields);
        for e in elements(level.dropped) {
            let PathElement::Field(k) = e else { continue };
            let Some(v) = obj.get(k) else { continue };
            self.fields.push(k.clone());
            self.element(level, e, v, struct_fields);
            self.fields.pop();
        }
    }

    /// The walk below the set or keyed list `items`.
    fn items_of(&mut self, level: &Level<'_>, items: &[Value]) {
        let names: Vec<&str> = self.fields.iter().map(String::as_str).collect();
        let strategy = self.schema.list_strategy(&names);
        if strategy == ListStrategy::Replace {
            return;
        }
        let id_of = |item: &Value| item_element(item, &strategy, self.schema, &names);
        let mut by_id: std::collections::BTreeMap<PathElement, &Value> = Default::default();
        for item in items {
            if let Some(id) = id_of(item) {
                by_id.entry(id).or_insert(item);
            }
        }
        for e in elements(level.dropped) {
            if let Some(v) = by_id.get(e) {
                self.element(level, e, v, false);
            }
        }
    }

    /// One element `e` of the walk, whose value in the object is `v`.
    fn element(&mut self, level: &Level<'_>, e: &PathElement, v: &Value, struct_field: bool) {
        let last_below = level.last.children().get(e).filter(|c| !c.is_empty());
        // Step 1's set: the applier's paths, and the struct fields it applied below.
        let member = level.last.members().contains(e) || (struct_field && last_below.is_some());
        let removed = level.removed || member;
        let owned = level.owners.iter().any(|o| o.members().contains(e))
            || (struct_field
                && level
                    .owners
                    .iter()
                    .any(|o| o.children().get(e).is_some_and(|c| !c.is_empty())));
        let unowned = level.unowned || (removed && !owned && self.in_field_set(v, struct_field));
        self.at.push(e.clone());
        if member && unowned {
            self.gone.insert(&self.at);
        } else if let (Some(last), Some(dropped)) = (last_below, level.dropped.children().get(e)) {
            let below = Level {
                last,
                dropped,
                owners: level
                    .owners
                    .iter()
                    .filter_map(|o| o.children().get(e))
                    .collect(),
                removed,
                unowned,
            };
            match v {
                Value::Object(m) if !atomic(self.schema, &self.fields) => self.fields_of(&below, m),
                Value::Array(items) => self.items_of(&below, items),
                _ => {}
            }
        }
        self.at.pop();
    }

    /// Whether the object's field set (structs' fields made members) has the path to `v`: an
    /// item or map key always; a struct field unless it holds only what owns nothing (an
    /// empty set or keyed list, or a struct of those).
    fn in_field_set(&mut self, v: &Value, struct_field: bool) -> bool {
        if !struct_field {
            return true;
        }
        match v {
            Value::Object(m) if !m.is_empty() && !atomic(self.schema, &self.fields) => {
                keys_are_items(self.schema, &self.fields)
                    || m.iter().any(|(k, x)| {
                        self.fields.push(k.clone());
                        let has = self.in_field_set(x, true);
                        self.fields.pop();
                        has
                    })
            }
            Value::Array(items) if items.is_empty() => {
                let names: Vec<&str> = self.fields.iter().map(String::as_str).collect();
                self.schema.list_strategy(&names) == ListStrategy::Replace
            }
            _ => true,
        }
    }
}

/// The path element of `item` in the set or keyed list at `names` (`None` in an atomic list,
/// or for an item without its key).
fn item_element(
    item: &Value,
    strategy: &ListStrategy,
    schema: &dyn MergeSchema,
    names: &[&str],
) -> Option<PathElement> {
    match strategy {
        ListStrategy::Replace => None,
        ListStrategy::Set => Some(PathElement::Value(item.clone())),
        ListStrategy::MergeByKeys(keys) => {
            item_key(item, keys, schema, names).map(PathElement::key)
        }
    }
}

/// The elements of a set that are members or have paths below them.
fn elements(s: &Set) -> impl Iterator<Item = &PathElement> {
    s.members()
        .iter()
        .chain(s.children().keys().filter(|e| !s.members().contains(*e)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fieldpath::changed;
    use crate::managed::Operation;
    use serde_json::json;

    /// A schema of structured-merge-diff's fixtures: `list` keyed by `name`, `set` a set,
    /// `atomicMap` atomic, everything else granular maps and atomic lists.
    struct Fixture;

    impl MergeSchema for Fixture {
        fn list_strategy(&self, path: &[&str]) -> ListStrategy {
            match path {
                ["list"] => ListStrategy::MergeByKeys(vec!["name".into()]),
                ["set"] | ["list", "value"] => ListStrategy::Set,
                ["ports"] => ListStrategy::MergeByKeys(vec!["port".into(), "protocol".into()]),
                _ => ListStrategy::Replace,
            }
        }

        fn merge_key_default(&self, path: &[&str], key: &str) -> Option<Value> {
            (path == ["ports"] && key == "protocol").then(|| json!("TCP"))
        }

        fn map_atomic(&self, path: &[&str]) -> bool {
            path == ["atomicMap"]
        }
    }

    const NOW: &str = "2025-01-02T03:04:05Z";

    /// The conflicts of a refused apply, as `<manager> <path>`.
    fn conflicted(result: Result<(), ApplyError>) -> Vec<String> {
        match result {
            Err(ApplyError::Conflicts(c)) => c
                .iter()
                .flat_map(|c| c.paths.iter().map(move |p| format!("{} {p}", c.manager)))
                .collect(),
            other => panic!("not a conflict: {other:?}"),
        }
    }

    fn writer(manager: &str, operation: Operation) -> Writer {
        Writer {
            manager: manager.into(),
            operation,
            api_version: "v1".into(),
            subresource: String::new(),
        }
    }

    /// [`Fixture`], whose objects are Go structs (a built-in kind's).
    struct Typed;

    impl MergeSchema for Typed {
        fn list_strategy(&self, path: &[&str]) -> ListStrategy {
            Fixture.list_strategy(path)
        }

        fn keys_are_items(&self, path: &[&str]) -> bool {
            path == ["labels"]
        }

        fn typed(&self) -> bool {
            true
        }
    }

    /// A sequence of applies and updates over one object, as SMD's fixtures run them.
    struct State {
        object: Value,
        entries: Vec<Entry>,
        schema: &'static dyn MergeSchema,
    }

    impl State {
        fn new() -> State {
            State {
                object: json!({}),
                entries: Vec::new(),
                schema: &Fixture,
            }
        }

        fn apply(&mut self, manager: &str, config: Value, force: bool) -> Result<(), ApplyError> {
            let w = writer(manager, Operation::Apply);
            let a = apply(
                self.object.as_object().unwrap(),
                &config,
                self.schema,
                &self.entries,
                &w,
                force,
                NOW,
            )?;
            self.object = a.object;
            self.entries = a.entries;
            Ok(())
        }

        fn update(&mut self, manager: &str, new: Value) {
            let w = writer(manager, Operation::Update);
            let change = changed(&self.object, &new, self.schema).unwrap();
            let before = to_field_set(&self.object, self.schema).unwrap();
            let after = to_field_set(&new, self.schema).unwrap();
            let removed = before.difference(&after);
            self.entries = crate::managed::record_update(&self.entries, &w, &change, &removed, NOW);
            self.object = new;
        }

        fn owns(&self, manager: &str) -> String {
            self.entries
                .iter()
                .find(|e| e.manager == manager)
                .map_or(String::new(), |e| e.fields.to_fields_v1())
        }
    }

    #[test]
    fn a_map_an_applier_created_stays_while_it_still_applies_keys_of_it() {
        // kubectl's client-side entry, handed to its applier, owns the map it created
        // (`"f:data":{".":{}, ...}`): dropping one key removes that key, not the map.
        let mut s = State::new();
        s.update("csa", json!({"data": {"a": "1", "b": "2"}}));
        assert_eq!(s.owns("csa"), r#"{"f:data":{".":{},"f:a":{},"f:b":{}}}"#);
        s.entries[0].manager = "one".into();
        s.entries[0].operation = Operation::Apply;
        s.apply("one", json!({"data": {"a": "4"}}), false).unwrap();
        assert_eq!(s.object, json!({"data": {"a": "4"}}));
    }

    /// The configuration owns its identity, which no entry records: when the applier drops
    /// the last label it applied, `metadata` stays, with the name in it.
    #[test]
    fn dropping_the_last_label_keeps_the_objects_identity() {
        let mut s = State::new();
        let meta = |labels: Option<Value>| {
            let mut m = json!({"name": "cm", "namespace": "default"});
            if let Some(l) = labels {
                m["labels"] = l;
            }
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": m})
        };
        s.apply("bob", meta(Some(json!({"tier": "web"}))), false)
            .unwrap_or_else(|e| panic!("{e}"));
        s.apply("bob", meta(None), false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            s.object,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "cm", "namespace": "default"}})
        );
    }

    /// Where removal empties a map someone else owns, structured-merge-diff leaves `null`;
    /// a typed kind's object has no such field (Go's structs omit it).
    #[test]
    fn a_typed_kinds_map_that_removal_empties_is_removed_not_null() {
        for (schema, want) in [
            (
                &Fixture as &'static dyn MergeSchema,
                json!({"labels": null}),
            ),
            (&Typed, json!({})),
        ] {
            let mut s = State {
                schema,
                ..State::new()
            };
            s.update("updater", json!({"labels": {"k0": "x"}}));
            s.apply("alice", json!({"labels": {"k1": "v1"}}), false)
                .unwrap_or_else(|e| panic!("{e}"));
            s.update("updater", json!({"labels": {"k1": "v1"}}));
            s.apply("alice", json!({}), false)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(s.object, want);
        }
    }

    #[test]
    fn a_configuration_holding_an_item_twice_is_refused() {
        let mut s = State::new();
        let e = s
            .apply(
                "one",
                json!({"list": [{"name": "a"}, {"name": "a"}]}),
                false,
            )
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            r#".list: duplicate entries for key [name="a"]"#
        );
        let e = s
            .apply("one", json!({"set": ["x", "x"]}), false)
            .unwrap_err();
        assert_eq!(e.to_string(), r#".set: duplicate entries for key [="x"]"#);
        assert_eq!(s.object, json!({}), "nothing applied");
    }

    #[test]
    fn long_lists_merge_diff_and_shrink_in_one_pass_each() {
        // Ten thousand items: each step is linear (up to logarithms), so this is
        // quick; a step quadratic in the items would take minutes.
        const N: usize = 10_000;
        let set: Vec<Value> = (0..N).map(|i| json!(format!("v{i}"))).collect();
        let list: Vec<Value> = (0..N).map(|i| json!({"name": format!("n{i}")})).collect();
        let mut s = State::new();
        s.update(
            "controller",
            json!({"set": ["live"], "list": [{"name": "live"}]}),
        );
        s.apply("one", json!({"set": set, "list": list}), false)
            .unwrap();
        assert_eq!(s.object["set"].as_array().unwrap().len(), N + 1);
        assert_eq!(s.object["set"][0], "live");
        let mut fewer = set.clone();
        fewer.reverse();
        fewer.truncate(N / 2);
        s.apply("one", json!({"set": fewer, "list": []}), false)
            .unwrap();
        let left = s.object["set"].as_array().unwrap();
        assert_eq!(
            left.len(),
            N / 2 + 1,
            "the controller's item and half of one's"
        );
        assert_eq!(left[0], "live");
        assert_eq!(s.object["list"], json!([{"name": "live"}]));
    }

    /// The merged list, by identity, of `live` and `config`.
    fn order(live: &[&str], config: &[&str]) -> Vec<String> {
        let live: Vec<String> = live.iter().map(|s| s.to_string()).collect();
        let config: Vec<String> = config.iter().map(|s| s.to_string()).collect();
        merged_order(&live, &config)
            .into_iter()
            .map(|step| match step {
                Step::Live(j) => live[j].clone(),
                Step::Config(i, _) => config[i].clone(),
            })
            .collect()
    }

    #[test]
    fn lists_merge_in_structured_merge_diff_v4_4_2s_order() {
        // Each computed by smd v4.4.2 (Kubernetes 1.32), tests/smd-oracle built against it.
        assert_eq!(order(&["d", "b", "a"], &["a", "d"]), ["b", "a", "d"]);
        assert_eq!(
            order(&["a", "b", "c", "d"], &["x", "d", "y", "b", "z"]),
            ["a", "c", "x", "d", "y", "b", "z"]
        );
        assert_eq!(
            order(&["a", "b", "c"], &["c", "new", "a"]),
            ["b", "c", "new", "a"]
        );
        assert_eq!(
            order(&["a", "b", "c", "d", "e"], &["e", "c", "a"]),
            ["b", "d", "e", "c", "a"]
        );
        assert_eq!(
            order(&["a", "b", "c", "d"], &["a", "aprime", "c", "cprime"]),
            ["a", "b", "aprime", "c", "d", "cprime"]
        );
        assert_eq!(order(&[], &["b", "a"]), ["b", "a"]);
        assert_eq!(order(&["b", "a"], &[]), ["b", "a"]);
        // A live duplicate the configuration does not have stays twice; one it has is merged
        // into neither copy.
        assert_eq!(order(&["a", "x", "a"], &["b"]), ["a", "x", "a", "b"]);
        let live = ["a".to_string(), "a".to_string()];
        assert_eq!(
            merged_order(&live, &["a".to_string()]),
            [Step::Config(0, None)]
        );
    }

    #[test]
    fn a_keyed_list_merges_its_shared_items_in_the_configurations_order() {
        let mut s = State::new();
        let items = |names: &[&str]| json!({"list": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()});
        s.apply("bob", items(&["a", "b", "c"]), false).unwrap();
        s.apply(
            "alice",
            json!({"list": [{"name": "c", "value": ["v1"]}, {"name": "d"}, {"name": "a"}]}),
            false,
        )
        .unwrap();
        assert_eq!(
            s.object,
            json!({"list": [{"name": "b"}, {"name": "c", "value": ["v1"]}, {"name": "d"},
                            {"name": "a"}]})
        );
    }

    #[test]
    fn a_leaf_conflict_is_refused_and_forced() {
        let mut s = State::new();
        s.apply("default", json!({"numeric": 1, "string": "string"}), false)
            .unwrap();
        s.update(
            "controller",
            json!({"numeric": 1, "string": "controller string", "bool": true}),
        );
        let user = json!({"numeric": 2, "string": "user string"});
        assert_eq!(
            conflicted(s.apply("default", user, false)),
            [r#""controller" using v1 .string"#]
        );
        assert_eq!(s.object["string"], "controller string", "nothing changed");
        s.apply(
            "default",
            json!({"numeric": 2, "string": "user string"}),
            true,
        )
        .unwrap();
        assert_eq!(
            s.object,
            json!({"numeric": 2, "string": "user string", "bool": true})
        );
        assert_eq!(s.owns("default"), r#"{"f:numeric":{},"f:string":{}}"#);
        assert_eq!(s.owns("controller"), r#"{"f:bool":{}}"#);
    }

    #[test]
    fn the_sole_owner_removes_what_it_no_longer_applies_and_an_updaters_field_stays() {
        let mut s = State::new();
        s.apply(
            "default",
            json!({"numeric": 1, "string": "s", "bool": false}),
            false,
        )
        .unwrap();
        s.apply("default", json!({"string": "new string"}), false)
            .unwrap();
        assert_eq!(s.object, json!({"string": "new string"}));
        let mut s = State::new();
        s.apply("default", json!({"numeric": 2}), false).unwrap();
        s.update("controller", json!({"numeric": 1}));
        s.apply("default", json!({}), false).unwrap();
        assert_eq!(s.object, json!({"numeric": 1}));
        assert_eq!(s.owns("default"), "");
        assert_eq!(s.owns("controller"), r#"{"f:numeric":{}}"#);
    }

    #[test]
    fn sets_keep_the_live_items_places_and_a_reorder_is_not_ownership() {
        let mut s = State::new();
        s.apply("default", json!({"set": ["a", "c"]}), false)
            .unwrap();
        s.update("controller", json!({"set": ["a", "b", "c", "d"]}));
        s.apply(
            "default",
            json!({"set": ["a", "aprime", "c", "cprime"]}),
            false,
        )
        .unwrap();
        assert_eq!(
            s.object["set"],
            json!(["a", "b", "aprime", "c", "d", "cprime"])
        );
        assert_eq!(
            s.owns("default"),
            r#"{"f:set":{"v:\"a\"":{},"v:\"aprime\"":{},"v:\"c\"":{},"v:\"cprime\"":{}}}"#
        );
        assert_eq!(
            s.owns("controller"),
            r#"{"f:set":{"v:\"b\"":{},"v:\"d\"":{}}}"#
        );

        let mut s = State::new();
        s.apply("default", json!({"set": ["a", "b", "c", "d"]}), false)
            .unwrap();
        s.update("controller", json!({"set": ["a", "d", "c", "b"]}));
        s.apply("default", json!({"set": ["a", "b", "c", "d"]}), false)
            .unwrap();
        assert_eq!(s.object["set"], json!(["a", "b", "c", "d"]));
        assert_eq!(s.owns("controller"), "");
    }

    #[test]
    fn appliers_share_equal_values_conflict_on_others_and_keep_each_others_items() {
        let mut s = State::new();
        s.apply("one", json!({"list": [{"name": "a", "value": 0}]}), false)
            .unwrap();
        s.apply("two", json!({"list": [{"name": "a", "value": 0}]}), false)
            .unwrap();
        assert_eq!(s.owns("one"), s.owns("two"));
        assert_eq!(
            conflicted(s.apply("two", json!({"list": [{"name": "a", "value": 1}]}), false)),
            [r#""one" .list[name="a"].value"#]
        );

        let mut s = State::new();
        let items = |names: &[&str]| json!({"list": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()});
        s.apply("one", items(&["a", "b", "c"]), false).unwrap();
        s.apply("two", items(&["c", "d"]), false).unwrap();
        s.apply("one", items(&["a"]), false).unwrap();
        assert_eq!(s.object, items(&["a", "c", "d"]));
        assert_eq!(
            s.owns("one"),
            r#"{"f:list":{"k:{\"name\":\"a\"}":{".":{},"f:name":{}}}}"#
        );
    }

    #[test]
    fn an_atomic_map_conflicts_whole_and_a_defaulted_key_names_one_item() {
        let mut s = State::new();
        s.apply("one", json!({"atomicMap": {"field1": "a"}}), false)
            .unwrap();
        assert_eq!(
            conflicted(s.apply("two", json!({"atomicMap": {"field2": "b"}}), false)),
            [r#""one" .atomicMap"#]
        );
        s.apply("two", json!({"atomicMap": {"field2": "b"}}), true)
            .unwrap();
        assert_eq!(s.object, json!({"atomicMap": {"field2": "b"}}));
        assert_eq!(s.owns("one"), "");

        let mut s = State::new();
        s.apply(
            "one",
            json!({"ports": [{"port": 80, "protocol": "TCP", "name": "foo"}]}),
            false,
        )
        .unwrap();
        let bar = json!({"ports": [{"port": 80, "name": "bar"}]});
        assert_eq!(
            conflicted(s.apply("two", bar, false)),
            [r#""one" .ports[port=80,protocol="TCP"].name"#]
        );
    }

    #[test]
    fn an_item_goes_with_an_updaters_field_inside_it() {
        let mut s = State::new();
        s.apply(
            "one",
            json!({"list": [{"name": "a"}, {"name": "b", "value": ["c"]}]}),
            false,
        )
        .unwrap();
        s.apply(
            "two",
            json!({"list": [{"name": "a", "value": ["b"]}]}),
            false,
        )
        .unwrap();
        let mut updated = s.object.clone();
        updated["list"][1]["value"] = json!(["c", "d"]);
        s.update("controller", updated);
        s.apply("one", json!({"list": [{"name": "a"}]}), false)
            .unwrap();
        assert_eq!(s.object, json!({"list": [{"name": "a", "value": ["b"]}]}));
        assert_eq!(s.owns("controller"), "", "its field went with the item");
    }
}
