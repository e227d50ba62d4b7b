//! keel-certs: the CA and the certificates of a keel stack, written once into a directory.
//!
//! - `ca.crt`, `ca.key`: the CA every keel component and etcd trusts.
//! - `apiserver.crt`/`.key`: the API servers' serving certificate (`--server-name`s as SANs).
//! - `etcd.crt`/`.key`: etcd's, for clients and peers alike (`--etcd-name`s as SANs).
//! - `apiserver-etcd-client.crt`/`.key`: the API server's identity towards etcd.
//! - one client certificate per user (`--user`): CN is the user name, O the groups, as
//!   Kubernetes reads them.
//!
//! Idempotent: files that exist are kept (a stack's certificates survive `up.sh` runs); new
//! ones are signed by the CA already there.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

#[derive(Parser)]
#[command(name = "keel-certs", version, about)]
struct Cli {
    /// Directory the files are written to (created when missing).
    #[arg(long, default_value = "certs")]
    dir: PathBuf,
    /// DNS names and IP addresses of the API servers (SANs of apiserver.crt).
    #[arg(
        long = "server-name",
        value_delimiter = ',',
        default_value = "localhost,127.0.0.1,apiserver-0,apiserver-1"
    )]
    server_names: Vec<String>,
    /// DNS names and IP addresses of the sidecar injector's webhook server, `keel-initializer
    /// --webhook` (SANs of injector.crt).
    #[arg(
        long = "injector-name",
        value_delimiter = ',',
        default_value = "localhost,127.0.0.1,injector"
    )]
    injector_names: Vec<String>,
    /// DNS names and IP addresses of the etcd members (SANs of etcd.crt).
    #[arg(
        long = "etcd-name",
        value_delimiter = ',',
        default_value = "localhost,127.0.0.1,etcd-0,etcd-1,etcd-2"
    )]
    etcd_names: Vec<String>,
    /// A client certificate to make: `FILE=USER[,GROUP]`, written as FILE.crt and FILE.key
    /// (repeatable; replaces the defaults).
    #[arg(
        long = "user",
        default_values = [
            "admin=admin,system:masters",
            "controller-manager=system:keel-controller-manager",
            "initializer=system:keel-initializer",
            "loadtest=keel-loadtest",
        ]
    )]
    users: Vec<String>,
    /// Validity of new certificates, in days.
    #[arg(long, default_value_t = 825)]
    days: u32,
}

/// What a certificate is for.
enum Role {
    /// A TLS server, by these names.
    Server(Vec<String>),
    /// A server that is also a client of its peers (an etcd member).
    Peer(Vec<String>),
    /// A client identity: user name and groups.
    Client { user: String, groups: Vec<String> },
}

/// A client certificate request: `FILE=USER[,GROUP]` (user names may contain colons, as
/// `system:keel-initializer` does; groups come after the comma).
fn parse_user(spec: &str) -> Result<(String, String, Vec<String>), String> {
    let bad = || format!("--user {spec:?}: expected FILE=USER[,GROUP] with a plain file name");
    let (file, rest) = spec.split_once('=').ok_or_else(bad)?;
    if file.is_empty() || file.contains('/') || rest.is_empty() {
        return Err(bad());
    }
    let mut parts = rest.split(',');
    let user = parts.next().unwrap_or_default().to_string();
    let groups: Vec<String> = parts.map(str::to_string).collect();
    // rcgen keeps one value per attribute type: one O, so one group per certificate.
    if user.is_empty() || groups.len() > 1 || groups.iter().any(String::is_empty) {
        return Err(bad());
    }
    Ok((file.into(), user, groups))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(rows) => {
            let width = rows.iter().map(|(f, _)| f.len()).max().unwrap_or(0);
            for (file, what) in rows {
                println!("{file:<width$}  {what}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("keel-certs: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<Vec<(String, String)>, String> {
    std::fs::create_dir_all(&cli.dir)
        .map_err(|e| format!("cannot create {}: {e}", cli.dir.display()))?;
    let mut rows = Vec::new();
    let issuer = ca(cli, &mut rows)?;
    let mut wanted = vec![
        (
            "apiserver".to_string(),
            Role::Server(cli.server_names.clone()),
        ),
        ("etcd".to_string(), Role::Peer(cli.etcd_names.clone())),
        (
            "injector".to_string(),
            Role::Server(cli.injector_names.clone()),
        ),
        (
            "apiserver-etcd-client".to_string(),
            Role::Client {
                user: "keel-apiserver".into(),
                groups: Vec::new(),
            },
        ),
    ];
    for spec in &cli.users {
        let (file, user, groups) = parse_user(spec)?;
        wanted.push((file, Role::Client { user, groups }));
    }
    for (file, role) in wanted {
        let what = leaf(cli, &issuer, &file, &role)?;
        rows.push((format!("{file}.crt"), what));
    }
    rows.push(("service-account.key".into(), service_account_key(cli)?));
    Ok(rows)
}

/// The key ServiceAccount tokens are signed with (P-256, PKCS#8), unless it exists: the API
/// servers' `--service-account-signing-key-file` and the controller-manager's
/// `--service-account-private-key-file`.
fn service_account_key(cli: &Cli) -> Result<String, String> {
    let p = path(&cli.dir, "service-account.key");
    if p.exists() {
        return Ok("kept".into());
    }
    let key =
        KeyPair::generate().map_err(|e| format!("generating the service account key: {e}"))?;
    write(&p, &key.serialize_pem(), true)?;
    Ok("new service account signing key (P-256)".into())
}

fn path(dir: &Path, file: &str) -> PathBuf {
    dir.join(file)
}

fn read(p: &Path) -> Result<String, String> {
    std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
}

/// Writes `contents` to `p`, readable by its owner only when it is a key.
fn write(p: &Path, contents: &str, secret: bool) -> Result<(), String> {
    std::fs::write(p, contents).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("cannot restrict {}: {e}", p.display()))?;
    }
    #[cfg(not(unix))]
    let _ = secret;
    Ok(())
}

/// From an hour ago (clocks differ a little between containers) to `days` from now.
fn validity(params: &mut CertificateParams, days: u32) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(i64::from(days));
}

/// The CA: loaded when `ca.crt` and `ca.key` exist, else made.
fn ca(cli: &Cli, rows: &mut Vec<(String, String)>) -> Result<Issuer<'static, KeyPair>, String> {
    let (crt, key) = (path(&cli.dir, "ca.crt"), path(&cli.dir, "ca.key"));
    if crt.exists() && key.exists() {
        let key = KeyPair::from_pem(&read(&key)?)
            .map_err(|e| format!("{}: not a private key: {e}", key.display()))?;
        let issuer = Issuer::from_ca_cert_pem(&read(&crt)?, key)
            .map_err(|e| format!("{}: not a CA certificate: {e}", crt.display()))?;
        rows.push(("ca.crt".into(), "kept".into()));
        return Ok(issuer);
    }
    let key_pair = KeyPair::generate().map_err(|e| format!("generating the CA key: {e}"))?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "keel-ca");
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, cli.days.saturating_mul(2));
    let cert = params
        .self_signed(&key_pair)
        .map_err(|e| format!("signing the CA: {e}"))?;
    write(&key, &key_pair.serialize_pem(), true)?;
    write(&crt, &cert.pem(), false)?;
    rows.push(("ca.crt".into(), "new CA (keel-ca)".into()));
    Ok(Issuer::new(params, key_pair))
}

/// One leaf certificate, unless it exists.
fn leaf(
    cli: &Cli,
    issuer: &Issuer<'static, KeyPair>,
    file: &str,
    role: &Role,
) -> Result<String, String> {
    let crt = path(&cli.dir, &format!("{file}.crt"));
    let key = path(&cli.dir, &format!("{file}.key"));
    if crt.exists() && key.exists() {
        return Ok("kept".into());
    }
    let (names, usages, cn, groups, what) = match role {
        Role::Server(names) => (
            names.clone(),
            vec![ExtendedKeyUsagePurpose::ServerAuth],
            file.to_string(),
            Vec::new(),
            format!("server: {}", names.join(", ")),
        ),
        Role::Peer(names) => (
            names.clone(),
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            file.to_string(),
            Vec::new(),
            format!("server and peer: {}", names.join(", ")),
        ),
        Role::Client { user, groups } => (
            Vec::new(),
            vec![ExtendedKeyUsagePurpose::ClientAuth],
            user.clone(),
            groups.clone(),
            if groups.is_empty() {
                format!("client: user {user}")
            } else {
                format!("client: user {user}, groups {}", groups.join(", "))
            },
        ),
    };
    let mut params = CertificateParams::new(names).map_err(|e| format!("{file}: bad name: {e}"))?;
    params.is_ca = IsCa::ExplicitNoCa;
    params.distinguished_name.push(DnType::CommonName, cn);
    for g in groups {
        params.distinguished_name.push(DnType::OrganizationName, g);
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = usages;
    validity(&mut params, cli.days);
    let key_pair = KeyPair::generate().map_err(|e| format!("generating a key: {e}"))?;
    let cert = params
        .signed_by(&key_pair, issuer)
        .map_err(|e| format!("signing {file}: {e}"))?;
    write(&key, &key_pair.serialize_pem(), true)?;
    write(&crt, &cert.pem(), false)?;
    Ok(what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_take_colons_in_names_and_one_group() {
        assert_eq!(
            parse_user("admin=admin,system:masters"),
            Ok((
                "admin".into(),
                "admin".into(),
                vec!["system:masters".into()]
            ))
        );
        assert_eq!(
            parse_user("cm=system:keel-controller-manager"),
            Ok((
                "cm".into(),
                "system:keel-controller-manager".into(),
                Vec::new()
            ))
        );
        for bad in ["admin", "=u", "a/b=u", "a=", "a=u,g1,g2", "a=u,"] {
            assert!(parse_user(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_second_run_keeps_what_exists_and_signs_new_certificates_with_the_same_ca() {
        let dir = std::env::temp_dir().join(format!("keel-certs-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cli = |users: &[&str]| {
            let mut args = vec!["keel-certs", "--dir", dir.to_str().unwrap_or_default()];
            for u in users {
                args.extend(["--user", u]);
            }
            Cli::parse_from(args)
        };
        let first = run(&cli(&["a=alice"])).unwrap_or_default();
        assert_eq!(first.len(), 7, "{first:?}");
        let ca = std::fs::read(dir.join("ca.crt")).unwrap_or_default();
        let sa = std::fs::read(dir.join("service-account.key")).unwrap_or_default();
        assert!(String::from_utf8_lossy(&sa).starts_with("-----BEGIN PRIVATE KEY-----"));
        let second = run(&cli(&["a=alice", "b=bob,dev"])).unwrap_or_default();
        let kept = second.iter().filter(|(_, what)| what == "kept").count();
        assert_eq!(kept, 7, "{second:?}");
        assert!(
            second
                .iter()
                .any(|(f, what)| f == "b.crt" && what != "kept"),
            "{second:?}"
        );
        assert_eq!(std::fs::read(dir.join("ca.crt")).unwrap_or_default(), ca);
        assert_eq!(
            std::fs::read(dir.join("service-account.key")).unwrap_or_default(),
            sa
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
