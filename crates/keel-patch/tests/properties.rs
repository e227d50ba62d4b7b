//! Properties of the patch builders over random documents: a two-way patch turns its original
//! into its modified document; a three-way patch makes the live object what the file says
//! while keeping what only the live object has; merge-patch diffs round-trip.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use keel_patch::{
    BuiltinSchema, ListStrategy, MergeSchema, apply_merge_patch, apply_strategic_merge_patch,
    create_three_way_json_merge_patch, create_three_way_merge_patch,
    create_two_way_json_merge_patch, create_two_way_merge_patch,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn pod_schema() -> BuiltinSchema {
    BuiltinSchema::for_kind("v1", "Pod").unwrap()
}

// ---------------------------------------------------------------------------------------
// Pod-like documents: keyed lists with unique keys, sets, plain maps, scalars.

fn small_map(keys: &'static [&'static str]) -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(
        prop::sample::select(keys).prop_map(str::to_owned),
        prop::sample::select(&["1", "2", "x"][..]).prop_map(str::to_owned),
        0..3,
    )
}

/// A list of the map's entries in random order: unique keys, any order.
fn shuffled<T: Clone + std::fmt::Debug>(items: Vec<T>) -> impl Strategy<Value = Vec<T>> {
    Just(items).prop_shuffle()
}

fn env() -> impl Strategy<Value = Value> {
    small_map(&["A", "B", "C", "D"])
        .prop_flat_map(|m| shuffled(m.into_iter().collect()))
        .prop_map(|entries| {
            Value::Array(
                entries
                    .into_iter()
                    .map(|(name, value)| json!({"name": name, "value": value}))
                    .collect(),
            )
        })
}

fn ports() -> impl Strategy<Value = Value> {
    let port = (
        prop::sample::select(&[53u16, 80, 443][..]),
        prop::sample::select(&["TCP", "UDP"][..]),
    );
    prop::collection::btree_map(port, any::<bool>(), 0..4)
        .prop_flat_map(|m| shuffled(m.into_iter().collect()))
        .prop_map(|ports| {
            Value::Array(
                ports
                    .into_iter()
                    .map(|((port, protocol), spelled_out)| {
                        if protocol == "TCP" && !spelled_out {
                            json!({"containerPort": port})
                        } else {
                            json!({"containerPort": port, "protocol": protocol})
                        }
                    })
                    .collect(),
            )
        })
}

fn container(name: String) -> impl Strategy<Value = Value> {
    (
        prop::sample::select(&["app:1", "app:2", "busybox"][..]),
        prop::option::of(env()),
        prop::option::of(ports()),
        prop::option::of(prop::collection::vec(
            prop::sample::select(&["-v", "-q", "run"][..]),
            0..3,
        )),
    )
        .prop_map(move |(image, env, ports, args)| {
            let mut c = json!({"name": name.clone(), "image": image});
            if let Some(env) = env {
                c["env"] = env;
            }
            if let Some(ports) = ports {
                c["ports"] = ports;
            }
            if let Some(args) = args {
                c["args"] = json!(args);
            }
            c
        })
}

fn containers(names: &'static [&'static str]) -> impl Strategy<Value = Vec<Value>> {
    prop::sample::subsequence(names, 0..=names.len())
        .prop_flat_map(shuffled)
        .prop_flat_map(|names| {
            names
                .into_iter()
                .map(|n| container(n.to_owned()))
                .collect::<Vec<_>>()
        })
}

fn volumes() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(
        prop::sample::select(&["conf", "data", "tmp"][..]).prop_map(str::to_owned),
        0..3u8,
        0..3,
    )
    .prop_flat_map(|m| shuffled(m.into_iter().collect()))
    .prop_map(|volumes| {
        Value::Array(
            volumes
                .into_iter()
                .map(|(name, source)| match source {
                    0 => json!({"name": name, "emptyDir": {}}),
                    1 => json!({"name": name, "configMap": {"name": "c"}}),
                    _ => json!({"name": name, "hostPath": {"path": "/p"}}),
                })
                .collect(),
        )
    })
}

fn finalizers() -> impl Strategy<Value = Value> {
    prop::sample::subsequence(&["a.io", "b.io", "c.io"][..], 0..=3)
        .prop_flat_map(shuffled)
        .prop_map(|f| json!(f))
}

fn map_value(m: BTreeMap<String, String>) -> Value {
    Value::Object(m.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
}

fn pod() -> impl Strategy<Value = Value> {
    (
        small_map(&["app", "tier", "team"]),
        prop::option::of(small_map(&["note", "owner"])),
        prop::option::of(finalizers()),
        containers(&["app", "log", "proxy"]),
        prop::option::of(small_map(&["disk", "zone"])),
        prop::option::of(prop::sample::select(&["Always", "Never"][..])),
        prop::option::of(volumes()),
    )
        .prop_map(
            |(labels, annotations, finalizers, containers, selector, restart, volumes)| {
                let mut metadata = json!({"name": "p", "labels": map_value(labels)});
                if let Some(a) = annotations {
                    metadata["annotations"] = map_value(a);
                }
                if let Some(f) = finalizers {
                    metadata["finalizers"] = f;
                }
                let mut spec = json!({"containers": containers});
                if let Some(s) = selector {
                    spec["nodeSelector"] = map_value(s);
                }
                if let Some(r) = restart {
                    spec["restartPolicy"] = json!(r);
                }
                if let Some(v) = volumes {
                    spec["volumes"] = v;
                }
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
            },
        )
}

/// What other writers add to a live object: fields, elements and set members that neither
/// the last-applied configuration nor the new file has (their names start with `x-`), plus
/// a change to a field the configuration owns.
#[derive(Debug, Clone)]
struct OtherWriters {
    status: Option<Value>,
    label: Option<String>,
    annotation: Option<String>,
    finalizer: bool,
    sidecar: Option<Value>,
    env_everywhere: bool,
    port_everywhere: bool,
    retag_first_image: bool,
}

fn other_writers() -> impl Strategy<Value = OtherWriters> {
    (
        prop::option::of(Just(json!({"phase": "Running", "podIP": "10.0.0.1"}))),
        prop::option::of(Just("x-controller".to_owned())),
        prop::option::of(Just("x-revision".to_owned())),
        any::<bool>(),
        prop::option::of(container("x-sidecar".to_owned())),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(status, label, annotation, finalizer, sidecar, env, port, retag)| OtherWriters {
                status,
                label,
                annotation,
                finalizer,
                sidecar,
                env_everywhere: env,
                port_everywhere: port,
                retag_first_image: retag,
            },
        )
}

fn object_mut<'v>(value: &'v mut Value, key: &str) -> &'v mut Map<String, Value> {
    let parent = value.as_object_mut().unwrap();
    let child = parent.entry(key.to_owned()).or_insert_with(|| json!({}));
    if !child.is_object() {
        *child = json!({});
    }
    child.as_object_mut().unwrap()
}

fn list_mut<'v>(value: &'v mut Value, key: &str) -> &'v mut Vec<Value> {
    let parent = value.as_object_mut().unwrap();
    let child = parent.entry(key.to_owned()).or_insert_with(|| json!([]));
    child.as_array_mut().unwrap()
}

fn live_from(last: &Value, others: &OtherWriters) -> Value {
    let mut live = last.clone();
    if let Some(status) = &others.status {
        live["status"] = status.clone();
    }
    if let Some(label) = &others.label {
        object_mut(&mut live["metadata"], "labels").insert(label.clone(), json!("x"));
    }
    if let Some(annotation) = &others.annotation {
        object_mut(&mut live["metadata"], "annotations").insert(annotation.clone(), json!("7"));
    }
    if others.finalizer {
        list_mut(&mut live["metadata"], "finalizers").push(json!("x-finalizer.io"));
    }
    let containers = list_mut(&mut live["spec"], "containers");
    for (i, c) in containers.iter_mut().enumerate() {
        if others.env_everywhere {
            list_mut(c, "env").push(json!({"name": "x-INJECTED", "value": "1"}));
        }
        if others.port_everywhere {
            list_mut(c, "ports").push(json!({"containerPort": 9090, "protocol": "SCTP"}));
        }
        if others.retag_first_image && i == 0 {
            c["image"] = json!("app:hotfix");
        }
    }
    if let Some(sidecar) = &others.sidecar {
        containers.push(sidecar.clone());
    }
    live
}

// ---------------------------------------------------------------------------------------
// Checkers.

fn strategy_at(path: &[String]) -> ListStrategy {
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    pod_schema().list_strategy(&path)
}

fn retains_keys(path: &[String]) -> bool {
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    pod_schema().retain_keys(&path)
}

/// The identity of an element of a keyed list, with the Pod schema's defaults.
fn key_of(element: &Value, keys: &[String]) -> Vec<Value> {
    keys.iter()
        .map(|k| match (k.as_str(), element.get(k)) {
            (_, Some(v)) if !v.is_null() => v.clone(),
            ("protocol", _) => json!("TCP"),
            _ => Value::Null,
        })
        .collect()
}

fn find<'v>(list: &'v [Value], key: &[Value], keys: &[String]) -> Option<(usize, &'v Value)> {
    list.iter()
        .enumerate()
        .find(|(_, e)| key_of(e, keys) == key)
}

/// `result` has every field `new` sets, with `new`'s value, lists in `new`'s order.
fn sets_everything(result: &Value, new: &Value, path: &mut Vec<String>) -> Result<(), String> {
    match (new, result) {
        (Value::Object(new), Value::Object(result)) => {
            for (k, nv) in new {
                let rv = result
                    .get(k)
                    .ok_or_else(|| format!("{path:?}.{k} missing"))?;
                path.push(k.clone());
                sets_everything(rv, nv, path)?;
                path.pop();
            }
            Ok(())
        }
        (Value::Array(new), Value::Array(result)) => {
            let mut positions = Vec::new();
            match strategy_at(path) {
                ListStrategy::Replace => {
                    return if new == result {
                        Ok(())
                    } else {
                        Err(format!("{path:?}: {result:?} != {new:?}"))
                    };
                }
                ListStrategy::Set => {
                    for n in new {
                        let at = result
                            .iter()
                            .position(|r| r == n)
                            .ok_or_else(|| format!("{path:?}: {n} missing"))?;
                        positions.push(at);
                    }
                }
                ListStrategy::MergeByKeys(keys) => {
                    for n in new {
                        let (at, r) = find(result, &key_of(n, &keys), &keys)
                            .ok_or_else(|| format!("{path:?}: element {n} missing"))?;
                        sets_everything(r, n, path)?;
                        positions.push(at);
                    }
                }
            }
            if positions.windows(2).all(|w| w[0] < w[1]) {
                Ok(())
            } else {
                Err(format!("{path:?}: order of {new:?} not kept in {result:?}"))
            }
        }
        _ if new == result => Ok(()),
        _ => Err(format!("{path:?}: {result} != {new}")),
    }
}

/// `result` keeps every field, element and member only `live` has (neither `last` nor `new`),
/// except inside unions, which `$retainKeys` clears by design, and under what `new` deleted.
fn keeps_live_only(
    result: &Value,
    live: &Value,
    last: &Value,
    new: &Value,
    path: &mut Vec<String>,
) -> Result<(), String> {
    let empty = json!({});
    match (live, new) {
        (Value::Object(live), Value::Object(new_map)) => {
            for (k, lv) in live {
                let last_v = last.get(k);
                let rv = result.get(k);
                match new_map.get(k) {
                    None if last_v.is_none() && rv != Some(lv) => {
                        return Err(format!("{path:?}.{k}: lost {lv}, got {rv:?}"));
                    }
                    None => {}
                    Some(nv) => {
                        path.push(k.clone());
                        if let Some(rv) = rv {
                            keeps_live_only(rv, lv, last_v.unwrap_or(&empty), nv, path)?;
                        }
                        path.pop();
                    }
                }
            }
            Ok(())
        }
        (Value::Array(live), Value::Array(new)) => {
            let last: &[Value] = last.as_array().map(Vec::as_slice).unwrap_or_default();
            let result: &[Value] = result.as_array().map(Vec::as_slice).unwrap_or_default();
            match strategy_at(path) {
                ListStrategy::Replace => Ok(()),
                ListStrategy::Set => {
                    for l in live {
                        if !last.contains(l) && !new.contains(l) && !result.contains(l) {
                            return Err(format!("{path:?}: lost member {l}"));
                        }
                    }
                    Ok(())
                }
                ListStrategy::MergeByKeys(keys) => {
                    for l in live {
                        let key = key_of(l, &keys);
                        let in_result = find(result, &key, &keys).map(|(_, r)| r);
                        match (find(last, &key, &keys), find(new, &key, &keys)) {
                            (None, None) if in_result != Some(l) => {
                                return Err(format!("{path:?}: lost element {l}"));
                            }
                            (None, None) => {}
                            (last_element, Some((_, n))) if !retains_keys(path) => {
                                let r = in_result.ok_or_else(|| format!("{path:?}: lost {n}"))?;
                                let last_element = last_element.map_or(&empty, |(_, e)| e);
                                keeps_live_only(r, l, last_element, n, path)?;
                            }
                            _ => {}
                        }
                    }
                    Ok(())
                }
            }
        }
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------
// Arbitrary documents, for the fallbacks: lists named `keyed` merge by `name`, lists named
// `set` are sets, all others replace; elements may lack keys, repeat them, be of any type.

struct Arbitrary;

impl MergeSchema for Arbitrary {
    fn list_strategy(&self, path: &[&str]) -> ListStrategy {
        match path.last() {
            Some(&"keyed") => ListStrategy::MergeByKeys(vec!["name".into()]),
            Some(&"set") => ListStrategy::Set,
            _ => ListStrategy::Replace,
        }
    }

    fn retain_keys(&self, path: &[&str]) -> bool {
        path.last() == Some(&"union")
    }
}

/// JSON without `null` (which no patch can set) and without `$` keys (which are directives).
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(Value::Bool),
        (0..4i64).prop_map(|n| json!(n)),
        prop::sample::select(&["a", "b", ""][..]).prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(4, 48, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(&["name", "keyed", "set", "union", "v"][..])
                    .prop_map(str::to_owned),
                inner,
                0..4,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn json_object() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(
        prop::sample::select(&["name", "keyed", "set", "union", "v"][..]).prop_map(str::to_owned),
        json_value(),
        0..4,
    )
    .prop_map(|m| Value::Object(m.into_iter().collect()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn two_way_patch_turns_original_into_modified(a in pod(), b in pod()) {
        let schema = pod_schema();
        let patch = create_two_way_merge_patch(&a, &b, &schema).unwrap();
        let applied = apply_strategic_merge_patch(&a, &patch, &schema).unwrap();
        prop_assert_eq!(&applied, &b, "patch {}", patch);
        // The patch is idempotent: applying it again changes nothing.
        let again = apply_strategic_merge_patch(&applied, &patch, &schema).unwrap();
        prop_assert_eq!(again, b);
    }

    #[test]
    fn two_way_patch_of_identical_documents_is_empty(a in pod()) {
        let patch = create_two_way_merge_patch(&a, &a, &pod_schema()).unwrap();
        prop_assert_eq!(patch, json!({}));
    }

    #[test]
    fn three_way_patch_sets_the_file_and_keeps_what_others_added(
        last in pod(),
        new in pod(),
        others in other_writers(),
    ) {
        let schema = pod_schema();
        let live = live_from(&last, &others);
        let patch = create_three_way_merge_patch(Some(&last), &new, &live, &schema, true).unwrap();
        let result = apply_strategic_merge_patch(&live, &patch, &schema).unwrap();
        if let Err(e) = sets_everything(&result, &new, &mut Vec::new()) {
            return Err(TestCaseError::fail(format!("{e}\npatch {patch}\nresult {result}")));
        }
        if let Err(e) = keeps_live_only(&result, &live, &last, &new, &mut Vec::new()) {
            return Err(TestCaseError::fail(format!("{e}\npatch {patch}\nresult {result}")));
        }
        // What the last apply set and the file no longer does is gone.
        for field in ["annotations", "finalizers"] {
            if last["metadata"].get(field).is_some() && new["metadata"].get(field).is_none()
                && live["metadata"].get(field) == last["metadata"].get(field)
            {
                prop_assert!(result["metadata"].get(field).is_none(), "{} kept", field);
            }
        }
        // Without overwrite, the same patch or a conflict.
        match create_three_way_merge_patch(Some(&last), &new, &live, &schema, false) {
            Ok(strict) => prop_assert_eq!(strict, patch),
            Err(e) => prop_assert!(matches!(e, keel_patch::PatchError::Conflict { .. }), "{}", e),
        }
    }

    #[test]
    fn three_way_patch_without_other_writers_is_the_two_way_patch(last in pod(), new in pod()) {
        let schema = pod_schema();
        let three = create_three_way_merge_patch(Some(&last), &new, &last, &schema, false).unwrap();
        let two = create_two_way_merge_patch(&last, &new, &schema).unwrap();
        prop_assert_eq!(three, two);
    }

    #[test]
    fn two_way_patch_round_trips_arbitrary_documents(a in json_object(), b in json_object()) {
        let patch = create_two_way_merge_patch(&a, &b, &Arbitrary).unwrap();
        let applied = apply_strategic_merge_patch(&a, &patch, &Arbitrary).unwrap();
        prop_assert_eq!(applied, b, "patch {}", patch);
    }

    #[test]
    fn merge_patch_diff_round_trips(a in json_value(), b in json_value()) {
        let patch = create_two_way_json_merge_patch(&a, &b).unwrap();
        prop_assert_eq!(apply_merge_patch(&a, &patch), b, "patch {}", patch);
    }

    #[test]
    fn three_way_merge_patch_sets_the_file_and_keeps_live_only_fields(
        last in json_object(),
        new in json_object(),
        extra in json_object(),
    ) {
        // Other writers add fields under their own names.
        let mut live = last.clone();
        for (k, v) in extra.as_object().unwrap() {
            live[format!("x-{k}")] = v.clone();
        }
        let patch = create_three_way_json_merge_patch(Some(&last), &new, &live).unwrap();
        let result = apply_merge_patch(&live, &patch);
        for (k, v) in new.as_object().unwrap() {
            prop_assert_eq!(result.get(k), Some(v), "{} in {}", k, result);
        }
        for (k, v) in extra.as_object().unwrap() {
            let k = format!("x-{k}");
            prop_assert_eq!(result.get(&k), Some(v), "{} in {}", k, result);
        }
        for k in last.as_object().unwrap().keys() {
            if new.get(k).is_none() {
                prop_assert!(result.get(k).is_none(), "{} kept in {}", k, result);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Field path sets (server-side apply's managedFields).

mod field_sets {
    use keel_patch::fieldpath::{PathElement, Set};
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn element() -> impl Strategy<Value = PathElement> {
        prop_oneof![
            prop::sample::select(&["spec", "metadata", "labels", "a.b/c", "x"][..])
                .prop_map(|s| PathElement::Field(s.to_string())),
            (0i64..3, prop::sample::select(&["TCP", "UDP"][..])).prop_map(|(port, p)| {
                let Value::Object(m) = json!({"port": port, "protocol": p}) else {
                    unreachable!()
                };
                PathElement::key(m)
            }),
            prop::sample::select(&["a", "b"][..]).prop_map(|v| PathElement::Value(json!(v))),
            (0usize..3).prop_map(PathElement::Index),
        ]
    }

    fn set() -> impl Strategy<Value = Set> {
        prop::collection::vec(prop::collection::vec(element(), 1..4), 0..6).prop_map(|paths| {
            let mut s = Set::new();
            for p in paths {
                s.insert(&p);
            }
            s
        })
    }

    proptest! {
        #[test]
        fn fields_v1_round_trips(s in set()) {
            let text = s.to_fields_v1();
            let back = Set::from_fields_v1(&serde_json::from_str(&text).unwrap()).unwrap();
            prop_assert_eq!(back.paths(), s.paths());
            prop_assert_eq!(back.to_fields_v1(), text);
        }

        #[test]
        fn set_operations_agree_with_their_paths(a in set(), b in set()) {
            let union = a.union(&b);
            for p in a.paths().iter().chain(b.paths().iter()) {
                prop_assert!(union.has(&p.0));
            }
            let only_a = a.difference(&b);
            let both = a.intersection(&b);
            for p in a.paths() {
                prop_assert_eq!(only_a.has(&p.0), !b.has(&p.0));
                prop_assert_eq!(both.has(&p.0), b.has(&p.0));
            }
            prop_assert!(only_a.intersection(&b).is_empty());
            prop_assert_eq!(only_a.union(&both).paths(), a.paths());
        }
    }
}
