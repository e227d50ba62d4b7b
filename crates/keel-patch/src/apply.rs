//! Server-side apply over JSON objects (structured-merge-diff's `Apply`,
//! docs/server-side-apply.md §4 and §5): a manager's configuration merged into the live object
//! as the kind's schema says, the fields it applied before and no longer does removed unless
//! another manager owns them, conflicts with other owners found, and `managedFields`
//! brought up to date.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::fieldpath::{
    FieldSetError, PathElement, Set, atomic, changed_fields, item_key, to_field_set,
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
    let last = entries
        .iter()
        .find(|e| e.is(writer))
        .map(|e| e.fields.difference(&applied))
        .unwrap_or_default();
    // A field stays while anything below it is owned (structured-merge-diff's named fields
    // are members); a list item or set value only while it is owned itself.
    let mut gone = Set::new();
    if !last.is_empty() {
        let mut kept = applied.clone();
        for e in entries.iter().filter(|e| !e.is(writer)) {
            kept.union_with(&e.fields);
        }
        for path in last.paths() {
            let field = matches!(path.0.last(), Some(PathElement::Field(_)));
            let owned = kept.has(&path.0) || (field && kept.has_below(&path.0));
            if !owned {
                gone.insert(&path.0);
            }
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
/// maps merge key by key; keyed lists and sets merge item by item, the items both have in the
/// configuration's order in the places they held, the live object's own items where they
/// were, a new item before the next item of the configuration the live list has (or last).
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
        (Some(Value::Array(l)), Value::Array(c)) => {
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
            // Identities as text: equal values print alike (maps print in key order).
            let config_ids: Vec<String> = c.iter().map(|v| identity(v).to_string()).collect();
            let live_ids: Vec<String> = l.iter().map(|v| identity(v).to_string()).collect();
            let mut live_at: HashMap<&str, usize> = HashMap::with_capacity(l.len());
            for (j, id) in live_ids.iter().enumerate() {
                live_at.entry(id.as_str()).or_insert(j);
            }
            let in_config: HashSet<&str> = config_ids.iter().map(String::as_str).collect();
            let item = |fields: &mut Vec<String>, i: usize| {
                let before = live_at.get(config_ids[i].as_str()).map(|j| &l[*j]);
                merge(before, &c[i], schema, fields)
            };
            // A new item goes before the next configuration item the live list has, else
            // last; those sharing a place keep the configuration's order.
            let mut next_shared: Vec<Option<usize>> = vec![None; c.len()];
            for i in (0..c.len().saturating_sub(1)).rev() {
                next_shared[i] = if live_at.contains_key(config_ids[i + 1].as_str()) {
                    Some(i + 1)
                } else {
                    next_shared[i + 1]
                };
            }
            let mut before: HashMap<usize, Vec<usize>> = HashMap::new();
            let mut last: Vec<usize> = Vec::new();
            for (i, id) in config_ids.iter().enumerate() {
                if live_at.contains_key(id.as_str()) {
                    continue;
                }
                match next_shared[i] {
                    Some(j) => before.entry(j).or_default().push(i),
                    None => last.push(i),
                }
            }
            // The live list's slots: its own items stay, the shared ones take the
            // configuration's order (a live duplicate of a shared item goes).
            let mut shared = (0..c.len()).filter(|i| live_at.contains_key(config_ids[*i].as_str()));
            let mut out: Vec<Value> = Vec::with_capacity(l.len() + c.len());
            for (j, id) in live_ids.iter().enumerate() {
                if !in_config.contains(id.as_str()) {
                    out.push(l[j].clone());
                    continue;
                }
                let Some(i) = shared.next() else { continue };
                for new in before.remove(&i).unwrap_or_default() {
                    out.push(item(fields, new));
                }
                out.push(item(fields, i));
            }
            for new in last {
                out.push(item(fields, new));
            }
            Value::Array(out)
        }
        _ => config.clone(),
    }
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
        }
    }
}

/// Removes every path of `gone` from `obj` in one walk: a field, a keyed item with all it
/// holds, a set's value.
fn remove_all(obj: &mut Value, gone: &Set, schema: &dyn MergeSchema, fields: &mut Vec<String>) {
    match obj {
        Value::Object(m) => remove_fields(m, gone, schema, fields),
        Value::Array(items) => {
            let owned = fields.clone();
            let names: Vec<&str> = owned.iter().map(String::as_str).collect();
            let strategy = schema.list_strategy(&names);
            let id_of = |item: &Value| -> Option<PathElement> {
                match &strategy {
                    ListStrategy::Replace => None,
                    ListStrategy::Set => Some(PathElement::Value(item.clone())),
                    ListStrategy::MergeByKeys(keys) => {
                        item_key(item, keys, schema, &names).map(PathElement::key)
                    }
                }
            };
            items.retain(|item| id_of(item).is_none_or(|id| !gone.members().contains(&id)));
            if gone.children().is_empty() {
                return;
            }
            for item in items.iter_mut() {
                if let Some(below) = id_of(item).and_then(|id| gone.children().get(&id)) {
                    remove_all(item, below, schema, fields);
                }
            }
        }
        _ => {}
    }
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

    /// A sequence of applies and updates over one object, as SMD's fixtures run them.
    struct State {
        object: Value,
        entries: Vec<Entry>,
    }

    impl State {
        fn new() -> State {
            State {
                object: json!({}),
                entries: Vec::new(),
            }
        }

        fn apply(&mut self, manager: &str, config: Value, force: bool) -> Result<(), ApplyError> {
            let w = writer(manager, Operation::Apply);
            let a = apply(
                self.object.as_object().unwrap(),
                &config,
                &Fixture,
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
            let change = changed(&self.object, &new, &Fixture).unwrap();
            let before = to_field_set(&self.object, &Fixture).unwrap();
            let after = to_field_set(&new, &Fixture).unwrap();
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
