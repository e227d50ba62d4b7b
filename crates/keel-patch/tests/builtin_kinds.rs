//! Strategic patches of built-in kinds with the merge keys Kubernetes declares for them, and
//! of a custom kind with the keys its CRD schema declares.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use keel_patch::{
    BuiltinSchema, MergeSchema, OpenApiSchema, PatchError, apply_strategic_merge_patch,
    create_three_way_merge_patch, create_two_way_merge_patch,
};
use serde_json::{Value, json};

fn pod_schema() -> BuiltinSchema {
    BuiltinSchema::for_kind("v1", "Pod").unwrap()
}

fn apply(doc: &Value, patch: &Value, schema: &dyn MergeSchema) -> Value {
    apply_strategic_merge_patch(doc, patch, schema)
        .unwrap_or_else(|e| panic!("applying {patch} to {doc}: {e}"))
}

/// Asserts the two-way patch from `original` to `modified` is `want` and round-trips.
fn assert_two_way(original: &Value, modified: &Value, want: &Value, schema: &dyn MergeSchema) {
    let patch = create_two_way_merge_patch(original, modified, schema).unwrap();
    assert_eq!(&patch, want, "two-way patch");
    assert_eq!(&apply(original, &patch, schema), modified, "two-way result");
}

fn myapp_pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "myapp-pod",
            "labels": {"app": "myapp"},
            "annotations": {"initializer.kubernetes.io/envoy": "true"},
        },
        "spec": {
            "containers": [{
                "name": "myapp-container",
                "image": "busybox",
                "command": ["sh", "-c", "echo Hello Kubernetes! && sleep 3600"],
            }],
        },
    })
}

fn envoy_container() -> Value {
    json!({
        "name": "envoy",
        "image": "lyft/envoy:845747b88f102c0fd262ab234308e9e22f693a1",
        "command": ["/usr/local/bin/envoy"],
        "args": ["--v2-config-only", "-l", "info", "-c", "/etc/envoy/envoy.json"],
        "volumeMounts": [{"name": "envoy-conf", "mountPath": "/etc/envoy"}],
    })
}

fn envoy_volume() -> Value {
    json!({"name": "envoy-conf", "configMap": {"name": "envoy"}})
}

/// The sidecar initializer of the seed: it builds the desired Pod, sends the two-way patch,
/// and the patch can safely be sent again.
#[test]
fn envoy_sidecar_injection_merges_by_name_and_is_idempotent() {
    let schema = pod_schema();
    let pod = myapp_pod();
    let mut desired = pod.clone();
    desired["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(envoy_container());
    desired["spec"]["volumes"] = json!([envoy_volume()]);

    let patch = create_two_way_merge_patch(&pod, &desired, &schema).unwrap();
    assert_eq!(
        patch,
        json!({"spec": {
            "$setElementOrder/containers": [{"name": "myapp-container"}, {"name": "envoy"}],
            "containers": [envoy_container()],
            "volumes": [envoy_volume()],
        }})
    );

    let once = apply(&pod, &patch, &schema);
    assert_eq!(once, desired);
    let containers = once["spec"]["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 2);
    assert_eq!(containers[0]["image"], "busybox");
    assert_eq!(containers[1]["command"], json!(["/usr/local/bin/envoy"]));

    let twice = apply(&once, &patch, &schema);
    assert_eq!(
        twice, desired,
        "a re-run must not duplicate the sidecar or the volume"
    );

    // The patch does not clobber what others set meanwhile.
    let mut busy = pod.clone();
    busy["status"] = json!({"phase": "Pending"});
    busy["metadata"]["labels"]["team"] = json!("a");
    let result = apply(&busy, &patch, &schema);
    assert_eq!(result["status"]["phase"], "Pending");
    assert_eq!(result["metadata"]["labels"]["team"], "a");
    assert_eq!(result["spec"]["containers"].as_array().unwrap().len(), 2);
}

#[test]
fn containers_env_and_mounts_merge_by_their_keys() {
    let schema = pod_schema();
    let original = json!({"spec": {"containers": [
        {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
         "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "tmp", "mountPath": "/tmp"}]},
        {"name": "log", "image": "log:1"},
    ]}});
    let modified = json!({"spec": {"containers": [
        {"name": "app", "image": "app:2", "env": [{"name": "A", "value": "1"}, {"name": "C", "value": "3"}],
         "volumeMounts": [{"name": "data2", "mountPath": "/data"}, {"name": "tmp", "mountPath": "/tmp"}]},
    ]}});
    assert_two_way(
        &original,
        &modified,
        &json!({"spec": {
            "$setElementOrder/containers": [{"name": "app"}],
            "containers": [
                {
                    "name": "app",
                    "image": "app:2",
                    "$setElementOrder/env": [{"name": "A"}, {"name": "C"}],
                    "env": [{"name": "C", "value": "3"}, {"name": "B", "$patch": "delete"}],
                    "$setElementOrder/volumeMounts": [{"mountPath": "/data"}, {"mountPath": "/tmp"}],
                    "volumeMounts": [{"mountPath": "/data", "name": "data2"}],
                },
                {"name": "log", "$patch": "delete"},
            ],
        }}),
        &schema,
    );
}

#[test]
fn ports_are_keyed_by_port_and_protocol_with_tcp_by_default() {
    let schema = pod_schema();
    let live = json!({"spec": {"containers": [{"name": "dns", "ports": [
        {"containerPort": 53, "name": "dns-tcp"},
        {"containerPort": 53, "protocol": "UDP", "name": "dns"},
    ]}]}});
    // Spelling out the default protocol names the same port.
    let patch = json!({"spec": {"containers": [{"name": "dns", "ports": [
        {"containerPort": 53, "protocol": "TCP", "hostPort": 5353},
    ]}]}});
    assert_eq!(
        apply(&live, &patch, &schema),
        json!({"spec": {"containers": [{"name": "dns", "ports": [
            {"containerPort": 53, "name": "dns-tcp", "protocol": "TCP", "hostPort": 5353},
            {"containerPort": 53, "protocol": "UDP", "name": "dns"},
        ]}]}})
    );
    // Deleting 53/UDP leaves 53/TCP alone.
    let modified = json!({"spec": {"containers": [{"name": "dns", "ports": [
        {"containerPort": 53, "name": "dns-tcp"},
    ]}]}});
    assert_two_way(
        &live,
        &modified,
        &json!({"spec": {
            "$setElementOrder/containers": [{"name": "dns"}],
            "containers": [{
                "name": "dns",
                "$setElementOrder/ports": [{"containerPort": 53}],
                "ports": [{"containerPort": 53, "protocol": "UDP", "$patch": "delete"}],
            }],
        }}),
        &schema,
    );
}

#[test]
fn volumes_are_unions_whose_patches_retain_keys() {
    let schema = pod_schema();
    let original = json!({"spec": {"volumes": [
        {"name": "conf", "emptyDir": {}},
        {"name": "data", "hostPath": {"path": "/data"}},
    ]}});
    let modified = json!({"spec": {"volumes": [
        {"name": "conf", "configMap": {"name": "app-conf"}},
        {"name": "data", "hostPath": {"path": "/data"}},
    ]}});
    assert_two_way(
        &original,
        &modified,
        &json!({"spec": {
            "$setElementOrder/volumes": [{"name": "conf"}, {"name": "data"}],
            "volumes": [{
                "$retainKeys": ["configMap", "name"],
                "name": "conf",
                "configMap": {"name": "app-conf"},
                "emptyDir": null,
            }],
        }}),
        &schema,
    );
    // A hand-written patch switching the source clears the old one without naming it.
    let patch = json!({"spec": {"volumes": [
        {"$retainKeys": ["name", "secret"], "name": "conf", "secret": {"secretName": "s"}},
    ]}});
    assert_eq!(
        apply(&original, &patch, &schema),
        json!({"spec": {"volumes": [
            {"name": "conf", "secret": {"secretName": "s"}},
            {"name": "data", "hostPath": {"path": "/data"}},
        ]}})
    );
}

#[test]
fn image_pull_secrets_merge_and_tolerations_replace() {
    let schema = pod_schema();
    let live = json!({"spec": {
        "imagePullSecrets": [{"name": "a"}],
        "tolerations": [{"key": "k", "operator": "Exists"}],
    }});
    let patch = json!({"spec": {
        "imagePullSecrets": [{"name": "b"}],
        "tolerations": [{"key": "other", "operator": "Exists"}],
    }});
    // Without `$setElementOrder`, Kubernetes puts a patch's new elements before the live
    // ones (its `kubectl patch` documentation shows the added container first).
    assert_eq!(
        apply(&live, &patch, &schema),
        json!({"spec": {
            "imagePullSecrets": [{"name": "b"}, {"name": "a"}],
            "tolerations": [{"key": "other", "operator": "Exists"}],
        }})
    );
}

#[test]
fn finalizers_are_a_set() {
    let schema = BuiltinSchema::for_kind("v1", "ConfigMap").unwrap();
    let live = json!({"metadata": {"finalizers": ["a.example.com", "b.example.com"]}});
    assert_eq!(
        apply(
            &live,
            &json!({"metadata": {"finalizers": ["b.example.com", "c.example.com"]}}),
            &schema
        ),
        json!({"metadata": {"finalizers": ["a.example.com", "b.example.com", "c.example.com"]}})
    );
    assert_eq!(
        apply(
            &live,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.example.com"]}}),
            &schema
        ),
        json!({"metadata": {"finalizers": ["b.example.com"]}})
    );
    assert_two_way(
        &live,
        &json!({"metadata": {"finalizers": ["b.example.com"]}}),
        &json!({"metadata": {
            "$deleteFromPrimitiveList/finalizers": ["a.example.com"],
            "$setElementOrder/finalizers": ["b.example.com"],
        }}),
        &schema,
    );
}

#[test]
fn owner_references_merge_by_uid() {
    let schema = BuiltinSchema::for_kind("apps/v1", "ReplicaSet").unwrap();
    let live = json!({"metadata": {"ownerReferences": [
        {"uid": "u1", "kind": "Deployment", "name": "web", "controller": true},
    ]}});
    let patch = json!({"metadata": {"ownerReferences": [
        {"uid": "u1", "blockOwnerDeletion": true},
        {"uid": "u2", "kind": "Thing", "name": "t"},
    ]}});
    assert_eq!(
        apply(&live, &patch, &schema),
        json!({"metadata": {"ownerReferences": [
            {"uid": "u1", "kind": "Deployment", "name": "web", "controller": true, "blockOwnerDeletion": true},
            {"uid": "u2", "kind": "Thing", "name": "t"},
        ]}})
    );
    let release = json!({"metadata": {"ownerReferences": [{"uid": "u1", "$patch": "delete"}]}});
    assert_eq!(
        apply(&live, &release, &schema),
        json!({"metadata": {"ownerReferences": []}})
    );
}

/// An initializer removes only its own name from `pending`, whatever others did meanwhile.
#[test]
fn pending_initializers_merge_by_name() {
    let schema = pod_schema();
    let seen = json!({"metadata": {"initializers": {"pending": [
        {"name": "envoy.initializer.keel.io"}, {"name": "logging.initializer.keel.io"},
    ]}}});
    let mut done = seen.clone();
    done["metadata"]["initializers"]["pending"]
        .as_array_mut()
        .unwrap()
        .remove(0);
    let patch = create_two_way_merge_patch(&seen, &done, &schema).unwrap();
    assert_eq!(
        patch,
        json!({"metadata": {"initializers": {
            "$setElementOrder/pending": [{"name": "logging.initializer.keel.io"}],
            "pending": [{"name": "envoy.initializer.keel.io", "$patch": "delete"}],
        }}})
    );
    let mut live = seen.clone();
    live["metadata"]["initializers"]["pending"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "late.initializer.keel.io"}));
    assert_eq!(
        apply(&live, &patch, &schema),
        json!({"metadata": {"initializers": {"pending": [
            {"name": "logging.initializer.keel.io"}, {"name": "late.initializer.keel.io"},
        ]}}})
    );
}

fn deployment(image: &str, replicas: u64) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "replicas": replicas,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image, "ports": [{"containerPort": 80}]}]},
            },
        },
    })
}

#[test]
fn deployments_merge_their_pod_template() {
    let schema = BuiltinSchema::for_kind("apps/v1", "Deployment").unwrap();
    let live = deployment("nginx:1", 3);
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}}}});
    assert_eq!(apply(&live, &patch, &schema), deployment("nginx:2", 3));

    // Switching the strategy type clears the rolling-update parameters (retainKeys).
    let mut recreate = live.clone();
    recreate["spec"]["strategy"] = json!({"type": "Recreate"});
    let patch = create_two_way_merge_patch(&live, &recreate, &schema).unwrap();
    assert_eq!(
        patch,
        json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": null}}})
    );
    assert_eq!(apply(&live, &patch, &schema), recreate);
}

/// `kubectl apply` of a Deployment whose live object others have changed.
#[test]
fn three_way_apply_keeps_what_others_set_and_deletes_what_the_file_dropped() {
    let schema = BuiltinSchema::for_kind("apps/v1", "Deployment").unwrap();
    let mut last = deployment("nginx:1", 3);
    last["metadata"]["labels"]["tier"] = json!("front");
    let mut file = deployment("nginx:2", 3);
    file["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "MODE", "value": "fast"}]);

    let mut live = last.clone();
    live["metadata"]["annotations"] = json!({"deployment.kubernetes.io/revision": "4"});
    live["status"] =
        json!({"replicas": 3, "conditions": [{"type": "Available", "status": "True"}]});
    live["spec"]["replicas"] = json!(5); // scaled by an autoscaler
    live["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "sidecar", "image": "proxy:1"}));

    let strict = create_three_way_merge_patch(Some(&last), &file, &live, &schema, false);
    assert_eq!(
        strict,
        Err(PatchError::Conflict {
            path: "spec.replicas".into()
        })
    );

    let patch = create_three_way_merge_patch(Some(&last), &file, &live, &schema, true).unwrap();
    let result = apply(&live, &patch, &schema);
    assert_eq!(
        result["metadata"]["labels"],
        json!({"app": "web"}),
        "tier was dropped from the file"
    );
    assert_eq!(
        result["metadata"]["annotations"],
        live["metadata"]["annotations"]
    );
    assert_eq!(result["status"], live["status"]);
    assert_eq!(result["spec"]["replicas"], 3, "overwrite: the file wins");
    let containers = result["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(
        containers.len(),
        2,
        "the sidecar someone else added stays: {containers:?}"
    );
    assert_eq!(containers[0]["image"], "nginx:2");
    assert_eq!(
        containers[0]["env"],
        json!([{"name": "MODE", "value": "fast"}])
    );
    assert_eq!(containers[1]["name"], "sidecar");

    // Without the autoscaler's change there is nothing to conflict with.
    live["spec"]["replicas"] = json!(3);
    let patch = create_three_way_merge_patch(Some(&last), &file, &live, &schema, false).unwrap();
    assert_eq!(apply(&live, &patch, &schema)["spec"]["replicas"], 3);
}

#[test]
fn first_apply_without_last_applied_only_adds_and_changes() {
    let schema = pod_schema();
    let file = myapp_pod();
    let mut live = myapp_pod();
    live["metadata"]["uid"] = json!("1234");
    live["spec"]["containers"][0]["image"] = json!("busybox:old");
    let patch = create_three_way_merge_patch(None, &file, &live, &schema, true).unwrap();
    assert_eq!(
        patch,
        json!({"spec": {
            "$setElementOrder/containers": [{"name": "myapp-container"}],
            "containers": [{"name": "myapp-container", "image": "busybox"}],
        }})
    );
    let strict = create_three_way_merge_patch(None, &file, &live, &schema, false);
    assert!(
        matches!(strict, Err(PatchError::Conflict { path }) if path == "spec.containers[name=myapp-container].image")
    );
}

#[test]
fn a_disruption_budgets_selector_is_replaced_whole() {
    // PodDisruptionBudgetSpec.selector: `patchStrategy: replace` in Kubernetes' document.
    let schema = BuiltinSchema::for_kind("policy/v1", "PodDisruptionBudget").unwrap();
    let live = json!({"spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}});
    let patch = json!({"spec": {"selector": {"matchLabels": {"tier": "front"}}}});
    assert_eq!(
        apply(&live, &patch, &schema),
        json!({"spec": {"minAvailable": 1, "selector": {"matchLabels": {"tier": "front"}}}})
    );
    // A changed selector is sent whole; an unchanged one not at all.
    let modified = json!({"spec": {"minAvailable": 1,
        "selector": {"matchLabels": {"app": "web", "tier": "front"}}}});
    assert_two_way(
        &live,
        &modified,
        &json!({"spec": {"selector": {"matchLabels": {"app": "web", "tier": "front"}}}}),
        &schema,
    );
    let modified =
        json!({"spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}});
    assert_two_way(
        &live,
        &modified,
        &json!({"spec": {"minAvailable": 2}}),
        &schema,
    );
    // A Deployment's selector, with no strategy of its own, merges key by key.
    let deployment = BuiltinSchema::for_kind("apps/v1", "Deployment").unwrap();
    assert_eq!(
        apply(&live, &patch, &deployment),
        json!({"spec": {"minAvailable": 1,
            "selector": {"matchLabels": {"app": "web", "tier": "front"}}}})
    );
}

#[test]
fn spread_constraints_merge_by_topology_key_as_in_kubernetes() {
    let schema = pod_schema();
    let zone = |when: &str, skew: u64| json!({"topologyKey": "zone", "whenUnsatisfiable": when, "maxSkew": skew});
    let live = json!({"spec": {"topologySpreadConstraints": [zone("DoNotSchedule", 1)]}});
    // What kubectl sends: the merge key and what changed.
    let patch =
        json!({"spec": {"topologySpreadConstraints": [{"topologyKey": "zone", "maxSkew": 2}]}});
    assert_eq!(
        apply(&live, &patch, &schema),
        json!({"spec": {"topologySpreadConstraints": [zone("DoNotSchedule", 2)]}})
    );
    // Two constraints on one key cannot be patched one by one: the list is replaced.
    let modified = json!({"spec": {"topologySpreadConstraints": [
        zone("DoNotSchedule", 1), zone("ScheduleAnyway", 3)]}});
    assert_two_way(
        &live,
        &modified,
        &json!({"spec": {"topologySpreadConstraints": [
            {"$patch": "replace"}, zone("DoNotSchedule", 1), zone("ScheduleAnyway", 3)]}}),
        &schema,
    );
}

#[test]
fn custom_kinds_merge_by_their_list_map_keys() {
    let schema = OpenApiSchema::new(json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {
            "routes": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["host", "port"],
                "items": {"type": "object", "properties": {
                    "host": {"type": "string"},
                    "port": {"type": "integer", "default": 443},
                    "weight": {"type": "integer"},
                }},
            },
            "tags": {"type": "array", "x-kubernetes-list-type": "set"},
        }}},
    }));
    let live = json!({"metadata": {"finalizers": ["x"]}, "spec": {
        "routes": [{"host": "a", "weight": 1}, {"host": "a", "port": 80, "weight": 1}],
        "tags": ["blue"],
    }});
    let patch = json!({"metadata": {"finalizers": ["y"]}, "spec": {
        "routes": [{"host": "a", "port": 443, "weight": 5}],
        "tags": ["green"],
    }});
    assert_eq!(
        apply(&live, &patch, &schema),
        json!({"metadata": {"finalizers": ["y", "x"]}, "spec": {
            "routes": [{"host": "a", "port": 443, "weight": 5}, {"host": "a", "port": 80, "weight": 1}],
            "tags": ["green", "blue"],
        }})
    );
    let modified = json!({"metadata": {"finalizers": ["x"]}, "spec": {
        "routes": [{"host": "a", "port": 80, "weight": 2}],
        "tags": ["blue"],
    }});
    assert_two_way(
        &live,
        &modified,
        &json!({"spec": {
            "$setElementOrder/routes": [{"host": "a", "port": 80}],
            "routes": [{"host": "a", "port": 80, "weight": 2}, {"host": "a", "$patch": "delete"}],
        }}),
        &schema,
    );
}
