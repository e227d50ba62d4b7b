//! Kubernetes' own strategic merge patch cases (apimachinery `strategicpatch/patch_test.go`),
//! restated on its test type `MergeItem`: each checks the two-way patch, that it turns the
//! original into the modified document, the three-way patch against a live document, that it
//! gives the expected result, and that the cases Kubernetes calls conflicts are refused unless
//! overwriting. Where keel deliberately differs, the case says so.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use keel_patch::{
    ListStrategy, MergeSchema, PatchError, apply_strategic_merge_patch,
    create_three_way_merge_patch, create_two_way_merge_patch,
};
use serde_json::{Value, json};

/// Kubernetes' test type `MergeItem`, by field name: `mergingList`, `mergeItemPtr` and
/// `retainKeysMergingList` merge by `name`, `mergingIntList` is a set, `retainKeysMap` and
/// `retainKeysMergingList` are unions, everything else replaces.
struct MergeItem;

impl MergeSchema for MergeItem {
    fn list_strategy(&self, path: &[&str]) -> ListStrategy {
        match path.last() {
            Some(&("mergingList" | "mergeItemPtr" | "retainKeysMergingList")) => {
                ListStrategy::MergeByKeys(vec!["name".into()])
            }
            Some(&"mergingIntList") => ListStrategy::Set,
            _ => ListStrategy::Replace,
        }
    }

    fn retain_keys(&self, path: &[&str]) -> bool {
        matches!(
            path.last(),
            Some(&("retainKeysMap" | "retainKeysMergingList"))
        )
    }
}

fn apply(doc: &Value, patch: &Value) -> Value {
    apply_strategic_merge_patch(doc, patch, &MergeItem)
        .unwrap_or_else(|e| panic!("applying {patch} to {doc}: {e}"))
}

/// One row of Kubernetes' table. `two_way_result` is `Value::Null` when it is `modified`.
struct Case {
    name: &'static str,
    original: Value,
    modified: Value,
    current: Value,
    two_way: Value,
    two_way_result: Value,
    three_way: Value,
    result: Value,
}

impl Case {
    fn new(name: &'static str) -> Self {
        Case {
            name,
            original: json!({}),
            modified: json!({}),
            current: json!({}),
            two_way: json!({}),
            two_way_result: Value::Null,
            three_way: json!({}),
            result: json!({}),
        }
    }

    fn check(self) {
        let name = self.name;
        let two_way = create_two_way_merge_patch(&self.original, &self.modified, &MergeItem)
            .unwrap_or_else(|e| panic!("{name}: two-way: {e}"));
        assert_eq!(two_way, self.two_way, "{name}: two-way patch");
        let want = if self.two_way_result.is_null() {
            &self.modified
        } else {
            &self.two_way_result
        };
        assert_eq!(
            &apply(&self.original, &two_way),
            want,
            "{name}: two-way result"
        );

        let strict = create_three_way_merge_patch(
            Some(&self.original),
            &self.modified,
            &self.current,
            &MergeItem,
            false,
        );
        if name.contains("conflict") {
            assert!(
                matches!(strict, Err(PatchError::Conflict { .. })),
                "{name}: expected a conflict, got {strict:?}"
            );
        } else {
            assert_eq!(
                strict.as_ref(),
                Ok(&self.three_way),
                "{name}: three-way patch"
            );
        }
        let forced = create_three_way_merge_patch(
            Some(&self.original),
            &self.modified,
            &self.current,
            &MergeItem,
            true,
        )
        .unwrap_or_else(|e| panic!("{name}: three-way: {e}"));
        assert_eq!(
            forced, self.three_way,
            "{name}: three-way patch (overwrite)"
        );
        assert_eq!(
            apply(&self.current, &forced),
            self.result,
            "{name}: three-way result"
        );
    }
}

#[test]
fn maps_merge_and_null_deletes() {
    Case {
        original: json!({}),
        modified: json!({"name": 1, "value": 1}),
        current: json!({"name": 1, "other": "a"}),
        two_way: json!({"name": 1, "value": 1}),
        three_way: json!({"value": 1}),
        result: json!({"name": 1, "value": 1, "other": "a"}),
        ..Case::new("nil original")
    }
    .check();
    Case {
        original: json!({"name": 1}),
        modified: json!({"name": 1}),
        current: json!({"name": 1}),
        result: json!({"name": 1}),
        ..Case::new("nil patch")
    }
    .check();
    Case {
        original: json!({"name": 1}),
        modified: json!({"name": 1, "value": 1}),
        current: json!({"name": 1, "other": "a"}),
        two_way: json!({"value": 1}),
        three_way: json!({"value": 1}),
        result: json!({"name": 1, "value": 1, "other": "a"}),
        ..Case::new("add field to map")
    }
    .check();
    Case {
        original: json!({"name": 1}),
        modified: json!({"name": 1, "value": 1}),
        current: json!({"name": "a", "other": "a"}),
        two_way: json!({"value": 1}),
        three_way: json!({"name": 1, "value": 1}),
        result: json!({"name": 1, "value": 1, "other": "a"}),
        ..Case::new("add field to map with conflict")
    }
    .check();
    Case {
        original: json!({"name": 1}),
        modified: json!({"value": 1}),
        current: json!({"name": 1, "other": "a"}),
        two_way: json!({"name": null, "value": 1}),
        three_way: json!({"name": null, "value": 1}),
        result: json!({"value": 1, "other": "a"}),
        ..Case::new("add field and delete field from map")
    }
    .check();
    Case {
        original: json!({"name": 1}),
        modified: json!({"value": 1}),
        current: json!({"name": "a", "other": "a"}),
        two_way: json!({"name": null, "value": 1}),
        three_way: json!({"name": null, "value": 1}),
        result: json!({"value": 1, "other": "a"}),
        ..Case::new("add field and delete field from map with conflict")
    }
    .check();
    Case {
        original: json!({"simpleMap": {"key1": 1, "key2": 1}}),
        modified: json!({"simpleMap": {"key1": 1}}),
        current: json!({"simpleMap": {"key1": 1, "key2": 1, "other": "a"}}),
        two_way: json!({"simpleMap": {"key2": null}}),
        three_way: json!({"simpleMap": {"key2": null}}),
        result: json!({"simpleMap": {"key1": 1, "other": "a"}}),
        ..Case::new("delete field from nested map")
    }
    .check();
    Case {
        original: json!({"simpleMap": {"key1": 1, "key2": 1}}),
        modified: json!({"simpleMap": {"key1": 1}}),
        current: json!({"simpleMap": {"key1": "a", "key2": 1, "other": "a"}}),
        two_way: json!({"simpleMap": {"key2": null}}),
        three_way: json!({"simpleMap": {"key1": 1, "key2": null}}),
        result: json!({"simpleMap": {"key1": 1, "other": "a"}}),
        ..Case::new("delete field from nested map with conflict")
    }
    .check();
    Case {
        original: json!({"name": 1, "value": 1}),
        modified: json!({}),
        current: json!({"name": 1, "value": 1, "other": "a"}),
        two_way: json!({"name": null, "value": null}),
        three_way: json!({"name": null, "value": null}),
        result: json!({"other": "a"}),
        ..Case::new("delete all fields from map")
    }
    .check();
    Case {
        original: json!({"name": 1, "value": 1}),
        modified: json!({}),
        current: json!({"name": 1, "value": "a", "other": "a"}),
        two_way: json!({"name": null, "value": null}),
        three_way: json!({"name": null, "value": null}),
        result: json!({"other": "a"}),
        ..Case::new("delete all fields from map with conflict")
    }
    .check();
    Case {
        original: json!({"name": 1, "value": 1}),
        modified: json!({"other": "a"}),
        current: json!({"name": 1, "value": 1, "other": "a"}),
        two_way: json!({"name": null, "value": null, "other": "a"}),
        three_way: json!({"name": null, "value": null}),
        result: json!({"other": "a"}),
        ..Case::new("add field and delete all fields from map")
    }
    .check();
    Case {
        original: json!({"name": 1, "value": 1}),
        modified: json!({"other": "a"}),
        current: json!({"name": 1, "value": 1, "other": "b"}),
        two_way: json!({"name": null, "value": null, "other": "a"}),
        three_way: json!({"name": null, "value": null, "other": "a"}),
        result: json!({"other": "a"}),
        ..Case::new("add field and delete all fields from map with conflict")
    }
    .check();
}

#[test]
fn null_values_in_the_modified_document_delete() {
    Case {
        original: json!({"name": 2}),
        modified: json!({"name": 1, "value": 1, "other": null}),
        current: json!({"name": "a", "other": "a"}),
        two_way: json!({"name": 1, "value": 1, "other": null}),
        two_way_result: json!({"name": 1, "value": 1}),
        three_way: json!({"name": 1, "value": 1, "other": null}),
        result: json!({"name": 1, "value": 1}),
        ..Case::new("defined null values should propagate overwrite current fields (with conflict)")
    }
    .check();
    Case {
        original: json!({"name": "original-name", "value": "original-value"}),
        modified: json!({"name": "modified-name", "value": null}),
        current: json!({"name": "original-name", "value": "original-value", "other": "current-other"}),
        two_way: json!({"name": "modified-name", "value": null}),
        two_way_result: json!({"name": "modified-name"}),
        three_way: json!({"name": "modified-name", "value": null}),
        result: json!({"name": "modified-name", "other": "current-other"}),
        ..Case::new("defined null values should propagate removing original fields")
    }
    .check();
}

#[test]
fn non_merging_lists_replace() {
    Case {
        original: json!({"nonMergingIntList": [1, 2]}),
        modified: json!({"nonMergingIntList": [2, 3]}),
        current: json!({"nonMergingIntList": [1, 2]}),
        two_way: json!({"nonMergingIntList": [2, 3]}),
        three_way: json!({"nonMergingIntList": [2, 3]}),
        result: json!({"nonMergingIntList": [2, 3]}),
        ..Case::new("replace list of scalars")
    }
    .check();
    Case {
        original: json!({"nonMergingIntList": [1, 2]}),
        modified: json!({"nonMergingIntList": [2, 3]}),
        current: json!({"nonMergingIntList": [1, 4]}),
        two_way: json!({"nonMergingIntList": [2, 3]}),
        three_way: json!({"nonMergingIntList": [2, 3]}),
        result: json!({"nonMergingIntList": [2, 3]}),
        ..Case::new("replace list of scalars with conflict")
    }
    .check();
    let original = json!({"mergingList": [
        {"name": 1, "nonMergingList": [{"name": 1}, {"name": 2, "value": 2}]},
        {"name": 2},
    ]});
    let modified = json!({"mergingList": [
        {"name": 1, "nonMergingList": [{"name": 1, "value": 1}]},
        {"name": 2},
    ]});
    let patch = json!({
        "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
        "mergingList": [{"name": 1, "nonMergingList": [{"name": 1, "value": 1}]}],
    });
    Case {
        original: original.clone(),
        modified: modified.clone(),
        current: json!({"mergingList": [
            {"name": 1, "other": "a", "nonMergingList": [{"name": 1}, {"name": 2, "value": 2}]},
            {"name": 2, "other": "b"},
        ]}),
        two_way: patch.clone(),
        three_way: patch.clone(),
        result: json!({"mergingList": [
            {"name": 1, "other": "a", "nonMergingList": [{"name": 1, "value": 1}]},
            {"name": 2, "other": "b"},
        ]}),
        ..Case::new("replace non merging list nested in merging list")
    }
    .check();
    Case {
        original: original.clone(),
        modified: modified.clone(),
        current: json!({"mergingList": [
            {"name": 1, "other": "a", "nonMergingList": [{"name": 1, "value": "c"}]},
            {"name": 2, "other": "b"},
        ]}),
        two_way: patch.clone(),
        three_way: patch.clone(),
        result: json!({"mergingList": [
            {"name": 1, "other": "a", "nonMergingList": [{"name": 1, "value": 1}]},
            {"name": 2, "other": "b"},
        ]}),
        ..Case::new("replace non merging list nested in merging list with value conflict")
    }
    .check();
    Case {
        original,
        modified,
        current: json!({"mergingList": [
            {"name": 1, "other": "a", "nonMergingList": [{"name": 2, "value": 2}]},
            {"name": 2, "other": "b"},
        ]}),
        two_way: patch.clone(),
        three_way: patch,
        result: json!({"mergingList": [
            {"name": 1, "other": "a", "nonMergingList": [{"name": 1, "value": 1}]},
            {"name": 2, "other": "b"},
        ]}),
        ..Case::new("replace non merging list nested in merging list with deletion conflict")
    }
    .check();
}

#[test]
fn merging_lists_of_maps_merge_by_key() {
    Case {
        original: json!({"mergingList": [{"name": 1}, {"name": 2, "value": 2}]}),
        modified: json!({"mergingList": [
            {"name": 4, "value": 4}, {"name": 1}, {"name": 2, "value": 2}, {"name": 3, "value": 3},
        ]}),
        current: json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"}]}),
        two_way: json!({
            "$setElementOrder/mergingList": [{"name": 4}, {"name": 1}, {"name": 2}, {"name": 3}],
            "mergingList": [{"name": 4, "value": 4}, {"name": 3, "value": 3}],
        }),
        three_way: json!({
            "$setElementOrder/mergingList": [{"name": 4}, {"name": 1}, {"name": 2}, {"name": 3}],
            "mergingList": [{"name": 4, "value": 4}, {"name": 3, "value": 3}],
        }),
        result: json!({"mergingList": [
            {"name": 4, "value": 4},
            {"name": 1, "other": "a"},
            {"name": 2, "value": 2, "other": "b"},
            {"name": 3, "value": 3},
        ]}),
        ..Case::new("merge lists of maps")
    }
    .check();
    Case {
        original: json!({"mergingList": [{"name": 1}, {"name": 2, "value": 2}]}),
        modified: json!({"mergingList": [{"name": 1}, {"name": 2, "value": 2}, {"name": 3, "value": 3}]}),
        current: json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 3, "other": "b"}]}),
        two_way: json!({
            "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}, {"name": 3}],
            "mergingList": [{"name": 3, "value": 3}],
        }),
        three_way: json!({
            "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}, {"name": 3}],
            "mergingList": [{"name": 2, "value": 2}, {"name": 3, "value": 3}],
        }),
        result: json!({"mergingList": [
            {"name": 1, "other": "a"},
            {"name": 2, "value": 2, "other": "b"},
            {"name": 3, "value": 3},
        ]}),
        ..Case::new("merge lists of maps with conflict")
    }
    .check();
    let two_way = json!({
        "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
        "mergingList": [{"name": 1, "value": 1}],
    });
    Case {
        original: json!({"mergingList": [{"name": 1}, {"name": 2, "value": 2}]}),
        modified: json!({"mergingList": [{"name": 1, "value": 1}, {"name": 2, "value": 2}]}),
        current: json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"}]}),
        two_way: two_way.clone(),
        three_way: two_way.clone(),
        result: json!({"mergingList": [
            {"name": 1, "value": 1, "other": "a"},
            {"name": 2, "value": 2, "other": "b"},
        ]}),
        ..Case::new("add field to map in merging list")
    }
    .check();
    Case {
        original: json!({"mergingList": [{"name": 1}, {"name": 2, "value": 2}]}),
        modified: json!({"mergingList": [{"name": 1, "value": 1}, {"name": 2, "value": 2}]}),
        current: json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 3, "value": 2, "other": "b"}]}),
        two_way: two_way.clone(),
        three_way: json!({
            "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
            "mergingList": [{"name": 1, "value": 1}, {"name": 2, "value": 2}],
        }),
        result: json!({"mergingList": [
            {"name": 1, "value": 1, "other": "a"},
            {"name": 2, "value": 2},
            {"name": 3, "value": 2, "other": "b"},
        ]}),
        ..Case::new("add field to map in merging list with conflict")
    }
    .check();
    Case {
        original: json!({"mergingList": [{"name": 1}, {"name": 2, "value": 2}]}),
        modified: json!({"mergingList": [{"name": 1, "value": 1}, {"name": 2, "value": 2}]}),
        current: json!({"mergingList": [
            {"name": 1, "value": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"},
        ]}),
        two_way: two_way.clone(),
        three_way: json!({}),
        result: json!({"mergingList": [
            {"name": 1, "value": 1, "other": "a"},
            {"name": 2, "value": 2, "other": "b"},
        ]}),
        ..Case::new("add duplicate field to map in merging list")
    }
    .check();
    Case {
        original: json!({"mergingList": [{"name": 1}, {"name": 2, "value": 2}]}),
        modified: json!({"mergingList": [{"name": 1, "value": 1}, {"name": 2, "value": 2}]}),
        current: json!({"mergingList": [
            {"name": 1, "value": 1, "other": "a"}, {"name": 2, "value": 3, "other": "b"},
        ]}),
        two_way,
        three_way: json!({
            "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
            "mergingList": [{"name": 2, "value": 2}],
        }),
        result: json!({"mergingList": [
            {"name": 1, "value": 1, "other": "a"},
            {"name": 2, "value": 2, "other": "b"},
        ]}),
        ..Case::new("add duplicate field to map in merging list with conflict")
    }
    .check();
    Case {
        original: json!({"mergingList": [{"name": 1, "value": "a"}, {"name": 2}]}),
        modified: json!({"mergingList": [{"name": 1, "value": "a"}, {"name": 2}, {"name": 3}]}),
        current: json!({"mergingList": [{"name": 1, "value": "a", "other": "x"}, {"name": 2}, {"name": 3}]}),
        two_way: json!({
            "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}, {"name": 3}],
            "mergingList": [{"name": 3}],
        }),
        three_way: json!({}),
        result: json!({"mergingList": [{"name": 1, "value": "a", "other": "x"}, {"name": 2}, {"name": 3}]}),
        ..Case::new("add an item that already exists in current object in merging list")
    }
    .check();
    let patch = json!({
        "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
        "mergingList": [{"name": 1, "value": "a"}],
    });
    for (name, current) in [
        (
            "replace map field value in merging list",
            json!({"mergingList": [{"name": 1, "value": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"}]}),
        ),
        (
            "replace map field value in merging list with conflict",
            json!({"mergingList": [{"name": 1, "value": 3, "other": "a"}, {"name": 2, "value": 2, "other": "b"}]}),
        ),
    ] {
        Case {
            original: json!({"mergingList": [{"name": 1, "value": 1}, {"name": 2, "value": 2}]}),
            modified: json!({"mergingList": [{"name": 1, "value": "a"}, {"name": 2, "value": 2}]}),
            current,
            two_way: patch.clone(),
            three_way: patch.clone(),
            result: json!({"mergingList": [
                {"name": 1, "value": "a", "other": "a"},
                {"name": 2, "value": 2, "other": "b"},
            ]}),
            ..Case::new(name)
        }
        .check();
    }
}

#[test]
fn merging_list_elements_are_deleted_by_key() {
    let delete_one = json!({
        "$setElementOrder/mergingList": [{"name": 2}],
        "mergingList": [{"name": 1, "$patch": "delete"}],
    });
    for (name, current) in [
        (
            "delete map from merging list",
            json!({"mergingList": [{"name": 1}, {"name": 2, "other": "b"}]}),
        ),
        (
            "delete map from merging list with conflict",
            json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "other": "b"}]}),
        ),
        (
            "delete missing map from merging list",
            json!({"mergingList": [{"name": 2, "other": "b"}]}),
        ),
    ] {
        Case {
            original: json!({"mergingList": [{"name": 1}, {"name": 2}]}),
            modified: json!({"mergingList": [{"name": 2}]}),
            current,
            two_way: delete_one.clone(),
            three_way: delete_one.clone(),
            result: json!({"mergingList": [{"name": 2, "other": "b"}]}),
            ..Case::new(name)
        }
        .check();
    }
    Case {
        original: json!({"mergingList": [{"name": 1}, {"name": 2}]}),
        modified: json!({"mergingList": [{"name": 2}]}),
        current: json!({"mergingList": [{"name": 3, "other": "a"}]}),
        two_way: delete_one,
        three_way: json!({
            "$setElementOrder/mergingList": [{"name": 2}],
            "mergingList": [{"name": 2}, {"name": 1, "$patch": "delete"}],
        }),
        // Kubernetes' order: new elements go before the server-only ones they follow.
        result: json!({"mergingList": [{"name": 2}, {"name": 3, "other": "a"}]}),
        ..Case::new("delete missing map from merging list with conflict")
    }
    .check();
    let add_and_delete = json!({
        "$setElementOrder/mergingList": [{"name": 2}, {"name": 3}],
        "mergingList": [{"name": 3}, {"name": 1, "$patch": "delete"}],
    });
    Case {
        original: json!({"mergingList": [{"name": 1}, {"name": 2}]}),
        modified: json!({"mergingList": [{"name": 2}, {"name": 3}]}),
        current: json!({"mergingList": [{"name": 1}, {"name": 2, "other": "b"}, {"name": 4, "other": "c"}]}),
        two_way: add_and_delete.clone(),
        three_way: add_and_delete.clone(),
        // Kubernetes gets [2, 4, 3] here and [4, 2, 3] below only because the deletion
        // shifts its Go slice in place and the live order it then consults is the merged
        // one; keel orders by the live list as it was, so the new element precedes the
        // server-only one as it does without a deletion ("add an item ... preserve order").
        result: json!({"mergingList": [{"name": 2, "other": "b"}, {"name": 3}, {"name": 4, "other": "c"}]}),
        ..Case::new("add map and delete map from merging list")
    }
    .check();
    Case {
        original: json!({"mergingList": [{"name": 1}, {"name": 2}]}),
        modified: json!({"mergingList": [{"name": 2}, {"name": 3}]}),
        current: json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 4, "other": "c"}]}),
        two_way: add_and_delete,
        three_way: json!({
            "$setElementOrder/mergingList": [{"name": 2}, {"name": 3}],
            "mergingList": [{"name": 2}, {"name": 3}, {"name": 1, "$patch": "delete"}],
        }),
        result: json!({"mergingList": [{"name": 2}, {"name": 3}, {"name": 4, "other": "c"}]}),
        ..Case::new("add map and delete map from merging list with conflict")
    }
    .check();
    Case {
        original: json!({"mergingList": [{"name": 1}, {"name": 2}]}),
        modified: json!({"mergingList": []}),
        current: json!({"mergingList": [{"name": 1}, {"name": 2}]}),
        two_way: json!({"mergingList": [{"name": 1, "$patch": "delete"}, {"name": 2, "$patch": "delete"}]}),
        three_way: json!({"mergingList": [{"name": 1, "$patch": "delete"}, {"name": 2, "$patch": "delete"}]}),
        result: json!({"mergingList": []}),
        ..Case::new("delete all maps from merging list")
    }
    .check();
    Case {
        original: json!({"mergingList": [{"name": 1}, {"name": 2}]}),
        modified: json!({"mergingList": []}),
        current: json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "other": "b"}]}),
        two_way: json!({"mergingList": [{"name": 1, "$patch": "delete"}, {"name": 2, "$patch": "delete"}]}),
        three_way: json!({"mergingList": [{"name": 1, "$patch": "delete"}, {"name": 2, "$patch": "delete"}]}),
        result: json!({"mergingList": []}),
        ..Case::new("delete all maps from merging list with conflict")
    }
    .check();
    Case {
        original: json!({"mergingList": [{"name": 1}, {"name": 2}]}),
        modified: json!({"mergingList": []}),
        current: json!({"mergingList": []}),
        two_way: json!({"mergingList": [{"name": 1, "$patch": "delete"}, {"name": 2, "$patch": "delete"}]}),
        // Kubernetes sends the deletions anyway; with nothing live there is nothing to say.
        three_way: json!({}),
        result: json!({"mergingList": []}),
        ..Case::new("delete all maps from empty merging list")
    }
    .check();
    Case {
        original: json!({"mergingList": []}),
        modified: json!({"mergingList": []}),
        current: json!({"mergingList": []}),
        result: json!({"mergingList": []}),
        ..Case::new("merge empty merging lists")
    }
    .check();
}

#[test]
fn fields_of_merging_list_elements_are_deleted_with_null() {
    let patch = json!({
        "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
        "mergingList": [{"name": 1, "value": null}],
    });
    let original = json!({"mergingList": [{"name": 1, "value": 1}, {"name": 2, "value": 2}]});
    let modified = json!({"mergingList": [{"name": 1}, {"name": 2, "value": 2}]});
    for (name, current, result) in [
        (
            "delete field from map in merging list",
            json!({"mergingList": [{"name": 1, "value": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"}]}),
            json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"}]}),
        ),
        (
            "delete field from map in merging list with conflict",
            json!({"mergingList": [{"name": 1, "value": "a", "other": "a"}, {"name": 2, "value": 2}]}),
            json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2}]}),
        ),
        (
            "delete missing field from map in merging list",
            json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"}]}),
            json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"}]}),
        ),
    ] {
        Case {
            original: original.clone(),
            modified: modified.clone(),
            current,
            two_way: patch.clone(),
            three_way: patch.clone(),
            result,
            ..Case::new(name)
        }
        .check();
    }
    Case {
        original,
        modified,
        current: json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "other": "b"}]}),
        two_way: patch,
        three_way: json!({
            "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
            "mergingList": [{"name": 1, "value": null}, {"name": 2, "value": 2}],
        }),
        result: json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"}]}),
        ..Case::new("delete missing field from map in merging list with conflict")
    }
    .check();
}

#[test]
fn merging_lists_nest() {
    let original = json!({"mergingList": [
        {"name": 1, "mergingList": [{"name": 1}, {"name": 2, "value": 2}]},
        {"name": 2},
    ]});
    let modified = json!({"mergingList": [
        {"name": 1, "mergingList": [{"name": 1, "value": 1}, {"name": 2, "value": 2}]},
        {"name": 2},
    ]});
    let patch = json!({
        "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
        "mergingList": [{
            "name": 1,
            "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
            "mergingList": [{"name": 1, "value": 1}],
        }],
    });
    Case {
        original: original.clone(),
        modified: modified.clone(),
        current: json!({"mergingList": [
            {"name": 1, "other": "a", "mergingList": [{"name": 1}, {"name": 2, "value": 2}]},
            {"name": 2, "other": "b"},
        ]}),
        two_way: patch.clone(),
        three_way: patch.clone(),
        result: json!({"mergingList": [
            {"name": 1, "other": "a", "mergingList": [{"name": 1, "value": 1}, {"name": 2, "value": 2}]},
            {"name": 2, "other": "b"},
        ]}),
        ..Case::new("add field to map in merging list nested in merging list")
    }
    .check();
    Case {
        original: original.clone(),
        modified: modified.clone(),
        current: json!({"mergingList": [
            {"name": 1, "other": "a", "mergingList": [
                {"name": 1, "value": "a", "other": "c"}, {"name": 2, "value": "b", "other": "d"},
            ]},
            {"name": 2, "other": "b"},
        ]}),
        two_way: patch.clone(),
        three_way: json!({
            "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
            "mergingList": [{
                "name": 1,
                "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
                "mergingList": [{"name": 1, "value": 1}, {"name": 2, "value": 2}],
            }],
        }),
        result: json!({"mergingList": [
            {"name": 1, "other": "a", "mergingList": [
                {"name": 1, "value": 1, "other": "c"}, {"name": 2, "value": 2, "other": "d"},
            ]},
            {"name": 2, "other": "b"},
        ]}),
        ..Case::new("add field to map in merging list nested in merging list with value conflict")
    }
    .check();
    Case {
        original: original.clone(),
        modified,
        current: json!({"mergingList": [
            {"name": 1, "other": "a", "mergingList": [{"name": 2, "value": 2, "other": "d"}]},
            {"name": 2, "other": "b"},
        ]}),
        two_way: patch.clone(),
        three_way: patch,
        result: json!({"mergingList": [
            {"name": 1, "other": "a", "mergingList": [
                {"name": 1, "value": 1}, {"name": 2, "value": 2, "other": "d"},
            ]},
            {"name": 2, "other": "b"},
        ]}),
        ..Case::new(
            "add field to map in merging list nested in merging list with deletion conflict",
        )
    }
    .check();
    let reordered = json!({
        "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
        "mergingList": [{
            "name": 1,
            "$setElementOrder/mergingList": [{"name": 2}, {"name": 1}],
            "mergingList": [{"name": 1, "value": 1}],
        }],
    });
    Case {
        original,
        modified: json!({"mergingList": [
            {"name": 1, "mergingList": [{"name": 2, "value": 2}, {"name": 1, "value": 1}]},
            {"name": 2},
        ]}),
        current: json!({"mergingList": [
            {"name": 1, "other": "a", "mergingList": [{"name": 2, "value": 2, "other": "d"}]},
            {"name": 2, "other": "b"},
        ]}),
        two_way: reordered.clone(),
        three_way: reordered,
        result: json!({"mergingList": [
            {"name": 1, "other": "a", "mergingList": [
                {"name": 2, "value": 2, "other": "d"}, {"name": 1, "value": 1},
            ]},
            {"name": 2, "other": "b"},
        ]}),
        ..Case::new("reorder and add in merging list nested in merging list with deletion conflict")
    }
    .check();
    let by_pointer = json!({
        "$setElementOrder/mergeItemPtr": [{"name": 1}, {"name": 2}],
        "mergeItemPtr": [{"name": 2}],
    });
    Case {
        original: json!({"mergeItemPtr": [{"name": 1}]}),
        modified: json!({"mergeItemPtr": [{"name": 1}, {"name": 2}]}),
        current: json!({"mergeItemPtr": [{"name": 1, "other": "a"}, {"name": 3}]}),
        two_way: by_pointer.clone(),
        three_way: by_pointer.clone(),
        result: json!({"mergeItemPtr": [{"name": 1, "other": "a"}, {"name": 2}, {"name": 3}]}),
        ..Case::new("add map to merging list by pointer")
    }
    .check();
    Case {
        original: json!({"mergeItemPtr": [{"name": 1}]}),
        modified: json!({"mergeItemPtr": [{"name": 1}, {"name": 2}]}),
        current: json!({"mergeItemPtr": [{"name": 3}]}),
        two_way: by_pointer,
        three_way: json!({
            "$setElementOrder/mergeItemPtr": [{"name": 1}, {"name": 2}],
            "mergeItemPtr": [{"name": 1}, {"name": 2}],
        }),
        result: json!({"mergeItemPtr": [{"name": 1}, {"name": 2}, {"name": 3}]}),
        ..Case::new("add map to merging list by pointer with conflict")
    }
    .check();
}

#[test]
fn merging_int_lists_are_sets() {
    Case {
        original: json!({"mergingIntList": [1, 2]}),
        modified: json!({"mergingIntList": [1, 2, 3]}),
        current: json!({"mergingIntList": [1, 2, 4]}),
        two_way: json!({"$setElementOrder/mergingIntList": [1, 2, 3], "mergingIntList": [3]}),
        three_way: json!({"$setElementOrder/mergingIntList": [1, 2, 3], "mergingIntList": [3]}),
        result: json!({"mergingIntList": [1, 2, 3, 4]}),
        ..Case::new("merge lists of scalars")
    }
    .check();
    Case {
        original: json!({"mergingIntList": [1, 2]}),
        modified: json!({"mergingIntList": [1, 2, 3]}),
        current: json!({"mergingIntList": [1, 2, 3]}),
        two_way: json!({"$setElementOrder/mergingIntList": [1, 2, 3], "mergingIntList": [3]}),
        three_way: json!({}),
        result: json!({"mergingIntList": [1, 2, 3]}),
        ..Case::new("add duplicate field to map in merging int list")
    }
    .check();
    Case {
        original: json!({"mergingIntList": [1, 2, 3]}),
        modified: json!({"mergingIntList": [1, 2]}),
        current: json!({"mergingIntList": [1, 2, 3, 4]}),
        two_way: json!({
            "$setElementOrder/mergingIntList": [1, 2],
            "$deleteFromPrimitiveList/mergingIntList": [3],
        }),
        three_way: json!({
            "$setElementOrder/mergingIntList": [1, 2],
            "$deleteFromPrimitiveList/mergingIntList": [3],
        }),
        result: json!({"mergingIntList": [1, 2, 4]}),
        ..Case::new("delete items in lists of scalars")
    }
    .check();
    Case {
        original: json!({"mergingIntList": [1, 2, 3, 3]}),
        modified: json!({"mergingIntList": [1, 2]}),
        current: json!({"mergingIntList": [1, 2, 3, 3, 4]}),
        // keel adds an empty list of additions when the live list repeats values: applying
        // one de-duplicates (Kubernetes does so too), so two-way patches always round-trip.
        two_way: json!({
            "mergingIntList": [],
            "$setElementOrder/mergingIntList": [1, 2],
            "$deleteFromPrimitiveList/mergingIntList": [3],
        }),
        three_way: json!({
            "mergingIntList": [],
            "$setElementOrder/mergingIntList": [1, 2],
            "$deleteFromPrimitiveList/mergingIntList": [3],
        }),
        result: json!({"mergingIntList": [1, 2, 4]}),
        ..Case::new("delete all duplicate items in lists of scalars")
    }
    .check();
    Case {
        original: json!({"mergingIntList": [1, 2, 3]}),
        modified: json!({"mergingIntList": [1, 2, 4]}),
        current: json!({"mergingIntList": [1, 2, 3, 4]}),
        two_way: json!({
            "$setElementOrder/mergingIntList": [1, 2, 4],
            "$deleteFromPrimitiveList/mergingIntList": [3],
            "mergingIntList": [4],
        }),
        three_way: json!({
            "$setElementOrder/mergingIntList": [1, 2, 4],
            "$deleteFromPrimitiveList/mergingIntList": [3],
        }),
        result: json!({"mergingIntList": [1, 2, 4]}),
        ..Case::new("add and delete items in lists of scalars")
    }
    .check();
}

#[test]
fn set_element_order_orders_merged_lists() {
    Case {
        original: json!({"mergingIntList": [1, 2]}),
        modified: json!({"mergingIntList": [3, 1, 2]}),
        current: json!({"mergingIntList": [1, 4, 2]}),
        two_way: json!({"$setElementOrder/mergingIntList": [3, 1, 2], "mergingIntList": [3]}),
        three_way: json!({"$setElementOrder/mergingIntList": [3, 1, 2], "mergingIntList": [3]}),
        result: json!({"mergingIntList": [3, 1, 4, 2]}),
        ..Case::new("add an item in a list of primitives and preserve order")
    }
    .check();
    Case {
        original: json!({"mergingIntList": [1, 2, 3]}),
        modified: json!({"mergingIntList": [2, 1]}),
        current: json!({"mergingIntList": [1, 2, 3]}),
        two_way: json!({
            "$setElementOrder/mergingIntList": [2, 1],
            "$deleteFromPrimitiveList/mergingIntList": [3],
        }),
        three_way: json!({
            "$setElementOrder/mergingIntList": [2, 1],
            "$deleteFromPrimitiveList/mergingIntList": [3],
        }),
        result: json!({"mergingIntList": [2, 1]}),
        ..Case::new("delete an item in a list of primitives and preserve order")
    }
    .check();
    Case {
        original: json!({"mergingList": [{"name": 1}, {"name": 2, "value": 2}]}),
        modified: json!({"mergingList": [{"name": 3, "value": 3}, {"name": 1}, {"name": 2, "value": 2}]}),
        current: json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"}]}),
        two_way: json!({
            "$setElementOrder/mergingList": [{"name": 3}, {"name": 1}, {"name": 2}],
            "mergingList": [{"name": 3, "value": 3}],
        }),
        three_way: json!({
            "$setElementOrder/mergingList": [{"name": 3}, {"name": 1}, {"name": 2}],
            "mergingList": [{"name": 3, "value": 3}],
        }),
        result: json!({"mergingList": [
            {"name": 3, "value": 3}, {"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"},
        ]}),
        ..Case::new("add an item in a list and preserve order")
    }
    .check();
    Case {
        original: json!({"mergingList": [{"name": 1}, {"name": 2, "value": 2}]}),
        modified: json!({"mergingList": [
            {"name": 1}, {"name": 4, "value": 4}, {"name": 2, "value": 2}, {"name": 3, "value": 3},
        ]}),
        current: json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"}]}),
        two_way: json!({
            "$setElementOrder/mergingList": [{"name": 1}, {"name": 4}, {"name": 2}, {"name": 3}],
            "mergingList": [{"name": 4, "value": 4}, {"name": 3, "value": 3}],
        }),
        three_way: json!({
            "$setElementOrder/mergingList": [{"name": 1}, {"name": 4}, {"name": 2}, {"name": 3}],
            "mergingList": [{"name": 4, "value": 4}, {"name": 3, "value": 3}],
        }),
        result: json!({"mergingList": [
            {"name": 1, "other": "a"}, {"name": 4, "value": 4},
            {"name": 2, "value": 2, "other": "b"}, {"name": 3, "value": 3},
        ]}),
        ..Case::new("add multiple items in a list and preserve order")
    }
    .check();
    let original =
        json!({"mergingList": [{"name": 1}, {"name": 3, "value": 3}, {"name": 2, "value": 2}]});
    let current = json!({"mergingList": [
        {"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"}, {"name": 3, "value": 3},
    ]});
    let patch = json!({
        "$setElementOrder/mergingList": [{"name": 2}, {"name": 1}],
        "mergingList": [{"name": 3, "$patch": "delete"}],
    });
    Case {
        original: original.clone(),
        modified: json!({"mergingList": [{"name": 2, "value": 2}, {"name": 1}]}),
        current: current.clone(),
        two_way: patch.clone(),
        three_way: patch,
        result: json!({"mergingList": [{"name": 2, "value": 2, "other": "b"}, {"name": 1, "other": "a"}]}),
        ..Case::new("delete an item in a list and preserve order")
    }
    .check();
    let patch = json!({
        "$setElementOrder/mergingList": [{"name": 2}, {"name": 3}, {"name": 1}],
        "mergingList": [{"name": 3, "value": "x"}],
    });
    Case {
        original: original.clone(),
        modified: json!({"mergingList": [{"name": 2, "value": 2}, {"name": 3, "value": "x"}, {"name": 1}]}),
        current: current.clone(),
        two_way: patch.clone(),
        three_way: patch,
        result: json!({"mergingList": [
            {"name": 2, "value": 2, "other": "b"}, {"name": 3, "value": "x"}, {"name": 1, "other": "a"},
        ]}),
        ..Case::new("change an item in a list and preserve order")
    }
    .check();
    let patch = json!({
        "$setElementOrder/mergingList": [{"name": 4}, {"name": 2}, {"name": 1}],
        "mergingList": [{"name": 4, "value": 4}, {"name": 3, "$patch": "delete"}],
    });
    Case {
        original,
        modified: json!({"mergingList": [{"name": 4, "value": 4}, {"name": 2, "value": 2}, {"name": 1}]}),
        current,
        two_way: patch.clone(),
        three_way: patch,
        result: json!({"mergingList": [
            {"name": 4, "value": 4}, {"name": 2, "value": 2, "other": "b"}, {"name": 1, "other": "a"},
        ]}),
        ..Case::new("add and delete an item in a list and preserve order")
    }
    .check();

    let original = json!({"mergingList": [
        {"name": 1}, {"name": 3, "value": 3}, {"name": 4, "value": 4}, {"name": 2, "value": 2},
    ]});
    let modified = json!({"mergingList": [
        {"name": 4, "value": 4}, {"name": 2, "value": 2}, {"name": 3, "value": 3}, {"name": 1},
    ]});
    let order = json!({"$setElementOrder/mergingList": [{"name": 4}, {"name": 2}, {"name": 3}, {"name": 1}]});
    Case {
        original: original.clone(),
        modified: modified.clone(),
        current: json!({"mergingList": [
            {"name": 1, "other": "a"}, {"name": 3, "value": 3}, {"name": 4, "value": 4}, {"name": 2, "value": 2},
        ]}),
        two_way: order.clone(),
        three_way: order.clone(),
        result: json!({"mergingList": [
            {"name": 4, "value": 4}, {"name": 2, "value": 2}, {"name": 3, "value": 3}, {"name": 1, "other": "a"},
        ]}),
        ..Case::new("set elements order in a list")
    }
    .check();
    Case {
        original,
        modified,
        current: json!({"mergingList": [
            {"name": 1, "other": "a"}, {"name": 3, "value": 3}, {"name": 4, "value": 4},
            {"name": 2, "value": 2}, {"name": 9},
        ]}),
        two_way: order.clone(),
        three_way: order,
        result: json!({"mergingList": [
            {"name": 4, "value": 4}, {"name": 2, "value": 2}, {"name": 3, "value": 3},
            {"name": 1, "other": "a"}, {"name": 9},
        ]}),
        ..Case::new("set elements order in a list with server-only items")
    }
    .check();
    let order = json!({"$setElementOrder/mergingIntList": [2, 1, 4, 3]});
    for (name, current, result) in [
        (
            "set elements order in a int list",
            json!([1, 2, 3, 4]),
            json!([2, 1, 4, 3]),
        ),
        (
            "set elements order in a int list with server-only items 2",
            json!([1, 2, 9, 3, 4]),
            json!([2, 1, 9, 4, 3]),
        ),
        (
            "set elements order in a int list with server-only items 3",
            json!([1, 2, 7, 9, 8, 3, 4]),
            json!([2, 1, 7, 9, 8, 4, 3]),
        ),
    ] {
        Case {
            original: json!({"mergingIntList": [1, 2, 3, 4]}),
            modified: json!({"mergingIntList": [2, 1, 4, 3]}),
            current: json!({"mergingIntList": current}),
            two_way: order.clone(),
            three_way: order.clone(),
            result: json!({"mergingIntList": result}),
            ..Case::new(name)
        }
        .check();
    }
}

#[test]
fn retain_keys_clears_the_other_members_of_a_union() {
    Case {
        original: json!({}),
        modified: json!({"retainKeysMap": {"other": "bar"}}),
        current: json!({"retainKeysMap": {"value": "foo"}}),
        two_way: json!({"retainKeysMap": {"other": "bar"}}),
        three_way: json!({"retainKeysMap": {"$retainKeys": ["other"], "other": "bar"}}),
        result: json!({"retainKeysMap": {"other": "bar"}}),
        ..Case::new("retainKeys map should clear defaulted field")
    }
    .check();
    Case {
        original: json!({}),
        modified: json!({"retainKeysMap": {"name": "type2", "other": "bar"}}),
        current: json!({"retainKeysMap": {"name": "type1", "value": "foo"}}),
        two_way: json!({"retainKeysMap": {"name": "type2", "other": "bar"}}),
        three_way: json!({"retainKeysMap": {"$retainKeys": ["name", "other"], "name": "type2", "other": "bar"}}),
        result: json!({"retainKeysMap": {"name": "type2", "other": "bar"}}),
        ..Case::new("retainKeys map should clear defaulted field with conflict (discriminated union)")
    }
    .check();
    Case {
        original: json!({"retainKeysMap": {"name": "foo"}}),
        modified: json!({"retainKeysMap": {"name": "foo", "value": "bar"}}),
        current: json!({"retainKeysMap": {"name": "foo", "other": "a"}}),
        two_way: json!({"retainKeysMap": {"$retainKeys": ["name", "value"], "value": "bar"}}),
        three_way: json!({"retainKeysMap": {"$retainKeys": ["name", "value"], "value": "bar"}}),
        result: json!({"retainKeysMap": {"name": "foo", "value": "bar"}}),
        ..Case::new("retainKeys map adds a field and clear a field")
    }
    .check();
    Case {
        original: json!({"retainKeysMap": {"name": "foo", "value": "bar"}}),
        modified: json!({"retainKeysMap": {"name": "foo"}}),
        current: json!({"retainKeysMap": {"name": "foo", "value": "bar", "other": "a"}}),
        two_way: json!({"retainKeysMap": {"$retainKeys": ["name"], "value": null}}),
        three_way: json!({"retainKeysMap": {"$retainKeys": ["name"], "value": null}}),
        result: json!({"retainKeysMap": {"name": "foo"}}),
        ..Case::new("retainKeys map deletes a field and clears a field")
    }
    .check();
    Case {
        original: json!({"retainKeysMap": {"name": "foo", "value": "bar"}}),
        modified: json!({"retainKeysMap": {"name": "foo", "value": "bar"}}),
        current: json!({"retainKeysMap": {"name": "foo", "value": "bar", "other": "a"}}),
        two_way: json!({}),
        three_way: json!({"retainKeysMap": {"$retainKeys": ["name", "value"]}}),
        result: json!({"retainKeysMap": {"name": "foo", "value": "bar"}}),
        ..Case::new("retainKeys map clears a field")
    }
    .check();
    Case {
        original: json!({"retainKeysMap": {"name": "foo", "value": "bar", "simpleMap": {"key1": "old", "key2": "b"}}}),
        modified: json!({"retainKeysMap": {"name": "foo", "value": "bar", "simpleMap": {"key1": "modified", "key2": "b"}}}),
        current: json!({"retainKeysMap": {"name": "foo", "value": "bar", "simpleMap": {"key1": "new", "key2": "b", "key3": "c"}}}),
        two_way: json!({"retainKeysMap": {"$retainKeys": ["name", "simpleMap", "value"], "simpleMap": {"key1": "modified"}}}),
        three_way: json!({"retainKeysMap": {"$retainKeys": ["name", "simpleMap", "value"], "simpleMap": {"key1": "modified"}}}),
        result: json!({"retainKeysMap": {"name": "foo", "value": "bar", "simpleMap": {"key1": "modified", "key2": "b", "key3": "c"}}}),
        ..Case::new("retainKeys map changes a field in a nested map with conflict")
    }
    .check();
    Case {
        original: json!({"retainKeysMap": {"name": "foo", "mergingIntList": [1, 2, 3]}}),
        modified: json!({"retainKeysMap": {"name": "foo", "mergingIntList": [1, 3, 5]}}),
        current: json!({"retainKeysMap": {"name": "foo", "mergingIntList": [1, 2, 3, 4]}}),
        two_way: json!({"retainKeysMap": {
            "$retainKeys": ["mergingIntList", "name"],
            "mergingIntList": [5],
            "$deleteFromPrimitiveList/mergingIntList": [2],
            "$setElementOrder/mergingIntList": [1, 3, 5],
        }}),
        three_way: json!({"retainKeysMap": {
            "$retainKeys": ["mergingIntList", "name"],
            "mergingIntList": [5],
            "$deleteFromPrimitiveList/mergingIntList": [2],
            "$setElementOrder/mergingIntList": [1, 3, 5],
        }}),
        result: json!({"retainKeysMap": {"name": "foo", "mergingIntList": [1, 3, 5, 4]}}),
        ..Case::new("retainKeys map adds an item and deletes an item in nested merging int list")
    }
    .check();
    Case {
        original: json!({"retainKeysMap": {"name": "foo", "mergingList": [{"name": "a"}, {"name": "b"}]}}),
        modified: json!({"retainKeysMap": {"name": "foo", "value": "bar", "mergingList": [{"name": "a"}, {"name": "b"}]}}),
        current: json!({"retainKeysMap": {"name": "foo", "mergingList": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}}),
        two_way: json!({"retainKeysMap": {"$retainKeys": ["mergingList", "name", "value"], "value": "bar"}}),
        // Kubernetes also sends the unchanged order of the merging list because the live
        // list has an extra element; keel sends an order only when it changes something.
        three_way: json!({"retainKeysMap": {"$retainKeys": ["mergingList", "name", "value"], "value": "bar"}}),
        result: json!({"retainKeysMap": {"name": "foo", "value": "bar", "mergingList": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}}),
        ..Case::new("retainKeys map nested merging list with no change")
    }
    .check();
    Case {
        original: json!({"retainKeysMap": {"name": "foo", "nonMergingList": [{"name": "a"}, {"name": "b"}]}}),
        modified: json!({"retainKeysMap": {"name": "foo", "value": "bar"}}),
        current: json!({"retainKeysMap": {"name": "foo", "nonMergingList": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}}),
        two_way: json!({"retainKeysMap": {"$retainKeys": ["name", "value"], "value": "bar", "nonMergingList": null}}),
        three_way: json!({"retainKeysMap": {"$retainKeys": ["name", "value"], "value": "bar", "nonMergingList": null}}),
        result: json!({"retainKeysMap": {"name": "foo", "value": "bar"}}),
        ..Case::new("retainKeys map delete nested non-merging list with conflict")
    }
    .check();
    Case {
        original: json!({"retainKeysMergingList": [{"name": "bar"}, {"name": "foo", "value": "a"}]}),
        modified: json!({"retainKeysMergingList": [{"name": "bar"}, {"name": "foo", "value": "a"}]}),
        current: json!({"retainKeysMergingList": [{"name": "bar"}, {"name": "foo", "value": "a", "other": "x"}]}),
        two_way: json!({}),
        three_way: json!({
            "$setElementOrder/retainKeysMergingList": [{"name": "bar"}, {"name": "foo"}],
            "retainKeysMergingList": [{"$retainKeys": ["name", "value"], "name": "foo"}],
        }),
        result: json!({"retainKeysMergingList": [{"name": "bar"}, {"name": "foo", "value": "a"}]}),
        ..Case::new("retainKeys list of maps clears a field")
    }
    .check();
    Case {
        original: json!({"retainKeysMergingList": [{"name": "bar"}, {"name": "foo", "value": "old"}]}),
        modified: json!({"retainKeysMergingList": [{"name": "bar"}, {"name": "foo", "value": "modified"}]}),
        current: json!({"retainKeysMergingList": [{"name": "bar"}, {"name": "foo", "value": "new", "other": "x"}]}),
        two_way: json!({
            "$setElementOrder/retainKeysMergingList": [{"name": "bar"}, {"name": "foo"}],
            "retainKeysMergingList": [{"$retainKeys": ["name", "value"], "name": "foo", "value": "modified"}],
        }),
        three_way: json!({
            "$setElementOrder/retainKeysMergingList": [{"name": "bar"}, {"name": "foo"}],
            "retainKeysMergingList": [{"$retainKeys": ["name", "value"], "name": "foo", "value": "modified"}],
        }),
        result: json!({"retainKeysMergingList": [{"name": "bar"}, {"name": "foo", "value": "modified"}]}),
        ..Case::new("retainKeys list of maps clears a field with conflict")
    }
    .check();
}

/// Patches Kubernetes accepts that no diff produces: apply only.
#[test]
fn hand_written_patches_apply_as_in_kubernetes() {
    let cases = [
        (
            "unique scalars when merging lists",
            json!({"mergingIntList": [1, 2]}),
            json!({"mergingIntList": [2, 3]}),
            json!({"mergingIntList": [1, 2, 3]}),
        ),
        (
            // Kubernetes leaves `simpleMap: {}`, which its typed objects then drop.
            "delete map from nested map",
            json!({"simpleMap": {"key1": 1, "key2": 1}}),
            json!({"simpleMap": {"$patch": "delete"}}),
            json!({}),
        ),
        (
            "delete all items from merging list",
            json!({"mergingList": [{"name": 1}, {"name": 2}]}),
            json!({"mergingList": [{"$patch": "replace"}]}),
            json!({"mergingList": []}),
        ),
        (
            "merge empty merging lists",
            json!({"mergingList": []}),
            json!({"mergingList": []}),
            json!({"mergingList": []}),
        ),
        (
            "delete all keys from map",
            json!({"name": 1, "value": 1}),
            json!({"$patch": "replace"}),
            json!({}),
        ),
        (
            "add key and delete all keys from map",
            json!({"name": 1, "value": 1}),
            json!({"other": "a", "$patch": "replace"}),
            json!({"other": "a"}),
        ),
        (
            "delete all duplicate entries in a merging list",
            json!({"mergingList": [
                {"name": 1}, {"name": 1}, {"name": 2, "value": "a"}, {"name": 3}, {"name": 3},
            ]}),
            json!({"mergingList": [{"name": 1, "$patch": "delete"}, {"name": 3, "$patch": "delete"}]}),
            json!({"mergingList": [{"name": 2, "value": "a"}]}),
        ),
        (
            "retainKeys map can add a field when no retainKeys directive present",
            json!({"retainKeysMap": {"name": "foo"}}),
            json!({"retainKeysMap": {"value": "bar"}}),
            json!({"retainKeysMap": {"name": "foo", "value": "bar"}}),
        ),
        (
            "retainKeys map can delete a field when no retainKeys directive present",
            json!({"retainKeysMap": {"name": "foo", "value": "a"}}),
            json!({"retainKeysMap": {"value": null}}),
            json!({"retainKeysMap": {"name": "foo"}}),
        ),
        (
            "retainKeys map merge an empty map",
            json!({"retainKeysMap": {"name": "foo", "value": "a"}}),
            json!({"retainKeysMap": {}}),
            json!({"retainKeysMap": {"name": "foo", "value": "a"}}),
        ),
        (
            "retainKeys list can change a field when no retainKeys directive present",
            json!({"retainKeysMergingList": [{"name": "bar"}, {"name": "foo", "value": "a"}]}),
            json!({"retainKeysMergingList": [{"name": "foo", "value": "b"}]}),
            json!({"retainKeysMergingList": [{"name": "bar"}, {"name": "foo", "value": "b"}]}),
        ),
        (
            "preserve the order from the patch in a merging list",
            json!({"mergingList": [{"name": 1}, {"name": 2, "value": "b"}, {"name": 3}]}),
            json!({"mergingList": [{"name": 3, "value": "c"}, {"name": 1, "value": "a"}, {"name": 2, "other": "x"}]}),
            json!({"mergingList": [
                {"name": 3, "value": "c"}, {"name": 1, "value": "a"}, {"name": 2, "value": "b", "other": "x"},
            ]}),
        ),
        (
            "preserve the order from the patch in a merging list 2",
            json!({"mergingList": [{"name": 1}, {"name": 2, "value": "b"}, {"name": 3}]}),
            json!({"mergingList": [{"name": 3, "value": "c"}, {"name": 1, "value": "a"}]}),
            json!({"mergingList": [
                {"name": 2, "value": "b"}, {"name": 3, "value": "c"}, {"name": 1, "value": "a"},
            ]}),
        ),
        (
            "preserve the order from the patch in a merging int list",
            json!({"mergingIntList": [1, 2, 3]}),
            json!({"mergingIntList": [3, 1, 2]}),
            json!({"mergingIntList": [3, 1, 2]}),
        ),
        (
            "preserve the order from the patch in a merging int list 2",
            json!({"mergingIntList": [1, 2, 3]}),
            json!({"mergingIntList": [3, 1]}),
            json!({"mergingIntList": [2, 3, 1]}),
        ),
        (
            "$setElementOrder contains item that is not present in the list to be merged",
            json!({"mergingList": [{"name": 1}, {"name": 3}]}),
            json!({
                "$setElementOrder/mergingList": [{"name": 3}, {"name": 2}, {"name": 1}],
                "mergingList": [{"name": 3, "value": 3}, {"name": 1, "value": 1}],
            }),
            json!({"mergingList": [{"name": 3, "value": 3}, {"name": 1, "value": 1}]}),
        ),
        (
            "$setElementOrder contains item that is not present in the int list to be merged",
            json!({"mergingIntList": [1, 3]}),
            json!({"$setElementOrder/mergingIntList": [3, 2, 1]}),
            json!({"mergingIntList": [3, 1]}),
        ),
        (
            "$deleteFromPrimitiveList of nonexistent item in primitive list should not add the item to the list",
            json!({"mergingIntList": [1, 2]}),
            json!({"$deleteFromPrimitiveList/mergingIntList": [3]}),
            json!({"mergingIntList": [1, 2]}),
        ),
        (
            "$deleteFromPrimitiveList on empty primitive list should not add the item to the list",
            json!({"mergingIntList": null}),
            json!({"$deleteFromPrimitiveList/mergingIntList": [3]}),
            json!({"mergingIntList": null}),
        ),
        (
            "$deleteFromPrimitiveList on nonexistent primitive list should not add the primitive list",
            json!({"foo": ["bar"]}),
            json!({"$deleteFromPrimitiveList/mergingIntList": [3]}),
            json!({"foo": ["bar"]}),
        ),
        (
            "$deleteFromPrimitiveList should delete item from a list with merge patch strategy",
            json!({"mergingIntList": [1, 2, 3]}),
            json!({"$deleteFromPrimitiveList/mergingIntList": [2]}),
            json!({"mergingIntList": [1, 3]}),
        ),
        (
            "$deleteFromPrimitiveList should delete item from a list without merge patch strategy",
            json!({"nonMergingIntList": [1, 2, 3]}),
            json!({"$deleteFromPrimitiveList/nonMergingIntList": [2]}),
            json!({"nonMergingIntList": [1, 3]}),
        ),
        (
            "behavior of set element order for a merging list with duplicate",
            json!({"mergingList": [
                {"name": 1}, {"name": 2, "value": "dup1"}, {"name": 3}, {"name": 2, "value": "dup2"}, {"name": 4},
            ]}),
            json!({"$setElementOrder/mergingList": [
                {"name": 2}, {"name": 1}, {"name": 4}, {"name": 3}, {"name": 2},
            ]}),
            json!({"mergingList": [
                {"name": 2, "value": "dup1"}, {"name": 2, "value": "dup2"}, {"name": 1}, {"name": 4}, {"name": 3},
            ]}),
        ),
        (
            "behavior of set element order for a merging int list with duplicate",
            json!({"mergingIntList": [1, 2, 3, 2, 4]}),
            json!({"$setElementOrder/mergingIntList": [2, 1, 4, 3, 2]}),
            json!({"mergingIntList": [2, 2, 1, 4, 3]}),
        ),
    ];
    for (name, original, patch, want) in cases {
        let got = apply_strategic_merge_patch(&original, &patch, &MergeItem)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn patches_kubernetes_refuses_are_malformed() {
    let cases = [
        (
            "should check if order in $setElementOrder and patch list match",
            json!({"mergingList": [{"name": 1}, {"name": 3}, {"name": 2}]}),
            json!({
                "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}, {"name": 3}],
                "mergingList": [{"name": 3, "value": 3}, {"name": 1, "value": 1}],
            }),
        ),
        (
            "should check if order in $setElementOrder and patch int list match",
            json!({"mergingIntList": [1, 3, 2]}),
            json!({"$setElementOrder/mergingIntList": [1, 2, 3], "mergingIntList": [3, 1]}),
        ),
        (
            "missing merge key should error out",
            json!({"mergingList": [{"name": 1, "value": "a"}]}),
            json!({"mergingList": [{"value": "b"}]}),
        ),
        (
            "unknown directive",
            json!({"simpleMap": {"a": 1}}),
            json!({"simpleMap": {"$patch": "frobnicate"}}),
        ),
        (
            "unknown directive in a list element",
            json!({"mergingList": [{"name": 1}]}),
            json!({"mergingList": [{"name": 1, "$patch": "frobnicate"}]}),
        ),
        (
            "a field outside $retainKeys",
            json!({"retainKeysMap": {"name": "a"}}),
            json!({"retainKeysMap": {"$retainKeys": ["name"], "value": "b"}}),
        ),
        (
            "a parallel list without a field",
            json!({"mergingIntList": [1]}),
            json!({"$setElementOrder": [1]}),
        ),
    ];
    for (name, original, patch) in cases {
        let got = apply_strategic_merge_patch(&original, &patch, &MergeItem);
        assert!(
            matches!(got, Err(PatchError::Malformed(_))),
            "{name}: {got:?}"
        );
    }
}
