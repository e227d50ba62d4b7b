//! `/openapi/v2`: the Swagger 2.0 document kubectl and Helm fall back to when the v3 one does
//! not settle a question, above all for client-side validation (`kubectl apply -f` of a
//! `kind: List`, whose kind no PATCH operation names). client-go asks only for the protobuf
//! form (gnostic's `openapi.v2.Document`, media type
//! `application/com.github.proto-openapi.spec.v2@v1.0+protobuf`) and has no JSON fallback;
//! JSON is served too, by `Accept`.
//!
//! Its `definitions` are the built-in kinds' schemas, the same ones `/openapi/v3` publishes
//! (references rewritten to `#/definitions/`, extensions kept, v3's `default`s left out, as in
//! Kubernetes' v2 document), each kind's tagged with
//! `x-kubernetes-group-version-kind`, so kubectl validates a built-in object of a List as
//! Kubernetes would. Two departures, both on the side of letting the server decide (it
//! validates every write, `fieldValidation` included): `paths` is empty, since a path whose
//! PATCH does not list strategic merge patch among its `consumes` would make kubectl send merge
//! patches for built-in kinds; and a custom resource has no definition, so kubectl leaves its
//! objects to the server's schema validation.

use serde_json::{Map, Value, json};

/// The media type Kubernetes answers with (client-go asks for
/// `application/com.github.proto-openapi.spec.v2@v1.0+protobuf`).
pub const PROTOBUF_ANSWER: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// The Swagger 2.0 document, as JSON, from the v3 schemas of the built-in kinds
/// (`components.schemas` form: `#/components/schemas/` references, `allOf: [{$ref}]`).
pub fn document(v3_schemas: &Map<String, Value>) -> Value {
    let definitions: Map<String, Value> = v3_schemas
        .iter()
        .map(|(name, s)| (name.clone(), to_v2(s)))
        .collect();
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": {},
        "definitions": definitions,
    })
}

/// A v3 schema as Kubernetes' v2 document writes it: a reference is `$ref: #/definitions/<name>`
/// itself, not an `allOf` of one, beside the field's description and extensions (a
/// PersistentVolume's `claimRef` keeps its `x-kubernetes-map-type`); and no `default`, which
/// only Kubernetes' v3 documents carry (a port's `protocol`).
fn to_v2(schema: &Value) -> Value {
    let Value::Object(m) = schema else {
        return schema.clone();
    };
    let reference = m.get("$ref").and_then(Value::as_str).or_else(|| {
        m.get("allOf")
            .and_then(Value::as_array)
            .filter(|a| a.len() == 1)
            .and_then(|a| a[0].get("$ref"))
            .and_then(Value::as_str)
    });
    let mut out = Map::new();
    if let Some(r) = reference {
        let name = r.trim_start_matches("#/components/schemas/");
        out.insert("$ref".into(), json!(format!("#/definitions/{name}")));
    }
    for (k, v) in m {
        match k.as_str() {
            "$ref" | "allOf" if reference.is_some() => {}
            "default" => {}
            "properties" => {
                let props = v.as_object().into_iter().flatten();
                let props = props.map(|(name, p)| (name.clone(), to_v2(p)));
                out.insert(k.clone(), Value::Object(props.collect()));
            }
            "items" | "additionalProperties" => {
                out.insert(k.clone(), to_v2(v));
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

/// The document in gnostic's protobuf form, as client-go decodes it.
pub fn protobuf(document: &Value) -> Vec<u8> {
    prost::Message::encode_to_vec(&pb::document(document))
}

/// The part of gnostic's `openapiv2/OpenAPIv2.proto` (package `openapi.v2`, gnostic-models
/// v0.6.8) this document uses, with its field numbers. A vendor extension's value travels as
/// YAML text (`Any.yaml`), which is what kubectl reads; JSON is YAML.
mod pb {
    use serde_json::Value;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Document {
        #[prost(string, tag = "1")]
        pub swagger: String,
        #[prost(message, optional, tag = "2")]
        pub info: Option<Info>,
        #[prost(message, optional, tag = "8")]
        pub paths: Option<Paths>,
        #[prost(message, optional, tag = "9")]
        pub definitions: Option<Definitions>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Info {
        #[prost(string, tag = "1")]
        pub title: String,
        #[prost(string, tag = "2")]
        pub version: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Paths {}

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Definitions {
        #[prost(message, repeated, tag = "1")]
        pub additional_properties: Vec<NamedSchema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamedSchema {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<Schema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Schema {
        #[prost(string, tag = "1")]
        pub r#ref: String,
        #[prost(string, tag = "2")]
        pub format: String,
        #[prost(string, tag = "3")]
        pub title: String,
        #[prost(string, tag = "4")]
        pub description: String,
        #[prost(string, repeated, tag = "19")]
        pub required: Vec<String>,
        #[prost(message, repeated, tag = "20")]
        pub r#enum: Vec<Any>,
        #[prost(message, optional, tag = "21")]
        pub additional_properties: Option<AdditionalPropertiesItem>,
        #[prost(message, optional, tag = "22")]
        pub r#type: Option<TypeItem>,
        #[prost(message, optional, tag = "23")]
        pub items: Option<ItemsItem>,
        #[prost(message, repeated, tag = "24")]
        pub all_of: Vec<Schema>,
        #[prost(message, optional, tag = "25")]
        pub properties: Option<Properties>,
        #[prost(message, repeated, tag = "31")]
        pub vendor_extension: Vec<NamedAny>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TypeItem {
        #[prost(string, repeated, tag = "1")]
        pub value: Vec<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ItemsItem {
        #[prost(message, repeated, tag = "1")]
        pub schema: Vec<Schema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Properties {
        #[prost(message, repeated, tag = "1")]
        pub additional_properties: Vec<NamedSchema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AdditionalPropertiesItem {
        #[prost(oneof = "additional_properties_item::Oneof", tags = "1, 2")]
        pub oneof: Option<additional_properties_item::Oneof>,
    }

    pub mod additional_properties_item {
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum Oneof {
            #[prost(message, tag = "1")]
            Schema(Box<super::Schema>),
            #[prost(bool, tag = "2")]
            Boolean(bool),
        }
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamedAny {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<Any>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Any {
        #[prost(string, tag = "2")]
        pub yaml: String,
    }

    fn text(v: &Value, key: &str) -> String {
        v.get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    }

    fn yaml(v: &Value) -> Any {
        Any {
            yaml: v.to_string(),
        }
    }

    pub fn document(d: &Value) -> Document {
        let definitions = d["definitions"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, s)| NamedSchema {
                name: name.clone(),
                value: Some(schema(s)),
            })
            .collect();
        Document {
            swagger: text(d, "swagger"),
            info: Some(Info {
                title: text(&d["info"], "title"),
                version: text(&d["info"], "version"),
            }),
            paths: Some(Paths {}),
            definitions: Some(Definitions {
                additional_properties: definitions,
            }),
        }
    }

    fn named(props: &serde_json::Map<String, Value>) -> Vec<NamedSchema> {
        props
            .iter()
            .map(|(name, s)| NamedSchema {
                name: name.clone(),
                value: Some(schema(s)),
            })
            .collect()
    }

    pub fn schema(s: &Value) -> Schema {
        let strings = |key: &str| -> Vec<String> {
            s[key]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        };
        let r#type = match &s["type"] {
            Value::String(t) => Some(TypeItem {
                value: vec![t.clone()],
            }),
            Value::Array(_) => Some(TypeItem {
                value: strings("type"),
            }),
            _ => None,
        };
        let additional_properties = match &s["additionalProperties"] {
            Value::Bool(b) => Some(AdditionalPropertiesItem {
                oneof: Some(additional_properties_item::Oneof::Boolean(*b)),
            }),
            v @ Value::Object(_) => Some(AdditionalPropertiesItem {
                oneof: Some(additional_properties_item::Oneof::Schema(Box::new(schema(
                    v,
                )))),
            }),
            _ => None,
        };
        let vendor_extension = s
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.starts_with("x-"))
            .map(|(k, v)| NamedAny {
                name: k.clone(),
                value: Some(yaml(v)),
            })
            .collect();
        Schema {
            r#ref: text(s, "$ref"),
            format: text(s, "format"),
            title: text(s, "title"),
            description: text(s, "description"),
            required: strings("required"),
            r#enum: s["enum"]
                .as_array()
                .into_iter()
                .flatten()
                .map(yaml)
                .collect(),
            additional_properties,
            r#type,
            items: match &s["items"] {
                v @ Value::Object(_) => Some(ItemsItem {
                    schema: vec![schema(v)],
                }),
                _ => None,
            },
            all_of: s["allOf"]
                .as_array()
                .into_iter()
                .flatten()
                .map(schema)
                .collect(),
            properties: s["properties"].as_object().map(|p| Properties {
                additional_properties: named(p),
            }),
            vendor_extension,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schemas() -> Map<String, Value> {
        json!({
            "io.k8s.api.core.v1.Pod": {
                "type": "object",
                "properties": {
                    "metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}], "description": "meta"},
                    "spec": {"type": "object", "additionalProperties": {"type": "string"}},
                    "claimRef": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.ObjectReference"}],
                                 "x-kubernetes-map-type": "granular"},
                    "ports": {"type": "array", "items": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.ContainerPort"}]},
                              "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["containerPort", "protocol"]},
                    "protocol": {"type": "string", "default": "TCP"},
                    "default": {"type": "object", "description": "a field named default"},
                },
                "x-kubernetes-group-version-kind": [{"group": "", "kind": "Pod", "version": "v1"}],
            },
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object", "properties": {"name": {"type": "string"}}},
        })
        .as_object()
        .cloned()
        .unwrap_or_default()
    }

    #[test]
    fn references_point_into_definitions_and_paths_are_empty() {
        let d = document(&schemas());
        assert_eq!(d["swagger"], "2.0");
        assert_eq!(d["paths"], json!({}));
        let meta = &d["definitions"]["io.k8s.api.core.v1.Pod"]["properties"]["metadata"];
        assert_eq!(
            meta,
            &json!({"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "description": "meta"})
        );
    }

    #[test]
    fn extensions_stay_beside_references_and_defaults_go() {
        let d = document(&schemas());
        let props = &d["definitions"]["io.k8s.api.core.v1.Pod"]["properties"];
        assert_eq!(
            props["claimRef"],
            json!({"$ref": "#/definitions/io.k8s.api.core.v1.ObjectReference",
                   "x-kubernetes-map-type": "granular"})
        );
        assert_eq!(
            props["ports"],
            json!({"type": "array", "items": {"$ref": "#/definitions/io.k8s.api.core.v1.ContainerPort"},
                   "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["containerPort", "protocol"]})
        );
        assert_eq!(props["protocol"], json!({"type": "string"}));
        assert_eq!(
            props["default"],
            json!({"type": "object", "description": "a field named default"})
        );
    }

    #[test]
    fn the_protobuf_form_decodes_to_the_same_definitions() {
        let d = document(&schemas());
        let bytes = protobuf(&d);
        let back: pb::Document = prost::Message::decode(bytes.as_slice()).unwrap();
        assert_eq!(back.swagger, "2.0");
        let defs = back.definitions.unwrap().additional_properties;
        let pod = defs
            .iter()
            .find(|n| n.name == "io.k8s.api.core.v1.Pod")
            .and_then(|n| n.value.clone())
            .unwrap();
        assert_eq!(pod.r#type.unwrap().value, ["object"]);
        let gvk = &pod.vendor_extension[0];
        assert_eq!(gvk.name, "x-kubernetes-group-version-kind");
        let yaml: Value = serde_json::from_str(&gvk.value.clone().unwrap().yaml).unwrap();
        assert_eq!(yaml[0]["kind"], "Pod");
        let props = pod.properties.unwrap().additional_properties;
        let meta = props.iter().find(|p| p.name == "metadata").unwrap();
        assert_eq!(
            meta.value.as_ref().unwrap().r#ref,
            "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
        let spec = props.iter().find(|p| p.name == "spec").unwrap();
        assert!(matches!(
            spec.value
                .as_ref()
                .unwrap()
                .additional_properties
                .as_ref()
                .unwrap()
                .oneof,
            Some(pb::additional_properties_item::Oneof::Schema(_))
        ));
    }
}
