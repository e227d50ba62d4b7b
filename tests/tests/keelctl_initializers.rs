//! `keelctl` and initializers end to end: the real `keelctl` and `keel-initializer` binaries
//! against a real `keel-apiserver` and etcd.
//!
//! The API server does not yet fill `metadata.initializers.pending` from
//! InitializerConfigurations, nor hide uninitialized objects: the Pods here name the Envoy
//! initializer in `pending` themselves, as the server will on Create.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use keel_client::{Client, DeleteParams, GroupVersionResource, gvr};
use keel_tests::{ApiServer, Etcd, KeelService, Proc, bin, eventually};
use serde_json::Value;

const ENVOY: &str = "envoy.initializer.kubernetes.io";
/// How long a test waits for keelctl to print or exit before it fails.
const PATIENCE: Duration = Duration::from_secs(30);

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

/// What one run of keelctl did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Asserts success and returns stdout.
    #[track_caller]
    fn ok(&self) -> &str {
        assert_eq!(self.code, 0, "keelctl failed: {self:?}");
        &self.stdout
    }

    /// Asserts failure with status 1 and returns stderr.
    #[track_caller]
    fn failed(&self) -> &str {
        assert_eq!(self.code, 1, "keelctl should have failed with 1: {self:?}");
        &self.stderr
    }
}

/// keelctl against one API server, with a directory for manifests.
struct Keelctl {
    server: String,
    dir: tempfile::TempDir,
}

impl Keelctl {
    fn new(api: &ApiServer) -> Keelctl {
        Keelctl {
            server: api.endpoint(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin("keelctl"));
        c.arg("--server")
            .arg(&self.server)
            .args(args)
            .current_dir(self.dir.path())
            .env_remove("KEEL_SERVER")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    fn run(&self, args: &[&str]) -> Run {
        let out = self.command(args).output().unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Starts keelctl and reads its stdout and stderr lines as they come.
    fn spawn(&self, args: &[&str]) -> Running {
        let mut proc = Proc(self.command(args).spawn().unwrap());
        let stdout = proc.0.stdout.take().unwrap();
        let stderr = proc.0.stderr.take().unwrap();
        Running {
            proc,
            stdout: lines(stdout),
            stderr: lines(stderr),
        }
    }

    /// Writes a manifest into the working directory and returns its name.
    fn file(&self, name: &str, text: &str) -> String {
        std::fs::write(self.dir.path().join(name), text).unwrap();
        name.to_string()
    }
}

/// The lines of a pipe, read on a thread.
fn lines(pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// A keelctl that is still running.
struct Running {
    proc: Proc,
    stdout: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
}

impl Running {
    #[track_caller]
    fn next_stdout(&self) -> String {
        self.stdout
            .recv_timeout(PATIENCE)
            .expect("keelctl printed nothing more on stdout")
    }

    #[track_caller]
    fn next_stderr(&self) -> String {
        self.stderr
            .recv_timeout(PATIENCE)
            .expect("keelctl printed nothing more on stderr")
    }

    /// Waits for the exit; returns the status and the rest of stderr.
    async fn exit(mut self) -> (i32, Vec<String>) {
        let status = eventually(PATIENCE, "keelctl to exit", || {
            let s = self.proc.0.try_wait().unwrap();
            async move { s }
        })
        .await;
        (status.code().unwrap_or(-1), self.stderr.iter().collect())
    }
}

/// The seeds' ConfigMap `envoy-initializer`, from deploy/examples/, which the initializer
/// reads the sidecar from.
async fn envoy_configmap(c: &Client) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/examples/envoy-initializer.yaml"
    ))
    .unwrap();
    let cm: Value = serde_saphyr::from_str(&text).unwrap();
    c.create(&gvr("", "v1", "configmaps"), "default", &cm)
        .await
        .unwrap();
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
    envoy_configmap(&c).await;
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
    let (code, stderr) = running.exit().await;
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
    envoy_configmap(&c).await;
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
    envoy_configmap(&c).await;
    let k = Keelctl::new(&api);
    let f = k.file("myapp-pod.yaml", MYAPP_POD);

    let running = k.spawn(&["create", "-f", &f, "--timeout", "60s"]);
    assert_eq!(running.next_stdout(), "pod/myapp-pod created");
    assert_eq!(running.next_stderr(), WAITING);
    api.restart().await;
    let _init = KeelService::initializer(&[&api], &[]).await;
    let (code, stderr) = running.exit().await;
    assert_eq!((code, stderr), (0, vec![]));
    let p = myapp_pod(&c).await;
    assert_eq!(container_names(&p), ["myapp-container", "envoy"]);
}
