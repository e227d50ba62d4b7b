//! keel-probe: `keel-probe http://host:port/path` exits 0 when the URL answers HTTP 200 within
//! two seconds, 1 otherwise. Images built `FROM scratch` have no shell or curl; Docker health
//! checks run this instead. Plain HTTP only, no dependencies.

#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(2);

fn probe(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("only http:// URLs are supported")?;
    let (host, path) = match rest.split_once('/') {
        Some((h, p)) => (h, format!("/{p}")),
        None => (rest, "/".to_string()),
    };
    let addr = host
        .to_socket_addrs()
        .map_err(|e| format!("{host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}: no address"))?;
    let mut s = TcpStream::connect_timeout(&addr, TIMEOUT).map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(TIMEOUT))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(TIMEOUT))
        .map_err(|e| e.to_string())?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").map_err(|e| e.to_string())?;
    // The status line is all we need; read a bounded amount.
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).map_err(|e| e.to_string())?;
    let head = String::from_utf8_lossy(&buf[..n]);
    let code = head.split_whitespace().nth(1).unwrap_or("");
    if code == "200" {
        Ok(())
    } else {
        Err(format!("{url}: HTTP {code}"))
    }
}

fn main() -> ExitCode {
    let Some(url) = std::env::args().nth(1) else {
        eprintln!("usage: keel-probe http://host:port/path");
        return ExitCode::from(2);
    };
    match probe(&url) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keel-probe: {e}");
            ExitCode::FAILURE
        }
    }
}
