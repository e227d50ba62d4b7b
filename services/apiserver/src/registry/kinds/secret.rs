//! `v1` Secret: `stringData` folded into `data` on every write, `data` values base64, the
//! keys Kubernetes' known types require, `type` fixed once set, and `immutable` honoured, as
//! Kubernetes' `ValidateSecret` and `ValidateSecretUpdate` have them.

use base64::Engine as _;
use keel_api::{FieldCause, Object};
use serde_json::{Map, Value, json};

use super::{Kind, MergeKeys, builtin_merge_keys, configmap};

/// The most a Secret's data may hold, decoded (Kubernetes' `MaxSecretSize`).
const MAX_SIZE: usize = 1024 * 1024;

const BASE64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
/// What Go's `StdEncoding` reads, as Kubernetes decodes a Secret's `[]byte` values: line
/// breaks ignored (base64 tools wrap at 76 columns) and stray low bits of the last character
/// tolerated.
const LENIENT: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);

fn decode(s: &str) -> Result<Vec<u8>, base64::DecodeError> {
    if s.contains(['\r', '\n']) {
        LENIENT.decode(s.replace(['\r', '\n'], ""))
    } else {
        LENIENT.decode(s)
    }
}

pub struct Secret {
    merge: Option<MergeKeys>,
}

impl Secret {
    pub fn new() -> Self {
        Secret {
            merge: builtin_merge_keys("v1", "Secret"),
        }
    }
}

impl Kind for Secret {
    fn selectable_fields(&self) -> &'static [&'static str] {
        &["type"]
    }

    fn prepare_for_create(&self, obj: &mut Object) {
        fold_string_data(obj.as_map_mut());
    }

    fn prepare_for_update(&self, new: &mut Object, _old: &Object, _causes: &mut Vec<FieldCause>) {
        fold_string_data(new.as_map_mut());
    }

    fn defaults(&self, obj: &mut Object) {
        let t = obj.as_map_mut().entry("type").or_insert(Value::Null);
        if t.is_null() || t == "" {
            *t = json!("Opaque");
        }
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        let o = obj.as_map();
        configmap::keys_and_strings(o, "data", causes);
        let data = o.get("data").and_then(Value::as_object);
        let mut size = 0;
        for (k, v) in data.into_iter().flatten() {
            let Some(s) = v.as_str() else { continue };
            match decode(s) {
                Ok(bytes) => size += bytes.len(),
                Err(e) => causes.push(FieldCause::invalid(
                    format!("data[{k}]"),
                    "<secret value>",
                    format!("must be base64 encoded: {e}"),
                )),
            }
        }
        if size > MAX_SIZE {
            causes.push(FieldCause::too_long("data", MAX_SIZE));
        }
        let has = |key: &str| data.is_some_and(|d| d.contains_key(key));
        let decoded = |key: &str| {
            data.and_then(|d| d.get(key))
                .and_then(Value::as_str)
                .and_then(|s| decode(s).ok())
        };
        let secret_type = o.get("type").and_then(Value::as_str).unwrap_or("Opaque");
        let require = |key: &str, causes: &mut Vec<FieldCause>| {
            if !has(key) {
                causes.push(FieldCause::required(format!("data[{key}]")));
            }
        };
        match secret_type {
            "kubernetes.io/service-account-token" => {
                let named = o
                    .get("metadata")
                    .and_then(|m| m.pointer("/annotations/kubernetes.io~1service-account.name"))
                    .and_then(Value::as_str)
                    .is_some_and(|n| !n.is_empty());
                if !named {
                    causes.push(FieldCause::required(
                        "metadata.annotations[kubernetes.io/service-account.name]",
                    ));
                }
            }
            "kubernetes.io/dockercfg" | "kubernetes.io/dockerconfigjson" => {
                let key = if secret_type == "kubernetes.io/dockercfg" {
                    ".dockercfg"
                } else {
                    ".dockerconfigjson"
                };
                require(key, causes);
                if let Some(bytes) = decoded(key)
                    && serde_json::from_slice::<Value>(&bytes).is_err()
                {
                    causes.push(FieldCause::invalid(
                        format!("data[{key}]"),
                        "<secret contents redacted>",
                        "invalid JSON",
                    ));
                }
            }
            "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
                causes.push(FieldCause::required("data[username]"));
                causes.push(FieldCause::required("data[password]"));
            }
            "kubernetes.io/ssh-auth" => require("ssh-privatekey", causes),
            "kubernetes.io/tls" => {
                require("tls.crt", causes);
                require("tls.key", causes);
            }
            _ => {}
        }
    }

    fn validate_update(&self, new: &Object, old: &Object, causes: &mut Vec<FieldCause>) {
        let (new, old) = (new.as_map(), old.as_map());
        if new.get("type") != old.get("type") {
            causes.push(FieldCause::invalid(
                "type",
                new.get("type").and_then(Value::as_str).unwrap_or(""),
                "field is immutable",
            ));
        }
        if old.get("immutable") == Some(&json!(true)) {
            const WHY: &str = "field is immutable when `immutable` is set";
            if new.get("immutable") != Some(&json!(true)) {
                causes.push(FieldCause::forbidden("immutable", WHY));
            }
            if new.get("data") != old.get("data") {
                causes.push(FieldCause::forbidden("data", WHY));
            }
        }
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}

/// `stringData` is write-only: each of its keys goes into `data`, base64 encoded, over any
/// value `data` had for it (Kubernetes' v1 conversion). And `data` is stored as Kubernetes
/// stores bytes: a value Go reads (wrapped lines, say) in its canonical encoding.
fn fold_string_data(o: &mut Map<String, Value>) {
    for v in o
        .get_mut("data")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|d| d.values_mut())
    {
        let canonical = v
            .as_str()
            .and_then(|s| decode(s).ok())
            .map(|bytes| BASE64.encode(bytes));
        if let Some(c) = canonical {
            *v = Value::String(c);
        }
    }
    let Some(Value::Object(strings)) = o.remove("stringData") else {
        return;
    };
    let data = o.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    if let Some(data) = data.as_object_mut() {
        for (k, v) in strings {
            let text = match v {
                Value::String(s) => s,
                other => other.to_string(),
            };
            data.insert(k, json!(BASE64.encode(text)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    fn causes(obj: &Object) -> Vec<String> {
        let mut c = Vec::new();
        Secret::new().validate(obj, &mut c);
        c.into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn string_data_is_folded_into_data_as_base64() {
        let mut s = secret(
            json!({"metadata": {"name": "s"}, "data": {"a": "eA==", "b": "eQ=="},
            "stringData": {"b": "two", "c": "three"}}),
        );
        Secret::new().prepare_for_create(&mut s);
        assert_eq!(s.as_map().get("stringData"), None);
        assert_eq!(
            s.as_map()["data"],
            json!({"a": "eA==", "b": "dHdv", "c": "dGhyZWU="})
        );
    }

    #[test]
    fn wrapped_base64_is_read_as_go_reads_it_and_stored_canonical() {
        let mut s = secret(json!({"metadata": {"name": "s"},
            "data": {"crt": "aGVsbG8g\nd29ybGQ=\n", "odd": "eR=="}}));
        Secret::new().prepare_for_create(&mut s);
        assert_eq!(
            s.as_map()["data"],
            json!({"crt": BASE64.encode("hello world"), "odd": "eQ=="})
        );
        assert!(causes(&s).is_empty());
    }

    #[test]
    fn data_must_be_base64_and_known_types_need_their_keys() {
        let bad = secret(json!({"metadata": {"name": "s"}, "data": {"k": "not base64!"}}));
        let c = causes(&bad);
        assert!(c[0].starts_with("data[k]: Invalid value"), "{c:?}");
        let tls = secret(
            json!({"metadata": {"name": "s"}, "type": "kubernetes.io/tls",
            "data": {"tls.crt": "eA=="}}),
        );
        assert_eq!(causes(&tls), ["data[tls.key]: Required value"]);
        let docker = secret(json!({"metadata": {"name": "s"},
            "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "e30="}}));
        assert!(causes(&docker).is_empty());
        let docker = secret(json!({"metadata": {"name": "s"},
            "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "eA=="}}));
        assert_eq!(causes(&docker).len(), 1);
        let token = secret(json!({"metadata": {"name": "s"},
            "type": "kubernetes.io/service-account-token"}));
        assert_eq!(causes(&token).len(), 1);
    }

    #[test]
    fn an_immutable_secret_keeps_its_data_and_every_secret_its_type() {
        let old = secret(
            json!({"metadata": {"name": "s"}, "type": "Opaque", "immutable": true,
            "data": {"a": "eA=="}}),
        );
        let new = secret(
            json!({"metadata": {"name": "s"}, "type": "other", "immutable": false,
            "data": {"a": "eQ=="}}),
        );
        let mut c = Vec::new();
        Secret::new().validate_update(&new, &old, &mut c);
        let fields: Vec<&str> = c.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["type", "immutable", "data"]);
        let mut c = Vec::new();
        Secret::new().validate_update(&old, &old, &mut c);
        assert!(c.is_empty());
    }
}
