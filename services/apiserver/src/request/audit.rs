//! The audit log: one JSON line per request (who, what, on which object, with what result, how
//! long it took) appended to `--audit-log-path`, which is rotated by size: the full file
//! becomes `<path>.1` (the older ones `<path>.2`, ...; `--audit-log-maxbackup` are kept).
//!
//! Lines go through a bounded queue to a thread of their own that writes them; when the queue
//! is full the request waits for room (Kubernetes' "blocking" mode): no request goes
//! unrecorded, and a slow disk slows requests rather than growing memory.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use tokio::sync::mpsc;

/// Lines waiting for the writer at most.
const QUEUE: usize = 10_000;

/// The audit log's settings (flags).
#[derive(Debug, Clone)]
pub struct AuditConfig {
    pub path: PathBuf,
    /// A file is rotated once it holds this many bytes.
    pub max_bytes: u64,
    /// Rotated files kept (0: all of them, as Kubernetes' `--audit-log-maxbackup 0`).
    pub max_backups: usize,
}

/// One request, as its audit line has it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// When the request was answered (RFC 3339, UTC).
    pub time: String,
    /// `""` when authentication is off.
    pub user: String,
    pub groups: Vec<String>,
    pub verb: &'static str,
    pub group: String,
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// Whom `user` acted as (`Impersonate-User`), as Kubernetes' audit event's
    /// `impersonatedUser`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<AuditUser>,
    /// The HTTP status code Kubernetes would answer with (200 for success, 201 for a create;
    /// 499 when the client went away before the answer).
    pub code: u16,
    /// Kubernetes' reason of an error (`Forbidden`, `NotFound`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<keel_api::Reason>,
    pub latency_ms: f64,
    /// What admission recorded (a webhook's `auditAnnotations`, as `<webhook>/<key>`), as
    /// Kubernetes' audit event's `annotations`.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// A user an audit line names besides its sender.
#[derive(Debug, Clone, Serialize)]
pub struct AuditUser {
    pub username: String,
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

/// Where audit lines go.
#[derive(Clone)]
pub struct AuditLog {
    tx: mpsc::Sender<Vec<u8>>,
}

impl AuditLog {
    /// Opens (creating) the log and starts its writer.
    pub fn open(config: AuditConfig) -> std::io::Result<AuditLog> {
        let file = open_append(&config.path)?;
        let written = file.metadata()?.len();
        let (tx, rx) = mpsc::channel(QUEUE);
        let writer = Writer {
            out: BufWriter::new(file),
            written,
            config,
        };
        std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || writer.run(rx))?;
        Ok(AuditLog { tx })
    }

    /// Records one request (waits while the queue is full).
    pub async fn record(&self, entry: &Entry) {
        // The writer only stops when the process does.
        let _ = self.tx.send(line(entry)).await;
    }

    /// Records one request without waiting (from a drop, which cannot): a full queue loses
    /// the line, and says so in the log.
    pub fn record_now(&self, entry: &Entry) {
        if self.tx.try_send(line(entry)).is_err() {
            tracing::error!(verb = entry.verb, resource = %entry.resource, name = %entry.name,
                "the audit log's queue is full: a line is lost");
        }
    }
}

fn line(entry: &Entry) -> Vec<u8> {
    let mut line = serde_json::to_vec(entry).unwrap_or_default();
    line.push(b'\n');
    line
}

/// Opens for appending, creating it readable by this user only (it names users and objects).
fn open_append(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

struct Writer {
    out: BufWriter<File>,
    written: u64,
    config: AuditConfig,
}

impl Writer {
    fn run(mut self, mut rx: mpsc::Receiver<Vec<u8>>) {
        while let Some(line) = rx.blocking_recv() {
            self.write(&line);
            // Flush once the queue is drained: lines are on disk promptly, in few writes.
            while let Ok(line) = rx.try_recv() {
                self.write(&line);
            }
            if let Err(e) = self.out.flush() {
                tracing::error!(path = %self.config.path.display(), error = %e, "cannot write the audit log");
            }
        }
    }

    fn write(&mut self, line: &[u8]) {
        let full = self.written > 0 && self.written + line.len() as u64 > self.config.max_bytes;
        if full && let Err(e) = self.rotate() {
            tracing::error!(path = %self.config.path.display(), error = %e, "cannot rotate the audit log");
            // Go on in the same file; try again once it has grown by as much again.
            self.written = 0;
        }
        match self.out.write_all(line) {
            Ok(()) => self.written += line.len() as u64,
            Err(e) => {
                tracing::error!(path = %self.config.path.display(), error = %e, "cannot write the audit log")
            }
        }
    }

    /// `path` → `path.1` → `path.2` ...; the oldest beyond `max_backups` is removed.
    fn rotate(&mut self) -> std::io::Result<()> {
        self.out.flush()?;
        let path = &self.config.path;
        let backup = |n: usize| {
            let mut p = path.clone().into_os_string();
            p.push(format!(".{n}"));
            PathBuf::from(p)
        };
        // With no bound (0), shift every backup there is.
        let keep = match self.config.max_backups {
            0 => (1..).find(|&n| !backup(n).exists()).unwrap_or(1),
            n => {
                let _ = std::fs::remove_file(backup(n));
                n
            }
        };
        for n in (1..keep).rev() {
            let _ = std::fs::rename(backup(n), backup(n + 1));
        }
        std::fs::rename(path, backup(1))?;
        self.out = BufWriter::new(open_append(path)?);
        self.written = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn entry(name: &str) -> Entry {
        Entry {
            time: "2026-11-24T00:00:00.000Z".into(),
            user: "alice".into(),
            groups: vec!["dev".into()],
            verb: "patch",
            group: String::new(),
            resource: "configmaps".into(),
            subresource: String::new(),
            namespace: "default".into(),
            name: name.into(),
            impersonated_user: None,
            code: 200,
            reason: None,
            latency_ms: 1.5,
            annotations: Default::default(),
        }
    }

    fn lines(path: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn each_request_is_a_json_line_and_full_files_rotate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let one_line = serde_json::to_vec(&entry("cm-0")).unwrap().len() as u64 + 1;
        let log = AuditLog::open(AuditConfig {
            path: path.clone(),
            max_bytes: one_line * 3,
            max_backups: 2,
        })
        .unwrap();
        for i in 0..10 {
            log.record(&entry(&format!("cm-{i}"))).await;
        }
        // 10 lines, 3 a file: cm-9 in the live file, cm-6..8 in .1, cm-3..5 in .2, the
        // oldest removed. The writer is a thread of its own: wait for the last line.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while !std::fs::read_to_string(&path)
            .unwrap_or_default()
            .contains("cm-9")
        {
            assert!(tokio::time::Instant::now() < deadline, "cm-9 never written");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let live = lines(&path);
        assert_eq!(live.len(), 1);
        assert_eq!(live[0]["name"], "cm-9");
        assert_eq!(live[0]["user"], "alice");
        assert_eq!(live[0]["latencyMs"], 1.5);
        let names = |p: &str| -> Vec<String> {
            lines(&dir.path().join(p))
                .iter()
                .map(|l| l["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(names("audit.log.1"), ["cm-6", "cm-7", "cm-8"]);
        assert_eq!(names("audit.log.2"), ["cm-3", "cm-4", "cm-5"]);
        assert!(!dir.path().join("audit.log.3").exists());
    }
}
