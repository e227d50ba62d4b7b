//! The service account controller, as Kubernetes' serviceaccount-controller: every active
//! namespace has a ServiceAccount named `default`, created when the namespace appears and
//! again whenever it is deleted. Pods run as it unless they name another.
//!
//! Keys are namespace names, reconciled in the shard of the namespace's name (the namespaces
//! cache is sharded so). The ServiceAccounts cached are the `default` ones only (a field
//! selector), in every namespace: one small object per namespace.

use std::sync::Arc;

use keel_api::Metadata;
use keel_client::{ApiError, Client, GroupVersionResource, Reason};
use keel_runtime::{
    Action, Controller, HandlerFns, ObjectKey, ShardBy, Store, WatchOptions, WorkQueue,
    enqueue_handler,
};
use prometheus_client::registry::Registry;
use serde_json::json;
use tracing::info;

use super::{Context, SetupError, Start};

/// The controller's name (`--controllers`).
pub const NAME: &str = "serviceaccount";
/// The ServiceAccount every namespace gets.
pub const DEFAULT: &str = "default";

fn namespaces() -> GroupVersionResource {
    GroupVersionResource::new("", "v1", "namespaces")
}

fn serviceaccounts() -> GroupVersionResource {
    GroupVersionResource::new("", "v1", "serviceaccounts")
}

struct ServiceAccounts {
    client: Client,
    namespaces: Store,
    accounts: Store,
}

/// Sets up the controller: namespaces of this replica's shards queued as they come, and the
/// namespace of a `default` ServiceAccount queued when it is deleted.
pub fn setup(ctx: &Context, registry: &mut Registry) -> Result<Start, SetupError> {
    let ns_informer = ctx.factory.informer_with(
        &namespaces(),
        ctx.options(WatchOptions::default(), ShardBy::Name),
    );
    let sa_informer = ctx.factory.informer_with(
        &serviceaccounts(),
        WatchOptions {
            field_selector: format!("metadata.name={DEFAULT}"),
            ..WatchOptions::default()
        },
    );
    let queue = WorkQueue::default_controller_queue();
    ns_informer.add_handler(enqueue_handler(queue.clone()));
    let on_delete = queue.clone();
    sa_informer.add_handler(HandlerFns::new().deleted(move |sa| {
        on_delete.add(ObjectKey::new("", sa.namespace()));
    }));
    let this = Arc::new(ServiceAccounts {
        client: ctx.client.clone(),
        namespaces: ns_informer.store(),
        accounts: sa_informer.store(),
    });
    let controller = Controller::new(NAME, queue).workers(2).metrics(registry);
    Ok(super::start(
        ctx.gate.reading(&[&ns_informer, &sa_informer]),
        NAME,
        controller,
        this,
        super::by_name(ctx),
        |this, key| async move { this.reconcile(key).await },
    ))
}

impl ServiceAccounts {
    async fn reconcile(&self, key: ObjectKey) -> Result<Action, ApiError> {
        let Some(ns) = self.namespaces.get(&key) else {
            return Ok(Action::await_change());
        };
        if ns.is_deleting()
            || self
                .accounts
                .get(&ObjectKey::new(&key.name, DEFAULT))
                .is_some()
        {
            return Ok(Action::await_change());
        }
        let sa = json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": DEFAULT, "namespace": key.name},
        });
        match self.client.create(&serviceaccounts(), &key.name, &sa).await {
            Ok(_) => info!(namespace = %key.name, "created the default ServiceAccount"),
            // Already there (the cache is behind), or the namespace began terminating.
            Err(e) if matches!(e.reason, Reason::AlreadyExists | Reason::Forbidden) => {}
            Err(e) => return Err(e),
        }
        Ok(Action::await_change())
    }
}
