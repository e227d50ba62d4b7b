//! Impersonation, as Kubernetes has it: a request may act as another user by sending
//! `Impersonate-User` (and `Impersonate-Group`, repeated, and `Impersonate-Uid`), as
//! `kubectl --as`, `--as-group` and `--as-uid` do; over gRPC the same names are metadata keys.
//! Its sender must be allowed the verb `impersonate` on each: `users` (or `serviceaccounts` in
//! their namespace, for `system:serviceaccount:<ns>:<name>`), `groups`, and
//! `uids.authentication.k8s.io`. The request then runs as that user, and the audit log names
//! both.

use keel_api::resource::AUTHENTICATION_GROUP;
use keel_api::{ApiError, Target};

use crate::auth::{AUTHENTICATED, User};

pub const USER_HEADER: &str = "impersonate-user";
pub const GROUP_HEADER: &str = "impersonate-group";
pub const UID_HEADER: &str = "impersonate-uid";
/// Kubernetes' prefix of a user's extra fields, which keel does not keep.
const EXTRA_PREFIX: &str = "impersonate-extra-";
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
const ANONYMOUS: &str = "system:anonymous";
const UNAUTHENTICATED: &str = "system:unauthenticated";

/// Whom a request asks to act as.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Impersonation {
    /// `""`: none asked for (then neither may the rest be).
    pub user: String,
    pub groups: Vec<String>,
    pub uid: String,
    /// `Impersonate-Extra-*` keys sent: refused, since keel keeps no extra fields.
    pub extra: Vec<String>,
}

/// One right the sender of an impersonation needs: `impersonate` on this object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needed {
    pub group: &'static str,
    pub resource: &'static str,
    pub namespace: String,
    pub name: String,
}

impl Impersonation {
    /// From a request's headers (names in any case); `None` when it asks for nothing.
    pub fn from_headers<'h>(
        headers: impl IntoIterator<Item = (&'h str, &'h str)>,
    ) -> Option<Impersonation> {
        let mut out = Impersonation::default();
        let mut any = false;
        for (name, value) in headers {
            let name = name.to_ascii_lowercase();
            match name.as_str() {
                USER_HEADER => out.user = value.to_string(),
                GROUP_HEADER => out.groups.push(value.to_string()),
                UID_HEADER => out.uid = value.to_string(),
                n if n.starts_with(EXTRA_PREFIX) => {
                    out.extra.push(n[EXTRA_PREFIX.len()..].to_string());
                }
                _ => continue,
            }
            any = true;
        }
        any.then_some(out)
    }

    /// The service account a username names: (namespace, name).
    fn service_account(&self) -> Option<(&str, &str)> {
        let (ns, name) = self
            .user
            .strip_prefix(SERVICE_ACCOUNT_PREFIX)?
            .split_once(':')?;
        (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then_some((ns, name))
    }

    /// What the sender must be allowed, in Kubernetes' order (user, groups, uid); or
    /// `BadRequest` for groups or a uid without a user, or extra fields.
    pub fn needed(&self) -> Result<Vec<Needed>, ApiError> {
        let t = Target::new("", "users", "");
        if self.user.is_empty() {
            return Err(ApiError::bad_request(
                t,
                "Impersonate-Group and Impersonate-Uid need Impersonate-User: requested without impersonating a user",
            ));
        }
        if let Some(key) = self.extra.first() {
            return Err(ApiError::bad_request(
                t,
                format!("Impersonate-Extra-{key}: keel keeps no extra user fields to impersonate"),
            ));
        }
        let mut out = vec![match self.service_account() {
            Some((ns, name)) => Needed {
                group: "",
                resource: "serviceaccounts",
                namespace: ns.into(),
                name: name.into(),
            },
            None => Needed {
                group: "",
                resource: "users",
                namespace: String::new(),
                name: self.user.clone(),
            },
        }];
        out.extend(self.groups.iter().map(|g| Needed {
            group: "",
            resource: "groups",
            namespace: String::new(),
            name: g.clone(),
        }));
        if !self.uid.is_empty() {
            out.push(Needed {
                group: AUTHENTICATION_GROUP,
                resource: "uids",
                namespace: String::new(),
                name: self.uid.clone(),
            });
        }
        Ok(out)
    }

    /// The user the request then runs as: the groups asked for, else a service account's
    /// own; `system:authenticated` added (`system:unauthenticated` for `system:anonymous`)
    /// as Kubernetes adds it. Nothing of the sender's carries over.
    pub fn user(&self) -> User {
        let mut groups = self.groups.clone();
        if groups.is_empty()
            && let Some((ns, _)) = self.service_account()
        {
            groups = vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
            ];
        }
        let has = |g: &str| groups.iter().any(|x| x == g);
        if self.user == ANONYMOUS {
            if !has(UNAUTHENTICATED) {
                groups.push(UNAUTHENTICATED.into());
            }
        } else if !has(AUTHENTICATED) && !has(UNAUTHENTICATED) {
            groups.push(AUTHENTICATED.into());
        }
        User {
            name: self.user.clone(),
            groups,
            uid: self.uid.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(headers: &[(&str, &str)]) -> Option<Impersonation> {
        Impersonation::from_headers(headers.iter().copied())
    }

    #[test]
    fn headers_in_any_case_make_one_impersonation() {
        assert_eq!(parse(&[("authorization", "Bearer x")]), None);
        let i = parse(&[
            ("Impersonate-User", "alice"),
            ("impersonate-group", "dev"),
            ("Impersonate-Group", "ops"),
            ("Impersonate-Uid", "7"),
        ])
        .expect("asked");
        assert_eq!(i.user, "alice");
        assert_eq!(i.groups, ["dev", "ops"]);
        assert_eq!(i.uid, "7");
    }

    #[test]
    fn each_identity_asked_for_needs_its_own_right() {
        let i = parse(&[
            ("impersonate-user", "system:serviceaccount:ci:builder"),
            ("impersonate-group", "dev"),
            ("impersonate-uid", "7"),
        ])
        .expect("asked");
        let needed = i.needed().expect("well-formed");
        let rights: Vec<(&str, &str, &str, &str)> = needed
            .iter()
            .map(|n| (n.group, n.resource, n.namespace.as_str(), n.name.as_str()))
            .collect();
        assert_eq!(
            rights,
            [
                ("", "serviceaccounts", "ci", "builder"),
                ("", "groups", "", "dev"),
                ("authentication.k8s.io", "uids", "", "7"),
            ]
        );
        let e = parse(&[("impersonate-group", "dev")])
            .expect("asked")
            .needed()
            .expect_err("no user");
        assert_eq!(e.reason, keel_api::Reason::BadRequest);
        let e = parse(&[("impersonate-user", "a"), ("impersonate-extra-scopes", "x")])
            .expect("asked")
            .needed()
            .expect_err("extra");
        assert_eq!(e.reason, keel_api::Reason::BadRequest);
    }

    #[test]
    fn the_user_made_has_kubernetes_groups() {
        let user = |h: &[(&str, &str)]| parse(h).expect("asked").user();
        assert_eq!(
            user(&[("impersonate-user", "alice")]).groups,
            ["system:authenticated"]
        );
        assert_eq!(
            user(&[("impersonate-user", "alice"), ("impersonate-group", "dev")]).groups,
            ["dev", "system:authenticated"]
        );
        assert_eq!(
            user(&[("impersonate-user", "system:serviceaccount:ci:b")]).groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:ci",
                "system:authenticated"
            ]
        );
        assert_eq!(
            user(&[("impersonate-user", "system:anonymous")]).groups,
            ["system:unauthenticated"]
        );
    }
}
