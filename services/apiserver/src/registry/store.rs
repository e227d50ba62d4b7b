//! The registry store: every verb of every resource, with the resource's rules (strategy,
//! validation, admission, deletion) on top of storage, as Kubernetes'
//! `registry/generic/registry.Store`. What the client sent arrives parsed by the request layer,
//! except `resourceVersion`s, which are parsed here with storage's parser.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use keel_api::{ApiError, GroupVersionResource, Metadata, Object, Reason, ResourceInfo};
use serde_json::Value;
use tokio::time::Instant;

use super::admission;
use super::allocator::{Allocators, ServiceRanges};
use super::crd;
use super::deletion::{self, DeleteOptions};
use super::errors::kind_target;
use super::generate_name;
use super::initializers::{self, CONFIG_GROUP, CONFIG_VERSION, Initializers};
use super::kinds::Kind;
use super::managed;
use super::patch::{self, PatchType};
use super::rbac::{self, GrantCheck, Policies};
use super::resources::Resources;
use super::strategy::{self, Subresource};
use super::webhooks::{Attributes, Caller, Operation, Requester, Webhooks};
use crate::auth::User;
use crate::metrics::Metrics;
use crate::storage::FRESH_WAIT;
use crate::storage::resource_version;
use crate::storage::{
    Change, Coalescer, Draft, Filter, ListQuery, ListResult, Mutation, ReadFrom, Store,
    UpdateOptions, WatchEventKind, WatchStream, target, write_entries,
};

/// Who writes, and how: what every write takes besides its object.
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    /// The user, when authorization is on (an RBAC object may grant only what its writer
    /// holds: `rbac::GrantCheck`).
    pub user: Option<&'a User>,
    /// The manager `managedFields` records: the request's `fieldManager`, else its
    /// User-Agent's product.
    pub manager: &'a str,
    /// Answer what would be written, writing nothing (`dryRun=All`).
    pub dry_run: bool,
    /// An apply takes the fields other managers own instead of refusing (`force=true`).
    pub force: bool,
    /// Record the write in `managedFields`. Off only for the second try of a write that was
    /// too large with them: it is stored with none, as Kubernetes does (not an apply's).
    pub track: bool,
    /// Who sent it and where admission's warnings and audit annotations go (what webhooks
    /// are told).
    pub requester: Requester<'a>,
}

impl Write<'_> {
    /// A client's write by `manager`, recorded in `managedFields`.
    pub fn by<'a>(user: Option<&'a User>, manager: &'a str, dry_run: bool) -> Write<'a> {
        Write {
            user,
            manager,
            dry_run,
            force: false,
            track: true,
            requester: Requester::default(),
        }
    }

    /// A write of the API server's own.
    pub fn server() -> Write<'static> {
        Write {
            user: None,
            manager: managed::SERVER_MANAGER,
            dry_run: false,
            force: false,
            track: true,
            requester: Requester::default(),
        }
    }

    /// The second try of a write too large with its `managedFields`: stored with none.
    fn untracked(self) -> Self {
        Write {
            track: false,
            ..self
        }
    }

    /// The same write, answered but not stored.
    pub fn dry_run(self) -> Self {
        Write {
            dry_run: true,
            ..self
        }
    }
}

/// How long the conversion of one watch event may take.
const WATCH_CONVERSION_TIMEOUT: Duration = Duration::from_secs(30);

/// How long readiness waits for etcd to answer.
const READINESS_TIMEOUT: Duration = Duration::from_secs(2);

/// What a List asks for: which objects, a page of them, at which revision.
#[derive(Debug, Default)]
pub struct ListOptions {
    pub filter: Filter,
    /// At most this many items (0: all).
    pub limit: i64,
    pub continue_token: String,
    pub resource_version: String,
    pub resource_version_match: String,
}

/// How long a request's read of the CRDs may take before it answers from the watch's view.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(2);
/// Reads of etcd's CRDs for requests ([`Registry::catch_up_custom_resources`]): one at a time,
/// numbered, so that requests waiting together share one.
#[derive(Default)]
pub struct CrdSync {
    lock: tokio::sync::Mutex<()>,
    /// Reads begun.
    started: AtomicU64,
    /// The number of the last read done.
    done: AtomicU64,
}

/// The registry: the served resources and their verbs.
pub struct Registry {
    resources: Arc<Resources>,
    store: Arc<Store>,
    /// PATCHes without a precondition go through it: one compare-and-swap per batch.
    coalescer: Arc<Coalescer>,
    /// Set once the built-in namespaces exist (a condition of readiness).
    bootstrapped: tokio::sync::watch::Sender<bool>,
    /// The RBAC policy this replica follows, shared with the request layer's authorizer:
    /// read by the escalation check of roles and bindings, and by the access reviews.
    policies: Arc<Policies>,
    /// Fresh reads of the CRDs for requests ([`Registry::catch_up_custom_resources`]).
    crd_sync: CrdSync,
    /// The Service cluster IP and node port ranges, shared with every replica through etcd.
    allocators: Arc<Allocators>,
    /// Set once the repair controller has written the ranges from the Services (a condition
    /// of readiness: until then allocations are refused).
    ranges_repaired: tokio::sync::watch::Sender<bool>,
    /// The admission webhooks this replica calls (`registry::webhooks`).
    webhooks: Webhooks,
}

impl Registry {
    pub fn new(
        resources: Arc<Resources>,
        store: Arc<Store>,
        policies: Arc<Policies>,
        max_queued_patches: usize,
        ranges: ServiceRanges,
        metrics: Metrics,
    ) -> Arc<Registry> {
        Arc::new(Registry {
            webhooks: Webhooks::new(metrics.clone()),
            coalescer: Coalescer::new(store.clone(), max_queued_patches, metrics),
            allocators: Allocators::new(store.clone(), ranges),
            resources,
            store,
            bootstrapped: tokio::sync::watch::Sender::new(false),
            policies,
            crd_sync: Default::default(),
            ranges_repaired: tokio::sync::watch::Sender::new(false),
        })
    }

    /// The answer to a write of `obj` (as stored) through `info`: a webhook configuration
    /// once this replica has it in force ([`Registry::settle`]), at the version `info` names.
    async fn written(
        &self,
        info: &ResourceInfo,
        obj: Object,
        dry_run: bool,
        deadline: Instant,
    ) -> Result<Object, ApiError> {
        self.settle(info, &obj, dry_run, deadline).await;
        self.at_request_version(info, crd::to_request_version(info, obj), deadline)
            .await
    }

    /// The custom resource of `info` when its objects are converted by a webhook.
    fn converted_custom(&self, info: &ResourceInfo) -> Option<Arc<crd::CustomResource>> {
        self.resources
            .custom(&info.gvr)
            .filter(|_| info.converted_by_server)
    }

    /// `obj`, stored, at the version `info` names: converted by its CRD's webhook when it has
    /// one (others were converted as they were read).
    pub(super) async fn at_request_version(
        &self,
        info: &ResourceInfo,
        obj: Object,
        deadline: Instant,
    ) -> Result<Object, ApiError> {
        self.at_version(info, &info.gvr.version, obj, deadline)
            .await
    }

    /// `obj`, at any version of `info`'s resource, at `version`, converted by its CRD's
    /// webhook (a resource without one is left as it is).
    pub(super) async fn at_version(
        &self,
        info: &ResourceInfo,
        version: &str,
        obj: Object,
        deadline: Instant,
    ) -> Result<Object, ApiError> {
        let Some(custom) = self.converted_custom(info) else {
            return Ok(obj);
        };
        let mut converted = self
            .webhook_caller()
            .convert_objects(
                &custom.info,
                custom.conversion.as_deref(),
                version,
                vec![obj],
                deadline,
            )
            .await?;
        converted
            .pop()
            .ok_or_else(|| ApiError::internal("a conversion returned no object"))
    }

    /// The version objects of `info`'s resource are stored at (its own for a built-in one).
    pub(super) fn storage_version_of(&self, info: &ResourceInfo) -> String {
        self.resources
            .custom(&info.gvr)
            .map_or_else(|| info.gvr.version.clone(), |c| c.storage_version.clone())
    }

    /// The admission webhooks.
    pub(super) fn webhooks(&self) -> &Webhooks {
        &self.webhooks
    }

    /// What calls webhooks, to keep (a watch's conversions).
    pub(super) fn webhook_caller(&self) -> Caller {
        Caller {
            store: self.store.clone(),
            resources: self.resources.clone(),
            clients: self.webhooks.clients().clone(),
        }
    }

    /// The Service ranges.
    pub(super) fn allocators(&self) -> &Arc<Allocators> {
        &self.allocators
    }

    pub(super) fn ranges_repaired(&self) -> bool {
        *self.ranges_repaired.borrow()
    }

    /// A receiver that turns true once the ranges are repaired.
    pub(super) fn ranges_repaired_changes(&self) -> tokio::sync::watch::Receiver<bool> {
        self.ranges_repaired.subscribe()
    }

    pub(super) fn set_ranges_repaired(&self) {
        self.ranges_repaired.send_replace(true);
    }

    /// The RBAC policy this replica follows.
    pub fn policies(&self) -> &Arc<Policies> {
        &self.policies
    }

    /// The resource a request names, or `NotFound` naming it.
    pub fn lookup(
        &self,
        gvr: Option<&GroupVersionResource>,
    ) -> Result<Arc<ResourceInfo>, ApiError> {
        self.resources.lookup(gvr)
    }

    /// The rules of a served resource's kind.
    pub(super) fn kind(&self, info: &ResourceInfo) -> Arc<dyn Kind> {
        self.resources.kind(&info.gvr)
    }

    /// Every served resource, sorted by group and name.
    pub fn resources(&self) -> Vec<Arc<ResourceInfo>> {
        self.resources.all()
    }

    /// The served resources that hold each stored object once: those whose caches load at
    /// start, without the versions serving another's objects converted (a v1beta1 CRD).
    pub fn stored_resources(&self) -> Vec<Arc<ResourceInfo>> {
        self.resources.cached_at_start()
    }

    /// Whether `gvr` is a custom resource (a CRD's), not a built-in one.
    pub fn is_custom(&self, gvr: &GroupVersionResource) -> bool {
        self.resources.custom(gvr).is_some()
    }

    /// The `resourceVersion` of the CRD a custom resource is served from (`None`: built in).
    pub fn custom_version(&self, gvr: &GroupVersionResource) -> Option<String> {
        self.resources.custom(gvr).map(|c| c.crd_version.clone())
    }

    /// A custom resource's `additionalPrinterColumns` (none for a built-in one).
    pub fn printer_columns(&self, gvr: &GroupVersionResource) -> Vec<Value> {
        self.resources.kind(gvr).printer_columns().to_vec()
    }

    /// The fields of `obj` (an object of the resource, or a merge or strategic merge patch of
    /// one) its kind's schema does not declare: what `fieldValidation` warns of or refuses.
    pub fn unknown_fields(
        &self,
        info: &ResourceInfo,
        obj: &serde_json::Map<String, Value>,
    ) -> Vec<String> {
        self.resources.kind(&info.gvr).unknown_fields(info, obj)
    }

    /// A custom resource's `openAPIV3Schema`, if it has one.
    pub fn openapi_schema(&self, gvr: &GroupVersionResource) -> Option<Value> {
        self.resources.kind(gvr).openapi_schema()
    }

    /// Whether this replica can serve: storage is ready and the built-in namespaces exist;
    /// else why not.
    pub async fn readiness(&self) -> Result<(), String> {
        self.store
            .readiness(Instant::now() + READINESS_TIMEOUT)
            .await?;
        if !self.is_bootstrapped() {
            return Err("creating the built-in namespaces and the bootstrap policy".into());
        }
        if !self.policies.is_ready() {
            return Err("reading the RBAC policy".into());
        }
        if !self.ranges_repaired() {
            return Err("initializing the Service cluster IP and node port ranges".into());
        }
        Ok(())
    }

    pub(super) fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub(super) fn is_bootstrapped(&self) -> bool {
        *self.bootstrapped.borrow()
    }

    /// A receiver that turns true once the built-in namespaces exist.
    pub fn bootstrapped(&self) -> tokio::sync::watch::Receiver<bool> {
        self.bootstrapped.subscribe()
    }

    pub(super) fn set_bootstrapped(&self) {
        self.bootstrapped.send_replace(true);
    }

    /// Serves the custom resources of the CRDs etcd has now, read fresh: what a request for a
    /// resource this replica does not serve yet (or serves as terminating) does before it
    /// answers, so that a CRD said to be Established, or a deletion said to be done, holds on
    /// every replica at once rather than when its watch catches up. One read at a time, of at
    /// most [`CATCH_UP_TIMEOUT`]; a request that waited for a read begun after it came takes
    /// that read's outcome (a failed read too: with etcd unreachable, requests queued behind
    /// one another do not each wait in turn).
    pub async fn catch_up_custom_resources(&self, deadline: Instant) -> Result<(), ApiError> {
        let ticket = self.crd_sync.started.load(Ordering::Acquire);
        let _one = self.crd_sync.lock.lock().await;
        if self.crd_sync.done.load(Ordering::Acquire) > ticket {
            return Ok(());
        }
        let n = self.crd_sync.started.fetch_add(1, Ordering::AcqRel) + 1;
        let read = self.read_custom_resources(deadline).await;
        self.crd_sync.done.store(n, Ordering::Release);
        read
    }

    async fn read_custom_resources(&self, deadline: Instant) -> Result<(), ApiError> {
        let deadline = deadline.min(Instant::now() + CATCH_UP_TIMEOUT);
        let info = self.lookup(Some(&crd::crd_gvr()))?;
        // Most reads find the served resources current: the CRDs' names and versions, read
        // without the CRDs themselves, say so.
        let versions = self.store.versions(&info, deadline).await?;
        let served = self.resources.custom_by_crd();
        if versions.len() == served.len()
            && versions
                .iter()
                .all(|(name, rv)| served.get(name).is_some_and(|rs| made_from(rs, rv)))
        {
            return Ok(());
        }
        let list = self.list(&info, ListOptions::default(), deadline).await?;
        let crds: Vec<Object> = list
            .items
            .iter()
            .filter_map(|b| Object::from_slice(b).ok())
            .collect();
        let crds: Vec<crd::Crd<'_>> = crds.iter().map(crd::Crd::Parsed).collect();
        self.serve_crds(&crds, list.revision, "etcd, for a request");
        Ok(())
    }

    /// Serves the custom resources of `crds`, the CRDs at etcd revision `revision` as `from`
    /// saw them (unless what is served comes from a newer revision). Returns the CRDs being
    /// deleted that still hold the cleanup finalizer.
    pub(super) fn serve_crds(
        &self,
        crds: &[crd::Crd<'_>],
        revision: i64,
        from: &str,
    ) -> Vec<Object> {
        // A CRD unchanged since it was served keeps its resources and is not even parsed: a
        // change of one CRD reads that one, not all of them. Terminating ones are parsed for
        // their cleanup.
        let served = self.resources.custom_by_crd();
        let mut resources = Vec::new();
        let mut deleting = Vec::new();
        for c in crds {
            let obj = match served
                .get(c.name())
                .filter(|rs| made_from(rs, &c.version()))
            {
                Some(rs) => {
                    match c.source() {
                        // Served from a CRD read from etcd: read the schema from the watch
                        // cache's copy from now on, not a copy of its own.
                        Some(source) if !rs.iter().all(|r| r.reads_from(source)) => resources
                            .extend(rs.iter().map(|r| Arc::new(r.with_source(source.clone())))),
                        _ => resources.extend(rs.iter().cloned()),
                    }
                    if !rs.iter().any(|r| r.terminating) {
                        continue;
                    }
                    c.object()
                }
                None => {
                    let obj = c.object();
                    if let Some(o) = &obj {
                        let served = match c.source() {
                            Some(source) => crd::resources_from(o, source.clone()),
                            None => crd::resources(o),
                        };
                        resources.extend(served.into_iter().map(Arc::new));
                    }
                    obj
                }
            };
            if let Some(obj) = obj.filter(|o| {
                o.deletion_timestamp().is_some() && o.finalizers().contains(&crd::CLEANUP_FINALIZER)
            }) {
                deleting.push(obj);
            }
        }
        let (added, removed) = self.resources.set_custom(resources, revision);
        for gvr in &added {
            tracing::info!(resource = %gvr, from, "serving a custom resource");
        }
        for gvr in &removed {
            tracing::info!(resource = %gvr, from, "no longer serving a custom resource");
        }
        deleting
    }

    /// The resource a request names; one this replica does not serve yet is looked for in
    /// etcd's CRDs first ([`Registry::catch_up_custom_resources`]).
    pub async fn lookup_fresh(
        &self,
        gvr: Option<&GroupVersionResource>,
        deadline: Instant,
    ) -> Result<Arc<keel_api::ResourceInfo>, ApiError> {
        match self.lookup(gvr) {
            Err(e) if e.reason == keel_api::Reason::NotFound && gvr.is_some() => {
                self.catch_up_custom_resources(deadline).await?;
                self.lookup(gvr)
            }
            found => found,
        }
    }

    /// Creates an object: the kind's create rules and validation, admission (the namespace
    /// lifecycle; the initializers it gets pending), and, last as in Kubernetes (where storage
    /// checks it), no `resourceVersion` chosen by the client. An object with initializers
    /// pending is returned at once, uninitialized. Its manager owns every field it has.
    pub async fn create(
        &self,
        info: &Arc<ResourceInfo>,
        obj: Object,
        w: Write<'_>,
        deadline: Instant,
    ) -> Result<Object, ApiError> {
        match self
            .create_recorded(info, obj.clone(), w, None, "", deadline)
            .await
        {
            Err(e) if too_large(&e, w) => {
                self.create_recorded(info, obj, w.untracked(), None, "", deadline)
                    .await
            }
            created => created,
        }
    }

    /// Creates the object an apply of `body` by `w.manager` makes of nothing (create-on-apply,
    /// docs/server-side-apply.md §1.3): its manager owns what it applied, and no default.
    #[allow(clippy::too_many_arguments)]
    pub async fn create_on_apply(
        &self,
        info: &Arc<ResourceInfo>,
        namespace: &str,
        name: &str,
        sub: Subresource,
        body: &[u8],
        w: Write<'_>,
        deadline: Instant,
    ) -> Result<Object, ApiError> {
        let t = target(info, name);
        if sub != Subresource::Main {
            return Err(ApiError::not_found(t));
        }
        let config = patch::parse(&t, PatchType::Apply, body)?;
        let kind = self.resources.kind(&info.gvr);
        let apply = managed::Apply {
            manager: w.manager.to_string(),
            force: w.force,
            sub,
            config,
        };
        let applied = managed::apply(info, &*kind, &t, &apply, None)?;
        let mut obj = applied.object;
        if obj.name() != name {
            return Err(ApiError::bad_request(
                t,
                format!(
                    "the name of the object ({}) does not match the name on the URL ({})",
                    keel_api::shorten_name(obj.name()),
                    keel_api::shorten_name(name)
                ),
            ));
        }
        if info.namespaced {
            if obj.namespace().is_empty() {
                obj.set_meta_str("namespace", namespace);
            } else if obj.namespace() != namespace {
                return Err(ApiError::bad_request(
                    t,
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        }
        if !obj.uid().is_empty() {
            return Err(ApiError::conflict(
                t,
                format!(
                    "uid mismatch: the provided object specified uid {}, and no existing object was found",
                    obj.uid()
                ),
            ));
        }
        // Its grants are checked as the request was authorized: by the name on its URL.
        self.create_recorded(info, obj, w, Some(applied.entries), name, deadline)
            .await
    }

    /// A create whose `managedFields` are `applied` (an apply's), else its manager's Update;
    /// `request_name` is the name the request was authorized for (`""` for a POST).
    async fn create_recorded(
        &self,
        info: &Arc<ResourceInfo>,
        mut obj: Object,
        w: Write<'_>,
        applied: Option<Vec<keel_patch::managed::Entry>>,
        request_name: &str,
        deadline: Instant,
    ) -> Result<Object, ApiError> {
        let (writer, dry_run) = (w.user, w.dry_run);
        let t = target(info, obj.name());
        if self
            .resources
            .custom(&info.gvr)
            .is_some_and(|c| c.terminating)
        {
            // The CRD may be gone, and made again, further than this replica's watch has
            // seen: judged by etcd's CRDs now.
            self.catch_up_custom_resources(deadline).await?;
            if let Some(custom) = self.resources.custom(&info.gvr).filter(|c| c.terminating) {
                return Err(ApiError::new(
                    keel_api::Reason::MethodNotAllowed,
                    t,
                    format!(
                        "create not allowed while custom resource definition {} is terminating",
                        custom.crd
                    ),
                ));
            }
        }
        let kind = self.resources.kind(&info.gvr);
        // The mutating webhooks see the object as the client sent it, before its name is
        // generated and its system fields set (Kubernetes' order: admission, then
        // `BeforeCreate`).
        let webhooks = self.webhook_snapshot(deadline).await?;
        let hooked = webhooks.may_apply(Operation::Create, info, "");
        let (namespace, name) = (obj.namespace().to_string(), obj.name().to_string());
        let mut attributes = Attributes {
            operation: Operation::Create,
            info,
            subresource: "",
            namespace: &namespace,
            name: &name,
            dry_run,
            requester: w.requester,
            manager: w.manager,
        };
        if hooked && webhooks.has_mutating() {
            obj = self
                .admit_by_webhooks(&webhooks, &attributes, obj, None, deadline)
                .await?;
            if info.namespaced && obj.namespace() != namespace {
                // Authorized for the request's namespace: a webhook may not move it.
                return Err(ApiError::bad_request(
                    t,
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        }
        let requested_rv = obj.resource_version().to_string();
        let generate = generate_name::base(&obj);
        if let Some(base) = &generate {
            generate_name::name(&mut obj, base);
        }
        admission::prepare_create(info, &*kind, &mut obj);
        if let Some(check) = self
            .grant_check(
                info,
                &*kind,
                writer,
                obj.namespace(),
                request_name,
                Some(&obj),
                deadline,
            )
            .await?
        {
            check.confirm(&obj, None)?;
        }
        admission::validate_create(info, &*kind, &mut obj)?;
        match applied {
            Some(entries) => write_entries(&mut obj, &entries),
            None if w.track => managed::record_create(&*kind, w.manager, &mut obj),
            None => write_entries(&mut obj, &[]),
        }
        let namespace = async {
            if !info.namespaced {
                return Ok(());
            }
            let namespaces = self.namespaces()?;
            admission::require_namespace(&self.store, &namespaces, &t, obj.namespace(), deadline)
                .await
        };
        let (namespace, initializers) = tokio::join!(namespace, self.initializers(deadline));
        namespace?;
        if hooked {
            let generated = obj.name().to_string();
            attributes.name = &generated;
            let view = keel_api::conversion::served(info, &obj);
            self.validate_by_webhooks(&webhooks, &attributes, Some(&view), None, false, deadline)
                .await?;
        }
        let pending = initializers.pending_for_create(info, &obj);
        initializers::set_pending(&mut obj, &pending);
        strategy::check_create_resource_version(&t, &requested_rv)?;
        kind.to_storage_version(&mut obj);
        let mut obj = self
            .at_version(info, &self.storage_version_of(info), obj, deadline)
            .await?;
        let allocates = kind
            .allocations()
            .is_some_and(|a| !a.claims(&obj).is_empty());
        let created = if allocates {
            self.create_allocating(info, kind, obj, generate, dry_run, deadline)
                .await?
        } else {
            store_new(
                &self.store,
                info,
                &mut obj,
                generate.as_deref(),
                dry_run,
                deadline,
            )
            .await?
        };
        self.written(info, created, dry_run, deadline).await
    }

    /// Reads an object: from etcd, or from the watch cache for `resourceVersion: "0"`. Any other
    /// version is accepted as "not older than" and read from etcd. An object still being
    /// initialized is `NotFound` unless `include_uninitialized`.
    pub async fn get(
        &self,
        info: &Arc<ResourceInfo>,
        namespace: &str,
        name: &str,
        resource_version: &str,
        include_uninitialized: bool,
        deadline: Instant,
    ) -> Result<Object, ApiError> {
        let t = target(info, name);
        let from = match resource_version::parse(resource_version) {
            Ok(Some(0)) => ReadFrom::Cache,
            Ok(Some(rv)) => {
                self.store.wait_for_revision(info, rv, deadline).await?;
                ReadFrom::Etcd
            }
            Ok(None) => ReadFrom::Etcd,
            Err(e) => return Err(e.bad_request(&t)),
        };
        let key = self.store.key(info, namespace, name);
        let mut obj: Object = self.store.get(&key, from, deadline).await?;
        if !include_uninitialized && !obj.is_initialized() {
            return Err(ApiError::not_found(t));
        }
        if let Some(custom) = self.read_defaults(info) {
            let mut value = Value::Object(std::mem::take(obj.as_map_mut()));
            crd::default_read(&custom, &mut value);
            if let Value::Object(map) = value {
                *obj.as_map_mut() = map;
            }
        }
        self.at_request_version(info, obj, deadline).await
    }

    /// The custom resource whose schema a read of `info` defaults its objects by, when that
    /// schema has defaults: the version the objects are stored at (Kubernetes defaults what it
    /// decodes from etcd by the schema of the version it was stored at), else the one read.
    fn read_defaults(&self, info: &ResourceInfo) -> Option<Arc<crd::CustomResource>> {
        let custom = self.resources.custom(&info.gvr)?;
        let stored =
            GroupVersionResource::new(&info.gvr.group, &custom.storage_version, &info.gvr.resource);
        let source = self.resources.custom(&stored).unwrap_or(custom);
        source
            .schema()
            .is_some_and(|s| s.has_defaults())
            .then_some(source)
    }

    /// The initializers in force, read from etcd so that a configuration applies from the
    /// moment its own create is answered. If they cannot be read, creates go on without them:
    /// a broken admission configuration must not stop every create.
    async fn initializers(&self, deadline: Instant) -> Initializers {
        let gvr =
            GroupVersionResource::new(CONFIG_GROUP, CONFIG_VERSION, initializers::CONFIG_RESOURCE);
        let Ok(info) = self.resources.lookup(Some(&gvr)) else {
            return Initializers::default();
        };
        match self
            .store
            .list(&info, &ListQuery::default(), deadline)
            .await
        {
            Ok(list) => {
                let configs: Vec<Value> = list
                    .items
                    .iter()
                    .filter_map(|i| serde_json::from_slice(i).ok())
                    .collect();
                Initializers::from_configs(&configs)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the initializer configurations; creating without initializers");
                Initializers::default()
            }
        }
    }

    /// Lists objects (`resource_version` as the client sent it: `"0"` may be served from the
    /// cache; with `resource_version_match` `"Exact"`, read at exactly that revision).
    pub async fn list(
        &self,
        info: &Arc<ResourceInfo>,
        opts: ListOptions,
        deadline: Instant,
    ) -> Result<ListResult, ApiError> {
        let t = target(info, "");
        let resource_version =
            resource_version::parse(&opts.resource_version).map_err(|e| e.bad_request(&t))?;
        let exact = match opts.resource_version_match.as_str() {
            "" | "NotOlderThan" => false,
            "Exact" if resource_version.is_some_and(|rv| rv > 0) => true,
            "Exact" => {
                return Err(ApiError::bad_request(
                    t,
                    "resourceVersionMatch Exact needs a resourceVersion other than \"\" and \"0\"",
                ));
            }
            other => {
                return Err(ApiError::bad_request(
                    t,
                    format!(
                        "resourceVersionMatch {other:?}: supported values: \"Exact\", \"NotOlderThan\""
                    ),
                ));
            }
        };
        if let Some(rv) = resource_version.filter(|rv| *rv > 0) {
            self.store.wait_for_revision(info, rv, deadline).await?;
        }
        let q = ListQuery {
            filter: opts.filter,
            limit: opts.limit,
            continue_token: opts.continue_token,
            resource_version,
            exact,
        };
        let mut list = self.store.list(info, &q, deadline).await?;
        if let Some(custom) = self.read_defaults(info) {
            for item in &mut list.items {
                *item = crd::default_read_json(&custom, std::mem::take(item));
            }
        }
        if let Some(custom) = self.converted_custom(info) {
            let objects = list
                .items
                .iter()
                .map(|b| Object::from_slice(b))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ApiError::internal(format!("a listed object does not parse: {e}")))?;
            let converted = self
                .webhook_caller()
                .convert_objects(
                    &custom.info,
                    custom.conversion.as_deref(),
                    &info.gvr.version,
                    objects,
                    deadline,
                )
                .await?;
            list.items = converted
                .iter()
                .map(|o| bytes::Bytes::from(o.to_vec()))
                .collect();
        }
        Ok(list)
    }

    /// Replaces an object (or its `status`, or a Namespace's `finalize`) with `obj`, whose
    /// namespace is resolved. A `metadata.resourceVersion` other than empty or `"0"` is a
    /// precondition (Kubernetes' store reads 0 as none: an unconditional write).
    pub async fn update(
        &self,
        info: &Arc<ResourceInfo>,
        obj: Object,
        sub: Subresource,
        w: Write<'_>,
        deadline: Instant,
    ) -> Result<Object, ApiError> {
        match self.update_once(info, obj.clone(), sub, w, deadline).await {
            Err(e) if too_large(&e, w) => {
                self.update_once(info, obj, sub, w.untracked(), deadline)
                    .await
            }
            updated => updated,
        }
    }

    async fn update_once(
        &self,
        info: &Arc<ResourceInfo>,
        obj: Object,
        sub: Subresource,
        w: Write<'_>,
        deadline: Instant,
    ) -> Result<Object, ApiError> {
        let (writer, dry_run) = (w.user, w.dry_run);
        let key = self.store.key(info, obj.namespace(), obj.name());
        let expected_revision = resource_version::parse(obj.resource_version())
            .map_err(|e| e.invalid_field(kind_target(info, obj.name())))?
            .filter(|rv| *rv > 0);
        let kind = self.resources.kind(&info.gvr);
        if kind.update_needs_resource_version() && expected_revision.is_none() {
            // As Kubernetes: an unconditional replace of a custom object is refused.
            return Err(ApiError::invalid(
                kind_target(info, obj.name()),
                vec![keel_api::FieldCause::invalid(
                    "metadata.resourceVersion",
                    "",
                    "must be specified for an update",
                )],
            ));
        }
        let check = self
            .grant_check(
                info,
                &*kind,
                writer,
                obj.namespace(),
                obj.name(),
                Some(&obj),
                deadline,
            )
            .await?;
        let mutation = guarded(
            tracked(update_mutation(info, kind, obj, sub, w.manager), w),
            check,
        );
        let opts = UpdateOptions {
            expected_revision,
            dry_run,
            ..UpdateOptions::default()
        };
        let committed = self
            .commit_update(&key, opts, mutation, sub, w, deadline)
            .await?;
        self.written(info, committed.object, dry_run, deadline)
            .await
    }

    /// Patches an object. A patch that pins `metadata.resourceVersion` (other than `"0"`, as
    /// for an update) is a precondition (one compare-and-swap, `Conflict` when stale); any
    /// other joins the object's coalescing queue.
    #[allow(clippy::too_many_arguments)]
    pub async fn patch(
        &self,
        info: &Arc<ResourceInfo>,
        namespace: &str,
        name: &str,
        sub: Subresource,
        kind: PatchType,
        body: &[u8],
        w: Write<'_>,
        deadline: Instant,
    ) -> Result<Arc<Object>, ApiError> {
        let once = |w| self.patch_once(info, namespace, name, sub, kind, body, w, deadline);
        match once(w).await {
            // An apply's entries are its point: it is not tried again without them.
            Err(e) if kind != PatchType::Apply && too_large(&e, w) => once(w.untracked()).await,
            patched => patched,
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn patch_once(
        &self,
        info: &Arc<ResourceInfo>,
        namespace: &str,
        name: &str,
        sub: Subresource,
        kind: PatchType,
        body: &[u8],
        w: Write<'_>,
        deadline: Instant,
    ) -> Result<Arc<Object>, ApiError> {
        let (writer, dry_run) = (w.user, w.dry_run);
        let t = target(info, name);
        let body = patch::parse(&t, kind, body)?;
        let expected_revision = match patch::precondition(kind, &body) {
            None => None,
            Some(rv) => resource_version::parse(&rv)
                .map_err(|e| e.invalid_field(kind_target(info, name)))?
                .filter(|rv| *rv > 0),
        };
        let rules = self.resources.kind(&info.gvr);
        let alone = patch::tests_resource_version(kind, &body);
        let mutation = patch::mutation(info, rules.clone(), kind, sub, body, w.manager, w.force)
            .map_err(|e| e.with_target(&t))?;
        let check = self
            .grant_check(info, &*rules, writer, namespace, name, None, deadline)
            .await?;
        let mutation = guarded(tracked(mutation, w), check);
        let key = self.store.key(info, namespace, name);
        // A precondition, or a dry run, is one compare (or none); never coalesced. Nor is a
        // patch of an object holding shared values: its allocations are made for the state it
        // is applied to (`Registry::commit`); nor a test of the resourceVersion; nor one that
        // webhooks see (`store::admitted`).
        let hooked = info.converted_by_server
            || self.webhook_snapshot(deadline).await?.may_apply(
                Operation::Update,
                info,
                sub.name(),
            );
        let coalesced = !(hooked
            || dry_run
            || expected_revision.is_some()
            || alone
            || rules.allocations().is_some());
        let object = if !coalesced {
            // One compare-and-swap, through the webhooks when any applies.
            let opts = UpdateOptions {
                expected_revision,
                dry_run,
                ..UpdateOptions::default()
            };
            let committed = self
                .commit_update(&key, opts, mutation, sub, w, deadline)
                .await?;
            Arc::new(committed.object)
        } else {
            self.coalescer.mutate(key, mutation, deadline).await?
        };
        if info.converted_by_server || self.webhooks.configures(info) {
            let answer = self
                .written(info, (*object).clone(), dry_run, deadline)
                .await?;
            return Ok(Arc::new(answer));
        }
        // A batch's object is shared by its callers: copied only to be converted.
        Ok(match keel_api::conversion::served(info, &object) {
            Cow::Borrowed(_) => object,
            Cow::Owned(converted) => Arc::new(converted),
        })
    }

    /// Deletes an object for the API server itself (a deleted CRD's objects, an eviction's
    /// Pod): as [`Registry::delete_admitted`], without admission webhooks, as Kubernetes'
    /// own deletes through its storage.
    pub async fn delete(
        &self,
        info: &Arc<ResourceInfo>,
        namespace: &str,
        name: &str,
        opts: DeleteOptions,
        deadline: Instant,
    ) -> Result<(Object, bool), ApiError> {
        self.delete_admitted(info, namespace, name, opts, None, deadline)
            .await
    }

    /// Deletes an object (see [`deletion::deletion`]) through the admission webhooks that
    /// apply to it when a client asks (`requester`); returns it as it was last (marked, or
    /// at the revision of its removal) and whether it is gone.
    pub async fn delete_admitted(
        &self,
        info: &Arc<ResourceInfo>,
        namespace: &str,
        name: &str,
        opts: DeleteOptions,
        requester: Option<Requester<'_>>,
        deadline: Instant,
    ) -> Result<(Object, bool), ApiError> {
        let expected_revision = resource_version::parse(&opts.resource_version)
            .map_err(|e| e.bad_request(&target(info, name)))?;
        let key = self.store.key(info, namespace, name);
        let dry_run = opts.dry_run;
        let kind = self.resources.kind(&info.gvr);
        let mutation = stored_form(
            info,
            kind.clone(),
            deletion::deletion(info, kind, opts, expected_revision),
        );
        let update = UpdateOptions {
            read_etcd: true,
            dry_run,
            ..UpdateOptions::default()
        };
        let committed = match requester {
            Some(requester) => {
                self.commit_admitted(
                    &key,
                    update,
                    mutation,
                    Subresource::Main,
                    Operation::Delete,
                    requester,
                    "",
                    deadline,
                )
                .await?
            }
            None => self.commit(&key, update, mutation, deadline).await?,
        };
        let last = self
            .written(info, committed.object, dry_run, deadline)
            .await?;
        Ok((last, committed.removed))
    }

    /// Watches objects after `resource_version` (empty or `"0"`: the current objects first).
    /// `send_initial_events` (Kubernetes' streaming list): the current objects first whatever
    /// `resource_version` says, at a revision not older than it, then a bookmark annotated
    /// `k8s.io/initial-events-end`.
    pub async fn watch(
        &self,
        info: &Arc<ResourceInfo>,
        filter: Filter,
        resource_version: &str,
        allow_bookmarks: bool,
        send_initial_events: bool,
    ) -> Result<WatchStream, ApiError> {
        let from = resource_version::parse(resource_version)
            .map_err(|e| e.bad_request(&target(info, "")))?
            .filter(|rv| *rv > 0);
        if let Some(rv) = from {
            self.store
                .wait_for_revision(info, rv, Instant::now() + FRESH_WAIT)
                .await?;
        }
        let from = from.filter(|_| !send_initial_events);
        let events = self
            .store
            .watch(info, filter, from, allow_bookmarks, send_initial_events)
            .await?;
        let events: WatchStream = match self.read_defaults(info) {
            None => events,
            Some(custom) => Box::pin(events.map(move |event| {
                event.map(|mut e| {
                    if e.kind != WatchEventKind::Bookmark {
                        e.object = crd::default_read_json(&custom, std::mem::take(&mut e.object));
                    }
                    e
                })
            })),
        };
        let Some(custom) = self.converted_custom(info) else {
            return Ok(events);
        };
        // Each event's object converted to the version watched, in order; a conversion that
        // fails ends the watch with its error.
        let (caller, version) = (self.webhook_caller(), info.gvr.version.clone());
        Ok(Box::pin(events.then(move |event| {
            let (caller, custom, version) = (caller.clone(), custom.clone(), version.clone());
            async move {
                let mut e = event?;
                if e.kind == WatchEventKind::Bookmark {
                    return Ok(e);
                }
                let obj = Object::from_slice(&e.object).map_err(|err| {
                    ApiError::internal(format!("a watched object does not parse: {err}"))
                })?;
                let deadline = Instant::now() + WATCH_CONVERSION_TIMEOUT;
                let mut converted = caller
                    .convert_objects(
                        &custom.info,
                        custom.conversion.as_deref(),
                        &version,
                        vec![obj],
                        deadline,
                    )
                    .await?;
                if let Some(o) = converted.pop() {
                    e.object = bytes::Bytes::from(o.to_vec());
                }
                Ok(e)
            }
        })))
    }

    /// The `autoscaling/v1` `Scale` of `obj`, an object of `info`, where its kind keeps its
    /// replicas and selector (a workload's, or what a CRD's `subresources.scale` says).
    pub fn scale_view(&self, info: &Arc<ResourceInfo>, obj: &Object) -> Result<Object, ApiError> {
        let Some(paths) = self.resources.kind(&info.gvr).scale() else {
            return Err(ApiError::not_found(target(info, obj.name())));
        };
        Object::from_value(keel_api::scale::view_at(obj, &paths))
            .map_err(|e| ApiError::internal(e.to_string()))
    }

    /// The RBAC policy as etcd holds it now, which an escalation check judges its writer's
    /// rights by: Kubernetes reads them through its registries, not an informer's cache, so a
    /// binding revoked a moment ago no longer counts on a replica whose caches lag. (RBAC
    /// writes are rare; four reads each, at once; none for `system:masters`.)
    async fn fresh_policy(&self, deadline: Instant) -> Result<Arc<rbac::Policy>, ApiError> {
        let list = |gvr: GroupVersionResource| async move {
            let info = self.resources.lookup(Some(&gvr))?;
            // As the authorizer's policy holds them (`Policies::follow`).
            let mut all = ListQuery::default();
            all.filter.include_uninitialized = true;
            let listed = self.store.list(&info, &all, deadline).await?;
            let objects = listed
                .items
                .iter()
                .filter_map(|b| Object::from_slice(b).ok());
            Ok::<Vec<Object>, ApiError>(objects.collect())
        };
        let [roles, cluster_roles, bindings, cluster_bindings] = rbac::policy_resources();
        let (roles, cluster_roles, bindings, cluster_bindings) = futures::try_join!(
            list(roles),
            list(cluster_roles),
            list(bindings),
            list(cluster_bindings)
        )?;
        Ok(Arc::new(rbac::Policy::build(
            &roles,
            &cluster_roles,
            &bindings,
            &cluster_bindings,
        )))
    }

    /// The escalation check of `writer` writing `obj` (or, for a patch, the object named
    /// `request_name`, as it is) of `info` (`request_name`: as authorized, `""` for a create),
    /// against this replica's policy once it has read it, and a binding's role read from
    /// etcd; `None` when there is none to make.
    #[allow(clippy::too_many_arguments)]
    async fn grant_check(
        &self,
        info: &Arc<ResourceInfo>,
        kind: &dyn Kind,
        writer: Option<&User>,
        namespace: &str,
        request_name: &str,
        obj: Option<&Object>,
        deadline: Instant,
    ) -> Result<Option<GrantCheck>, ApiError> {
        let Some(grant_kind) = kind.grant_kind() else {
            return Ok(None);
        };
        if !GrantCheck::applies(writer) {
            return Ok(None);
        }
        let Some(check) = GrantCheck::new(
            grant_kind,
            writer,
            self.fresh_policy(deadline).await?,
            request_name,
        ) else {
            return Ok(None);
        };
        if !grant_kind.is_binding() {
            return Ok(Some(check));
        }
        // The binding's role: a patch keeps the stored binding's (roleRef is immutable).
        let stored;
        let binding = match obj {
            Some(o) => Some(o),
            None => {
                let key = self.store.key(info, namespace, request_name);
                stored = self.store.get(&key, ReadFrom::Etcd, deadline).await.ok();
                stored.as_ref()
            }
        };
        let Some((cluster_role, role)) = binding.and_then(rbac::role_ref) else {
            return Ok(Some(check));
        };
        let resource = if cluster_role {
            "clusterroles"
        } else {
            "roles"
        };
        let role_info = self.lookup(Some(&GroupVersionResource::new(
            keel_api::resource::RBAC_GROUP,
            "v1",
            resource,
        )))?;
        let ns = if cluster_role { "" } else { namespace };
        let key = self.store.key(&role_info, ns, &role);
        let rules = match self.store.get(&key, ReadFrom::Etcd, deadline).await {
            Ok(r) => Some(rbac::Rule::all_of(r.as_map())),
            Err(e) if e.reason == keel_api::Reason::NotFound => None,
            Err(e) => return Err(e),
        };
        Ok(Some(check.with_role((cluster_role, role), rules)))
    }

    fn namespaces(&self) -> Result<Arc<ResourceInfo>, ApiError> {
        self.resources
            .lookup(Some(&GroupVersionResource::new("", "v1", "namespaces")))
    }
}

/// Stores a new object that passed admission (only answers, with `dry_run`). A name generated
/// from `generate` that is taken is generated again, as Kubernetes retries; `obj` is left with
/// the name last tried.
async fn store_new(
    store: &Store,
    info: &Arc<ResourceInfo>,
    obj: &mut Object,
    generate: Option<&str>,
    dry_run: bool,
    deadline: Instant,
) -> Result<Object, ApiError> {
    let mut attempt = 1;
    loop {
        let key = store.key(info, obj.namespace(), obj.name());
        let stored = if dry_run {
            store.create_dry_run(&key, obj.clone(), deadline).await
        } else {
            store.create(&key, obj.clone(), deadline).await
        };
        match (stored, generate) {
            (Err(e), Some(base)) if e.reason == Reason::AlreadyExists => {
                if attempt == generate_name::ATTEMPTS {
                    return Err(generate_name::conflict(e));
                }
                attempt += 1;
                generate_name::name(obj, base);
            }
            (stored, _) => return stored,
        }
    }
}

/// The mutation of an Update: the client's object, made a valid successor of the current one.
fn update_mutation(
    info: &Arc<ResourceInfo>,
    kind: Arc<dyn Kind>,
    obj: Object,
    sub: Subresource,
    manager: &str,
) -> Mutation {
    let info = info.clone();
    let manager = manager.to_string();
    Box::new(move |stored: &Draft| {
        let current = keel_api::conversion::served(&info, &stored.object);
        let new = admission::admit_update(&info, &*kind, obj.clone(), &current, sub)?;
        Ok(Change::Put(managed::record_update(
            &*kind, &manager, sub, stored, new,
        )))
    })
}

/// Whether `e` is a write too large with its `managedFields`, to be tried again without them.
fn too_large(e: &ApiError, w: Write<'_>) -> bool {
    e.reason == Reason::RequestEntityTooLarge && w.track
}

/// `mutation`, its object stored with no `managedFields` unless `w` tracks them.
fn tracked(mutation: Mutation, w: Write<'_>) -> Mutation {
    if w.track {
        return mutation;
    }
    Box::new(move |current: &Draft| {
        Ok(match mutation(current)? {
            Change::Put(mut draft) => {
                draft.entries = Arc::default();
                Change::Put(draft)
            }
            removed => removed,
        })
    })
}

/// `mutation`, refusing an object that grants what its writer does not hold.
fn guarded(mutation: Mutation, check: Option<GrantCheck>) -> Mutation {
    let Some(check) = check else {
        return mutation;
    };
    Box::new(move |current: &Draft| {
        let change = mutation(current)?;
        if let Change::Put(new) = &change {
            check.confirm(&new.object, Some(&current.object))?;
        }
        Ok(change)
    })
}

/// `mutation`, whose object it writes put in the form objects are stored in. (Reads come back
/// converted by storage; a delete that only marks the object writes what it read, at the
/// request's version.)
fn stored_form(info: &Arc<ResourceInfo>, kind: Arc<dyn Kind>, mutation: Mutation) -> Mutation {
    let info = info.clone();
    Box::new(move |current: &Draft| {
        Ok(match mutation(current)? {
            Change::Put(mut draft) => {
                admission::stored_form(&info, &*kind, &mut draft.object);
                Change::Put(draft)
            }
            removed => removed,
        })
    })
}

mod admitted;
mod allocation;
#[cfg(test)]
mod tests;

#[cfg(test)]
mod apply_tests;

#[cfg(test)]
mod error_words_tests;

/// Whether the served resources `rs` were made from the CRD at `version`.
fn made_from(rs: &[Arc<crd::CustomResource>], version: &str) -> bool {
    rs.iter().all(|r| r.crd_version == version)
}
