//! The real Helm 3.16 (`/usr/local/bin/helm`, `$HELM`, or `helm` on the PATH; installed by
//! scripts/install-deps.sh) against keel's REST dialect, as a new user tries it: the scaffold of
//! `helm create`, installed with `--wait`, upgraded to a new image tag, rolled back and
//! uninstalled, with nothing left behind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use keel_client::{Client, ListParams, Reason, gvr};
use keel_tests::{ApiServer, ControllerManager, Etcd, eventually};
use serde_json::Value;

/// Helm with a kubeconfig for one API server, its caches and settings in a directory of its
/// own.
struct Helm {
    dir: tempfile::TempDir,
}

impl Helm {
    fn new(api: &ApiServer) -> Helm {
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: keel\n  cluster: {{server: \"{}\"}}\n\
             users:\n- name: me\n  user: {{}}\ncontexts:\n- name: keel\n  context:\n    cluster: keel\n    user: me\n    namespace: default\n\
             current-context: keel\n",
            api.endpoint()
        );
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, config).unwrap();
        // Helm warns of a kubeconfig others may read.
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        Helm { dir }
    }

    fn run(&self, args: &[&str]) -> Output {
        let bin = std::env::var("HELM").unwrap_or_else(|_| {
            if Path::new("/usr/local/bin/helm").exists() {
                "/usr/local/bin/helm".into()
            } else {
                "helm".into()
            }
        });
        Command::new(&bin)
            .args(args)
            .env("KUBECONFIG", self.dir.path().join("kubeconfig"))
            .env("HOME", self.dir.path())
            .env("XDG_CACHE_HOME", self.dir.path().join("cache"))
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"))
            .env("XDG_DATA_HOME", self.dir.path().join("data"))
            .current_dir(self.dir.path())
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run {bin} (scripts/install-deps.sh installs Helm 3.16): {e}")
            })
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "helm {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

async fn deployment_image(c: &Client) -> String {
    let d = c
        .get(&gvr("apps", "v1", "deployments"), "default", "demo")
        .await
        .unwrap();
    d["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Helm's release records: Secrets labelled `owner=helm`, by name, with their status label.
async fn releases(c: &Client) -> Vec<(String, String)> {
    let list = c
        .list(
            &gvr("", "v1", "secrets"),
            "default",
            &ListParams {
                label_selector: "owner=helm".into(),
                ..ListParams::default()
            },
        )
        .await
        .unwrap();
    let mut out: Vec<(String, String)> = list
        .items
        .iter()
        .map(|s: &Value| {
            (
                s["metadata"]["name"].as_str().unwrap_or("").to_string(),
                s["metadata"]["labels"]["status"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

async fn count(c: &Client, group: &str, resource: &str) -> usize {
    c.list(
        &gvr(group, "v1", resource),
        "default",
        &ListParams::default(),
    )
    .await
    .unwrap()
    .items
    .len()
}

#[tokio::test]
async fn helm_installs_upgrades_rolls_back_and_uninstalls_the_scaffold_chart() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let _cm = ControllerManager::start(&[&api], &[]).await;
    let c = api.client().await;
    let helm = Helm::new(&api);
    helm.ok(&["create", "demo"]);

    // Install: the chart's ServiceAccount, Service and Deployment, waited on until the
    // Service has its cluster IP and the Deployment's pods are ready.
    let out = helm.ok(&["install", "demo", "./demo", "--wait", "--timeout", "120s"]);
    assert!(out.contains("STATUS: deployed"), "{out}");
    let svc = c
        .get(&gvr("", "v1", "services"), "default", "demo")
        .await
        .unwrap();
    assert!(
        svc["spec"]["clusterIP"]
            .as_str()
            .is_some_and(|ip| !ip.is_empty()),
        "{svc}"
    );
    c.get(&gvr("", "v1", "serviceaccounts"), "default", "demo")
        .await
        .unwrap();
    let first = deployment_image(&c).await;
    assert_eq!(first, "nginx:1.16.0", "the chart's appVersion");
    assert_eq!(
        releases(&c).await,
        [("sh.helm.release.v1.demo.v1".into(), "deployed".into())]
    );

    // Upgrade to another tag: a strategic merge patch of the Deployment.
    let out = helm.ok(&[
        "upgrade",
        "demo",
        "./demo",
        "--set",
        "image.tag=1.27",
        "--wait",
        "--timeout",
        "120s",
    ]);
    assert!(
        out.contains("STATUS: deployed") && out.contains("REVISION: 2"),
        "{out}"
    );
    assert_eq!(deployment_image(&c).await, "nginx:1.27");

    // Roll back to revision 1: its image again, as revision 3.
    let out = helm.ok(&["rollback", "demo", "1", "--wait", "--timeout", "120s"]);
    assert!(out.contains("Rollback was a success"), "{out}");
    assert_eq!(deployment_image(&c).await, first);
    let history = helm.ok(&["history", "demo"]);
    let revisions: Vec<&str> = history
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(revisions, ["1", "2", "3"], "{history}");
    assert!(history.contains("Rollback to 1"), "{history}");
    assert_eq!(
        releases(&c).await,
        [
            ("sh.helm.release.v1.demo.v1".into(), "superseded".into()),
            ("sh.helm.release.v1.demo.v2".into(), "superseded".into()),
            ("sh.helm.release.v1.demo.v3".into(), "deployed".into()),
        ]
    );

    // Uninstall: the chart's objects, what the Deployment made, and Helm's records go.
    let out = helm.ok(&["uninstall", "demo", "--wait", "--timeout", "120s"]);
    assert!(out.contains("release \"demo\" uninstalled"), "{out}");
    assert!(releases(&c).await.is_empty());
    for (group, resource) in [
        ("", "services"),
        ("apps", "deployments"),
        ("", "serviceaccounts"),
    ] {
        let e = c
            .get(&gvr(group, "v1", resource), "default", "demo")
            .await
            .unwrap_err();
        assert_eq!(e.reason, Reason::NotFound, "{resource}: {e}");
    }
    // What is left in default is what Kubernetes puts there: the kubernetes Service and
    // the default ServiceAccount.
    assert_eq!(count(&c, "", "services").await, 1);
    assert_eq!(count(&c, "apps", "deployments").await, 0);
    eventually(
        Duration::from_secs(60),
        "the Deployment's ReplicaSets and Pods collected",
        || async {
            let left = count(&c, "apps", "replicasets").await + count(&c, "", "pods").await;
            (left == 0).then_some(())
        },
    )
    .await;
    assert!(helm.ok(&["list", "-q"]).trim().is_empty());
}

/// A post-install hook Job, as charts use for migrations: the install waits for it to
/// complete, and `helm test` runs the scaffold's own test Pod to `Succeeded`.
#[tokio::test]
async fn a_hook_job_completes_and_helm_test_passes() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let _cm = ControllerManager::start(&[&api], &[]).await;
    let c = api.client().await;
    let helm = Helm::new(&api);
    helm.ok(&["create", "demo"]);
    std::fs::write(
        helm.dir.path().join("demo/templates/migrate.yaml"),
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {{ include \"demo.fullname\" . }}-migrate\n  annotations:\n    helm.sh/hook: post-install\n    helm.sh/hook-weight: \"0\"\nspec:\n  backoffLimit: 1\n  template:\n    metadata:\n      annotations:\n        keel.dev/run-time: 2s\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: migrate\n        image: busybox\n        command: [\"sh\", \"-c\", \"echo migrated\"]\n",
    )
    .unwrap();
    let out = helm.ok(&[
        "install",
        "demo",
        "./demo",
        "--wait",
        "--wait-for-jobs",
        "--timeout",
        "120s",
    ]);
    assert!(out.contains("STATUS: deployed"), "{out}");
    let job = c
        .get(&gvr("batch", "v1", "jobs"), "default", "demo-migrate")
        .await
        .unwrap();
    assert_eq!(job["status"]["succeeded"], 1, "{job}");

    let out = helm.ok(&["test", "demo", "--timeout", "60s"]);
    assert!(
        out.contains("TEST SUITE:     demo-test-connection"),
        "{out}"
    );
    assert!(out.contains("Phase:          Succeeded"), "{out}");
    let pod = c
        .get(&gvr("", "v1", "pods"), "default", "demo-test-connection")
        .await
        .unwrap();
    assert_eq!(pod["status"]["phase"], "Succeeded");
}
