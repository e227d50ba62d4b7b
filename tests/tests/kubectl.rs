//! The real kubectl (v1.32, `/usr/bin/kubectl` or `$KUBECTL`) against keel's REST dialect: the
//! seeds' declarative workflow, as a Kubernetes user types it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
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
        let sa_key = dir.path().join("service-account.key");
        let api = ApiServer::start_tls(
            &etcd,
            dir.path(),
            &[
                "--token-auth-file",
                tokens.to_str().unwrap(),
                "--service-account-signing-key-file",
                sa_key.to_str().unwrap(),
            ],
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
    // Whole lines only: a read may end in the middle of a row.
    let rows = |s: &Arc<Mutex<String>>| {
        let s = s.clone();
        move || {
            let text = s.lock().unwrap().clone();
            let whole = text.rfind('\n').map_or("", |end| &text[..end]);
            let rows: Vec<String> = whole.lines().map(String::from).collect();
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

/// A field of `kubectl get -o json`'s object, by JSON pointer.
fn field(k: &Kubectl, what: &[&str], pointer: &str) -> Value {
    let mut args = vec!["get"];
    args.extend_from_slice(what);
    args.extend_from_slice(&["-o", "json"]);
    let obj: Value = serde_json::from_str(&k.ok(&args)).unwrap();
    obj.pointer(pointer).cloned().unwrap_or(Value::Null)
}

fn b64(s: &str) -> Value {
    use base64::Engine as _;
    json!(base64::engine::general_purpose::STANDARD.encode(s))
}

#[tokio::test]
async fn kubectl_creates_secrets_service_accounts_and_services() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let _cm = ControllerManager::start(&[&api], &[]).await;
    let k = Kubectl::new(&api);

    // Secrets, from kubectl's generators (protobuf bodies).
    k.ok(&[
        "create",
        "secret",
        "generic",
        "creds",
        "--from-literal=user=admin",
        "--from-literal=pass=s3cret",
    ]);
    assert_eq!(field(&k, &["secret", "creds"], "/data/user"), b64("admin"));
    assert_eq!(field(&k, &["secret", "creds"], "/type"), "Opaque");
    let certs = tempfile::tempdir().unwrap();
    keel_tests::certs(certs.path());
    let (crt, key) = (
        certs.path().join("apiserver.crt"),
        certs.path().join("apiserver.key"),
    );
    k.ok(&[
        "create",
        "secret",
        "tls",
        "web-tls",
        "--cert",
        path(&crt),
        "--key",
        path(&key),
    ]);
    assert_eq!(
        field(&k, &["secret", "web-tls"], "/type"),
        "kubernetes.io/tls"
    );
    let pem = std::fs::read_to_string(&crt).unwrap();
    assert_eq!(
        field(&k, &["secret", "web-tls"], "/data/tls.crt"),
        b64(&pem)
    );
    k.ok(&[
        "create",
        "secret",
        "docker-registry",
        "pull",
        "--docker-server=registry.example",
        "--docker-username=u",
        "--docker-password=p",
    ]);
    assert_eq!(
        field(&k, &["secret", "pull"], "/type"),
        "kubernetes.io/dockerconfigjson"
    );
    let table = k.ok(&["get", "secrets"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "TYPE", "DATA", "AGE"], "{table}");
    assert!(
        table.contains("kubernetes.io/dockerconfigjson   1"),
        "{table}"
    );

    // stringData is folded into data; a known type's keys are required; `immutable` holds.
    let f = k.file(
        "secret.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: app\nstringData:\n  token: abc\n",
    );
    k.ok(&["apply", "-f", path(&f)]);
    assert_eq!(field(&k, &["secret", "app"], "/data/token"), b64("abc"));
    assert_eq!(field(&k, &["secret", "app"], "/stringData"), Value::Null);
    let f = k.file(
        "tls.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: half\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: x\n",
    );
    let err = k.fails(&["apply", "-f", path(&f)]);
    assert!(err.contains("data[tls.key]: Required value"), "{err}");
    k.ok(&["patch", "secret", "app", "-p", r#"{"immutable":true}"#]);
    let err = k.fails(&[
        "patch",
        "secret",
        "app",
        "-p",
        r#"{"stringData":{"token":"new"}}"#,
    ]);
    assert!(
        err.contains("data: Forbidden: field is immutable when `immutable` is set"),
        "{err}"
    );
    assert_eq!(field(&k, &["secret", "app"], "/data/token"), b64("abc"));

    // ServiceAccounts: one created, and every namespace's `default` from the
    // controller-manager, made again if deleted.
    k.ok(&["create", "serviceaccount", "robot"]);
    k.ok(&["get", "serviceaccount", "robot"]);
    k.ok(&["create", "namespace", "team"]);
    let has_default = |ns: &str| {
        let out = k.run(&["get", "serviceaccount", "default", "-n", ns, "-o", "name"]);
        out.status.success().then_some(())
    };
    eventually(
        Duration::from_secs(30),
        "team's default ServiceAccount",
        || async { has_default("team") },
    )
    .await;
    k.ok(&["delete", "serviceaccount", "default", "-n", "team"]);
    eventually(
        Duration::from_secs(30),
        "the default ServiceAccount again",
        || async { has_default("team") },
    )
    .await;

    // Services: kubectl's generator and `expose`, defaulted as Kubernetes defaults them.
    k.ok(&["create", "service", "clusterip", "db", "--tcp=5432:5432"]);
    assert_eq!(field(&k, &["service", "db"], "/spec/type"), "ClusterIP");
    assert_eq!(
        field(&k, &["service", "db"], "/spec/sessionAffinity"),
        "None"
    );
    assert_eq!(
        field(&k, &["service", "db"], "/spec/ports/0/protocol"),
        "TCP"
    );
    k.ok(&[
        "create",
        "deployment",
        "web",
        "--image=nginx:1.27",
        "--port=80",
    ]);
    k.ok(&[
        "expose",
        "deployment",
        "web",
        "--port=8080",
        "--target-port=80",
    ]);
    assert_eq!(
        field(&k, &["service", "web"], "/spec/selector"),
        json!({"app": "web"})
    );
    assert_eq!(
        field(&k, &["service", "web"], "/spec/ports/0/targetPort"),
        80
    );
    // Each gets its own cluster IP from the default range, 10.96.0.0/12.
    let ip = |name: &str| field(&k, &["service", name], "/spec/clusterIP");
    let (db_ip, web_ip) = (ip("db"), ip("web"));
    for ip in [&db_ip, &web_ip] {
        let ip: std::net::Ipv4Addr = ip.as_str().unwrap().parse().unwrap();
        assert_eq!(
            u32::from(ip) >> 20,
            u32::from(std::net::Ipv4Addr::new(10, 96, 0, 0)) >> 20,
            "{ip}"
        );
    }
    assert_ne!(db_ip, web_ip);
    assert_eq!(
        field(&k, &["service", "web"], "/spec/ipFamilies"),
        json!(["IPv4"])
    );
    let pod_spec = "/spec/template/spec";
    assert_eq!(
        field(
            &k,
            &["deployment", "web"],
            &format!("{pod_spec}/containers/0/imagePullPolicy")
        ),
        "IfNotPresent"
    );
    assert_eq!(
        field(
            &k,
            &["deployment", "web"],
            &format!("{pod_spec}/containers/0/ports/0/protocol")
        ),
        "TCP"
    );
    assert_eq!(
        field(&k, &["deployment", "web"], &format!("{pod_spec}/dnsPolicy")),
        "ClusterFirst"
    );
    let svc = k.ok(&["get", "services"]);
    let header: Vec<&str> = svc.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE"
        ],
        "{svc}"
    );
    assert!(svc.contains("8080/TCP"), "{svc}");
    let all = k.ok(&["get", "all", "-o", "name"]);
    assert!(
        all.contains("service/web") && all.contains("deployment.apps/web"),
        "{all}"
    );
    // `describe` reads the port with its protocol.
    let described = k.ok(&["describe", "service", "web"]);
    assert!(described.contains("8080/TCP"), "{described}");

    // An autoscaling/v1 HorizontalPodAutoscaler is the v2 one with a CPU utilization metric.
    let f = k.file(
        "hpa.yaml",
        "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: web\nspec:\n\
         \x20 scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n\
         \x20 maxReplicas: 4\n  targetCPUUtilizationPercentage: 60\n",
    );
    k.ok(&["apply", "-f", path(&f)]);
    assert_eq!(
        field(
            &k,
            &["horizontalpodautoscalers.v2.autoscaling", "web"],
            "/spec/metrics/0/resource/target"
        ),
        json!({"type": "Utilization", "averageUtilization": 60})
    );
    assert_eq!(
        field(
            &k,
            &["horizontalpodautoscalers.v1.autoscaling", "web"],
            "/spec/targetCPUUtilizationPercentage"
        ),
        60
    );
    assert!(k.ok(&["get", "hpa", "web"]).contains("cpu: <unknown>/60%"));
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

/// A CRD version's `scale` subresource, as kube-rs's `crd_api` and an HPA use it: discovery
/// lists it, `kubectl scale` sets the replicas at `specReplicasPath`, the Scale shows what
/// `statusReplicasPath` and `labelSelectorPath` hold, a merge patch and a replace of `/scale`
/// scale it, and the writes are recorded under the subresource.
#[tokio::test]
async fn a_custom_resources_scale_subresource_is_served_where_its_crd_says() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Kubectl::new(&api);
    let crd = k.file(
        "crd.yaml",
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.ex.com}
spec:
  group: ex.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.size, statusReplicasPath: .status.count, labelSelectorPath: .status.selector}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
          status: {type: object, properties: {count: {type: integer}, selector: {type: string}}}
"#,
    );
    k.ok(&["apply", "-f", path(&crd)]);
    let w = k.file(
        "w.yaml",
        "apiVersion: ex.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {size: 1}\n",
    );
    eventually(Duration::from_secs(5), "widgets served", || async {
        k.run(&["apply", "-f", path(&w)])
            .status
            .success()
            .then_some(())
    })
    .await;
    let resources = k.ok(&["get", "--raw", "/apis/ex.com/v1"]);
    assert!(
        resources.contains(r#""name":"widgets/scale""#),
        "{resources}"
    );
    assert_eq!(
        k.ok(&["scale", "widget", "w1", "--replicas", "3"]),
        "widget.ex.com/w1 scaled\n"
    );
    let size = k.ok(&["get", "widget", "w1", "-o", "jsonpath={.spec.size}"]);
    assert_eq!(size, "3");
    // The status the Scale reads, written through /status.
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--subresource",
        "status",
        "--type",
        "merge",
        "-p",
        r#"{"status": {"count": 2, "selector": "app=w"}}"#,
    ]);
    let url = "/apis/ex.com/v1/namespaces/default/widgets/w1/scale";
    let scale: Value = serde_json::from_str(&k.ok(&["get", "--raw", url])).unwrap();
    assert_eq!(
        (scale["kind"].as_str(), scale["apiVersion"].as_str()),
        (Some("Scale"), Some("autoscaling/v1"))
    );
    assert_eq!(scale["spec"]["replicas"], 3);
    assert_eq!(scale["status"], json!({"replicas": 2, "selector": "app=w"}));
    // A merge patch of the Scale.
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--subresource",
        "scale",
        "--type",
        "merge",
        "-p",
        r#"{"spec": {"replicas": 5}}"#,
    ]);
    assert_eq!(
        k.ok(&["get", "widget", "w1", "-o", "jsonpath={.spec.size}"]),
        "5"
    );
    // A replace of the Scale, its resourceVersion a precondition.
    let mut replaced = serde_json::from_str::<Value>(&k.ok(&["get", "--raw", url])).unwrap();
    replaced["spec"]["replicas"] = json!(7);
    let file = k.file("scale.json", &replaced.to_string());
    let out = k.ok(&["replace", "--raw", url, "-f", path(&file)]);
    assert!(out.contains(r#""replicas":7"#), "{out}");
    let stale = k.file("stale.json", &replaced.to_string());
    let e = k.fails(&["replace", "--raw", url, "-f", path(&stale)]);
    assert!(e.contains("the object has been modified"), "{e}");
    let raw = k.ok(&[
        "get",
        "--raw",
        "/apis/ex.com/v1/namespaces/default/widgets/w1",
    ]);
    let obj: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(obj["spec"]["size"], 7);
    let scaler = obj["metadata"]["managedFields"]
        .as_array()
        .unwrap_or_else(|| panic!("no managedFields: {obj}"))
        .iter()
        .find(|e| e["subresource"] == "scale")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        scaler["fieldsV1"],
        json!({"f:spec": {"f:size": {}}}),
        "{obj}"
    );
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
    // batch/v1: a Job selects its pods by its own uid; a CronJob is defaulted.
    k.ok(&["create", "job", "once", "-n", "team", "--image", "busybox"]);
    let job: Value =
        serde_json::from_str(&k.ok(&["get", "job", "once", "-n", "team", "-o", "json"])).unwrap();
    let uid = job["metadata"]["uid"].clone();
    assert_eq!(
        job["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
        uid
    );
    assert_eq!(
        job["spec"]["template"]["metadata"]["labels"]["job-name"],
        "once"
    );
    assert_eq!(job["spec"]["backoffLimit"], 6);
    k.ok(&[
        "create",
        "cronjob",
        "nightly",
        "-n",
        "team",
        "--image",
        "busybox",
        "--schedule",
        "0 3 * * *",
    ]);
    let cron = k.ok(&["get", "cronjobs", "-n", "team"]);
    let header: Vec<&str> = cron.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST", "SCHEDULE", "AGE"
        ],
        "{cron}"
    );
    assert!(cron.contains("0 3 * * *"), "{cron}");
    // TokenRequest's protobuf body is read; this API server has no signing key, and says so.
    let e = k.fails(&["create", "token", "default", "-n", "team"]);
    assert!(
        e.contains("it has no --service-account-signing-key-file"),
        "{e}"
    );
    assert!(!e.contains("protobuf"), "{e}");
}

/// What client-go's typed clients ask for, and get from Kubernetes.
const TYPED_ACCEPT: &str = "application/vnd.kubernetes.protobuf,application/json";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// The `Content-Type` of each answer kubectl logged (`-v=8`) to a request whose line contains
/// `request` (`POST http://...configmaps`).
fn answer_types(stderr: &str, request: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut ours, mut answer) = (false, false);
    for line in stderr.lines() {
        let is_request = ["GET", "POST", "PUT", "PATCH", "DELETE"]
            .iter()
            .any(|m| line.contains(&format!("] {m} http")));
        if is_request {
            (ours, answer) = (line.contains(request), false);
        } else if line.contains("Response Headers:") {
            answer = ours;
        } else if line.contains("Request Headers:") || line.contains("Response Body") {
            answer = false;
        } else if answer && let Some((_, ct)) = line.split_once("Content-Type: ") {
            out.push(ct.trim().to_string());
        }
    }
    out
}

/// One HTTP/1.0 request to the API (its answer ends with the connection: no chunks to undo):
/// the answer's code, `Content-Type` and body.
fn http(api: &ApiServer, method: &str, path: &str, accept: &str) -> (u16, String, Vec<u8>) {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(api.grpc).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {}\r\nAccept: {accept}\r\n\r\n",
        api.grpc
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let at = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP answer");
    let head = String::from_utf8_lossy(&raw[..at]).to_string();
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    (code, content_type, raw[at + 4..].to_vec())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// client-go 1.32's typed clients ask for protobuf answers: keel writes them, and what kubectl
/// prints from them (decoded by Go from protobuf) is the object a JSON read shows.
#[tokio::test]
async fn typed_clients_get_protobuf_answers_that_kubectl_decodes() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Kubectl::new(&api);
    k.ok(&["create", "namespace", "team"]);
    // Not UTF-8: kubectl puts it in binaryData.
    let bytes: Vec<u8> = (0..2048u32).map(|i| (i % 256) as u8).collect();
    std::fs::write(k.dir.path().join("blob"), &bytes).unwrap();

    let out = k.run(&[
        "create",
        "configmap",
        "cfg",
        "-n",
        "team",
        "--from-literal=a=b",
        "--from-file=blob",
        "-o",
        "json",
        "-v=8",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        answer_types(&stderr, "POST http"),
        vec![PROTOBUF.to_string()],
        "{stderr}"
    );
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    let read: Value =
        serde_json::from_str(&k.ok(&["get", "cm", "cfg", "-n", "team", "-o", "json"])).unwrap();
    for field in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "name",
        "namespace",
    ] {
        assert!(read["metadata"][field].is_string(), "{field}: {read}");
        assert_eq!(
            created["metadata"][field], read["metadata"][field],
            "{field}"
        );
    }
    assert_eq!(created["data"], json!({"a": "b"}));
    assert_eq!(created["data"], read["data"]);
    // binaryData: bytes on the wire, base64 again in JSON.
    assert!(
        created["binaryData"]["blob"]
            .as_str()
            .is_some_and(|b| b.len() > 2048),
        "{created}"
    );
    assert_eq!(created["binaryData"], read["binaryData"]);

    // An error is a protobuf Status, which Go reads back.
    let e = k.fails(&[
        "create",
        "configmap",
        "cfg",
        "-n",
        "team",
        "--from-literal=a=b",
    ]);
    assert!(e.contains(r#"configmaps "cfg" already exists"#), "{e}");

    let out = k.run(&[
        "create",
        "deployment",
        "web",
        "-n",
        "team",
        "--image",
        "nginx:1.27",
        "--replicas",
        "0",
        "-o",
        "json",
        "-v=8",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        answer_types(&stderr, "POST http"),
        vec![PROTOBUF.to_string()],
        "{stderr}"
    );
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    let read: Value =
        serde_json::from_str(&k.ok(&["get", "deployment", "web", "-n", "team", "-o", "json"]))
            .unwrap();
    for field in ["uid", "resourceVersion", "creationTimestamp"] {
        assert_eq!(
            created["metadata"][field], read["metadata"][field],
            "{field}"
        );
    }
    assert_eq!(created["spec"]["replicas"], 0, "{created}");
    // (The stored object keeps the zeros and falses its protobuf body set, which Go's
    // JSON of the answer omits: compare what was meant.)
    let container = |d: &Value| d["spec"]["template"]["spec"]["containers"][0].clone();
    assert_eq!(container(&created)["image"], "nginx:1.27");
    assert_eq!(container(&created)["name"], container(&read)["name"]);
    assert_eq!(
        created["spec"]["template"]["metadata"]["labels"],
        read["spec"]["template"]["metadata"]["labels"]
    );
    assert_eq!(
        created["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%",
        "{created}"
    );

    // describe reads the Deployment, its ReplicaSets and Events with the typed client.
    let out = k.run(&["describe", "deployment", "web", "-n", "team", "-v=8"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let described = String::from_utf8_lossy(&out.stdout);
    assert!(
        described.contains("Name:                   web"),
        "{described}"
    );
    assert!(
        described.contains("Image:         nginx:1.27"),
        "{described}"
    );
    assert!(
        described.contains("Replicas:               0 desired"),
        "{described}"
    );
    let types = answer_types(&stderr, "GET http");
    assert!(types.iter().any(|t| t == PROTOBUF), "{stderr}");

    // Straight from the wire: an object, a list, an error, a watch.
    let (code, ct, body) = http(
        &api,
        "GET",
        "/api/v1/namespaces/team/configmaps/cfg",
        TYPED_ACCEPT,
    );
    assert_eq!((code, ct.as_str()), (200, PROTOBUF));
    assert!(body.starts_with(b"k8s\x00") && contains(&body, b"ConfigMap"));
    let (code, ct, body) = http(
        &api,
        "GET",
        "/api/v1/namespaces/team/configmaps",
        TYPED_ACCEPT,
    );
    assert_eq!((code, ct.as_str()), (200, PROTOBUF));
    assert!(body.starts_with(b"k8s\x00") && contains(&body, b"ConfigMapList"));
    let (code, ct, body) = http(
        &api,
        "GET",
        "/api/v1/namespaces/team/configmaps/nope",
        TYPED_ACCEPT,
    );
    assert_eq!((code, ct.as_str()), (404, PROTOBUF));
    assert!(contains(&body, b"Status") && contains(&body, b"NotFound"));
    let (code, ct, body) = http(
        &api,
        "GET",
        "/api/v1/namespaces/team/configmaps?watch=1&timeoutSeconds=1",
        TYPED_ACCEPT,
    );
    assert_eq!(
        (code, ct.as_str()),
        (200, "application/vnd.kubernetes.protobuf;stream=watch")
    );
    // One frame: its length, then a WatchEvent{type: ADDED, object: {raw: k8s\0...}}.
    let length = u32::from_be_bytes(body[..4].try_into().unwrap()) as usize;
    assert_eq!(body.len(), 4 + length, "one event");
    assert!(body[4..].starts_with(b"\x0a\x05ADDED\x12"));
    assert!(contains(&body, b"k8s\x00") && contains(&body, b"ConfigMap"));
    // JSON is still JSON.
    let (code, ct, body) = http(
        &api,
        "GET",
        "/api/v1/namespaces/team/configmaps/cfg",
        "application/json",
    );
    assert_eq!((code, ct.as_str()), (200, "application/json"));
    assert!(body.starts_with(b"{"));
}

/// Kubernetes has no protobuf form of a custom object: 406, even when JSON would do, as
/// Kubernetes answers; JSON clients (kubectl's unstructured ones) are served as ever.
#[tokio::test]
async fn a_custom_object_asked_for_as_protobuf_is_not_acceptable() {
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
    let net = k.file(
        "net.yaml",
        "apiVersion: samplecrd.k8s.io/v1\nkind: Network\nmetadata:\n  name: net1\nspec: {cidr: 10.0.0.0/24}\n",
    );
    k.ok(&["apply", "-f", path(&net)]);
    let object = "/apis/samplecrd.k8s.io/v1/namespaces/default/networks/net1";
    for accept in [PROTOBUF, TYPED_ACCEPT] {
        let (code, ct, body) = http(&api, "GET", object, accept);
        assert_eq!((code, ct.as_str()), (406, PROTOBUF), "{accept}");
        assert!(contains(&body, b"NotAcceptable"), "{accept}");
        assert!(contains(
            &body,
            b"object *unstructured.Unstructured does not implement the protobuf marshalling interface and cannot be encoded to a protobuf message"
        ));
    }
    let (code, _, _) = http(
        &api,
        "GET",
        "/apis/samplecrd.k8s.io/v1/namespaces/default/networks",
        TYPED_ACCEPT,
    );
    assert_eq!(code, 406);
    let (code, ct, body) = http(&api, "GET", object, "application/json");
    assert_eq!((code, ct.as_str()), (200, "application/json"));
    let net: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(net["spec"]["cidr"], "10.0.0.0/24");
    assert_eq!(
        k.ok(&["get", "network", "net1", "-o", "jsonpath={.spec.cidr}"]),
        "10.0.0.0/24"
    );
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

/// The seeds' Deployment, as a file holds it.
/// What a GitOps tool re-applies every few minutes: kinds whose defaults fill in what the
/// manifest leaves out (a fieldRef's apiVersion, probes' timings, a NetworkPolicy port's
/// protocol in an atomic list, a Service's cluster IP and a StatefulSet's policies).
const GITOPS_MANIFEST: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: server, namespace: default}
spec:
  selector: {matchLabels: {app: server}}
  template:
    metadata: {labels: {app: server}}
    spec:
      containers:
      - name: server
        image: argocd:2.13
        env:
        - name: POD_NAMESPACE
          valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /healthz, port: 8080}}
        livenessProbe: {tcpSocket: {port: 8080}, initialDelaySeconds: 3}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: server, namespace: default}
spec:
  podSelector: {matchLabels: {app: server}}
  policyTypes: [Ingress]
  ingress:
  - ports: [{port: 8080}, {port: 8084}]
---
apiVersion: v1
kind: Service
metadata: {name: server, namespace: default}
spec:
  selector: {app: server}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: redis, namespace: default}
spec:
  serviceName: redis
  selector: {matchLabels: {app: redis}}
  template:
    metadata: {labels: {app: redis}}
    spec:
      containers: [{name: redis, image: redis:7, ports: [{containerPort: 6379}]}]
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: applications.argoproj.io}
spec:
  group: argoproj.io
  names: {kind: Application, plural: applications, singular: application, shortNames: [app]}
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: server-1, namespace: default, labels: {kubernetes.io/service-name: server}}
addressType: IPv4
endpoints: [{addresses: [10.0.0.1]}]
ports: [{name: http, port: 8080}]
"#;

/// A repeated, identical server-side apply writes nothing: every resourceVersion stays, and
/// watches opened before it see no event (the first each sees is a marker written after).
#[tokio::test]
async fn applying_a_manifest_again_writes_nothing_and_wakes_no_watcher() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Kubectl::new(&api);
    let file = k.file("gitops.yaml", GITOPS_MANIFEST);
    let apply = ["apply", "--server-side", "-f", path(&file)];
    k.ok(&apply);
    // managedFields' times are to the second: the next apply comes in a later one, so a write
    // of nothing but a new time would show.
    let second =
        |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let applied = second(std::time::SystemTime::now());
    eventually(Duration::from_secs(3), "the next second", || async {
        (second(std::time::SystemTime::now()) > applied).then_some(())
    })
    .await;
    let kinds = [
        (gvr("apps", "v1", "deployments"), "default", "server"),
        (
            gvr("networking.k8s.io", "v1", "networkpolicies"),
            "default",
            "server",
        ),
        (gvr("", "v1", "services"), "default", "server"),
        (gvr("apps", "v1", "statefulsets"), "default", "redis"),
        (
            gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
            "",
            "applications.argoproj.io",
        ),
        (
            gvr("discovery.k8s.io", "v1", "endpointslices"),
            "default",
            "server-1",
        ),
    ];
    let c = api.client().await;
    let mut before = Vec::new();
    for (g, ns, name) in &kinds {
        before.push(c.get(g, ns, name).await.unwrap()["metadata"]["resourceVersion"].clone());
    }
    let revision = || async {
        let list = c
            .list(&gvr("", "v1", "configmaps"), "", &Default::default())
            .await
            .unwrap();
        list.resource_version
    };
    let at = revision().await;
    let mut watches = Vec::new();
    for (g, ns, name) in &kinds {
        let params = keel_client::WatchParams {
            namespace: ns.to_string(),
            field_selector: format!("metadata.name={name}"),
            resource_version: at.clone(),
            ..Default::default()
        };
        watches.push(c.watch(g, &params).await.unwrap());
    }

    // kubectl says each is unchanged... and means it.
    let out = k.ok(&apply);
    assert_eq!(
        out.matches("serverside-applied").count(),
        kinds.len(),
        "{out}"
    );
    for ((g, ns, name), rv) in kinds.iter().zip(&before) {
        let now = c.get(g, ns, name).await.unwrap();
        assert_eq!(
            &now["metadata"]["resourceVersion"], rv,
            "{name} was written again"
        );
    }
    assert_eq!(revision().await, at, "etcd was written");

    // A marker on each: the first event each watch sees.
    let marker = json!({"metadata": {"annotations": {"marker": "1"}}});
    for (g, ns, name) in &kinds {
        c.patch(g, ns, name, PatchType::Merge, &marker)
            .await
            .unwrap();
    }
    for (mut w, (_, _, name)) in watches.into_iter().zip(&kinds) {
        let event = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let e = w.next().await.expect("the watch ended").unwrap();
                if e.kind != keel_client::EventType::Bookmark {
                    return e;
                }
            }
        })
        .await
        .expect("the marker's event");
        assert_eq!(
            event.object["metadata"]["annotations"]["marker"], "1",
            "{name}: an event before the marker: {}",
            event.object
        );
    }
}

fn nginx_deployment(replicas: Option<u32>, image: &str) -> String {
    let replicas = replicas
        .map(|r| format!("  replicas: {r}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: nginx-deployment\n  labels:\n    app: nginx\n\
         spec:\n{replicas}  selector:\n    matchLabels:\n      app: nginx\n  template:\n    metadata:\n      labels:\n        app: nginx\n\
         \x20   spec:\n      containers:\n      - name: nginx\n        image: {image}\n        ports:\n        - containerPort: 80\n"
    )
}

/// The managers of `field` (a path of `f:` keys) in the object's managedFields.
fn owners_of(o: &Value, field: &[&str]) -> Vec<String> {
    o["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            let mut at = &e["fieldsV1"];
            for f in field {
                at = &at[format!("f:{f}")];
            }
            !at.is_null()
        })
        .map(|e| e["manager"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The seeds' walkthrough, server-side: apply, change the image, a second manager's
/// conflict on `replicas`, forced, and the first manager's next apply leaves it alone.
#[tokio::test]
async fn the_seeds_walkthrough_runs_with_apply_server_side() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Kubectl::new(&api);
    let ssa = |f: &Path, extra: &[&str]| {
        let mut args = vec!["apply", "--server-side", "-f", path(f)];
        args.extend_from_slice(extra);
        k.run(&args)
    };
    let get = || -> Value {
        serde_json::from_str(&k.ok(&[
            "get",
            "deployment",
            "nginx-deployment",
            "-o",
            "json",
            "--show-managed-fields",
        ]))
        .unwrap()
    };
    let f = k.file("d.yaml", &nginx_deployment(Some(2), "nginx:1.14.2"));
    let out = ssa(&f, &[]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "deployment.apps/nginx-deployment serverside-applied\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d = get();
    assert_eq!(owners_of(&d, &["spec", "replicas"]), ["kubectl"]);
    assert_eq!(d["metadata"]["managedFields"][0]["operation"], "Apply");
    let hidden = k.ok(&["get", "deployment", "nginx-deployment", "-o", "yaml"]);
    assert!(!hidden.contains("managedFields"), "kubectl hides them");

    let f = k.file("d.yaml", &nginx_deployment(Some(2), "nginx:1.16.1"));
    assert!(ssa(&f, &[]).status.success());
    assert_eq!(
        get()["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.16.1"
    );

    let f3 = k.file("d3.yaml", &nginx_deployment(Some(3), "nginx:1.16.1"));
    let out = ssa(&f3, &["--field-manager=other"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains(r#"Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas"#),
        "{e}"
    );
    assert!(e.contains("--force-conflicts"), "kubectl's advice: {e}");
    assert_eq!(get()["spec"]["replicas"], 2);

    let out = ssa(&f3, &["--field-manager=other", "--force-conflicts"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d = get();
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(owners_of(&d, &["spec", "replicas"]), ["other"]);

    let f = k.file("d.yaml", &nginx_deployment(None, "nginx:1.16.1"));
    assert!(ssa(&f, &[]).status.success());
    let d = get();
    assert_eq!(d["spec"]["replicas"], 3, "other's replicas are left alone");
    assert_eq!(owners_of(&d, &["spec", "replicas"]), ["other"]);

    // kubectl scale names no manager: its User-Agent's product is, through the subresource.
    k.ok(&["scale", "deployment", "nginx-deployment", "--replicas=5"]);
    let d = get();
    assert_eq!(owners_of(&d, &["spec", "replicas"]), ["kubectl"]);
    let scaler = d["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "kubectl" && e["operation"] == "Update")
        .unwrap();
    assert_eq!(scaler["subresource"], "scale");
}

/// `kubectl apply --server-side` after client-side applies: kubectl's fields are taken over
/// with no conflict, its client-side manager is gone, and a field dropped from the file is
/// removed, as after any apply.
#[tokio::test]
async fn client_side_apply_moves_to_server_side_without_a_conflict() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Kubectl::new(&api);
    let f = k.file(
        "cm.yaml",
        &CONFIGMAP.replace("a: \"1\"", "a: \"1\"\n  b: \"2\""),
    );
    assert_eq!(k.ok(&["apply", "-f", path(&f)]), "configmap/demo created\n");
    let f = k.file(
        "cm.yaml",
        &CONFIGMAP.replace("a: \"1\"", "a: \"3\"\n  b: \"2\""),
    );
    assert_eq!(
        k.ok(&["apply", "-f", path(&f)]),
        "configmap/demo configured\n"
    );
    let get = || -> Value {
        serde_json::from_str(&k.ok(&["get", "cm", "demo", "-o", "json", "--show-managed-fields"]))
            .unwrap()
    };
    assert_eq!(
        owners_of(&get(), &["data", "a"]),
        ["kubectl-client-side-apply"]
    );

    // The file changes a and drops b: server-side now.
    let f = k.file("cm.yaml", &CONFIGMAP.replace("a: \"1\"", "a: \"4\""));
    assert_eq!(
        k.ok(&["apply", "--server-side", "-f", path(&f)]),
        "configmap/demo serverside-applied\n"
    );
    let cm = get();
    assert_eq!(
        cm["data"],
        json!({"a": "4"}),
        "b left the file and the object"
    );
    let managers: Vec<&str> = cm["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["manager"].as_str().unwrap())
        .collect();
    assert!(
        !managers.contains(&"kubectl-client-side-apply"),
        "{managers:?}"
    );
    assert_eq!(owners_of(&cm, &["data", "a"]), ["kubectl"]);
    let rv = cm["metadata"]["resourceVersion"].clone();
    k.ok(&["apply", "--server-side", "-f", path(&f)]);
    assert_eq!(get()["metadata"]["resourceVersion"], rv, "nothing to do");

    // kubectl diff --server-side shows what an apply would change, and changes nothing.
    let f = k.file("cm.yaml", &CONFIGMAP.replace("a: \"1\"", "a: \"5\""));
    let out = k.run(&["diff", "--server-side", "-f", path(&f)]);
    assert_eq!(out.status.code(), Some(1));
    let diff = String::from_utf8_lossy(&out.stdout);
    assert!(diff.contains("+  a: \"5\""), "{diff}");
    assert_eq!(get()["metadata"]["resourceVersion"], rv);
}

/// ApplySet (`KUBECTL_APPLYSET=true kubectl apply --prune --applyset=...`): the set's Secret
/// records its members' kinds, and an object dropped from the files is deleted.
#[tokio::test]
async fn an_applyset_prunes_the_object_dropped_from_it() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let k = Kubectl::new(&api);
    let dir = k.dir.path().join("set");
    std::fs::create_dir(&dir).unwrap();
    for name in ["one", "two"] {
        std::fs::write(
            dir.join(format!("{name}.yaml")),
            CONFIGMAP.replace("name: demo", &format!("name: {name}")),
        )
        .unwrap();
    }
    let apply = |server_side: bool| {
        let mut args = vec![
            "apply",
            "--prune",
            "--applyset=shop",
            "-n",
            "default",
            "-f",
            path(&dir),
        ];
        if server_side {
            args.push("--server-side");
        }
        let out = k
            .command(&args)
            .env("KUBECTL_APPLYSET", "true")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    apply(true);
    let parent: Value =
        serde_json::from_str(&k.ok(&["get", "secret", "shop", "-o", "json"])).unwrap();
    let id = parent["metadata"]["labels"]["applyset.kubernetes.io/id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(id.starts_with("applyset-"), "{parent}");
    assert_eq!(
        parent["metadata"]["annotations"]["applyset.kubernetes.io/contains-group-kinds"],
        "ConfigMap"
    );
    let members = k.ok(&[
        "get",
        "cm",
        "-l",
        &format!("applyset.kubernetes.io/part-of={id}"),
        "-o",
        "name",
    ]);
    assert_eq!(members, "configmap/one\nconfigmap/two\n");

    std::fs::remove_file(dir.join("two.yaml")).unwrap();
    let out = apply(true);
    assert!(out.contains("configmap/two pruned"), "{out}");
    let e = k.fails(&["get", "cm", "two"]);
    assert!(e.contains("NotFound"), "{e}");
    k.ok(&["get", "cm", "one"]);

    // Client-side apply keeps the set by server-side apply of its Secret too.
    std::fs::write(
        dir.join("three.yaml"),
        CONFIGMAP.replace("name: demo", "name: three"),
    )
    .unwrap();
    std::fs::remove_file(dir.join("one.yaml")).unwrap();
    let out = apply(false);
    assert!(out.contains("configmap/one pruned"), "{out}");
    k.fails(&["get", "cm", "one"]);
    k.ok(&["get", "cm", "three"]);
}

/// Create-on-apply needs `create` as well as `patch`, as in Kubernetes; a dry run creates
/// nothing; a subresource of an object that does not exist is NotFound, never created.
#[tokio::test]
async fn an_apply_creates_only_for_a_user_who_may_create() {
    let users = Users::start().await;
    let (admin, alice) = (&users.admin, &users.alice);
    let rbac = |verbs: &str| {
        admin.file(
            "rbac.yaml",
            &format!(
                "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team\n---\n\
                 apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: applier\n  namespace: team\n\
                 rules:\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [{verbs}]\n---\n\
                 apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: alice-applies\n  namespace: team\n\
                 roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: applier\n\
                 subjects:\n- kind: User\n  name: alice\n  apiGroup: rbac.authorization.k8s.io\n"
            ),
        )
    };
    admin.ok(&["apply", "-f", path(&rbac("get, patch"))]);
    let cm = alice.file("cm.yaml", CONFIGMAP);
    let apply = |extra: &[&str]| {
        let mut args = vec!["apply", "--server-side", "-n", "team", "-f", path(&cm)];
        args.extend_from_slice(extra);
        alice.run(&args)
    };
    eventually(
        Duration::from_secs(5),
        "alice's apply is refused for create",
        || {
            let out = apply(&[]);
            let e = String::from_utf8_lossy(&out.stderr).to_string();
            async move {
                e.contains(
                "cannot create resource \"configmaps\" in API group \"\" in the namespace \"team\"",
            )
            .then_some(())
            }
        },
    )
    .await;
    admin.fails(&["get", "cm", "demo", "-n", "team"]);

    admin.ok(&["apply", "-f", path(&rbac("get, patch, create"))]);
    eventually(Duration::from_secs(5), "alice may apply a dry run", || {
        let out = apply(&["--dry-run=server"]);
        async move { out.status.success().then_some(()) }
    })
    .await;
    admin.fails(&["get", "cm", "demo", "-n", "team"]);
    let out = apply(&[]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "configmap/demo serverside-applied\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let pod = admin.file(
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: missing\nstatus:\n  phase: Running\n",
    );
    let e = admin.fails(&[
        "apply",
        "--server-side",
        "--subresource=status",
        "-f",
        path(&pod),
    ]);
    assert!(e.contains("NotFound") || e.contains("not found"), "{e}");
    admin.fails(&["get", "pod", "missing"]);
}

/// The rollout's story as kubectl tells it: `describe` ends with the Deployment's Events and
/// `kubectl events --for` lists them, in the controllers' words.
#[tokio::test]
async fn describe_and_events_show_a_deployments_rollout() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let _cm = ControllerManager::start(&[&api], &[]).await;
    let k = Kubectl::new(&api);
    let f = k.file(
        "deploy.yaml",
        &DEPLOYMENT.replace("replicas: 1", "replicas: 2"),
    );
    k.ok(&["apply", "-f", path(&f)]);
    k.ok(&["rollout", "status", "deployment/web", "--timeout", "60s"]);
    let f = k.file(
        "deploy.yaml",
        &DEPLOYMENT
            .replace("replicas: 1", "replicas: 2")
            .replace("nginx:1.7.9", "nginx:1.9.1"),
    );
    k.ok(&["apply", "-f", path(&f)]);
    k.ok(&["rollout", "status", "deployment/web", "--timeout", "60s"]);

    // Up from 0 to 2, then the new one up and the old one down to 0.
    let described = eventually(Duration::from_secs(20), "the rollout's events", || async {
        let d = k.ok(&["describe", "deployment", "web"]);
        let scaled = d
            .lines()
            .filter(|l| l.contains("ScalingReplicaSet"))
            .count();
        (scaled >= 3 && d.contains("from 1 to 0")).then_some(d)
    })
    .await;
    let events = described.split("Events:").nth(1).unwrap_or("");
    assert!(
        events.contains("Normal  ScalingReplicaSet")
            && events.contains("deployment-controller")
            && events.contains("Scaled up replica set web-")
            && events.contains("from 0 to 2")
            && events.contains("Scaled down replica set web-"),
        "{described}"
    );

    let listed = k.ok(&["events", "--for", "deployment/web"]);
    assert!(listed.starts_with("LAST SEEN"), "{listed}");
    let rows: Vec<&str> = listed
        .lines()
        .skip(1)
        .filter(|l| l.contains("ScalingReplicaSet"))
        .collect();
    assert!(rows.len() >= 3, "{listed}");
    assert!(
        rows.iter().all(|r| r.contains("Deployment/web")),
        "{listed}"
    );
    // Each ReplicaSet's own events: its Pods created.
    let rs = k.ok(&["events", "--types", "Normal", "-o", "json"]);
    let list: Value = serde_json::from_str(&rs).unwrap();
    assert!(
        list["items"].as_array().unwrap().iter().any(|e| {
            e["reason"] == "SuccessfulCreate"
                && e["involvedObject"]["kind"] == "ReplicaSet"
                && e["source"]["component"] == "replicaset-controller"
                && e["message"]
                    .as_str()
                    .unwrap()
                    .starts_with("Created pod: web-")
        }),
        "{rs}"
    );
}

/// A Job waited for as kubectl waits, and Pods chosen by phase.
#[tokio::test]
async fn wait_for_a_job_to_complete_and_select_pods_by_phase() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let _cm = ControllerManager::start(&[&api], &["--pod-run-time", "300ms"]).await;
    let k = Kubectl::new(&api);
    let job = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: pi\nspec:\n  completions: 3\n  parallelism: 2\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: pi\n        image: perl:5.34\n";
    let f = k.file("job.yaml", job);
    k.ok(&["apply", "-f", path(&f)]);
    let server = k.file(
        "server.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: server\nspec:\n  containers:\n  - name: web\n    image: nginx\n",
    );
    k.ok(&["apply", "-f", path(&server)]);
    let waited = k.ok(&[
        "wait",
        "--for=condition=complete",
        "job/pi",
        "--timeout=60s",
    ]);
    assert_eq!(waited, "job.batch/pi condition met\n");
    let got = k.ok(&["get", "job", "pi"]);
    let row: Vec<&str> = got.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..3], ["pi", "Complete", "3/3"], "{got}");

    eventually(Duration::from_secs(20), "the server running", || async {
        let names = k.ok(&[
            "get",
            "pods",
            "--field-selector",
            "status.phase=Running",
            "-o",
            "name",
        ]);
        (names == "pod/server\n").then_some(())
    })
    .await;
    let done = k.ok(&[
        "get",
        "pods",
        "--field-selector",
        "status.phase=Succeeded",
        "-o",
        "name",
    ]);
    assert_eq!(done.lines().count(), 3, "{done}");
    assert!(done.lines().all(|l| l.starts_with("pod/pi-")), "{done}");
}

/// `kubectl rollout status` follows a StatefulSet through its creation and a rolling update
/// (Kubernetes defaults `rollingUpdate.partition` to 0, so kubectl reads it as partitioned).
#[tokio::test]
async fn rollout_status_follows_a_statefulset() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let _cm = ControllerManager::start(&[&api], &[]).await;
    let k = Kubectl::new(&api);
    let sts = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: web\nspec:\n  replicas: 3\n  serviceName: nginx\n  selector:\n    matchLabels: {app: nginx}\n  template:\n    metadata:\n      labels: {app: nginx}\n    spec:\n      containers:\n      - name: nginx\n        image: nginx:1.7.9\n";
    let f = k.file("sts.yaml", sts);
    k.ok(&["apply", "-f", path(&f)]);
    let status = k.ok(&["rollout", "status", "statefulset/web", "--timeout", "60s"]);
    assert!(
        status.contains("partitioned roll out complete: 3 new pods have been updated"),
        "{status}"
    );
    let got = k.ok(&["get", "statefulset", "web"]);
    let row: Vec<&str> = got.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..2], ["web", "3/3"], "{got}");

    let f = k.file("sts.yaml", &sts.replace("nginx:1.7.9", "nginx:1.9.1"));
    k.ok(&["apply", "-f", path(&f)]);
    let status = k.ok(&["rollout", "status", "statefulset/web", "--timeout", "60s"]);
    assert!(
        status.contains("partitioned roll out complete: 3 new pods have been updated"),
        "{status}"
    );
    let history = k.ok(&["rollout", "history", "statefulset/web"]);
    let revisions: Vec<&str> = history
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.parse::<u32>().is_ok())
        .collect();
    assert_eq!(revisions, ["1", "2"], "{history}");
    let images = k.ok(&[
        "get",
        "pods",
        "-l",
        "app=nginx",
        "-o",
        "jsonpath={.items[*].spec.containers[0].image}",
    ]);
    assert_eq!(images, "nginx:1.9.1 nginx:1.9.1 nginx:1.9.1");
}

/// `kubectl create token`: the ServiceAccount's token authenticates as
/// `system:serviceaccount:NS:NAME` in its groups, RBAC applies to it as to anyone, a token
/// bound to a Pod dies with the Pod, one for another audience is refused here, and the issuer's
/// keys are published.
#[tokio::test]
async fn a_service_account_token_authenticates_and_rbac_applies_to_it() {
    use base64::Engine as _;
    let users = Users::start().await;
    let (api, ca, admin) = (&users.api, &users.ca, &users.admin);
    let setup = admin.file(
        "sa.yaml",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: builder\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: cm-reader\n\
         rules:\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get, list]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: builder-reads\n\
         roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: cm-reader\n\
         subjects:\n- kind: ServiceAccount\n  name: builder\n  namespace: default\n",
    );
    admin.ok(&["apply", "-f", path(&setup)]);
    let token = admin.ok(&["create", "token", "builder"]).trim().to_string();
    assert_eq!(token.split('.').count(), 3, "{token}");
    let builder = Kubectl::tls(api, ca, &format!("{{token: {token}}}"));
    let whoami = builder.ok(&["auth", "whoami", "-o", "json"]);
    let me: Value = serde_json::from_str(&whoami).unwrap();
    assert_eq!(
        me["status"]["userInfo"]["username"],
        "system:serviceaccount:default:builder"
    );
    let groups = me["status"]["userInfo"]["groups"].as_array().unwrap();
    for g in [
        "system:serviceaccounts",
        "system:serviceaccounts:default",
        "system:authenticated",
    ] {
        assert!(groups.contains(&json!(g)), "{whoami}");
    }
    // RBAC: what the Role grants, and nothing more.
    eventually(
        Duration::from_secs(5),
        "the builder may list configmaps",
        || {
            let out = builder.run(&["get", "configmaps"]);
            async move { out.status.success().then_some(()) }
        },
    )
    .await;
    let e = builder.fails(&["get", "secrets"]);
    assert!(
        e.contains(
            "User \"system:serviceaccount:default:builder\" cannot list resource \"secrets\""
        ),
        "{e}"
    );
    let e = builder.fails(&["create", "-f", path(&admin.file("cm.yaml", CONFIGMAP))]);
    assert!(e.contains("cannot create resource \"configmaps\""), "{e}");

    // A token for another audience is not one for this API server.
    let other = admin
        .ok(&["create", "token", "builder", "--audience", "vault"])
        .trim()
        .to_string();
    let e = Kubectl::tls(api, ca, &format!("{{token: {other}}}")).fails(&["get", "configmaps"]);
    assert!(e.contains("You must be logged in to the server"), "{e}");
    // Shorter than ten minutes is refused, in Kubernetes' words.
    let e = admin.fails(&["create", "token", "builder", "--duration", "1m"]);
    assert!(
        e.contains("may not specify a duration less than 10 minutes"),
        "{e}"
    );

    // Bound to a Pod: valid while the Pod exists.
    let pod = admin.file(
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: runner\nspec:\n  serviceAccountName: builder\n  containers:\n  - name: c\n    image: busybox\n",
    );
    admin.ok(&["apply", "-f", path(&pod)]);
    let bound = admin
        .ok(&[
            "create",
            "token",
            "builder",
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            "runner",
        ])
        .trim()
        .to_string();
    let runner = Kubectl::tls(api, ca, &format!("{{token: {bound}}}"));
    runner.ok(&["get", "configmaps"]);
    admin.ok(&["delete", "pod", "runner"]);
    eventually(Duration::from_secs(5), "the bound token refused", || {
        let out = runner.run(&["get", "configmaps"]);
        async move { (!out.status.success()).then_some(()) }
    })
    .await;

    // The ServiceAccount deleted: its tokens stop working.
    admin.ok(&["delete", "serviceaccount", "builder"]);
    eventually(Duration::from_secs(5), "the token refused", || {
        let out = builder.run(&["get", "configmaps"]);
        async move {
            (!out.status.success()
                && String::from_utf8_lossy(&out.stderr).contains("You must be logged in"))
            .then_some(())
        }
    })
    .await;

    // The issuer's discovery, with the key that verifies the tokens.
    let config: Value =
        serde_json::from_str(&admin.ok(&["get", "--raw", "/.well-known/openid-configuration"]))
            .unwrap();
    assert_eq!(
        config["issuer"],
        "https://kubernetes.default.svc.cluster.local"
    );
    assert_eq!(
        config["jwks_uri"],
        "https://kubernetes.default.svc.cluster.local/openid/v1/jwks"
    );
    let keys: Value =
        serde_json::from_str(&admin.ok(&["get", "--raw", "/openid/v1/jwks"])).unwrap();
    assert_eq!(keys["keys"][0]["alg"], "ES256");
    let header: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.split('.').next().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(header["kid"], keys["keys"][0]["kid"]);
}
