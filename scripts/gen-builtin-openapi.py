#!/usr/bin/env python3
"""Writes the OpenAPI v3 schemas of keel's built-in kinds, as Kubernetes publishes them, to
services/apiserver/src/registry/builtin-openapi.json (checked in; the API server embeds
it for `kubectl explain`).

Kubernetes' own OpenAPI document is generated from its Go types; the official Python client
(PyPI `kubernetes`, pinned in tests/python/requirements.txt) is generated from that document and
keeps its field names, types, descriptions and required fields. This script reads them back
from the client's model classes:

    target/python-venv/bin/python scripts/gen-builtin-openapi.py

(tests/python/run.sh makes that virtual environment.) Run it again when the pin changes or a
built-in kind is added; the output is deterministic.
"""

import inspect
import json
import re
import sys
from pathlib import Path

import kubernetes
import kubernetes.client.models as models

# The kinds keel serves, their group/version and model, and Kubernetes' one-line description
# of each (the Go type's comment; the client keeps field descriptions only).
KINDS = [
    ("", "v1", "Namespace", "V1Namespace",
     "Namespace provides a scope for Names. Use of multiple namespaces is optional."),
    ("", "v1", "Pod", "V1Pod",
     "Pod is a collection of containers that can run on a host. This resource is created by "
     "clients and scheduled onto hosts."),
    ("", "v1", "ConfigMap", "V1ConfigMap",
     "ConfigMap holds configuration data for pods to consume."),
    ("", "v1", "Event", "CoreV1Event",
     "Event is a report of an event somewhere in the cluster."),
    ("apps", "v1", "ReplicaSet", "V1ReplicaSet",
     "ReplicaSet ensures that a specified number of pod replicas are running at any given time."),
    ("apps", "v1", "Deployment", "V1Deployment",
     "Deployment enables declarative updates for Pods and ReplicaSets."),
    ("coordination.k8s.io", "v1", "Lease", "V1Lease",
     "Lease defines a lease concept."),
    ("rbac.authorization.k8s.io", "v1", "Role", "V1Role",
     "Role is a namespaced, logical grouping of PolicyRules that can be referenced as a unit by "
     "a RoleBinding."),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding", "V1RoleBinding",
     "RoleBinding references a role, but does not contain it. It can reference a Role in the "
     "same namespace or a ClusterRole in the global namespace."),
    ("rbac.authorization.k8s.io", "v1", "ClusterRole", "V1ClusterRole",
     "ClusterRole is a cluster level, logical grouping of PolicyRules that can be referenced as "
     "a unit by a RoleBinding or ClusterRoleBinding."),
    ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "V1ClusterRoleBinding",
     "ClusterRoleBinding references a ClusterRole, but not contain it. It can reference a "
     "ClusterRole in the global namespace, and adds who information via Subject."),
    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "V1CustomResourceDefinition",
     "CustomResourceDefinition represents a resource that should be exposed on the API server. "
     "Its name MUST be in the format <.spec.name>.<.spec.group>."),
]

# Go packages of the groups, for Kubernetes' schema names (io.k8s.api.apps.v1.Deployment).
PACKAGES = {
    "": "io.k8s.api.core",
    "apps": "io.k8s.api.apps",
    "coordination.k8s.io": "io.k8s.api.coordination",
    "rbac.authorization.k8s.io": "io.k8s.api.rbac",
    "apiextensions.k8s.io": "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions",
}
META = "io.k8s.apimachinery.pkg.apis.meta.v1"
# Core types first reached from another group's kinds (a Deployment's pod template).
CORE_MODELS = {"V1PodTemplateSpec"}
META_MODELS = {"V1ObjectMeta", "V1LabelSelector", "V1LabelSelectorRequirement",
               "V1ManagedFieldsEntry", "V1OwnerReference", "V1Condition", "V1ListMeta"}
# Fields Kubernetes declares as int-or-string (the client types them as plain `object`).
INT_OR_STRING = {"max_surge", "max_unavailable", "port", "target_port"}
# The client's version prefixes and group prefixes on model names (V1, CoreV1, ...).
PREFIX = re.compile(r"^(Core|Apps|Rbac|Coordination|Apiextensions)?V\d+((alpha|beta)\d+)?")

NOQA = re.compile(r"\s*# noqa: E501")


def field_description(cls, attr):
    """The field's description: the property docstring between its first line and :return:."""
    doc = inspect.getdoc(getattr(cls, attr)) or ""
    lines = [NOQA.sub("", l) for l in doc.splitlines()[1:]]
    text = "\n".join(lines).split(":return:")[0].strip()
    return text


def required(cls, attr):
    prop = getattr(cls, attr)
    if prop.fset is None:
        return False
    return "must not be `None`" in inspect.getsource(prop.fset)


class Generator:
    def __init__(self):
        self.names = {}  # model class name -> schema name
        self.schemas = {}

    def name_of(self, model, package):
        if model not in self.names:
            base = PREFIX.sub("", model)
            pkg = META if model in META_MODELS else PACKAGES[""] if model in CORE_MODELS else package
            version = re.match(r"^(?:Core|Apps|Rbac|Coordination|Apiextensions)?(V\d+(?:(?:alpha|beta)\d+)?)", model)
            version = version.group(1).lower() if version else "v1"
            self.names[model] = f"{pkg}.{version}.{base}" if pkg != META else f"{META}.{base}"
            self.schemas[self.names[model]] = None  # reserved: recursion stops here
            self.schemas[self.names[model]] = self.model_schema(model, package)
        return self.names[model]

    def type_schema(self, t, package, attr=None):
        m = re.fullmatch(r"list\[(.+)\]", t)
        if m:
            return {"type": "array", "items": self.type_schema(m.group(1), package)}
        m = re.fullmatch(r"dict\(str, (.+)\)", t)
        if m:
            return {"type": "object", "additionalProperties": self.type_schema(m.group(1), package)}
        simple = {"str": {"type": "string"}, "int": {"type": "integer", "format": "int64"},
                  "bool": {"type": "boolean"}, "float": {"type": "number", "format": "double"},
                  "datetime": {"type": "string", "format": "date-time"},
                  "date": {"type": "string", "format": "date"}}
        if t in simple:
            return dict(simple[t])
        if t == "object":
            if attr in INT_OR_STRING:
                return {"x-kubernetes-int-or-string": True}
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        if hasattr(models, t):
            return {"allOf": [{"$ref": "#/components/schemas/" + self.name_of(t, package)}]}
        raise SystemExit(f"unknown type {t!r}")

    def model_schema(self, model, package):
        cls = getattr(models, model)
        props, req = {}, []
        for attr, t in sorted(cls.openapi_types.items(), key=lambda kv: cls.attribute_map[kv[0]]):
            name = cls.attribute_map[attr]
            s = self.type_schema(t, package, attr)
            d = field_description(cls, attr)
            if d:
                s["description"] = d
            props[name] = s
            if required(cls, attr):
                req.append(name)
        out = {"type": "object", "properties": props}
        if req:
            out["required"] = req
        return out

    def run(self):
        kinds = {}
        for model in sorted(META_MODELS):
            self.name_of(model, META)
        for group, version, kind, model, description in KINDS:
            name = self.name_of(model, PACKAGES[group])
            s = self.schemas[name]
            s["description"] = description
            s["x-kubernetes-group-version-kind"] = [{"group": group, "version": version, "kind": kind}]
            kinds[f"{group}/{version}/{kind}"] = name
        return {"generatedFrom": f"kubernetes {kubernetes.__version__} (PyPI)",
                "kinds": kinds, "schemas": dict(sorted(self.schemas.items()))}


def main():
    out = Path(__file__).resolve().parent.parent / "services/apiserver/src/registry/builtin-openapi.json"
    doc = Generator().run()
    out.write_text(json.dumps(doc, indent=None, separators=(",", ":"), sort_keys=False) + "\n")
    print(f"{out}: {len(doc['kinds'])} kinds, {len(doc['schemas'])} schemas, "
          f"{out.stat().st_size // 1024} KiB", file=sys.stderr)


if __name__ == "__main__":
    main()
