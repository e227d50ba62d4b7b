//! `keelctl` end to end: the real binary against a real `keel-apiserver` and etcd, checked by
//! its exit status, stdout and stderr, and by the objects through `keel-client`.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use keel_client::{PatchType, gvr};
use keel_tests::keelctl::Keelctl;
use keel_tests::{ApiServer, Etcd, Proc, bin, eventually};
use serde_json::{Value, json};

/// The Deployment of the seed's walkthrough (`nginx.yaml`), as written there.
const NGINX: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: nginx-deployment
spec:
  selector:
    matchLabels:
      app: nginx
  replicas: 2
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
        - name: nginx
          image: nginx
          ports:
            - containerPort: 80
";

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn deployments() -> keel_client::GroupVersionResource {
    gvr("apps", "v1", "deployments")
}

fn configmaps() -> keel_client::GroupVersionResource {
    gvr("", "v1", "configmaps")
}

fn rv(o: &Value) -> &str {
    o["metadata"]["resourceVersion"].as_str().unwrap()
}

fn uid(o: &Value) -> &str {
    o["metadata"]["uid"].as_str().unwrap()
}

fn cm_yaml(name: &str, data: &[(&str, &str)]) -> String {
    let mut s = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n");
    for (k, v) in data {
        s.push_str(&format!("  {k}: \"{v}\"\n"));
    }
    s
}

/// The writes (create, update, patch) the server answered for a resource (`deployments.apps`,
/// `configmaps`), from its metrics.
fn writes(api: &ApiServer, resource: &str) -> u64 {
    api.metrics()
        .lines()
        .filter(|l| l.starts_with("keel_apiserver_requests_total{"))
        .filter(|l| l.contains(&format!("resource=\"{resource}\"")))
        .filter(|l| {
            ["create", "update", "patch"]
                .iter()
                .any(|v| l.contains(&format!("verb=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn container(d: &Value) -> &Value {
    &d["spec"]["template"]["spec"]["containers"][0]
}

/// The seed's walkthrough: `apply`, edit the image in the file, `apply` again. The second
/// apply is a patch of the live object: same uid, new resourceVersion, and a label another
/// writer added in between survives.
#[tokio::test]
async fn apply_then_apply_of_the_edited_file_patches_the_live_deployment() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    let f = k.file("nginx.yaml", NGINX);

    let run = k.run(&["apply", "-f", &f]);
    assert_eq!(run.ok(), "deployment.apps/nginx-deployment created\n");
    let created = c
        .get(&deployments(), "default", "nginx-deployment")
        .await
        .unwrap();
    // The annotation is the file's object exactly as kubectl records it, so kubectl can
    // apply to this object next.
    assert_eq!(
        created["metadata"]["annotations"][LAST_APPLIED],
        "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{\"annotations\":{},\"name\":\"nginx-deployment\",\"namespace\":\"default\"},\"spec\":{\"replicas\":2,\"selector\":{\"matchLabels\":{\"app\":\"nginx\"}},\"template\":{\"metadata\":{\"labels\":{\"app\":\"nginx\"}},\"spec\":{\"containers\":[{\"image\":\"nginx\",\"name\":\"nginx\",\"ports\":[{\"containerPort\":80}]}]}}}}\n"
    );

    // Another writer labels the Deployment.
    c.patch(
        &deployments(),
        "default",
        "nginx-deployment",
        PatchType::Merge,
        &json!({"metadata": {"labels": {"team": "web"}}}),
    )
    .await
    .unwrap();
    let labelled = c
        .get(&deployments(), "default", "nginx-deployment")
        .await
        .unwrap();

    k.file(
        "nginx.yaml",
        &NGINX.replace("image: nginx\n", "image: nginx:1.7.9\n"),
    );
    let run = k.run(&["apply", "-f", &f]);
    assert_eq!(run.ok(), "deployment.apps/nginx-deployment configured\n");

    let applied = c
        .get(&deployments(), "default", "nginx-deployment")
        .await
        .unwrap();
    assert_eq!(container(&applied)["image"], "nginx:1.7.9");
    assert_eq!(uid(&applied), uid(&created));
    assert_ne!(rv(&applied), rv(&labelled));
    assert_eq!(applied["metadata"]["labels"]["team"], "web");
    assert_eq!(
        container(&applied)["ports"],
        json!([{"containerPort": 80, "protocol": "TCP"}])
    );
    let recorded: Value = serde_json::from_str(
        applied["metadata"]["annotations"][LAST_APPLIED]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(container(&recorded)["image"], "nginx:1.7.9");
    assert!(recorded["metadata"].get("labels").is_none());
}

/// `create` then `replace` of a file holding a resourceVersion that is no longer current:
/// the imperative workflow loses to a concurrent writer with a Conflict, and writes nothing.
#[tokio::test]
async fn replace_of_a_stale_file_is_a_conflict() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    let f = k.file("nginx.yaml", NGINX);

    assert_eq!(
        k.run(&["create", "-f", &f]).ok(),
        "deployment.apps/nginx-deployment created\n"
    );
    let err = k.run(&["create", "-f", &f]).failed().to_string();
    assert_eq!(
        err,
        "Error from server (AlreadyExists): error when creating \"nginx.yaml\": deployments.apps \"nginx-deployment\" already exists\n"
    );

    // The user saves the live object, edits it, and meanwhile another writer changes it.
    let saved = k.run(&["get", "deployment", "nginx-deployment", "-o", "yaml"]);
    let stale = k.file(
        "stale.yaml",
        &saved.ok().replace("image: nginx\n", "image: nginx:1.7.9\n"),
    );
    c.patch(
        &deployments(),
        "default",
        "nginx-deployment",
        PatchType::Merge,
        &json!({"spec": {"replicas": 3}}),
    )
    .await
    .unwrap();
    let before = c
        .get(&deployments(), "default", "nginx-deployment")
        .await
        .unwrap();

    let err = k.run(&["replace", "-f", &stale]).failed().to_string();
    assert_eq!(
        err,
        "Error from server (Conflict): error when replacing \"stale.yaml\": Operation cannot be fulfilled on deployments.apps \"nginx-deployment\": the object has been modified; please apply your changes to the latest version and try again\n"
    );
    let after = c
        .get(&deployments(), "default", "nginx-deployment")
        .await
        .unwrap();
    assert_eq!(after, before);

    // A file without a resourceVersion replaces whatever is there (the seed's `replace`).
    k.file(
        "nginx.yaml",
        &NGINX.replace("image: nginx\n", "image: nginx:1.7.9\n"),
    );
    assert_eq!(
        k.run(&["replace", "-f", &f]).ok(),
        "deployment.apps/nginx-deployment replaced\n"
    );
    let replaced = c
        .get(&deployments(), "default", "nginx-deployment")
        .await
        .unwrap();
    assert_eq!(container(&replaced)["image"], "nginx:1.7.9");
    // Whole-object replacement: the other writer's replicas are gone.
    assert_eq!(replaced["spec"]["replicas"], 2);
}

/// A field deleted from the file is deleted from the object; a field another writer set,
/// which the file never had, stays. Lists of containers merge by name, so the other writer's
/// environment variable survives the removal of the ports next to it.
#[tokio::test]
async fn apply_removes_what_the_file_dropped_and_keeps_what_others_set() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    let with_tier = NGINX.replace(
        "  name: nginx-deployment\n",
        "  name: nginx-deployment\n  labels:\n    app: nginx\n    tier: web\n",
    );
    let f = k.file("nginx.yaml", &with_tier);
    k.run(&["apply", "-f", &f]).ok();

    c.patch(
        &deployments(),
        "default",
        "nginx-deployment",
        PatchType::Json,
        &json!([
            {"op": "add", "path": "/spec/template/spec/containers/0/env", "value": [{"name": "MODE", "value": "fast"}]},
            {"op": "add", "path": "/metadata/annotations/owner", "value": "ops"},
        ]),
    )
    .await
    .unwrap();

    // The file drops the tier label and the ports.
    let dropped = with_tier
        .replace("    tier: web\n", "")
        .replace("          ports:\n            - containerPort: 80\n", "");
    k.file("nginx.yaml", &dropped);
    assert_eq!(
        k.run(&["apply", "-f", &f]).ok(),
        "deployment.apps/nginx-deployment configured\n"
    );
    let d = c
        .get(&deployments(), "default", "nginx-deployment")
        .await
        .unwrap();
    assert_eq!(d["metadata"]["labels"], json!({"app": "nginx"}));
    assert!(container(&d).get("ports").is_none(), "{d}");
    assert_eq!(
        container(&d)["env"],
        json!([{"name": "MODE", "value": "fast"}])
    );
    assert_eq!(d["metadata"]["annotations"]["owner"], "ops");
}

/// Applying the same file again computes an empty patch: `unchanged`, and no request
/// writes anything.
#[tokio::test]
async fn apply_of_an_unchanged_file_writes_nothing() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    let f = k.file("nginx.yaml", NGINX);
    k.run(&["apply", "-f", &f]).ok();
    let before = c
        .get(&deployments(), "default", "nginx-deployment")
        .await
        .unwrap();
    let writes_before = writes(&api, "deployments.apps");
    assert_eq!(writes_before, 1);

    assert_eq!(
        k.run(&["apply", "-f", &f]).ok(),
        "deployment.apps/nginx-deployment unchanged\n"
    );
    assert_eq!(writes(&api, "deployments.apps"), writes_before);
    let after = c
        .get(&deployments(), "default", "nginx-deployment")
        .await
        .unwrap();
    assert_eq!(after, before);
}

/// Several documents in a file, a directory and stdin; YAML and JSON.
#[tokio::test]
async fn apply_reads_documents_directories_and_stdin() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    let two = format!(
        "{}---\n{}",
        cm_yaml("one", &[("a", "1")]),
        cm_yaml("two", &[])
    );
    let f = k.file("two.yaml", &two);
    assert_eq!(
        k.run(&["apply", "-f", &f]).ok(),
        "configmap/one created\nconfigmap/two created\n"
    );

    std::fs::create_dir(k.path("dir")).unwrap();
    k.file(
        "dir/b.json",
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"json-cm"},"data":{"k":"v"}}"#,
    );
    k.file("dir/a.yaml", &cm_yaml("yaml-cm", &[]));
    k.file("dir/notes.txt", "not a manifest");
    assert_eq!(
        k.run(&["apply", "-f", "dir"]).ok(),
        "configmap/yaml-cm created\nconfigmap/json-cm created\n"
    );
    assert_eq!(
        c.get(&configmaps(), "default", "json-cm").await.unwrap()["data"]["k"],
        "v"
    );

    let run = k.run_with(
        &["apply", "-n", "keel-system", "-f", "-"],
        Some(&cm_yaml("piped", &[])),
        &[],
    );
    assert_eq!(run.ok(), "configmap/piped created\n");
    c.get(&configmaps(), "keel-system", "piped").await.unwrap();

    // One bad object does not stop the others; the failure is reported and the status is 1.
    let mixed = format!(
        "{}---\n{}",
        cm_yaml("three", &[]),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Bad_Name\n"
    );
    let mixed = k.file("mixed.yaml", &mixed);
    let run = k.run(&["apply", "-f", &mixed]);
    assert_eq!(run.code, 1);
    assert_eq!(run.stdout, "configmap/three created\n");
    assert!(
        run.stderr
            .starts_with("Error from server (Invalid): error when "),
        "{run:?}"
    );
    assert!(
        run.stderr
            .contains("error when creating \"mixed.yaml\": ConfigMap \"Bad_Name\" is invalid"),
        "{run:?}"
    );
}

/// `get` prints kubectl's tables per kind, and JSON, YAML and names; resources are found by
/// every name kubectl accepts.
#[tokio::test]
async fn get_prints_tables_json_yaml_and_names() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    let f = k.file("nginx.yaml", NGINX);
    k.run(&["create", "-f", &f]).ok();
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: myapp-pod\n  labels:\n    app: myapp\nspec:\n  containers:\n    - name: myapp-container\n      image: busybox\n      command: ['sh', '-c', 'echo Hello Kubernetes! && sleep 3600']\n";
    let pod = k.file("pod.yaml", pod);
    assert_eq!(
        k.run(&["create", "-f", &pod]).ok(),
        "pod/myapp-pod created\n"
    );
    k.run(&[
        "create",
        "-f",
        &k.file("cm.yaml", &cm_yaml("settings", &[("a", "1"), ("b", "2")])),
    ])
    .ok();
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
    c.create(&gvr("apps", "v1", "replicasets"), "default", &rs)
        .await
        .unwrap();

    let table = |args: &[&str]| -> Vec<Vec<String>> {
        k.run(args)
            .ok()
            .lines()
            .map(|l| l.split_whitespace().map(String::from).collect())
            .collect()
    };
    // AGE is the last column, and varies: compare what precedes it.
    let but_age = |rows: Vec<Vec<String>>| -> Vec<Vec<String>> {
        rows.into_iter()
            .map(|mut r| {
                if r.last().is_some_and(|a| a != "AGE") {
                    let age = r.pop().unwrap();
                    assert!(age.ends_with('s') || age.ends_with('m'), "age {age}");
                }
                r
            })
            .collect()
    };
    for name in [
        "deployments",
        "deployment",
        "Deployment",
        "deploy",
        "deployments.apps",
    ] {
        assert_eq!(
            but_age(table(&["get", name])),
            [
                vec!["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
                vec!["nginx-deployment", "0/2", "0", "0"]
            ],
            "{name}"
        );
    }
    assert_eq!(
        but_age(table(&["get", "po"])),
        [
            vec!["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
            vec!["myapp-pod", "0/1", "Pending", "0"]
        ]
    );
    assert_eq!(
        but_age(table(&["get", "cm"])),
        [vec!["NAME", "DATA", "AGE"], vec!["settings", "2"]]
    );
    assert_eq!(
        but_age(table(&["get", "rs"])),
        [
            vec!["NAME", "DESIRED", "CURRENT", "READY", "AGE"],
            vec!["web", "3", "0", "0"]
        ]
    );
    let ns = table(&["get", "ns"]);
    assert_eq!(ns[0], ["NAME", "STATUS", "AGE"]);
    assert!(ns.iter().any(|r| r[..2] == ["default", "Active"]), "{ns:?}");

    // Columns line up as kubectl's: each as wide as its widest cell plus three spaces.
    let out = k.run(&["get", "deploy"]).ok().to_string();
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("NAME               READY   UP-TO-DATE   AVAILABLE   AGE"),
        "{out}"
    );
    assert!(
        lines[1].starts_with("nginx-deployment   0/2     0            0           "),
        "{out}"
    );

    let wide = table(&["get", "deploy", "-o", "wide"]);
    assert_eq!(wide[0][5..], ["CONTAINERS", "IMAGES", "SELECTOR"]);
    assert_eq!(wide[1][5..], ["nginx", "nginx", "app=nginx"]);

    // -A: every namespace, with a NAMESPACE column.
    c.create(
        &configmaps(),
        "keel-system",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "sys"}}),
    )
    .await
    .unwrap();
    let all = but_age(table(&["get", "cm", "-A"]));
    assert_eq!(all[0], ["NAMESPACE", "NAME", "DATA", "AGE"]);
    assert!(
        all.contains(&vec!["keel-system".into(), "sys".into(), "0".into()]),
        "{all:?}"
    );
    assert!(
        all.contains(&vec!["default".into(), "settings".into(), "2".into()]),
        "{all:?}"
    );
    assert_eq!(
        but_age(table(&["get", "cm", "-n", "keel-system"]))[1],
        ["sys", "0"]
    );

    // -l: label selectors.
    assert_eq!(
        k.run(&["get", "po", "-l", "app=myapp", "-o", "name"]).ok(),
        "pod/myapp-pod\n"
    );
    let none = k.run(&["get", "po", "-l", "app=other"]);
    assert_eq!(
        (none.ok(), none.stderr.as_str()),
        ("", "No resources found in default namespace.\n")
    );

    // One object by name as JSON or YAML is the object; a list is a v1 List.
    let json_one: Value = serde_json::from_str(
        k.run(&["get", "deploy", "nginx-deployment", "-o", "json"])
            .ok(),
    )
    .unwrap();
    assert_eq!(
        json_one,
        c.get(&deployments(), "default", "nginx-deployment")
            .await
            .unwrap()
    );
    let yaml_one = k
        .run(&["get", "deploy/nginx-deployment", "-o", "yaml"])
        .ok()
        .to_string();
    assert!(
        yaml_one.starts_with("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n"),
        "{yaml_one}"
    );
    assert!(
        yaml_one.contains(
            "\n      - image: nginx\n        imagePullPolicy: Always\n        name: nginx\n"
        ),
        "{yaml_one}"
    );
    let list: Value = serde_json::from_str(k.run(&["get", "cm", "-o", "json"]).ok()).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"][0]["metadata"]["name"], "settings");

    // -o name, and several types at once.
    assert_eq!(
        k.run(&["get", "deploy", "-o", "name"]).ok(),
        "deployment.apps/nginx-deployment\n"
    );
    let both = k.run(&["get", "deploy,cm", "-o", "name"]);
    assert_eq!(
        both.ok(),
        "deployment.apps/nginx-deployment\nconfigmap/settings\n"
    );

    let missing = k.run(&["get", "deploy", "nope"]);
    assert_eq!(
        missing.failed(),
        "Error from server (NotFound): deployments.apps \"nope\" not found\n"
    );
}

/// Reads lines of a child's stdout on a thread, so that the test can wait with a deadline.
fn lines_of(proc: &mut Proc) -> mpsc::Receiver<String> {
    let stdout = proc.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for the next line, for at most 20 s.
#[track_caller]
fn next_line(rx: &mpsc::Receiver<String>) -> Vec<String> {
    let line = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("keelctl get -w printed nothing in 20 s");
    line.split_whitespace().map(String::from).collect()
}

/// `get -w` prints the table header and the objects once, then a row per change, and carries
/// on through a restart of the API server without missing a change.
#[tokio::test]
async fn get_watch_prints_each_change_and_survives_a_server_restart() {
    let etcd = Etcd::start().await;
    let mut api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    let cm =
        |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    c.create(&configmaps(), "default", &cm("first"))
        .await
        .unwrap();

    let mut watcher = Proc(
        k.command(&["get", "cm", "-w"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let rx = lines_of(&mut watcher);
    assert_eq!(next_line(&rx), ["NAME", "DATA", "AGE"]);
    assert_eq!(next_line(&rx)[..2], ["first", "0"]);

    c.create(&configmaps(), "default", &cm("second"))
        .await
        .unwrap();
    assert_eq!(next_line(&rx)[..2], ["second", "0"]);
    c.patch(
        &configmaps(),
        "default",
        "first",
        PatchType::Merge,
        &json!({"data": {"a": "1"}}),
    )
    .await
    .unwrap();
    assert_eq!(next_line(&rx)[..2], ["first", "1"]);

    // The stream drops with the server; keelctl resumes from the last revision it printed.
    api.restart().await;
    let c = api.client().await;
    c.patch(
        &configmaps(),
        "default",
        "second",
        PatchType::Merge,
        &json!({"data": {"x": "1", "y": "2"}}),
    )
    .await
    .unwrap();
    assert_eq!(next_line(&rx)[..2], ["second", "2"]);
    c.delete(&configmaps(), "default", "first", &Default::default())
        .await
        .unwrap();
    assert_eq!(next_line(&rx)[..2], ["first", "1"]);
    // Nothing repeated, nothing else.
    assert!(rx.recv_timeout(Duration::from_millis(500)).is_err());
}

/// `delete` by name, by file and by selector, with each propagation policy.
#[tokio::test]
async fn delete_by_name_file_and_selector_with_cascade() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    let f = k.file(
        "cms.yaml",
        &format!("{}---\n{}", cm_yaml("a", &[]), cm_yaml("b", &[])),
    );
    k.run(&["create", "-f", &f]).ok();
    assert_eq!(
        k.run(&["delete", "configmap", "a"]).ok(),
        "configmap \"a\" deleted\n"
    );
    assert_eq!(
        k.run(&["delete", "cm", "a"]).failed(),
        "Error from server (NotFound): configmaps \"a\" not found\n"
    );
    k.run(&["delete", "cm", "a", "--ignore-not-found"]).ok();
    let run = k.run(&["delete", "-f", &f]);
    assert_eq!(run.code, 1);
    assert_eq!(run.stdout, "configmap \"b\" deleted\n");
    assert_eq!(
        run.stderr,
        "Error from server (NotFound): error when deleting \"cms.yaml\": configmaps \"a\" not found\n"
    );

    k.run(&[
        "create",
        "-f",
        &k.file(
            "l.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: labelled\n  labels:\n    app: x\n",
        ),
    ])
    .ok();
    assert_eq!(
        k.run(&["delete", "cm", "-l", "app=x"]).ok(),
        "configmap \"labelled\" deleted\n"
    );

    // Foreground and orphan deletions are finished by the garbage collector: the object
    // waits with its deletionTimestamp and the policy's finalizer.
    let nginx = k.file("nginx.yaml", NGINX);
    for (cascade, finalizer) in [("foreground", "foregroundDeletion"), ("orphan", "orphan")] {
        k.run(&["apply", "-f", &nginx]).ok();
        let run = k.run(&[
            "delete",
            "deploy/nginx-deployment",
            &format!("--cascade={cascade}"),
            "--wait=false",
        ]);
        assert_eq!(run.ok(), "deployment.apps \"nginx-deployment\" deleted\n");
        let d = c
            .get(&deployments(), "default", "nginx-deployment")
            .await
            .unwrap();
        assert!(d["metadata"]["deletionTimestamp"].is_string(), "{d}");
        assert_eq!(d["metadata"]["finalizers"], json!([finalizer]), "{d}");
        // Waiting for it gives up after --timeout, and says why.
        let run = k.run(&[
            "--timeout",
            "1s",
            "delete",
            "deploy",
            "nginx-deployment",
            "--cascade",
            cascade,
        ]);
        assert!(
            run.failed().contains(
                "timed out waiting for the deletion of deployment.apps \"nginx-deployment\""
            ),
            "{run:?}"
        );
        c.patch(
            &deployments(),
            "default",
            "nginx-deployment",
            PatchType::Merge,
            &json!({"metadata": {"finalizers": null}}),
        )
        .await
        .unwrap();
        eventually(Duration::from_secs(10), "the deployment to go", || {
            let c = c.clone();
            async move {
                c.get(&deployments(), "default", "nginx-deployment")
                    .await
                    .is_err()
                    .then_some(())
            }
        })
        .await;
    }
    k.run(&["apply", "-f", &nginx]).ok();
    assert_eq!(
        k.run(&[
            "delete",
            "deploy",
            "nginx-deployment",
            "--cascade=background"
        ])
        .ok(),
        "deployment.apps \"nginx-deployment\" deleted\n"
    );
    assert!(
        c.get(&deployments(), "default", "nginx-deployment")
            .await
            .is_err()
    );
}

/// `patch` with each patch type; `patched (no change)` when nothing changed.
#[tokio::test]
async fn patch_with_json_merge_and_strategic_patches() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    k.run(&["create", "-f", &k.file("nginx.yaml", NGINX)]).ok();
    k.run(&[
        "create",
        "-f",
        &k.file("cm.yaml", &cm_yaml("settings", &[("a", "1")])),
    ])
    .ok();

    let merge = k.run(&[
        "patch",
        "cm",
        "settings",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"a":null,"b":"2"}}"#,
    ]);
    assert_eq!(merge.ok(), "configmap/settings patched\n");
    assert_eq!(
        c.get(&configmaps(), "default", "settings").await.unwrap()["data"],
        json!({"b": "2"})
    );
    let again = k.run(&[
        "patch",
        "cm/settings",
        "--type=merge",
        "-p",
        "data:\n  b: \"2\"\n",
    ]);
    assert_eq!(again.ok(), "configmap/settings patched (no change)\n");

    let json_patch = k.run(&[
        "patch",
        "deploy",
        "nginx-deployment",
        "--type",
        "json",
        "-p",
        r#"[{"op":"replace","path":"/spec/replicas","value":5}]"#,
    ]);
    assert_eq!(
        json_patch.ok(),
        "deployment.apps/nginx-deployment patched\n"
    );
    assert_eq!(
        c.get(&deployments(), "default", "nginx-deployment")
            .await
            .unwrap()["spec"]["replicas"],
        5
    );
    let failed_test = k.run(&[
        "patch",
        "deploy",
        "nginx-deployment",
        "--type",
        "json",
        "-p",
        r#"[{"op":"test","path":"/spec/replicas","value":1}]"#,
    ]);
    assert!(
        failed_test
            .failed()
            .starts_with("Error from server (Invalid): "),
        "{failed_test:?}"
    );

    // Strategic (the default): containers merge by name, so the other fields of the nginx
    // container stay.
    let strategic = k.run(&[
        "patch",
        "deployment",
        "nginx-deployment",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"nginx","image":"nginx:1.9.1"}]}}}}"#,
    ]);
    assert_eq!(strategic.ok(), "deployment.apps/nginx-deployment patched\n");
    let d = c
        .get(&deployments(), "default", "nginx-deployment")
        .await
        .unwrap();
    assert_eq!(container(&d)["image"], "nginx:1.9.1");
    assert_eq!(
        container(&d)["ports"],
        json!([{"containerPort": 80, "protocol": "TCP"}])
    );

    let bad = k.run(&["patch", "cm", "settings", "-p", "{not json"]);
    assert!(
        bad.failed()
            .starts_with("error: unable to parse \"{not json\": "),
        "{bad:?}"
    );
}

/// `set image` patches the image of the named container; an unknown container is an error.
#[tokio::test]
async fn set_image_patches_the_container() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    k.run(&["apply", "-f", &k.file("nginx.yaml", NGINX)]).ok();
    let before = c
        .get(&deployments(), "default", "nginx-deployment")
        .await
        .unwrap();

    assert_eq!(
        k.run(&[
            "set",
            "image",
            "deployment/nginx-deployment",
            "nginx=nginx:1.7.9"
        ])
        .ok(),
        "deployment.apps/nginx-deployment image updated\n"
    );
    let d = c
        .get(&deployments(), "default", "nginx-deployment")
        .await
        .unwrap();
    assert_eq!(container(&d)["image"], "nginx:1.7.9");
    assert_eq!(uid(&d), uid(&before));
    // An imperative change: the last applied configuration still says `nginx`.
    assert_eq!(
        d["metadata"]["annotations"][LAST_APPLIED],
        before["metadata"]["annotations"][LAST_APPLIED]
    );

    assert_eq!(
        k.run(&[
            "set",
            "image",
            "deploy",
            "nginx-deployment",
            "envoy=envoy:1"
        ])
        .failed(),
        "error: unable to find container named \"envoy\"\n"
    );
    assert!(
        k.run(&["set", "image", "deploy", "nginx-deployment"])
            .failed()
            .contains("CONTAINER=IMAGE")
    );
}

/// `diff` shows what `apply` would change as a unified diff of YAML, and writes nothing;
/// its exit status says whether there is a difference, as kubectl's.
#[tokio::test]
async fn diff_shows_what_apply_would_change() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    let f = k.file("nginx.yaml", NGINX);

    // Nothing live yet: the whole object is new.
    let new = k.run(&["diff", "-f", &f]);
    assert_eq!(new.code, 1, "{new:?}");
    assert!(new.stdout.contains("+kind: Deployment\n"), "{new:?}");

    k.run(&["apply", "-f", &f]).ok();
    let same = k.run(&["diff", "-f", &f]);
    assert_eq!((same.code, same.stdout.as_str()), (0, ""), "{same:?}");

    k.file(
        "nginx.yaml",
        &NGINX.replace("image: nginx\n", "image: nginx:1.7.9\n"),
    );
    let before = c
        .get(&deployments(), "default", "nginx-deployment")
        .await
        .unwrap();
    let changed = k.run(&["diff", "-f", &f]);
    assert_eq!(changed.code, 1, "{changed:?}");
    let out = &changed.stdout;
    assert!(
        out.starts_with("diff -u -N LIVE/apps.v1.Deployment.default.nginx-deployment MERGED/apps.v1.Deployment.default.nginx-deployment\n--- LIVE/apps.v1.Deployment.default.nginx-deployment\n+++ MERGED/apps.v1.Deployment.default.nginx-deployment\n@@ "),
        "{out}"
    );
    assert!(
        out.contains("\n-      - image: nginx\n+      - image: nginx:1.7.9\n"),
        "{out}"
    );
    assert_eq!(
        c.get(&deployments(), "default", "nginx-deployment")
            .await
            .unwrap(),
        before
    );

    let missing = k.run(&["diff", "-f", "missing.yaml"]);
    assert_eq!(
        (missing.code, missing.stderr.as_str()),
        (2, "error: the path \"missing.yaml\" does not exist\n")
    );
}

/// Writes an executable editor script that runs `body` on the file (`$1`).
fn editor(k: &Keelctl, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = k.path(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// `edit` opens the object in `$EDITOR` and sends the change as a patch.
#[tokio::test]
async fn edit_sends_the_change_as_a_patch() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    k.run(&["apply", "-f", &k.file("nginx.yaml", NGINX)]).ok();

    let sed = editor(
        &k,
        "sed-editor",
        r#"sed -i 's/image: nginx$/image: nginx:1.9.1/' "$1""#,
    );
    let run = k.run_with(
        &["edit", "deployment", "nginx-deployment"],
        None,
        &[("EDITOR", &sed)],
    );
    assert_eq!(run.ok(), "deployment.apps/nginx-deployment edited\n");
    let d = c
        .get(&deployments(), "default", "nginx-deployment")
        .await
        .unwrap();
    assert_eq!(container(&d)["image"], "nginx:1.9.1");

    // Saving the file unchanged sends nothing.
    let noop = editor(&k, "noop-editor", "true");
    let run = k.run_with(
        &["edit", "deploy/nginx-deployment"],
        None,
        &[("EDITOR", &noop)],
    );
    assert_eq!(
        (run.ok(), run.stderr.as_str()),
        ("", "Edit cancelled, no changes made.\n")
    );
    assert_eq!(
        c.get(&deployments(), "default", "nginx-deployment")
            .await
            .unwrap(),
        d
    );

    // A file that no longer parses is refused, naming the line, and kept for the user.
    let breaker = editor(&k, "bad-editor", r#"sed -i 's/^spec:$/spec: [/' "$1""#);
    let run = k.run_with(
        &["edit", "deploy", "nginx-deployment"],
        None,
        &[("EDITOR", &breaker)],
    );
    let err = run.failed();
    assert!(err.starts_with("error: error parsing /"), "{err}");
    assert!(err.contains(": line "), "{err}");
    let saved = err
        .split("A copy of your changes has been stored to \"")
        .nth(1)
        .unwrap()
        .trim_end()
        .trim_end_matches('"');
    assert!(std::fs::read_to_string(saved).unwrap().contains("spec: ["));
    let _ = std::fs::remove_file(saved);

    let failing = editor(&k, "failing-editor", "exit 3");
    let run = k.run_with(
        &["edit", "deploy", "nginx-deployment"],
        None,
        &[("EDITOR", &failing)],
    );
    assert!(
        run.failed()
            .starts_with("error: there was a problem with the editor"),
        "{run:?}"
    );
    assert_eq!(
        c.get(&deployments(), "default", "nginx-deployment")
            .await
            .unwrap(),
        d
    );
}

/// `api-resources` lists what Discovery serves.
#[tokio::test]
async fn api_resources_lists_the_served_resources() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Keelctl::new(&api);
    let out = k.run(&["api-resources"]).ok().to_string();
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    );
    assert!(
        rows.contains(&vec![
            "deployments",
            "deploy",
            "apps/v1",
            "true",
            "Deployment"
        ]),
        "{out}"
    );
    assert!(
        rows.contains(&vec!["namespaces", "ns", "v1", "false", "Namespace"]),
        "{out}"
    );
    let names = k.run(&["api-resources", "-o", "name"]).ok().to_string();
    assert!(names.lines().any(|l| l == "deployments.apps"), "{names}");
}

/// Mistakes get kubectl's messages and status 1; nothing reaches the server.
#[tokio::test]
async fn bad_input_is_refused_with_clear_messages() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Keelctl::new(&api);

    assert_eq!(
        k.run(&["apply", "-f", "missing.yaml"]).failed(),
        "error: the path \"missing.yaml\" does not exist\n"
    );
    let bad = k.file(
        "bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n   labels: y\n",
    );
    let err = k.run(&["apply", "-f", &bad]).failed().to_string();
    assert!(
        err.starts_with("error: error parsing bad.yaml: line 5: "),
        "{err}"
    );
    let bad_json = k.file(
        "bad.json",
        "{\n  \"apiVersion\": \"v1\",\n  \"kind\": \n}\n",
    );
    let err = k.run(&["create", "-f", &bad_json]).failed().to_string();
    assert!(
        err.starts_with("error: error parsing bad.json: line 4: "),
        "{err}"
    );
    let no_kind = k.file("nokind.yaml", "apiVersion: v1\nmetadata:\n  name: x\n");
    assert_eq!(
        k.run(&["apply", "-f", &no_kind]).failed(),
        "error: unable to decode \"nokind.yaml\": Object 'Kind' is missing in document 1\n"
    );
    let unknown_kind = k.file(
        "foo.yaml",
        "apiVersion: example.com/v1\nkind: Foo\nmetadata:\n  name: x\n",
    );
    assert_eq!(
        k.run(&["apply", "-f", &unknown_kind]).failed(),
        "error: resource mapping not found for name: \"x\" namespace: \"\" from \"foo.yaml\": no matches for kind \"Foo\" in version \"example.com/v1\"\n"
    );
    let nameless = k.file(
        "nameless.yaml",
        "apiVersion: v1\nkind: ConfigMap\ndata:\n  a: b\n",
    );
    assert_eq!(
        k.run(&["apply", "-f", &nameless]).failed(),
        "error: the object in \"nameless.yaml\" (document 1) has no metadata.name\n"
    );
    let elsewhere = k.file(
        "ns.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  namespace: keel-system\n",
    );
    assert!(
        k.run(&["apply", "-n", "default", "-f", &elsewhere]).failed().starts_with(
            "error: the namespace from the provided object \"keel-system\" does not match the namespace \"default\"."
        )
    );

    assert_eq!(
        k.run(&["get", "foos"]).failed(),
        "error: the server doesn't have a resource type \"foos\" (see \"keelctl api-resources\")\n"
    );
    assert_eq!(
        k.run(&["delete", "cm"]).failed(),
        "error: resource(s) were provided, but no name was specified\n"
    );
    assert_eq!(
        k.run(&["edit", "deployment"]).failed(),
        "error: resource(s) were provided, but no name was specified\n"
    );
    assert!(
        k.run(&["get"])
            .failed()
            .starts_with("error: you must specify the type of resource to get.")
    );
    assert!(
        k.run(&["get", "cm", "--output", "xml"])
            .failed()
            .contains("invalid value 'xml'")
    );
    assert!(
        k.run(&["frobnicate"])
            .failed()
            .contains("unrecognized subcommand 'frobnicate'")
    );

    // Nothing listens on this port.
    let nobody = format!("http://127.0.0.1:{}", keel_tests::free_port());
    let run = Keelctl::with_server(&nobody).run(&["get", "cm"]);
    assert!(
        run.failed().starts_with("Unable to connect to the server"),
        "{run:?}"
    );
    // With another server named too, keelctl uses the one that answers.
    let either = Keelctl::with_server(&format!("{nobody},{}", api.endpoint()));
    assert!(
        either
            .run(&["get", "ns", "default"])
            .ok()
            .contains("default")
    );

    assert_eq!(writes(&api, "configmaps"), 0);
}

/// `--help` of keelctl and of every subcommand explains itself.
#[test]
fn help_is_clear() {
    let help = |args: &[&str]| {
        let out = Command::new(bin("keelctl")).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let top = help(&["--help"]);
    for sub in [
        "apply",
        "create",
        "replace",
        "get",
        "diff",
        "patch",
        "set",
        "edit",
        "delete",
        "api-resources",
    ] {
        assert!(
            top.contains(&format!("\n  {sub} ")),
            "{sub} missing from:\n{top}"
        );
    }
    for flag in ["--server", "KEEL_SERVER", "--namespace", "--timeout"] {
        assert!(top.contains(flag), "{flag} missing from:\n{top}");
    }
    for sub in [
        &["apply"][..],
        &["create"],
        &["replace"],
        &["get"],
        &["diff"],
        &["patch"],
        &["set", "image"],
        &["edit"],
        &["delete"],
        &["api-resources"],
    ] {
        let text = help(&[sub, &["--help"]].concat());
        assert!(text.contains("Usage: keelctl"), "{sub:?}:\n{text}");
        assert!(text.contains("Examples:"), "{sub:?}:\n{text}");
    }
}

/// kubectl and keelctl take turns: the annotation keelctl reads may have been written by
/// kubectl (same bytes), and an object created without one is patched and annotated.
#[tokio::test]
async fn apply_to_an_object_created_without_the_annotation_records_it() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    let f = k.file("cm.yaml", &cm_yaml("settings", &[("a", "1")]));
    k.run(&["create", "-f", &f]).ok();
    let run = k.run(&["apply", "-f", &f]);
    assert_eq!(run.ok(), "configmap/settings configured\n");
    assert!(run.stderr.starts_with("Warning: resource configmaps \"settings\" is missing the kubectl.kubernetes.io/last-applied-configuration annotation"), "{run:?}");
    let cm = c.get(&configmaps(), "default", "settings").await.unwrap();
    assert_eq!(
        cm["metadata"]["annotations"][LAST_APPLIED],
        "{\"apiVersion\":\"v1\",\"data\":{\"a\":\"1\"},\"kind\":\"ConfigMap\",\"metadata\":{\"annotations\":{},\"name\":\"settings\",\"namespace\":\"default\"}}\n"
    );
    assert_eq!(
        k.run(&["apply", "-f", &f]).ok(),
        "configmap/settings unchanged\n"
    );
}

/// kubectl's advice after a server-side apply's conflict, word for word.
const APPLY_CONFLICT_ADVICE: &str = "\
Please review the fields above--they currently have other managers. Here
are the ways you can resolve this warning:
* If you intend to manage all of these fields, please re-run the apply
  command with the `--force-conflicts` flag.
* If you do not intend to manage all of the fields, please edit your
  manifest to remove references to the fields that should keep their
  current managers.
* You may co-own fields by updating your manifest to match the existing
  value; in this case, you'll become the manager if the other manager(s)
  stop managing the field (remove it from their configuration).
See https://kubernetes.io/docs/reference/using-api/server-side-apply/#conflicts
";

/// The managers of an object's `managedFields` and their operations, in order
/// (`keelctl Apply`).
fn managers(o: &Value) -> Vec<String> {
    o["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["manager"].as_str().unwrap(),
                e["operation"].as_str().unwrap()
            )
        })
        .collect()
}

/// `apply --server-side`: the file is keelctl's configuration, applied by the server, which
/// records who owns what. Another manager's change of a field keelctl owns is a conflict,
/// named in kubectl's words, until it is forced; the field is then the other's, and keelctl
/// dropping it from its file leaves it as the other set it.
#[tokio::test]
async fn server_side_apply_conflicts_name_the_owner_until_forced() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let k = Keelctl::new(&api);
    let deploys = deployments();
    let get = || c.get(&deploys, "default", "nginx-deployment");
    let f = k.file("nginx.yaml", NGINX);

    assert_eq!(
        k.run(&["apply", "--force-conflicts", "-f", &f]).failed(),
        "error: --force-conflicts only works with --server-side\n"
    );
    assert_eq!(writes(&api, "deployments.apps"), 0);

    let run = k.run(&["apply", "--server-side", "-f", &f]);
    assert_eq!(
        run.ok(),
        "deployment.apps/nginx-deployment serverside-applied\n"
    );
    let created = get().await.unwrap();
    assert_eq!(created["spec"]["replicas"], 2);
    assert!(created["metadata"]["annotations"][LAST_APPLIED].is_null());
    assert_eq!(managers(&created), ["keelctl Apply"]);

    let updated_file = NGINX.replace("image: nginx\n", "image: nginx:1.7.9\n");
    k.file("nginx.yaml", &updated_file);
    let run = k.run(&["apply", "--server-side", "-f", &f]);
    assert_eq!(
        run.ok(),
        "deployment.apps/nginx-deployment serverside-applied\n"
    );
    let applied = get().await.unwrap();
    assert_eq!(container(&applied)["image"], "nginx:1.7.9");
    assert_eq!(uid(&applied), uid(&created));

    // Another manager with the same file but for replicas.
    let other = k.file(
        "other.yaml",
        &updated_file.replace("replicas: 2", "replicas: 5"),
    );
    let other_apply = [
        "apply",
        "--server-side",
        "--field-manager",
        "other",
        "-f",
        &other,
    ];
    let run = k.run(&other_apply);
    assert_eq!(
        run.failed(),
        format!(
            "error: Apply failed with 1 conflict: conflict with \"keelctl\": .spec.replicas\n{APPLY_CONFLICT_ADVICE}"
        )
    );
    assert_eq!(run.stdout, "");
    assert_eq!(rv(&get().await.unwrap()), rv(&applied));

    let run = k.run(&[&other_apply[..], &["--force-conflicts"]].concat());
    assert_eq!(
        run.ok(),
        "deployment.apps/nginx-deployment serverside-applied\n"
    );
    let forced = get().await.unwrap();
    assert_eq!(forced["spec"]["replicas"], 5);
    assert_eq!(managers(&forced), ["keelctl Apply", "other Apply"]);

    // keelctl no longer owns replicas: dropping it from its file leaves the other's value.
    k.file("nginx.yaml", &updated_file.replace("  replicas: 2\n", ""));
    let run = k.run(&["apply", "--server-side", "-f", &f]);
    assert_eq!(
        run.ok(),
        "deployment.apps/nginx-deployment serverside-applied\n"
    );
    let last = get().await.unwrap();
    assert_eq!(last["spec"]["replicas"], 5);
    assert_eq!(container(&last)["image"], "nginx:1.7.9");
}
