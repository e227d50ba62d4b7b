//! The real `keelctl` binary as the tests run it: against one API server, in a directory of its
//! own for manifests, to completion ([`Keelctl::run`]) or in the background with its output read
//! line by line as it comes ([`Keelctl::spawn`]).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::{ApiServer, Proc, bin, eventually};

/// How long a test waits for keelctl to print its next line or to exit.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// What one run of keelctl did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Asserts success and returns stdout.
    #[track_caller]
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, 0, "keelctl failed: {self:?}");
        &self.stdout
    }

    /// Asserts failure with status 1 and returns stderr.
    #[track_caller]
    pub fn failed(&self) -> &str {
        assert_eq!(self.code, 1, "keelctl should have failed with 1: {self:?}");
        &self.stderr
    }
}

/// keelctl against one API server, with a directory for manifests.
pub struct Keelctl {
    server: String,
    dir: tempfile::TempDir,
}

impl Keelctl {
    pub fn new(api: &ApiServer) -> Keelctl {
        Keelctl::with_server(&api.endpoint())
    }

    /// keelctl with `--server` as given (several endpoints, or one that does not answer).
    pub fn with_server(server: &str) -> Keelctl {
        Keelctl {
            server: server.to_string(),
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin("keelctl"));
        c.arg("--server")
            .arg(&self.server)
            .args(args)
            .current_dir(self.dir.path())
            .env_remove("KEEL_SERVER")
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    pub fn run(&self, args: &[&str]) -> Run {
        self.run_with(args, None, &[])
    }

    /// Runs with `stdin` written to it and extra environment variables.
    pub fn run_with(&self, args: &[&str], stdin: Option<&str>, env: &[(&str, &Path)]) -> Run {
        let mut c = self.command(args);
        for (k, v) in env {
            c.env(k, v);
        }
        if stdin.is_some() {
            c.stdin(Stdio::piped());
        }
        let mut child = c.spawn().expect("start keelctl");
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(input.as_bytes())
                .expect("write stdin");
        }
        let out = child.wait_with_output().expect("keelctl output");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Starts keelctl and reads its stdout and stderr lines as they come.
    pub fn spawn(&self, args: &[&str]) -> Running {
        let mut proc = Proc(self.command(args).spawn().expect("start keelctl"));
        let stdout = proc.0.stdout.take().expect("stdout");
        let stderr = proc.0.stderr.take().expect("stderr");
        Running {
            proc,
            stdout: lines(stdout),
            stderr: lines(stderr),
        }
    }

    /// Writes a manifest into the working directory and returns its name.
    pub fn file(&self, name: &str, text: &str) -> String {
        std::fs::write(self.dir.path().join(name), text).expect("write manifest");
        name.to_string()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// The lines of a pipe, read on a thread.
fn lines(pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// A keelctl that is still running.
pub struct Running {
    proc: Proc,
    stdout: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
}

/// How a [`Running`] keelctl ended: its exit code and what it printed after the lines read.
#[derive(Debug)]
pub struct Exited {
    pub code: i32,
    pub stdout: Vec<String>,
    pub stderr: Vec<String>,
}

impl Running {
    /// The next line of stdout; panics after [`PATIENCE`].
    #[track_caller]
    pub fn next_stdout(&self) -> String {
        self.stdout
            .recv_timeout(PATIENCE)
            .expect("keelctl printed nothing more on stdout")
    }

    /// The next line of stderr; panics after [`PATIENCE`].
    #[track_caller]
    pub fn next_stderr(&self) -> String {
        self.stderr
            .recv_timeout(PATIENCE)
            .expect("keelctl printed nothing more on stderr")
    }

    pub fn running(&mut self) -> bool {
        self.proc.0.try_wait().expect("try_wait").is_none()
    }

    /// Waits (up to [`PATIENCE`]) for the exit.
    pub async fn exit(mut self) -> Exited {
        let status = eventually(PATIENCE, "keelctl to exit", || {
            let s = self.proc.0.try_wait().expect("try_wait");
            async move { s }
        })
        .await;
        Exited {
            code: status.code().unwrap_or(-1),
            stdout: self.stdout.iter().collect(),
            stderr: self.stderr.iter().collect(),
        }
    }
}
