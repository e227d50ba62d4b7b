//! `keelctl`: the keel command line, for kubectl users.
//!
//! `main` parses the flags and dispatches; each subcommand lives in `cmd/`. Around them:
//! `manifest` reads `-f` files, `resources` resolves names through the server's Discovery,
//! `last_applied` and `patches` compute what `apply` sends, `rollout` what the `rollout`
//! commands read from and write to Deployments, `printer` and `table` print, and `error`
//! says what went wrong, as kubectl would.

#![forbid(unsafe_code)]

mod cmd;
mod context;
mod editor;
mod error;
mod kubeconfig;
mod last_applied;
mod manifest;
mod patches;
mod printer;
mod resources;
mod rollout;
mod table;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use context::Ctx;
use error::Error;
use keel_client::{ClientConfig, TlsConfig};

/// keelctl controls keel, a Kubernetes-like control plane.
///
/// Declare objects in YAML or JSON files and `apply` them: keelctl creates what is missing and
/// patches what exists, so that changes other writers made are kept. Or work one command at a
/// time with `create`, `replace`, `patch`, `set image`, `edit` and `delete`.
#[derive(Debug, Parser)]
#[command(
    name = "keelctl",
    version,
    after_help = "The declarative workflow:\n  keelctl apply -f nginx.yaml      # created\n  vi nginx.yaml                    # image: nginx:1.7.9\n  keelctl diff -f nginx.yaml       # what apply would change\n  keelctl apply -f nginx.yaml      # configured: a patch, not a replace"
)]
struct Cli {
    /// API server endpoints, comma-separated; requests go to those that answer. Default: the
    /// kubeconfig context's server, else http://127.0.0.1:6443.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "KEEL_SERVER",
        value_delimiter = ','
    )]
    server: Vec<String>,

    /// The kubeconfig to use (default: the files of KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true, help_heading = "Global options")]
    kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use (default: its current-context).
    #[arg(long, global = true, help_heading = "Global options")]
    context: Option<String>,

    /// Bearer token for the API server (instead of the kubeconfig user's credentials).
    #[arg(long, global = true, help_heading = "Global options")]
    token: Option<String>,

    /// Act as this user (Kubernetes' impersonation; the server must allow you `impersonate`
    /// on it), as kubectl's --as.
    #[arg(long = "as", global = true, help_heading = "Global options")]
    as_user: Option<String>,

    /// With --as: act as a member of this group (repeatable).
    #[arg(
        long = "as-group",
        global = true,
        help_heading = "Global options",
        requires = "as_user"
    )]
    as_group: Vec<String>,

    /// With --as: act with this uid.
    #[arg(
        long = "as-uid",
        global = true,
        help_heading = "Global options",
        requires = "as_user"
    )]
    as_uid: Option<String>,

    /// The CA that signed the API server's certificate (PEM file; default: the kubeconfig
    /// cluster's).
    #[arg(long, global = true, help_heading = "Global options")]
    certificate_authority: Option<PathBuf>,

    /// Namespace of namespaced objects (default: the file's, else "default").
    #[arg(short = 'n', long, global = true, help_heading = "Global options")]
    namespace: Option<String>,

    /// Deadline of each request (e.g. 10s, 1m; default 30s), and of delete's wait. As in
    /// kubectl, how long `rollout status` waits (default: until done) and `scale` waits for
    /// the new size (default: not at all); how long `create` and `apply` wait for each
    /// object's initializers (default: until done).
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        value_parser = parse_duration
    )]
    timeout: Option<Duration>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Apply(cmd::apply::Args),
    Create(cmd::create::Args),
    Replace(cmd::replace::Args),
    Get(cmd::get::Args),
    Diff(cmd::diff::Args),
    Patch(cmd::patch::Args),
    /// Change fields of objects: `set image`.
    #[command(subcommand)]
    Set(Set),
    Edit(cmd::edit::Args),
    Delete(cmd::delete::Args),
    /// Manage the rollout of a resource: status, history, undo, restart, pause, resume.
    #[command(
        subcommand,
        after_help = "Examples:\n  # Rollback to the previous deployment\n  keelctl rollout undo deployment/abc\n\n  # Check the rollout status of a deployment\n  keelctl rollout status deployment/abc\n\n  # Restart a deployment\n  keelctl rollout restart deployment/abc"
    )]
    Rollout(cmd::rollout::Command),
    Scale(cmd::scale::Args),
    ApiResources(cmd::api_resources::Args),
}

#[derive(Debug, Subcommand)]
enum Set {
    Image(cmd::set_image::Args),
}

/// `30s`, `1m`, `500ms`, or bare seconds (`30`).
fn parse_duration(s: &str) -> Result<Duration, String> {
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(s).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with status 0; usage errors are errors like any
            // other: status 1, as kubectl.
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let is_diff = matches!(cli.command, Command::Diff(_));
    let servers = if cli.server.is_empty() {
        "the kubeconfig's server".to_string()
    } else {
        cli.server.join(",")
    };
    match run(cli).await {
        Ok(code) => ExitCode::from(code),
        Err(e) if e.is_broken_pipe() => ExitCode::from(1),
        Err(e) => {
            let text = match &e {
                // The transport's message does not say where it tried.
                Error::Unreachable(why) => {
                    format!("Unable to connect to the server: {servers}: {why}")
                }
                e => e.to_string(),
            };
            let _ = writeln!(std::io::stderr(), "{text}");
            let code = if is_diff {
                cmd::diff::FAILED
            } else {
                e.exit_code()
            };
            ExitCode::from(code)
        }
    }
}

/// Where to connect and as whom: the flags, over the kubeconfig context, over the defaults.
/// Also the context's namespace.
fn connection(cli: &Cli) -> Result<(ClientConfig, Option<String>), Error> {
    let files = kubeconfig::files(cli.kubeconfig.as_deref())?;
    let resolved = kubeconfig::resolve(&files, cli.context.as_deref())?;
    let servers = if cli.server.is_empty() {
        vec![
            resolved
                .server
                .clone()
                .unwrap_or_else(|| "http://127.0.0.1:6443".to_string()),
        ]
    } else {
        cli.server.clone()
    };
    let mut config = ClientConfig::new(servers);
    config.tls = resolved.tls();
    if let Some(ca) = &cli.certificate_authority {
        let pem = std::fs::read(ca).map_err(|error| Error::Read {
            path: ca.display().to_string(),
            error,
        })?;
        config.tls.get_or_insert_with(TlsConfig::default).ca_pem = pem;
    }
    config.token = cli.token.clone().or(resolved.token);
    config.impersonate = cli.as_user.as_ref().map(|user| keel_client::Impersonate {
        user: user.clone(),
        groups: cli.as_group.clone(),
        uid: cli.as_uid.clone().unwrap_or_default(),
    });
    Ok((config, resolved.namespace))
}

async fn run(cli: Cli) -> Result<u8, Error> {
    let (config, context_namespace) = connection(&cli)?;
    let ctx = Ctx::connect(
        config,
        cli.namespace.clone(),
        context_namespace,
        cli.timeout,
    )
    .await?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match &cli.command {
        Command::Apply(a) => cmd::apply::run(&ctx, a, &mut out).await?,
        Command::Create(a) => cmd::create::run(&ctx, a, &mut out).await?,
        Command::Replace(a) => cmd::replace::run(&ctx, a, &mut out).await?,
        Command::Get(a) => cmd::get::run(&ctx, a, &mut out).await?,
        Command::Diff(a) => {
            if cmd::diff::run(&ctx, a, &mut out).await? {
                return Ok(cmd::diff::DIFFERENCES);
            }
        }
        Command::Patch(a) => cmd::patch::run(&ctx, a, &mut out).await?,
        Command::Set(Set::Image(a)) => cmd::set_image::run(&ctx, a, &mut out).await?,
        Command::Edit(a) => cmd::edit::run(&ctx, a, &mut out).await?,
        Command::Delete(a) => cmd::delete::run(&ctx, a, &mut out).await?,
        Command::Rollout(c) => cmd::rollout::run(&ctx, c, &mut out).await?,
        Command::Scale(a) => cmd::scale::run(&ctx, a, &mut out).await?,
        Command::ApiResources(a) => cmd::api_resources::run(&ctx, a, &mut out).await?,
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Command {
        let cli = Cli::try_parse_from(std::iter::once("keelctl").chain(args.iter().copied()));
        cli.unwrap().command
    }

    #[test]
    fn create_and_apply_wait_for_initializers_unless_told_not_to() {
        let create_waits = |args: &[&str]| match parse(args) {
            Command::Create(a) => a.wait,
            other => panic!("{other:?}"),
        };
        assert!(create_waits(&["create", "-f", "x.yaml"]));
        assert!(create_waits(&["create", "-f", "x.yaml", "--wait"]));
        assert!(!create_waits(&["create", "-f", "x.yaml", "--wait=false"]));
        let apply_waits = |args: &[&str]| match parse(args) {
            Command::Apply(a) => a.wait,
            other => panic!("{other:?}"),
        };
        assert!(apply_waits(&["apply", "-f", "x.yaml"]));
        assert!(!apply_waits(&["apply", "-f", "x.yaml", "--wait=false"]));
        assert!(Cli::try_parse_from(["keelctl", "create", "-f", "x", "--wait=maybe"]).is_err());
    }

    #[test]
    fn get_includes_uninitialized_objects_only_when_asked() {
        let includes = |args: &[&str]| match parse(args) {
            Command::Get(a) => a.include_uninitialized,
            other => panic!("{other:?}"),
        };
        assert!(!includes(&["get", "pods"]));
        assert!(includes(&["get", "pods", "--include-uninitialized"]));
        assert!(includes(&[
            "get",
            "pods",
            "-w",
            "--include-uninitialized=true"
        ]));
        assert!(!includes(&["get", "pods", "--include-uninitialized=false"]));
    }
}
