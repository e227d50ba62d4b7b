//! Authentication, as Kubernetes does it: an X.509 client certificate signed by the client CA
//! (CN = user, each O = a group), or a bearer token from a token file (Kubernetes' CSV:
//! `token,user,uid,"group1,group2"`). Off when neither is configured (a plain-text development
//! server); on, a request with neither is `Unauthorized`. Authorization comes after this.

use std::collections::HashMap;
use std::path::Path;

use keel_api::ApiError;

/// Who sent a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
    /// `""` when unknown (client certificates carry none).
    pub uid: String,
}

/// The group every authenticated user is in, as in Kubernetes.
pub const AUTHENTICATED: &str = "system:authenticated";

impl User {
    fn new(name: &str, uid: &str, mut groups: Vec<String>) -> User {
        groups.push(AUTHENTICATED.into());
        User {
            name: name.into(),
            groups,
            uid: uid.into(),
        }
    }
}

/// The configured ways to prove who one is.
#[derive(Debug, Default)]
pub struct Authenticator {
    /// Bearer token → user.
    tokens: HashMap<String, User>,
    /// Client certificates are verified by the TLS layer against the client CA; here they are
    /// only read.
    certificates: bool,
}

impl Authenticator {
    /// From `--token-auth-file` (when given) and whether a client CA is configured.
    pub fn new(token_file: Option<&Path>, certificates: bool) -> Result<Authenticator, String> {
        let tokens = match token_file {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
                parse_tokens(&text).map_err(|e| format!("{}: {e}", p.display()))?
            }
            None => HashMap::new(),
        };
        Ok(Authenticator {
            tokens,
            certificates,
        })
    }

    /// Whether requests must prove who sent them.
    pub fn enabled(&self) -> bool {
        self.certificates || !self.tokens.is_empty()
    }

    /// The user of a request with this `authorization` header value and this verified client
    /// certificate (DER). A token, when sent, must be valid even if a certificate is there too.
    pub fn authenticate(
        &self,
        authorization: Option<&str>,
        certificate: Option<&[u8]>,
    ) -> Result<User, ApiError> {
        if let Some(value) = authorization {
            let token = value
                .strip_prefix("Bearer ")
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .ok_or_else(|| {
                    unauthorized("the Authorization header is not \"Bearer <token>\"")
                })?;
            return self
                .tokens
                .get(token)
                .cloned()
                .ok_or_else(|| unauthorized("invalid bearer token"));
        }
        if self.certificates
            && let Some(der) = certificate
        {
            return user_of_certificate(der);
        }
        Err(unauthorized(
            "no credentials: send a client certificate or a bearer token",
        ))
    }
}

fn unauthorized(why: &str) -> ApiError {
    ApiError::new(
        keel_api::Reason::Unauthorized,
        Default::default(),
        format!("Unauthorized: {why}"),
    )
}

/// CN is the user, each O a group.
fn user_of_certificate(der: &[u8]) -> Result<User, ApiError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|_| unauthorized("the client certificate cannot be read"))?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .filter(|cn| !cn.is_empty())
        .ok_or_else(|| unauthorized("the client certificate has no common name (CN)"))?;
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .map(str::to_string)
        .collect();
    Ok(User::new(name, "", groups))
}

/// Kubernetes' static token file: `token,user,uid[,"group1,group2"]` per line; blank lines and
/// lines starting with `#` are skipped.
fn parse_tokens(text: &str) -> Result<HashMap<String, User>, String> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .comment(Some(b'#'))
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let mut tokens = HashMap::new();
    for (i, record) in reader.records().enumerate() {
        let record = record.map_err(|e| format!("record {}: {e}", i + 1))?;
        let line = record.position().map(|p| p.line()).unwrap_or(i as u64 + 1);
        let field = |k: usize| record.get(k).unwrap_or_default();
        if record.len() < 3 || field(0).is_empty() || field(1).is_empty() {
            return Err(format!(
                "line {line}: expected token,user,uid[,\"group1,group2\"]"
            ));
        }
        let groups = field(3)
            .split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(str::to_string)
            .collect();
        if tokens
            .insert(field(0).to_string(), User::new(field(1), field(2), groups))
            .is_some()
        {
            return Err(format!("line {line}: a token appears twice"));
        }
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_file_is_kubernetes_csv() {
        let t = parse_tokens("# tokens\nabc,alice,1,\"dev, ops\"\n\n  def , bob , 2\n")
            .unwrap_or_default();
        let alice = &t["abc"];
        assert_eq!(alice.name, "alice");
        assert_eq!(alice.groups, ["dev", "ops", "system:authenticated"]);
        assert_eq!(t["def"].name, "bob");
        assert!(parse_tokens("abc,alice").is_err());
        assert!(parse_tokens("abc,alice,1\nabc,bob,2").is_err());
        assert!(parse_tokens(",alice,1").is_err());
    }

    #[test]
    fn bearer_tokens_must_be_known_and_well_formed() {
        let a = Authenticator {
            tokens: parse_tokens("abc,alice,1").unwrap_or_default(),
            certificates: false,
        };
        assert_eq!(
            a.authenticate(Some("Bearer abc"), None).map(|u| u.name),
            Ok("alice".into())
        );
        for bad in ["Bearer nope", "Basic abc", "Bearer ", "abc"] {
            let e = a.authenticate(Some(bad), None).unwrap_err();
            assert_eq!(e.reason, keel_api::Reason::Unauthorized, "{bad}");
        }
        let e = a.authenticate(None, None).unwrap_err();
        assert!(e.message.contains("no credentials"), "{}", e.message);
    }
}
