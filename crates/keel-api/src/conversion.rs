//! Versions of one resource over one stored form: objects are stored at one version and
//! converted when read at another. Custom resources (conversion `None`) change only
//! `apiVersion`; the CRD resource itself is stored at `apiextensions.k8s.io/v1` and also served
//! at `v1beta1`, the form the seeds use (one `version`, schema under `validation`).

use std::borrow::Cow;

use serde_json::{Map, Value, json};

use crate::{Object, ResourceInfo};

const CRD_GROUP: &str = "apiextensions.k8s.io";
const CRD_RESOURCE: &str = "customresourcedefinitions";

fn is_crd_v1beta1(info: &ResourceInfo) -> bool {
    info.gvr.group == CRD_GROUP
        && info.gvr.resource == CRD_RESOURCE
        && info.gvr.version == "v1beta1"
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// Whether `obj` already has the `apiVersion` `info` serves (checked without allocating: this
/// runs for every object read).
fn is_served(info: &ResourceInfo, obj: &Object) -> bool {
    match obj.api_version().rsplit_once('/') {
        Some((group, version)) => group == info.gvr.group && version == info.gvr.version,
        None => info.gvr.group.is_empty() && obj.api_version() == info.gvr.version,
    }
}

/// A stored object as `info`'s version serves it. An object of another group is left alone.
pub fn to_served(info: &ResourceInfo, obj: &mut Object) {
    if is_served(info, obj) || group_of(obj.api_version()) != info.gvr.group {
        return;
    }
    obj.as_map_mut()
        .insert("apiVersion".into(), Value::String(info.api_version()));
    if is_crd_v1beta1(info)
        && let Some(spec) = obj
            .as_map_mut()
            .get_mut("spec")
            .and_then(Value::as_object_mut)
    {
        crd_v1_to_v1beta1(spec);
    }
}

/// `obj` as `info`'s version serves it, copied only when it is not already (a mutation may be
/// handed the previous one's result, which is in the stored form).
pub fn served<'a>(info: &ResourceInfo, obj: &'a Object) -> Cow<'a, Object> {
    if is_served(info, obj) {
        Cow::Borrowed(obj)
    } else {
        let mut owned = obj.clone();
        to_served(info, &mut owned);
        Cow::Owned(owned)
    }
}

/// An object sent at `info`'s version, in the form it is stored in: for a v1beta1 CRD, the v1
/// form (apiVersion included). Other resources' objects are unchanged here (a custom
/// resource's storage version is the registry's to apply).
pub fn to_stored(info: &ResourceInfo, obj: &mut Object) {
    if !is_crd_v1beta1(info) {
        return;
    }
    obj.as_map_mut()
        .insert("apiVersion".into(), json!(format!("{CRD_GROUP}/v1")));
    if let Some(spec) = obj
        .as_map_mut()
        .get_mut("spec")
        .and_then(Value::as_object_mut)
    {
        crd_v1beta1_to_v1(spec);
    }
}

/// The schema a v1beta1 version without one gets: anything goes, as v1beta1 allowed.
fn open_schema() -> Value {
    json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}})
}

fn rename(columns: &Value, from: &str, to: &str) -> Value {
    match columns.as_array() {
        Some(list) => Value::Array(
            list.iter()
                .map(|c| {
                    let mut c = c.clone();
                    if let Some(m) = c.as_object_mut()
                        && let Some(v) = m.remove(from)
                    {
                        m.insert(to.into(), v);
                    }
                    c
                })
                .collect(),
        ),
        None => columns.clone(),
    }
}

/// v1beta1's spec to v1's: one `version` becomes `versions`; `validation`, `subresources`
/// and `additionalPrinterColumns` (with `JSONPath`) move into each version.
fn crd_v1beta1_to_v1(spec: &mut Map<String, Value>) {
    let version = spec.remove("version");
    let validation = spec.remove("validation");
    let subresources = spec.remove("subresources");
    let columns = spec.remove("additionalPrinterColumns");
    spec.remove("preserveUnknownFields");
    let versions = spec
        .entry("versions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Some(list) = versions.as_array_mut() {
        if list.is_empty()
            && let Some(name) = version.as_ref().and_then(Value::as_str)
        {
            list.push(json!({"name": name, "served": true, "storage": true}));
        }
        for v in list.iter_mut().filter_map(Value::as_object_mut) {
            if !v.contains_key("schema") {
                let schema = validation
                    .as_ref()
                    .filter(|s| s["openAPIV3Schema"].is_object())
                    .cloned()
                    .unwrap_or_else(open_schema);
                v.insert("schema".into(), schema);
            }
            if let Some(s) = &subresources
                && !v.contains_key("subresources")
            {
                v.insert("subresources".into(), s.clone());
            }
            if let Some(c) = &columns
                && !v.contains_key("additionalPrinterColumns")
            {
                v.insert(
                    "additionalPrinterColumns".into(),
                    rename(c, "JSONPath", "jsonPath"),
                );
            }
            if let Some(c) = v.get("additionalPrinterColumns").cloned() {
                v.insert(
                    "additionalPrinterColumns".into(),
                    rename(&c, "JSONPath", "jsonPath"),
                );
            }
        }
    }
}

/// v1's spec to v1beta1's: `version` is the first version; a schema, subresources or printer
/// columns that every version shares move up to the top.
fn crd_v1_to_v1beta1(spec: &mut Map<String, Value>) {
    let Some(versions) = spec.get("versions").and_then(Value::as_array).cloned() else {
        return;
    };
    if let Some(first) = versions.first().and_then(|v| v.get("name")).cloned() {
        spec.insert("version".into(), first);
    }
    let mut versions = versions;
    for (field, top) in [
        ("schema", "validation"),
        ("subresources", "subresources"),
        ("additionalPrinterColumns", "additionalPrinterColumns"),
    ] {
        let first = versions.first().and_then(|v| v.get(field)).cloned();
        let shared = first.is_some() && versions.iter().all(|v| v.get(field) == first.as_ref());
        if let (true, Some(value)) = (shared, first) {
            let value = if field == "additionalPrinterColumns" {
                rename(&value, "jsonPath", "JSONPath")
            } else {
                value
            };
            spec.insert(top.into(), value);
            for v in versions.iter_mut().filter_map(Value::as_object_mut) {
                v.remove(field);
            }
        }
    }
    spec.insert("versions".into(), Value::Array(versions));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GroupVersionResource, builtin_resources};

    fn crd_info(version: &str) -> ResourceInfo {
        let mut info = builtin_resources()
            .into_iter()
            .find(|r| r.gvr.resource == CRD_RESOURCE)
            .unwrap();
        info.gvr = GroupVersionResource::new(CRD_GROUP, version, CRD_RESOURCE);
        info
    }

    fn seeds_crd() -> Object {
        Object::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1beta1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "networks.samplecrd.k8s.io"},
            "spec": {
                "group": "samplecrd.k8s.io", "version": "v1",
                "names": {"kind": "Network", "plural": "networks"},
                "scope": "Namespaced"
            }
        }))
        .unwrap()
    }

    #[test]
    fn the_seeds_v1beta1_crd_is_stored_as_v1_and_read_back_as_v1beta1() {
        let v1beta1 = crd_info("v1beta1");
        let mut obj = seeds_crd();
        to_stored(&v1beta1, &mut obj);
        let stored = obj.clone().into_value();
        assert_eq!(stored["apiVersion"], "apiextensions.k8s.io/v1");
        assert!(stored["spec"].get("version").is_none());
        assert_eq!(
            stored["spec"]["versions"],
            json!([{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}])
        );
        to_served(&v1beta1, &mut obj);
        let back = obj.into_value();
        assert_eq!(back["apiVersion"], "apiextensions.k8s.io/v1beta1");
        assert_eq!(back["spec"]["version"], "v1");
        assert_eq!(
            back["spec"]["validation"]["openAPIV3Schema"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        assert_eq!(
            back["spec"]["versions"],
            json!([{"name": "v1", "served": true, "storage": true}])
        );
    }

    #[test]
    fn v1beta1_validation_subresources_and_columns_move_into_each_version() {
        let mut obj = seeds_crd();
        let spec = obj.as_map_mut().get_mut("spec").unwrap();
        spec["versions"] = json!([
            {"name": "v1", "served": true, "storage": true},
            {"name": "v2", "served": true, "storage": false}
        ]);
        spec["validation"] = json!({"openAPIV3Schema": {"type": "object"}});
        spec["subresources"] = json!({"status": {}});
        spec["additionalPrinterColumns"] =
            json!([{"name": "CIDR", "type": "string", "JSONPath": ".spec.cidr"}]);
        to_stored(&crd_info("v1beta1"), &mut obj);
        let v = obj.clone().into_value();
        for i in 0..2 {
            let version = &v["spec"]["versions"][i];
            assert_eq!(version["schema"]["openAPIV3Schema"]["type"], "object");
            assert_eq!(version["subresources"], json!({"status": {}}));
            assert_eq!(
                version["additionalPrinterColumns"][0]["jsonPath"],
                ".spec.cidr"
            );
        }
        to_served(&crd_info("v1beta1"), &mut obj);
        let v = obj.into_value();
        assert_eq!(
            v["spec"]["additionalPrinterColumns"][0]["JSONPath"],
            ".spec.cidr"
        );
        assert_eq!(v["spec"]["subresources"], json!({"status": {}}));
        assert!(v["spec"]["versions"][1].get("schema").is_none());
    }

    #[test]
    fn custom_objects_change_only_their_api_version() {
        let mut info = crd_info("v1");
        info.gvr = GroupVersionResource::new("samplecrd.k8s.io", "v2", "networks");
        let mut obj = Object::from_value(json!({
            "apiVersion": "samplecrd.k8s.io/v1", "kind": "Network",
            "metadata": {"name": "n"}, "spec": {"version": "x"}
        }))
        .unwrap();
        to_served(&info, &mut obj);
        let v = obj.into_value();
        assert_eq!(v["apiVersion"], "samplecrd.k8s.io/v2");
        assert_eq!(v["spec"]["version"], "x");
        // A v1 CRD read at v1 is unchanged.
        let mut crd = seeds_crd();
        to_stored(&crd_info("v1beta1"), &mut crd);
        let before = crd.clone();
        to_served(&crd_info("v1"), &mut crd);
        assert_eq!(crd, before);
    }
}
