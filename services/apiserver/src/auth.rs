//! Authentication, as Kubernetes does it: an X.509 client certificate signed by the client CA
//! (CN = user, each O = a group), a bearer token from a token file (Kubernetes' CSV:
//! `token,user,uid,"group1,group2"`), or a ServiceAccount's token signed by
//! `--service-account-signing-key-file` (`system:serviceaccount:NS:NAME`, valid while its
//! ServiceAccount, and the Pod or Secret it is bound to, exist with the uids it names). Off when
//! neither a token file nor a client CA is configured (a plain-text development server); on, a
//! request with no credentials is `Unauthorized`. Authorization comes after this.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use keel_api::ApiError;
use keel_token::SigningKey;

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

/// An object as this replica's cache holds it: `None` while the cache loads, `Some(None)` when
/// there is none. Called with a core resource (`serviceaccounts`, `pods`, `secrets`), a
/// namespace and a name.
pub type ObjectLookup =
    Arc<dyn Fn(&str, &str, &str) -> Option<Option<serde_json::Value>> + Send + Sync>;

/// How ServiceAccount tokens are checked.
pub struct ServiceAccountTokens {
    pub key: Arc<SigningKey>,
    pub issuer: String,
    /// What a token must be meant for (`--api-audiences`; the issuer by default).
    pub audiences: Vec<String>,
    pub lookup: ObjectLookup,
}

impl std::fmt::Debug for ServiceAccountTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServiceAccountTokens({:?}, {})", self.key, self.issuer)
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
    service_accounts: Option<ServiceAccountTokens>,
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
            service_accounts: None,
        })
    }

    /// Also accepts ServiceAccount tokens checked so.
    pub fn with_service_accounts(mut self, sa: ServiceAccountTokens) -> Authenticator {
        self.service_accounts = Some(sa);
        self
    }

    /// The ServiceAccount of a token that is not in the token file, if it is one.
    fn service_account(&self, token: &str) -> Result<User, ApiError> {
        let Some(sa) = &self.service_accounts else {
            return Err(unauthorized("invalid bearer token"));
        };
        let refused = |why: String| {
            tracing::debug!("service account token refused: {why}");
            unauthorized("invalid bearer token")
        };
        let claims = sa.key.verify(token).map_err(refused)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let who = keel_token::check(&claims, &sa.issuer, &sa.audiences, now).map_err(refused)?;
        let find = |resource: &str, name: &str| match (sa.lookup)(resource, &who.namespace, name) {
            None => Err(unauthorized(
                "service account tokens cannot be checked yet: the API server is starting",
            )),
            Some(found) => Ok(found),
        };
        let account = find("serviceaccounts", &who.service_account)?
            .ok_or_else(|| refused(format!("{} is gone", who.username())))?;
        if !who.service_account_uid.is_empty()
            && account["metadata"]["uid"].as_str() != Some(&who.service_account_uid)
        {
            return Err(refused(format!("{} was recreated", who.username())));
        }
        if let Some(b) = &who.bound {
            let obj = find(b.resource(), &b.name)?
                .ok_or_else(|| refused(format!("its {} {} is gone", b.kind, b.name)))?;
            if obj["metadata"]["uid"].as_str() != Some(&b.uid) {
                return Err(refused(format!("its {} {} was recreated", b.kind, b.name)));
            }
        }
        if let Some(secret) = &who.secret {
            let obj = find("secrets", secret)?
                .ok_or_else(|| refused(format!("its Secret {secret} is gone")))?;
            let kept = obj["data"]["token"]
                .as_str()
                .and_then(|t| {
                    use base64::Engine;
                    base64::engine::general_purpose::STANDARD.decode(t).ok()
                })
                .is_some_and(|t| t == token.as_bytes());
            if !kept {
                return Err(refused(format!("its Secret {secret} no longer holds it")));
            }
        }
        let uid = account["metadata"]["uid"]
            .as_str()
            .unwrap_or("")
            .to_string();
        Ok(User::new(&who.username(), &uid, who.groups()))
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
            return match self.tokens.get(token) {
                Some(user) => Ok(user.clone()),
                None => self.service_account(token),
            };
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
            service_accounts: None,
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
