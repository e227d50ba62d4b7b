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
use keel_tests::{ApiServer, Etcd, bin};
use serde_json::json;

fn certs(dir: &Path) {
    let out = Command::new(bin("keel-certs"))
        .arg("--dir")
        .arg(dir)
        .output()
        .expect("run keel-certs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

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
    let p = |f: &str| ours.path().join(f).to_string_lossy().into_owned();
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(
        &etcd,
        &[
            "--tls-cert-file",
            &p("apiserver.crt"),
            "--tls-private-key-file",
            &p("apiserver.key"),
            "--client-ca-file",
            &p("ca.crt"),
        ],
    )
    .await;
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
    let names: Vec<String> = admin
        .list(&gvr("", "v1", "configmaps"), "default", &Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| {
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(names, ["a"]);
}

#[tokio::test]
async fn bearer_tokens_from_the_token_file_authenticate_and_others_are_unauthorized() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        "# token,user,uid,groups\ns3cret,alice,1,\"dev,ops\"\n",
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
