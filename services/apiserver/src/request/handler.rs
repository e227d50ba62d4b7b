//! The handler every request goes through: limits, deadline, resource lookup, the verb,
//! metrics, audit.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use keel_api::{ApiError, GroupVersionResource, Reason, ResourceInfo};
use tokio::time::Instant;

use super::audit::{AuditLog, AuditUser, Entry};
use super::authorizer::Authorizer;
use super::impersonation::Impersonation;
use super::limits::{Class, Limits, Slot};
use crate::auth::User;
use crate::metrics::Metrics;
pub use crate::registry::Warnings;
use crate::registry::{Attributes, AuditAnnotations, Registry, Requester};

/// Used when the client sets no deadline: long enough for a contended PATCH to land.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// No request holds server resources longer than this, whatever it asks for.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(120);

/// Who sent a request, as its transport found: the authenticated user, whom it asks to act
/// as (the `Impersonate-*` headers), and where its warnings go (Kubernetes' `Warning` header,
/// for the transport to send).
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// `None`: authentication is off.
    pub user: Option<User>,
    pub impersonate: Option<Impersonation>,
    /// Where the request's warnings go.
    pub warnings: Warnings,
}

/// A request of one verb, as every transport hands it over.
pub struct Request<V> {
    /// The resource it addresses (`None`: the client named none, a `BadRequest`).
    pub resource: Option<GroupVersionResource>,
    /// How long the client gives it (`None`: [`DEFAULT_TIMEOUT`]; at most [`MAX_TIMEOUT`]).
    pub timeout: Option<Duration>,
    /// Who sent it, whom it asks to act as, where its warnings go.
    pub caller: Caller,
    pub verb: V,
}

/// What a verb has to work with once its resource is known. The registry is reached only
/// through [`Context::authorize`], so that no verb can touch an object before the request's
/// user is allowed to.
pub struct Context<'a> {
    registry: &'a Registry,
    authorizer: &'a Authorizer,
    /// The user requests are authorized as (`None`: authorization is off).
    user: Option<&'a User>,
    /// Who sent the request, whether or not requests are authorized (`None`: authentication
    /// is off).
    requester: Option<&'a User>,
    pub info: Arc<ResourceInfo>,
    /// When the request must be answered by.
    pub deadline: Instant,
    pub metrics: &'a Metrics,
    /// A watch's place among the open watches, which it keeps while it is open (other verbs'
    /// places are held by the handler until their audit line is written).
    pub watch_slot: Option<Slot>,
    /// What [`Context::authorize`] was asked about: the audit line's object.
    scope: &'a Mutex<Scope>,
    warnings: &'a Warnings,
    /// The request's audit annotations (admission's).
    annotations: &'a AuditAnnotations,
    /// What issues ServiceAccount tokens (`None`: no signing key configured).
    pub tokens: Option<&'a TokenIssuer>,
}

/// The namespace, name and subresource a request addressed, as authorized.
#[derive(Default)]
struct Scope {
    namespace: String,
    name: String,
    subresource: String,
    /// What admission recorded of the request (`<webhook>/<key>`).
    annotations: AuditAnnotations,
}

impl<'a> Context<'a> {
    /// Who sent the request, when it is authorized (`None`: authentication is off, or
    /// authorization is `AlwaysAllow`).
    pub fn user(&self) -> Option<&'a User> {
        self.user
    }

    /// Who sent the request (`None`: authentication is off), and whether requests are
    /// authorized by RBAC: what a review answers about.
    pub fn requester(&self) -> (Option<&'a User>, bool) {
        (
            self.requester,
            self.user.is_some() || self.requester.is_none(),
        )
    }

    /// Who sent the request and where admission's warnings and audit annotations go: what a
    /// write takes to its admission chain.
    pub fn admission(&self) -> Requester<'a> {
        Requester {
            user: self.requester,
            warnings: Some(self.warnings),
            audit: Some(self.annotations),
        }
    }

    /// Adds a warning to the answer.
    pub fn warn(&self, w: String) {
        self.warnings.push(w);
    }

    /// Names the object the request made (a create is authorized without its name), for its
    /// audit line.
    pub fn made(&self, name: &str) {
        self.scope.lock().unwrap_or_else(|e| e.into_inner()).name = name.into();
    }

    /// The registry, once the user may do `verb` (Kubernetes' verb: `get`, `list`, `watch`,
    /// `create`, `update`, `patch`, `delete`) on this resource's `subresource` in `namespace`
    /// (`""`: cluster-scoped, or all namespaces) to the object `name` (`""`: none named);
    /// `Forbidden` otherwise.
    pub async fn authorize(
        &self,
        verb: &str,
        namespace: &str,
        name: &str,
        subresource: &str,
    ) -> Result<&'a Registry, ApiError> {
        let gvr = &self.info.gvr;
        {
            let mut scope = self.scope.lock().unwrap_or_else(|e| e.into_inner());
            scope.namespace = namespace.into();
            scope.name = name.into();
            scope.subresource = subresource.into();
        }
        let attributes = Attributes {
            verb,
            group: &gvr.group,
            resource: &gvr.resource,
            subresource,
            namespace,
            name,
            path: None,
        };
        self.authorizer
            .authorize(self.user, &attributes, self.deadline)
            .await?;
        Ok(self.registry)
    }
}

/// The audit line of a request in progress: written by [`Handler::handle`] once answered, or
/// by this guard's drop when the client went away first (code 499, "client closed request",
/// as nginx names it; or the answer's own line, if it was ready but not yet queued).
struct Abandoned<'a> {
    audit: &'a AuditLog,
    scope: &'a Mutex<Scope>,
    user: Option<User>,
    /// Whom `user` acted as, once allowed.
    impersonated: Option<User>,
    resource: Option<GroupVersionResource>,
    verb: &'static str,
    start: Instant,
    answered: Option<Entry>,
    /// The line is queued: nothing left to do.
    recorded: bool,
}

/// The code of a request whose client went away before the answer.
const CLIENT_CLOSED_REQUEST: u16 = 499;

impl Abandoned<'_> {
    fn entry(&self, code: u16, reason: Option<Reason>) -> Entry {
        let scope = self.scope.lock().unwrap_or_else(|e| e.into_inner());
        audit_entry(
            self.user.as_ref(),
            self.impersonated.as_ref(),
            self.resource.as_ref(),
            self.verb,
            &scope,
            (code, reason),
            self.start,
        )
    }
}

/// An audit line: who (and as whom), what, on which object, with what result, since when.
fn audit_entry(
    user: Option<&User>,
    impersonated: Option<&User>,
    resource: Option<&GroupVersionResource>,
    verb: &'static str,
    scope: &Scope,
    (code, reason): (u16, Option<Reason>),
    start: Instant,
) -> Entry {
    let (user, groups) = user
        .map(|u| (u.name.clone(), u.groups.clone()))
        .unwrap_or_default();
    let (group, resource) = resource
        .map(|r| (r.group.clone(), r.resource.clone()))
        .unwrap_or_default();
    Entry {
        time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        user,
        groups,
        verb,
        group,
        resource,
        subresource: scope.subresource.clone(),
        namespace: scope.namespace.clone(),
        name: scope.name.clone(),
        impersonated_user: impersonated.map(|u| AuditUser {
            username: u.name.clone(),
            groups: u.groups.clone(),
            uid: u.uid.clone(),
        }),
        code,
        reason,
        latency_ms: start.elapsed().as_secs_f64() * 1000.0,
        annotations: scope.annotations.get(),
    }
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.recorded {
            return;
        }
        let entry = self
            .answered
            .take()
            .unwrap_or_else(|| self.entry(CLIENT_CLOSED_REQUEST, None));
        self.audit.record_now(&entry);
    }
}

/// One verb: its name in metrics, and what it does.
pub trait Verb: Send {
    const NAME: &'static str;
    /// Which in-flight limit it counts against.
    const CLASS: Class;
    /// The HTTP code Kubernetes answers its success with (the audit log's code).
    const OK_CODE: u16 = 200;
    type Output: Send;
    fn run(self, cx: Context<'_>) -> impl Future<Output = Result<Self::Output, ApiError>> + Send;
}

/// Runs requests against the registry.
pub struct Handler {
    registry: Arc<Registry>,
    authorizer: Authorizer,
    metrics: Metrics,
    /// Whether requests are authorized by RBAC (else every authenticated user may do
    /// everything: `--authorization-mode AlwaysAllow`).
    rbac: bool,
    limits: Limits,
    audit: Option<AuditLog>,
    tokens: Option<Arc<TokenIssuer>>,
}

/// What ServiceAccount tokens are issued with (`--service-account-*`).
pub struct TokenIssuer {
    pub key: Arc<keel_token::SigningKey>,
    pub issuer: String,
    /// The audiences of a token whose request names none.
    pub audiences: Vec<String>,
}

impl Handler {
    /// Issues ServiceAccount tokens with this.
    pub fn with_tokens(mut self, tokens: Arc<TokenIssuer>) -> Handler {
        self.tokens = Some(tokens);
        self
    }

    /// The token issuer, if a signing key is configured.
    pub fn tokens(&self) -> Option<&TokenIssuer> {
        self.tokens.as_deref()
    }

    pub fn new(
        registry: Arc<Registry>,
        metrics: Metrics,
        rbac: bool,
        limits: Limits,
        audit: Option<AuditLog>,
    ) -> Handler {
        Handler {
            authorizer: Authorizer::new(registry.policies().clone()),
            registry,
            metrics,
            rbac,
            limits,
            audit,
            tokens: None,
        }
    }

    /// Serves one request: every verb of every transport comes through here.
    pub async fn handle<V: Verb>(&self, req: Request<V>) -> Result<V::Output, ApiError> {
        let start = Instant::now();
        let deadline = start + req.timeout.unwrap_or(DEFAULT_TIMEOUT).min(MAX_TIMEOUT);
        let label = resource_label(req.resource.as_ref());
        let scope = Mutex::new(Scope::default());
        let annotations = scope
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .annotations
            .clone();
        // Written if the client goes away before the answer (the transport then drops this
        // future).
        let mut abandoned = self.audit.as_ref().map(|audit| Abandoned {
            audit,
            scope: &scope,
            user: req.caller.user.clone(),
            impersonated: None,
            resource: req.resource.clone(),
            verb: V::NAME,
            start,
            answered: None,
            recorded: false,
        });
        // Who the request runs as: its sender, or whom it may impersonate.
        let Caller {
            user: sender,
            impersonate,
            warnings,
        } = req.caller;
        let impersonating = impersonate.is_some();
        let user = match impersonate {
            None => Ok(sender),
            Some(i) => self
                .impersonate(sender.as_ref(), &i, deadline)
                .await
                .map(Some),
        };
        if let (Some(pending), Ok(Some(u)), true) = (&mut abandoned, &user, impersonating) {
            pending.impersonated = Some(u.clone());
        }
        let admitted =
            user.and_then(|user| Ok((self.limits.admit(V::CLASS, user.as_ref())?, user)));
        // Held until the audit line is queued: a request waiting on a slow audit log still
        // counts as in flight.
        let mut _held = None;
        // A resource this replica does not serve yet may be a CRD etcd has already.
        let info = match &admitted {
            Ok(_) => {
                self.registry
                    .lookup_fresh(req.resource.as_ref(), deadline)
                    .await
            }
            Err(e) => Err(e.clone()),
        };
        let out = match admitted.and_then(|(slot, user)| {
            let info = info?;
            // A review is only ever created.
            if info.create_only && V::NAME != "create" {
                return Err(ApiError::new(
                    Reason::MethodNotAllowed,
                    keel_api::Target::new(&info.gvr.group, &info.gvr.resource, ""),
                    "the server does not allow this method on the requested resource",
                ));
            }
            Ok((slot, info, user))
        }) {
            Ok((slot, info, user)) => {
                let watch_slot = if V::CLASS == Class::Watch {
                    Some(slot)
                } else {
                    _held = Some(slot);
                    None
                };
                let cx = Context {
                    registry: &self.registry,
                    authorizer: &self.authorizer,
                    user: user.as_ref().filter(|_| self.rbac),
                    requester: user.as_ref(),
                    info,
                    deadline,
                    metrics: &self.metrics,
                    watch_slot,
                    scope: &scope,
                    warnings: &warnings,
                    annotations: &annotations,
                    tokens: self.tokens.as_deref(),
                };
                req.verb.run(cx).await
            }
            Err(e) => Err(e),
        };
        let reason = out.as_ref().err().map(|e| e.reason);
        let took = start.elapsed();
        self.metrics.request(V::NAME, &label, reason, took);
        if let Err(e) = &out
            && e.reason == Reason::InternalError
        {
            tracing::error!(verb = V::NAME, resource = %label, error = %e, "internal error");
        }
        if let Some(pending) = &mut abandoned {
            let code = reason.map_or(V::OK_CODE, Reason::http_code);
            let entry = pending.entry(code, reason);
            // Until it is queued, the line is the drop guard's to write.
            pending.answered = Some(entry.clone());
            pending.audit.record(&entry).await;
            pending.recorded = true;
        }
        out
    }

    /// The user `sender` acts as through `i`, once allowed to impersonate each identity it
    /// names (`impersonate` on users or serviceaccounts, groups, uids); `Forbidden` naming the
    /// first refused. Without authentication (no sender) or with `AlwaysAllow`, allowed.
    async fn impersonate(
        &self,
        sender: Option<&User>,
        i: &Impersonation,
        deadline: Instant,
    ) -> Result<User, ApiError> {
        for needed in i.needed()? {
            let attributes = Attributes {
                verb: "impersonate",
                group: needed.group,
                resource: needed.resource,
                subresource: "",
                namespace: &needed.namespace,
                name: &needed.name,
                path: None,
            };
            self.authorizer
                .authorize(sender.filter(|_| self.rbac), &attributes, deadline)
                .await?;
        }
        Ok(i.user())
    }

    /// Records a request its transport refused before any verb ran (a body or a method it
    /// cannot take, a malformed query): its metric and its audit line, as every request has.
    /// `verb` as the request's method and path name it (`create`, `get`, ...).
    pub async fn refused(
        &self,
        verb: &'static str,
        resource: &GroupVersionResource,
        user: Option<&User>,
        (namespace, name, subresource): (&str, &str, &str),
        e: &ApiError,
    ) {
        let label = resource_label(Some(resource));
        self.metrics
            .request(verb, &label, Some(e.reason), Duration::ZERO);
        if let Some(audit) = &self.audit {
            let scope = Scope {
                namespace: namespace.into(),
                name: name.into(),
                subresource: subresource.into(),
                annotations: AuditAnnotations::default(),
            };
            let entry = audit_entry(
                user,
                None,
                Some(resource),
                verb,
                &scope,
                (e.reason.http_code(), Some(e.reason)),
                Instant::now(),
            );
            audit.record(&entry).await;
        }
    }

    /// Brings the served custom resources up to etcd's CRDs now, before discovery answers: a
    /// client that saw a CRD Established finds its resource on every replica. A failure is
    /// logged; discovery then answers from what the replica's watch has.
    pub async fn catch_up(&self) {
        let deadline = Instant::now() + MAX_TIMEOUT;
        if let Err(e) = self.registry.catch_up_custom_resources(deadline).await {
            tracing::warn!(error = %e, "cannot read the CRDs for discovery");
        }
    }

    /// The served resource `gvr` names (one of a CRD etcd has already, too), or `NotFound`:
    /// for a transport that must know it before it reads a request's body.
    pub async fn lookup(&self, gvr: &GroupVersionResource) -> Result<Arc<ResourceInfo>, ApiError> {
        self.registry
            .lookup_fresh(Some(gvr), Instant::now() + DEFAULT_TIMEOUT)
            .await
    }

    /// Every served resource (discovery).
    pub fn resources(&self) -> Vec<Arc<ResourceInfo>> {
        self.registry.resources()
    }

    /// The kind of a served resource (`""` when it is not served).
    pub fn kind(&self, gvr: &GroupVersionResource) -> String {
        self.resources()
            .iter()
            .find(|r| r.gvr == *gvr)
            .map(|r| r.kind.clone())
            .unwrap_or_default()
    }

    /// Whether `gvr` is a custom resource (a CRD's): its objects have only the forms their
    /// schema gives them (JSON), not the built-in kinds' generated ones.
    pub fn is_custom(&self, gvr: &GroupVersionResource) -> bool {
        self.registry.is_custom(gvr)
    }

    /// The `resourceVersion` of the CRD a custom resource is served from (`None`: built in).
    pub fn custom_version(&self, gvr: &GroupVersionResource) -> Option<String> {
        self.registry.custom_version(gvr)
    }

    /// A custom resource's `additionalPrinterColumns` (none for a built-in one).
    pub fn printer_columns(&self, gvr: &GroupVersionResource) -> Vec<serde_json::Value> {
        self.registry.printer_columns(gvr)
    }

    /// A custom resource's `openAPIV3Schema`, if it has one.
    pub fn openapi_schema(&self, gvr: &GroupVersionResource) -> Option<serde_json::Value> {
        self.registry.openapi_schema(gvr)
    }

    /// Kubernetes' OpenAPI v3 schemas of the built-in kinds: `kinds` (`group/version/Kind` →
    /// schema name) and `schemas` (by name).
    pub fn builtin_openapi() -> &'static serde_json::Value {
        crate::registry::builtin_schema::document()
    }

    /// The name of a built-in kind's schema in [`Handler::builtin_openapi`], if it has one.
    pub fn builtin_schema_name(info: &keel_api::ResourceInfo) -> Option<&'static str> {
        crate::registry::builtin_schema::schema_name(info)
    }

    /// Whether this replica can serve; else why not.
    pub async fn readiness(&self) -> Result<(), String> {
        self.registry.readiness().await
    }
}

/// The resource as metrics label it: `deployments.apps`, `pods`.
fn resource_label(r: Option<&GroupVersionResource>) -> String {
    r.map(|r| {
        if r.group.is_empty() {
            r.resource.clone()
        } else {
            format!("{}.{}", r.resource, r.group)
        }
    })
    .unwrap_or_default()
}
