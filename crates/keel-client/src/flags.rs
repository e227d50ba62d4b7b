//! The command-line flags of every keel program that talks to the API servers (the
//! controller-manager, the initializer, the load tester): where they are and how to prove who
//! we are, named as kubectl names them.

use std::path::PathBuf;

use crate::ApiError;
use crate::client::{ClientConfig, TlsConfig};

/// `--server` and the TLS and credential flags, each also an environment variable.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectFlags {
    /// API servers, comma-separated (requests fail over between them); `https://` ones need
    /// `--certificate-authority`.
    #[arg(
        long,
        env = "KEEL_SERVER",
        default_value = "http://127.0.0.1:6443",
        value_delimiter = ',',
        global = true
    )]
    pub server: Vec<String>,
    /// The CA that signed the API servers' certificates (PEM).
    #[arg(long, env = "KEEL_CERTIFICATE_AUTHORITY", global = true)]
    pub certificate_authority: Option<PathBuf>,
    /// A client certificate to authenticate with (PEM; CN is the user, O the groups).
    #[arg(
        long,
        env = "KEEL_CLIENT_CERTIFICATE",
        requires_all = ["client_key", "certificate_authority"],
        global = true
    )]
    pub client_certificate: Option<PathBuf>,
    /// The private key of `--client-certificate` (PEM).
    #[arg(
        long,
        env = "KEEL_CLIENT_KEY",
        requires = "client_certificate",
        global = true
    )]
    pub client_key: Option<PathBuf>,
    /// A bearer token to authenticate with.
    #[arg(long, env = "KEEL_TOKEN", global = true)]
    pub token: Option<String>,
}

impl ConnectFlags {
    /// Whether the servers are reached over TLS (any `https://` one).
    pub fn tls(&self) -> bool {
        self.server.iter().any(|s| s.starts_with("https://"))
    }

    /// The client configuration these flags describe (the certificate files read).
    pub fn config(&self) -> Result<ClientConfig, ApiError> {
        let mut config = ClientConfig::new(&self.server);
        if let Some(ca) = &self.certificate_authority {
            let identity = match (&self.client_certificate, &self.client_key) {
                (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
                _ => None,
            };
            config.tls = Some(TlsConfig::from_files(ca, identity)?);
        }
        config.token = self.token.clone();
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        connect: ConnectFlags,
    }

    #[test]
    fn a_client_certificate_needs_its_key_and_a_ca() {
        assert!(Cli::try_parse_from(["x", "--client-certificate", "a.crt"]).is_err());
        let cli = Cli::try_parse_from(["x", "--server", "https://a:1,https://b:2", "--token", "t"])
            .unwrap();
        let config = cli.connect.config().unwrap();
        assert_eq!(config.endpoints, ["https://a:1", "https://b:2"]);
        assert_eq!(config.token.as_deref(), Some("t"));
        assert!(config.tls.is_none());
    }

    #[test]
    fn an_unreadable_ca_is_a_clear_error() {
        let cli =
            Cli::try_parse_from(["x", "--certificate-authority", "/nonexistent/ca.crt"]).unwrap();
        let e = cli.connect.config().unwrap_err();
        assert!(
            e.message.contains("cannot read /nonexistent/ca.crt"),
            "{}",
            e.message
        );
    }
}
