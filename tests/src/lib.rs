//! Test harness: a real etcd on free loopback ports with a temporary data dir, and the real
//! keel binaries started as processes. Nothing is mocked.
//!
//! Binaries are found next to the test executable (`target/<profile>/`), or in `KEEL_BIN_DIR`;
//! `etcd` on `PATH`, or `ETCD_BIN`.

// A harness that cannot start its etcd or server must stop the test: panics are its errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use tokio::time::Instant;

pub mod keelctl;
pub mod proxy;
pub mod webhook;

use keel_client::{Client, ClientConfig};
pub use rustix::process::Signal;

/// Sends `sig` to process `pid`; panics if it cannot (the test cannot go on).
pub fn signal(pid: u32, sig: Signal) {
    let target = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .unwrap_or_else(|| panic!("no such pid {pid}"));
    rustix::process::kill_process(target, sig)
        .unwrap_or_else(|e| panic!("cannot send {sig:?} to {pid}: {e}"));
}

/// Freezes a process (SIGSTOP) until dropped (SIGCONT): etcd frozen, requests hang rather
/// than fail fast.
pub struct Frozen(u32);

impl Frozen {
    pub fn new(pid: u32) -> Frozen {
        signal(pid, Signal::STOP);
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal(self.0, Signal::CONT);
    }
}

/// Whether the etcd `c` reaches is up and is the member named `name`: not another test's etcd
/// that took the port between its check and this one's start (this one then exits, and the
/// test would freeze, kill or read the wrong etcd).
pub async fn answers_as(c: &mut etcd_client::Client, name: &str) -> bool {
    c.get("health", None).await.is_ok()
        && c.member_list()
            .await
            .is_ok_and(|list| list.members().iter().any(|m| m.name() == name))
}

/// Waits until `cond` returns `Some`, polling; panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut cond: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = cond().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A port nobody listens on now. Ports are handed out from a per-process counter starting at
/// a pid-derived offset so parallel tests in one process never get the same one.
pub fn free_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let _ = NEXT.compare_exchange(
        0,
        20000 + (std::process::id() % 2000) as u16 * 10,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    loop {
        let p = NEXT.fetch_add(1, Ordering::SeqCst);
        if p > 60000 {
            NEXT.store(20000, Ordering::SeqCst);
            continue;
        }
        if TcpListener::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
}

/// The directory holding the workspace's binaries.
pub fn bin_dir() -> PathBuf {
    if let Ok(d) = std::env::var("KEEL_BIN_DIR") {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().expect("exe dir");
    if dir.ends_with("deps") {
        dir.parent().expect("target dir").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// The path of a workspace binary; panics with how to build it when missing.
pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.exists(),
        "{} not found: run `cargo build --workspace --bins` first",
        p.display()
    );
    p
}

/// A child process killed when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A single-member etcd with its own data directory.
pub struct Etcd {
    pub endpoint: String,
    proc: Proc,
    _dir: tempfile::TempDir,
    /// How to reach it (TLS, for one started by [`Etcd::start_tls`]).
    options: Option<etcd_client::ConnectOptions>,
}

/// Makes the stack's CA and certificates in `dir` with keel-certs.
pub fn certs(dir: &Path) {
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

/// TLS options for an etcd client with the certificates `keel-certs` wrote into `certs`: its
/// CA, and the API server's etcd client identity.
pub fn etcd_tls_options(certs: &Path) -> etcd_client::ConnectOptions {
    let read = |f: &str| std::fs::read(certs.join(f)).expect("certificate file");
    let tls = etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(read("ca.crt")))
        .identity(etcd_client::Identity::from_pem(
            read("apiserver-etcd-client.crt"),
            read("apiserver-etcd-client.key"),
        ));
    etcd_client::ConnectOptions::new().with_tls(tls)
}

impl Etcd {
    pub async fn start() -> Etcd {
        Self::start_with(&[]).await
    }

    /// Starts with extra flags (`--quota-backend-bytes`, say).
    pub async fn start_with(extra: &[&str]) -> Etcd {
        Self::start_inner(extra, None).await
    }

    /// Serves clients over TLS only, with the certificates `keel-certs` wrote into `certs`
    /// (`etcd.crt`, its CA), and requires client certificates from that CA.
    pub async fn start_tls(certs: &Path) -> Etcd {
        Self::start_inner(&[], Some(certs)).await
    }

    async fn start_inner(extra: &[&str], tls: Option<&Path>) -> Etcd {
        let etcd = std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".into());
        let options = tls.map(etcd_tls_options);
        let tls_flags: Vec<String> = match tls {
            Some(certs) => {
                let file = |f: &str| certs.join(f).display().to_string();
                vec![
                    "--cert-file".into(),
                    file("etcd.crt"),
                    "--key-file".into(),
                    file("etcd.key"),
                    "--trusted-ca-file".into(),
                    file("ca.crt"),
                    "--client-cert-auth".into(),
                ]
            }
            None => Vec::new(),
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        for _attempt in 0..5 {
            let dir = tempfile::tempdir().expect("tempdir");
            let (client, peer) = (free_port(), free_port());
            let endpoint = format!("{scheme}://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let log = std::fs::File::create(dir.path().join("etcd.log")).expect("log");
            // Named by its ports, so that the etcd that answers is known to be this one.
            let name = format!("test-{client}-{peer}");
            let child = Command::new(&etcd)
                .args(["--name", &name, "--data-dir"])
                .arg(dir.path().join("data"))
                .args([
                    "--listen-client-urls",
                    &endpoint,
                    "--advertise-client-urls",
                    &endpoint,
                ])
                .args([
                    "--listen-peer-urls",
                    &peer_url,
                    "--initial-advertise-peer-urls",
                    &peer_url,
                ])
                .args(["--initial-cluster", &format!("{name}={peer_url}")])
                .args(["--max-request-bytes", "2097152", "--log-level", "error"])
                // Progress notifications a quiet watch can trust (see DESIGN.md, "Watch").
                .args(["--experimental-watch-progress-notify-interval", "1s"])
                .args(extra)
                .args(&tls_flags)
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot start {etcd}: {e} (install Debian's etcd-server or set ETCD_BIN)"
                    )
                });
            let mut proc = Proc(child);
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = proc.0.try_wait() {
                    break; // exited: port taken? try other ports
                }
                if let Ok(mut c) =
                    etcd_client::Client::connect([endpoint.as_str()], options.clone()).await
                    && answers_as(&mut c, &name).await
                {
                    return Etcd {
                        endpoint,
                        proc,
                        _dir: dir,
                        options,
                    };
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        panic!("etcd did not start");
    }

    pub async fn client(&self) -> etcd_client::Client {
        etcd_client::Client::connect([self.endpoint.as_str()], self.options.clone())
            .await
            .expect("etcd client")
    }

    pub fn pid(&self) -> u32 {
        self.proc.0.id()
    }
}

/// A three-member etcd cluster on loopback, each member with its own data directory; members
/// can be killed, restarted (same ports and data), paused (SIGSTOP) and resumed.
pub struct EtcdCluster {
    /// Each member's client URL.
    pub endpoints: Vec<String>,
    peers: Vec<String>,
    procs: Vec<Option<Proc>>,
    dir: tempfile::TempDir,
}

impl EtcdCluster {
    pub async fn start() -> EtcdCluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let mut c = EtcdCluster {
            endpoints: ports
                .iter()
                .map(|(client, _)| format!("http://127.0.0.1:{client}"))
                .collect(),
            peers: ports
                .iter()
                .map(|(_, peer)| format!("http://127.0.0.1:{peer}"))
                .collect(),
            procs: vec![None, None, None],
            dir,
        };
        for i in 0..3 {
            c.spawn(i);
        }
        let endpoints = c.endpoints.clone();
        eventually(
            Duration::from_secs(30),
            "the etcd cluster to elect a leader",
            || {
                let endpoints = endpoints.clone();
                async move {
                    let mut client = etcd_client::Client::connect(&endpoints, None).await.ok()?;
                    let put = client.put("health", "ok", None);
                    tokio::time::timeout(Duration::from_secs(2), put)
                        .await
                        .ok()?
                        .ok()
                        .map(|_| ())
                }
            },
        )
        .await;
        c
    }

    fn spawn(&mut self, i: usize) {
        let etcd = std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".into());
        let name = format!("m{i}");
        let cluster: Vec<String> = self
            .peers
            .iter()
            .enumerate()
            .map(|(k, p)| format!("m{k}={p}"))
            .collect();
        let data = self.dir.path().join(&name);
        // A restarted member rejoins with its data; only a new one bootstraps the cluster.
        let state = if data.exists() { "existing" } else { "new" };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{name}.log")))
            .expect("log");
        let child = Command::new(&etcd)
            .args(["--name", &name, "--data-dir"])
            .arg(&data)
            .args(["--listen-client-urls", &self.endpoints[i]])
            .args(["--advertise-client-urls", &self.endpoints[i]])
            .args(["--listen-peer-urls", &self.peers[i]])
            .args(["--initial-advertise-peer-urls", &self.peers[i]])
            .args(["--initial-cluster", &cluster.join(",")])
            .args(["--initial-cluster-state", state])
            .args(["--initial-cluster-token", "keel-test"])
            .args(["--max-request-bytes", "2097152", "--log-level", "error"])
            .args(["--experimental-watch-progress-notify-interval", "1s"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {etcd}: {e} (install Debian's etcd-server or set ETCD_BIN)")
            });
        self.procs[i] = Some(Proc(child));
    }

    /// The members' client URLs, comma-separated, for `--etcd-servers`.
    pub fn servers(&self) -> String {
        self.endpoints.join(",")
    }

    fn pid(&self, i: usize) -> u32 {
        self.procs[i].as_ref().expect("member running").0.id()
    }

    /// SIGKILL member `i`.
    pub fn kill(&mut self, i: usize) {
        self.procs[i].take();
    }

    /// Starts member `i` again with its data (after `kill`).
    pub fn restart(&mut self, i: usize) {
        self.procs[i].take();
        self.spawn(i);
    }

    /// SIGSTOP: the member keeps its connections open and answers nothing.
    pub fn pause(&self, i: usize) {
        signal(self.pid(i), Signal::STOP);
    }

    pub fn resume(&self, i: usize) {
        signal(self.pid(i), Signal::CONT);
    }

    /// Waits until member `i` serves linearizable reads again (it has rejoined the cluster).
    pub async fn wait_healthy(&self, i: usize) {
        let endpoint = self.endpoints[i].clone();
        eventually(Duration::from_secs(30), "the etcd member to rejoin", || {
            let endpoint = endpoint.clone();
            async move {
                let mut client = etcd_client::Client::connect([endpoint], None).await.ok()?;
                let get = client.get("health", None);
                tokio::time::timeout(Duration::from_secs(1), get)
                    .await
                    .ok()?
                    .ok()
                    .map(|_| ())
            }
        })
        .await;
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        // A paused member cannot die until it is resumed.
        for p in self.procs.iter().flatten() {
            if let Some(pid) = i32::try_from(p.0.id())
                .ok()
                .and_then(rustix::process::Pid::from_raw)
            {
                let _ = rustix::process::kill_process(pid, Signal::CONT);
            }
        }
    }
}

/// A `keel-apiserver` process.
pub struct ApiServer {
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    etcd_endpoint: String,
    extra: Vec<String>,
    proc: Option<Proc>,
    log_dir: tempfile::TempDir,
}

impl ApiServer {
    pub async fn start(etcd: &Etcd) -> ApiServer {
        Self::start_with(etcd, &[]).await
    }

    /// Starts with extra flags, on free ports.
    pub async fn start_with(etcd: &Etcd, extra: &[&str]) -> ApiServer {
        Self::start_at(&etcd.endpoint, extra).await
    }

    /// Serves TLS with keel-certs' files in `dir` ([`certs`]), verifying client certificates
    /// against its CA, with `extra` flags.
    pub async fn start_tls(etcd: &Etcd, dir: &Path, extra: &[&str]) -> ApiServer {
        let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
        let mut args = vec![
            "--tls-cert-file".to_string(),
            p("apiserver.crt"),
            "--tls-private-key-file".to_string(),
            p("apiserver.key"),
            "--client-ca-file".to_string(),
            p("ca.crt"),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Self::start_with(etcd, &args).await
    }

    /// Starts against the etcd at `endpoint` (a `proxy::Proxy` in front of one, say).
    pub async fn start_at(etcd_endpoint: &str, extra: &[&str]) -> ApiServer {
        let s = Self::start_listening(etcd_endpoint, extra).await;
        s.wait_ready().await;
        s
    }

    /// Returns as soon as the server listens, before it is ready: what a client that does not
    /// look at `/readyz` meets right after a start.
    pub async fn start_listening(etcd_endpoint: &str, extra: &[&str]) -> ApiServer {
        let log_dir = tempfile::tempdir().expect("tempdir");
        let mut s = ApiServer {
            grpc: "127.0.0.1:0".parse().expect("addr"),
            http: "127.0.0.1:0".parse().expect("addr"),
            etcd_endpoint: etcd_endpoint.to_string(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            proc: None,
            log_dir,
        };
        s.spawn().await;
        s
    }

    /// With `--tls-cert-file`, the side port serves TLS: reached trusting the `ca.crt` that
    /// keel-certs wrote beside the certificate.
    pub fn side_port_tls(&self) -> Option<HttpsAuth> {
        let i = self.extra.iter().position(|a| a == "--tls-cert-file")?;
        let cert = Path::new(self.extra.get(i + 1)?);
        Some(HttpsAuth {
            ca: cert.with_file_name("ca.crt"),
            ..Default::default()
        })
    }

    async fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_dir.path().join("apiserver.log"))
            .expect("log");
        let mut child = Command::new(bin("keel-apiserver"))
            .args([
                "--listen",
                &self.grpc.to_string(),
                "--http-listen",
                &self.http.to_string(),
            ])
            .args(["--etcd-servers", &self.etcd_endpoint])
            .args(&self.extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start keel-apiserver");
        let stdout = child.stdout.take().expect("stdout");
        let proc = Proc(child);
        // The first stdout line names the bound addresses.
        let line = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            let mut r = BufReader::new(stdout);
            let _ = r.read_line(&mut line);
            // Keep draining so the child never blocks on a full pipe.
            std::thread::spawn(move || std::io::copy(&mut r, &mut std::io::sink()));
            line
        })
        .await
        .expect("read stdout");
        let log = self.log();
        let addr = |key: &str| -> SocketAddr {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .and_then(|a| a.parse().ok())
                .unwrap_or_else(|| {
                    panic!(
                        "keel-apiserver did not announce its {key} address: {line:?}; log: {log}"
                    )
                })
        };
        self.grpc = addr("grpc=");
        self.http = addr("http=");
        self.proc = Some(proc);
    }

    /// Whether `/readyz` answers 200 now.
    pub fn is_ready(&self) -> bool {
        let got = match self.side_port_tls() {
            Some(auth) => https_get(self.http, "/readyz", &auth),
            None => http_get(self.http, "/readyz"),
        };
        got.map(|(code, _)| code).ok() == Some(200)
    }

    /// Waits until `/readyz` answers 200.
    pub async fn wait_ready(&self) {
        eventually(
            Duration::from_secs(30),
            "keel-apiserver /readyz",
            || async { self.is_ready().then_some(()) },
        )
        .await;
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.grpc)
    }

    pub async fn client(&self) -> Client {
        Client::connect(&ClientConfig::new([self.endpoint()]).timeout(Duration::from_secs(30)))
            .await
            .expect("client")
    }

    /// SIGKILL: no shutdown, no goodbye.
    pub fn kill9(&mut self) {
        self.proc.take();
    }

    /// SIGTERM, and waits for the process to exit; returns its exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut p = self.proc.take().expect("running");
        signal(p.0.id(), Signal::TERM);
        let status = p.0.wait().expect("wait");
        std::mem::forget(p);
        status
    }

    /// Starts the server again on the same ports.
    pub async fn restart(&mut self) {
        self.proc.take();
        self.spawn().await;
        self.wait_ready().await;
    }

    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(|p| p.0.id())
    }

    pub fn metrics(&self) -> String {
        http_get(self.http, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_dir.path().join("apiserver.log")).unwrap_or_default()
    }
}

/// A minimal HTTP/1.0 GET: status code and body.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(http_response(&out))
}

/// How an HTTPS GET authenticates: the CA it trusts (PEM file), and optionally a bearer token
/// and a client certificate and key (PEM files).
#[derive(Default, Clone)]
pub struct HttpsAuth {
    pub ca: PathBuf,
    pub bearer: Option<String>,
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// A GET over TLS (HTTP/1.0 to 127.0.0.1, ALPN `http/1.1`): the status code and body. A server
/// that refuses the handshake is an `Err`.
pub fn https_get(addr: SocketAddr, path: &str, auth: &HttpsAuth) -> std::io::Result<(u16, String)> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let err = |e: &dyn std::fmt::Display| std::io::Error::other(e.to_string());
    let read = |p: &Path| std::fs::read(p);
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&read(&auth.ca)?) {
        roots.add(c.map_err(|e| err(&e))?).map_err(|e| err(&e))?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| err(&e))?
        .with_root_certificates(roots);
    let config = match &auth.identity {
        Some((cert, key)) => {
            let certs = CertificateDer::pem_slice_iter(&read(cert)?)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| err(&e))?;
            let key = PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|e| err(&e))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| err(&e))?
        }
        None => builder.with_no_client_auth(),
    };
    // As HTTP/1.1-only clients (Python's urllib3, curl --http1.1) offer it.
    let mut config = config;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = ServerName::IpAddress(addr.ip().into());
    let conn =
        rustls::ClientConnection::new(std::sync::Arc::new(config), name).map_err(|e| err(&e))?;
    let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    tcp.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut s = rustls::StreamOwned::new(conn, tcp);
    let bearer = auth
        .bearer
        .as_ref()
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{bearer}\r\n")?;
    let mut raw = Vec::new();
    match s.read_to_end(&mut raw) {
        Ok(_) => {}
        // A peer that closes without TLS' close_notify: the response is complete anyway.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(e),
    }
    Ok(http_response(&String::from_utf8_lossy(&raw)))
}

/// The status code and body of an HTTP/1 response.
fn http_response(out: &str) -> (u16, String) {
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

/// A keel controller binary (`keel-controller-manager`, `keel-initializer`) as a process: it
/// serves `/readyz` on `--http-listen` once its caches are synced.
pub struct KeelService {
    pub http: SocketAddr,
    pub id: String,
    binary: &'static str,
    args: Vec<String>,
    proc: Option<Proc>,
    log_dir: tempfile::TempDir,
}

/// The controller-manager is the most used service.
pub type ControllerManager = KeelService;

fn endpoints(servers: &[&ApiServer]) -> String {
    servers
        .iter()
        .map(|s| s.endpoint())
        .collect::<Vec<_>>()
        .join(",")
}

impl KeelService {
    /// `keel-controller-manager` against these API servers with a unique `--id`, a fast pod
    /// start (100 ms) and short shard-lease timings (lease 4 s, renew deadline 3 s, retry
    /// 500 ms); `extra` flags come last and win. Returns once `/readyz` answers 200.
    pub async fn start(servers: &[&ApiServer], extra: &[&str]) -> KeelService {
        static N: AtomicU16 = AtomicU16::new(0);
        let id = format!(
            "cm-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let mut args: Vec<String> = [
            "--server",
            &endpoints(servers),
            "--id",
            &id,
            "--pod-start-delay",
            "100ms",
            "--shard-lease-duration",
            "4s",
            "--shard-renew-deadline",
            "3s",
            "--shard-retry-period",
            "500ms",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::spawn_new("keel-controller-manager", id, args).await
    }

    /// `keel-initializer` against these API servers; `extra` flags come last.
    pub async fn initializer(servers: &[&ApiServer], extra: &[&str]) -> KeelService {
        let mut args = vec!["--server".to_string(), endpoints(servers)];
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::spawn_new("keel-initializer", String::new(), args).await
    }

    async fn spawn_new(binary: &'static str, id: String, args: Vec<String>) -> KeelService {
        let mut s = KeelService {
            http: "127.0.0.1:0".parse().expect("addr"),
            id,
            binary,
            args,
            proc: None,
            log_dir: tempfile::tempdir().expect("tempdir"),
        };
        s.spawn().await;
        s
    }

    fn log_path(&self) -> PathBuf {
        self.log_dir.path().join(format!("{}.log", self.binary))
    }

    async fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("log");
        let http = if self.http.port() == 0 {
            format!("127.0.0.1:{}", free_port())
        } else {
            self.http.to_string()
        };
        let child = Command::new(bin(self.binary))
            .args(&self.args)
            .args(["--http-listen", &http])
            .env("RUST_LOG", "info,keel_runtime=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.binary));
        self.http = http.parse().expect("addr");
        self.proc = Some(Proc(child));
        let (addr, log, binary) = (self.http, self.log_path(), self.binary);
        eventually(
            Duration::from_secs(30),
            &format!("{binary} /readyz"),
            || {
                let log = log.clone();
                async move {
                    let ok = http_get(addr, "/readyz").map(|(code, _)| code).ok() == Some(200);
                    if !ok && let Ok(text) = std::fs::read_to_string(&log) {
                        assert!(
                            !text.contains(&format!("{binary}: ")),
                            "{binary} exited: {text}"
                        );
                    }
                    ok.then_some(())
                }
            },
        )
        .await;
    }

    /// SIGKILL: no draining, no lease release.
    pub fn kill9(&mut self) {
        self.proc.take();
    }

    /// SIGTERM, and waits for the process to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut p = self.proc.take().expect("running");
        signal(p.0.id(), Signal::TERM);
        let status = p.0.wait().expect("wait");
        std::mem::forget(p);
        status
    }

    /// Starts it again with the same flags and ports.
    pub async fn restart(&mut self) {
        self.proc.take();
        self.spawn().await;
    }

    pub fn metrics(&self) -> String {
        http_get(self.http, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }
}

/// The holder of every shard Lease of the controller-manager
/// (`keel-system/keel-controller-manager-shard-<i>`), by shard, as the API server has it (""
/// when released).
/// The names of the objects of `resource` in `namespace` (`""`: all), in the server's order.
pub async fn list_names(
    c: &Client,
    resource: &keel_client::GroupVersionResource,
    namespace: &str,
) -> Vec<String> {
    c.list(resource, namespace, &Default::default())
        .await
        .expect("list")
        .items
        .iter()
        .map(|o| {
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

pub async fn shard_lease_holders(c: &Client) -> std::collections::BTreeMap<u32, String> {
    let leases = c
        .list_all(
            &keel_client::gvr("coordination.k8s.io", "v1", "leases"),
            "keel-system",
            &keel_client::ListParams::default(),
        )
        .await
        .expect("list the shard leases");
    leases
        .items
        .iter()
        .filter_map(|l| {
            let name = l["metadata"]["name"].as_str()?;
            let shard = name.strip_prefix("keel-controller-manager-shard-")?;
            let holder = l["spec"]["holderIdentity"].as_str().unwrap_or("");
            Some((shard.parse().ok()?, holder.to_string()))
        })
        .collect()
}

/// Creates the seeds' ConfigMap `envoy-initializer` from deploy/examples/ in `default`: the
/// sidecar keel-initializer injects.
pub async fn create_envoy_configmap(c: &Client) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/examples/envoy-initializer.yaml"
    ))
    .expect("deploy/examples/envoy-initializer.yaml");
    let cm: serde_json::Value = serde_saphyr::from_str(&text).expect("the example is YAML");
    c.create(&keel_client::gvr("", "v1", "configmaps"), "default", &cm)
        .await
        .expect("create the envoy-initializer ConfigMap");
}

/// `admissionregistration.k8s.io/v1alpha1` `initializerconfigurations` (cluster-scoped).
pub fn initializer_configurations() -> keel_client::GroupVersionResource {
    keel_client::gvr(
        "admissionregistration.k8s.io",
        "v1alpha1",
        "initializerconfigurations",
    )
}

/// Creates an InitializerConfiguration `name` with these `initializers`; returns it as stored
/// (with the server's defaults filled in).
pub async fn create_initializer_configuration(
    c: &Client,
    name: &str,
    initializers: serde_json::Value,
) -> serde_json::Value {
    let config = serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1alpha1",
        "kind": "InitializerConfiguration",
        "metadata": {"name": name},
        "initializers": initializers,
    });
    c.create(&initializer_configurations(), "", &config)
        .await
        .unwrap_or_else(|e| panic!("create the InitializerConfiguration {name}: {e}"))
}

/// Creates the seeds' InitializerConfiguration `envoy-config` from deploy/examples/: every new
/// Pod waits for `envoy.initializer.kubernetes.io`. Returns it as stored.
pub async fn create_envoy_initializer_configuration(c: &Client) -> serde_json::Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/examples/initializer-configuration.yaml"
    ))
    .expect("deploy/examples/initializer-configuration.yaml");
    let config: serde_json::Value = serde_saphyr::from_str(&text).expect("the example is YAML");
    c.create(&initializer_configurations(), "", &config)
        .await
        .expect("create the seeds' InitializerConfiguration")
}

/// Runs kubectl (v1.32, or `$KUBECTL`) against `api` with `args`, in a home of its own (no
/// kubeconfig): whether it succeeded, its stdout and its stderr.
pub fn kubectl(api: &ApiServer, home: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let bin = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let out = std::process::Command::new(bin)
        .arg("--server")
        .arg(api.endpoint())
        .args(args)
        .env("HOME", home)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run kubectl (install kubectl v1.32 or set KUBECTL): {e}")
        });
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}
