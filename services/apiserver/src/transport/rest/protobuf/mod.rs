//! Kubernetes' protobuf (`application/vnd.kubernetes.protobuf`): the magic `k8s\0`, then a
//! `runtime.Unknown` naming the apiVersion and kind, holding the object as the message of that
//! kind in Kubernetes' `generated.proto` (vendored in `proto/k8s`, compiled into a descriptor
//! set at build time). client-go's typed clients send their bodies so ([`to_json`]) and ask
//! for their answers so ([`encode`]); keel's objects stay JSON everywhere else, and both
//! directions go through the message descriptors with prost-reflect, so a kind needs no code
//! here, only its `generated.proto`.

mod decode;
mod encode;

use std::sync::LazyLock;

use keel_api::ApiError;
use prost::encoding::{WireType, encode_key, encode_varint};
use prost_reflect::{DescriptorPool, FieldDescriptor, MessageDescriptor};

pub use decode::to_json;
pub use encode::{list, object, value, watch_frame};

/// The media type.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The media type of a watch's stream of length-prefixed `WatchEvent`s.
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// What every enveloped body starts with.
const MAGIC: &[u8] = b"k8s\x00";
const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";
const UNKNOWN: &str = "k8s.io.apimachinery.pkg.runtime.Unknown";

static POOL: LazyLock<Option<DescriptorPool>> = LazyLock::new(|| {
    DescriptorPool::decode(&include_bytes!(concat!(env!("OUT_DIR"), "/k8s.bin"))[..])
        .inspect_err(|e| tracing::error!(error = %e, "Kubernetes' protobuf descriptors do not decode: protobuf bodies are refused and answers are JSON"))
        .ok()
});

fn pool() -> Result<&'static DescriptorPool, ApiError> {
    POOL.as_ref()
        .ok_or_else(|| ApiError::internal("no protobuf descriptors"))
}

/// Where Kubernetes declares the message of a kind: its group's package
/// (`rbac.authorization.k8s.io/v1` is `k8s.io.api.rbac.v1`), or meta's (`DeleteOptions`,
/// `Status`). Only Kubernetes' own groups (no dot, or under `k8s.io`) have a package.
fn message_name(api_version: &str, kind: &str) -> Vec<String> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let package = match group {
        "" => Some("core"),
        g if !g.contains('.') => Some(g),
        g if g.ends_with(".k8s.io") => g.split('.').next(),
        _ => None,
    };
    let mut names = Vec::with_capacity(2);
    if let Some(package) = package {
        names.push(format!("k8s.io.api.{package}.{version}.{kind}"));
    }
    names.push(format!("{META}.{kind}"));
    names
}

/// The message of a kind, if Kubernetes declares one keel has.
fn descriptor(api_version: &str, kind: &str) -> Option<MessageDescriptor> {
    let pool = POOL.as_ref()?;
    message_name(api_version, kind)
        .iter()
        .find_map(|name| pool.get_message_by_name(name))
}

/// Whether objects of the kind have a protobuf form.
pub fn has_message(api_version: &str, kind: &str) -> bool {
    descriptor(api_version, kind).is_some()
}

/// Go structs embedded with `json:",inline"`: a field of their own in protobuf, their fields
/// among their parent's in JSON (`volumes[0].configMap`, not `volumes[0].volumeSource.
/// configMap`). Each `(message, field)` of the vendored groups, found with
/// `grep 'json:",inline" protobuf' */*/types.go` in k8s.io/api (TypeMeta aside, which the
/// messages leave out).
const INLINE: &[(&str, &str)] = &[
    ("k8s.io.api.core.v1.Volume", "volumeSource"),
    (
        "k8s.io.api.core.v1.PersistentVolumeSpec",
        "persistentVolumeSource",
    ),
    (
        "k8s.io.api.core.v1.SecretProjection",
        "localObjectReference",
    ),
    (
        "k8s.io.api.core.v1.ConfigMapVolumeSource",
        "localObjectReference",
    ),
    (
        "k8s.io.api.core.v1.ConfigMapProjection",
        "localObjectReference",
    ),
    (
        "k8s.io.api.core.v1.ConfigMapKeySelector",
        "localObjectReference",
    ),
    (
        "k8s.io.api.core.v1.SecretKeySelector",
        "localObjectReference",
    ),
    (
        "k8s.io.api.core.v1.ConfigMapEnvSource",
        "localObjectReference",
    ),
    ("k8s.io.api.core.v1.SecretEnvSource", "localObjectReference"),
    ("k8s.io.api.core.v1.Probe", "handler"),
    (
        "k8s.io.api.core.v1.EphemeralContainer",
        "ephemeralContainerCommon",
    ),
    ("k8s.io.api.networking.v1.IngressRule", "ingressRuleValue"),
];

/// Fields whose JSON name is not their protobuf name: `(message, protobuf name, JSON name)`,
/// found by comparing the `json:` and `protobuf:"...,name="` tags of the vendored groups.
const RENAMED: &[(&str, &str, &str)] = &[
    (
        "k8s.io.api.networking.v1.IngressClassParametersReference",
        "aPIGroup",
        "apiGroup",
    ),
    (
        "k8s.io.api.authentication.v1.BoundObjectReference",
        "uID",
        "uid",
    ),
];

/// Whether `field` of `message` is an embedded struct whose fields JSON puts in its parent's.
fn is_inline(message: &MessageDescriptor, field: &FieldDescriptor) -> bool {
    INLINE
        .iter()
        .any(|(m, f)| *f == field.name() && *m == message.full_name())
}

/// The embedded structs of a message ([`INLINE`]).
fn inline_fields(message: &MessageDescriptor) -> impl Iterator<Item = FieldDescriptor> + '_ {
    INLINE
        .iter()
        .filter(|(m, _)| *m == message.full_name())
        .filter_map(|(_, f)| message.get_field_by_name(f))
}

/// A field's name in Kubernetes' JSON.
fn json_name<'a>(message: &MessageDescriptor, field: &'a FieldDescriptor) -> &'a str {
    RENAMED
        .iter()
        .find(|(m, f, _)| *f == field.name() && *m == message.full_name())
        .map_or_else(|| field.json_name(), |(_, _, json)| json)
}

/// The field of a message a JSON key names.
fn field_by_json_name(message: &MessageDescriptor, key: &str) -> Option<FieldDescriptor> {
    match RENAMED
        .iter()
        .find(|(m, _, json)| *json == key && *m == message.full_name())
    {
        Some((_, f, _)) => message.get_field_by_name(f),
        None => message.get_field_by_json_name(key),
    }
}

/// Whether a message is Go's `[]string` type (`ExtraValue`, `Verbs`), whose JSON is the list
/// of its `items`.
fn is_string_list(full_name: &str) -> bool {
    full_name == "k8s.io.apimachinery.pkg.apis.meta.v1.Verbs"
        || (full_name.starts_with("k8s.io.api.") && full_name.ends_with(".ExtraValue"))
}

/// Appends a length-delimited field (a string, bytes or an embedded message).
fn put_bytes(tag: u32, bytes: &[u8], out: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod names {
    use super::*;

    #[test]
    fn kinds_find_their_packages() {
        assert_eq!(
            message_name("v1", "ConfigMap")[0],
            "k8s.io.api.core.v1.ConfigMap"
        );
        assert_eq!(
            message_name("apps/v1", "Deployment")[0],
            "k8s.io.api.apps.v1.Deployment"
        );
        assert_eq!(
            message_name("rbac.authorization.k8s.io/v1", "Role")[0],
            "k8s.io.api.rbac.v1.Role"
        );
        assert_eq!(
            message_name("v1", "DeleteOptions")[1],
            "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions"
        );
        // A custom group is never taken for Kubernetes' own.
        assert_eq!(
            message_name("batch.example.com/v1", "Job"),
            vec![format!("{META}.Job")]
        );
    }

    #[test]
    fn the_vendored_kinds_have_messages() {
        for (api_version, kind) in [
            ("v1", "Pod"),
            ("v1", "Secret"),
            ("v1", "Status"),
            ("apps/v1", "Deployment"),
            ("batch/v1", "Job"),
            ("batch/v1", "CronJob"),
            ("networking.k8s.io/v1", "Ingress"),
            ("networking.k8s.io/v1", "NetworkPolicy"),
            ("discovery.k8s.io/v1", "EndpointSlice"),
            ("autoscaling/v1", "Scale"),
            ("autoscaling/v1", "HorizontalPodAutoscaler"),
            ("autoscaling/v2", "HorizontalPodAutoscaler"),
            ("policy/v1", "PodDisruptionBudget"),
            ("policy/v1", "Eviction"),
            ("authentication.k8s.io/v1", "TokenRequest"),
            ("scheduling.k8s.io/v1", "PriorityClass"),
            ("storage.k8s.io/v1", "StorageClass"),
            ("storage.k8s.io/v1", "StorageClassList"),
        ] {
            let d = descriptor(api_version, kind);
            assert!(
                d.as_ref().is_some_and(|d| d.name() == kind),
                "{api_version} {kind}: {d:?}"
            );
        }
    }

    #[test]
    fn inline_and_renamed_fields_name_fields_that_exist() {
        let pool = pool().unwrap();
        for (message, field) in INLINE {
            let m = pool.get_message_by_name(message);
            assert!(
                m.as_ref()
                    .is_some_and(|m| m.get_field_by_name(field).is_some()),
                "{message}.{field}"
            );
        }
        for (message, field, json) in RENAMED {
            let m = pool.get_message_by_name(message).unwrap();
            let f = field_by_json_name(&m, json).unwrap();
            assert_eq!((f.name(), json_name(&m, &f)), (*field, *json));
        }
        assert!(!has_message("samplecrd.k8s.io/v1", "Network"));
        assert!(!has_message("example.com/v1", "Pod"));
        assert!(!has_message(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition"
        ));
    }
}
