//! Event handlers: what an informer calls when its cache changes, and the usual ones that
//! turn changes into work-queue keys.

use std::sync::Arc;

use keel_api::Metadata;
use serde_json::Value;

use crate::key::ObjectKey;
use crate::workqueue::WorkQueue;

/// Told of every change of an informer's cache, after the cache has it.
///
/// Handlers run one after another on the informer's task and hold it up meanwhile: they must
/// be quick and must not block (enqueue a key and return). A handler must not add handlers
/// to the informer that calls it.
pub trait EventHandler: Send + Sync + 'static {
    fn on_add(&self, obj: &Arc<Value>);
    /// A change. Also called with `old` and `new` alike on a periodic resync; never for a
    /// watch event that left `resourceVersion` unchanged.
    fn on_update(&self, old: &Arc<Value>, new: &Arc<Value>);
    /// The object's last known state: it was deleted, stopped matching the informer's
    /// selector, or vanished while the watch was down.
    fn on_delete(&self, obj: &Arc<Value>);
}

type ObjFn = Box<dyn Fn(&Arc<Value>) + Send + Sync>;
type UpdateFn = Box<dyn Fn(&Arc<Value>, &Arc<Value>) + Send + Sync>;

/// A handler made of closures; events without one are ignored.
///
/// ```
/// # use keel_runtime::HandlerFns;
/// let h = HandlerFns::new()
///     .added(|obj| println!("added {}", obj["metadata"]["name"]))
///     .deleted(|obj| println!("deleted {}", obj["metadata"]["name"]));
/// ```
#[derive(Default)]
pub struct HandlerFns {
    add: Option<ObjFn>,
    update: Option<UpdateFn>,
    delete: Option<ObjFn>,
}

impl HandlerFns {
    pub fn new() -> HandlerFns {
        HandlerFns::default()
    }

    pub fn added(mut self, f: impl Fn(&Arc<Value>) + Send + Sync + 'static) -> Self {
        self.add = Some(Box::new(f));
        self
    }

    pub fn updated(mut self, f: impl Fn(&Arc<Value>, &Arc<Value>) + Send + Sync + 'static) -> Self {
        self.update = Some(Box::new(f));
        self
    }

    pub fn deleted(mut self, f: impl Fn(&Arc<Value>) + Send + Sync + 'static) -> Self {
        self.delete = Some(Box::new(f));
        self
    }
}

impl EventHandler for HandlerFns {
    fn on_add(&self, obj: &Arc<Value>) {
        if let Some(f) = &self.add {
            f(obj)
        }
    }

    fn on_update(&self, old: &Arc<Value>, new: &Arc<Value>) {
        if let Some(f) = &self.update {
            f(old, new)
        }
    }

    fn on_delete(&self, obj: &Arc<Value>) {
        if let Some(f) = &self.delete {
            f(obj)
        }
    }
}

/// Enqueues the object's own key on every event: the handler of a controller's primary
/// resource.
pub fn enqueue_handler(queue: WorkQueue<ObjectKey>) -> EnqueueHandler {
    EnqueueHandler { queue }
}

/// See [`enqueue_handler`].
pub struct EnqueueHandler {
    queue: WorkQueue<ObjectKey>,
}

impl EnqueueHandler {
    fn enqueue(&self, obj: &Value) {
        if let Ok(key) = ObjectKey::from_object(obj) {
            self.queue.add(key);
        }
    }
}

impl EventHandler for EnqueueHandler {
    fn on_add(&self, obj: &Arc<Value>) {
        self.enqueue(obj);
    }

    fn on_update(&self, _old: &Arc<Value>, new: &Arc<Value>) {
        self.enqueue(new);
    }

    fn on_delete(&self, obj: &Arc<Value>) {
        self.enqueue(obj);
    }
}

/// Enqueues the key of the object's controlling owner (the `ownerReferences` entry with
/// `controller: true`) when that owner is of kind `owner_kind`, in the object's namespace:
/// the handler of a controller's owned resources (a ReplicaSet controller watching Pods).
/// On an update that changed the owner, both the old and the new owner are enqueued.
pub fn enqueue_owner_handler(queue: WorkQueue<ObjectKey>, owner_kind: &str) -> EnqueueOwnerHandler {
    EnqueueOwnerHandler {
        queue,
        owner_kind: owner_kind.to_string(),
    }
}

/// See [`enqueue_owner_handler`].
pub struct EnqueueOwnerHandler {
    queue: WorkQueue<ObjectKey>,
    owner_kind: String,
}

impl EnqueueOwnerHandler {
    fn owner(&self, obj: &Value) -> Option<ObjectKey> {
        let owner = obj.controller_ref()?;
        if owner["kind"].as_str() != Some(self.owner_kind.as_str()) {
            return None;
        }
        let name = owner["name"].as_str().filter(|n| !n.is_empty())?;
        Some(ObjectKey::new(obj.namespace(), name))
    }
}

impl EventHandler for EnqueueOwnerHandler {
    fn on_add(&self, obj: &Arc<Value>) {
        if let Some(k) = self.owner(obj) {
            self.queue.add(k);
        }
    }

    fn on_update(&self, old: &Arc<Value>, new: &Arc<Value>) {
        let (old, new) = (self.owner(old), self.owner(new));
        if let Some(k) = &new {
            self.queue.add(k.clone());
        }
        if let Some(k) = old
            && Some(&k) != new.as_ref()
        {
            self.queue.add(k);
        }
    }

    fn on_delete(&self, obj: &Arc<Value>) {
        if let Some(k) = self.owner(obj) {
            self.queue.add(k);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;
    use std::sync::Mutex;

    fn pod(name: &str, owner: Option<(&str, &str)>) -> Arc<Value> {
        let mut p = json!({"metadata": {"namespace": "ns", "name": name}});
        if let Some((kind, owner)) = owner {
            p["metadata"]["ownerReferences"] = json!([
                {"kind": "Node", "name": "not-the-controller", "uid": "n"},
                {"kind": kind, "name": owner, "uid": "u", "controller": true}
            ]);
        }
        Arc::new(p)
    }

    async fn drain(q: &WorkQueue<ObjectKey>) -> Vec<String> {
        let mut out = Vec::new();
        while !q.is_empty() {
            let k = q.get().await.unwrap();
            q.done(&k);
            out.push(k.to_string());
        }
        out
    }

    #[tokio::test]
    async fn the_enqueue_handler_queues_the_objects_own_key() {
        let q = WorkQueue::default_controller_queue();
        let h = enqueue_handler(q.clone());
        h.on_add(&pod("a", None));
        h.on_update(&pod("a", None), &pod("a", None));
        h.on_delete(&pod("b", None));
        assert_eq!(drain(&q).await, ["ns/a", "ns/b"]);
    }

    #[tokio::test]
    async fn the_owner_handler_queues_the_controlling_owner_of_its_kind() {
        let q = WorkQueue::default_controller_queue();
        let h = enqueue_owner_handler(q.clone(), "ReplicaSet");
        h.on_add(&pod("p1", Some(("ReplicaSet", "rs1"))));
        h.on_add(&pod("p2", Some(("StatefulSet", "ss"))));
        h.on_add(&pod("p3", None));
        assert_eq!(drain(&q).await, ["ns/rs1"]);

        // Adopted by another: both owners must look again.
        h.on_update(
            &pod("p1", Some(("ReplicaSet", "rs1"))),
            &pod("p1", Some(("ReplicaSet", "rs2"))),
        );
        assert_eq!(drain(&q).await, ["ns/rs2", "ns/rs1"]);
        h.on_delete(&pod("p1", Some(("ReplicaSet", "rs2"))));
        assert_eq!(drain(&q).await, ["ns/rs2"]);
    }

    #[test]
    fn handler_fns_call_only_the_closures_given() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let h = HandlerFns::new().added({
            let seen = seen.clone();
            move |o| seen.lock().unwrap().push(o["metadata"]["name"].to_string())
        });
        h.on_add(&pod("a", None));
        h.on_update(&pod("a", None), &pod("a", None));
        h.on_delete(&pod("a", None));
        assert_eq!(*seen.lock().unwrap(), ["\"a\""]);
    }
}
