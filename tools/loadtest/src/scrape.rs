//! Reads counters from the API servers' `/metrics`, to report server-side work (PATCH retries,
//! batch sizes) next to what the clients saw.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Sums of the counters a run reports, across every server.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerCounters {
    pub patch_retries: f64,
    pub batch_sum: f64,
    pub batch_count: f64,
}

impl std::ops::Sub for ServerCounters {
    type Output = ServerCounters;
    fn sub(self, o: ServerCounters) -> ServerCounters {
        ServerCounters {
            patch_retries: self.patch_retries - o.patch_retries,
            batch_sum: self.batch_sum - o.batch_sum,
            batch_count: self.batch_count - o.batch_count,
        }
    }
}

fn get(url: &str) -> Option<String> {
    let rest = url.strip_prefix("http://")?;
    let (host, path) = match rest.split_once('/') {
        Some((h, p)) => (h, format!("/{p}")),
        None => (rest, "/metrics".to_string()),
    };
    let addr = host.to_socket_addrs().ok()?.next()?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

/// Sums every sample of the metric `name` in a Prometheus text body.
pub fn sum_metric(body: &str, name: &str) -> f64 {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Scrapes every URL; None when none answered.
pub fn scrape(urls: &[String]) -> Option<ServerCounters> {
    let mut c = ServerCounters::default();
    let mut any = false;
    for u in urls {
        if let Some(body) = get(u) {
            any = true;
            c.patch_retries += sum_metric(&body, "keel_apiserver_patch_retries_total");
            c.batch_sum += sum_metric(&body, "keel_apiserver_patch_batch_size_sum");
            c.batch_count += sum_metric(&body, "keel_apiserver_patch_batch_size_count");
        }
    }
    any.then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_samples_of_one_metric_only() {
        let body = "# HELP x\nkeel_apiserver_patch_retries_total{resource=\"configmaps\"} 3\nkeel_apiserver_patch_retries_total{resource=\"pods\"} 2\nkeel_apiserver_patch_retries_total_other 9\n";
        assert_eq!(sum_metric(body, "keel_apiserver_patch_retries_total"), 5.0);
    }
}
