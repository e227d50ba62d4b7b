//! `discovery.k8s.io/v1` EndpointSlice: an address type, endpoints and ports (protocol
//! defaulted to TCP).

use keel_api::{FieldCause, Object};
use serde_json::{Value, json};

use super::{Kind, MergeKeys, builtin_merge_keys, items_mut, set_default};

const ADDRESS_TYPES: &[&str] = &["IPv4", "IPv6", "FQDN"];

pub struct EndpointSlice {
    merge: Option<MergeKeys>,
}

impl EndpointSlice {
    pub fn new() -> Self {
        EndpointSlice {
            merge: builtin_merge_keys("discovery.k8s.io/v1", "EndpointSlice"),
        }
    }
}

impl Kind for EndpointSlice {
    fn defaults(&self, obj: &mut Object) {
        for p in items_mut(obj.as_map_mut(), "ports") {
            set_default(p, "protocol", json!("TCP"));
        }
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        match obj.as_map().get("addressType").and_then(Value::as_str) {
            None | Some("") => causes.push(FieldCause::required("addressType")),
            Some(t) if !ADDRESS_TYPES.contains(&t) => {
                causes.push(FieldCause::not_supported("addressType", t, ADDRESS_TYPES))
            }
            Some(_) => {}
        }
    }

    fn validate_update(&self, new: &Object, old: &Object, causes: &mut Vec<FieldCause>) {
        let t = |o: &Object| o.as_map().get("addressType").cloned();
        if t(new) != t(old) {
            causes.push(FieldCause::invalid(
                "addressType",
                &t(new).unwrap_or(Value::Null).to_string(),
                "field is immutable",
            ));
        }
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
