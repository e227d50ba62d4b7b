//! `Objects`: decodes each request, checks it, and hands it to the store.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use keel_api::proto::objects_server::Objects;
use keel_api::proto::{
    CreateRequest, DeleteRequest, DeleteResponse, GetRequest, ListRequest, ListResponse,
    ObjectResponse, PatchRequest, PatchType, PropagationPolicy, ResourceRef, UpdateRequest,
    WatchEvent, WatchRequest,
};
use keel_api::selector::{FieldSelector, LabelSelector};
use keel_api::validation::{dns1123_label, dns1123_subdomain};
use keel_api::{ApiError, FieldCause, Object, ResourceInfo, Target};
use tokio::time::Instant;
use tonic::{Request, Response, Status};

use super::deadline;
use crate::metrics::Metrics;
use crate::registry::strategy::{self, Subresource, kind_target, target};
use crate::registry::{Resources, patch};
use crate::storage::watcher::Filter;
use crate::storage::{ListQuery, Mutation, Propagation, Store};

pub struct ObjectsService {
    pub resources: Arc<Resources>,
    pub store: Arc<Store>,
    pub metrics: Metrics,
}

/// A client's watch stream; closing it (or the client going away) is counted.
pub struct CountedWatch {
    inner: crate::storage::watcher::WatchStream,
    metrics: Metrics,
    resource: String,
}

impl Stream for CountedWatch {
    type Item = Result<WatchEvent, Status>;
    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        Pin::new(&mut self.inner).poll_next(cx)
    }
}

impl Drop for CountedWatch {
    fn drop(&mut self) {
        self.metrics.watch_closed(&self.resource);
    }
}

fn resource_label(r: Option<&ResourceRef>) -> String {
    r.map(|r| {
        if r.group.is_empty() {
            r.resource.clone()
        } else {
            format!("{}.{}", r.resource, r.group)
        }
    })
    .unwrap_or_default()
}

/// What is wrong with a name and namespace, checked before they become part of a key.
fn name_problems(info: &ResourceInfo, namespace: &str, name: &str) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    if name.is_empty() {
        causes.push(FieldCause::required("metadata.name"));
    } else {
        let check = if info.kind == "Namespace" {
            dns1123_label
        } else {
            dns1123_subdomain
        };
        for e in check(name) {
            causes.push(FieldCause::invalid("metadata.name", name, e));
        }
    }
    if info.namespaced {
        for e in dns1123_label(namespace) {
            causes.push(FieldCause::invalid("metadata.namespace", namespace, e));
        }
    }
    causes
}

/// For a write of an object: its name and namespace must be valid (`Invalid` otherwise).
fn check_names(info: &ResourceInfo, namespace: &str, name: &str) -> Result<(), ApiError> {
    let causes = name_problems(info, namespace, name);
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(kind_target(info, name), causes))
    }
}

/// For a read, patch or delete by name: an object with an invalid name cannot exist, so it is
/// `NotFound`, as in Kubernetes (a missing name is still `Invalid`).
fn check_lookup(info: &ResourceInfo, namespace: &str, name: &str) -> Result<(), ApiError> {
    if name.is_empty() {
        return check_names(info, namespace, name);
    }
    if name_problems(info, namespace, name).is_empty() {
        Ok(())
    } else {
        Err(ApiError::not_found(target(info, name)))
    }
}

/// The namespace of a write: the request's and the object's must agree; `default` when
/// neither says.
fn resolve_namespace(
    info: &ResourceInfo,
    requested: &str,
    obj: &mut Object,
) -> Result<String, ApiError> {
    if !info.namespaced {
        return Ok(String::new());
    }
    let in_obj = obj.namespace().to_string();
    let ns = match (requested.is_empty(), in_obj.is_empty()) {
        (false, false) if requested != in_obj => {
            return Err(ApiError::bad_request(
                target(info, obj.name()),
                format!(
                    "the namespace of the object ({in_obj}) does not match the namespace of the request ({requested})"
                ),
            ));
        }
        (false, _) => requested.to_string(),
        (true, false) => in_obj,
        (true, true) => "default".to_string(),
    };
    obj.set_meta_str("namespace", &ns);
    Ok(ns)
}

fn selectors(
    t: &Target,
    labels: &str,
    fields: &str,
) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let l = LabelSelector::parse(labels)
        .map_err(|e| ApiError::bad_request(t.clone(), format!("invalid label selector: {e}")))?;
    let f = FieldSelector::parse(fields)
        .map_err(|e| ApiError::bad_request(t.clone(), format!("invalid field selector: {e}")))?;
    Ok((l, f))
}

/// The scope of a List or Watch: the namespace ("" for all, or a cluster-scoped resource) and
/// the parsed selectors.
fn collection_scope(
    info: &ResourceInfo,
    namespace: &str,
    label_selector: &str,
    field_selector: &str,
) -> Result<(String, LabelSelector, FieldSelector), ApiError> {
    let t = target(info, "");
    let (labels, fields) = selectors(&t, label_selector, field_selector)?;
    let namespace = namespace_of(info, namespace);
    if !namespace.is_empty() && !dns1123_label(&namespace).is_empty() {
        return Err(ApiError::invalid(
            kind_target(info, ""),
            vec![FieldCause::invalid(
                "metadata.namespace",
                &namespace,
                "not a valid namespace name",
            )],
        ));
    }
    Ok((namespace, labels, fields))
}

fn namespace_of(info: &ResourceInfo, ns: &str) -> String {
    if info.namespaced {
        ns.to_string()
    } else {
        String::new()
    }
}

impl ObjectsService {
    /// Runs a verb, recording its metrics and mapping its error to a gRPC status.
    async fn observe<T>(
        &self,
        verb: &'static str,
        resource: &str,
        fut: impl Future<Output = Result<T, ApiError>>,
    ) -> Result<Response<T>, Status> {
        let start = Instant::now();
        let out = fut.await;
        let code = out
            .as_ref()
            .map(|_| tonic::Code::Ok)
            .unwrap_or_else(|e| e.reason.code());
        self.metrics.request(verb, resource, code, start.elapsed());
        match out {
            Ok(v) => Ok(Response::new(v)),
            Err(e) => {
                if e.reason == keel_api::Reason::InternalError {
                    tracing::error!(verb, resource, error = %e, "internal error");
                }
                Err(e.into())
            }
        }
    }

    fn update_mutation(info: &Arc<ResourceInfo>, obj: Object, sub: Subresource) -> Mutation {
        let info = info.clone();
        Box::new(move |current: &Object| {
            let new = strategy::prepare_for_update(&info, obj.clone(), current, sub)?;
            strategy::validate(&info, &new)?;
            Ok(new)
        })
    }
}

type BoxWatch = Pin<Box<dyn Stream<Item = Result<WatchEvent, Status>> + Send>>;

#[tonic::async_trait]
impl Objects for ObjectsService {
    async fn create(
        &self,
        req: Request<CreateRequest>,
    ) -> Result<Response<ObjectResponse>, Status> {
        let deadline = deadline::of(&req);
        let r = req.into_inner();
        let label = resource_label(r.resource.as_ref());
        self.observe("create", &label, async {
            let info = self.resources.lookup(r.resource.as_ref())?;
            let mut obj = strategy::decode(&info, &r.object)?;
            resolve_namespace(&info, &r.namespace, &mut obj)?;
            let created = self.store.create(&info, obj, deadline).await?;
            Ok(ObjectResponse {
                object: created.to_vec(),
            })
        })
        .await
    }

    async fn get(&self, req: Request<GetRequest>) -> Result<Response<ObjectResponse>, Status> {
        let deadline = deadline::of(&req);
        let r = req.into_inner();
        let label = resource_label(r.resource.as_ref());
        self.observe("get", &label, async {
            let info = self.resources.lookup(r.resource.as_ref())?;
            let ns = namespace_of(&info, &r.namespace);
            check_lookup(&info, &ns, &r.name)?;
            let obj = self
                .store
                .get(&info, &ns, &r.name, &r.resource_version, deadline)
                .await?;
            Ok(ObjectResponse {
                object: obj.to_vec(),
            })
        })
        .await
    }

    async fn list(&self, req: Request<ListRequest>) -> Result<Response<ListResponse>, Status> {
        let deadline = deadline::of(&req);
        let r = req.into_inner();
        let label = resource_label(r.resource.as_ref());
        self.observe("list", &label, async {
            let info = self.resources.lookup(r.resource.as_ref())?;
            let t = target(&info, "");
            let (namespace, labels, fields) =
                collection_scope(&info, &r.namespace, &r.label_selector, &r.field_selector)?;
            if r.limit < 0 {
                return Err(ApiError::bad_request(t, "limit must not be negative"));
            }
            let q = ListQuery {
                namespace,
                labels,
                fields,
                limit: r.limit,
                continue_token: r.continue_token,
                resource_version: r.resource_version,
            };
            let res = self.store.list(&info, &q, deadline).await?;
            Ok(ListResponse {
                resource_version: res.revision.to_string(),
                continue_token: res.continue_token,
                items: res.items,
                remaining_item_count: res.remaining,
            })
        })
        .await
    }

    async fn update(
        &self,
        req: Request<UpdateRequest>,
    ) -> Result<Response<ObjectResponse>, Status> {
        let deadline = deadline::of(&req);
        let r = req.into_inner();
        let label = resource_label(r.resource.as_ref());
        self.observe("update", &label, async {
            let info = self.resources.lookup(r.resource.as_ref())?;
            let mut obj = strategy::decode(&info, &r.object)?;
            let ns = resolve_namespace(&info, &r.namespace, &mut obj)?;
            let name = obj.name().to_string();
            check_names(&info, &ns, &name)?;
            let t = target(&info, &name);
            let sub = Subresource::parse(&info, &r.subresource, &t)?;
            let precondition = match obj.resource_version() {
                "" => None,
                rv => Some(rv.parse::<i64>().map_err(|_| {
                    ApiError::invalid(
                        kind_target(&info, &t.name),
                        vec![FieldCause::invalid(
                            "metadata.resourceVersion",
                            rv,
                            "must be an integer",
                        )],
                    )
                })?),
            };
            let mutation = Self::update_mutation(&info, obj, sub);
            let updated = self
                .store
                .update(&info, precondition, &ns, &name, mutation, deadline)
                .await?;
            Ok(ObjectResponse {
                object: updated.to_vec(),
            })
        })
        .await
    }

    async fn patch(&self, req: Request<PatchRequest>) -> Result<Response<ObjectResponse>, Status> {
        let deadline = deadline::of(&req);
        let r = req.into_inner();
        let label = resource_label(r.resource.as_ref());
        self.observe("patch", &label, async {
            let info = self.resources.lookup(r.resource.as_ref())?;
            let ns = namespace_of(&info, &r.namespace);
            check_lookup(&info, &ns, &r.name)?;
            let t = target(&info, &r.name);
            let sub = Subresource::parse(&info, &r.subresource, &t)?;
            let kind = PatchType::try_from(r.patch_type).unwrap_or(PatchType::Unspecified);
            let body = patch::parse(&t, &r.patch)?;
            let precondition = match patch::precondition(kind, &body) {
                None => None,
                Some(rv) => Some(rv.parse::<i64>().map_err(|_| {
                    ApiError::invalid(
                        kind_target(&info, &t.name),
                        vec![FieldCause::invalid(
                            "metadata.resourceVersion",
                            &rv,
                            "must be an integer",
                        )],
                    )
                })?),
            };
            let mutation =
                patch::mutation(&info, kind, sub, body).map_err(|e| e.with_target(&t))?;
            let patched = self
                .store
                .patch(&info, precondition, &ns, &r.name, mutation, deadline)
                .await?;
            Ok(ObjectResponse {
                object: patched.to_vec(),
            })
        })
        .await
    }

    async fn delete(
        &self,
        req: Request<DeleteRequest>,
    ) -> Result<Response<DeleteResponse>, Status> {
        let deadline = deadline::of(&req);
        let r = req.into_inner();
        let label = resource_label(r.resource.as_ref());
        self.observe("delete", &label, async {
            let info = self.resources.lookup(r.resource.as_ref())?;
            let ns = namespace_of(&info, &r.namespace);
            check_lookup(&info, &ns, &r.name)?;
            let pre = r.preconditions.unwrap_or_default();
            let propagation =
                match PropagationPolicy::try_from(r.propagation_policy).unwrap_or_default() {
                    PropagationPolicy::Foreground => Propagation::Foreground,
                    PropagationPolicy::Orphan => Propagation::Orphan,
                    _ => Propagation::Background,
                };
            let (obj, deleted) = self
                .store
                .delete(
                    &info,
                    &ns,
                    &r.name,
                    &pre.uid,
                    &pre.resource_version,
                    propagation,
                    deadline,
                )
                .await?;
            Ok(DeleteResponse {
                object: obj.to_vec(),
                deleted,
            })
        })
        .await
    }

    type WatchStream = BoxWatch;

    async fn watch(&self, req: Request<WatchRequest>) -> Result<Response<BoxWatch>, Status> {
        let r = req.into_inner();
        let label = resource_label(r.resource.as_ref());
        let started = self
            .observe("watch", &label, async {
                let info = self.resources.lookup(r.resource.as_ref())?;
                let (namespace, labels, fields) =
                    collection_scope(&info, &r.namespace, &r.label_selector, &r.field_selector)?;
                let filter = Filter {
                    key_prefix: String::new(),
                    namespace: (!namespace.is_empty()).then_some(namespace),
                    labels,
                    fields,
                };
                let stream = self
                    .store
                    .watch(&info, filter, &r.resource_version, r.allow_bookmarks)
                    .await?;
                Ok((stream, info.gvr.resource.clone()))
            })
            .await?;
        let (inner, resource) = started.into_inner();
        self.metrics.watch_opened(&resource);
        let stream = CountedWatch {
            inner,
            metrics: self.metrics.clone(),
            resource,
        };
        Ok(Response::new(Box::pin(stream)))
    }
}
