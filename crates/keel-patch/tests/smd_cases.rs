//! Where keel's server-side apply differed from Kubernetes', each in its smallest form, with
//! the result Kubernetes 1.32 gives: structured-merge-diff v4.4.2 driven as its field manager
//! drives it (`tests/smd-oracle` built against v4.4.2 computed every expectation here; the
//! differential test `smd_oracle.rs` checks the same against Debian's v4.1.2 at random). The
//! schema is `smd::SMD_SCHEMA`: `settings` a map of structs, `labels` a map of strings,
//! `selector` an atomic map, `tags` a set, `items` keyed by `name`, `spec` a struct of structs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod smd;

use keel_patch::OpenApiSchema;
use serde_json::{Value, json};
use smd::{Keel, Outcome, open_api};

fn keel() -> Keel {
    Keel::new(OpenApiSchema::new(open_api()))
}

fn apply(k: &mut Keel, manager: &str, config: Value) -> Outcome {
    k.run(&json!({"op": "apply", "manager": manager, "object": config, "force": false}))
}

fn update(k: &mut Keel, manager: &str, object: Value) -> Outcome {
    k.run(&json!({"op": "update", "manager": manager, "object": object}))
}

/// The object, and each (manager, operation)'s FieldsV1, after an operation that succeeded.
fn done(o: Outcome) -> (Value, Vec<(String, String)>) {
    match o {
        Outcome::Done { object, fields } => (
            object,
            fields
                .into_iter()
                .map(|((m, op), f)| (format!("{m} {op}"), f))
                .collect(),
        ),
        other => panic!("not done: {other:?}"),
    }
}

fn owners(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(m, f)| (m.to_string(), f.to_string()))
        .collect()
}

#[test]
fn an_applier_owns_a_maps_keys_as_items() {
    let mut k = keel();
    let (_, fields) = done(apply(
        &mut k,
        "alice",
        json!({"settings": {"s1": {"value": "on"}}}),
    ));
    assert_eq!(
        fields,
        owners(&[(
            "alice Apply",
            r#"{"f:settings":{"f:s1":{".":{},"f:value":{}}}}"#
        )])
    );
}

#[test]
fn a_map_item_an_applier_drops_goes_with_an_updaters_field_inside_it() {
    let mut k = keel();
    apply(
        &mut k,
        "alice",
        json!({"mode": "a", "settings": {"s1": {"value": "on"}}}),
    );
    update(
        &mut k,
        "updater",
        json!({"mode": "a", "settings": {"s1": {"value": "on", "priority": 1},
                                         "s2": {"value": "off"}}}),
    );
    let (object, fields) = done(apply(&mut k, "alice", json!({"mode": "a"})));
    assert_eq!(
        object,
        json!({"mode": "a", "settings": {"s2": {"value": "off"}}})
    );
    assert_eq!(
        fields,
        owners(&[
            ("alice Apply", r#"{"f:mode":{}}"#),
            (
                "updater Update",
                r#"{"f:settings":{"f:s2":{".":{},"f:value":{}}}}"#
            ),
        ])
    );
}

#[test]
fn an_update_owns_the_lists_and_structs_it_creates() {
    let mut k = keel();
    let (_, fields) = done(update(&mut k, "u", json!({"tags": ["d"]})));
    assert_eq!(
        fields,
        owners(&[("u Update", r#"{"f:tags":{".":{},"v:\"d\"":{}}}"#)])
    );
    let mut k = keel();
    let (_, fields) = done(update(&mut k, "u", json!({"items": [{"name": "a"}]})));
    assert_eq!(
        fields,
        owners(&[(
            "u Update",
            r#"{"f:items":{".":{},"k:{\"name\":\"a\"}":{".":{},"f:name":{}}}}"#
        )])
    );
    // smd's Compare adds every container that is new, a struct too: DESIGN.md's "An Update
    // entry owns the structs it creates" is Kubernetes' rule for unstructured objects.
    let mut k = keel();
    let (_, fields) = done(update(&mut k, "u", json!({"spec": {"paused": true}})));
    assert_eq!(
        fields,
        owners(&[("u Update", r#"{"f:spec":{".":{},"f:paused":{}}}"#)])
    );
}

#[test]
fn removal_by_apply_leaves_no_empty_container() {
    let mut k = keel();
    apply(&mut k, "bob", json!({"tags": ["c"]}));
    let (object, _) = done(apply(&mut k, "bob", json!({"selector": {"s2": "y"}})));
    assert_eq!(object, json!({"selector": {"s2": "y"}}));
    // Structs go with the last field applied below them.
    let mut k = keel();
    apply(&mut k, "bob", json!({"spec": {"strategy": {"type": "R"}}}));
    let (object, _) = done(apply(&mut k, "bob", json!({"mode": "a"})));
    assert_eq!(object, json!({"mode": "a"}));
    // An empty struct in a map is an item like any other.
    let mut k = keel();
    apply(&mut k, "bob", json!({"settings": {"s3": {}}}));
    let (object, fields) = done(apply(&mut k, "bob", json!({})));
    assert_eq!((object, fields), (json!({}), vec![]));
}

#[test]
fn an_update_that_empties_a_map_does_not_own_it() {
    let mut k = keel();
    apply(&mut k, "alice", json!({"labels": {"k1": "v1"}}));
    let (object, fields) = done(update(&mut k, "updater", json!({"labels": {}})));
    assert_eq!((object, fields), (json!({"labels": {}}), vec![]));
}

#[test]
fn before_first_apply_owns_what_creating_the_object_would() {
    let mut k = keel();
    k.run(&json!({"op": "untracked", "object": {
        "mode": "x", "labels": {"a": "b"}, "tags": ["q"],
        "settings": {"s1": {"value": "v"}}, "items": [{"name": "a", "flags": ["f"]}]}}));
    let (_, fields) = done(apply(&mut k, "alice", json!({"spec": {"paused": true}})));
    assert_eq!(
        fields,
        owners(&[
            ("alice Apply", r#"{"f:spec":{"f:paused":{}}}"#),
            (
                "before-first-apply Update",
                r#"{"f:items":{".":{},"k:{\"name\":\"a\"}":{".":{},"f:flags":{".":{},"v:\"f\"":{}},"f:name":{}}},"f:labels":{".":{},"f:a":{}},"f:mode":{},"f:settings":{".":{},"f:s1":{".":{},"f:value":{}}},"f:tags":{".":{},"v:\"q\"":{}}}"#
            ),
        ])
    );
    // And it conflicts where the apply changes what it owns.
    let mut k = keel();
    k.run(&json!({"op": "untracked", "object": {"mode": "x"}}));
    assert_eq!(
        apply(&mut k, "alice", json!({"mode": "y"})),
        Outcome::Conflicts(vec![(
            "before-first-apply".into(),
            "Update".into(),
            ".mode".into()
        )])
    );
}

#[test]
fn sets_and_keyed_lists_merge_in_kubernetes_order() {
    let mut k = keel();
    apply(&mut k, "bob", json!({"tags": ["d", "b", "a"]}));
    let (object, _) = done(apply(&mut k, "alice", json!({"tags": ["a", "d"]})));
    assert_eq!(object, json!({"tags": ["b", "a", "d"]}));
    let mut k = keel();
    apply(
        &mut k,
        "bob",
        json!({"ports": [{"port": 80}, {"port": 443}, {"port": 80, "protocol": "UDP"}]}),
    );
    let (object, _) = done(apply(
        &mut k,
        "alice",
        json!({"ports": [{"port": 80, "protocol": "UDP"}, {"port": 8080},
                          {"port": 80, "protocol": "TCP"}]}),
    ));
    assert_eq!(
        object,
        json!({"ports": [{"port": 443}, {"port": 80, "protocol": "UDP"}, {"port": 8080},
                         {"port": 80, "protocol": "TCP"}]})
    );
}

#[test]
fn a_removal_that_empties_a_map_someone_owns_is_no_conflict_but_a_null() {
    // Kubernetes: no conflict; smd leaves `labels: null`, which a custom resource's validation
    // refuses (422). keel answered 409 on `.labels`, which alice never sent.
    let mut k = keel();
    update(&mut k, "updater", json!({"labels": {"k0": "x"}}));
    apply(&mut k, "alice", json!({"labels": {"k1": "v1"}}));
    update(&mut k, "updater", json!({"labels": {"k1": "v1"}}));
    assert_eq!(
        apply(&mut k, "alice", json!({})),
        Outcome::Invalid(vec![".labels".into()])
    );
}
