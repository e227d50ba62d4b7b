#!/usr/bin/env python3
"""Writes what keel knows of its built-in kinds' schemas, from Kubernetes' own OpenAPI
document, into two checked-in files:

- services/apiserver/src/registry/builtin-openapi.json: the kinds' OpenAPI v3 schemas as the
  API server serves them (`/openapi/v3`, `/openapi/v2`, `kubectl explain`, field validation):
  every definition a kind reaches, exactly as Kubernetes' document has it (names, types,
  formats, descriptions, required fields, and the `x-kubernetes-*` extensions: list and map
  types, patch strategies and merge keys, group-version-kinds, unions), references written
  the v3 way (`allOf: [{$ref: #/components/schemas/<name>}]`).
- crates/keel-patch/src/schema/builtin-types.json: the same definitions cut down to what
  server-side apply and strategic merge patch read (properties, items, additionalProperties,
  references, the five list, map and patch extensions, a key's default), and only the parts
  that say something: a field not there is an atomic list or a granular struct in both (every
  map stays, as `additionalProperties`, since apply owns a map's keys as items).
  keel-patch embeds it (`BuiltinSchema`).

The source is Kubernetes 1.32's `api/openapi-spec/swagger.json` (OpenAPI v2), as the official
Python client's release for 1.32 keeps it (SOURCE below; the client's generator downloads it
from Kubernetes' release-1.32 branch, its scripts/constants.py KUBERNETES_BRANCH, and keeps
it as `swagger.json.unprocessed`). To run again, fetch that file and give its path:

    curl -fLo /tmp/swagger.json \\
      https://raw.githubusercontent.com/kubernetes-client/python/v32.0.1/kubernetes/swagger.json.unprocessed
    python3 scripts/gen-builtin-openapi.py /tmp/swagger.json

(or `git -C <a clone of kubernetes-client/python> show v32.0.1:kubernetes/swagger.json.unprocessed`).
The script refuses a document whose sha256 is not SOURCE's: to move to another Kubernetes
release, change SOURCE (and KINDS, when keel serves other kinds) and run it again. It needs
nothing beyond Python 3's standard library; the output is deterministic.

What is not in Kubernetes' document is kept here by hand, each said where it is added
(HAND_KEPT, also listed in the types file's `handKept`): keel's InitializerConfiguration and
`ObjectMeta.initializers`; the v1beta1 CustomResourceDefinition keel still serves; the
list-map keys' defaults Kubernetes' v3 documents carry and its v2 document does not
(`protocol: TCP` of container and service ports); and the one type Kubernetes makes atomic
to server-side apply by its name (RawExtension).
"""

import copy
import hashlib
import json
import sys
from pathlib import Path

SOURCE = {
    "repository": "https://github.com/kubernetes-client/python",
    "tag": "v32.0.1",
    "commit": "bc4fd671bfa702007e090ae3ae28bf28bc9c3a6e",
    "path": "kubernetes/swagger.json.unprocessed",
    "sha256": "0350c464f4e616e1240676ca629dac47e46d87d6c42d84b42a0bd98dfa0d5139",
    "kubernetes": "release-1.32 api/openapi-spec/swagger.json",
}

# The built-in kinds keel serves (crates/keel-api/src/resource.rs), found in the document by
# their `x-kubernetes-group-version-kind`.
KINDS = [
    ("", "v1", k) for k in (
        "Namespace", "Pod", "ConfigMap", "Event", "Secret", "ServiceAccount", "Service",
        "Endpoints", "PersistentVolumeClaim", "PersistentVolume", "ResourceQuota", "LimitRange",
        "Node")
] + [
    ("apps", "v1", k) for k in (
        "ReplicaSet", "Deployment", "StatefulSet", "DaemonSet", "ControllerRevision")
] + [
    ("batch", "v1", "Job"),
    ("batch", "v1", "CronJob"),
    ("coordination.k8s.io", "v1", "Lease"),
    ("networking.k8s.io", "v1", "Ingress"),
    ("networking.k8s.io", "v1", "IngressClass"),
    ("networking.k8s.io", "v1", "NetworkPolicy"),
    ("discovery.k8s.io", "v1", "EndpointSlice"),
    ("events.k8s.io", "v1", "Event"),
    ("autoscaling", "v2", "HorizontalPodAutoscaler"),
    ("autoscaling", "v1", "HorizontalPodAutoscaler"),
    ("policy", "v1", "PodDisruptionBudget"),
    ("scheduling.k8s.io", "v1", "PriorityClass"),
    ("storage.k8s.io", "v1", "StorageClass"),
] + [
    ("rbac.authorization.k8s.io", "v1", k) for k in (
        "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
] + [
    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
    ("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding"),
]

# The extensions server-side apply and strategic merge patch read.
MERGE_EXTENSIONS = (
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-patch-merge-key",
    "x-kubernetes-patch-strategy",
)

META = "io.k8s.apimachinery.pkg.apis.meta.v1"

# Kept by hand: what Kubernetes 1.32's document does not say. Each is listed in the types
# file's `handKept`.
HAND_KEPT = [
    "io.k8s.api.core.v1.ContainerPort.protocol and io.k8s.api.core.v1.ServicePort.protocol: "
    "default TCP (Kubernetes' +default=\"TCP\", in its v3 documents and server-side apply's "
    "schema, not in its v2 document)",
    f"{META}.ObjectMeta.initializers: keel's (Kubernetes 1.7-1.13's ObjectMeta; pending merges "
    "by name)",
    "admissionregistration.k8s.io/v1alpha1 InitializerConfiguration: keel's (Kubernetes "
    "1.13's types: initializers merge by name)",
    "apiextensions.k8s.io/v1beta1 CustomResourceDefinition: not in Kubernetes 1.32; keel "
    "stores it as v1, and gives it v1's types",
    "io.k8s.apimachinery.pkg.runtime.RawExtension: atomic (Kubernetes' converter of OpenAPI "
    "to server-side apply's types, kube-openapi's schemaconv, makes it an untyped atomic "
    "value by name)",
]

# Atomic to server-side apply by name (HAND_KEPT's last line).
UNTYPED_ATOMIC = ["io.k8s.apimachinery.pkg.runtime.RawExtension"]

# Defaults of list-map keys (HAND_KEPT's first line): (definition, property) -> default.
KEY_DEFAULTS = {
    ("io.k8s.api.core.v1.ContainerPort", "protocol"): "TCP",
    ("io.k8s.api.core.v1.ServicePort", "protocol"): "TCP",
}

# keel's own definitions, in the document's form (HAND_KEPT's second and third lines).
INITIALIZERS = f"{META}.Initializers"
INITIALIZER = f"{META}.Initializer"
INITIALIZER_CONFIGURATION = "io.k8s.api.admissionregistration.v1alpha1.InitializerConfiguration"
KEEL_DEFINITIONS = {
    INITIALIZERS: {"properties": {"pending": {
        "type": "array",
        "items": {"$ref": f"#/definitions/{INITIALIZER}"},
        "x-kubernetes-patch-merge-key": "name",
        "x-kubernetes-patch-strategy": "merge",
    }}},
    INITIALIZER: {"properties": {"name": {"type": "string"}}},
    INITIALIZER_CONFIGURATION: {"properties": {
        "metadata": {"$ref": f"#/definitions/{META}.ObjectMeta"},
        "initializers": {
            "type": "array",
            "items": {"$ref": "#/definitions/io.k8s.api.admissionregistration.v1alpha1.Initializer"},
            "x-kubernetes-patch-merge-key": "name",
            "x-kubernetes-patch-strategy": "merge",
        },
    }},
    "io.k8s.api.admissionregistration.v1alpha1.Initializer": {"properties": {
        "name": {"type": "string"},
    }},
}
KEEL_KINDS = {
    "admissionregistration.k8s.io/v1alpha1/InitializerConfiguration": INITIALIZER_CONFIGURATION,
}

ROOT = Path(__file__).resolve().parent.parent
SERVED = ROOT / "services/apiserver/src/registry/builtin-openapi.json"
TYPES = ROOT / "crates/keel-patch/src/schema/builtin-types.json"


def ref_name(ref):
    return ref.rsplit("/", 1)[-1]


def refs(schema):
    """The definitions a schema references, in order."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            yield ref_name(schema["$ref"])
        for key, value in schema.items():
            if key == "properties":
                for prop in value.values():
                    yield from refs(prop)
            elif key in ("items", "additionalProperties"):
                yield from refs(value)


def reached(definitions, roots):
    """Every definition the roots reach, by name."""
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        if name not in definitions:
            raise SystemExit(f"the document references {name}, which it does not define")
        seen.add(name)
        todo.extend(refs(definitions[name]))
    return seen


def to_v3(schema):
    """A v2 schema as Kubernetes' v3 documents write it: a reference is an `allOf` of one,
    beside the field's own description and extensions."""
    if isinstance(schema, list):
        return [to_v3(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "$ref":
            out["allOf"] = [{"$ref": "#/components/schemas/" + ref_name(value)}]
        elif key == "properties":
            out[key] = {name: to_v3(prop) for name, prop in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = to_v3(value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def served(definitions, kinds):
    schemas = {name: to_v3(definitions[name]) for name in reached(definitions, kinds.values())}
    for (definition, prop), default in KEY_DEFAULTS.items():
        schemas[definition]["properties"][prop]["default"] = default
    return schemas


def merge_part(schema, keep):
    """The part of a schema that merging reads; None if it says nothing. `keep(name)` says
    whether a referenced definition is kept."""
    if not isinstance(schema, dict):
        return None
    out = {k: copy.deepcopy(schema[k]) for k in MERGE_EXTENSIONS if k in schema}
    if "default" in schema:
        out["default"] = schema["default"]
    if "$ref" in schema and keep(ref_name(schema["$ref"])):
        out["$ref"] = "#/definitions/" + ref_name(schema["$ref"])
    props = {}
    for name, prop in schema.get("properties", {}).items():
        part = merge_part(prop, keep)
        if part is not None:
            props[name] = part
    if props:
        out["properties"] = props
    for key in ("items", "additionalProperties"):
        part = merge_part(schema.get(key), keep)
        if part is None and key == "additionalProperties" and isinstance(schema.get(key), dict):
            part = {}  # a map: server-side apply owns its keys as items, not as fields
        if part is not None:
            out[key] = part
    return out or None


def merge_types(definitions, kinds):
    """The definitions the kinds reach, cut to what merging reads, and keel's own."""
    definitions = copy.deepcopy(definitions)
    for (definition, prop), default in KEY_DEFAULTS.items():
        definitions[definition]["properties"][prop]["default"] = default
    for name in UNTYPED_ATOMIC:
        definitions[name]["x-kubernetes-map-type"] = "atomic"
    definitions.update(copy.deepcopy(KEEL_DEFINITIONS))
    definitions[f"{META}.ObjectMeta"]["properties"]["initializers"] = {
        "$ref": f"#/definitions/{INITIALIZERS}"}
    names = reached(definitions, list(kinds.values()) + list(KEEL_KINDS.values()))
    for name in names:
        if "properties" in definitions[name] and "additionalProperties" in definitions[name]:
            raise SystemExit(f"{name} is both a struct and a map: the cut cannot say which")
    # A definition is kept while it says something, itself or through what it references:
    # start from all of them and drop those that say nothing until none is dropped.
    kept = set(names)
    while True:
        parts = {n: merge_part(definitions[n], kept.__contains__) for n in sorted(kept)}
        now = {n for n, part in parts.items() if part is not None}
        if now == kept:
            break
        kept = now
    return {n: parts[n] for n in sorted(kept)}


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    raw = Path(sys.argv[1]).read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != SOURCE["sha256"]:
        raise SystemExit(f"{sys.argv[1]}: sha256 {digest}, not {SOURCE['sha256']} (SOURCE)")
    definitions = json.loads(raw)["definitions"]
    by_gvk = {}
    for name, schema in definitions.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            by_gvk[(gvk["group"], gvk["version"], gvk["kind"])] = name
    kinds = {}
    for group, version, kind in KINDS:
        if (group, version, kind) not in by_gvk:
            raise SystemExit(f"the document has no {group}/{version} {kind}")
        kinds[f"{group}/{version}/{kind}"] = by_gvk[(group, version, kind)]
    origin = (f"{SOURCE['kubernetes']}, as {SOURCE['repository']} {SOURCE['tag']} "
              f"({SOURCE['commit']}) keeps it at {SOURCE['path']}, sha256 {SOURCE['sha256']}")

    schemas = served(definitions, kinds)
    doc = {"generatedFrom": origin, "kinds": dict(sorted(kinds.items())),
           "schemas": dict(sorted(schemas.items()))}
    SERVED.write_text(json.dumps(doc, separators=(",", ":"), sort_keys=True) + "\n")

    api_kinds = {}
    for key, name in kinds.items():
        group, version, kind = key.split("/")
        api_kinds[f"{group}/{version}/{kind}" if group else f"{version}/{kind}"] = name
    api_kinds["apiextensions.k8s.io/v1beta1/CustomResourceDefinition"] = \
        api_kinds["apiextensions.k8s.io/v1/CustomResourceDefinition"]
    api_kinds.update(KEEL_KINDS)
    types = {"generatedFrom": origin, "handKept": HAND_KEPT,
             "kinds": dict(sorted(api_kinds.items())),
             "definitions": merge_types(definitions, kinds)}
    TYPES.write_text(json.dumps(types, indent=1, sort_keys=True) + "\n")

    for path, what in ((SERVED, f"{len(kinds)} kinds, {len(schemas)} schemas"),
                       (TYPES, f"{len(api_kinds)} kinds, {len(types['definitions'])} definitions")):
        print(f"{path.relative_to(ROOT)}: {what}, {path.stat().st_size // 1024} KiB",
              file=sys.stderr)


if __name__ == "__main__":
    main()
