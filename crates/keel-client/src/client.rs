//! Unary calls: create, get, list, update, patch (server-side apply too), delete, discovery.

use std::sync::Arc;
use std::time::Duration;

use keel_api::shard::ShardSelector;
use keel_api::{ApiError, GroupVersionResource, Target};
use keel_wire::proto::discovery_client::DiscoveryClient;
use keel_wire::proto::objects_client::ObjectsClient;
use keel_wire::proto::{
    ApiResource, CreateRequest, DeleteRequest, DiscoveryRequest, GetRequest, ListRequest,
    PatchRequest, PatchType, Preconditions, PropagationPolicy, ResourceRef, UpdateRequest,
};
use serde_json::Value;
use tokio::time::Instant;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::delivery::{Delivery, Idempotency, connection_refused, delivery};
use crate::endpoints::Endpoints;

/// Shorthand for a [`GroupVersionResource`].
pub fn gvr(group: &str, version: &str, resource: &str) -> GroupVersionResource {
    GroupVersionResource::new(group, version, resource)
}

/// Where and how to reach the API servers.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `http://host:port` of each API server replica; requests are balanced over those that
    /// answer.
    pub endpoints: Vec<String>,
    /// Deadline of each unary call, retries on other endpoints included (each try sends the
    /// time left to the server as its gRPC deadline).
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// TLS towards `https://` endpoints: the CA that signed the servers' certificates and,
    /// optionally, the client's own certificate (its identity).
    pub tls: Option<TlsConfig>,
    /// A bearer token sent with every call (`authorization: Bearer <token>`).
    pub token: Option<String>,
    /// Act as another user (Kubernetes' impersonation, `kubectl --as`): sent as the
    /// `impersonate-user`, `impersonate-group` and `impersonate-uid` metadata of every call.
    /// The server allows it to users who hold the verb `impersonate` on each.
    pub impersonate: Option<Impersonate>,
}

/// Whom to act as.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Impersonate {
    pub user: String,
    pub groups: Vec<String>,
    /// `""`: none.
    pub uid: String,
}

/// PEM bytes of the CA to trust and of the client's certificate and key.
#[derive(Debug, Clone, Default)]
pub struct TlsConfig {
    pub ca_pem: Vec<u8>,
    /// Certificate and private key, PEM.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// A part of a [`TlsConfig`].
#[derive(Debug, Clone, Copy)]
enum Part {
    Ca,
    Certificate,
    Key,
}

fn malformed(part: Part) -> ApiError {
    let what = match part {
        Part::Ca => "certificate authority (CA)",
        Part::Certificate => "client certificate",
        Part::Key => "client key",
    };
    ApiError::bad_request(Target::default(), format!("the {what} holds no PEM block"))
}

impl TlsConfig {
    /// That each part holds what it should, in PEM: a clear error naming the part, rather than
    /// the transport's at the first connection.
    fn check(&self) -> Result<(), ApiError> {
        self.malformed_part()
            .map_or(Ok(()), |part| Err(malformed(part)))
    }

    /// The first part that holds no PEM block of its kind.
    fn malformed_part(&self) -> Option<Part> {
        let has = |pem: &[u8], begin: &str, end: &str| {
            let text = String::from_utf8_lossy(pem);
            text.contains(begin) && text.contains(end)
        };
        if !has(
            &self.ca_pem,
            "-----BEGIN CERTIFICATE-----",
            "-----END CERTIFICATE-----",
        ) {
            return Some(Part::Ca);
        }
        let (cert, key) = self.identity.as_ref()?;
        if !has(
            cert,
            "-----BEGIN CERTIFICATE-----",
            "-----END CERTIFICATE-----",
        ) {
            return Some(Part::Certificate);
        }
        if !has(key, "-----BEGIN", "PRIVATE KEY-----") {
            return Some(Part::Key);
        }
        None
    }

    /// Reads the CA and, when both are given, the client certificate and key from files.
    pub fn from_files(
        ca: &std::path::Path,
        identity: Option<(&std::path::Path, &std::path::Path)>,
    ) -> Result<TlsConfig, ApiError> {
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| {
                ApiError::bad_request(
                    Target::default(),
                    format!("cannot read {}: {e}", p.display()),
                )
            })
        };
        let tls = TlsConfig {
            ca_pem: read(ca)?,
            identity: match identity {
                Some((cert, key)) => Some((read(cert)?, read(key)?)),
                None => None,
            },
        };
        // Name the file, not only the part.
        if let Some(part) = tls.malformed_part() {
            let file = match (part, identity) {
                (Part::Certificate, Some((cert, _))) => cert,
                (Part::Key, Some((_, key))) => key,
                _ => ca,
            };
            let e = malformed(part);
            return Err(ApiError::bad_request(
                Target::default(),
                format!("{}: {}", file.display(), e.message),
            ));
        }
        Ok(tls)
    }
}

impl ClientConfig {
    pub fn new<S: AsRef<str>>(endpoints: impl IntoIterator<Item = S>) -> ClientConfig {
        ClientConfig {
            endpoints: endpoints
                .into_iter()
                .map(|s| s.as_ref().to_string())
                .collect(),
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(3),
            tls: None,
            token: None,
            impersonate: None,
        }
    }

    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }
}

/// Options of a List.
#[derive(Debug, Clone, Default)]
pub struct ListParams {
    pub label_selector: String,
    pub field_selector: String,
    pub limit: i64,
    pub continue_token: String,
    pub resource_version: String,
    /// `"Exact"`: the list as it was at exactly `resource_version` (which must not be compacted).
    pub resource_version_match: String,
    /// Also objects whose initializers are still pending.
    pub include_uninitialized: bool,
    /// Only objects of these shards of a controller's keyspace.
    pub shard: Option<ShardSelector>,
}

/// A page of objects.
#[derive(Debug, Clone)]
pub struct ObjectList {
    pub items: Vec<Value>,
    pub resource_version: String,
    pub continue_token: String,
    pub remaining_item_count: i64,
}

/// Options of a Delete.
#[derive(Debug, Clone, Default)]
pub struct DeleteParams {
    pub uid: String,
    pub resource_version: String,
    pub propagation: PropagationPolicy,
}

/// Options of a server-side apply ([`Client::apply`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyParams {
    /// Who applies: `managedFields` records it as the owner of what the configuration sets
    /// (Kubernetes' `fieldManager`). Required: an apply without one is `Invalid`.
    pub field_manager: String,
    /// Take the fields other managers own instead of failing with a `Conflict` that names them.
    pub force: bool,
    /// Answer the applied object, and write nothing.
    pub dry_run: bool,
}

impl ApplyParams {
    /// An apply by `field_manager` that does not take other managers' fields.
    pub fn new(field_manager: impl Into<String>) -> Self {
        ApplyParams {
            field_manager: field_manager.into(),
            ..Default::default()
        }
    }

    /// The same apply, taking the fields other managers own (`kubectl --force-conflicts`).
    pub fn force(mut self) -> Self {
        self.force = true;
        self
    }
}

/// A connection to the API servers; cheap to clone (clones share the connections).
#[derive(Clone)]
pub struct Client {
    endpoints: Arc<Endpoints>,
    timeout: Duration,
    /// `Bearer <token>`, when the config has a token.
    authorization: Option<MetadataValue<Ascii>>,
    /// The impersonation metadata, when the config asks for it.
    impersonation: Arc<Vec<(&'static str, MetadataValue<Ascii>)>>,
}

fn resource_ref(g: &GroupVersionResource) -> Option<ResourceRef> {
    Some(ResourceRef {
        group: g.group.clone(),
        version: g.version.clone(),
        resource: g.resource.clone(),
    })
}

fn decode(bytes: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::internal(format!("the server sent an unreadable object: {e}")))
}

impl Client {
    /// A call's request: `timeout` as its gRPC deadline (a watch has none), and the token.
    pub(crate) fn request<T>(&self, msg: T, timeout: Option<Duration>) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        if let Some(t) = timeout {
            r.set_timeout(t);
        }
        if let Some(a) = &self.authorization {
            r.metadata_mut().insert("authorization", a.clone());
        }
        for (key, value) in self.impersonation.iter() {
            r.metadata_mut().append(*key, value.clone());
        }
        r
    }
}

/// The metadata of an impersonation: a user, each group, the uid.
fn impersonation_metadata(
    i: Option<&Impersonate>,
) -> Result<Vec<(&'static str, MetadataValue<Ascii>)>, ApiError> {
    let Some(i) = i else { return Ok(Vec::new()) };
    let value = |v: &str| {
        v.parse::<MetadataValue<Ascii>>().map_err(|_| {
            ApiError::bad_request(
                Target::default(),
                format!("cannot impersonate {v:?}: not a value an HTTP header can carry"),
            )
        })
    };
    let mut out = vec![("impersonate-user", value(&i.user)?)];
    for g in &i.groups {
        out.push(("impersonate-group", value(g)?));
    }
    if !i.uid.is_empty() {
        out.push(("impersonate-uid", value(&i.uid)?));
    }
    Ok(out)
}

/// How often one call is sent again after `TooManyRequests` with a retry-after hint
/// (client-go: 10).
const MAX_THROTTLED_RETRIES: u32 = 10;

/// How often a call goes round the endpoints again after a server went away under it (see
/// [`Client::call`]): behind a load balancer, one address stands for several replicas.
const MAX_GONE_AWAY_ROUNDS: u32 = 3;

/// The caller's error for a failed call. A transport failure is `ServiceUnavailable` whatever
/// code tonic gave it (a stream cut by GOAWAY is `Internal` there, a request hyper dropped
/// unsent `Cancelled`); the client's own deadline stays `Timeout`.
pub(crate) fn api_error(s: &tonic::Status, how: Delivery) -> ApiError {
    let mut e = keel_wire::error(s);
    if matches!(how, Delivery::NotProcessed | Delivery::Unknown) {
        e.reason = keel_api::Reason::ServiceUnavailable;
    }
    e
}

fn encode(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

impl Client {
    /// Prepares connections to every endpoint; they are made lazily, so this succeeds while
    /// servers are still starting.
    pub async fn connect(config: &ClientConfig) -> Result<Client, ApiError> {
        if let Some(t) = &config.tls {
            t.check()?;
        }
        let mut channels = Vec::new();
        let tls = config.tls.as_ref().map(|t| {
            let mut c = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&t.ca_pem));
            if let Some((cert, key)) = &t.identity {
                c = c.identity(Identity::from_pem(cert, key));
            }
            c
        });
        for e in &config.endpoints {
            let invalid = |err: &dyn std::fmt::Display| {
                ApiError::bad_request(
                    Target::default(),
                    format!("invalid server address {e:?}: {err}"),
                )
            };
            let mut ep = Endpoint::from_shared(e.clone()).map_err(|err| invalid(&err))?;
            if e.starts_with("https://") {
                let tls = tls.clone().ok_or_else(|| {
                    ApiError::bad_request(
                        Target::default(),
                        format!("{e} is https: give the CA that signed its certificate"),
                    )
                })?;
                ep = ep.tls_config(tls).map_err(|err| invalid(&err))?;
            }
            let ep = ep
                .user_agent(user_agent())
                .map_err(|err| invalid(&err))?
                .connect_timeout(config.connect_timeout)
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(20))
                .keep_alive_timeout(Duration::from_secs(10))
                .keep_alive_while_idle(true);
            channels.push((e.clone(), ep.connect_lazy()));
        }
        if channels.is_empty() {
            return Err(ApiError::bad_request(
                Target::default(),
                "no server address given",
            ));
        }
        let authorization = match &config.token {
            Some(t) => Some(format!("Bearer {t}").parse().map_err(|_| {
                ApiError::bad_request(
                    Target::default(),
                    "the token has characters an HTTP header cannot carry",
                )
            })?),
            None => None,
        };
        Ok(Client {
            endpoints: Arc::new(Endpoints::new(channels)),
            timeout: config.timeout,
            authorization,
            impersonation: Arc::new(impersonation_metadata(config.impersonate.as_ref())?),
        })
    }

    fn objects_client(ch: Channel) -> ObjectsClient<Channel> {
        // No limit on what is sent: the server refuses an oversized request with its typed
        // `RequestEntityTooLarge` after reading only the message's length.
        ObjectsClient::new(ch)
            .max_decoding_message_size(64 * 1024 * 1024)
            .max_encoding_message_size(usize::MAX)
    }

    pub(crate) fn objects(&self) -> ObjectsClient<Channel> {
        Self::objects_client(self.endpoints.channel(self.endpoints.pick()))
    }

    /// Sends a call to the next endpoint and, while it fails in a way that allows it (see
    /// [`Delivery::may_retry`]), to each other endpoint once, within the client's timeout. `f`
    /// builds the request of one try, given the time left (its gRPC deadline).
    pub(crate) async fn call<T, F, Fut>(&self, kind: Idempotency, mut f: F) -> Result<T, ApiError>
    where
        F: FnMut(ObjectsClient<Channel>, Duration) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.call_channel(kind, |ch, left| f(Self::objects_client(ch), left))
            .await
    }

    /// [`Client::call`] for any service on the endpoints' channels.
    ///
    /// Each endpoint is tried once: when every one failed unprocessed, none is serving (all
    /// refuse connections, or go away), and the caller hears so at once rather than at its
    /// deadline, as kubectl does.
    async fn call_channel<T, F, Fut>(&self, kind: Idempotency, mut f: F) -> Result<T, ApiError>
    where
        F: FnMut(Channel, Duration) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let deadline = Instant::now() + self.timeout;
        let mut tried = vec![false; self.endpoints.len()];
        let mut throttled = 0;
        let mut gone_away = 0;
        loop {
            let Some(i) = self.endpoints.pick_untried(&tried) else {
                return Err(ApiError::unavailable("no server address given"));
            };
            let left = deadline.saturating_duration_since(Instant::now());
            let s = match f(self.endpoints.channel(i), left).await {
                Ok(r) => return Ok(r.into_inner()),
                Err(s) => s,
            };
            let how = delivery(&s);
            // Told to slow down: the request was not processed; wait as long as the server
            // says and send it again (to any endpoint), while the deadline allows, as
            // client-go does with 429 and Retry-After.
            if how == Delivery::Answered && throttled < MAX_THROTTLED_RETRIES {
                let e = keel_wire::error(&s);
                if let (keel_api::Reason::TooManyRequests, Some(secs)) =
                    (e.reason, e.retry_after_seconds)
                {
                    let wait = Duration::from_secs(secs.into());
                    if Instant::now() + wait < deadline {
                        throttled += 1;
                        tokio::time::sleep(wait).await;
                        tried.fill(false);
                        continue;
                    }
                }
            }
            // A refused request, or a connection that broke mid-call (the server died, or the
            // network to it): the next calls go to the other endpoints for a moment, so that
            // a caller whose call failed there does not send its next one to the same place.
            if matches!(how, Delivery::NotProcessed | Delivery::Unknown) {
                self.endpoints.mark_down(i);
            }
            tried[i] = true;
            let mut last = tried.iter().all(|&t| t);
            // Every endpoint failed, but one of them went away under the call (GOAWAY, a
            // refused stream, a request dropped with its closing connection): a server is
            // there, on its way out, and behind a load balancer (one address, several
            // replicas) the next connection reaches another. Round again, a few times, after
            // a pause. Connections refused at every endpoint still fail at once.
            if last && how == Delivery::NotProcessed && !connection_refused(&s) {
                let pause = Duration::from_millis(50 * u64::from(gone_away + 1));
                if gone_away < MAX_GONE_AWAY_ROUNDS && Instant::now() + pause < deadline {
                    gone_away += 1;
                    tokio::time::sleep(pause).await;
                    tried.fill(false);
                    last = false;
                }
            }
            if last || !how.may_retry(kind) || Instant::now() >= deadline {
                return Err(api_error(&s, how));
            }
        }
    }

    pub async fn create(
        &self,
        g: &GroupVersionResource,
        namespace: &str,
        obj: &Value,
    ) -> Result<Value, ApiError> {
        let req = CreateRequest {
            resource: resource_ref(g),
            namespace: namespace.into(),
            object: encode(obj),
            ..Default::default()
        };
        let resp = self
            .call(Idempotency::Write, |mut c, left| {
                let r = self.request(req.clone(), Some(left));
                async move { c.create(r).await }
            })
            .await?;
        decode(&resp.object)
    }

    pub async fn get(
        &self,
        g: &GroupVersionResource,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.get_at(g, namespace, name, "").await
    }

    /// A Get with a resourceVersion: "0" lets the server answer from its cache.
    pub async fn get_at(
        &self,
        g: &GroupVersionResource,
        namespace: &str,
        name: &str,
        rv: &str,
    ) -> Result<Value, ApiError> {
        self.get_with(g, namespace, name, rv, false).await
    }

    /// A Get that also finds an object whose initializers are still pending.
    pub async fn get_uninitialized(
        &self,
        g: &GroupVersionResource,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.get_with(g, namespace, name, "", true).await
    }

    /// A Get of a subresource: `"scale"` answers the object's `autoscaling/v1` Scale,
    /// `"status"` the object.
    pub async fn get_subresource(
        &self,
        g: &GroupVersionResource,
        namespace: &str,
        name: &str,
        sub: &str,
    ) -> Result<Value, ApiError> {
        self.get_request(GetRequest {
            resource: resource_ref(g),
            namespace: namespace.into(),
            name: name.into(),
            subresource: sub.into(),
            ..Default::default()
        })
        .await
    }

    async fn get_with(
        &self,
        g: &GroupVersionResource,
        namespace: &str,
        name: &str,
        rv: &str,
        include_uninitialized: bool,
    ) -> Result<Value, ApiError> {
        self.get_request(GetRequest {
            resource: resource_ref(g),
            namespace: namespace.into(),
            name: name.into(),
            resource_version: rv.into(),
            include_uninitialized,
            subresource: String::new(),
        })
        .await
    }

    async fn get_request(&self, req: GetRequest) -> Result<Value, ApiError> {
        let resp = self
            .call(Idempotency::Read, |mut c, left| {
                let r = self.request(req.clone(), Some(left));
                async move { c.get(r).await }
            })
            .await?;
        decode(&resp.object)
    }

    /// One page of a List ("" namespace: all namespaces).
    pub async fn list(
        &self,
        g: &GroupVersionResource,
        namespace: &str,
        p: &ListParams,
    ) -> Result<ObjectList, ApiError> {
        let req = ListRequest {
            resource: resource_ref(g),
            namespace: namespace.into(),
            label_selector: p.label_selector.clone(),
            field_selector: p.field_selector.clone(),
            limit: p.limit,
            continue_token: p.continue_token.clone(),
            resource_version: p.resource_version.clone(),
            include_uninitialized: p.include_uninitialized,
            shard: p.shard.as_ref().map(shard_selector),
            resource_version_match: p.resource_version_match.clone(),
        };
        let resp = self
            .call(Idempotency::Read, |mut c, left| {
                let r = self.request(req.clone(), Some(left));
                async move { c.list(r).await }
            })
            .await?;
        let items = resp
            .items
            .iter()
            .map(|b| decode(b))
            .collect::<Result<_, _>>()?;
        Ok(ObjectList {
            items,
            resource_version: resp.resource_version,
            continue_token: resp.continue_token,
            remaining_item_count: resp.remaining_item_count,
        })
    }

    /// Every page of a List, read at one revision.
    pub async fn list_all(
        &self,
        g: &GroupVersionResource,
        namespace: &str,
        p: &ListParams,
    ) -> Result<ObjectList, ApiError> {
        let mut p = p.clone();
        let mut all = self.list(g, namespace, &p).await?;
        while !all.continue_token.is_empty() {
            p.continue_token = std::mem::take(&mut all.continue_token);
            let page = self.list(g, namespace, &p).await?;
            all.items.extend(page.items);
            all.continue_token = page.continue_token;
        }
        Ok(all)
    }

    /// Replaces an object; its `metadata.resourceVersion`, when set, is a precondition.
    pub async fn update(
        &self,
        g: &GroupVersionResource,
        namespace: &str,
        obj: &Value,
    ) -> Result<Value, ApiError> {
        self.update_subresource(g, namespace, "", obj).await
    }

    pub async fn update_status(
        &self,
        g: &GroupVersionResource,
        namespace: &str,
        obj: &Value,
    ) -> Result<Value, ApiError> {
        self.update_subresource(g, namespace, "status", obj).await
    }

    /// Replaces a subresource: `"status"` with the object, `"scale"` with an
    /// `autoscaling/v1` Scale (answered with the Scale).
    pub async fn update_subresource(
        &self,
        g: &GroupVersionResource,
        namespace: &str,
        sub: &str,
        obj: &Value,
    ) -> Result<Value, ApiError> {
        let req = UpdateRequest {
            resource: resource_ref(g),
            namespace: namespace.into(),
            subresource: sub.into(),
            object: encode(obj),
            ..Default::default()
        };
        let resp = self
            .call(Idempotency::Write, |mut c, left| {
                let r = self.request(req.clone(), Some(left));
                async move { c.update(r).await }
            })
            .await?;
        decode(&resp.object)
    }

    /// A JSON, merge or strategic merge PATCH. An apply ([`PatchType::Apply`]) needs its
    /// manager: send it with [`Client::apply`].
    pub async fn patch(
        &self,
        g: &GroupVersionResource,
        namespace: &str,
        name: &str,
        kind: PatchType,
        patch: &Value,
    ) -> Result<Value, ApiError> {
        self.patch_subresource(g, namespace, name, "", kind, encode(patch))
            .await
    }

    /// A PATCH whose body is sent as given (which may be malformed: the server judges it).
    pub async fn patch_subresource(
        &self,
        g: &GroupVersionResource,
        namespace: &str,
        name: &str,
        sub: &str,
        kind: PatchType,
        patch: Vec<u8>,
    ) -> Result<Value, ApiError> {
        self.send_patch(patch_request(g, namespace, name, sub, kind, patch))
            .await
    }

    /// Server-side apply: `config` is the manager's whole configuration of the object, its
    /// `apiVersion`, `kind` and `metadata.name` included. What it sets becomes the manager's;
    /// what the manager applied before and no longer does is removed, unless another manager
    /// owns it; an object that does not exist is created. Changing a field another manager
    /// owns is a `Conflict` whose causes name each (reason `FieldManagerConflict`, field the
    /// path), unless `p.force`.
    pub async fn apply(
        &self,
        g: &GroupVersionResource,
        namespace: &str,
        name: &str,
        config: &Value,
        p: &ApplyParams,
    ) -> Result<Value, ApiError> {
        self.send_patch(apply_request(g, namespace, name, config, p))
            .await
    }

    /// A PATCH of any type ([`Client::patch`], or [`Client::apply`] with `p`) whose answer is
    /// only checked for success: the object the server sends back is not decoded (a load
    /// generator's writers, which would spend their CPU on it).
    pub async fn patch_unread(
        &self,
        g: &GroupVersionResource,
        namespace: &str,
        name: &str,
        kind: PatchType,
        patch: &Value,
        p: &ApplyParams,
    ) -> Result<(), ApiError> {
        let req = match kind {
            PatchType::Apply => apply_request(g, namespace, name, patch, p),
            _ => patch_request(g, namespace, name, "", kind, encode(patch)),
        };
        self.send_patch_raw(req).await.map(drop)
    }

    async fn send_patch(&self, req: PatchRequest) -> Result<Value, ApiError> {
        decode(&self.send_patch_raw(req).await?)
    }

    /// The PATCH's answer: the object's JSON as the server sent it.
    async fn send_patch_raw(&self, req: PatchRequest) -> Result<bytes::Bytes, ApiError> {
        let resp = self
            .call(Idempotency::Write, |mut c, left| {
                let r = self.request(req.clone(), Some(left));
                async move { c.patch(r).await }
            })
            .await?;
        Ok(resp.object)
    }

    /// Deletes an object. Returns it (with `deletionTimestamp` when finalizers hold it) and
    /// whether it is gone.
    pub async fn delete(
        &self,
        g: &GroupVersionResource,
        namespace: &str,
        name: &str,
        p: &DeleteParams,
    ) -> Result<(Value, bool), ApiError> {
        let req = DeleteRequest {
            resource: resource_ref(g),
            namespace: namespace.into(),
            name: name.into(),
            preconditions: Some(Preconditions {
                uid: p.uid.clone(),
                resource_version: p.resource_version.clone(),
            }),
            propagation_policy: p.propagation as i32,
            ..Default::default()
        };
        let resp = self
            .call(Idempotency::Write, |mut c, left| {
                let r = self.request(req.clone(), Some(left));
                async move { c.delete(r).await }
            })
            .await?;
        Ok((decode(&resp.object)?, resp.deleted))
    }

    /// The resources the server serves.
    pub async fn discovery(&self) -> Result<Vec<ApiResource>, ApiError> {
        let resp = self
            .call_channel(Idempotency::Read, |ch, left| {
                let r = self.request(DiscoveryRequest {}, Some(left));
                async move { DiscoveryClient::new(ch).server_resources(r).await }
            })
            .await?;
        Ok(resp.resources)
    }

    /// Raw access for callers that need to send what the typed calls would refuse to build.
    pub fn raw(&self) -> ObjectsClient<Channel> {
        self.objects()
    }
}

/// A PATCH of `kind` with `patch` as its body.
fn patch_request(
    g: &GroupVersionResource,
    namespace: &str,
    name: &str,
    sub: &str,
    kind: PatchType,
    patch: Vec<u8>,
) -> PatchRequest {
    PatchRequest {
        resource: resource_ref(g),
        namespace: namespace.into(),
        name: name.into(),
        subresource: sub.into(),
        patch_type: kind as i32,
        patch,
        ..Default::default()
    }
}

/// The PATCH that carries an apply.
fn apply_request(
    g: &GroupVersionResource,
    namespace: &str,
    name: &str,
    config: &Value,
    p: &ApplyParams,
) -> PatchRequest {
    PatchRequest {
        dry_run: p.dry_run,
        field_manager: p.field_manager.clone(),
        force: p.force,
        ..patch_request(g, namespace, name, "", PatchType::Apply, encode(config))
    }
}

/// A shard selector on the wire.
pub(crate) fn shard_selector(s: &ShardSelector) -> keel_wire::proto::ShardSelector {
    keel_wire::proto::ShardSelector {
        count: s.count,
        ids: s.ids.clone(),
        by_owner: s.by_owner,
    }
}

/// The `user-agent` this program sends, as client-go builds it: the program's name, then
/// keel's version (`keel-controller-manager/0.1.0`). The server takes the name as the field
/// manager of writes that name none.
fn user_agent() -> String {
    let program = std::env::args_os()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "keel-client".into());
    format!("{program}/{}", env!("CARGO_PKG_VERSION"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Mutex;

    use keel_api::Reason;

    use super::*;

    fn client(n: usize) -> Client {
        let channels = (0..n)
            .map(|i| {
                let url = format!("http://127.0.0.1:{}", 1 + i);
                let ch = Endpoint::from_shared(url.clone()).unwrap().connect_lazy();
                (url, ch)
            })
            .collect();
        Client {
            endpoints: Arc::new(Endpoints::new(channels)),
            timeout: Duration::from_secs(5),
            authorization: None,
            impersonation: Arc::default(),
        }
    }

    fn refused() -> tonic::Status {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        tonic::Status::from_error(Box::new(tonic::ConnectError(Box::new(io))))
    }

    fn reset() -> tonic::Status {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        tonic::Status::from_error(Box::new(io))
    }

    /// Runs one call whose tries fail with `failures` in turn (then succeed); returns its
    /// result and how many tries were made.
    async fn call(
        c: &Client,
        kind: Idempotency,
        failures: Vec<tonic::Status>,
    ) -> (Result<(), ApiError>, usize) {
        let failures = Mutex::new(failures.into_iter());
        let tries = Mutex::new(0);
        let result = c
            .call_channel(kind, |_, _| {
                *tries.lock().unwrap() += 1;
                let next = failures.lock().unwrap().next();
                async move { next.map_or(Ok(tonic::Response::new(())), Err) }
            })
            .await;
        (result, tries.into_inner().unwrap())
    }

    #[test]
    fn an_apply_is_a_patch_that_names_its_manager() {
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "settings"},
            "data": {"a": "1"},
        });
        let p = ApplyParams::new("writer-3").force();
        let req = apply_request(
            &gvr("", "v1", "configmaps"),
            "default",
            "settings",
            &config,
            &p,
        );
        assert_eq!(req.patch_type, PatchType::Apply as i32);
        assert_eq!(
            (req.field_manager.as_str(), req.force, req.dry_run),
            ("writer-3", true, false)
        );
        assert_eq!(
            (
                req.namespace.as_str(),
                req.name.as_str(),
                req.subresource.as_str()
            ),
            ("default", "settings", "")
        );
        assert_eq!(serde_json::from_slice::<Value>(&req.patch).unwrap(), config);
        assert!(!ApplyParams::new("keelctl").force);
    }

    #[tokio::test]
    async fn malformed_certificates_are_named_before_any_connection() {
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let key = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n";
        let cases = [
            ("garbage", None, "certificate authority (CA)"),
            (pem, Some(("garbage", key)), "client certificate"),
            (pem, Some((pem, "garbage")), "client key"),
        ];
        for (ca, identity, what) in cases {
            let mut config = ClientConfig::new(["https://127.0.0.1:1"]);
            config.tls = Some(TlsConfig {
                ca_pem: ca.as_bytes().to_vec(),
                identity: identity.map(|(c, k)| (c.as_bytes().to_vec(), k.as_bytes().to_vec())),
            });
            let e = Client::connect(&config).await.err().unwrap();
            assert_eq!(e.reason, Reason::BadRequest);
            assert_eq!(e.message, format!("the {what} holds no PEM block"));
        }
    }

    #[tokio::test]
    async fn a_write_that_was_not_processed_goes_to_the_next_endpoint() {
        let (r, tries) = call(&client(2), Idempotency::Write, vec![refused()]).await;
        assert!(r.is_ok());
        assert_eq!(tries, 2);
    }

    #[tokio::test]
    async fn a_write_with_an_unknown_outcome_is_not_repeated() {
        let (r, tries) = call(&client(2), Idempotency::Write, vec![reset()]).await;
        assert_eq!(r.unwrap_err().reason, Reason::ServiceUnavailable);
        assert_eq!(tries, 1);
    }

    #[tokio::test]
    async fn the_next_call_avoids_the_endpoint_whose_connection_broke() {
        let c = client(2);
        let (r, _) = call(&c, Idempotency::Write, vec![reset()]).await;
        assert!(r.is_err());
        let down: Vec<usize> = (0..2).filter(|&i| c.endpoints.is_down(i)).collect();
        assert_eq!(down.len(), 1, "endpoints down: {down:?}");
        for _ in 0..4 {
            assert_ne!(c.endpoints.pick(), down[0]);
        }
    }

    #[tokio::test]
    async fn a_read_is_repeated_whatever_the_transport_did() {
        let (r, tries) = call(&client(2), Idempotency::Read, vec![reset()]).await;
        assert!(r.is_ok());
        assert_eq!(tries, 2);
    }

    fn throttled(secs: u32) -> tonic::Status {
        keel_wire::status(
            ApiError::too_many_requests(Target::default(), "slow down").retry_after(secs),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_told_to_retry_later_waits_and_is_sent_again() {
        let started = Instant::now();
        let failures = vec![throttled(1), throttled(1)];
        let (r, tries) = call(&client(2), Idempotency::Write, failures).await;
        assert!(r.is_ok());
        assert_eq!(tries, 3);
        assert!(started.elapsed() >= Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_beyond_the_deadline_is_the_callers_error_at_once() {
        let started = Instant::now();
        let (r, tries) = call(&client(2), Idempotency::Write, vec![throttled(60)]).await;
        let e = r.unwrap_err();
        assert_eq!(e.reason, Reason::TooManyRequests);
        assert_eq!(e.retry_after_seconds, Some(60));
        assert_eq!(tries, 1);
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn the_servers_answer_is_final() {
        let not_found = tonic::Status::not_found("configmaps \"x\" not found");
        let (r, tries) = call(&client(2), Idempotency::Read, vec![not_found]).await;
        assert_eq!(r.unwrap_err().reason, Reason::NotFound);
        assert_eq!(tries, 1);
    }

    #[tokio::test]
    async fn when_every_endpoint_refuses_the_caller_hears_at_once() {
        let failures = vec![refused(), refused(), refused(), refused()];
        let (r, tries) = call(&client(3), Idempotency::Write, failures).await;
        assert_eq!(r.unwrap_err().reason, Reason::ServiceUnavailable);
        assert_eq!(tries, 3);
    }
}
