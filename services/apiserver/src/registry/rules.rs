//! The registry's rules for what storage writes ([`WriteRules`]): when a write removes an
//! object, and when a batch's result is no change at all.

use std::sync::Arc;

use keel_api::{ApiError, Metadata, Object, ResourceInfo};

use super::Resources;
use super::deletion::has_finalizers;
use super::managed;
use crate::storage::{Change, Draft, Mutation, WriteRules, apply_in_order};

/// The served resources tell each object's kind.
pub struct RegistryRules(pub Arc<Resources>);

impl WriteRules for RegistryRules {
    /// A write removes an object once it is marked for deletion and no finalizer holds it.
    fn is_finished(&self, info: &ResourceInfo, obj: &Object) -> bool {
        obj.deletion_timestamp().is_some() && !has_finalizers(&*self.0.kind(&info.gvr), obj)
    }

    fn expires(&self, info: &ResourceInfo) -> bool {
        self.0.kind(&info.gvr).expires()
    }

    /// The mutations in order, as storage applies them. A result equal to `current` but for
    /// its entries' times is `current` (Kubernetes' `IgnoreManagedFieldsTimestampsTransformer`):
    /// a write that changes nothing but when its manager last wrote is no write, so
    /// re-applying a manifest wakes no watcher.
    fn apply_batch(
        &self,
        current: &Draft,
        mutations: &[&Mutation],
        errors: &mut [Option<ApiError>],
    ) -> Change {
        match apply_in_order(current, mutations, errors) {
            Change::Put(draft) if managed::equal_but_times(&draft, current) => {
                Change::Put(current.clone())
            }
            change => change,
        }
    }
}

#[cfg(test)]
mod tests {
    use keel_api::Reason;
    use serde_json::{Value, json};

    use super::*;
    use crate::registry::PatchType;
    use crate::registry::kinds::testing::{info, kind};
    use crate::registry::patch::mutation;
    use crate::registry::strategy::Subresource;

    fn rules() -> RegistryRules {
        RegistryRules(Arc::new(Resources::builtin()))
    }

    /// A ConfigMap as stored, its one key written by `base`.
    fn stored() -> Object {
        Object::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "default", "uid": "u1", "resourceVersion": "5",
                         "managedFields": [{"manager": "base", "operation": "Update",
                                            "apiVersion": "v1", "fieldsType": "FieldsV1",
                                            "fieldsV1": {"f:data": {".": {}, "f:a": {}}}}]},
            "data": {"a": "1"},
        }))
        .unwrap()
    }

    fn apply(manager: &str, data: Value) -> Mutation {
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": "cm", "namespace": "default"}, "data": data});
        patched(PatchType::Apply, manager, config)
    }

    fn patched(kind_of: PatchType, manager: &str, patch: Value) -> Mutation {
        let m = mutation(
            &info("ConfigMap"),
            kind("ConfigMap"),
            kind_of,
            Subresource::Main,
            patch,
            manager,
            false,
        );
        m.unwrap()
    }

    /// `m`, whose write is refused after it was made (as an RBAC grant check refuses one).
    fn refused_after(m: Mutation) -> Mutation {
        Box::new(move |d: &Draft| {
            m(d)?;
            Err(ApiError::conflict(
                crate::storage::target(&info("ConfigMap"), d.object.name()),
                "refused after the write was made",
            ))
        })
    }

    /// The batch's object, and each mutation's error.
    fn batch(ms: &[Mutation]) -> (Object, Vec<Option<ApiError>>) {
        let refs: Vec<&Mutation> = ms.iter().collect();
        let mut errors = vec![None; refs.len()];
        let change = rules().apply_batch(&Draft::from_object(stored()), &refs, &mut errors);
        let (Change::Put(d) | Change::Remove(d)) = change;
        (d.into_object(), errors)
    }

    /// `obj`'s entries without their times (a batch and a write may fall in different seconds).
    fn entries(obj: &Object) -> Value {
        let mut v = obj.metadata().unwrap()["managedFields"].clone();
        for e in v.as_array_mut().expect("entries as JSON") {
            e.as_object_mut().unwrap().remove("time");
        }
        v
    }

    /// The managers of `obj`'s entries, sorted.
    fn managers(obj: &Object) -> Vec<String> {
        let mut m: Vec<String> = entries(obj)
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap().to_string())
            .collect();
        m.sort();
        m
    }

    #[test]
    fn a_batch_records_what_its_writes_one_at_a_time_would() {
        let ms = || {
            vec![
                apply("a", json!({"x": "1"})),
                apply("b", json!({"y": "2"})),
                patched(PatchType::Merge, "c", json!({"data": {"a": "3"}})),
                apply("a", json!({"x": "4"})),
                apply("b", json!({})),
            ]
        };
        let (batched, errors) = batch(&ms());
        assert!(errors.iter().all(Option::is_none), "{errors:?}");
        // One write after another, each on what the one before stored.
        let mut one_by_one = stored();
        for m in ms() {
            let (Change::Put(d) | Change::Remove(d)) =
                apply_in_order(&Draft::from_object(one_by_one), &[&m], &mut [None]);
            one_by_one = d.into_object();
        }
        assert_eq!(batched.as_map()["data"], json!({"a": "3", "x": "4"}));
        assert_eq!(batched.as_map()["data"], one_by_one.as_map()["data"]);
        assert_eq!(entries(&batched), entries(&one_by_one));
        assert_eq!(managers(&batched), ["a", "b", "base", "c"]);
    }

    #[test]
    fn a_write_refused_in_a_batch_takes_its_entries_with_it() {
        let (obj, errors) = batch(&[
            apply("a", json!({"x": "1"})),
            refused_after(apply("b", json!({"y": "2"}))),
            apply("c", json!({"z": "3"})),
        ]);
        assert_eq!(errors[1].as_ref().map(|e| e.reason), Some(Reason::Conflict));
        assert!(errors[0].is_none() && errors[2].is_none());
        assert_eq!(obj.as_map()["data"], json!({"a": "1", "x": "1", "z": "3"}));
        assert_eq!(managers(&obj), ["a", "base", "c"]);

        // The last write refused: the batch ends with the entries of the one before.
        let (obj, _) = batch(&[
            apply("a", json!({"x": "1"})),
            refused_after(apply("b", json!({"y": "2"}))),
        ]);
        assert_eq!(entries(&obj).as_array().unwrap().len(), 2);
    }

    #[test]
    fn a_json_patch_in_a_batch_reads_the_entries_as_json() {
        let (obj, errors) = batch(&[
            apply("a", json!({"x": "1"})),
            patched(
                PatchType::Json,
                "d",
                json!([{"op": "test", "path": "/metadata/managedFields/0/manager", "value": "a"},
                       {"op": "add", "path": "/data/w", "value": "ok"}]),
            ),
        ]);
        assert!(errors.iter().all(Option::is_none), "{errors:?}");
        assert_eq!(obj.as_map()["data"]["w"], "ok");
        // A merge patch replacing them replaces them, in a batch as anywhere.
        let (obj, errors) = batch(&[
            apply("a", json!({"x": "1"})),
            patched(
                PatchType::Merge,
                "e",
                json!({"metadata": {"managedFields": [{"manager": "renamed", "operation": "Apply",
                    "apiVersion": "v1", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:data": {"f:x": {}}}}]}}),
            ),
        ]);
        assert!(errors.iter().all(Option::is_none), "{errors:?}");
        assert_eq!(entries(&obj)[0]["manager"], "renamed");
    }
}
