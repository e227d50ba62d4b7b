//! Admission webhooks as Kubernetes 1.32 runs them (`MutatingAdmissionWebhook`,
//! `ValidatingAdmissionWebhook`): the configurations every replica follows in its watch cache,
//! which webhooks a write is sent to (rules, `matchPolicy`, namespace and object selectors), the
//! `AdmissionReview` v1 call over HTTPS, and what its answer does: a JSON patch, a denial in
//! Kubernetes' words, warnings and audit annotations, or, when it cannot be had, the webhook's
//! `failurePolicy`. The registry's writes call [`Webhooks::mutate`] and [`Webhooks::validate`]
//! as the mutating and validating steps of its one admission chain (DESIGN.md, "Admission").

mod client;
pub mod config;
pub mod conversion;
mod dispatch;
pub mod policy;
mod review;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use keel_api::{ApiError, GroupVersionResource, Metadata, Object, Reason, ResourceInfo, Target};
use serde_json::Value;
use tokio::time::Instant;

pub use self::client::Clients;
use self::config::{Endpoint, FailurePolicy, Hook, Match, Rule};
use self::policy::{Policy, PolicyBinding};
use crate::auth::User;
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::registry::Resources;
use crate::storage::{ListQuery, ReadFrom, Store};

pub use self::config::{GROUP, MUTATING, VALIDATING};

/// How long a write of a webhook configuration waits for this replica to have it in force.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// An admission operation, as `AdmissionReview` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }

    /// The options kind its `AdmissionReview` carries.
    fn options_kind(self) -> &'static str {
        match self {
            Operation::Create => "CreateOptions",
            Operation::Update => "UpdateOptions",
            Operation::Delete => "DeleteOptions",
        }
    }
}

/// The warnings of one request (`unknown field "spec.replica"`, a webhook's), as Kubernetes
/// sends them in `Warning` headers: at most [`MAX_WARNINGS`], and none twice. Cheap to clone
/// (shared).
#[derive(Debug, Clone, Default)]
pub struct Warnings(Arc<Mutex<Vec<String>>>);

/// The most warnings one answer carries.
pub const MAX_WARNINGS: usize = 50;

impl Warnings {
    pub fn push(&self, w: String) {
        let mut list = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if list.len() < MAX_WARNINGS && !list.contains(&w) {
            list.push(w);
        }
    }

    /// The warnings so far, taken.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The audit annotations of one request (`<webhook>/<key>`), for its audit line. Cheap to
/// clone (shared).
#[derive(Debug, Clone, Default)]
pub struct AuditAnnotations(Arc<Mutex<BTreeMap<String, String>>>);

/// The most audit annotations one request records.
const MAX_ANNOTATIONS: usize = 100;

impl AuditAnnotations {
    pub fn insert(&self, key: String, value: String) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() < MAX_ANNOTATIONS {
            map.insert(key, value);
        }
    }

    /// The annotations so far.
    pub fn get(&self) -> BTreeMap<String, String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Who made a request and where what admission says of it goes: what webhooks are told of
/// the user, and where their warnings and audit annotations end up.
#[derive(Debug, Clone, Copy, Default)]
pub struct Requester<'a> {
    /// `None`: authentication is off (webhooks see an empty `userInfo`).
    pub user: Option<&'a User>,
    pub warnings: Option<&'a Warnings>,
    pub audit: Option<&'a AuditAnnotations>,
}

/// One write, as admission sees it.
pub struct Attributes<'a> {
    pub operation: Operation,
    /// The resource as the request named it.
    pub info: &'a Arc<ResourceInfo>,
    /// `""`, `status`, `scale`, `eviction`, `finalize`.
    pub subresource: &'a str,
    pub namespace: &'a str,
    /// `""` for a create whose name is still to be generated.
    pub name: &'a str,
    pub dry_run: bool,
    pub requester: Requester<'a>,
    /// The request's field manager (create and update options).
    pub manager: &'a str,
}

impl Attributes<'_> {
    /// The kind of the objects admission is given: a Scale for the scale subresource.
    fn kind(&self, info: &ResourceInfo) -> (String, String, String) {
        if self.subresource == "scale" {
            return ("autoscaling".into(), "v1".into(), "Scale".into());
        }
        if self.subresource == "eviction" {
            return ("policy".into(), "v1".into(), "Eviction".into());
        }
        (
            info.gvr.group.clone(),
            info.gvr.version.clone(),
            info.kind.clone(),
        )
    }
}

/// The configurations in force, read into webhooks in Kubernetes' order: configurations by
/// name, webhooks in their configuration's order.
#[derive(Default)]
pub struct Snapshot {
    /// The watch caches' last changes it was read at (`None`: read from etcd, not kept).
    seen: Option<[i64; 4]>,
    mutating: Vec<Arc<Hook>>,
    validating: Vec<Arc<Hook>>,
    /// The ValidatingAdmissionPolicies that have bindings, by name, each with its bindings
    /// by name.
    policies: Vec<(Arc<Policy>, Vec<Arc<PolicyBinding>>)>,
}

impl Snapshot {
    /// Whether any webhook's rules name `op` on `info`'s resource (any version, for
    /// `Equivalent`) and `subresource`: selectors aside, whether a write needs the chain.
    pub fn may_apply(&self, op: Operation, info: &ResourceInfo, subresource: &str) -> bool {
        self.mutating
            .iter()
            .chain(&self.validating)
            .any(|h| rules_name(&h.when, op, info, subresource, None, true))
            || self.policies.iter().any(|(p, _)| {
                p.when
                    .as_ref()
                    .is_none_or(|w| rules_name(w, op, info, subresource, None, true))
            })
    }

    /// Whether any webhook chooses writes by their namespace's labels.
    fn selects_namespaces(&self) -> bool {
        self.mutating
            .iter()
            .chain(&self.validating)
            .any(|h| !h.when.namespace_selector.is_empty())
    }

    pub fn has_mutating(&self) -> bool {
        !self.mutating.is_empty()
    }
}

/// The webhooks of this replica: the configurations as last read, and the HTTPS clients.
pub struct Webhooks {
    snapshot: Mutex<Arc<Snapshot>>,
    clients: Arc<Clients>,
    metrics: Metrics,
}

/// Whether `info` is one of the resources that configure admission: webhook configurations,
/// policies and their bindings.
fn is_configuration(info: &ResourceInfo) -> bool {
    info.gvr.group == GROUP
        && [MUTATING, VALIDATING, policy::POLICIES, policy::BINDINGS]
            .contains(&info.gvr.resource.as_str())
}

impl Webhooks {
    /// Whether objects of `info` configure webhooks (a write of one settles: `Registry::settle`).
    pub fn configures(&self, info: &ResourceInfo) -> bool {
        is_configuration(info)
    }

    /// The HTTPS clients webhooks are called with.
    pub(in crate::registry) fn clients(&self) -> &Arc<Clients> {
        &self.clients
    }

    pub fn new(metrics: Metrics) -> Webhooks {
        Webhooks {
            snapshot: Mutex::default(),
            clients: Arc::default(),
            metrics,
        }
    }
}

/// The configuration resources.
fn configuration_gvrs() -> [GroupVersionResource; 4] {
    [
        GroupVersionResource::new(GROUP, "v1", MUTATING),
        GroupVersionResource::new(GROUP, "v1", VALIDATING),
        GroupVersionResource::new(GROUP, "v1", policy::POLICIES),
        GroupVersionResource::new(GROUP, "v1", policy::BINDINGS),
    ]
}

impl Registry {
    /// The webhook configurations in force: as this replica's watch caches have them (within
    /// moments of a write on any replica), read again only when they have changed; read from
    /// etcd while a cache loads, so that no write passes a webhook unseen.
    pub(in crate::registry) async fn webhook_snapshot(
        &self,
        deadline: Instant,
    ) -> Result<Arc<Snapshot>, ApiError> {
        let [m, v, p, b] = configuration_gvrs();
        let (m, v) = (self.lookup(Some(&m))?, self.lookup(Some(&v))?);
        let (p, b) = (self.lookup(Some(&p))?, self.lookup(Some(&b))?);
        let store = self.store();
        let seen = (|| {
            Some([
                store.cache_changed(&m)?,
                store.cache_changed(&v)?,
                store.cache_changed(&p)?,
                store.cache_changed(&b)?,
            ])
        })();
        let webhooks = self.webhooks();
        {
            let current = webhooks.snapshot.lock().unwrap_or_else(|e| e.into_inner());
            if seen.is_some() && current.seen == seen {
                return Ok(current.clone());
            }
        }
        let read = |info: Arc<ResourceInfo>| async move {
            if seen.is_some()
                && let Some((objects, _)) = store.cached_at(&info, |_| true)
            {
                return Ok(objects);
            }
            let list = store.list(&info, &ListQuery::default(), deadline).await?;
            Ok::<_, ApiError>(
                list.items
                    .iter()
                    .filter_map(|b| Object::from_slice(b).ok())
                    .collect(),
            )
        };
        let (mutating, validating, policies, bindings) =
            match tokio::join!(read(m), read(v), read(p), read(b)) {
                (Ok(m), Ok(v), Ok(p), Ok(b)) => (m, v, p, b),
                (Err(e), ..) | (_, Err(e), ..) | (.., Err(e), _) | (.., Err(e)) => {
                    // No write passes webhooks unseen: without the configurations, the last ones
                    // read stand; before any, writes are refused (Kubernetes' "not yet ready").
                    tracing::warn!(error = %e, "cannot read the webhook configurations");
                    let current = webhooks.snapshot.lock().unwrap_or_else(|e| e.into_inner());
                    if current.seen.is_some() {
                        return Ok(current.clone());
                    }
                    return Err(ApiError::new(
                        Reason::ServiceUnavailable,
                        Target::default(),
                        format!(
                            "admission webhooks not yet ready to handle request: {}",
                            e.message
                        ),
                    ));
                }
            };
        let snapshot = Arc::new(Snapshot {
            seen,
            mutating: mutating
                .iter()
                .flat_map(|c| config::hooks(c, true))
                .collect(),
            validating: validating
                .iter()
                .flat_map(|c| config::hooks(c, false))
                .collect(),
            policies: policy::bound(&policies, &bindings),
        });
        if seen.is_some() {
            *webhooks.snapshot.lock().unwrap_or_else(|e| e.into_inner()) = snapshot.clone();
        }
        Ok(snapshot)
    }

    /// After a write of `obj`, an object of `info`: if it is a webhook configuration, waits
    /// (a second at most) until this replica's watch cache has it, so that the writer's next
    /// request to this replica is admitted by it. (Other replicas see it as their watches
    /// do, within moments.)
    pub(in crate::registry) async fn settle(
        &self,
        info: &ResourceInfo,
        obj: &Object,
        dry_run: bool,
        deadline: Instant,
    ) {
        if dry_run || !self.webhooks().configures(info) {
            return;
        }
        let Ok(rv) = obj.resource_version().parse::<i64>() else {
            return;
        };
        let Ok(info) = self.lookup(Some(&info.gvr)) else {
            return;
        };
        let cache = self.store().cache(&info);
        let until = deadline.min(Instant::now() + SETTLE);
        while cache.revision() < rv && Instant::now() < until {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    /// The mutating webhooks' step: `obj` (at the request's version; for `scale`, a Scale) sent
    /// to each mutating webhook that applies, in order, each answer's patch applied; webhooks
    /// with `reinvocationPolicy: IfNeeded` called once more if a later one changed the object.
    pub(in crate::registry) async fn admit_by_webhooks(
        &self,
        snapshot: &Snapshot,
        a: &Attributes<'_>,
        mut obj: Object,
        old: Option<&Object>,
        deadline: Instant,
    ) -> Result<Object, ApiError> {
        let labels = self.namespace_labels(snapshot, a, deadline).await?;
        // The webhooks called, and the object as each left it.
        let mut called: Vec<(usize, Object)> = Vec::new();
        for (i, hook) in snapshot.mutating.iter().enumerate() {
            let Some(matched) = self.matched(&hook.when, a, Some(&obj), old, labels.as_ref())
            else {
                continue;
            };
            if let Some(patched) = self
                .call(hook, &matched, a, Some(&obj), old, 0, i, deadline)
                .await?
            {
                obj = patched;
            }
            called.push((i, obj.clone()));
        }
        // Reinvocation: once, for the IfNeeded webhooks the object changed after.
        let changed_since: Vec<usize> = called
            .iter()
            .filter(|(i, seen)| snapshot.mutating[*i].reinvoke && *seen != obj)
            .map(|(i, _)| *i)
            .collect();
        for i in changed_since {
            let hook = &snapshot.mutating[i];
            let Some(matched) = self.matched(&hook.when, a, Some(&obj), old, labels.as_ref())
            else {
                continue;
            };
            if let Some(patched) = self
                .call(hook, &matched, a, Some(&obj), old, 1, i, deadline)
                .await?
            {
                obj = patched;
            }
        }
        Ok(obj)
    }

    /// The validating webhooks' step: every validating webhook that applies, called at once;
    /// the first denial or failure (in the webhooks' order) is the answer. `with_mutating`
    /// (a delete, which has no object to mutate): the mutating webhooks are called first, in
    /// order, and may deny it too.
    pub(in crate::registry) async fn validate_by_webhooks(
        &self,
        snapshot: &Snapshot,
        a: &Attributes<'_>,
        obj: Option<&Object>,
        old: Option<&Object>,
        with_mutating: bool,
        deadline: Instant,
    ) -> Result<(), ApiError> {
        // The namespace, read once for the webhooks' selectors and the policies (their
        // selectors and `namespaceObject`).
        let namespace = if snapshot.selects_namespaces() || !snapshot.policies.is_empty() {
            self.namespace_object(a, deadline).await?
        } else {
            None
        };
        let labels = namespace.as_ref().map(labels_of);
        if with_mutating {
            for (i, hook) in snapshot.mutating.iter().enumerate() {
                if let Some(matched) = self.matched(&hook.when, a, obj, old, labels.as_ref()) {
                    self.call(hook, &matched, a, obj, old, 0, i, deadline)
                        .await?;
                }
            }
        }
        if !snapshot.policies.is_empty() {
            self.validate_by_policies(snapshot, a, obj, old, namespace.as_ref(), deadline)
                .await?;
        }
        let calls = snapshot
            .validating
            .iter()
            .enumerate()
            .filter_map(|(i, hook)| {
                let matched = self.matched(&hook.when, a, obj, old, labels.as_ref())?;
                Some(async move {
                    self.call(hook, &matched, a, obj, old, 0, i, deadline)
                        .await
                        .map(|_| ())
                })
            });
        for outcome in futures::future::join_all(calls).await {
            outcome?;
        }
        Ok(())
    }

    /// The resource `hook` is called for on this write (the request's, or for `Equivalent` the
    /// version the hook names), if its rules and selectors choose it.
    fn matched(
        &self,
        when: &Match,
        a: &Attributes<'_>,
        obj: Option<&Object>,
        old: Option<&Object>,
        namespace_labels: Option<&BTreeMap<String, String>>,
    ) -> Option<Arc<ResourceInfo>> {
        let info = if rules_match(when, a, a.info, false) {
            a.info.clone()
        } else if when.equivalent {
            // The versions the hook names (a `*` would have matched already) that this
            // resource is served at.
            when.rules
                .iter()
                .flat_map(|r| &r.versions)
                .filter_map(|v| {
                    let gvr = GroupVersionResource::new(&a.info.gvr.group, v, &a.info.gvr.resource);
                    self.lookup(Some(&gvr)).ok()
                })
                .find(|r| rules_match(when, a, r, false))?
        } else {
            return None;
        };
        // A Namespace is chosen by its own labels; cluster-scoped objects by none.
        let namespace_ok = if is_namespace(a.info) {
            // Its new labels; a delete's, the old ones (Kubernetes' `GetNamespaceLabels`).
            match obj.or(old) {
                Some(o) => when.namespace_selector.matches(|k| label(o, k)),
                None => when.namespace_selector.is_empty(),
            }
        } else if a.info.namespaced {
            let empty = BTreeMap::new();
            let labels = namespace_labels.unwrap_or(&empty);
            when.namespace_selector.matches(|k| labels.get(k).cloned())
        } else {
            true
        };
        let object_ok = when.object_selector.is_empty()
            || [obj, old]
                .into_iter()
                .flatten()
                .any(|o| when.object_selector.matches(|k| label(o, k)));
        (namespace_ok && object_ok).then_some(info)
    }

    /// The labels of the namespace a write is in, from the watch cache (`None`: not
    /// namespaced, or no namespace selector asks).
    async fn namespace_labels(
        &self,
        snapshot: &Snapshot,
        a: &Attributes<'_>,
        deadline: Instant,
    ) -> Result<Option<BTreeMap<String, String>>, ApiError> {
        if !snapshot.selects_namespaces() {
            return Ok(None);
        }
        Ok(self
            .namespace_object(a, deadline)
            .await?
            .map(|ns| labels_of(&ns)))
    }

    /// The namespace a write is in, from the watch cache (`None`: not namespaced).
    async fn namespace_object(
        &self,
        a: &Attributes<'_>,
        deadline: Instant,
    ) -> Result<Option<Object>, ApiError> {
        if !a.info.namespaced || a.namespace.is_empty() {
            return Ok(None);
        }
        let info = self.lookup(Some(&GroupVersionResource::new("", "v1", "namespaces")))?;
        let key = self.store().key(&info, "", a.namespace);
        // A namespace made a moment ago may not be in the cache yet (Kubernetes' matcher
        // reads it live then); one that does not exist fails the write.
        let ns: Object = match self.store().get(&key, ReadFrom::Cache, deadline).await {
            Err(e) if e.reason == Reason::NotFound => {
                self.store().get(&key, ReadFrom::Etcd, deadline).await?
            }
            read => read?,
        };
        Ok(Some(ns))
    }

    /// Calls one webhook; a mutating one's answer applied to `obj`. `round` and `index` name
    /// the call in audit annotations, as Kubernetes' do.
    #[allow(clippy::too_many_arguments)]
    async fn call(
        &self,
        hook: &Hook,
        matched: &Arc<ResourceInfo>,
        a: &Attributes<'_>,
        obj: Option<&Object>,
        old: Option<&Object>,
        round: usize,
        index: usize,
        deadline: Instant,
    ) -> Result<Option<Object>, ApiError> {
        let target = Target::new(&a.info.gvr.group, &a.info.gvr.resource, a.name);
        if a.dry_run && !matches!(hook.side_effects.as_str(), "None" | "NoneOnDryRun") {
            return Err(ApiError::bad_request(
                target,
                format!("admission webhook {:?} does not support dry run", hook.name),
            ));
        }
        let sent_obj = match obj {
            Some(o) => Some(
                self.convert_for_webhook(o, a.info, matched, deadline)
                    .await?,
            ),
            None => None,
        };
        let sent_old = match old {
            Some(o) => Some(
                self.convert_for_webhook(o, a.info, matched, deadline)
                    .await?,
            ),
            None => None,
        };
        let review = review::request(a, matched, sent_obj.as_ref(), sent_old.as_ref());
        // matchConditions: any false skips the webhook; else an error is its failure policy's.
        let skip = if hook.match_conditions.is_empty() {
            None
        } else {
            match_conditions(
                hook,
                &review.request,
                sent_obj.as_ref(),
                sent_old.as_ref(),
                &self.cel_authorizer(a),
            )
        };
        if let Some(skip) = skip {
            return match (skip, hook.failure_policy) {
                (Ok(()), _) | (Err(_), FailurePolicy::Ignore) => Ok(None),
                (Err(why), FailurePolicy::Fail) => {
                    let message = format!("{} is forbidden: {why}", describe(&target));
                    Err(ApiError::new(Reason::Forbidden, target, message))
                }
            };
        }
        let started = Instant::now();
        let timeout = hook
            .timeout
            .min(deadline.saturating_duration_since(Instant::now()));
        let outcome = self
            .webhook_caller()
            .post(&hook.endpoint, &hook.ca, review.body, timeout, deadline)
            .await
            .map_err(|e| format!("failed to call webhook: {e}"))
            .and_then(|body| review::answer(&body, &review.uid, hook.mutating));
        let took = started.elapsed();
        let metrics = &self.webhooks().metrics;
        let answer = match outcome {
            Ok(answer) => answer,
            Err(e) => {
                metrics.webhook_call(&hook.name, hook.kind(), a.operation.as_str(), "error", took);
                return match hook.failure_policy {
                    FailurePolicy::Fail => Err(ApiError::new(
                        Reason::InternalError,
                        target,
                        format!(
                            "Internal error occurred: failed calling webhook {:?}: {e}",
                            hook.name
                        ),
                    )),
                    FailurePolicy::Ignore => {
                        tracing::warn!(webhook = %hook.name, error = %e, "failed calling webhook, failing open");
                        if let Some(audit) = a.requester.audit {
                            let kind = if hook.mutating {
                                "mutation"
                            } else {
                                "validating"
                            };
                            audit.insert(
                                format!("failed-open.{kind}.webhook.admission.k8s.io/round_{round}_index_{index}"),
                                hook.name.clone(),
                            );
                        }
                        Ok(None)
                    }
                };
            }
        };
        if let Some(w) = a.requester.warnings {
            for warning in &answer.warnings {
                w.push(warning.clone());
            }
        }
        if let Some(audit) = a.requester.audit {
            for (k, v) in &answer.audit_annotations {
                audit.insert(format!("{}/{k}", hook.name), v.clone());
            }
        }
        if !answer.allowed {
            metrics.webhook_call(
                &hook.name,
                hook.kind(),
                a.operation.as_str(),
                "rejected",
                took,
            );
            return Err(review::denied(&hook.name, target, &answer.status));
        }
        metrics.webhook_call(
            &hook.name,
            hook.kind(),
            a.operation.as_str(),
            "allowed",
            took,
        );
        let patched = answer.patch.is_some();
        let (Some(mut sent), Some(patch)) = (sent_obj, answer.patch) else {
            if obj.is_none() && patched {
                return Err(ApiError::new(
                    Reason::InternalError,
                    target,
                    format!(
                        "Internal error occurred: admission webhook {:?} attempted to modify the object, which is not supported for this operation",
                        hook.name
                    ),
                ));
            }
            return Ok(None);
        };
        let mut value = Value::Object(std::mem::take(sent.as_map_mut()));
        json_patch::patch(&mut value, &patch).map_err(|e| {
            ApiError::new(
                Reason::InternalError,
                target.clone(),
                format!(
                    "Internal error occurred: JSON patch of webhook {:?} cannot be applied: {e}",
                    hook.name
                ),
            )
        })?;
        let patched = Object::from_value(value).map_err(|e| {
            ApiError::new(
                Reason::InternalError,
                target.clone(),
                format!(
                    "Internal error occurred: webhook {:?} patched the object into no object: {e}",
                    hook.name
                ),
            )
        })?;
        if let Some(audit) = a.requester.audit {
            audit.insert(
                format!("mutation.webhook.admission.k8s.io/round_{round}_index_{index}"),
                serde_json::json!({"configuration": hook.configuration, "webhook": hook.name, "mutated": true})
                    .to_string(),
            );
        }
        Ok(Some(
            self.convert_for_webhook(&patched, matched, a.info, deadline)
                .await?,
        ))
    }

    /// `obj`, an object of `from`'s version, at `to`'s version (the same resource): what a
    /// webhook of `matchPolicy: Equivalent` is sent, and what its patch comes back as.
    async fn convert_for_webhook(
        &self,
        obj: &Object,
        from: &ResourceInfo,
        to: &ResourceInfo,
        deadline: Instant,
    ) -> Result<Object, ApiError> {
        // A subresource's object (a Scale, an Eviction) is the same in every version.
        if from.gvr == to.gvr || obj.kind() != from.kind {
            return Ok(obj.clone());
        }
        if from.converted_by_server {
            return self
                .at_version(from, &to.gvr.version, obj.clone(), deadline)
                .await;
        }
        let mut out = obj.clone();
        keel_api::conversion::to_stored(from, &mut out);
        keel_api::conversion::to_served(to, &mut out);
        Ok(out)
    }
}

/// What calls webhooks, cheap to clone and owned (a watch converts its events with it long
/// after the request that opened it): the store and resources to find a Service's endpoints
/// in, and the HTTPS clients.
#[derive(Clone)]
pub struct Caller {
    pub(in crate::registry) store: Arc<Store>,
    pub(in crate::registry) resources: Arc<Resources>,
    pub(in crate::registry) clients: Arc<Clients>,
}

impl Caller {
    /// POSTs `body` to the webhook at `endpoint`, trusting `ca`, within `timeout`: its answer,
    /// or why there is none, in Go's words (`Post "…": …`).
    pub async fn post(
        &self,
        endpoint: &Endpoint,
        ca: &[tokio_rustls::rustls::pki_types::CertificateDer<'static>],
        body: bytes::Bytes,
        timeout: std::time::Duration,
        deadline: Instant,
    ) -> Result<bytes::Bytes, String> {
        let (uri, server_name) = self.resolve_endpoint(endpoint, timeout, deadline).await?;
        self.clients
            .post(&uri, server_name.as_deref(), ca, body, timeout)
            .await
    }

    /// Where a webhook is called: its URL, or its Service's endpoint (the certificate then
    /// verified for `<service>.<namespace>.svc`).
    async fn resolve_endpoint(
        &self,
        endpoint: &Endpoint,
        timeout: std::time::Duration,
        deadline: Instant,
    ) -> Result<(http::Uri, Option<String>), String> {
        let with_timeout = |path_and_query: &str| {
            let sep = if path_and_query.contains('?') {
                '&'
            } else {
                '?'
            };
            format!("{path_and_query}{sep}timeout={}s", timeout.as_secs())
        };
        match endpoint {
            Endpoint::Url(uri) => {
                let pq = uri.path_and_query().map_or("/", |p| p.as_str());
                let url = format!(
                    "https://{}{}",
                    uri.authority().map_or("", |a| a.as_str()),
                    with_timeout(pq)
                );
                url.parse().map(|u| (u, None)).map_err(|e| format!("{e}"))
            }
            Endpoint::Service {
                namespace,
                name,
                port,
                path,
            } => {
                let host = format!("{name}.{namespace}.svc");
                let shown = format!("https://{host}:{port}{}", with_timeout(path_or_root(path)));
                let address = self
                    .service_endpoint(namespace, name, *port, deadline)
                    .await
                    .map_err(|e| format!("Post {shown:?}: {e}"))?;
                let url = format!("https://{address}{}", with_timeout(path_or_root(path)));
                url.parse()
                    .map(|u| (u, Some(host)))
                    .map_err(|e| format!("Post {shown:?}: {e}"))
            }
        }
    }

    /// An address of a ready endpoint of Service `namespace/name` for its port `port`
    /// (`host:port`), from its Endpoints, else its EndpointSlices.
    async fn service_endpoint(
        &self,
        namespace: &str,
        name: &str,
        port: u16,
        deadline: Instant,
    ) -> Result<String, String> {
        let get = |resource: &'static str, n: String| async move {
            let info = self
                .resources
                .lookup(Some(&GroupVersionResource::new("", "v1", resource)))
                .ok()?;
            let key = self.store.key(&info, namespace, &n);
            self.store.get(&key, ReadFrom::Cache, deadline).await.ok()
        };
        let Some(service): Option<Object> = get("services", name.to_string()).await else {
            return Err(format!("service \"{name}\" not found"));
        };
        let ports = field(service.as_map(), "spec")["ports"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let Some(service_port) = ports
            .iter()
            .find(|p| p["port"].as_i64() == Some(i64::from(port)))
        else {
            return Err(format!("service \"{namespace}/{name}\" has no port {port}"));
        };
        let port_name = service_port["name"].as_str().unwrap_or_default();
        if let Some(endpoints) = get("endpoints", name.to_string()).await {
            for subset in field(endpoints.as_map(), "subsets")
                .as_array()
                .into_iter()
                .flatten()
            {
                let Some(p) = subset["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|p| p["name"].as_str().unwrap_or_default() == port_name)
                else {
                    continue;
                };
                let (Some(number), Some(ip)) =
                    (p["port"].as_i64(), subset["addresses"][0]["ip"].as_str())
                else {
                    continue;
                };
                return Ok(host_port(ip, number));
            }
        }
        if let Some(address) = self
            .slice_endpoint(namespace, name, port_name, deadline)
            .await
        {
            return Ok(address);
        }
        Err(format!("no endpoints available for service \"{name}\""))
    }

    /// A ready endpoint of the EndpointSlices of Service `namespace/name` for the port named
    /// `port_name`.
    async fn slice_endpoint(
        &self,
        namespace: &str,
        name: &str,
        port_name: &str,
        _deadline: Instant,
    ) -> Option<String> {
        let info = self
            .resources
            .lookup(Some(&GroupVersionResource::new(
                "discovery.k8s.io",
                "v1",
                "endpointslices",
            )))
            .ok()?;
        let (slices, _) = self.store.cached_at(&info, |_| true)?;
        for slice in slices.iter().filter(|s| {
            s.namespace() == namespace
                && label(s, "kubernetes.io/service-name").as_deref() == Some(name)
        }) {
            let map = slice.as_map();
            let Some(number) = field(map, "ports")
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["name"].as_str().unwrap_or_default() == port_name)
                .and_then(|p| p["port"].as_i64())
            else {
                continue;
            };
            for e in field(map, "endpoints").as_array().into_iter().flatten() {
                if e["conditions"]["ready"].as_bool() == Some(false) {
                    continue;
                }
                if let Some(ip) = e["addresses"][0].as_str() {
                    return Some(host_port(ip, number));
                }
            }
        }
        None
    }
}

/// Whether `hook`'s `matchConditions` keep it from being called: `None` when they all hold
/// (it is called); `Some(Ok(()))` when one is false (skipped); `Some(Err(why))` when none is
/// false but one failed to evaluate.
fn match_conditions(
    hook: &Hook,
    request: &Value,
    obj: Option<&Object>,
    old: Option<&Object>,
    authorizer: &keel_cel::Authorizer,
) -> Option<Result<(), String>> {
    if hook.match_conditions.is_empty() {
        return None;
    }
    let json = |o: Option<&Object>| o.map_or(Value::Null, |o| Value::Object(o.as_map().clone()));
    let (object, old_object) = (json(obj), json(old));
    let vars = [
        ("object", keel_cel::Binding::Json(&object)),
        ("oldObject", keel_cel::Binding::Json(&old_object)),
        ("request", keel_cel::Binding::Json(request)),
        ("authorizer", keel_cel::Binding::Authorizer(authorizer)),
    ];
    let mut errors = Vec::new();
    for (expression, condition) in &hook.match_conditions {
        match condition.evaluate_bool(&vars) {
            Ok(true) => {}
            Ok(false) => return Some(Ok(())),
            Err(e) => errors.push(format!("expression '{expression}' resulted in error: {e}")),
        }
    }
    // Kubernetes' aggregate: one error bare, several as `[e1, e2]`.
    match errors.len() {
        0 => None,
        1 => Some(Err(errors.remove(0))),
        _ => Some(Err(format!("[{}]", errors.join(", ")))),
    }
}

/// `configmaps "x"`, as a `Forbidden` message names what it is about.
fn describe(t: &Target) -> String {
    let what = if t.group.is_empty() {
        t.kind.clone()
    } else {
        format!("{}.{}", t.kind, t.group)
    };
    if t.name.is_empty() {
        what
    } else {
        format!("{what} {:?}", t.name)
    }
}

/// A field of an object's map, `Null` when absent (indexing a `Map` panics on a missing key).
fn field<'a>(map: &'a serde_json::Map<String, Value>, key: &str) -> &'a Value {
    map.get(key).unwrap_or(&Value::Null)
}

fn path_or_root(path: &str) -> &str {
    if path.is_empty() { "/" } else { path }
}

fn host_port(ip: &str, port: i64) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

pub(super) fn is_namespace(info: &ResourceInfo) -> bool {
    info.gvr.group.is_empty() && info.gvr.resource == "namespaces"
}

fn label(obj: &Object, key: &str) -> Option<String> {
    obj.labels()?.get(key)?.as_str().map(str::to_string)
}

fn labels_of(obj: &Object) -> BTreeMap<String, String> {
    obj.labels()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

/// Whether `when`'s rules name `a`'s operation, name and subresource on `info` (Kubernetes'
/// `rules.Matcher`, and a policy's `excludeResourceRules`); `any_version`: whatever the
/// version (what `Equivalent` may reach).
fn rules_match(when: &Match, a: &Attributes<'_>, info: &ResourceInfo, any_version: bool) -> bool {
    rules_name(
        when,
        a.operation,
        info,
        a.subresource,
        Some(a.name),
        any_version,
    )
}

/// [`rules_match`] for `name` (`None`: any name, as when no object is at hand yet).
fn rules_name(
    when: &Match,
    op: Operation,
    info: &ResourceInfo,
    subresource: &str,
    name: Option<&str>,
    any_version: bool,
) -> bool {
    // Writes of the configurations themselves are never sent to webhooks nor policies
    // (Kubernetes' `IsExemptAdmissionConfigurationResource`): a webhook that is down cannot
    // lock its own configuration in place.
    if is_configuration(info) {
        return false;
    }
    let one = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
    let resource = if subresource.is_empty() {
        info.gvr.resource.clone()
    } else {
        format!("{}/{subresource}", info.gvr.resource)
    };
    let cluster_scoped = !info.namespaced;
    let applies = |r: &Rule, names_unknown: bool| {
        one(&r.operations, op.as_str())
            && one(&r.groups, &info.gvr.group)
            && (any_version || one(&r.versions, &info.gvr.version))
            && r.resources
                .iter()
                .any(|pattern| resource_matches(pattern, &resource))
            && match r.scope.as_str() {
                "Cluster" => cluster_scoped,
                "Namespaced" => !cluster_scoped,
                _ => true,
            }
            && (r.names.is_empty()
                || name.map_or(names_unknown, |n| r.names.iter().any(|x| x == n)))
    };
    // An exclusion by name excludes nothing while the name is unknown.
    let included = if when.rules.is_empty() {
        when.all_without_rules
    } else {
        when.rules.iter().any(|r| applies(r, true))
    };
    included && !when.exclude.iter().any(|r| applies(r, false))
}

/// Kubernetes' resource patterns (`rules.Matcher.resource`): `*` every resource (not
/// subresources), `*/*` everything, `pods/*` a resource and its subresources (the resource
/// itself too), `*/status` a subresource of every resource.
fn resource_matches(pattern: &str, resource: &str) -> bool {
    if pattern == "*/*" || pattern == resource {
        return true;
    }
    let (res, sub) = resource.split_once('/').unwrap_or((resource, ""));
    let (p_res, p_sub) = pattern.split_once('/').unwrap_or((pattern, ""));
    (p_res == "*" || p_res == res) && (p_sub == "*" || p_sub == sub)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_patterns_match_as_kubernetes_matches_them() {
        let table = [
            ("*", "pods", true),
            ("*", "pods/status", false),
            ("*/*", "pods/status", true),
            ("*/*", "pods", true),
            ("pods", "pods", true),
            ("pods", "pods/status", false),
            ("pods/*", "pods/status", true),
            ("pods/*", "pods", true),
            ("*/status", "deployments/status", true),
            ("*/status", "deployments/scale", false),
            ("deployments/scale", "deployments/scale", true),
            ("pods/status", "pods/eviction", false),
        ];
        for (pattern, resource, want) in table {
            assert_eq!(
                resource_matches(pattern, resource),
                want,
                "{pattern} on {resource}"
            );
        }
    }
}
