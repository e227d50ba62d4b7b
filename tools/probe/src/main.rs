//! keel-probe: `keel-probe [--cacert CA.crt] [--cert C.crt --key C.key] [--data JSON] URL`
//! exits 0 when the URL answers HTTP 200 within two seconds, 1 otherwise. Images built
//! `FROM scratch` have no shell or curl; Docker health checks run this instead. `http://`, or
//! `https://` verified against `--cacert` (rustls), with a client certificate when given.
//! `--data` POSTs the JSON instead of a GET: the chaos test asks an etcd member for a
//! linearizable read through its JSON gateway (`/v3/kv/range`), which its `/health` does not
//! prove.

#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

const TIMEOUT: Duration = Duration::from_secs(2);

/// What to ask, and how.
#[derive(Default)]
struct Probe {
    url: String,
    ca: Option<String>,
    /// Client certificate and key (PEM files).
    identity: Option<(String, String)>,
    /// A JSON body to POST.
    data: Option<String>,
}

/// rustls' client configuration trusting the CA in `ca` (PEM file), with the client's
/// certificate when given.
fn tls_config(
    ca: &str,
    identity: Option<&(String, String)>,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let pem = std::fs::read(ca).map_err(|e| format!("{ca}: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&pem) {
        let c = c.map_err(|e| format!("{ca}: {e}"))?;
        roots.add(c).map_err(|e| format!("{ca}: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let config = match identity {
        None => config.with_no_client_auth(),
        Some((cert, key)) => {
            let certs = CertificateDer::pem_file_iter(cert)
                .map_err(|e| format!("{cert}: {e}"))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{cert}: {e}"))?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{key}: {e}"))?;
            config
                .with_client_auth_cert(certs, key)
                .map_err(|e| format!("{cert}: {e}"))?
        }
    };
    Ok(Arc::new(config))
}

/// Reads into `buf` until it holds the status line (or is full, or the peer is done); the
/// bytes read.
fn read_head(s: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() && !buf[..n].contains(&b'\n') {
        match s.read(&mut buf[n..])? {
            0 => break,
            m => n += m,
        }
    }
    Ok(n)
}

fn probe(p: &Probe) -> Result<(), String> {
    let url = p.url.as_str();
    let (tls, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(rest), _) => (false, rest),
        (_, Some(rest)) => (true, rest),
        _ => return Err("only http:// and https:// URLs are supported".into()),
    };
    let (host, path) = match rest.split_once('/') {
        Some((h, p)) => (h, format!("/{p}")),
        None => (rest, "/".to_string()),
    };
    let addr = host
        .to_socket_addrs()
        .map_err(|e| format!("{host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}: no address"))?;
    let tcp = TcpStream::connect_timeout(&addr, TIMEOUT).map_err(|e| format!("{addr}: {e}"))?;
    tcp.set_read_timeout(Some(TIMEOUT))
        .map_err(|e| e.to_string())?;
    tcp.set_write_timeout(Some(TIMEOUT))
        .map_err(|e| e.to_string())?;
    let request = match &p.data {
        None => format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n"),
        Some(body) => format!(
            "POST {path} HTTP/1.0\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    };
    // The status line is all we need; read a bounded amount.
    let mut buf = [0u8; 256];
    let n = if tls {
        let ca = p.ca.as_deref().ok_or("an https:// URL needs --cacert")?;
        // The host without its port ("[::1]:6080" names ::1).
        let name = host.rsplit_once(':').map_or(host, |(h, _)| h);
        let name = name.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(name.to_string()).map_err(|e| format!("{name}: {e}"))?;
        let conn = rustls::ClientConnection::new(tls_config(ca, p.identity.as_ref())?, name)
            .map_err(|e| e.to_string())?;
        let mut s = rustls::StreamOwned::new(conn, tcp);
        s.write_all(request.as_bytes())
            .map_err(|e| format!("{url}: {e}"))?;
        read_head(&mut s, &mut buf).map_err(|e| format!("{url}: {e}"))?
    } else {
        let mut s = tcp;
        s.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
        read_head(&mut s, &mut buf).map_err(|e| e.to_string())?
    };
    let head = String::from_utf8_lossy(&buf[..n]);
    let code = head.split_whitespace().nth(1).unwrap_or("");
    if code == "200" {
        Ok(())
    } else {
        Err(format!("{url}: HTTP {code}"))
    }
}

/// The probe the arguments ask for; None when they do not make one.
fn parse(args: &[String]) -> Option<Probe> {
    let mut p = Probe::default();
    let (mut cert, mut key) = (None, None);
    let mut args = args.iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--cacert" => p.ca = Some(args.next()?.clone()),
            "--cert" => cert = Some(args.next()?.clone()),
            "--key" => key = Some(args.next()?.clone()),
            "--data" => p.data = Some(args.next()?.clone()),
            url if !url.starts_with("--") && p.url.is_empty() => p.url = url.to_string(),
            _ => return None,
        }
    }
    p.identity = match (cert, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => return None,
    };
    (!p.url.is_empty()).then_some(p)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(p) = parse(&args) else {
        eprintln!(
            "usage: keel-probe [--cacert CA.crt] [--cert C.crt --key C.key] [--data JSON] \
             http(s)://host:port/path"
        );
        return ExitCode::from(2);
    };
    match probe(&p) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keel-probe: {e}");
            ExitCode::FAILURE
        }
    }
}
