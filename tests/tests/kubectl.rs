//! The real kubectl (v1.32, `/usr/bin/kubectl` or `$KUBECTL`) against keel's REST dialect: the
//! seeds' declarative workflow, as a Kubernetes user types it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_client::{PatchType, gvr};
use keel_tests::keelctl::Keelctl;
use keel_tests::{ApiServer, ControllerManager, Etcd, certs, eventually};
use serde_json::{Value, json};

/// kubectl with a kubeconfig for one API server, in a directory of its own.
struct Kubectl {
    dir: tempfile::TempDir,
}

impl Kubectl {
    fn new(api: &ApiServer) -> Kubectl {
        Self::with(&format!("{{server: \"{}\"}}", api.endpoint()), "{}")
    }

    /// Over TLS, trusting `ca`, with `user` as the kubeconfig's user entry (`{token: ...}`,
    /// say: kubectl sends credentials only over TLS).
    fn tls(api: &ApiServer, ca: &Path, user: &str) -> Kubectl {
        let cluster = format!(
            "{{server: \"https://{}\", certificate-authority: {}}}",
            api.grpc,
            ca.display()
        );
        Self::with(&cluster, user)
    }

    fn with(cluster: &str, user: &str) -> Kubectl {
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: keel\n  cluster: {cluster}\n\
             users:\n- name: me\n  user: {user}\ncontexts:\n- name: keel\n  context:\n    cluster: keel\n    user: me\n\
             current-context: keel\n"
        );
        std::fs::write(dir.path().join("kubeconfig"), config).unwrap();
        Kubectl { dir }
    }

    fn command(&self, args: &[&str]) -> Command {
        let bin = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
        let mut c = Command::new(bin);
        c.args(args)
            .env("KUBECONFIG", self.dir.path().join("kubeconfig"))
            // kubectl caches discovery and OpenAPI under here: none from another run.
            .env("HOME", self.dir.path())
            .current_dir(self.dir.path());
        c
    }

    /// Runs kubectl to its end.
    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap_or_else(|e| {
            panic!("cannot run kubectl (install kubectl v1.32 or set KUBECTL): {e}")
        })
    }

    /// Runs kubectl, which must succeed; its standard output.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs kubectl, which must fail; its standard error.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(!out.status.success(), "kubectl {args:?} succeeded");
        String::from_utf8(out.stderr).unwrap()
    }

    fn file(&self, name: &str, content: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, content).unwrap();
        p
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A TLS API server whose token file knows admin (`system:masters`) and alice (group `dev`),
/// and kubectl as each.
struct Users {
    _dir: tempfile::TempDir,
    _etcd: Etcd,
    api: ApiServer,
    ca: PathBuf,
    admin: Kubectl,
    alice: Kubectl,
}

impl Users {
    async fn start() -> Users {
        let dir = tempfile::tempdir().unwrap();
        certs(dir.path());
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(
            &tokens,
            "admin-token,admin,1,system:masters\nalice-token,alice,2,dev\n",
        )
        .unwrap();
        let etcd = Etcd::start().await;
        let api = ApiServer::start_tls(
            &etcd,
            dir.path(),
            &["--token-auth-file", tokens.to_str().unwrap()],
        )
        .await;
        let ca = dir.path().join("ca.crt");
        let admin = Kubectl::tls(&api, &ca, "{token: admin-token}");
        let alice = Kubectl::tls(&api, &ca, "{token: alice-token}");
        Users {
            _dir: dir,
            _etcd: etcd,
            api,
            ca,
            admin,
            alice,
        }
    }
}

const CONFIGMAP: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\n  labels:\n    app: web\ndata:\n  a: \"1\"\n";

#[tokio::test]
async fn apply_is_created_unchanged_then_configured_and_get_prints_kubectls_columns() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Kubectl::new(&api);
    let f = k.file("cm.yaml", CONFIGMAP);
    assert_eq!(k.ok(&["apply", "-f", path(&f)]), "configmap/demo created\n");
    assert_eq!(
        k.ok(&["apply", "-f", path(&f)]),
        "configmap/demo unchanged\n"
    );
    let f = k.file(
        "cm.yaml",
        &CONFIGMAP.replace("a: \"1\"", "a: \"2\"\n  b: \"3\""),
    );
    assert_eq!(
        k.ok(&["apply", "-f", path(&f)]),
        "configmap/demo configured\n"
    );

    let table = k.ok(&["get", "configmaps"]);
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], ["NAME", "DATA", "AGE"], "{table}");
    assert_eq!(lines[1][..2], ["demo", "2"], "{table}");
    let all = k.ok(&["get", "cm", "-A", "--show-labels"]);
    assert!(all.starts_with("NAMESPACE"), "{all}");
    assert!(all.contains("app=web"), "{all}");

    let o: Value = serde_json::from_str(&k.ok(&["get", "cm", "demo", "-o", "json"])).unwrap();
    assert_eq!(o["data"], json!({"a": "2", "b": "3"}));
    assert!(
        o["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string()
    );
    let yaml = k.ok(&["get", "cm", "demo", "-o", "yaml"]);
    assert!(yaml.contains("name: demo"), "{yaml}");

    let names = k.ok(&["get", "namespaces", "-o", "name"]);
    assert!(names.contains("namespace/default"), "{names}");
}

#[tokio::test]
async fn patch_in_three_types_replace_a_stale_file_edit_and_delete() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Kubectl::new(&api);
    let f = k.file("cm.yaml", CONFIGMAP);
    k.ok(&["apply", "-f", path(&f)]);
    let stale = k.file("stale.yaml", &k.ok(&["get", "cm", "demo", "-o", "yaml"]));

    for (kind, patch) in [
        ("merge", r#"{"data":{"b":"2"}}"#),
        ("json", r#"[{"op":"add","path":"/data/c","value":"3"}]"#),
        ("strategic", r#"{"data":{"d":"4"}}"#),
    ] {
        assert_eq!(
            k.ok(&["patch", "cm", "demo", "--type", kind, "-p", patch]),
            "configmap/demo patched\n"
        );
    }
    let data = k.ok(&["get", "cm", "demo", "-o", "jsonpath={.data}"]);
    let data: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(data, json!({"a": "1", "b": "2", "c": "3", "d": "4"}));

    // The file still names the version before the patches: Conflict, in Kubernetes' words.
    let e = k.fails(&["replace", "-f", path(&stale)]);
    assert!(
        e.contains("Error from server (Conflict)") && e.contains("the object has been modified"),
        "{e}"
    );

    // The editor renames the key d to e in the YAML kubectl hands it.
    let editor = k.file("editor.sh", "#!/bin/sh\nsed -i 's/^  d: /  e: /' \"$1\"\n");
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut edit = k.command(&["edit", "cm", "demo"]);
    edit.env("KUBE_EDITOR", &editor);
    let out = edit.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "configmap/demo edited\n"
    );
    let data = k.ok(&["get", "cm", "demo", "-o", "jsonpath={.data.e}"]);
    assert_eq!(data, "4");

    assert_eq!(
        k.ok(&["delete", "cm", "demo"]),
        "configmap \"demo\" deleted\n"
    );
    let e = k.fails(&["get", "cm", "demo"]);
    assert!(
        e.contains("Error from server (NotFound): configmaps \"demo\" not found"),
        "{e}"
    );
}

#[tokio::test]
async fn get_watch_prints_each_change_as_it_happens() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Kubectl::new(&api);
    let f = k.file("cm.yaml", CONFIGMAP);
    k.ok(&["apply", "-f", path(&f)]);
    let mut child = k
        .command(&["get", "cm", "demo", "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let seen = Arc::new(Mutex::new(String::new()));
    let mut stdout = child.stdout.take().unwrap();
    let reader = {
        let seen = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    let rows = |s: &Arc<Mutex<String>>| {
        let s = s.clone();
        move || {
            let rows: Vec<String> = s.lock().unwrap().lines().map(String::from).collect();
            async move { Some(rows) }
        }
    };
    let first = eventually(Duration::from_secs(20), "the first row", || {
        let rows = rows(&seen)();
        async move { rows.await.filter(|r| r.len() >= 2) }
    })
    .await;
    assert!(first[0].starts_with("NAME"), "{first:?}");
    let c = api.client().await;
    for i in 2..=3 {
        c.patch(
            &gvr("", "v1", "configmaps"),
            "default",
            "demo",
            PatchType::Merge,
            &json!({"data": {format!("k{i}"): "v"}}),
        )
        .await
        .unwrap();
    }
    // Each change is a row: DATA goes 1, 2, 3.
    let all = eventually(Duration::from_secs(20), "a row per change", || {
        let rows = rows(&seen)();
        async move { rows.await.filter(|r| r.len() >= 4) }
    })
    .await;
    let data: Vec<&str> = all[1..]
        .iter()
        .map(|r| r.split_whitespace().nth(1).unwrap())
        .collect();
    assert_eq!(data, ["1", "2", "3"], "{all:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
}

#[tokio::test]
async fn api_resources_lists_what_keel_serves() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Kubectl::new(&api);
    let out = k.ok(&["api-resources"]);
    let row = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_else(|| panic!("{name} missing: {out}"))
    };
    assert_eq!(
        row("configmaps"),
        ["configmaps", "cm", "v1", "true", "ConfigMap"]
    );
    assert_eq!(
        row("deployments"),
        ["deployments", "deploy", "apps/v1", "true", "Deployment"]
    );
    assert_eq!(
        row("namespaces"),
        ["namespaces", "ns", "v1", "false", "Namespace"]
    );
    let version = k.ok(&["version", "-o", "json"]);
    let v: Value = serde_json::from_str(&version).unwrap();
    assert_eq!(v["serverVersion"]["minor"], "32");
}

#[tokio::test]
async fn get_all_lists_the_category_and_create_generates_names() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Kubectl::new(&api);
    let pod = k.file(
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: nginx\n",
    );
    k.ok(&["apply", "-f", path(&pod)]);
    k.ok(&["create", "configmap", "settings"]);
    let all = k.ok(&["get", "all", "-o", "name"]);
    // With the `kubernetes` Service of `default`, as in Kubernetes.
    assert_eq!(
        all.lines().collect::<Vec<_>>(),
        ["pod/web", "service/kubernetes"],
        "{all}"
    );

    // generateName, through `kubectl create -f` (apply refuses it, as kubectl does).
    let generated = k.file(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: job-\n",
    );
    let made = k.ok(&["create", "-f", path(&generated), "-o", "name"]);
    let name = made.trim().strip_prefix("configmap/").unwrap_or_default();
    assert!(
        name.len() == 9 && name.starts_with("job-"),
        "a name of the base and 5 characters: {made}"
    );
    let again = k.ok(&["create", "-f", path(&generated), "-o", "name"]);
    assert_ne!(again, made, "each create generates its own name");
    k.ok(&["get", "configmap", name]);
}

#[tokio::test]
async fn get_o_yaml_then_apply_of_the_list_round_trips() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Kubectl::new(&api);
    let list = k.file(
        "list.yaml",
        "apiVersion: v1\nkind: List\nitems:\n\
         - apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: a\n  data:\n    k: v\n\
         - apiVersion: apps/v1\n  kind: Deployment\n  metadata:\n    name: web\n  spec:\n\
         \x20   selector:\n      matchLabels: {app: web}\n    template:\n      metadata:\n\
         \x20       labels: {app: web}\n      spec:\n        containers:\n        - name: c\n          image: nginx\n",
    );
    let out = k.ok(&["apply", "-f", path(&list)]);
    assert!(
        out.contains("configmap/a created") && out.contains("deployment.apps/web created"),
        "{out}"
    );
    // The everyday round trip: what get -o yaml prints (a List) applies again.
    let printed = k.ok(&["get", "configmaps,deployments", "-o", "yaml"]);
    assert!(printed.contains("kind: List"), "{printed}");
    let again = k.file("again.yaml", &printed);
    let out = k.ok(&["apply", "-f", path(&again)]);
    assert!(
        out.contains("configmap/a") && out.contains("deployment.apps/web"),
        "{out}"
    );
    // kubectl validates a List's objects against /openapi/v2's definitions, as against
    // Kubernetes: a misspelt field is refused before anything is sent.
    let bad = k.file(
        "bad.yaml",
        "apiVersion: v1\nkind: List\nitems:\n\
         - apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: b\n  dta:\n    k: v\n",
    );
    let err = k.fails(&["apply", "-f", path(&bad)]);
    assert!(err.contains("dta"), "{err}");
    assert!(k.fails(&["get", "configmap", "b"]).contains("not found"));
}

#[tokio::test]
async fn diff_and_server_dry_runs_show_the_change_and_write_nothing() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Kubectl::new(&api);
    let f = k.file("cm.yaml", CONFIGMAP);
    k.ok(&["apply", "-f", path(&f)]);
    let before = k.ok(&[
        "get",
        "cm",
        "demo",
        "-o",
        "jsonpath={.metadata.resourceVersion}",
    ]);

    // kubectl diff: a server-side dry run of the apply patch; exit 1 when there is a change.
    let f = k.file("cm.yaml", &CONFIGMAP.replace("a: \"1\"", "a: \"5\""));
    let out = k.run(&["diff", "-f", path(&f)]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let diff = String::from_utf8_lossy(&out.stdout);
    assert!(
        diff.contains("-  a: \"1\"") && diff.contains("+  a: \"5\""),
        "{diff}"
    );

    assert_eq!(
        k.ok(&["delete", "cm", "demo", "--dry-run=server"]),
        "configmap \"demo\" deleted (server dry run)\n"
    );
    let f2 = k.file(
        "other.yaml",
        &CONFIGMAP.replace("name: demo", "name: other"),
    );
    k.ok(&["create", "-f", path(&f2), "--dry-run=server"]);
    let e = k.fails(&["get", "cm", "other"]);
    assert!(e.contains("NotFound"), "{e}");
    // Nothing was written: the same object at the same version.
    let after = k.ok(&[
        "get",
        "cm",
        "demo",
        "-o",
        "jsonpath={.metadata.resourceVersion}={.data.a}",
    ]);
    assert_eq!(after, format!("{before}=1"));
}

#[tokio::test]
async fn a_user_bound_to_a_namespaced_role_is_refused_elsewhere_in_kubernetes_words() {
    let users = Users::start().await;
    let (api, ca, admin, alice) = (&users.api, &users.ca, &users.admin, &users.alice);
    let rbac = admin.file(
        "rbac.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: reader\n  namespace: team\n\
         rules:\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get, list, watch]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: alice-reads\n  namespace: team\n\
         roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: reader\n\
         subjects:\n- kind: User\n  name: alice\n  apiGroup: rbac.authorization.k8s.io\n",
    );
    admin.ok(&["apply", "-f", path(&rbac)]);
    // The binding takes effect within a second on every replica.
    eventually(Duration::from_secs(5), "alice may list in team", || {
        let out = alice.run(&["get", "cm", "-n", "team"]);
        async move { out.status.success().then_some(()) }
    })
    .await;
    let e = alice.fails(&["get", "cm", "-n", "default"]);
    assert!(
        e.contains(
            "Error from server (Forbidden): configmaps is forbidden: User \"alice\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\""
        ),
        "{e}"
    );
    let e = alice.fails(&[
        "create",
        "-n",
        "team",
        "-f",
        path(&admin.file("cm.yaml", CONFIGMAP)),
    ]);
    assert!(
        e.contains(
            "cannot create resource \"configmaps\" in API group \"\" in the namespace \"team\""
        ),
        "{e}"
    );
    // A token the server does not know: Unauthorized, as kubectl words it.
    let stranger = Kubectl::tls(api, ca, "{token: not-a-token}");
    let e = stranger.fails(&["get", "cm"]);
    assert!(
        e.contains("error: You must be logged in to the server"),
        "{e}"
    );
}

const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.7.9\n";

#[tokio::test]
async fn kubectl_scale_patches_the_scale_subresource() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Kubectl::new(&api);
    let f = k.file("deploy.yaml", DEPLOYMENT);
    k.ok(&["apply", "-f", path(&f)]);
    // `-o wide`: Kubernetes' extra columns for a Deployment.
    let wide = k.ok(&["get", "deployment", "web", "-o", "wide"]);
    let rows: Vec<Vec<&str>> = wide
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "NAME",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ],
        "{wide}"
    );
    assert_eq!(rows[1][5..], ["web", "nginx:1.7.9", "app=web"], "{wide}");
    assert_eq!(
        k.ok(&["scale", "deployment", "web", "--replicas", "3"]),
        "deployment.apps/web scaled\n"
    );
    let replicas = k.ok(&[
        "get",
        "deployment",
        "web",
        "-o",
        "jsonpath={.spec.replicas}",
    ]);
    assert_eq!(replicas, "3");
    // --current-replicas is a precondition, read from the Scale.
    let e = k.fails(&[
        "scale",
        "deployment",
        "web",
        "--current-replicas",
        "2",
        "--replicas",
        "5",
    ]);
    assert!(e.contains("Expected replicas to be 2, was 3"), "{e}");
    // The Scale itself, as autoscalers read it.
    let scale: Value = serde_json::from_str(&k.ok(&[
        "get",
        "--raw",
        "/apis/apps/v1/namespaces/default/deployments/web/scale",
    ]))
    .unwrap();
    assert_eq!(
        (scale["kind"].as_str(), scale["apiVersion"].as_str()),
        (Some("Scale"), Some("autoscaling/v1"))
    );
    assert_eq!(scale["spec"]["replicas"], 3);
    assert_eq!(scale["status"]["selector"], "app=web");
}

/// The seeds' rollout walkthrough with the controller-manager running: two revisions of a
/// Deployment, `rollout status` until each is out, `rollout history`, then `rollout undo` back
/// to the first, all through kubectl.
#[tokio::test]
async fn rollout_status_history_and_undo_with_the_controller_manager() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let _cm = ControllerManager::start(&[&api], &[]).await;
    let k = Kubectl::new(&api);
    let f = k.file("deploy.yaml", DEPLOYMENT);
    k.ok(&["apply", "-f", path(&f)]);
    let status = k.ok(&["rollout", "status", "deployment/web", "--timeout", "60s"]);
    assert!(status.contains("successfully rolled out"), "{status}");

    let f = k.file(
        "deploy.yaml",
        &DEPLOYMENT.replace("nginx:1.7.9", "nginx:1.9.1"),
    );
    assert_eq!(
        k.ok(&["apply", "-f", path(&f)]),
        "deployment.apps/web configured\n"
    );
    let status = k.ok(&["rollout", "status", "deployment/web", "--timeout", "60s"]);
    assert!(status.contains("successfully rolled out"), "{status}");
    let history = k.ok(&["rollout", "history", "deployment/web"]);
    let revisions: Vec<&str> = history
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.parse::<u32>().is_ok())
        .collect();
    assert_eq!(revisions, ["1", "2"], "{history}");

    assert_eq!(
        k.ok(&["rollout", "undo", "deployment/web"]),
        "deployment.apps/web rolled back\n"
    );
    let image = || {
        k.ok(&[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ])
    };
    assert_eq!(image(), "nginx:1.7.9");
    let status = k.ok(&["rollout", "status", "deployment/web", "--timeout", "60s"]);
    assert!(status.contains("successfully rolled out"), "{status}");
    // The first ReplicaSet is the current one again, as revision 3.
    let rs = k.ok(&[
        "get",
        "replicasets",
        "-l",
        "app=web",
        "-o",
        "jsonpath={range .items[*]}{.spec.template.spec.containers[0].image} {.metadata.annotations.deployment\\.kubernetes\\.io/revision} {.spec.replicas}{\"\\n\"}{end}",
    ]);
    let mut rows: Vec<&str> = rs.lines().collect();
    rows.sort();
    assert_eq!(rows, ["nginx:1.7.9 3 1", "nginx:1.9.1 2 0"], "{rs}");
}

/// kubectl and keelctl taking turns applying one file: each sees the other's
/// last-applied-configuration, so a field dropped from the file is removed whoever applies.
#[tokio::test]
async fn kubectl_and_keelctl_take_turns_applying_one_file() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Kubectl::new(&api);
    let keel = Keelctl::new(&api);
    let f = k.file(
        "cm.yaml",
        &CONFIGMAP.replace("a: \"1\"", "a: \"1\"\n  b: \"2\""),
    );
    assert_eq!(k.ok(&["apply", "-f", path(&f)]), "configmap/demo created\n");
    let keel_apply = |f: &Path| keel.run(&["apply", "-f", path(f)]).ok().to_string();
    assert!(
        keel_apply(&f).contains("unchanged"),
        "keelctl sees kubectl's apply"
    );

    // keelctl drops b: removed, as kubectl would.
    let f = k.file("cm.yaml", CONFIGMAP);
    assert!(keel_apply(&f).contains("configured"));
    let data = || k.ok(&["get", "cm", "demo", "-o", "jsonpath={.data}"]);
    assert_eq!(data(), r#"{"a":"1"}"#);
    assert_eq!(
        k.ok(&["apply", "-f", path(&f)]),
        "configmap/demo unchanged\n"
    );

    // A change made by hand beside the file survives either tool's apply.
    k.ok(&[
        "patch",
        "cm",
        "demo",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"manual":"x"}}"#,
    ]);
    let f = k.file("cm.yaml", &CONFIGMAP.replace("a: \"1\"", "a: \"3\""));
    assert_eq!(
        k.ok(&["apply", "-f", path(&f)]),
        "configmap/demo configured\n"
    );
    assert_eq!(data(), r#"{"a":"3","manual":"x"}"#);
    let f = k.file("cm.yaml", &CONFIGMAP.replace("a: \"1\"", "a: \"4\""));
    assert!(keel_apply(&f).contains("configured"));
    assert_eq!(data(), r#"{"a":"4","manual":"x"}"#);
    assert_eq!(
        k.ok(&["apply", "-f", path(&f)]),
        "configmap/demo unchanged\n"
    );
}

/// `kubectl explain` reads Kubernetes' schemas of the built-in kinds from `/openapi/v3`:
/// descriptions, types and required fields, down nested types.
#[tokio::test]
async fn explain_describes_builtin_kinds_and_their_fields() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Kubectl::new(&api);
    let cm = k.ok(&["explain", "configmap"]);
    assert!(
        cm.contains("ConfigMap holds configuration data for pods to consume."),
        "{cm}"
    );
    assert!(cm.contains("data\t<map[string]string>"), "{cm}");
    let containers = k.ok(&["explain", "deployment.spec.template.spec.containers"]);
    assert!(containers.contains("GROUP:      apps"), "{containers}");
    assert!(
        containers.contains("FIELD: containers <[]Container>"),
        "{containers}"
    );
    assert!(
        containers.contains("name\t<string> -required-"),
        "{containers}"
    );
    let rules = k.ok(&["explain", "clusterroles.rules.verbs"]);
    assert!(rules.contains("<[]string>"), "{rules}");
    let e = k.fails(&["explain", "configmap.nosuchfield"]);
    assert!(e.contains("field \"nosuchfield\" does not exist"), "{e}");
}

/// kubectl's typed commands send Kubernetes' protobuf (`application/vnd.kubernetes.protobuf`),
/// not JSON: keel reads it, and stores what a JSON client would have sent.
#[tokio::test]
async fn kubectl_create_sends_protobuf_bodies_that_keel_reads() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Kubectl::new(&api);
    assert_eq!(
        k.ok(&["create", "namespace", "team"]),
        "namespace/team created\n"
    );
    assert_eq!(
        k.ok(&[
            "create",
            "configmap",
            "cfg",
            "-n",
            "team",
            "--from-literal=a=1",
            "--from-literal=b=two"
        ]),
        "configmap/cfg created\n"
    );
    let cm: Value =
        serde_json::from_str(&k.ok(&["get", "cm", "cfg", "-n", "team", "-o", "json"])).unwrap();
    assert_eq!(cm["data"], json!({"a": "1", "b": "two"}));
    assert_eq!(cm["metadata"]["namespace"], "team");
    assert!(
        cm["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty()),
        "{cm}"
    );

    k.ok(&[
        "create",
        "deployment",
        "web",
        "-n",
        "team",
        "--image",
        "nginx:1.27",
        "--replicas",
        "0",
    ]);
    let d: Value =
        serde_json::from_str(&k.ok(&["get", "deployment", "web", "-n", "team", "-o", "json"]))
            .unwrap();
    // An explicit zero is kept (protobuf says it was set), and Go's zero time is no time.
    assert_eq!(d["spec"]["replicas"], 0, "{d}");
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.27"
    );
    assert_eq!(
        d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%",
        "{d}"
    );
    assert!(
        d["spec"]["template"]["metadata"]["creationTimestamp"].is_null(),
        "{d}"
    );

    k.ok(&[
        "create",
        "role",
        "reader",
        "-n",
        "team",
        "--verb=get,list",
        "--resource=configmaps",
    ]);
    k.ok(&[
        "create",
        "rolebinding",
        "bob-reads",
        "-n",
        "team",
        "--role=reader",
        "--user=bob",
    ]);
    let rb: Value = serde_json::from_str(&k.ok(&[
        "get",
        "rolebinding",
        "bob-reads",
        "-n",
        "team",
        "-o",
        "json",
    ]))
    .unwrap();
    assert_eq!(rb["subjects"][0]["name"], "bob");
    assert_eq!(
        rb["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"})
    );
    // A kind keel does not serve is unknown, whatever the body's content type: not a body
    // keel cannot read.
    let e = k.fails(&["create", "job", "once", "-n", "team", "--image", "busybox"]);
    assert!(
        e.contains("the server could not find the requested resource"),
        "{e}"
    );
    assert!(!e.contains("protobuf"), "{e}");
}

/// kubectl sends `fieldValidation=Strict` (its `--validate=strict` default): a misspelt field
/// of a built-in kind is refused in Kubernetes' words, on create and on apply's patch, and
/// nothing is written; `--validate=false` lets it through. Removing the misspelt field is no
/// error.
#[tokio::test]
async fn misspelt_fields_are_refused_under_strict_field_validation() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Kubectl::new(&api);
    let typo = DEPLOYMENT.replace("replicas: 1", "replica: 1").replace(
        "image: nginx:1.7.9",
        "image: nginx:1.7.9\n        imagee: x",
    );
    let f = k.file("deploy.yaml", &typo);
    let e = k.fails(&["apply", "-f", path(&f)]);
    assert!(
        e.contains(
            r#"Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: unknown field "spec.replica", unknown field "spec.template.spec.containers[0].imagee""#
        ),
        "{e}"
    );
    assert!(k.fails(&["get", "deployment", "web"]).contains("NotFound"));

    let f = k.file("deploy.yaml", DEPLOYMENT);
    k.ok(&["apply", "-f", path(&f)]);
    let f = k.file(
        "deploy.yaml",
        &DEPLOYMENT.replace("replicas: 1", "replicas: 1\n  minReadySecondz: 3"),
    );
    let e = k.fails(&["apply", "-f", path(&f)]);
    assert!(e.contains(r#"unknown field "spec.minReadySecondz""#), "{e}");
    assert_eq!(
        k.ok(&["apply", "-f", path(&f), "--validate=false"]),
        "deployment.apps/web configured\n"
    );
    // Accepted without validation, the unknown field is dropped all the same, as Kubernetes
    // drops what its types do not have.
    let spec = k.ok(&["get", "deployment", "web", "-o", "jsonpath={.spec}"]);
    assert!(!spec.contains("minReadySecondz"), "{spec}");
    // Warn (kubectl's --validate=warn): accepted, and each unknown field a Warning.
    let f = k.file(
        "deploy.yaml",
        &DEPLOYMENT.replace("replicas: 1", "replicas: 1\n  minReadySecondx: 4"),
    );
    let out = k.run(&["apply", "-f", path(&f), "--validate=warn"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(r#"Warning: unknown field "spec.minReadySecondx""#),
        "{stderr}"
    );
    // The file fixed: apply's patch removes the field (a null), which is no error.
    let f = k.file("deploy.yaml", DEPLOYMENT);
    assert_eq!(
        k.ok(&["apply", "-f", path(&f)]),
        "deployment.apps/web configured\n"
    );
    let spec = k.ok(&["get", "deployment", "web", "-o", "jsonpath={.spec}"]);
    assert!(!spec.contains("minReadySecondz"), "{spec}");
}

const NETWORK_CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: networks.samplecrd.k8s.io
spec:
  group: samplecrd.k8s.io
  scope: Namespaced
  names: {kind: Network, plural: networks}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              cidr: {type: string}
";

#[tokio::test]
async fn a_custom_objects_unknown_fields_are_refused_when_strict_and_dropped_with_a_warning() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Kubectl::new(&api);
    let crd = k.file("crd.yaml", NETWORK_CRD);
    k.ok(&["apply", "-f", path(&crd)]);
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/networks.samplecrd.k8s.io",
    ]);
    let net = |spec: &str| {
        format!(
            "apiVersion: samplecrd.k8s.io/v1\nkind: Network\nmetadata:\n  name: net1\nspec: {spec}\n"
        )
    };
    let typo = k.file("typo.yaml", &net("{cidr: 10.0.0.0/24, cidrr: x}"));
    let e = k.fails(&["apply", "-f", path(&typo)]);
    assert!(
        e.contains(r#"strict decoding error: unknown field "spec.cidrr""#),
        "{e}"
    );
    let ok = k.file("net.yaml", &net("{cidr: 10.0.0.0/24}"));
    k.ok(&["apply", "-f", path(&ok)]);
    // kubectl patch sends no fieldValidation: Warn, Kubernetes' default.
    let out = k.run(&[
        "patch",
        "network",
        "net1",
        "--type=merge",
        "-p",
        r#"{"spec":{"gateway":"10.0.0.1"}}"#,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(r#"Warning: unknown field "spec.gateway""#),
        "{stderr}"
    );
    let spec = k.ok(&["get", "network", "net1", "-o", "jsonpath={.spec}"]);
    assert_eq!(spec, r#"{"cidr":"10.0.0.0/24"}"#);
}

/// The issue's user: alice holds one Role in team-a (create/get/list on roles and
/// rolebindings, get/list on configmaps). What she may do, who she is, and what an admin
/// acting as her meets, as kubectl users check them; and the grants RBAC refuses her.
#[tokio::test]
async fn auth_can_i_whoami_and_as_show_rbac_and_escalation_is_refused() {
    let users = Users::start().await;
    let (admin, alice) = (&users.admin, &users.alice);
    let rbac = admin.file(
        "rbac.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-a\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-b\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: alice\n  namespace: team-a\n\
         rules:\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get, list]\n\
         - apiGroups: [rbac.authorization.k8s.io]\n  resources: [roles, rolebindings]\n  verbs: [create, get, list]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: alice\n  namespace: team-a\n\
         roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: alice\n\
         subjects:\n- kind: User\n  name: alice\n  apiGroup: rbac.authorization.k8s.io\n",
    );
    admin.ok(&["apply", "-f", path(&rbac)]);
    eventually(Duration::from_secs(5), "alice's binding in force", || {
        let out = alice.run(&["get", "cm", "-n", "team-a"]);
        async move { out.status.success().then_some(()) }
    })
    .await;

    // Exactly her rules, and system:basic-user's, as kubectl prints them.
    assert_eq!(
        alice.ok(&["auth", "can-i", "--list", "-n", "team-a"]),
        "Resources                                       Non-Resource URLs   Resource Names   Verbs\n\
         rolebindings.rbac.authorization.k8s.io          []                  []               [create get list]\n\
         roles.rbac.authorization.k8s.io                 []                  []               [create get list]\n\
         selfsubjectreviews.authentication.k8s.io        []                  []               [create]\n\
         selfsubjectaccessreviews.authorization.k8s.io   []                  []               [create]\n\
         selfsubjectrulesreviews.authorization.k8s.io    []                  []               [create]\n\
         configmaps                                      []                  []               [get list]\n"
    );
    assert_eq!(
        alice.ok(&["auth", "can-i", "list", "configmaps", "-n", "team-a"]),
        "yes\n"
    );
    let out = alice.run(&["auth", "can-i", "create", "pods", "-n", "team-a"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "no\n");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        alice.ok(&["auth", "whoami"]),
        "ATTRIBUTE   VALUE\nUsername    alice\nUID         2\nGroups      [dev system:authenticated]\n"
    );
    let who: Value = serde_json::from_str(&alice.ok(&["auth", "whoami", "-o", "json"])).unwrap();
    assert_eq!(who["status"]["userInfo"]["username"], "alice");

    // An admin acting as alice has her rights.
    let e = admin.fails(&["--as=alice", "get", "configmaps", "-n", "team-b"]);
    assert!(
        e.contains("Error from server (Forbidden): configmaps is forbidden: User \"alice\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"team-b\""),
        "{e}"
    );
    admin.ok(&["--as=alice", "get", "configmaps", "-n", "team-a"]);
    assert_eq!(
        admin.ok(&[
            "--as=alice",
            "--as-group=dev",
            "auth",
            "can-i",
            "list",
            "configmaps",
            "-n",
            "team-a"
        ]),
        "yes\n"
    );
    // alice may not act as anyone.
    let e = alice.fails(&["--as=admin", "get", "configmaps", "-n", "team-a"]);
    assert!(
        e.contains("users \"admin\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"),
        "{e}"
    );

    // The grants Kubernetes refuses her.
    let e = alice.fails(&[
        "create",
        "rolebinding",
        "mine",
        "--clusterrole=cluster-admin",
        "--user=alice",
        "-n",
        "team-a",
    ]);
    assert!(
        e.contains("rolebindings.rbac.authorization.k8s.io \"mine\" is forbidden: user \"alice\" (groups=[\"dev\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:"),
        "{e}"
    );
    let e = alice.fails(&[
        "create",
        "role",
        "deleter",
        "--verb=get,delete",
        "--resource=configmaps",
        "-n",
        "team-a",
    ]);
    assert!(
        e.contains("is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"delete\"]}"),
        "{e}"
    );
    // A watch without `watch`: refused at once, kubectl exits non-zero.
    let e = alice.fails(&[
        "get",
        "configmaps",
        "-n",
        "team-a",
        "-w",
        "--request-timeout=20s",
    ]);
    assert!(
        e.contains(
            "cannot watch resource \"configmaps\" in API group \"\" in the namespace \"team-a\""
        ),
        "{e}"
    );
    // What she holds she may pass on: a Role and its binding in one file, one apply.
    let share = alice.file(
        "share.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: cm-reader\n  namespace: team-a\n\
         rules:\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get, list]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: bob-reads\n  namespace: team-a\n\
         roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: cm-reader\n\
         subjects:\n- kind: User\n  name: bob\n  apiGroup: rbac.authorization.k8s.io\n",
    );
    alice.ok(&["apply", "-f", path(&share)]);
    eventually(Duration::from_secs(5), "bob reads configmaps", || {
        let out = admin.run(&[
            "--as=bob",
            "auth",
            "can-i",
            "list",
            "configmaps",
            "-n",
            "team-a",
        ]);
        async move { out.status.success().then_some(()) }
    })
    .await;
}
