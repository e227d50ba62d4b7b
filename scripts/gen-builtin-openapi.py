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
    ("", "v1", "Secret", "V1Secret",
     "Secret holds secret data of a certain type. The total bytes of the values in the Data "
     "field must be less than MaxSecretSize bytes."),
    ("", "v1", "ServiceAccount", "V1ServiceAccount",
     "ServiceAccount binds together: * a name, understood by users, and perhaps by peripheral "
     "systems, for an identity * a principal that can be authenticated and authorized * a set "
     "of secrets"),
    ("", "v1", "Service", "V1Service",
     "Service is a named abstraction of software service (for example, mysql) consisting of "
     "local port (for example 3306) that the proxy listens on, and the selector that "
     "determines which pods will answer requests sent through the proxy."),
    ("", "v1", "Endpoints", "V1Endpoints",
     "Endpoints is a collection of endpoints that implement the actual service."),
    ("", "v1", "PersistentVolumeClaim", "V1PersistentVolumeClaim",
     "PersistentVolumeClaim is a user's request for and claim to a persistent volume"),
    ("", "v1", "PersistentVolume", "V1PersistentVolume",
     "PersistentVolume (PV) is a storage resource provisioned by an administrator. It is "
     "analogous to a node."),
    ("", "v1", "ResourceQuota", "V1ResourceQuota",
     "ResourceQuota sets aggregate quota restrictions enforced per namespace"),
    ("", "v1", "LimitRange", "V1LimitRange",
     "LimitRange sets resource usage limits for each kind of resource in a Namespace."),
    ("", "v1", "Node", "V1Node",
     "Node is a worker node in Kubernetes. Each node will have a unique identifier in the "
     "cache (i.e. in etcd)."),
    ("apps", "v1", "ReplicaSet", "V1ReplicaSet",
     "ReplicaSet ensures that a specified number of pod replicas are running at any given time."),
    ("apps", "v1", "Deployment", "V1Deployment",
     "Deployment enables declarative updates for Pods and ReplicaSets."),
    ("apps", "v1", "StatefulSet", "V1StatefulSet",
     "StatefulSet represents a set of pods with consistent identities."),
    ("apps", "v1", "DaemonSet", "V1DaemonSet",
     "DaemonSet represents the configuration of a daemon set."),
    ("apps", "v1", "ControllerRevision", "V1ControllerRevision",
     "ControllerRevision implements an immutable snapshot of state data."),
    ("batch", "v1", "Job", "V1Job",
     "Job represents the configuration of a single job."),
    ("batch", "v1", "CronJob", "V1CronJob",
     "CronJob represents the configuration of a single cron job."),
    ("coordination.k8s.io", "v1", "Lease", "V1Lease",
     "Lease defines a lease concept."),
    ("networking.k8s.io", "v1", "Ingress", "V1Ingress",
     "Ingress is a collection of rules that allow inbound connections to reach the endpoints "
     "defined by a backend."),
    ("networking.k8s.io", "v1", "IngressClass", "V1IngressClass",
     "IngressClass represents the class of the Ingress, referenced by the Ingress Spec."),
    ("networking.k8s.io", "v1", "NetworkPolicy", "V1NetworkPolicy",
     "NetworkPolicy describes what network traffic is allowed for a set of Pods"),
    ("discovery.k8s.io", "v1", "EndpointSlice", "V1EndpointSlice",
     "EndpointSlice represents a subset of the endpoints that implement a service."),
    ("autoscaling", "v2", "HorizontalPodAutoscaler", "V2HorizontalPodAutoscaler",
     "HorizontalPodAutoscaler is the configuration for a horizontal pod autoscaler, which "
     "automatically manages the replica count of any resource implementing the scale "
     "subresource based on the metrics specified."),
    ("autoscaling", "v1", "HorizontalPodAutoscaler", "V1HorizontalPodAutoscaler",
     "configuration of a horizontal pod autoscaler."),
    ("policy", "v1", "PodDisruptionBudget", "V1PodDisruptionBudget",
     "PodDisruptionBudget is an object to define the max disruption that can be caused to a "
     "collection of pods"),
    ("scheduling.k8s.io", "v1", "PriorityClass", "V1PriorityClass",
     "PriorityClass defines mapping from a priority class name to the priority integer value."),
    ("storage.k8s.io", "v1", "StorageClass", "V1StorageClass",
     "StorageClass describes the parameters for a class of storage for which "
     "PersistentVolumes can be dynamically provisioned."),
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
    "batch": "io.k8s.api.batch",
    "networking.k8s.io": "io.k8s.api.networking",
    "discovery.k8s.io": "io.k8s.api.discovery",
    "autoscaling": "io.k8s.api.autoscaling",
    "policy": "io.k8s.api.policy",
    "scheduling.k8s.io": "io.k8s.api.scheduling",
    "storage.k8s.io": "io.k8s.api.storage",
    "rbac.authorization.k8s.io": "io.k8s.api.rbac",
    "apiextensions.k8s.io": "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions",
}
META = "io.k8s.apimachinery.pkg.apis.meta.v1"
# Core types first reached from another group's kinds (a Deployment's pod template).
CORE_MODELS = {"V1PodTemplateSpec", "V1PersistentVolumeClaim", "V1ObjectReference",
               "V1TypedLocalObjectReference", "V1TopologySelectorTerm",
               "V1TopologySelectorLabelRequirement", "V1LocalObjectReference"}
META_MODELS = {"V1ObjectMeta", "V1LabelSelector", "V1LabelSelectorRequirement",
               "V1ManagedFieldsEntry", "V1OwnerReference", "V1Condition", "V1ListMeta"}
# Fields Kubernetes declares as int-or-string (the client types them as plain `object`).
INT_OR_STRING = {"max_surge", "max_unavailable", "min_available", "port", "target_port"}
# The client's version prefixes and group prefixes on model names (V1, CoreV1, ...).
MODEL_GROUPS = "Core|Apps|Rbac|Coordination|Apiextensions|Discovery|Networking|Storage|Policy|Batch"
PREFIX = re.compile(rf"^({MODEL_GROUPS})?V\d+((alpha|beta)\d+)?")

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
            version = re.match(rf"^(?:{MODEL_GROUPS})?(V\d+(?:(?:alpha|beta)\d+)?)", model)
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
