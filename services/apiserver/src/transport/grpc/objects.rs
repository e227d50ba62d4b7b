//! `Objects` over gRPC: each method turns its protobuf request into the request layer's verb,
//! has the handler serve it, and turns the answer (or the `ApiError`, as a gRPC status with
//! Kubernetes' `Status` in its details) back into protobuf.

use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use keel_api::{ApiError, GroupVersionResource, Target};
use keel_wire::proto::objects_server::Objects;
use keel_wire::proto::{
    CreateRequest, DeleteRequest, DeleteResponse, GetRequest, ListRequest, ListResponse,
    ObjectResponse, PatchRequest, PatchType as ProtoPatchType, PropagationPolicy, ResourceRef,
    UpdateRequest, WatchEvent as ProtoWatchEvent, WatchRequest,
};
use keel_wire::status;
use tonic::{Response, Status};

use super::{MAX_MESSAGE_BYTES, deadline};
use crate::auth::User;
use crate::request::{
    Caller, Create, Delete, DeleteOptions, FieldManager, FieldValidation, Get, Handler,
    Impersonation, List, Patch, PatchType, Propagation, Request, Update, Watch, WatchEvent,
};

pub struct ObjectsService {
    pub handler: Arc<Handler>,
}

type BoxWatch = Pin<Box<dyn Stream<Item = Result<ProtoWatchEvent, Status>> + Send>>;

/// The user the authentication interceptor found (none when authentication is off), and
/// whom the call asks to act as: the `impersonate-*` metadata, as Kubernetes' headers.
fn user_of<T>(req: &tonic::Request<T>) -> Caller {
    use tonic::metadata::KeyAndValueRef;
    let metadata = req.metadata().iter().filter_map(|kv| match kv {
        KeyAndValueRef::Ascii(k, v) => Some((k.as_str(), v.to_str().ok()?)),
        KeyAndValueRef::Binary(..) => None,
    });
    Caller {
        user: req.extensions().get::<User>().cloned(),
        impersonate: Impersonation::from_headers(metadata),
        // gRPC answers carry no warnings (keel-client has no place to show them).
        warnings: Default::default(),
    }
}

/// The request layer's request of `verb` on `resource`, with the client's `timeout`, from
/// `user`.
fn request<V>(
    resource: Option<ResourceRef>,
    timeout: Option<Duration>,
    caller: Caller,
    verb: V,
) -> Request<V> {
    Request {
        caller,
        resource: resource.map(|r| GroupVersionResource {
            group: r.group,
            version: r.version,
            resource: r.resource,
        }),
        timeout,
        verb,
    }
}

fn object_response(obj: &keel_api::Object) -> Response<ObjectResponse> {
    Response::new(ObjectResponse {
        object: obj.to_vec().into(),
    })
}

/// The answer of a PATCH with its object, which the other PATCHes of its batch share: encoded
/// once for all of them. The last encoding is kept beside a weak reference to its object,
/// which keeps that allocation from being reused while the encoding is kept, so an object at
/// the same address is the same object.
fn shared_object_response(obj: &Arc<keel_api::Object>) -> Response<ObjectResponse> {
    static LAST: Mutex<Option<(Weak<keel_api::Object>, Bytes)>> = Mutex::new(None);
    let hit = {
        let last = LAST.lock().unwrap_or_else(|e| e.into_inner());
        match &*last {
            Some((w, bytes)) if std::ptr::eq(w.as_ptr(), Arc::as_ptr(obj)) => Some(bytes.clone()),
            _ => None,
        }
    };
    let object = hit.unwrap_or_else(|| {
        let bytes = Bytes::from(obj.to_vec());
        *LAST.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Arc::downgrade(obj), bytes.clone()));
        bytes
    });
    Response::new(ObjectResponse { object })
}

/// The client's `user-agent` (gRPC sends one, as HTTP does): a write's manager when it names
/// none.
fn user_agent<T>(req: &tonic::Request<T>) -> String {
    req.metadata()
        .get("user-agent")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

fn patch_type(t: i32) -> PatchType {
    match ProtoPatchType::try_from(t).unwrap_or(ProtoPatchType::Unspecified) {
        ProtoPatchType::Json => PatchType::Json,
        ProtoPatchType::Merge => PatchType::Merge,
        ProtoPatchType::Strategic => PatchType::Strategic,
        ProtoPatchType::Apply => PatchType::Apply,
        ProtoPatchType::Unspecified => PatchType::Unspecified,
    }
}

fn propagation(p: i32) -> Propagation {
    match PropagationPolicy::try_from(p).unwrap_or_default() {
        PropagationPolicy::Foreground => Propagation::Foreground,
        PropagationPolicy::Orphan => Propagation::Orphan,
        _ => Propagation::Background,
    }
}

fn watch_event(ev: WatchEvent) -> ProtoWatchEvent {
    ProtoWatchEvent {
        r#type: ev.kind.as_str().into(),
        object: ev.object,
    }
}

#[tonic::async_trait]
impl Objects for ObjectsService {
    async fn create(
        &self,
        req: tonic::Request<CreateRequest>,
    ) -> Result<Response<ObjectResponse>, Status> {
        let (timeout, user) = (deadline::timeout(&req), user_of(&req));
        let user_agent = user_agent(&req);
        let r = req.into_inner();
        let field_validation =
            FieldValidation::parse(&r.field_validation, &Target::default()).map_err(status)?;
        let manager = FieldManager {
            field_manager: r.field_manager,
            user_agent,
        };
        let verb = Create {
            namespace: r.namespace,
            object: r.object,
            dry_run: r.dry_run,
            field_validation,
            manager,
        };
        let created = self
            .handler
            .handle(request(r.resource, timeout, user, verb))
            .await
            .map_err(status)?;
        Ok(object_response(&created))
    }

    async fn get(
        &self,
        req: tonic::Request<GetRequest>,
    ) -> Result<Response<ObjectResponse>, Status> {
        let (timeout, user) = (deadline::timeout(&req), user_of(&req));
        let r = req.into_inner();
        let verb = Get {
            namespace: r.namespace,
            name: r.name,
            resource_version: r.resource_version,
            include_uninitialized: r.include_uninitialized,
            subresource: r.subresource,
        };
        let obj = self
            .handler
            .handle(request(r.resource, timeout, user, verb))
            .await
            .map_err(status)?;
        Ok(object_response(&obj))
    }

    async fn list(
        &self,
        req: tonic::Request<ListRequest>,
    ) -> Result<Response<ListResponse>, Status> {
        let (timeout, user) = (deadline::timeout(&req), user_of(&req));
        let r = req.into_inner();
        let verb = List {
            namespace: r.namespace,
            label_selector: r.label_selector,
            field_selector: r.field_selector,
            limit: r.limit,
            continue_token: r.continue_token,
            resource_version: r.resource_version,
            resource_version_match: r.resource_version_match,
            include_uninitialized: r.include_uninitialized,
            shard: r.shard.map(shard_selector),
        };
        let resource = r.resource.as_ref().map(|r| r.resource.clone());
        let res = self
            .handler
            .handle(request(r.resource, timeout, user, verb))
            .await
            .map_err(status)?;
        let list = ListResponse {
            resource_version: res.revision.to_string(),
            continue_token: res.continue_token,
            items: res.items,
            remaining_item_count: res.remaining,
        };
        // Past the limit tonic would refuse to encode it with a bare OUT_OF_RANGE (keel's code
        // for Expired): say what is wrong and what to do instead.
        let size = prost::Message::encoded_len(&list);
        if size > MAX_MESSAGE_BYTES {
            return Err(status(ApiError::too_large(
                Target::new("", &resource.unwrap_or_default(), ""),
                format!(
                    "the list is {size} bytes, more than the {MAX_MESSAGE_BYTES} bytes a response may carry: list in pages (limit)"
                ),
            )));
        }
        Ok(Response::new(list))
    }

    async fn update(
        &self,
        req: tonic::Request<UpdateRequest>,
    ) -> Result<Response<ObjectResponse>, Status> {
        let (timeout, user) = (deadline::timeout(&req), user_of(&req));
        let user_agent = user_agent(&req);
        let r = req.into_inner();
        let field_validation =
            FieldValidation::parse(&r.field_validation, &Target::default()).map_err(status)?;
        let verb = Update {
            namespace: r.namespace,
            subresource: r.subresource,
            object: r.object,
            dry_run: r.dry_run,
            field_validation,
            manager: FieldManager {
                field_manager: r.field_manager,
                user_agent,
            },
        };
        let updated = self
            .handler
            .handle(request(r.resource, timeout, user, verb))
            .await
            .map_err(status)?;
        Ok(object_response(&updated))
    }

    async fn patch(
        &self,
        req: tonic::Request<PatchRequest>,
    ) -> Result<Response<ObjectResponse>, Status> {
        let (timeout, user) = (deadline::timeout(&req), user_of(&req));
        let user_agent = user_agent(&req);
        let r = req.into_inner();
        let verb = Patch {
            namespace: r.namespace,
            name: r.name,
            subresource: r.subresource,
            patch_type: patch_type(r.patch_type),
            patch: r.patch,
            dry_run: r.dry_run,
            field_validation: FieldValidation::parse(&r.field_validation, &Target::default())
                .map_err(status)?,
            manager: FieldManager {
                field_manager: r.field_manager,
                user_agent,
            },
            // proto3 has no absent bool: false is "not given".
            force: r.force.then_some(true),
        };
        let patched = self
            .handler
            .handle(request(r.resource, timeout, user, verb))
            .await
            .map_err(status)?;
        Ok(shared_object_response(&patched.object))
    }

    async fn delete(
        &self,
        req: tonic::Request<DeleteRequest>,
    ) -> Result<Response<DeleteResponse>, Status> {
        let (timeout, user) = (deadline::timeout(&req), user_of(&req));
        let r = req.into_inner();
        let pre = r.preconditions.unwrap_or_default();
        let verb = Delete {
            namespace: r.namespace,
            name: r.name,
            options: DeleteOptions {
                uid: pre.uid,
                resource_version: pre.resource_version,
                propagation: propagation(r.propagation_policy),
                dry_run: r.dry_run,
            },
        };
        let (obj, deleted) = self
            .handler
            .handle(request(r.resource, timeout, user, verb))
            .await
            .map_err(status)?;
        Ok(Response::new(DeleteResponse {
            object: obj.to_vec(),
            deleted,
        }))
    }

    type WatchStream = BoxWatch;

    async fn watch(&self, req: tonic::Request<WatchRequest>) -> Result<Response<BoxWatch>, Status> {
        let (timeout, user) = (deadline::timeout(&req), user_of(&req));
        let r = req.into_inner();
        let verb = Watch {
            namespace: r.namespace,
            label_selector: r.label_selector,
            field_selector: r.field_selector,
            resource_version: r.resource_version,
            allow_bookmarks: r.allow_bookmarks,
            send_initial_events: r.send_initial_events,
            include_uninitialized: r.include_uninitialized,
            shard: r.shard.map(shard_selector),
        };
        let events = self
            .handler
            .handle(request(r.resource, timeout, user, verb))
            .await
            .map_err(status)?;
        let stream = events.map(|item| item.map(watch_event).map_err(status));
        Ok(Response::new(Box::pin(stream)))
    }
}

/// A shard selector as the client sent it; the request layer checks it.
fn shard_selector(s: keel_wire::proto::ShardSelector) -> keel_api::shard::ShardSelector {
    keel_api::shard::ShardSelector {
        count: s.count,
        ids: s.ids,
        by_owner: s.by_owner,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_api::Object;
    use serde_json::json;

    fn cm(v: &str) -> Arc<Object> {
        Arc::new(Object::from_value(json!({"metadata": {"name": "cm"}, "data": {"v": v}})).unwrap())
    }

    fn answered(obj: &Arc<Object>) -> Object {
        Object::from_slice(&shared_object_response(obj).into_inner().object).unwrap()
    }

    #[test]
    fn a_shared_object_is_answered_as_itself_whatever_came_before() {
        let a = cm("a");
        assert_eq!(answered(&a), *a);
        assert_eq!(answered(&a), *a, "encoded once, answered twice");
        // A new object, made after the last answered one is gone (the allocator may offer it
        // the same address), is encoded anew.
        drop(a);
        for i in 0..100 {
            let next = cm(&format!("b{i}"));
            assert_eq!(answered(&next), *next);
        }
    }
}
