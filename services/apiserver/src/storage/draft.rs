//! The object a write's mutations hand on to each other: its JSON without
//! `metadata.managedFields`, and those entries parsed beside it, as structured-merge-diff's
//! `Updater` passes a typed value and its managed fields. A batch of mutations on a hot object
//! then parses its entries once, when it reads the object, and writes them once, when it
//! commits; each mutation is a plain function of the draft it is given.

use std::sync::Arc;

use keel_api::Object;
use keel_patch::managed::{self, Entry};

/// An object being written.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    /// The object, never holding `metadata.managedFields` unless a mutation put some there
    /// (a client's PUT or patch of them, for the registry to read as a request).
    pub object: Object,
    /// Its entries (unreadable ones, which validation keeps out, count as none).
    pub entries: Arc<Vec<Entry>>,
}

impl Draft {
    /// The draft of `object` as stored: its entries taken out of it and parsed.
    pub fn from_object(mut object: Object) -> Draft {
        let entries = match object.metadata_mut().remove("managedFields") {
            Some(v) => managed::parse(Some(&v)).unwrap_or_default(),
            None => Vec::new(),
        };
        Draft {
            object,
            entries: Arc::new(entries),
        }
    }

    /// The object with its entries written back, as it is stored and answered.
    pub fn into_object(self) -> Object {
        let mut object = self.object;
        write_entries(&mut object, &self.entries);
        object
    }

    /// `object` with this draft's entries: a change that leaves them alone.
    pub fn put(&self, object: Object) -> Change {
        Change::Put(self.with(object))
    }

    /// The object removed in the state `object`, with this draft's entries.
    pub fn remove(&self, object: Object) -> Change {
        Change::Remove(self.with(object))
    }

    /// `object` with this draft's entries.
    pub fn with(&self, object: Object) -> Draft {
        Draft {
            object,
            entries: self.entries.clone(),
        }
    }
}

/// Writes `entries` into `obj` as `metadata.managedFields` (none: no field at all).
pub fn write_entries(obj: &mut Object, entries: &[Entry]) {
    if entries.iter().all(|e| e.fields.is_empty()) {
        obj.metadata_mut().remove("managedFields");
    } else {
        obj.metadata_mut()
            .insert("managedFields".into(), managed::to_value(entries));
    }
}

/// What a mutation makes of the object.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Store this object (removed instead when the [`super::WriteRules`] say it is finished).
    Put(Draft),
    /// Remove the object now; this is its last state, as the caller is answered.
    Remove(Draft),
}

impl Change {
    pub fn draft(&self) -> &Draft {
        match self {
            Change::Put(d) | Change::Remove(d) => d,
        }
    }

    pub fn object(&self) -> &Object {
        &self.draft().object
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn entries_leave_the_object_and_come_back_as_they_were() {
        let stored = Object::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "managedFields": [
                {"manager": "a", "operation": "Apply", "apiVersion": "v1",
                 "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:data": {"f:x": {}}}}]},
            "data": {"x": "1"},
        }))
        .expect("an object");
        let draft = Draft::from_object(stored.clone());
        assert!(
            draft
                .object
                .metadata()
                .is_some_and(|m| !m.contains_key("managedFields"))
        );
        assert_eq!(draft.entries.len(), 1);
        assert_eq!(draft.entries[0].manager, "a");
        assert_eq!(draft.clone().into_object(), stored);
        assert_eq!(draft.into_object(), stored);
        // None: no field.
        let mut bare = stored.clone();
        bare.metadata_mut().remove("managedFields");
        assert_eq!(Draft::from_object(bare.clone()).into_object(), bare);
    }

    #[test]
    fn unreadable_entries_count_as_none() {
        let stored = Object::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "managedFields": "nonsense"},
        }))
        .expect("an object");
        let draft = Draft::from_object(stored);
        assert!(draft.entries.is_empty());
        assert!(
            !draft
                .into_object()
                .metadata()
                .is_some_and(|m| m.contains_key("managedFields"))
        );
    }
}
