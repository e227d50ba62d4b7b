//! kubeconfig, as kubectl reads it: `--kubeconfig`, else the files of `KUBECONFIG` (merged,
//! the first to name a cluster, user or context wins), else `~/.kube/config`. The context is
//! `--context`, else `current-context`; it names a cluster (`server`, `certificate-authority`
//! or `-data`) and a user (`token`, or `client-certificate`/`client-key` or their `-data`).
//! Relative paths are relative to the file that holds them, as in kubectl.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use base64::Engine;
use keel_client::TlsConfig;
use serde::Deserialize;

use crate::error::Error;

/// The server a context names and how to prove who one is there.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Resolved {
    pub server: Option<String>,
    pub ca_pem: Option<Vec<u8>>,
    pub token: Option<String>,
    /// Client certificate and key, PEM.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    pub namespace: Option<String>,
}

impl Resolved {
    /// The TLS settings for keel-client: with a CA, or with only a client identity (then
    /// the CA must come from `--certificate-authority`).
    pub fn tls(&self) -> Option<TlsConfig> {
        if self.ca_pem.is_none() && self.identity.is_none() {
            return None;
        }
        Some(TlsConfig {
            ca_pem: self.ca_pem.clone().unwrap_or_default(),
            identity: self.identity.clone(),
        })
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct File {
    #[serde(default)]
    clusters: Vec<Named<Cluster>>,
    #[serde(default)]
    users: Vec<NamedUser>,
    #[serde(default)]
    contexts: Vec<Named<Context>>,
    #[serde(default)]
    current_context: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "context")]
    value: T,
}

#[derive(Debug, Deserialize)]
struct NamedUser {
    name: String,
    #[serde(default)]
    user: User,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    server: Option<String>,
    certificate_authority: Option<String>,
    certificate_authority_data: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct User {
    token: Option<String>,
    token_file: Option<String>,
    client_certificate: Option<String>,
    client_certificate_data: Option<String>,
    client_key: Option<String>,
    client_key_data: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct Context {
    cluster: Option<String>,
    user: Option<String>,
    namespace: Option<String>,
}

/// The files to read: `--kubeconfig`, else `KUBECONFIG`'s, else `~/.kube/config` when it
/// exists. An explicitly named file must exist; missing `KUBECONFIG` entries are skipped, as
/// kubectl skips them.
pub fn files(flag: Option<&Path>) -> Result<Vec<PathBuf>, Error> {
    if let Some(p) = flag {
        if !p.exists() {
            return Err(kubeconfig_error(p, "the file does not exist"));
        }
        return Ok(vec![p.to_path_buf()]);
    }
    if let Some(list) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        return Ok(std::env::split_paths(&list)
            .filter(|p| p.exists())
            .collect());
    }
    let default = std::env::var_os("HOME").map(|h| Path::new(&h).join(".kube").join("config"));
    Ok(default.into_iter().filter(|p| p.exists()).collect())
}

fn kubeconfig_error(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::Kubeconfig(format!("{}: {why}", path.display()))
}

/// Reads `paths` (merged) and resolves `context` (else the current context). No files: an
/// empty result (keelctl's defaults apply).
pub fn resolve(paths: &[PathBuf], context: Option<&str>) -> Result<Resolved, Error> {
    // Each entry remembers the directory of its file, for relative paths.
    let mut clusters: HashMap<String, (Cluster, PathBuf)> = HashMap::new();
    let mut users: HashMap<String, (User, PathBuf)> = HashMap::new();
    let mut contexts: HashMap<String, Context> = HashMap::new();
    let mut current: Option<String> = None;
    for path in paths {
        let text = std::fs::read_to_string(path).map_err(|e| kubeconfig_error(path, e))?;
        let file: File = if text.trim().is_empty() {
            File::default()
        } else {
            serde_saphyr::from_str(&text).map_err(|e| kubeconfig_error(path, e))?
        };
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        for c in file.clusters {
            clusters.entry(c.name).or_insert((c.value, dir.clone()));
        }
        for u in file.users {
            users.entry(u.name).or_insert((u.user, dir.clone()));
        }
        for c in file.contexts {
            contexts.entry(c.name).or_insert(c.value);
        }
        if current.is_none() {
            current = file.current_context.filter(|c| !c.is_empty());
        }
    }
    let Some(path) = paths.first() else {
        return match context {
            Some(c) => Err(Error::Kubeconfig(format!(
                "context {c:?} does not exist: no kubeconfig file was found"
            ))),
            None => Ok(Resolved::default()),
        };
    };
    let Some(name) = context.map(str::to_string).or(current) else {
        // Files without a current context: nothing chosen, as kubectl.
        return Ok(Resolved::default());
    };
    let ctx = contexts
        .get(&name)
        .ok_or_else(|| kubeconfig_error(path, format!("context {name:?} does not exist")))?;
    let mut out = Resolved {
        namespace: ctx.namespace.clone().filter(|n| !n.is_empty()),
        ..Default::default()
    };
    if let Some(cluster) = &ctx.cluster {
        let (c, dir) = clusters.get(cluster).ok_or_else(|| {
            kubeconfig_error(
                path,
                format!("context {name:?}: cluster {cluster:?} does not exist"),
            )
        })?;
        let what = format!("cluster {cluster:?}");
        out.server = c.server.clone();
        out.ca_pem = data_or_file(
            &what,
            "certificate-authority",
            c.certificate_authority_data.as_deref(),
            c.certificate_authority.as_deref(),
            dir,
        )?;
    }
    if let Some(user) = &ctx.user {
        let (u, dir) = users.get(user).ok_or_else(|| {
            kubeconfig_error(
                path,
                format!("context {name:?}: user {user:?} does not exist"),
            )
        })?;
        let what = format!("user {user:?}");
        out.token = match (&u.token, &u.token_file) {
            (Some(t), _) => Some(t.trim().to_string()),
            (None, Some(f)) => {
                let p = dir.join(f);
                let t = std::fs::read_to_string(&p).map_err(|e| {
                    Error::Kubeconfig(format!("{what}: token-file {}: {e}", p.display()))
                })?;
                Some(t.trim().to_string())
            }
            (None, None) => None,
        };
        let cert = data_or_file(
            &what,
            "client-certificate",
            u.client_certificate_data.as_deref(),
            u.client_certificate.as_deref(),
            dir,
        )?;
        let key = data_or_file(
            &what,
            "client-key",
            u.client_key_data.as_deref(),
            u.client_key.as_deref(),
            dir,
        )?;
        out.identity = match (cert, key) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            (Some(_), None) => {
                return Err(Error::Kubeconfig(format!(
                    "{what}: client-certificate without client-key"
                )));
            }
            (None, Some(_)) => {
                return Err(Error::Kubeconfig(format!(
                    "{what}: client-key without client-certificate"
                )));
            }
        };
    }
    Ok(out)
}

/// The PEM bytes of `<field>-data` (base64) or of the file `<field>` names.
fn data_or_file(
    what: &str,
    field: &str,
    data: Option<&str>,
    file: Option<&str>,
    dir: &Path,
) -> Result<Option<Vec<u8>>, Error> {
    if let Some(d) = data {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(d.trim())
            .map_err(|e| Error::Kubeconfig(format!("{what}: {field}-data is not base64: {e}")))?;
        return Ok(Some(bytes));
    }
    match file {
        Some(f) => {
            let p = dir.join(f);
            std::fs::read(&p)
                .map(Some)
                .map_err(|e| Error::Kubeconfig(format!("{what}: {field} {}: {e}", p.display())))
        }
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    const CONFIG: &str = "\
apiVersion: v1
kind: Config
clusters:
- name: keel
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: pki/ca.crt
users:
- name: admin
  user:
    client-certificate: pki/admin.crt
    client-key-data: a2V5
- name: alice
  user:
    token: s3cret
contexts:
- name: keel-admin
  context: {cluster: keel, user: admin}
- name: keel-alice
  context: {cluster: keel, user: alice, namespace: team}
current-context: keel-admin
";

    #[test]
    fn a_context_gives_its_server_ca_and_credentials() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("pki")).unwrap();
        write(&dir.path().join("pki"), "ca.crt", "CA");
        write(&dir.path().join("pki"), "admin.crt", "CERT");
        let config = write(dir.path(), "config", CONFIG);
        let admin = resolve(std::slice::from_ref(&config), None).unwrap();
        assert_eq!(admin.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(admin.ca_pem.as_deref(), Some(&b"CA"[..]));
        assert_eq!(admin.identity, Some((b"CERT".to_vec(), b"key".to_vec())));
        assert_eq!(admin.token, None);
        let alice = resolve(&[config], Some("keel-alice")).unwrap();
        assert_eq!(alice.token.as_deref(), Some("s3cret"));
        assert_eq!(alice.namespace.as_deref(), Some("team"));
        assert_eq!(alice.identity, None);
    }

    #[test]
    fn mistakes_name_the_file_and_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let config = write(dir.path(), "config", CONFIG);
        let err =
            |paths: &[PathBuf], ctx: Option<&str>| resolve(paths, ctx).unwrap_err().to_string();
        let e = err(std::slice::from_ref(&config), Some("nope"));
        assert!(e.contains("config: context \"nope\" does not exist"), "{e}");
        // The CA file it names is missing.
        let e = err(std::slice::from_ref(&config), None);
        assert!(e.contains("cluster \"keel\": certificate-authority"), "{e}");
        let bad = write(dir.path(), "bad", "clusters: 3\n");
        let e = err(&[bad], None);
        assert!(e.contains("bad:"), "{e}");
        let data = write(
            dir.path(),
            "data",
            "users:\n- name: u\n  user:\n    client-certificate-data: '!!'\n    client-key-data: a2V5\ncontexts:\n- name: c\n  context: {user: u}\ncurrent-context: c\n",
        );
        let e = err(&[data], None);
        assert!(
            e.contains("user \"u\": client-certificate-data is not base64"),
            "{e}"
        );
        let e = files(Some(&dir.path().join("missing")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing: the file does not exist"), "{e}");
    }
}
