//! TLS on the API server's gRPC listener, with certificates from keel-certs, and authentication
//! (issue 16): a client that trusts the stack's CA and shows a certificate it signed is served;
//! plain text, a client trusting another CA and a client certificate from another CA are
//! refused at the handshake; no certificate, or a bearer token not in the token file, is
//! Unauthorized.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use keel_client::{Client, ClientConfig, TlsConfig, gvr};
use keel_tests::{ApiServer, Etcd, HttpsAuth, bin, certs, http_get, https_get, list_names};
use serde_json::json;

fn tls(dir: &Path, user: Option<&str>) -> TlsConfig {
    let cert = user.map(|u| (dir.join(format!("{u}.crt")), dir.join(format!("{u}.key"))));
    TlsConfig::from_files(
        &dir.join("ca.crt"),
        cert.as_ref().map(|(c, k)| (c.as_path(), k.as_path())),
    )
    .unwrap()
}

async fn client(endpoint: String, tls: Option<TlsConfig>) -> Client {
    let mut config = ClientConfig::new([endpoint]).timeout(Duration::from_secs(5));
    config.tls = tls;
    Client::connect(&config).await.unwrap()
}

async fn works(c: &Client, name: &str) -> Result<(), keel_client::ApiError> {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    c.create(&gvr("", "v1", "configmaps"), "default", &cm)
        .await
        .map(|_| ())
}

#[tokio::test]
async fn the_grpc_listener_serves_tls_to_clients_that_trust_its_ca_only() {
    let ours = tempfile::tempdir().unwrap();
    let theirs = tempfile::tempdir().unwrap();
    certs(ours.path());
    certs(theirs.path());
    let etcd = Etcd::start().await;
    let api = ApiServer::start_tls(&etcd, ours.path(), &[]).await;
    let https = format!("https://{}", api.grpc);

    // Trusting the stack's CA, with a client certificate; without one the connection is
    // made but the request has no user: Unauthorized.
    works(
        &client(https.clone(), Some(tls(ours.path(), Some("admin")))).await,
        "a",
    )
    .await
    .unwrap();
    let e = works(
        &client(https.clone(), Some(tls(ours.path(), None))).await,
        "b",
    )
    .await
    .unwrap_err();
    assert_eq!(e.reason, keel_client::Reason::Unauthorized, "{e}");

    // Plain text to the TLS port.
    let e = works(&client(api.endpoint(), None).await, "c")
        .await
        .unwrap_err();
    assert_eq!(e.reason, keel_client::Reason::ServiceUnavailable, "{e}");
    // A client that trusts another CA refuses the server's certificate.
    let e = works(
        &client(https.clone(), Some(tls(theirs.path(), None))).await,
        "d",
    )
    .await
    .unwrap_err();
    assert_eq!(e.reason, keel_client::Reason::ServiceUnavailable, "{e}");
    // A client certificate from another CA is refused at the handshake.
    let mut foreign = tls(ours.path(), None);
    foreign.identity = tls(theirs.path(), Some("admin")).identity;
    let e = works(&client(https.clone(), Some(foreign)).await, "e")
        .await
        .unwrap_err();
    assert_eq!(e.reason, keel_client::Reason::ServiceUnavailable, "{e}");
    // An expired client certificate from the right CA is refused at the handshake: made with
    // a validity of 0 days (it ends the moment it is made), once the clock is past it.
    let out = Command::new(bin("keel-certs"))
        .arg("--dir")
        .arg(ours.path())
        .args(["--days", "0", "--user", "expired=admin,system:masters"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let e = keel_tests::eventually(Duration::from_secs(5), "the certificate to expire", || {
        // A new client each time: a connection made while it was valid stays up.
        let (https, identity) = (https.clone(), tls(ours.path(), Some("expired")));
        async move {
            let expired = client(https, Some(identity)).await;
            let cms = gvr("", "v1", "configmaps");
            expired.get(&cms, "default", "a").await.err()
        }
    })
    .await;
    assert_eq!(e.reason, keel_client::Reason::ServiceUnavailable, "{e}");
    // An https endpoint without a CA is a clear error, not a plain-text attempt.
    let e = Client::connect(&ClientConfig::new([https]))
        .await
        .err()
        .expect("no CA given");
    assert!(e.message.contains("give the CA"), "{}", e.message);

    // None of the refused clients wrote anything.
    let admin = client(
        format!("https://{}", api.grpc),
        Some(tls(ours.path(), Some("admin"))),
    )
    .await;
    let names = list_names(&admin, &gvr("", "v1", "configmaps"), "default").await;
    assert_eq!(names, ["a"]);
}

#[tokio::test]
async fn bearer_tokens_from_the_token_file_authenticate_and_others_are_unauthorized() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        "# token,user,uid,groups\ns3cret,alice,1,\"dev,system:masters\"\n",
    )
    .unwrap();
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, &["--token-auth-file", tokens.to_str().unwrap()]).await;
    let with = |token: Option<&str>| {
        let mut config = ClientConfig::new([api.endpoint()]).timeout(Duration::from_secs(5));
        config.token = token.map(str::to_string);
        async move { Client::connect(&config).await.unwrap() }
    };
    works(&with(Some("s3cret")).await, "a").await.unwrap();
    for (token, why) in [
        (Some("wrong"), "invalid bearer token"),
        (None, "no credentials"),
    ] {
        let e = works(&with(token).await, "b").await.unwrap_err();
        assert_eq!(e.reason, keel_client::Reason::Unauthorized, "{e}");
        assert!(e.message.contains(why), "{}", e.message);
    }
    // Health stays open to probes without credentials.
    let (code, _) = keel_tests::http_get(api.http, "/readyz").unwrap();
    assert_eq!(code, 200);
}

/// keelctl reads a kubeconfig as kubectl does: the context's server and CA, a client
/// certificate user or a token user, and `--context` to switch.
#[tokio::test]
async fn keelctl_connects_with_a_kubeconfig() {
    let dir = tempfile::tempdir().unwrap();
    certs(dir.path());
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "alice-token,alice,2,\n").unwrap();
    let etcd = Etcd::start().await;
    let api = ApiServer::start_tls(
        &etcd,
        dir.path(),
        &["--token-auth-file", tokens.to_str().unwrap()],
    )
    .await;
    // Paths relative to the kubeconfig's directory, as kubectl resolves them.
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: keel\n  cluster:\n    server: https://{}\n    certificate-authority: ca.crt\nusers:\n- name: admin\n  user:\n    client-certificate: admin.crt\n    client-key: admin.key\n- name: alice\n  user:\n    token: alice-token\ncontexts:\n- name: admin\n  context: {{cluster: keel, user: admin}}\n- name: alice\n  context: {{cluster: keel, user: alice, namespace: keel-system}}\ncurrent-context: admin\n",
            api.grpc
        ),
    )
    .unwrap();
    let keelctl = |args: &[&str], env: Option<&Path>| {
        let mut c = Command::new(bin("keelctl"));
        c.args(args)
            .env_remove("KEEL_SERVER")
            .env_remove("KUBECONFIG");
        if let Some(k) = env {
            c.env("KUBECONFIG", k);
        }
        c.output().unwrap()
    };
    let k = kubeconfig.to_str().unwrap();
    let out = keelctl(&["--kubeconfig", k, "get", "namespaces"], None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("keel-system"), "{stdout}");
    // KUBECONFIG, another context: alice is authenticated, and RBAC grants her nothing; her
    // context's namespace is the one she asks about.
    let out = keelctl(
        &["--context", "alice", "get", "configmaps"],
        Some(&kubeconfig),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("Error from server (Forbidden): configmaps is forbidden: User \"alice\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"keel-system\""),
        "{stderr}"
    );
    // A context that does not exist, and a kubeconfig that is not one: clear errors.
    let out = keelctl(&["--kubeconfig", k, "--context", "nope", "get", "ns"], None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("context \"nope\" does not exist"),
        "{stderr}"
    );
    let bad = dir.path().join("bad");
    std::fs::write(&bad, "contexts: [1, 2\n").unwrap();
    let out = keelctl(&["--kubeconfig", bad.to_str().unwrap(), "get", "ns"], None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("error: kubeconfig: "), "{stderr}");
    assert!(stderr.contains("bad"), "{stderr}");
}

#[tokio::test]
async fn the_api_server_reaches_etcd_over_tls_with_its_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    certs(dir.path());
    let etcd = Etcd::start_tls(dir.path()).await;
    // etcd speaks TLS only, and only to clients with a certificate from the stack's CA.
    let plain = etcd.endpoint.replace("https://", "http://");
    let refused = async {
        let mut c = etcd_client::Client::connect([plain.as_str()], None).await?;
        c.get("health", None).await
    };
    assert!(
        tokio::time::timeout(Duration::from_secs(5), refused)
            .await
            .map_or(true, |r| r.is_err()),
        "plain text reached etcd"
    );

    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let (ca, cert, key) = (
        p("ca.crt"),
        p("apiserver-etcd-client.crt"),
        p("apiserver-etcd-client.key"),
    );
    let api = ApiServer::start_with(
        &etcd,
        &[
            "--etcd-cafile",
            &ca,
            "--etcd-certfile",
            &cert,
            "--etcd-keyfile",
            &key,
        ],
    )
    .await;
    works(&api.client().await, "over-tls").await.unwrap();
    let stored = etcd
        .client()
        .await
        .get("/registry/core/configmaps/default/over-tls", None)
        .await
        .unwrap();
    assert_eq!(stored.kvs().len(), 1);
}

#[tokio::test]
async fn the_side_port_serves_tls_and_metrics_need_a_user() {
    let (ours, theirs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    certs(ours.path());
    certs(theirs.path());
    let tokens = ours.path().join("tokens.csv");
    std::fs::write(&tokens, "metrics-token,prometheus,1,\n").unwrap();
    let etcd = Etcd::start().await;
    let api = ApiServer::start_tls(
        &etcd,
        ours.path(),
        &["--token-auth-file", tokens.to_str().unwrap()],
    )
    .await;
    let anonymous = HttpsAuth {
        ca: ours.path().join("ca.crt"),
        ..Default::default()
    };
    let get = |path: &str, auth: &HttpsAuth| https_get(api.http, path, auth).unwrap();

    // Health stays open, as in Kubernetes.
    assert_eq!(get("/healthz", &anonymous).0, 200);
    assert_eq!(get("/readyz", &anonymous).0, 200);
    // Metrics need a user: a token from the file, or a client certificate from the CA.
    assert_eq!(
        get("/metrics", &anonymous),
        (
            401,
            "Unauthorized: no credentials: send a client certificate or a bearer token\n".into()
        )
    );
    let bad = HttpsAuth {
        bearer: Some("wrong".into()),
        ..anonymous.clone()
    };
    assert_eq!(get("/metrics", &bad).0, 401);
    let token = HttpsAuth {
        bearer: Some("metrics-token".into()),
        ..anonymous.clone()
    };
    let (code, body) = get("/metrics", &token);
    assert_eq!(code, 200);
    assert!(
        body.contains("keel_apiserver_current_inflight_requests"),
        "{body}"
    );
    let certificate = HttpsAuth {
        identity: Some((ours.path().join("admin.crt"), ours.path().join("admin.key"))),
        ..anonymous.clone()
    };
    assert_eq!(get("/metrics", &certificate).0, 200);

    // Nothing in plain text; no handshake with a client trusting another CA, or showing a
    // certificate from one.
    assert!(
        http_get(api.http, "/healthz").map_or(true, |(code, _)| code != 200),
        "the side port answered plain text"
    );
    let foreign_ca = HttpsAuth {
        ca: theirs.path().join("ca.crt"),
        ..Default::default()
    };
    assert!(https_get(api.http, "/healthz", &foreign_ca).is_err());
    let foreign_certificate = HttpsAuth {
        identity: Some((
            theirs.path().join("admin.crt"),
            theirs.path().join("admin.key"),
        )),
        ..anonymous.clone()
    };
    let got = https_get(api.http, "/metrics", &foreign_certificate);
    assert!(
        got.as_ref().map_or(true, |(code, _)| *code == 0),
        "a certificate from another CA got an HTTP answer: {got:?}"
    );
}

/// Runs keel-apiserver with `args` against `etcd`; it must exit (not serve) within 20 s.
/// Returns its stderr.
fn refused_start(etcd: &Etcd, args: &[&str]) -> String {
    let listen: &[&str] = if args.contains(&"--listen") {
        &[]
    } else {
        &["--listen", "127.0.0.1:0"]
    };
    let mut child = Command::new(bin("keel-apiserver"))
        .args(listen)
        .args(["--http-listen", "127.0.0.1:0"])
        .args(["--etcd-servers", &etcd.endpoint])
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if tokio::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("keel-apiserver {args:?} started instead of refusing");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn malformed_certificates_and_token_files_stop_the_server_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    certs(dir.path());
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    std::fs::write(dir.path().join("garbage.crt"), "not a certificate\n").unwrap();
    std::fs::write(dir.path().join("tokens.csv"), "abc,alice,1\nlonely\n").unwrap();
    let etcd = Etcd::start().await;
    let (cert, key, garbage) = (p("apiserver.crt"), p("apiserver.key"), p("garbage.crt"));
    let tokens = p("tokens.csv");

    let cases: [(Vec<&str>, &str); 5] = [
        (
            vec!["--tls-cert-file", &garbage, "--tls-private-key-file", &key],
            "--tls-cert-file: no PEM certificate in the file",
        ),
        (
            vec!["--tls-cert-file", &cert, "--tls-private-key-file", &garbage],
            "--tls-private-key-file: no PEM private key",
        ),
        (
            vec![
                "--tls-cert-file",
                &cert,
                "--tls-private-key-file",
                &key,
                "--client-ca-file",
                "/nonexistent/ca.crt",
            ],
            "cannot read /nonexistent/ca.crt",
        ),
        (vec!["--token-auth-file", &tokens], "line 2"),
        // Plain text off loopback.
        (
            vec!["--listen", "0.0.0.0:0"],
            "--listen 0.0.0.0:0: without --tls-cert-file and --tls-private-key-file",
        ),
    ];
    for (args, says) in cases {
        let stderr = refused_start(&etcd, &args);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[tokio::test]
async fn the_rest_api_answers_http1_over_tls_with_the_same_authentication() {
    let dir = tempfile::tempdir().unwrap();
    certs(dir.path());
    let etcd = Etcd::start().await;
    let api = ApiServer::start_tls(&etcd, dir.path(), &[]).await;
    let anonymous = HttpsAuth {
        ca: dir.path().join("ca.crt"),
        ..Default::default()
    };
    let path = "/api/v1/namespaces/default/configmaps";
    // The API port itself, HTTP/1.x (a client that offers no HTTP/2): Kubernetes' JSON.
    let (code, body) = https_get(api.grpc, path, &anonymous).unwrap();
    assert_eq!(code, 401, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (status["kind"].as_str(), status["reason"].as_str()),
        (Some("Status"), Some("Unauthorized"))
    );
    let admin = HttpsAuth {
        identity: Some((dir.path().join("admin.crt"), dir.path().join("admin.key"))),
        ..anonymous
    };
    let (code, body) = https_get(api.grpc, path, &admin).unwrap();
    assert_eq!(code, 200, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["kind"], "ConfigMapList");
}
