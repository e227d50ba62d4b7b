//! `keelctl rollout` and `keelctl scale` end to end: the real binary against a real
//! `keel-apiserver` and etcd.
//!
//! No controller-manager runs here: the test plays the Deployment controller, creating the
//! ReplicaSets of each revision (owned by the Deployment, labelled `pod-template-hash`,
//! annotated with their revision) and writing the Deployment's status, as Kubernetes' would.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use keel_client::{Client, GroupVersionResource, PatchType, gvr};
use keel_tests::keelctl::{Keelctl, PATIENCE};
use keel_tests::{ApiServer, Etcd, bin, eventually};
use serde_json::{Value, json};

const NS: &str = "default";

fn deployments() -> GroupVersionResource {
    gvr("apps", "v1", "deployments")
}

fn replicasets() -> GroupVersionResource {
    gvr("apps", "v1", "replicasets")
}

fn template(image: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": "nginx"}},
        "spec": {"containers": [{"name": "nginx", "image": image, "ports": [{"containerPort": 80}]}]}
    })
}

async fn create_deployment(c: &Client, name: &str, image: &str) -> Value {
    c.create(
        &deployments(),
        NS,
        &json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "nginx"}},
                "template": template(image)
            }
        }),
    )
    .await
    .unwrap()
}

async fn get(c: &Client, name: &str) -> Value {
    c.get(&deployments(), NS, name).await.unwrap()
}

async fn merge(c: &Client, name: &str, patch: Value) -> Value {
    c.patch(&deployments(), NS, name, PatchType::Merge, &patch)
        .await
        .unwrap()
}

/// Writes the Deployment's status, as its controller would.
async fn set_status(c: &Client, name: &str, status: Value) {
    c.patch_subresource(
        &deployments(),
        NS,
        name,
        "status",
        PatchType::Merge,
        serde_json::to_vec(&json!({ "status": status })).unwrap(),
    )
    .await
    .unwrap();
}

/// Plays the Deployment controller for one revision: a ReplicaSet `<deployment>-<revision>`
/// with the Deployment's current template, and the revision on both.
async fn roll(c: &Client, name: &str, revision: u32, change_cause: Option<&str>) -> Value {
    let d = get(c, name).await;
    let hash = format!("h{revision}");
    let mut t = d["spec"]["template"].clone();
    t["metadata"]["labels"]["pod-template-hash"] = json!(hash);
    let mut annotations = json!({"deployment.kubernetes.io/revision": revision.to_string()});
    if let Some(cause) = change_cause {
        annotations["kubernetes.io/change-cause"] = json!(cause);
    }
    let rs = c
        .create(
            &replicasets(),
            NS,
            &json!({
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": format!("{name}-{revision}"),
                    "labels": {"app": "nginx", "pod-template-hash": hash},
                    "annotations": annotations,
                    "ownerReferences": [{
                        "apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                        "uid": d["metadata"]["uid"], "controller": true,
                        "blockOwnerDeletion": true
                    }]
                },
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": {"app": "nginx", "pod-template-hash": hash}},
                    "template": t
                }
            }),
        )
        .await
        .unwrap();
    merge(
        c,
        name,
        json!({"metadata": {"annotations": {"deployment.kubernetes.io/revision": revision.to_string()}}}),
    )
    .await;
    rs
}

/// A Deployment `nginx` rolled out three times: nginx:1, nginx:2, nginx:3 (revisions 1-3).
async fn three_revisions(c: &Client) {
    create_deployment(c, "nginx", "nginx:1").await;
    roll(c, "nginx", 1, Some("keelctl create -f nginx.yaml")).await;
    for (revision, image) in [(2, "nginx:2"), (3, "nginx:3")] {
        merge(
            c,
            "nginx",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": image, "ports": [{"containerPort": 80}]}]}}}}),
        )
        .await;
        roll(c, "nginx", revision, None).await;
    }
}

fn image(d: &Value) -> &str {
    d["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap()
}

/// `rollout status` prints kubectl's line for each stage, once, survives a restart of the
/// API server, and exits 0 when the status says the rollout is done.
#[tokio::test]
async fn rollout_status_follows_the_rollout_until_done() {
    let etcd = Etcd::start().await;
    let mut api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    create_deployment(&c, "nginx", "nginx:1").await;

    let mut status = k.spawn(&["rollout", "status", "deployment/nginx"]);
    assert_eq!(
        status.next_stdout(),
        "Waiting for deployment spec update to be observed..."
    );
    set_status(
        &c,
        "nginx",
        json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1}),
    )
    .await;
    assert_eq!(
        status.next_stdout(),
        "Waiting for deployment \"nginx\" rollout to finish: 1 out of 2 new replicas have been updated..."
    );
    // A change that leaves the line as it is prints nothing.
    set_status(
        &c,
        "nginx",
        json!({"conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}]}),
    )
    .await;
    set_status(&c, "nginx", json!({"replicas": 3, "updatedReplicas": 2})).await;
    assert_eq!(
        status.next_stdout(),
        "Waiting for deployment \"nginx\" rollout to finish: 1 old replicas are pending termination..."
    );

    // The stream breaks with the server; keelctl resumes and misses nothing.
    api.restart().await;
    let c = api.client().await;
    set_status(
        &c,
        "nginx",
        json!({"replicas": 2, "updatedReplicas": 2, "availableReplicas": 1}),
    )
    .await;
    assert_eq!(
        status.next_stdout(),
        "Waiting for deployment \"nginx\" rollout to finish: 1 of 2 updated replicas are available..."
    );
    assert!(status.running());
    set_status(
        &c,
        "nginx",
        json!({"availableReplicas": 2, "conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}),
    )
    .await;
    let keel_tests::keelctl::Exited {
        code,
        stdout: rest,
        stderr,
    } = status.exit().await;
    let stderr: String = stderr.iter().map(|l| format!("{l}\n")).collect();
    assert_eq!(
        (code, rest, stderr.as_str()),
        (
            0,
            vec!["deployment \"nginx\" successfully rolled out".to_string()],
            ""
        )
    );

    // Rolled out already: one line, at once; in the `TYPE NAME` form too.
    let run = k.run(&["rollout", "status", "deploy", "nginx"]);
    assert_eq!(run.ok(), "deployment \"nginx\" successfully rolled out\n");
}

/// `--timeout` gives up with kubectl's message; `--watch=false` answers at once, done or not.
#[tokio::test]
async fn rollout_status_gives_up_after_its_timeout() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    create_deployment(&c, "nginx", "nginx:1").await;
    set_status(
        &c,
        "nginx",
        json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1}),
    )
    .await;
    let waiting = "Waiting for deployment \"nginx\" rollout to finish: 1 out of 2 new replicas have been updated...\n";

    let run = k.run(&["rollout", "status", "deployment/nginx", "--timeout", "1s"]);
    assert_eq!(run.failed(), "error: timed out waiting for the condition\n");
    assert_eq!(run.stdout, waiting);

    let run = k.run(&["rollout", "status", "deployment/nginx", "--watch=false"]);
    assert_eq!(run.ok(), waiting);

    let run = k.run(&["rollout", "status", "deployment/nginx", "--revision", "3"]);
    assert_eq!(
        run.failed(),
        "error: desired revision (3) is different from the running revision (0)\n"
    );
}

/// A rollout past its progress deadline ends the wait with kubectl's error and status 1;
/// so do objects that are missing or not Deployments.
#[tokio::test]
async fn rollout_status_fails_when_the_progress_deadline_is_exceeded() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    create_deployment(&c, "nginx", "nginx:1").await;
    roll(&c, "nginx", 1, None).await;

    let status = k.spawn(&["rollout", "status", "deployment/nginx"]);
    assert_eq!(
        status.next_stdout(),
        "Waiting for deployment spec update to be observed..."
    );
    set_status(
        &c,
        "nginx",
        json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 1, "conditions": [
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
             "message": "ReplicaSet \"nginx-1\" has timed out progressing."}]}),
    )
    .await;
    let keel_tests::keelctl::Exited {
        code,
        stdout: rest,
        stderr,
    } = status.exit().await;
    let stderr: String = stderr.iter().map(|l| format!("{l}\n")).collect();
    assert_eq!(code, 1);
    assert!(rest.is_empty(), "{rest:?}");
    assert_eq!(
        stderr,
        "error: deployment \"nginx\" exceeded its progress deadline\n"
    );

    assert_eq!(
        k.run(&["rollout", "status", "deployment/nope"]).failed(),
        "Error from server (NotFound): deployments.apps \"nope\" not found\n"
    );
    assert_eq!(
        k.run(&["rollout", "status", "rs/nginx-1"]).failed(),
        "error: no status viewer has been implemented for ReplicaSet.apps\n"
    );
    assert_eq!(
        k.run(&["rollout", "status"]).failed(),
        "error: required resource not specified\n"
    );
}

/// `rollout history`: one row per ReplicaSet the Deployment controls (not those it merely
/// selects), the template of one revision, and the ReplicaSets with `-o name`.
#[tokio::test]
async fn rollout_history_lists_the_revisions_of_the_owned_replica_sets() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    assert_eq!(
        k.run(&["rollout", "history", "deployment/nginx"]).failed(),
        "Error from server (NotFound): deployments.apps \"nginx\" not found\n"
    );
    three_revisions(&c).await;
    // Another Deployment's ReplicaSet with the same labels is not part of the history.
    create_deployment(&c, "other", "nginx:9").await;
    roll(&c, "other", 7, None).await;

    let run = k.run(&["rollout", "history", "deployment/nginx"]);
    assert_eq!(
        run.ok(),
        "deployment.apps/nginx \n\
         REVISION  CHANGE-CAUSE\n\
         1         keelctl create -f nginx.yaml\n\
         2         <none>\n\
         3         <none>\n\n"
    );

    let run = k.run(&["rollout", "history", "deploy", "nginx", "--revision", "1"]);
    assert_eq!(
        run.ok(),
        "deployment.apps/nginx with revision #1\n\
         Pod Template:\n  \
           metadata:\n    \
             annotations:\n      \
               kubernetes.io/change-cause: keelctl create -f nginx.yaml\n    \
             labels:\n      \
               app: nginx\n      \
               pod-template-hash: h1\n  \
           spec:\n    \
             containers:\n    \
             - image: nginx:1\n      \
               imagePullPolicy: IfNotPresent\n      \
               name: nginx\n      \
               ports:\n      \
               - containerPort: 80\n        \
                 protocol: TCP\n      \
               resources: {}\n      \
               terminationMessagePath: /dev/termination-log\n      \
               terminationMessagePolicy: File\n    \
             dnsPolicy: ClusterFirst\n    \
             enableServiceLinks: true\n    \
             restartPolicy: Always\n    \
             schedulerName: default-scheduler\n    \
             securityContext: {}\n    \
             terminationGracePeriodSeconds: 30\n\n"
    );
    assert_eq!(
        k.run(&["rollout", "history", "deploy/nginx", "--revision=9"])
            .failed(),
        "error: unable to find the specified revision\n"
    );
    assert_eq!(
        k.run(&["rollout", "history", "deploy/nginx", "-o", "name"])
            .ok(),
        "replicaset.apps/nginx-1\nreplicaset.apps/nginx-2\nreplicaset.apps/nginx-3\n"
    );
    let json = k
        .run(&[
            "rollout",
            "history",
            "deploy/nginx",
            "--revision=2",
            "-o",
            "json",
        ])
        .ok()
        .to_string();
    let rs: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(rs["metadata"]["name"], "nginx-2");
}

/// `rollout undo` puts back the template of the previous revision, or of `--to-revision`,
/// without the `pod-template-hash` label, with that revision's change-cause; it skips a
/// revision already current and refuses one that does not exist.
#[tokio::test]
async fn rollout_undo_restores_the_template_of_a_revision() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    three_revisions(&c).await;
    merge(
        &c,
        "nginx",
        json!({"metadata": {"annotations": {"kubernetes.io/change-cause": "to 3", "team": "web"}}}),
    )
    .await;
    let before = get(&c, "nginx").await;

    let run = k.run(&["rollout", "undo", "deployment/nginx"]);
    assert_eq!(run.ok(), "deployment.apps/nginx rolled back\n");
    let after = get(&c, "nginx").await;
    // Revision 2's template (as its ReplicaSet holds it, Kubernetes' defaults and all),
    // without the pod-template-hash label.
    let mut want = c
        .get(&gvr("apps", "v1", "replicasets"), NS, "nginx-2")
        .await
        .unwrap()["spec"]["template"]
        .clone();
    want["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("pod-template-hash");
    assert_eq!(after["spec"]["template"], want);
    assert_eq!(
        after["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:2"
    );
    assert_eq!(
        after["metadata"]["annotations"],
        json!({"deployment.kubernetes.io/revision": "3"}),
        "the revision's annotations replace the others; the revision stays the controller's"
    );
    assert_eq!(
        after["metadata"]["generation"],
        before["metadata"]["generation"].as_i64().unwrap() + 1
    );

    let run = k.run(&["rollout", "undo", "deployment/nginx", "--to-revision=1"]);
    assert_eq!(run.ok(), "deployment.apps/nginx rolled back\n");
    let after = get(&c, "nginx").await;
    assert_eq!(image(&after), "nginx:1");
    assert!(
        after["spec"]["template"]["metadata"]["labels"]
            .get("pod-template-hash")
            .is_none()
    );
    assert_eq!(
        after["metadata"]["annotations"]["kubernetes.io/change-cause"],
        "keelctl create -f nginx.yaml"
    );

    let run = k.run(&["rollout", "undo", "deployment/nginx", "--to-revision", "1"]);
    assert_eq!(
        run.ok(),
        "deployment.apps/nginx skipped rollback (current template already matches revision 1)\n"
    );
    assert_eq!(
        k.run(&["rollout", "undo", "deployment/nginx", "--to-revision=7"])
            .failed(),
        "error: unable to find specified revision 7 in history\n"
    );
    assert_eq!(image(&get(&c, "nginx").await), "nginx:1");

    // A Deployment with one revision has nothing to go back to.
    create_deployment(&c, "single", "nginx:1").await;
    roll(&c, "single", 1, None).await;
    assert_eq!(
        k.run(&["rollout", "undo", "deployment/single"]).failed(),
        "error: no rollout history found for deployment \"single\"\n"
    );
}

/// `pause` and `resume` flip spec.paused, each refusing to do it twice; a paused Deployment
/// is neither rolled back nor restarted.
#[tokio::test]
async fn a_paused_deployment_is_not_rolled_back_or_restarted() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    three_revisions(&c).await;

    assert_eq!(
        k.run(&["rollout", "pause", "deployment/nginx"]).ok(),
        "deployment.apps/nginx paused\n"
    );
    assert_eq!(get(&c, "nginx").await["spec"]["paused"], true);
    assert_eq!(
        k.run(&["rollout", "pause", "deployment/nginx"]).failed(),
        "error: deployments.apps \"nginx\" is already paused\n"
    );
    assert_eq!(
        k.run(&["rollout", "undo", "deployment/nginx"]).failed(),
        "error: you cannot rollback a paused deployment; resume it first with 'keelctl rollout resume' and try again\n"
    );
    assert_eq!(
        k.run(&["rollout", "restart", "deployment/nginx"]).failed(),
        "error: deployments.apps \"nginx\" can't restart paused deployment (run rollout resume first)\n"
    );
    assert_eq!(image(&get(&c, "nginx").await), "nginx:3");

    assert_eq!(
        k.run(&["rollout", "resume", "deploy", "nginx", "-o", "name"])
            .ok(),
        "deployment.apps/nginx\n"
    );
    assert!(get(&c, "nginx").await["spec"].get("paused").is_none());
    assert_eq!(
        k.run(&["rollout", "resume", "deployment/nginx"]).failed(),
        "error: deployments.apps \"nginx\" is not paused\n"
    );
    assert_eq!(
        k.run(&["rollout", "undo", "deployment/nginx"]).ok(),
        "deployment.apps/nginx rolled back\n"
    );
    assert_eq!(
        k.run(&["rollout", "pause", "rs/nginx-1"]).failed(),
        "error: replicasets.apps \"nginx-1\" pausing is not supported\n"
    );
}

/// `rollout restart` stamps the pod template with the time, which makes a new revision.
#[tokio::test]
async fn rollout_restart_stamps_the_pod_template() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    let created = create_deployment(&c, "nginx", "nginx:1").await;

    let run = k.run(&["rollout", "restart", "deployment/nginx"]);
    assert_eq!(run.ok(), "deployment.apps/nginx restarted\n");
    let d = get(&c, "nginx").await;
    let stamp =
        d["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"]
            .as_str()
            .unwrap();
    // RFC 3339 in UTC to the second, as the server's own timestamps: between the creation
    // of the Deployment and that of the next object.
    let web = create_deployment(&c, "web", "nginx:1").await;
    let (before, after) = (
        created["metadata"]["creationTimestamp"].as_str().unwrap(),
        web["metadata"]["creationTimestamp"].as_str().unwrap(),
    );
    assert_eq!(stamp.len(), before.len(), "{stamp} vs {before}");
    assert!(
        before <= stamp && stamp <= after,
        "{before} <= {stamp} <= {after}"
    );
    assert_eq!(d["metadata"]["generation"], 2);
    assert_eq!(
        d["spec"]["template"]["spec"],
        created["spec"]["template"]["spec"]
    );

    // Every Deployment of the namespace, by type alone.
    let run = eventually(PATIENCE, "a restart in a later second", || {
        let run = k.run(&["rollout", "restart", "deployment"]);
        async move { (run.code == 0).then_some(run) }
    })
    .await;
    assert_eq!(
        run.stdout,
        "deployment.apps/nginx restarted\ndeployment.apps/web restarted\n"
    );
}

/// `scale` sets spec.replicas, only if `--current-replicas` and `--resource-version` hold.
#[tokio::test]
async fn scale_sets_replicas_when_its_preconditions_hold() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    create_deployment(&c, "nginx", "nginx:1").await;
    let replicas = |d: Value| d["spec"]["replicas"].as_i64().unwrap();

    assert_eq!(
        k.run(&["scale", "deployment/nginx", "--replicas", "5"])
            .ok(),
        "deployment.apps/nginx scaled\n"
    );
    assert_eq!(replicas(get(&c, "nginx").await), 5);
    assert_eq!(
        k.run(&[
            "scale",
            "--current-replicas=5",
            "--replicas=3",
            "deploy",
            "nginx"
        ])
        .ok(),
        "deployment.apps/nginx scaled\n"
    );
    assert_eq!(replicas(get(&c, "nginx").await), 3);
    assert_eq!(
        k.run(&[
            "scale",
            "deploy/nginx",
            "--current-replicas",
            "2",
            "--replicas",
            "4"
        ])
        .failed(),
        "error: Expected replicas to be 2, was 3\n"
    );
    let d = get(&c, "nginx").await;
    assert_eq!(replicas(d.clone()), 3);
    let rv = d["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    merge(
        &c,
        "nginx",
        json!({"metadata": {"labels": {"touched": "yes"}}}),
    )
    .await;
    let now = get(&c, "nginx").await["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        k.run(&[
            "scale",
            "deploy/nginx",
            "--resource-version",
            &rv,
            "--replicas",
            "4"
        ])
        .failed(),
        format!("error: Expected resource version to be {rv}, was {now}\n")
    );
    assert_eq!(replicas(get(&c, "nginx").await), 3);

    // ReplicaSets, files, and kinds without replicas.
    roll(&c, "nginx", 1, None).await;
    assert_eq!(
        k.run(&["scale", "rs/nginx-1", "--replicas=2", "-o", "name"])
            .ok(),
        "replicaset.apps/nginx-1\n"
    );
    let rs = c.get(&replicasets(), NS, "nginx-1").await.unwrap();
    assert_eq!(rs["spec"]["replicas"], 2);
    let f = k.file(
        "nginx.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: nginx\n",
    );
    assert_eq!(
        k.run(&["scale", "-f", &f, "--replicas", "1"]).ok(),
        "deployment.apps/nginx scaled\n"
    );
    assert_eq!(replicas(get(&c, "nginx").await), 1);
    c.create(
        &gvr("", "v1", "configmaps"),
        NS,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
    )
    .await
    .unwrap();
    assert_eq!(
        k.run(&["scale", "cm/x", "--replicas=1"]).failed(),
        "Error from server (NotFound): the server could not find the requested resource\n"
    );
    assert_eq!(
        k.run(&["scale", "deploy/nginx", "--replicas=-1"]).failed(),
        "error: The --replicas=COUNT flag is required, and COUNT must be greater than or equal to 0\n"
    );

    // --timeout waits for the status to reach the size: here nobody scales the pods.
    let run = k.run(&["scale", "deploy/nginx", "--replicas=2", "--timeout=1s"]);
    assert_eq!(
        run.failed(),
        "error: timed out waiting for \"nginx\" to be synced\n"
    );
    assert_eq!(replicas(get(&c, "nginx").await), 2);
    set_status(&c, "nginx", json!({"replicas": 2})).await;
    assert_eq!(
        k.run(&["scale", "deploy/nginx", "--replicas=2", "--timeout=5s"])
            .ok(),
        "deployment.apps/nginx scaled\n"
    );
}

/// `--help` of `rollout`, each of its subcommands and `scale` explains itself.
#[test]
fn help_of_rollout_and_scale_is_clear() {
    let help = |args: &[&str]| {
        let out = Command::new(bin("keelctl")).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let top = help(&["--help"]);
    for sub in ["rollout", "scale"] {
        assert!(
            top.contains(&format!("\n  {sub} ")),
            "{sub} missing from:\n{top}"
        );
    }
    let rollout = help(&["rollout", "--help"]);
    for sub in ["status", "history", "undo", "restart", "pause", "resume"] {
        assert!(
            rollout.contains(&format!("\n  {sub} ")),
            "{sub} missing from:\n{rollout}"
        );
        let text = help(&["rollout", sub, "--help"]);
        assert!(
            text.contains(&format!("Usage: keelctl rollout {sub}")),
            "{sub}:\n{text}"
        );
        assert!(text.contains("Examples:"), "{sub}:\n{text}");
    }
    let scale = help(&["scale", "--help"]);
    for flag in [
        "--replicas",
        "--current-replicas",
        "--resource-version",
        "Examples:",
    ] {
        assert!(scale.contains(flag), "{flag} missing from:\n{scale}");
    }
}
