//! `keelctl` and initializers end to end: the real `keelctl` and `keel-initializer` binaries
//! against a real `keel-apiserver` and etcd.
//!
//! The Pods here name the Envoy initializer in `pending` themselves (a client may); the API
//! server's filling it from InitializerConfigurations is tested in `admission.rs`.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use keel_client::{Client, DeleteParams, GroupVersionResource, gvr};
use keel_tests::keelctl::Keelctl;
use keel_tests::{ApiServer, Etcd, KeelService};
use serde_json::Value;

const ENVOY: &str = "envoy.initializer.kubernetes.io";

/// The seeds' application Pod (deploy/examples/myapp-pod.yaml), with the Envoy initializer
/// pending, as the API server will set it from the seeds' InitializerConfiguration.
const MYAPP_POD: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: myapp-pod
  labels:
    app: myapp
  initializers:
    pending:
      - name: envoy.initializer.kubernetes.io
spec:
  containers:
    - name: myapp-container
      image: busybox
      command: ['sh', '-c', 'echo Hello Kubernetes! && sleep 3600']
";

const WAITING: &str = "waiting for initializer \"envoy.initializer.kubernetes.io\"";

fn pods() -> GroupVersionResource {
    gvr("", "v1", "pods")
}

fn container_names(p: &Value) -> Vec<&str> {
    p["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect()
}

fn pending(p: &Value) -> Vec<&str> {
    p["metadata"]["initializers"]["pending"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|x| x["name"].as_str().unwrap())
        .collect()
}

async fn myapp_pod(c: &Client) -> Value {
    c.get_uninitialized(&pods(), "default", "myapp-pod")
        .await
        .unwrap()
}

/// The seeds' walkthrough: `create -f` returns once the initializer has injected Envoy.
#[tokio::test]
async fn create_waits_until_the_initializer_has_injected_envoy() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    keel_tests::create_envoy_configmap(&c).await;
    let _init = KeelService::initializer(&[&api], &[]).await;
    let k = Keelctl::new(&api);
    let f = k.file("myapp-pod.yaml", MYAPP_POD);

    // --timeout only so that a broken wait fails the test instead of hanging it.
    let run = k.run(&["create", "-f", &f, "--timeout", "30s"]);
    assert_eq!(run.ok(), "pod/myapp-pod created\n");
    assert_eq!(run.stderr, format!("{WAITING}\n"));
    let p = myapp_pod(&c).await;
    assert!(pending(&p).is_empty(), "returned before initialized: {p}");
    assert_eq!(container_names(&p), ["myapp-container", "envoy"]);
}

/// `--wait=false` returns with the object uninitialized; without the initializer running and
/// with `--timeout`, the wait ends with kubectl's timeout error (the object stays).
#[tokio::test]
async fn create_without_wait_returns_at_once_and_a_wait_times_out_without_the_initializer() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    let f = k.file("myapp-pod.yaml", MYAPP_POD);

    let run = k.run(&["create", "-f", &f, "--wait=false"]);
    assert_eq!(run.ok(), "pod/myapp-pod created\n");
    assert_eq!(run.stderr, "");
    assert_eq!(pending(&myapp_pod(&c).await), [ENVOY]);

    let other = k.file(
        "other-pod.yaml",
        &MYAPP_POD.replace("name: myapp-pod", "name: other-pod"),
    );
    let run = k.run(&["create", "-f", &other, "--timeout", "2s"]);
    assert_eq!(
        run.failed(),
        format!("{WAITING}\nerror: timed out waiting for the condition\n")
    );
    assert_eq!(run.stdout, "pod/other-pod created\n");
    let p = c
        .get_uninitialized(&pods(), "default", "other-pod")
        .await
        .unwrap();
    assert_eq!(pending(&p), [ENVOY]);
}

/// An object deleted while keelctl waits for its initializers (as the API server deletes one
/// whose initializer with failurePolicy Fail timed out) is an error naming it.
#[tokio::test]
async fn an_object_deleted_while_waiting_is_an_error() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    let f = k.file("myapp-pod.yaml", MYAPP_POD);

    let running = k.spawn(&["create", "-f", &f, "--timeout", "30s"]);
    assert_eq!(running.next_stdout(), "pod/myapp-pod created");
    assert_eq!(running.next_stderr(), WAITING);
    c.delete(&pods(), "default", "myapp-pod", &DeleteParams::default())
        .await
        .unwrap();
    let keel_tests::keelctl::Exited { code, stderr, .. } = running.exit().await;
    assert_eq!(
        stderr,
        ["error: pod \"myapp-pod\" was deleted before it was initialized"]
    );
    assert_eq!(code, 1);
}

/// `apply` waits as `create` does: when it creates, and when the object it finds is still
/// uninitialized, even if the file changes nothing.
#[tokio::test]
async fn apply_waits_for_initialization_too() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    keel_tests::create_envoy_configmap(&c).await;
    let k = Keelctl::new(&api);
    let f = k.file("myapp-pod.yaml", MYAPP_POD);

    // No initializer yet: the Pod is left uninitialized, and a second apply waits for it.
    let run = k.run(&["apply", "-f", &f, "--wait=false"]);
    assert_eq!(run.ok(), "pod/myapp-pod created\n");
    let run = k.run(&["apply", "-f", &f, "--timeout", "2s"]);
    assert_eq!(
        run.failed(),
        format!("{WAITING}\nerror: timed out waiting for the condition\n")
    );
    assert_eq!(run.stdout, "pod/myapp-pod unchanged\n");

    let _init = KeelService::initializer(&[&api], &[]).await;
    let other = k.file(
        "other-pod.yaml",
        &MYAPP_POD.replace("name: myapp-pod", "name: other-pod"),
    );
    let run = k.run(&["apply", "-f", &other, "--timeout", "30s"]);
    assert_eq!(run.ok(), "pod/other-pod created\n");
    assert_eq!(run.stderr, format!("{WAITING}\n"));
    let p = c
        .get_uninitialized(&pods(), "default", "other-pod")
        .await
        .unwrap();
    assert!(pending(&p).is_empty(), "returned before initialized: {p}");
    assert_eq!(container_names(&p), ["myapp-container", "envoy"]);
}

/// `get --include-uninitialized` lists, gets and watches uninitialized objects. (The server
/// does not hide them from the others yet, so this checks only that the flag reaches it.)
#[tokio::test]
async fn get_include_uninitialized_shows_uninitialized_objects() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    let f = k.file("myapp-pod.yaml", MYAPP_POD);
    k.run(&["create", "-f", &f, "--wait=false"]).ok();
    assert_eq!(pending(&myapp_pod(&c).await), [ENVOY]);

    let run = k.run(&["get", "pods", "--include-uninitialized", "-o", "name"]);
    assert_eq!(run.ok(), "pod/myapp-pod\n");
    let run = k.run(&[
        "get",
        "pod",
        "myapp-pod",
        "--include-uninitialized=true",
        "-o",
        "json",
    ]);
    let p: Value = serde_json::from_str(run.ok()).unwrap();
    assert_eq!(pending(&p), [ENVOY]);

    let running = k.spawn(&["get", "pods", "-w", "--include-uninitialized"]);
    assert!(running.next_stdout().starts_with("NAME "));
    assert!(running.next_stdout().starts_with("myapp-pod "));
}

/// The wait survives a restarted API server: the watch resumes from the last revision seen,
/// and the initialization done meanwhile ends it.
#[tokio::test]
async fn the_wait_survives_a_restarted_api_server() {
    let etcd = Etcd::start().await;
    let mut api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    keel_tests::create_envoy_configmap(&c).await;
    let k = Keelctl::new(&api);
    let f = k.file("myapp-pod.yaml", MYAPP_POD);

    let running = k.spawn(&["create", "-f", &f, "--timeout", "60s"]);
    assert_eq!(running.next_stdout(), "pod/myapp-pod created");
    assert_eq!(running.next_stderr(), WAITING);
    api.restart().await;
    let _init = KeelService::initializer(&[&api], &[]).await;
    let keel_tests::keelctl::Exited { code, stderr, .. } = running.exit().await;
    assert_eq!((code, stderr), (0, vec![]));
    let p = myapp_pod(&c).await;
    assert_eq!(container_names(&p), ["myapp-container", "envoy"]);
}
