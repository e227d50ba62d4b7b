//! Applying a strategic merge patch to a document.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Map, Value};

use super::list::{Identity, enforce_order};
use super::{DELETE_FROM_PRIMITIVE_LIST, PATCH, RETAIN_KEYS, SET_ELEMENT_ORDER, show};
use crate::limits::{MAX_DEPTH, canonical, check_depth, too_deep};
use crate::{ListStrategy, MergeSchema, PatchError};

type Object = Map<String, Value>;

/// Applies a strategic merge patch to a copy of `original`, with the list rules of `schema`.
///
/// `original` should be an object (anything else is treated as `{}`); `patch` must be one.
/// `$patch: delete` at the root yields `{}`. Directives never reach the result.
pub fn apply_strategic_merge_patch(
    original: &Value,
    patch: &Value,
    schema: &dyn MergeSchema,
) -> Result<Value, PatchError> {
    check_depth(original, "the document")?;
    check_depth(patch, "the patch")?;
    let patch = patch.as_object().ok_or_else(|| {
        PatchError::Malformed("a strategic merge patch must be a JSON object".into())
    })?;
    let original = original.as_object().cloned();
    let merged = Applier { schema }.merge_object(original, patch, &mut Vec::new(), 0)?;
    Ok(Value::Object(merged.unwrap_or_default()))
}

/// What a `$patch` directive asks of an object or list element.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Directive {
    Merge,
    Replace,
    Delete,
}

fn directive(object: &Object, path: &[&str]) -> Result<Directive, PatchError> {
    match object.get(PATCH) {
        None => Ok(Directive::Merge),
        Some(Value::String(s)) => match s.as_str() {
            "merge" => Ok(Directive::Merge),
            "replace" => Ok(Directive::Replace),
            "delete" => Ok(Directive::Delete),
            other => Err(PatchError::Malformed(format!(
                "unknown {PATCH} directive {other:?} at {}",
                show(path)
            ))),
        },
        Some(other) => Err(PatchError::Malformed(format!(
            "{PATCH} at {} must be a string, not {other}",
            show(path)
        ))),
    }
}

/// The parallel lists a patch object carries for one of its list fields.
#[derive(Default, Clone, Copy)]
struct ListDirectives<'a> {
    order: Option<&'a [Value]>,
    deletions: Option<&'a [Value]>,
}

/// Splits `name` if it is `<prefix>/<field>`; a key that starts with a directive prefix but
/// names no field is malformed rather than an ordinary field.
fn parallel_list_field<'a>(
    name: &'a str,
    prefix: &str,
    path: &[&str],
) -> Result<Option<&'a str>, PatchError> {
    let Some(rest) = name.strip_prefix(prefix) else {
        return Ok(None);
    };
    match rest.strip_prefix('/') {
        Some(field) => Ok(Some(field)),
        None => Err(PatchError::Malformed(format!(
            "{name:?} at {} must be of the form {prefix}/<field>",
            show(path)
        ))),
    }
}

fn as_list<'a>(value: &'a Value, name: &str, path: &[&str]) -> Result<&'a [Value], PatchError> {
    value
        .as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| PatchError::Malformed(format!("{name} at {} must be a list", show(path))))
}

struct Applier<'s> {
    schema: &'s dyn MergeSchema,
}

impl Applier<'_> {
    /// Merges `patch` into `original` (absent: merges into nothing, which still resolves
    /// directives and drops nulls). `None` means the object is deleted.
    fn merge_object<'a>(
        &self,
        original: Option<Object>,
        patch: &'a Object,
        path: &mut Vec<&'a str>,
        depth: usize,
    ) -> Result<Option<Object>, PatchError> {
        if depth > MAX_DEPTH {
            return Err(too_deep("the patch"));
        }
        let mut merged = match directive(patch, path)? {
            Directive::Delete => return Ok(None),
            Directive::Replace => Object::new(),
            Directive::Merge => original.unwrap_or_default(),
        };

        let mut fields: Vec<(&'a String, &'a Value)> = Vec::with_capacity(patch.len());
        let mut lists: BTreeMap<&'a str, ListDirectives<'a>> = BTreeMap::new();
        for (name, value) in patch {
            if name == PATCH || name == RETAIN_KEYS {
                continue;
            }
            if let Some(field) = parallel_list_field(name, SET_ELEMENT_ORDER, path)? {
                lists.entry(field).or_default().order = Some(as_list(value, name, path)?);
            } else if let Some(field) = parallel_list_field(name, DELETE_FROM_PRIMITIVE_LIST, path)?
            {
                lists.entry(field).or_default().deletions = Some(as_list(value, name, path)?);
            } else {
                fields.push((name, value));
            }
        }

        if let Some(retained) = patch.get(RETAIN_KEYS) {
            retain_keys(&mut merged, retained, &fields, path)?;
        }

        for &(name, value) in &fields {
            if value.is_null() {
                merged.remove(name);
                continue;
            }
            let current = merged.remove(name);
            path.push(name);
            let new = match value {
                Value::Object(patch) => {
                    // A map the schema replaces whole merges into nothing.
                    let current = current
                        .and_then(into_object)
                        .filter(|_| !self.schema.patch_replaces(path));
                    self.merge_object(current, patch, path, depth + 1)?
                        .map(Value::Object)
                }
                Value::Array(patch) => {
                    let directives = lists.get(name.as_str()).copied().unwrap_or_default();
                    let current = current.and_then(into_array);
                    Some(Value::Array(self.merge_list(
                        current,
                        Some(patch),
                        directives,
                        path,
                        depth + 1,
                    )?))
                }
                scalar => Some(scalar.clone()),
            };
            path.pop();
            if let Some(new) = new {
                merged.insert(name.clone(), new);
            }
        }

        // Parallel lists whose field the patch does not otherwise touch still reorder or
        // shrink the live list; with no live list they do nothing.
        let touched: HashSet<&str> = fields.iter().map(|(name, _)| name.as_str()).collect();
        for (field, directives) in lists {
            if touched.contains(field) {
                continue;
            }
            let Some(Value::Array(current)) = merged.get_mut(field) else {
                continue;
            };
            let current = std::mem::take(current);
            path.push(field);
            let list = self.merge_list(Some(current), None, directives, path, depth + 1)?;
            path.pop();
            merged.insert(field.to_owned(), Value::Array(list));
        }
        Ok(Some(merged))
    }

    /// Builds a new value from a patch value alone, as if merging into nothing.
    fn new_value<'a>(
        &self,
        patch: &'a Value,
        path: &mut Vec<&'a str>,
        depth: usize,
    ) -> Result<Option<Value>, PatchError> {
        match patch {
            Value::Object(patch) => Ok(self
                .merge_object(None, patch, path, depth + 1)?
                .map(Value::Object)),
            other => Ok(Some(other.clone())),
        }
    }

    fn merge_list<'a>(
        &self,
        original: Option<Vec<Value>>,
        patch: Option<&'a Vec<Value>>,
        directives: ListDirectives<'a>,
        path: &mut Vec<&'a str>,
        depth: usize,
    ) -> Result<Vec<Value>, PatchError> {
        if depth > MAX_DEPTH {
            return Err(too_deep("the patch"));
        }
        let mut merged = match self.schema.patch_strategy(path) {
            ListStrategy::Set => return self.merge_set(original, patch, directives, path),
            ListStrategy::Replace => match patch {
                Some(patch) => self.replacement(patch, path, depth)?,
                None => original.unwrap_or_default(),
            },
            ListStrategy::MergeByKeys(keys) => {
                self.merge_keyed(original, patch, directives, &keys, path, depth)?
            }
        };
        // Kubernetes honours the parallel deletion list on any list, not only on sets.
        if let Some(deletions) = directives.deletions {
            let doomed: HashSet<String> = deletions.iter().map(canonical).collect();
            merged.retain(|element| !doomed.contains(&canonical(element)));
        }
        Ok(merged)
    }

    /// A list that replaces the live one: list-level `$patch` markers are dropped, and object
    /// elements are built as new values so no directive or `null` is stored.
    fn replacement<'a>(
        &self,
        patch: &'a [Value],
        path: &mut Vec<&'a str>,
        depth: usize,
    ) -> Result<Vec<Value>, PatchError> {
        let mut out = Vec::with_capacity(patch.len());
        for element in patch {
            if is_replace_marker(element) {
                continue;
            }
            out.extend(self.new_value(element, path, depth)?);
        }
        Ok(out)
    }

    fn merge_set(
        &self,
        original: Option<Vec<Value>>,
        patch: Option<&Vec<Value>>,
        directives: ListDirectives<'_>,
        path: &[&str],
    ) -> Result<Vec<Value>, PatchError> {
        let identity = Identity::Value;
        let live: Vec<Option<String>> = original.iter().flatten().map(|v| identity.of(v)).collect();
        let mut merged = original.unwrap_or_default();

        let mut members = Vec::new();
        for element in patch.into_iter().flatten() {
            match element
                .as_object()
                .map(|o| directive(o, path))
                .transpose()?
            {
                Some(Directive::Replace) => {
                    return Ok(patch
                        .into_iter()
                        .flatten()
                        .filter(|v| !is_replace_marker(v))
                        .cloned()
                        .collect());
                }
                Some(Directive::Delete) => {
                    return Err(PatchError::Malformed(format!(
                        "{PATCH}: delete in the set at {} (use {DELETE_FROM_PRIMITIVE_LIST}/<field>)",
                        show(path)
                    )));
                }
                Some(Directive::Merge) | None => members.push(element),
            }
        }

        // Deletions go first so that a value both removed and re-added ends up present.
        if let Some(deletions) = directives.deletions {
            let doomed: HashSet<String> = deletions.iter().map(canonical).collect();
            merged.retain(|element| !doomed.contains(&canonical(element)));
        }
        if patch.is_some() {
            // Kubernetes de-duplicates the whole list when a patch adds to it.
            let mut seen = HashSet::with_capacity(merged.len() + members.len());
            merged.retain(|element| seen.insert(canonical(element)));
            for member in &members {
                if seen.insert(canonical(member)) {
                    merged.push((*member).clone());
                }
            }
        }

        let patch_order: Vec<String> = members.iter().map(|v| canonical(v)).collect();
        let order = match directives.order {
            Some(order) => {
                let order: Vec<String> = order.iter().map(canonical).collect();
                check_order(&patch_order, &order, path)?;
                order
            }
            None if patch_order.is_empty() => return Ok(merged),
            None => patch_order,
        };
        Ok(enforce_order(merged, &identity, &order, &live))
    }

    fn merge_keyed<'a>(
        &self,
        original: Option<Vec<Value>>,
        patch: Option<&'a Vec<Value>>,
        directives: ListDirectives<'a>,
        keys: &[String],
        path: &mut Vec<&'a str>,
        depth: usize,
    ) -> Result<Vec<Value>, PatchError> {
        let defaults: Vec<Option<Value>> = keys
            .iter()
            .map(|key| self.schema.merge_key_default(path, key))
            .collect();
        let identity = Identity::Keys {
            keys,
            defaults: &defaults,
        };
        let missing_key = |path: &[&str]| {
            PatchError::Malformed(format!(
                "an element of the list at {} does not contain its merge key ({})",
                show(path),
                keys.join(", ")
            ))
        };
        let live: Vec<Option<String>> = original.iter().flatten().map(|v| identity.of(v)).collect();
        let mut merged = original.unwrap_or_default();

        let patch = patch.map(Vec::as_slice).unwrap_or_default();
        if patch.iter().any(is_replace_marker) {
            return self.replacement(patch, path, depth);
        }

        let mut elements: Vec<(&'a Object, String)> = Vec::with_capacity(patch.len());
        let mut doomed: HashSet<String> = HashSet::new();
        for element in patch {
            let object = element.as_object().ok_or_else(|| {
                PatchError::Malformed(format!(
                    "the list at {} merges by key: its elements must be objects",
                    show(path)
                ))
            })?;
            let id = identity
                .of_object(object)
                .ok_or_else(|| missing_key(path))?;
            match directive(object, path)? {
                Directive::Delete => {
                    doomed.insert(id);
                }
                Directive::Merge | Directive::Replace => elements.push((object, id)),
            }
        }
        // Deletions go first, as in Kubernetes: a deleted key that the patch also merges is
        // added afresh. One pass, however many elements are deleted.
        if !doomed.is_empty() {
            merged.retain(|v| identity.of(v).is_none_or(|id| !doomed.contains(&id)));
        }

        let mut index: HashMap<String, usize> = HashMap::with_capacity(merged.len());
        for (i, element) in merged.iter().enumerate() {
            if let Some(id) = identity.of(element) {
                index.entry(id).or_insert(i);
            }
        }
        for (object, id) in &elements {
            match index.get(id).and_then(|&i| merged.get_mut(i)) {
                Some(slot) => {
                    let current = into_object(std::mem::take(slot));
                    let new = self.merge_object(current, object, path, depth + 1)?;
                    *slot = Value::Object(new.unwrap_or_default());
                }
                None => {
                    if let Some(new) = self.merge_object(None, object, path, depth + 1)? {
                        index.insert(id.clone(), merged.len());
                        merged.push(Value::Object(new));
                    }
                }
            }
        }

        let patch_order: Vec<String> = elements.into_iter().map(|(_, id)| id).collect();
        let order = match directives.order {
            Some(order) => {
                let order = order
                    .iter()
                    .map(|v| identity.of(v).ok_or_else(|| missing_key(path)))
                    .collect::<Result<Vec<_>, _>>()?;
                check_order(&patch_order, &order, path)?;
                order
            }
            None if patch_order.is_empty() => return Ok(merged),
            None => patch_order,
        };
        Ok(enforce_order(merged, &identity, &order, &live))
    }
}

/// `$setElementOrder` must list the patch's elements in the patch's order (it may list more).
fn check_order(patch: &[String], order: &[String], path: &[&str]) -> Result<(), PatchError> {
    let mut order = order.iter();
    if patch.iter().all(|id| order.any(|o| o == id)) {
        Ok(())
    } else {
        Err(PatchError::Malformed(format!(
            "the order of the list at {} does not match its {SET_ELEMENT_ORDER} list",
            show(path)
        )))
    }
}

/// Clears the fields `$retainKeys` does not list, after checking the patch sets none of them.
fn retain_keys(
    merged: &mut Object,
    retained: &Value,
    fields: &[(&String, &Value)],
    path: &[&str],
) -> Result<(), PatchError> {
    let bad = || {
        PatchError::Malformed(format!(
            "{RETAIN_KEYS} at {} must list every field the patch sets",
            show(path)
        ))
    };
    let retained: HashSet<&str> = retained
        .as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|v| v.as_str().ok_or_else(bad))
        .collect::<Result<_, _>>()?;
    if fields
        .iter()
        .any(|(name, value)| !value.is_null() && !retained.contains(name.as_str()))
    {
        return Err(bad());
    }
    merged.retain(|name, _| retained.contains(name.as_str()));
    Ok(())
}

fn is_replace_marker(element: &Value) -> bool {
    element.get(PATCH).and_then(Value::as_str) == Some("replace")
}

fn into_object(value: Value) -> Option<Object> {
    match value {
        Value::Object(object) => Some(object),
        _ => None,
    }
}

fn into_array(value: Value) -> Option<Vec<Value>> {
    match value {
        Value::Array(items) => Some(items),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BuiltinSchema;
    use serde_json::json;

    fn pod() -> BuiltinSchema {
        BuiltinSchema::for_kind("v1", "Pod").unwrap()
    }

    fn apply(doc: Value, patch: Value) -> Result<Value, PatchError> {
        apply_strategic_merge_patch(&doc, &patch, &pod())
    }

    #[test]
    fn patch_merge_is_the_default_merge() {
        let got = apply(
            json!({"spec": {"a": 1}}),
            json!({"spec": {"$patch": "merge", "b": 2}}),
        );
        assert_eq!(got, Ok(json!({"spec": {"a": 1, "b": 2}})));
        let got = apply(
            json!({"spec": {"containers": [{"name": "a", "image": "x"}]}}),
            json!({"spec": {"containers": [{"name": "a", "$patch": "merge", "tty": true}]}}),
        );
        assert_eq!(
            got,
            Ok(json!({"spec": {"containers": [{"name": "a", "image": "x", "tty": true}]}}))
        );
    }

    #[test]
    fn replace_in_a_nested_map_replaces_only_that_map() {
        let got = apply(
            json!({"metadata": {"labels": {"a": "1", "b": "2"}, "name": "p"}}),
            json!({"metadata": {"labels": {"$patch": "replace", "c": "3"}}}),
        );
        assert_eq!(
            got,
            Ok(json!({"metadata": {"labels": {"c": "3"}, "name": "p"}}))
        );
    }

    #[test]
    fn delete_at_the_root_leaves_an_empty_object() {
        assert_eq!(
            apply(json!({"a": 1}), json!({"$patch": "delete"})),
            Ok(json!({}))
        );
    }

    #[test]
    fn directives_and_nulls_never_reach_the_document() {
        // Merged into nothing: the list is new, the map is new.
        let got = apply(
            json!({}),
            json!({"spec": {
                "containers": [
                    {"name": "a", "image": "x", "env": [{"name": "E", "value": null}]},
                    {"name": "gone", "$patch": "delete"},
                ],
                "$setElementOrder/containers": [{"name": "a"}],
                "nodeSelector": {"$patch": "replace", "disk": "ssd", "zone": null},
                "tolerations": [{"$patch": "replace"}, {"key": "k", "value": null}],
            }}),
        );
        assert_eq!(
            got,
            Ok(json!({"spec": {
                "containers": [{"name": "a", "image": "x", "env": [{"name": "E"}]}],
                "nodeSelector": {"disk": "ssd"},
                "tolerations": [{"key": "k"}],
            }}))
        );
    }

    #[test]
    fn a_value_of_another_type_is_replaced() {
        let got = apply(
            json!({"spec": {"containers": {"oops": 1}, "hostname": ["x"]}}),
            json!({"spec": {"containers": [{"name": "a"}], "hostname": {"h": 1}}}),
        );
        assert_eq!(
            got,
            Ok(json!({"spec": {"containers": [{"name": "a"}], "hostname": {"h": 1}}}))
        );
    }

    #[test]
    fn bad_directives_are_malformed() {
        let cases = [
            json!([]),
            json!({"$patch": 1}),
            json!({"$patch": "explode"}),
            json!({"spec": {"containers": [{"name": "a", "$patch": "explode"}]}}),
            json!({"spec": {"containers": ["a"]}}),
            json!({"spec": {"containers": [{"image": "no-name"}]}}),
            json!({"spec": {"containers": [{"$patch": "delete"}]}}),
            json!({"spec": {"$setElementOrder/containers": [{"image": "no-name"}]}}),
            json!({"spec": {"$setElementOrder/containers": {"name": "a"}}}),
            json!({"spec": {"$deleteFromPrimitiveList/containers": "a"}}),
            json!({"spec": {"$deleteFromPrimitiveListcontainers": ["a"]}}),
            json!({"spec": {"$retainKeys": "a"}}),
            json!({"spec": {"$retainKeys": [1]}}),
            json!({"metadata": {"finalizers": [{"$patch": "delete"}]}}),
        ];
        for patch in cases {
            let got = apply(
                json!({"spec": {"containers": [{"name": "a"}]}}),
                patch.clone(),
            );
            assert!(
                matches!(got, Err(PatchError::Malformed(_))),
                "{patch}: {got:?}"
            );
        }
    }

    #[test]
    fn too_deep_documents_are_malformed() {
        let mut deep = json!(1);
        for _ in 0..=MAX_DEPTH {
            deep = json!({ "a": deep });
        }
        assert!(matches!(
            apply(json!({}), deep.clone()),
            Err(PatchError::Malformed(_))
        ));
        assert!(matches!(
            apply(deep, json!({})),
            Err(PatchError::Malformed(_))
        ));
    }

    #[test]
    fn an_original_that_is_not_an_object_is_empty() {
        assert_eq!(apply(json!([1, 2]), json!({"a": 1})), Ok(json!({"a": 1})));
    }
}
