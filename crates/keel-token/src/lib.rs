//! Service account tokens, as Kubernetes makes them: JSON Web Tokens signed with the key the
//! API servers share (`--service-account-signing-key-file`), RS256 for an RSA key and ES256 for
//! a P-256 one, both PKCS#8 PEM (an RSA key in PKCS#1 too). No I/O: the API servers issue and
//! check tokens with it, the controller-manager fills `kubernetes.io/service-account-token`
//! Secrets with it.
//!
//! - **Bound tokens** (TokenRequest, `kubectl create token`): `iss`, `aud`, `exp`, `iat`,
//!   `nbf`, `jti`, `sub` and the private `kubernetes.io` claim naming the namespace, the
//!   ServiceAccount and, when bound, the Pod or Secret (each with its uid).
//! - **Legacy tokens** (Secrets): Kubernetes' `kubernetes/serviceaccount` issuer and its flat
//!   claims; they do not expire.
//!
//! [`check`] reads what a verified token claims; whether the objects it names still exist is
//! the caller's question.

#![forbid(unsafe_code)]

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair, RsaKeyPair, UnparsedPublicKey};
use serde_json::{Value, json};

/// The issuer of tokens kept in Secrets.
pub const LEGACY_ISSUER: &str = "kubernetes/serviceaccount";
/// Kubernetes' default `--service-account-issuer`.
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

enum Key {
    Rsa(RsaKeyPair),
    Ec(EcdsaKeyPair),
}

/// The key tokens are signed and verified with.
pub struct SigningKey {
    key: Key,
    /// What verifies: an RSAPublicKey (DER) or an uncompressed P-256 point.
    public: Vec<u8>,
    kid: String,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({} {})", self.alg(), self.kid)
    }
}

/// The DER of the first PEM block labelled `PRIVATE KEY` or `RSA PRIVATE KEY`, with its label.
fn pem_der(pem: &str) -> Result<(String, Vec<u8>), String> {
    let mut label = None;
    let mut body = String::new();
    for line in pem.lines().map(str::trim) {
        if let Some(l) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        {
            if label.is_none() && l.ends_with("PRIVATE KEY") {
                label = Some(l.to_string());
            }
            continue;
        }
        if line.starts_with("-----END ") {
            if label.is_some() {
                break;
            }
            continue;
        }
        if label.is_some() {
            body.push_str(line);
        }
    }
    let label = label.ok_or("no PEM block of a private key (\"-----BEGIN PRIVATE KEY-----\")")?;
    let der = STANDARD
        .decode(body)
        .map_err(|e| format!("the {label} PEM block is not base64: {e}"))?;
    Ok((label, der))
}

impl SigningKey {
    /// A key from PEM: PKCS#8 RSA or P-256, or PKCS#1 RSA.
    pub fn from_pem(pem: &str) -> Result<SigningKey, String> {
        let (label, der) = pem_der(pem)?;
        let rng = SystemRandom::new();
        let key = match label.as_str() {
            "RSA PRIVATE KEY" => {
                Key::Rsa(RsaKeyPair::from_der(&der).map_err(|e| format!("not an RSA key: {e}"))?)
            }
            "PRIVATE KEY" => match RsaKeyPair::from_pkcs8(&der) {
                Ok(k) => Key::Rsa(k),
                Err(_) => Key::Ec(
                    EcdsaKeyPair::from_pkcs8(
                        &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                        &der,
                        &rng,
                    )
                    .map_err(|e| format!("neither an RSA nor a P-256 key: {e}"))?,
                ),
            },
            other => {
                return Err(format!(
                    "a {other} is not supported: give a PKCS#8 (\"PRIVATE KEY\") RSA or P-256 key"
                ));
            }
        };
        let public = match &key {
            Key::Rsa(k) => k.public().as_ref().to_vec(),
            Key::Ec(k) => k.public_key().as_ref().to_vec(),
        };
        // Kubernetes' key id is a hash of the public key; this one hashes the bytes that
        // verify (they name the key as uniquely).
        let kid = URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, &public));
        Ok(SigningKey { key, public, kid })
    }

    pub fn alg(&self) -> &'static str {
        match self.key {
            Key::Rsa(_) => "RS256",
            Key::Ec(_) => "ES256",
        }
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// A signed token carrying `claims`.
    pub fn sign(&self, claims: &Value) -> Result<String, String> {
        let header = json!({"alg": self.alg(), "kid": self.kid});
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let rng = SystemRandom::new();
        let sig = match &self.key {
            Key::Rsa(k) => {
                let mut sig = vec![0; k.public().modulus_len()];
                k.sign(
                    &signature::RSA_PKCS1_SHA256,
                    &rng,
                    input.as_bytes(),
                    &mut sig,
                )
                .map_err(|_| "signing failed")?;
                sig
            }
            Key::Ec(k) => k
                .sign(&rng, input.as_bytes())
                .map_err(|_| "signing failed")?
                .as_ref()
                .to_vec(),
        };
        Ok(format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig)))
    }

    /// The claims of `token` if this key signed it; an error saying why not otherwise.
    pub fn verify(&self, token: &str) -> Result<Value, String> {
        let mut parts = token.split('.');
        let (Some(h), Some(c), Some(s), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err("not a JSON web token".into());
        };
        let decode = |p: &str| {
            URL_SAFE_NO_PAD
                .decode(p)
                .map_err(|_| "not a JSON web token")
        };
        let header: Value = serde_json::from_slice(&decode(h)?).map_err(|_| "malformed header")?;
        if header["alg"].as_str() != Some(self.alg()) {
            return Err(format!("signed with {}, not {}", header["alg"], self.alg()));
        }
        let sig = decode(s)?;
        let input = &token[..h.len() + 1 + c.len()];
        let alg: &dyn signature::VerificationAlgorithm = match self.key {
            Key::Rsa(_) => &signature::RSA_PKCS1_2048_8192_SHA256,
            Key::Ec(_) => &signature::ECDSA_P256_SHA256_FIXED,
        };
        UnparsedPublicKey::new(alg, &self.public)
            .verify(input.as_bytes(), &sig)
            .map_err(|_| "invalid signature")?;
        serde_json::from_slice(&decode(c)?).map_err(|_| "malformed claims".into())
    }

    /// The JSON Web Key Set of `/openid/v1/jwks`.
    pub fn jwks(&self) -> Value {
        let b64 = |b: &[u8]| URL_SAFE_NO_PAD.encode(b);
        let key = match &self.key {
            Key::Rsa(k) => {
                let c: ring::rsa::PublicKeyComponents<Vec<u8>> = k.public().into();
                json!({"use": "sig", "kty": "RSA", "kid": self.kid, "alg": "RS256",
                       "n": b64(&c.n), "e": b64(&c.e)})
            }
            Key::Ec(_) => {
                let (x, y) = self
                    .public
                    .get(1..)
                    .unwrap_or_default()
                    .split_at(32.min(self.public.len().saturating_sub(1)));
                json!({"use": "sig", "kty": "EC", "crv": "P-256", "kid": self.kid,
                       "alg": "ES256", "x": b64(x), "y": b64(y)})
            }
        };
        json!({"keys": [key]})
    }
}

/// What a bound token is bound to: a Pod or a Secret, by name and uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    pub kind: String,
    pub name: String,
    pub uid: String,
}

/// The kinds a token may be bound to, with their core resources.
pub const BOUND_KINDS: [(&str, &str); 2] = [("Pod", "pods"), ("Secret", "secrets")];

impl Bound {
    /// The core resource of the bound object's kind.
    pub fn resource(&self) -> &'static str {
        BOUND_KINDS
            .iter()
            .find(|(k, _)| *k == self.kind)
            .map_or("secrets", |(_, r)| r)
    }
}

/// Who a token says its bearer is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub namespace: String,
    pub service_account: String,
    pub service_account_uid: String,
    /// The object a bound token lives and dies with.
    pub bound: Option<Bound>,
    /// The Secret a legacy token was issued for (its `data.token` must still be this token).
    pub secret: Option<String>,
}

impl Claims {
    /// `system:serviceaccount:NS:NAME`.
    pub fn username(&self) -> String {
        format!(
            "system:serviceaccount:{}:{}",
            self.namespace, self.service_account
        )
    }

    /// `system:serviceaccounts` and `system:serviceaccounts:NS`.
    pub fn groups(&self) -> Vec<String> {
        vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{}", self.namespace),
        ]
    }
}

/// A ServiceAccount a token is issued for.
#[derive(Debug, Clone, Copy)]
pub struct Account<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

/// The claims of a token of `account` for `audiences`, valid from `now` for `seconds`, bound
/// to `bound` if given (Kubernetes' `claims`).
pub fn bound_claims(
    issuer: &str,
    audiences: &[String],
    account: Account<'_>,
    bound: Option<&Bound>,
    now: u64,
    seconds: u64,
) -> Value {
    let Account {
        namespace,
        name,
        uid,
    } = account;
    let mut private = json!({
        "namespace": namespace,
        "serviceaccount": {"name": name, "uid": uid},
    });
    if let Some(b) = bound {
        let field = if b.kind == "Pod" { "pod" } else { "secret" };
        private[field] = json!({"name": b.name, "uid": b.uid});
    }
    json!({
        "aud": audiences,
        "exp": now + seconds,
        "iat": now,
        "nbf": now,
        "iss": issuer,
        "jti": uuid::Uuid::new_v4().to_string(),
        "sub": format!("system:serviceaccount:{namespace}:{name}"),
        "kubernetes.io": private,
    })
}

/// The claims of a legacy token kept in Secret `secret` (Kubernetes' `LegacyClaims`).
pub fn legacy_claims(namespace: &str, name: &str, uid: &str, secret: &str) -> Value {
    json!({
        "iss": LEGACY_ISSUER,
        "kubernetes.io/serviceaccount/namespace": namespace,
        "kubernetes.io/serviceaccount/secret.name": secret,
        "kubernetes.io/serviceaccount/service-account.name": name,
        "kubernetes.io/serviceaccount/service-account.uid": uid,
        "sub": format!("system:serviceaccount:{namespace}:{name}"),
    })
}

/// What verified `claims` say, if they are this issuer's for one of `audiences` and valid at
/// `now` (seconds since the epoch); or a legacy token's. An error says why not.
pub fn check(
    claims: &Value,
    issuer: &str,
    audiences: &[String],
    now: u64,
) -> Result<Claims, String> {
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    if claims["iss"] == LEGACY_ISSUER {
        let c = |f: &str| text(&claims[format!("kubernetes.io/serviceaccount/{f}")]);
        let out = Claims {
            namespace: c("namespace"),
            service_account: c("service-account.name"),
            service_account_uid: c("service-account.uid"),
            bound: None,
            secret: Some(c("secret.name")).filter(|s| !s.is_empty()),
        };
        if out.namespace.is_empty() || out.service_account.is_empty() || out.secret.is_none() {
            return Err("a legacy token without its namespace, account or secret".into());
        }
        return Ok(out);
    }
    if claims["iss"] != issuer {
        return Err(format!("issued by {}, not {issuer}", claims["iss"]));
    }
    let aud: Vec<&str> = match &claims["aud"] {
        Value::String(a) => vec![a.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !aud.iter().any(|a| audiences.iter().any(|b| b == a)) {
        return Err(format!("for audiences {aud:?}, none of {audiences:?}"));
    }
    let exp = claims["exp"].as_u64().ok_or("no expiry")?;
    if exp <= now {
        return Err("expired".into());
    }
    if claims["nbf"].as_u64().is_some_and(|nbf| nbf > now + 60) {
        return Err("not valid yet".into());
    }
    let k = &claims["kubernetes.io"];
    let bound = ["pod", "secret"].iter().find_map(|f| {
        k[*f].is_object().then(|| Bound {
            kind: if *f == "pod" { "Pod" } else { "Secret" }.into(),
            name: text(&k[*f]["name"]),
            uid: text(&k[*f]["uid"]),
        })
    });
    let out = Claims {
        namespace: text(&k["namespace"]),
        service_account: text(&k["serviceaccount"]["name"]),
        service_account_uid: text(&k["serviceaccount"]["uid"]),
        bound,
        secret: None,
    };
    if out.namespace.is_empty() || out.service_account.is_empty() {
        return Err("no service account in the token".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 2048-bit RSA key made for these tests with `openssl genpkey` (PKCS#8); used nowhere
    /// else.
    const RSA_KEY: &str = include_str!("test-rsa.pem");

    fn ec_key() -> SigningKey {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .unwrap();
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            STANDARD.encode(doc.as_ref())
        );
        SigningKey::from_pem(&pem).unwrap()
    }

    fn acct<'a>(namespace: &'a str, name: &'a str, uid: &'a str) -> Account<'a> {
        Account {
            namespace,
            name,
            uid,
        }
    }

    fn auds() -> Vec<String> {
        vec![DEFAULT_ISSUER.to_string()]
    }

    #[test]
    fn a_signed_token_verifies_and_says_who_and_what_it_is_bound_to() {
        let key = ec_key();
        assert_eq!(key.alg(), "ES256");
        let pod = Bound {
            kind: "Pod".into(),
            name: "web-0".into(),
            uid: "p1".into(),
        };
        let claims = bound_claims(
            DEFAULT_ISSUER,
            &auds(),
            acct("ns", "builder", "u1"),
            Some(&pod),
            1000,
            3600,
        );
        let token = key.sign(&claims).unwrap();
        let read = key.verify(&token).unwrap();
        assert_eq!(read, claims);
        let c = check(&read, DEFAULT_ISSUER, &auds(), 1001).unwrap();
        assert_eq!(c.username(), "system:serviceaccount:ns:builder");
        assert_eq!(
            c.groups(),
            ["system:serviceaccounts", "system:serviceaccounts:ns"]
        );
        assert_eq!(c.service_account_uid, "u1");
        assert_eq!(c.bound, Some(pod));
    }

    #[test]
    fn an_rsa_key_signs_rs256_and_publishes_its_modulus() {
        let key = SigningKey::from_pem(RSA_KEY).unwrap();
        assert_eq!(key.alg(), "RS256");
        let claims = bound_claims(
            DEFAULT_ISSUER,
            &auds(),
            acct("ns", "sa", "u1"),
            None,
            1000,
            600,
        );
        let token = key.sign(&claims).unwrap();
        assert_eq!(key.verify(&token).unwrap(), claims);
        assert_eq!(
            ec_key().verify(&token).unwrap_err(),
            "signed with \"RS256\", not ES256"
        );
        let k = &key.jwks()["keys"][0];
        assert_eq!(k["kty"], "RSA");
        assert_eq!(
            URL_SAFE_NO_PAD
                .decode(k["n"].as_str().unwrap())
                .unwrap()
                .len(),
            256
        );
        assert_eq!(k["e"], "AQAB");
    }

    #[test]
    fn tokens_are_refused_for_every_reason_kubernetes_refuses_them() {
        let key = ec_key();
        let claims = bound_claims(
            DEFAULT_ISSUER,
            &auds(),
            acct("ns", "sa", "u1"),
            None,
            1000,
            600,
        );
        let token = key.sign(&claims).unwrap();
        // Another key's signature, a changed payload, garbage.
        assert_eq!(ec_key().verify(&token).unwrap_err(), "invalid signature");
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = URL_SAFE_NO_PAD.encode(
            bound_claims(
                DEFAULT_ISSUER,
                &auds(),
                acct("kube-system", "admin", "u9"),
                None,
                1000,
                600,
            )
            .to_string(),
        );
        parts[1] = &forged;
        assert_eq!(
            key.verify(&parts.join(".")).unwrap_err(),
            "invalid signature"
        );
        assert!(key.verify("abc").is_err());
        assert!(key.verify("a.b.c.d").is_err());
        // Expired, another issuer, another audience.
        assert_eq!(
            check(&claims, DEFAULT_ISSUER, &auds(), 1600).unwrap_err(),
            "expired"
        );
        assert!(check(&claims, "https://other", &auds(), 1001).is_err());
        assert!(check(&claims, DEFAULT_ISSUER, &["vault".to_string()], 1001).is_err());
    }

    #[test]
    fn legacy_tokens_name_their_secret() {
        let key = ec_key();
        let token = key
            .sign(&legacy_claims("ns", "ci", "u1", "ci-token"))
            .unwrap();
        let c = check(
            &key.verify(&token).unwrap(),
            DEFAULT_ISSUER,
            &auds(),
            u64::MAX,
        )
        .unwrap();
        assert_eq!(c.secret.as_deref(), Some("ci-token"));
        assert_eq!(c.username(), "system:serviceaccount:ns:ci");
    }

    #[test]
    fn the_key_set_publishes_the_public_key() {
        let key = ec_key();
        let set = key.jwks();
        let k = &set["keys"][0];
        assert_eq!(
            (k["kty"].as_str(), k["crv"].as_str()),
            (Some("EC"), Some("P-256"))
        );
        assert_eq!(
            URL_SAFE_NO_PAD
                .decode(k["x"].as_str().unwrap())
                .unwrap()
                .len(),
            32
        );
        assert_eq!(
            URL_SAFE_NO_PAD
                .decode(k["y"].as_str().unwrap())
                .unwrap()
                .len(),
            32
        );
        assert_eq!(k["kid"], key.kid());
    }

    #[test]
    fn keys_that_are_not_pkcs8_rsa_or_p256_are_refused_with_a_reason() {
        assert!(
            SigningKey::from_pem("")
                .unwrap_err()
                .contains("no PEM block")
        );
        let not_a_key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        assert!(
            SigningKey::from_pem(not_a_key)
                .unwrap_err()
                .contains("neither")
        );
        let sec1 = "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n";
        assert!(SigningKey::from_pem(sec1).unwrap_err().contains("PKCS#8"));
    }
}
