//! Kubernetes' authorizer library (`kubernetes.authz`), for ValidatingAdmissionPolicy and
//! `matchConditions`: `authorizer.group('apps').resource('deployments').namespace('ns')
//! .check('create').allowed()`, `authorizer.path('/healthz').check('get')`,
//! `authorizer.serviceAccount('ns', 'sa')...`, `authorizer.requestResource.check('update')`.
//! The decision is asked of the caller's [`Authorize`]: this crate does no I/O.

use std::any::Any;
use std::sync::Arc;

use cel::common::traits::Indexer;
use cel::common::types::{CelBool, CelString, Type};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{Env, ExecutionError};

static AUTHORIZER: Type = Type::new_unspecified_type("kubernetes.authorization.Authorizer");
static PATH_CHECK: Type = Type::new_unspecified_type("kubernetes.authorization.PathCheck");
static GROUP_CHECK: Type = Type::new_unspecified_type("kubernetes.authorization.GroupCheck");
static RESOURCE_CHECK: Type = Type::new_unspecified_type("kubernetes.authorization.ResourceCheck");
static DECISION: Type = Type::new_unspecified_type("kubernetes.authorization.Decision");

/// What is asked: a resource request (group, resource, ...) or a non-resource one (`path`),
/// for the request's user or a service account.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    /// `serviceAccount(namespace, name)`: asked for it rather than the request's user.
    pub service_account: Option<(String, String)>,
    /// A non-resource request's path.
    pub path: Option<String>,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub verb: String,
}

/// What the authorizer says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub reason: String,
    /// The authorizer failed (`errored()`, `error()`).
    pub error: Option<String>,
}

/// The caller's authorizer.
pub trait Authorize: Send + Sync {
    fn authorize(&self, request: &Request) -> Decision;
}

/// The `authorizer` variable.
#[derive(Clone)]
pub struct Authorizer {
    inner: Arc<dyn Authorize>,
    service_account: Option<(String, String)>,
    /// What `authorizer.requestResource` checks: the admitted request's resource.
    request_resource: Request,
}

impl Authorizer {
    /// `request_resource`: the admitted request's group, resource, subresource, namespace and
    /// name (its verb is the one `check` is given).
    pub fn new(inner: Arc<dyn Authorize>, request_resource: Request) -> Authorizer {
        Authorizer {
            inner,
            service_account: None,
            request_resource,
        }
    }
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer")
            .field("service_account", &self.service_account)
            .finish()
    }
}

impl PartialEq for Authorizer {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner) && self.service_account == other.service_account
    }
}

#[derive(Debug, Clone, PartialEq)]
struct PathCheck(Authorizer, String);

#[derive(Debug, Clone, PartialEq)]
struct GroupCheck(Authorizer, String);

#[derive(Debug, Clone, PartialEq)]
struct ResourceCheck(Authorizer, Request);

#[derive(Debug, Clone, PartialEq)]
struct Checked(Decision);

opaque!(PathCheck, PATH_CHECK);
opaque!(GroupCheck, GROUP_CHECK);
opaque!(ResourceCheck, RESOURCE_CHECK);
opaque!(Checked, DECISION);

impl Val for Authorizer {
    fn get_type(&self) -> &Type {
        <Self as Val>::cel_type()
    }
    fn cel_type() -> &'static Type {
        &AUTHORIZER
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<Authorizer>()
            .is_some_and(|o| o == self)
    }
    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for Authorizer {}

impl Indexer for Authorizer {
    /// `authorizer.requestResource`.
    fn get<'b, 'v>(&'b self, field: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        match field.downcast_ref::<CelString>().map(CelString::inner) {
            Some("requestResource") => Ok(CowVal::Owned(Box::new(ResourceCheck(
                self.clone(),
                self.request_resource.clone(),
            )))),
            _ => Err(ExecutionError::no_such_key("requestResource")),
        }
    }

    fn steal<'v>(self: Box<Self>, field: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(field).map(CowVal::into_owned)
    }
}

/// Registers the library on `env`.
pub fn register(env: &mut Env) -> Result<(), cel::DeclarationError> {
    for t in [
        &AUTHORIZER,
        &PATH_CHECK,
        &GROUP_CHECK,
        &RESOURCE_CHECK,
        &DECISION,
    ] {
        env.add_type(t.to_owned())?;
    }
    cel::add_member_overload!(env, fn path: (Authorizer, CelString) -> PathCheck)?;
    cel::add_member_overload!(env, fn group: (Authorizer, CelString) -> GroupCheck)?;
    cel::add_member_overload!(env, fn service_account: (Authorizer, CelString, CelString) -> Authorizer,
        name = "serviceAccount")?;
    cel::add_member_overload!(env, fn resource: (GroupCheck, CelString) -> ResourceCheck)?;
    cel::add_member_overload!(env, fn subresource: (ResourceCheck, CelString) -> ResourceCheck)?;
    cel::add_member_overload!(env, fn in_namespace: (ResourceCheck, CelString) -> ResourceCheck,
        name = "namespace")?;
    cel::add_member_overload!(env, fn named: (ResourceCheck, CelString) -> ResourceCheck,
        name = "name")?;
    cel::add_member_overload!(env, fn check_path: (PathCheck, CelString) -> Checked,
        name = "check")?;
    cel::add_member_overload!(env, fn check_resource: (ResourceCheck, CelString) -> Checked,
        name = "check")?;
    cel::add_member_overload!(env, fn allowed: (Checked) -> CelBool)?;
    cel::add_member_overload!(env, fn errored: (Checked) -> CelBool)?;
    cel::add_member_overload!(env, fn reason: (Checked) -> CelString)?;
    cel::add_member_overload!(env, fn error: (Checked) -> CelString)?;
    Ok(())
}

fn path(a: &Authorizer, p: &CelString<'_>) -> PathCheck {
    PathCheck(a.clone(), p.inner().to_string())
}

fn group(a: &Authorizer, g: &CelString<'_>) -> GroupCheck {
    GroupCheck(a.clone(), g.inner().to_string())
}

fn service_account(a: &Authorizer, ns: &CelString<'_>, name: &CelString<'_>) -> Authorizer {
    Authorizer {
        service_account: Some((ns.inner().to_string(), name.inner().to_string())),
        ..a.clone()
    }
}

fn resource(g: &GroupCheck, r: &CelString<'_>) -> ResourceCheck {
    ResourceCheck(
        g.0.clone(),
        Request {
            group: g.1.clone(),
            resource: r.inner().to_string(),
            ..Request::default()
        },
    )
}

fn subresource(c: &ResourceCheck, s: &CelString<'_>) -> ResourceCheck {
    let mut c = c.clone();
    c.1.subresource = s.inner().to_string();
    c
}

fn in_namespace(c: &ResourceCheck, ns: &CelString<'_>) -> ResourceCheck {
    let mut c = c.clone();
    c.1.namespace = ns.inner().to_string();
    c
}

fn named(c: &ResourceCheck, n: &CelString<'_>) -> ResourceCheck {
    let mut c = c.clone();
    c.1.name = n.inner().to_string();
    c
}

fn ask(a: &Authorizer, mut request: Request, verb: &str) -> Checked {
    request.verb = verb.to_string();
    request.service_account = a.service_account.clone();
    Checked(a.inner.authorize(&request))
}

fn check_path(c: &PathCheck, verb: &CelString<'_>) -> Checked {
    let request = Request {
        path: Some(c.1.clone()),
        ..Request::default()
    };
    ask(&c.0, request, verb.inner())
}

fn check_resource(c: &ResourceCheck, verb: &CelString<'_>) -> Checked {
    ask(&c.0, c.1.clone(), verb.inner())
}

fn allowed(d: &Checked) -> CelBool {
    CelBool::from(d.0.allowed)
}

fn errored(d: &Checked) -> CelBool {
    CelBool::from(d.0.error.is_some())
}

fn reason(d: &Checked) -> CelString<'static> {
    CelString::from(d.0.reason.clone())
}

fn error(d: &Checked) -> CelString<'static> {
    CelString::from(d.0.error.clone().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Binding;

    /// Allows what it lists, for whom it lists it; says it errored on verb `boom`.
    struct Listed(Vec<Request>);

    impl Authorize for Listed {
        fn authorize(&self, r: &Request) -> Decision {
            if r.verb == "boom" {
                return Decision {
                    error: Some("the authorizer is down".into()),
                    ..Decision::default()
                };
            }
            let allowed = self.0.contains(r);
            Decision {
                allowed,
                reason: if allowed {
                    "listed".into()
                } else {
                    String::new()
                },
                error: None,
            }
        }
    }

    #[test]
    fn checks_are_built_and_asked_as_kubernetes_builds_them() {
        let allowed = vec![
            Request {
                group: "apps".into(),
                resource: "deployments".into(),
                subresource: "scale".into(),
                namespace: "ns".into(),
                name: "web".into(),
                verb: "update".into(),
                ..Request::default()
            },
            Request {
                path: Some("/healthz".into()),
                verb: "get".into(),
                ..Request::default()
            },
            Request {
                service_account: Some(("ci".into(), "builder".into())),
                resource: "pods".into(),
                verb: "create".into(),
                ..Request::default()
            },
            Request {
                resource: "configmaps".into(),
                namespace: "ns".into(),
                name: "cm".into(),
                verb: "approve".into(),
                ..Request::default()
            },
        ];
        let authorizer = Authorizer::new(
            Arc::new(Listed(allowed)),
            Request {
                resource: "configmaps".into(),
                namespace: "ns".into(),
                name: "cm".into(),
                ..Request::default()
            },
        );
        let table = [
            (
                "authorizer.group('apps').resource('deployments').subresource('scale').namespace('ns').name('web').check('update').allowed()",
                true,
            ),
            (
                "authorizer.group('apps').resource('deployments').namespace('ns').name('web').check('update').allowed()",
                false,
            ),
            ("authorizer.path('/healthz').check('get').allowed()", true),
            (
                "authorizer.path('/healthz').check('get').reason() == 'listed'",
                true,
            ),
            ("authorizer.path('/metrics').check('get').allowed()", false),
            (
                "authorizer.serviceAccount('ci', 'builder').group('').resource('pods').check('create').allowed()",
                true,
            ),
            (
                "authorizer.group('').resource('pods').check('create').allowed()",
                false,
            ),
            (
                "authorizer.requestResource.check('approve').allowed()",
                true,
            ),
            (
                "authorizer.requestResource.check('delete').allowed()",
                false,
            ),
            ("authorizer.path('/x').check('boom').errored()", true),
            (
                "authorizer.path('/x').check('boom').error() == 'the authorizer is down'",
                true,
            ),
            ("authorizer.path('/x').check('get').errored()", false),
        ];
        for (expr, want) in table {
            let compiled = crate::compile_declared(expr, &["authorizer"]).expect(expr);
            let got = compiled.evaluate_bool(&[("authorizer", Binding::Authorizer(&authorizer))]);
            assert_eq!(got, Ok(want), "{expr}");
        }
    }
}
