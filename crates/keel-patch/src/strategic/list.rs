//! Telling list elements apart, and the element order Kubernetes gives merged lists.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use crate::limits::canonical;

/// How the elements of a merged list are identified.
pub(super) enum Identity<'k> {
    /// Objects, by the values of their merge keys; a key that is missing or `null` takes its
    /// default.
    Keys {
        keys: &'k [String],
        defaults: &'k [Option<Value>],
    },
    /// Primitives (set members), by value.
    Value,
}

impl Identity<'_> {
    /// The element's identity, or `None` when it has none: not an object, or a merge key
    /// missing without a default.
    pub(super) fn of(&self, element: &Value) -> Option<String> {
        match self {
            Identity::Value => Some(canonical(element)),
            Identity::Keys { .. } => self.of_object(element.as_object()?),
        }
    }

    pub(super) fn of_object(&self, element: &Map<String, Value>) -> Option<String> {
        let Identity::Keys { keys, defaults } = self else {
            return Some(canonical(&Value::Object(element.clone())));
        };
        let mut id = String::new();
        for (i, key) in keys.iter().enumerate() {
            let value = element
                .get(key)
                .filter(|v| !v.is_null())
                .or_else(|| defaults.get(i).and_then(Option::as_ref))?;
            id.push_str(&canonical(value));
            // Canonical forms never contain a raw unit separator, so the join is unambiguous.
            id.push('\u{1f}');
        }
        Some(id)
    }

    /// The identities of all elements, or `None` if one has none or two share one: such a
    /// list cannot be patched element by element.
    pub(super) fn of_all_unique(&self, list: &[Value]) -> Option<Vec<String>> {
        let mut seen = HashSet::with_capacity(list.len());
        let mut ids = Vec::with_capacity(list.len());
        for element in list {
            let id = self.of(element)?;
            if !seen.insert(id.clone()) {
                return None;
            }
            ids.push(id);
        }
        Some(ids)
    }
}

/// Orders a merged list as Kubernetes does: the elements named in `order` come in that order;
/// the others (which only the live list had) keep their live order; the two runs interleave by
/// live position, a server-only element going first only when the live list had it before
/// the next ordered element. `live` holds the identities of the list before the patch.
pub(super) fn enforce_order(
    merged: Vec<Value>,
    identity: &Identity<'_>,
    order: &[String],
    live: &[Option<String>],
) -> Vec<Value> {
    let mut order_pos: HashMap<&str, usize> = HashMap::with_capacity(order.len());
    for (i, id) in order.iter().enumerate() {
        order_pos.entry(id.as_str()).or_insert(i);
    }
    let mut live_pos: HashMap<&str, usize> = HashMap::with_capacity(live.len());
    for (i, id) in live.iter().enumerate() {
        if let Some(id) = id {
            live_pos.entry(id.as_str()).or_insert(i);
        }
    }

    let mut ordered: Vec<(usize, Option<usize>, Value)> = Vec::new();
    let mut server_only: Vec<(Option<usize>, Value)> = Vec::new();
    for element in merged {
        let id = identity.of(&element);
        let at_live = id.as_deref().and_then(|id| live_pos.get(id).copied());
        match id.as_deref().and_then(|id| order_pos.get(id).copied()) {
            Some(at_order) => ordered.push((at_order, at_live, element)),
            None => server_only.push((at_live, element)),
        }
    }
    ordered.sort_by_key(|(at_order, _, _)| *at_order);

    let mut out = Vec::with_capacity(ordered.len() + server_only.len());
    let mut ordered = ordered.into_iter().peekable();
    let mut server_only = server_only.into_iter().peekable();
    loop {
        let take_server = match (server_only.peek(), ordered.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((server_at, _)), Some((_, ordered_at, _))) => {
                matches!((server_at, ordered_at), (Some(s), Some(o)) if s < o)
            }
        };
        let next = if take_server {
            server_only.next().map(|(_, v)| v)
        } else {
            ordered.next().map(|(_, _, v)| v)
        };
        out.extend(next);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ids(values: &[Value]) -> Vec<String> {
        values.iter().map(canonical).collect()
    }

    fn ordered(merged: Value, order: Value, live: Value) -> Value {
        let (Value::Array(merged), Value::Array(order), Value::Array(live)) = (merged, order, live)
        else {
            panic!("arrays expected");
        };
        let live: Vec<Option<String>> = ids(&live).into_iter().map(Some).collect();
        Value::Array(enforce_order(merged, &Identity::Value, &ids(&order), &live))
    }

    #[test]
    fn ordered_elements_follow_the_order_and_server_only_ones_keep_their_place() {
        // Kubernetes' "set elements order in a list with server-only items 2/3".
        assert_eq!(
            ordered(
                json!([1, 2, 9, 3, 4]),
                json!([2, 1, 4, 3]),
                json!([1, 2, 9, 3, 4])
            ),
            json!([2, 1, 9, 4, 3])
        );
        assert_eq!(
            ordered(
                json!([1, 2, 7, 9, 8, 3, 4]),
                json!([2, 1, 4, 3]),
                json!([1, 2, 7, 9, 8, 3, 4])
            ),
            json!([2, 1, 7, 9, 8, 4, 3])
        );
    }

    #[test]
    fn new_elements_go_before_later_server_only_elements() {
        // "add an item in a list of primitives and preserve order": live [1, 4, 2].
        assert_eq!(
            ordered(json!([1, 4, 2, 3]), json!([3, 1, 2]), json!([1, 4, 2])),
            json!([3, 1, 4, 2])
        );
    }

    #[test]
    fn keyed_identity_uses_defaults_and_treats_null_as_missing() {
        let keys = vec!["containerPort".to_owned(), "protocol".to_owned()];
        let defaults = vec![None, Some(json!("TCP"))];
        let identity = Identity::Keys {
            keys: &keys,
            defaults: &defaults,
        };
        let implicit = identity.of(&json!({"containerPort": 80}));
        assert!(implicit.is_some());
        assert_eq!(
            implicit,
            identity.of(&json!({"containerPort": 80, "protocol": "TCP"}))
        );
        assert_eq!(
            implicit,
            identity.of(&json!({"containerPort": 80, "protocol": null}))
        );
        assert_ne!(
            implicit,
            identity.of(&json!({"containerPort": 80, "protocol": "UDP"}))
        );
        assert_eq!(identity.of(&json!({"protocol": "TCP"})), None);
        assert_eq!(identity.of(&json!("80")), None);
        assert_eq!(
            identity.of_all_unique(&[
                json!({"containerPort": 1}),
                json!({"containerPort": 1, "protocol": "TCP"})
            ]),
            None
        );
    }
}
