//! Computing strategic merge patches: two-way (original → modified) and three-way (apply).
//!
//! One engine does both. It walks `modified` against the `live` document for additions and
//! changes and against `last` (the last-applied configuration) for deletions; a two-way patch
//! is the three-way patch whose last-applied and live documents are both the original.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::list::Identity;
use super::{
    DELETE_FROM_PRIMITIVE_LIST, PATCH, RETAIN_KEYS, SET_ELEMENT_ORDER, check_no_directive_keys,
};
use crate::limits::{MAX_DEPTH, canonical, check_depth, too_deep};
use crate::{ListStrategy, MergeSchema, PatchError};

type Object = Map<String, Value>;

/// The smallest strategic merge patch that turns `original` into `modified`.
///
/// Deleted fields become `null`, elements missing from keyed lists `$patch: delete`, values
/// missing from sets `$deleteFromPrimitiveList/<field>`; `$setElementOrder/<field>` accompanies
/// any change to a merged list, and `$retainKeys` any change to a union, as in Kubernetes. A
/// keyed list whose elements lack their key or repeat one cannot be patched element by element
/// and is replaced whole (`{"$patch": "replace"}` first). Applying the patch to `original`
/// gives `modified` whenever `modified` has no `null` member (a patch's `null` deletes).
/// Documents with a field named like a directive (`$patch`, `$retainKeys`,
/// `$setElementOrder/…`, `$deleteFromPrimitiveList/…`) are refused as malformed.
pub fn create_two_way_merge_patch(
    original: &Value,
    modified: &Value,
    schema: &dyn MergeSchema,
) -> Result<Value, PatchError> {
    check_depth(original, "the original document")?;
    check_depth(modified, "the modified document")?;
    check_no_directive_keys(original, "the original document")?;
    check_no_directive_keys(modified, "the modified document")?;
    let original = document(original, "the original document")?;
    let modified = document(modified, "the modified document")?;
    let differ = Differ {
        schema,
        overwrite: true,
    };
    let patch = differ.diff_object(
        Some(original),
        modified,
        original,
        false,
        &mut Trail::default(),
        0,
    )?;
    Ok(Value::Object(patch))
}

/// The patch `kubectl apply` sends: it makes the fields `modified` sets equal to it in `live`,
/// deletes the fields `last_applied` set and `modified` no longer does, and keeps every field
/// only `live` has (set by other writers, defaults, status).
///
/// `last_applied` is the previous configuration (the annotation
/// `kubectl.kubernetes.io/last-applied-configuration`), `None` on the first apply. With
/// `overwrite == false`, a change to a field whose live value differs from `last_applied`
/// (another writer changed it) is refused with [`PatchError::Conflict`]; with `true` the
/// configuration wins. The patch always applies to `live`; the configurations may not have
/// fields named like directives (see [`create_two_way_merge_patch`]).
pub fn create_three_way_merge_patch(
    last_applied: Option<&Value>,
    modified: &Value,
    live: &Value,
    schema: &dyn MergeSchema,
    overwrite: bool,
) -> Result<Value, PatchError> {
    let empty = Object::new();
    let last = match last_applied {
        Some(last) => {
            check_depth(last, "the last-applied configuration")?;
            check_no_directive_keys(last, "the last-applied configuration")?;
            document(last, "the last-applied configuration")?
        }
        None => &empty,
    };
    check_depth(modified, "the modified document")?;
    check_depth(live, "the live document")?;
    check_no_directive_keys(modified, "the modified document")?;
    let modified = document(modified, "the modified document")?;
    let live = document(live, "the live document")?;
    let differ = Differ { schema, overwrite };
    let patch = differ.diff_object(Some(last), modified, live, false, &mut Trail::default(), 0)?;
    Ok(Value::Object(patch))
}

fn document<'v>(value: &'v Value, what: &str) -> Result<&'v Object, PatchError> {
    value
        .as_object()
        .ok_or_else(|| PatchError::Malformed(format!("{what} must be a JSON object")))
}

/// Where the engine is, for schema lookups (field names) and conflict messages (with the keys
/// of list elements).
#[derive(Default)]
struct Trail<'a> {
    segments: Vec<Segment<'a>>,
}

enum Segment<'a> {
    Field(&'a str),
    Element(String),
}

impl<'a> Trail<'a> {
    fn fields(&self) -> Vec<&'a str> {
        self.segments
            .iter()
            .filter_map(|s| match s {
                Segment::Field(name) => Some(*name),
                Segment::Element(_) => None,
            })
            .collect()
    }

    fn render(&self) -> String {
        let mut out = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Field(name) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(name);
                }
                Segment::Element(label) => out.push_str(label),
            }
        }
        out
    }
}

/// `[name=app]`: how a conflict message names a keyed list element.
fn element_label(element: &Value, keys: &[String]) -> String {
    let parts: Vec<String> = keys
        .iter()
        .filter_map(|key| {
            let value = element.get(key)?;
            Some(match value {
                Value::String(s) => format!("{key}={s}"),
                other => format!("{key}={other}"),
            })
        })
        .collect();
    format!("[{}]", parts.join(","))
}

/// `{"$patch": "replace"}` followed by the elements: a list that replaces the live one.
fn replacing(elements: Vec<Value>) -> Value {
    let mut list = Vec::with_capacity(elements.len() + 1);
    list.push(Value::Object(Object::from_iter([(
        PATCH.to_owned(),
        Value::String("replace".into()),
    )])));
    list.extend(elements);
    Value::Array(list)
}

/// The object holding only the merge keys an element spells out (defaulted keys stay implicit).
fn key_fields(element: &Object, keys: &[String]) -> Object {
    keys.iter()
        .filter_map(|key| Some((key.clone(), element.get(key)?.clone())))
        .collect()
}

/// `{<keys>, "$patch": "delete"}`: removes every element with these keys.
fn delete_directive(element: &Object, keys: &[String]) -> Value {
    let mut directive = key_fields(element, keys);
    directive.insert(PATCH.to_owned(), Value::String("delete".into()));
    Value::Object(directive)
}

/// The three versions of one list field.
#[derive(Clone, Copy)]
struct Lists<'a> {
    /// As last applied (`None`: the field was not set).
    last: Option<&'a [Value]>,
    /// As the modified document has it.
    wanted: &'a [Value],
    /// As the live document has it.
    current: &'a [Value],
}

struct Differ<'s> {
    schema: &'s dyn MergeSchema,
    /// Whether a change to a field another writer changed is made anyway (else: conflict).
    overwrite: bool,
}

impl Differ<'_> {
    /// Refuses the patch if it changes the field at `trail` and `changed_by_others` holds.
    fn check_conflict(&self, changed_by_others: bool, trail: &Trail<'_>) -> Result<(), PatchError> {
        if changed_by_others && !self.overwrite {
            Err(PatchError::Conflict {
                path: trail.render(),
            })
        } else {
            Ok(())
        }
    }

    /// The patch for one object. `retain` says the object is a union (`$retainKeys`).
    fn diff_object<'a>(
        &self,
        last: Option<&'a Object>,
        modified: &'a Object,
        live: &'a Object,
        retain: bool,
        trail: &mut Trail<'a>,
        depth: usize,
    ) -> Result<Object, PatchError> {
        if depth > MAX_DEPTH {
            return Err(too_deep("the document"));
        }
        let mut patch = Object::new();
        for (name, wanted) in modified {
            let last_value = last.and_then(|last| last.get(name));
            trail.segments.push(Segment::Field(name));
            match (wanted, live.get(name)) {
                (_, None) => {
                    // Absent live but present when last applied: someone deleted it.
                    self.check_conflict(last_value.is_some() && !wanted.is_null(), trail)?;
                    patch.insert(name.clone(), self.new_value(wanted, trail, depth + 1)?);
                }
                (Value::Object(_), Some(current @ Value::Object(_)))
                    if self.schema.patch_replaces(&trail.fields()) =>
                {
                    // A map the schema replaces whole is sent whole when it changes.
                    if wanted != current {
                        self.check_conflict(last_value != Some(current), trail)?;
                        patch.insert(name.clone(), self.new_value(wanted, trail, depth + 1)?);
                    }
                }
                (Value::Object(wanted), Some(Value::Object(current))) => {
                    let retain = self.schema.retain_keys(&trail.fields());
                    let last_object = last_value.and_then(Value::as_object);
                    let sub =
                        self.diff_object(last_object, wanted, current, retain, trail, depth + 1)?;
                    if !sub.is_empty() {
                        patch.insert(name.clone(), Value::Object(sub));
                    }
                }
                (Value::Array(wanted), Some(Value::Array(current))) => {
                    let lists = Lists {
                        last: last_value.and_then(Value::as_array).map(Vec::as_slice),
                        wanted,
                        current,
                    };
                    self.diff_list(name, lists, &mut patch, trail, depth + 1)?;
                }
                (wanted, Some(current)) => {
                    if wanted != current {
                        self.check_conflict(last_value != Some(current), trail)?;
                        patch.insert(name.clone(), self.new_value(wanted, trail, depth + 1)?);
                    }
                }
            }
            trail.segments.pop();
        }

        for (name, last_value) in last.into_iter().flatten() {
            if modified.contains_key(name) {
                continue;
            }
            trail.segments.push(Segment::Field(name));
            // Deleting what is already gone is no conflict; deleting what changed is.
            let changed = live.get(name).is_some_and(|current| current != last_value);
            self.check_conflict(changed, trail)?;
            trail.segments.pop();
            patch.insert(name.clone(), Value::Null);
        }

        if retain {
            let extra_live = live
                .iter()
                .any(|(name, value)| !value.is_null() && !modified.contains_key(name));
            let mut kept: Vec<&String> = modified
                .iter()
                .filter(|(_, value)| !value.is_null())
                .map(|(name, _)| name)
                .collect();
            if !kept.is_empty() && (!patch.is_empty() || extra_live) {
                kept.sort();
                let kept = kept.into_iter().map(|name| Value::String(name.clone()));
                patch.insert(RETAIN_KEYS.to_owned(), Value::Array(kept.collect()));
            }
        }
        Ok(patch)
    }

    /// Adds to `patch` what turns the `current` list at `name` into the `wanted` one.
    fn diff_list<'a>(
        &self,
        name: &'a str,
        lists: Lists<'a>,
        patch: &mut Object,
        trail: &mut Trail<'a>,
        depth: usize,
    ) -> Result<(), PatchError> {
        let Lists {
            last,
            wanted,
            current,
        } = lists;
        let fields = trail.fields();
        match self.schema.patch_strategy(&fields) {
            ListStrategy::Replace => {
                if wanted != current {
                    self.check_conflict(last != Some(current), trail)?;
                    let list = self.new_list(wanted, &ListStrategy::Replace, trail, depth)?;
                    patch.insert(name.to_owned(), list);
                }
                Ok(())
            }
            ListStrategy::Set => {
                self.diff_set(name, lists, patch);
                Ok(())
            }
            ListStrategy::MergeByKeys(keys) => {
                self.diff_keyed(name, &keys, lists, patch, trail, depth)
            }
        }
    }

    fn diff_set(&self, name: &str, lists: Lists<'_>, patch: &mut Object) {
        let Lists {
            last,
            wanted,
            current,
        } = lists;
        let identity = Identity::Value;
        // A set merge can drop duplicates but never make them: a wanted list with duplicates
        // replaces the live one (Kubernetes merges of sets never conflict, nor does this).
        let Some(wanted_ids) = identity.of_all_unique(wanted) else {
            if wanted != current {
                patch.insert(name.to_owned(), replacing(wanted.to_vec()));
            }
            return;
        };
        if current.is_empty() {
            if !wanted.is_empty() {
                patch.insert(name.to_owned(), Value::Array(wanted.to_vec()));
            }
            return;
        }
        let current_ids: Vec<String> = current.iter().map(canonical).collect();
        let current_set: HashSet<&str> = current_ids.iter().map(String::as_str).collect();
        let wanted_set: HashSet<&str> = wanted_ids.iter().map(String::as_str).collect();
        // Applying a list of additions, even an empty one, de-duplicates the live list.
        let deduplicate = current_set.len() != current_ids.len();

        let additions: Vec<Value> = wanted
            .iter()
            .zip(&wanted_ids)
            .filter(|(_, id)| !current_set.contains(id.as_str()))
            .map(|(value, _)| value.clone())
            .collect();
        let mut deleted = HashSet::new();
        let deletions: Vec<Value> = last
            .into_iter()
            .flatten()
            .filter(|value| {
                let id = canonical(value);
                !wanted_set.contains(id.as_str()) && deleted.insert(id)
            })
            .cloned()
            .collect();
        let reordered = !current_ids
            .iter()
            .filter(|id| wanted_set.contains(id.as_str()))
            .eq(wanted_ids.iter());

        let changed = !additions.is_empty() || !deletions.is_empty() || reordered;
        if !additions.is_empty() || deduplicate {
            patch.insert(name.to_owned(), Value::Array(additions));
        }
        if !deletions.is_empty() {
            patch.insert(
                format!("{DELETE_FROM_PRIMITIVE_LIST}/{name}"),
                Value::Array(deletions),
            );
        }
        if changed && !wanted.is_empty() {
            patch.insert(
                format!("{SET_ELEMENT_ORDER}/{name}"),
                Value::Array(wanted.to_vec()),
            );
        }
    }

    fn diff_keyed<'a>(
        &self,
        name: &'a str,
        keys: &[String],
        lists: Lists<'a>,
        patch: &mut Object,
        trail: &mut Trail<'a>,
        depth: usize,
    ) -> Result<(), PatchError> {
        let Lists {
            last,
            wanted,
            current,
        } = lists;
        let fields = trail.fields();
        let defaults: Vec<Option<Value>> = keys
            .iter()
            .map(|key| self.schema.merge_key_default(&fields, key))
            .collect();
        let identity = Identity::Keys {
            keys,
            defaults: &defaults,
        };
        // Elements without their keys, or a wanted list repeating a key, cannot be patched
        // element by element: the list is replaced.
        let ids = (
            identity.of_all_unique(wanted),
            current
                .iter()
                .map(|element| identity.of(element))
                .collect::<Option<Vec<String>>>(),
        );
        let (Some(wanted_ids), Some(current_ids)) = ids else {
            if wanted != current {
                self.check_conflict(last != Some(current), trail)?;
                let elements = self.new_elements(wanted, &ListStrategy::Replace, trail, depth)?;
                patch.insert(name.to_owned(), replacing(elements));
            }
            return Ok(());
        };
        if current.is_empty() {
            if !wanted.is_empty() {
                let strategy = ListStrategy::MergeByKeys(keys.to_vec());
                patch.insert(
                    name.to_owned(),
                    self.new_list(wanted, &strategy, trail, depth)?,
                );
            }
            return Ok(());
        }

        let mut current_at: HashMap<&str, usize> = HashMap::with_capacity(current_ids.len());
        let mut repeated: HashSet<&str> = HashSet::new();
        for (i, id) in current_ids.iter().enumerate() {
            if current_at.insert(id.as_str(), i).is_some() {
                repeated.insert(id.as_str());
            }
        }
        let mut last_at: HashMap<String, &'a Value> = HashMap::new();
        for element in last.into_iter().flatten() {
            if let Some(id) = identity.of(element) {
                last_at.entry(id).or_insert(element);
            }
        }
        let retain = self.schema.retain_keys(&fields);

        let mut list = Vec::new();
        for (element, id) in wanted.iter().zip(&wanted_ids) {
            trail
                .segments
                .push(Segment::Element(element_label(element, keys)));
            let last_element = last_at.get(id).copied();
            let live_element = current_at.get(id.as_str()).and_then(|&i| current.get(i));
            if repeated.contains(id.as_str()) {
                // A merge would reach only one of the live duplicates: delete them all (the
                // deletion is applied first) and add the wanted element afresh.
                if let Some(object) = element.as_object() {
                    list.push(delete_directive(object, keys));
                }
                list.push(self.new_value(element, trail, depth + 1)?);
                trail.segments.pop();
                continue;
            }
            match (element.as_object(), live_element.and_then(Value::as_object)) {
                (Some(wanted_object), Some(live_object)) => {
                    let last_object = last_element.and_then(Value::as_object);
                    let mut sub = self.diff_object(
                        last_object,
                        wanted_object,
                        live_object,
                        retain,
                        trail,
                        depth + 1,
                    )?;
                    if !sub.is_empty() {
                        sub.extend(key_fields(wanted_object, keys));
                        list.push(Value::Object(sub));
                    }
                }
                _ => {
                    // New to the live list; if it was applied before, someone removed it.
                    self.check_conflict(last_element.is_some(), trail)?;
                    list.push(self.new_value(element, trail, depth + 1)?);
                }
            }
            trail.segments.pop();
        }

        let wanted_set: HashSet<&str> = wanted_ids.iter().map(String::as_str).collect();
        let mut deleted = HashSet::new();
        for element in last.into_iter().flatten() {
            let Some(object) = element.as_object() else {
                continue;
            };
            let Some(id) = identity.of_object(object) else {
                continue;
            };
            if wanted_set.contains(id.as_str()) || !deleted.insert(id.clone()) {
                continue;
            }
            trail
                .segments
                .push(Segment::Element(element_label(element, keys)));
            let live_element = current_at.get(id.as_str()).and_then(|&i| current.get(i));
            self.check_conflict(live_element.is_some_and(|live| live != element), trail)?;
            trail.segments.pop();
            list.push(delete_directive(object, keys));
        }

        let reordered = !current_ids
            .iter()
            .filter(|id| wanted_set.contains(id.as_str()))
            .eq(wanted_ids.iter());
        let changed = !list.is_empty() || reordered;
        if !list.is_empty() {
            patch.insert(name.to_owned(), Value::Array(list));
        }
        if changed && !wanted.is_empty() {
            let order = wanted
                .iter()
                .filter_map(Value::as_object)
                .map(|element| Value::Object(key_fields(element, keys)));
            patch.insert(
                format!("{SET_ELEMENT_ORDER}/{name}"),
                Value::Array(order.collect()),
            );
        }
        Ok(())
    }

    /// The patch value that creates `wanted` (the value at `trail`) where nothing is: `wanted`
    /// itself, except that lists which could not be merged into an empty list are marked as
    /// replacements.
    fn new_value<'a>(
        &self,
        wanted: &'a Value,
        trail: &mut Trail<'a>,
        depth: usize,
    ) -> Result<Value, PatchError> {
        if depth > MAX_DEPTH {
            return Err(too_deep("the document"));
        }
        match wanted {
            Value::Object(object) => {
                let mut out = Object::new();
                for (name, value) in object {
                    trail.segments.push(Segment::Field(name));
                    let value = self.new_value(value, trail, depth + 1)?;
                    trail.segments.pop();
                    out.insert(name.clone(), value);
                }
                Ok(Value::Object(out))
            }
            Value::Array(list) => {
                let strategy = self.schema.patch_strategy(&trail.fields());
                self.new_list(list, &strategy, trail, depth)
            }
            other => Ok(other.clone()),
        }
    }

    fn new_list<'a>(
        &self,
        wanted: &'a [Value],
        strategy: &ListStrategy,
        trail: &mut Trail<'a>,
        depth: usize,
    ) -> Result<Value, PatchError> {
        let mergeable = match strategy {
            ListStrategy::Replace => true,
            ListStrategy::Set => Identity::Value.of_all_unique(wanted).is_some(),
            ListStrategy::MergeByKeys(keys) => {
                let defaults: Vec<Option<Value>> = keys
                    .iter()
                    .map(|key| self.schema.merge_key_default(&trail.fields(), key))
                    .collect();
                let identity = Identity::Keys {
                    keys,
                    defaults: &defaults,
                };
                identity.of_all_unique(wanted).is_some()
            }
        };
        let elements = self.new_elements(wanted, strategy, trail, depth)?;
        Ok(if mergeable {
            Value::Array(elements)
        } else {
            replacing(elements)
        })
    }

    fn new_elements<'a>(
        &self,
        wanted: &'a [Value],
        strategy: &ListStrategy,
        trail: &mut Trail<'a>,
        depth: usize,
    ) -> Result<Vec<Value>, PatchError> {
        match strategy {
            // Set members are stored as they are, and so are lists nested in lists; object
            // elements of other lists are merged into nothing on apply, so their own lists
            // need the same care.
            ListStrategy::Set => Ok(wanted.to_vec()),
            _ => wanted
                .iter()
                .map(|element| match element {
                    Value::Object(_) => self.new_value(element, trail, depth + 1),
                    other => Ok(other.clone()),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BuiltinSchema, apply_strategic_merge_patch};
    use serde_json::json;

    fn pod() -> BuiltinSchema {
        BuiltinSchema::for_kind("v1", "Pod").unwrap()
    }

    /// The two-way patch, after checking it turns `original` into `modified`.
    fn two_way(original: Value, modified: Value) -> Value {
        let patch = create_two_way_merge_patch(&original, &modified, &pod()).unwrap();
        let applied = apply_strategic_merge_patch(&original, &patch, &pod()).unwrap();
        assert_eq!(applied, modified, "patch {patch}");
        patch
    }

    #[test]
    fn identical_documents_give_an_empty_patch() {
        let pod = json!({"spec": {"containers": [{"name": "a", "env": [{"name": "E"}]}]}});
        assert_eq!(two_way(pod.clone(), pod), json!({}));
    }

    #[test]
    fn a_keyed_list_that_cannot_be_merged_is_replaced() {
        // An element without its key, then a wanted list that repeats a key.
        let patch = two_way(
            json!({"spec": {"containers": [{"name": "a"}]}}),
            json!({"spec": {"containers": [{"name": "a"}, {"image": "nameless"}]}}),
        );
        assert_eq!(
            patch,
            json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "a"}, {"image": "nameless"}]}})
        );
        two_way(
            json!({"spec": {"containers": [{"name": "a"}]}}),
            json!({"spec": {"containers": [{"name": "a"}, {"name": "a", "image": "twin"}]}}),
        );
        // A new value holding such a list is marked too, or it could not be applied.
        two_way(
            json!({}),
            json!({"spec": {"containers": [{"image": "nameless", "env": [{"value": "x"}]}]}}),
        );
        two_way(
            json!({"spec": 1}),
            json!({"spec": {"volumes": [{"name": "v"}, {"name": "v"}]}}),
        );
    }

    #[test]
    fn live_duplicates_of_a_wanted_key_are_collapsed() {
        let patch = two_way(
            json!({"spec": {"containers": [{"name": "a", "env": [
                {"name": "E", "value": "1"}, {"name": "F"}, {"name": "E", "value": "2"},
            ]}]}}),
            json!({"spec": {"containers": [{"name": "a", "env": [{"name": "E", "value": "3"}, {"name": "F"}]}]}}),
        );
        assert_eq!(
            patch["spec"]["containers"][0]["env"],
            json!([{"name": "E", "$patch": "delete"}, {"name": "E", "value": "3"}])
        );
    }

    #[test]
    fn sets_with_duplicates_round_trip() {
        two_way(
            json!({"metadata": {"finalizers": ["a", "a", "b"]}}),
            json!({"metadata": {"finalizers": ["a", "b"]}}),
        );
        let patch = two_way(
            json!({"metadata": {"finalizers": ["a"]}}),
            json!({"metadata": {"finalizers": ["a", "b", "a"]}}),
        );
        assert_eq!(
            patch,
            json!({"metadata": {"finalizers": [{"$patch": "replace"}, "a", "b", "a"]}})
        );
    }

    #[test]
    fn type_changes_and_reorders_round_trip() {
        two_way(
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}], "x": [1], "y": {"z": 1}}}),
            json!({"spec": {"containers": [{"name": "b"}, {"name": "a"}], "x": {"k": [2]}, "y": "flat"}}),
        );
        let patch = two_way(
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"metadata": {"finalizers": ["b", "a"]}}),
        );
        assert_eq!(
            patch,
            json!({"metadata": {"$setElementOrder/finalizers": ["b", "a"]}})
        );
    }

    #[test]
    fn documents_must_be_objects() {
        let err = create_two_way_merge_patch(&json!([]), &json!({}), &pod());
        assert!(matches!(err, Err(PatchError::Malformed(_))));
        let err =
            create_three_way_merge_patch(Some(&json!(1)), &json!({}), &json!({}), &pod(), true);
        assert!(matches!(err, Err(PatchError::Malformed(_))));
    }

    #[test]
    fn conflicts_name_the_field_and_the_element() {
        let last = json!({"spec": {"containers": [{"name": "app", "image": "v1"}]}});
        let live = json!({"spec": {"containers": [{"name": "app", "image": "v1-hotfix"}]}});
        let file = json!({"spec": {"containers": [{"name": "app", "image": "v2"}]}});
        let got = create_three_way_merge_patch(Some(&last), &file, &live, &pod(), false);
        assert_eq!(
            got,
            Err(PatchError::Conflict {
                path: "spec.containers[name=app].image".into()
            })
        );
        // Deleting what someone else changed conflicts; deleting what is gone does not.
        let file = json!({"spec": {"containers": []}});
        let got = create_three_way_merge_patch(Some(&last), &file, &live, &pod(), false);
        assert!(
            matches!(got, Err(PatchError::Conflict { path }) if path == "spec.containers[name=app]")
        );
        let gone = json!({"spec": {"containers": []}});
        assert!(create_three_way_merge_patch(Some(&last), &file, &gone, &pod(), false).is_ok());
    }
}
