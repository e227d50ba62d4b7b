//! Update (replace): the whole object, or its `status`, or a Namespace's `finalize`.

use keel_api::{ApiError, Metadata, Object};
use serde_json::{Value, json};

use super::fields::FieldValidation;
use super::handler::{Context, Verb};
use super::limits::Class;
use super::manager::FieldManager;
use super::names::{check_names, object_namespace, resolve_namespace};
use crate::registry::{PatchType, Subresource, Write, strategy, target};

pub struct Update {
    pub namespace: String,
    /// `""`, `"status"`, `"scale"` (the body a `Scale`) or `"finalize"`.
    pub subresource: String,
    /// The object's JSON; its `metadata.resourceVersion`, when set, is a precondition.
    pub object: Vec<u8>,
    /// Answer the replaced object, writing nothing.
    pub dry_run: bool,
    pub field_validation: FieldValidation,
    pub manager: FieldManager,
}

impl Verb for Update {
    const NAME: &'static str = "update";
    const CLASS: Class = Class::Mutating;
    type Output = Object;

    async fn run(self, cx: Context<'_>) -> Result<Object, ApiError> {
        let manager = self.manager.resolve("UpdateOptions", false)?;
        if self.subresource == "scale" {
            return self.replace_scale(cx, &manager).await;
        }
        let mut obj = strategy::decode(&cx.info, &self.object)?;
        let ns = resolve_namespace(&cx.info, &self.namespace, &mut obj)?;
        check_names(&cx.info, &ns, obj.name())?;
        let t = target(&cx.info, obj.name());
        let sub = Subresource::parse(&cx.info, &self.subresource, &t)?;
        let store = cx
            .authorize(Self::NAME, &ns, obj.name(), &self.subresource)
            .await?;
        for w in self
            .field_validation
            .check(store, &cx.info, obj.as_map(), &t)?
        {
            cx.warn(w);
        }
        store
            .update(
                &cx.info,
                obj,
                sub,
                Write {
                    requester: cx.admission(),
                    ..Write::by(cx.user(), &manager, self.dry_run)
                },
                cx.deadline,
            )
            .await
    }
}

impl Update {
    /// A replace of the `scale` subresource: the body is an `autoscaling/v1` `Scale`, whose
    /// replicas reach the object where its kind keeps them; its `resourceVersion`, when set,
    /// is a precondition. Answered with the object's `Scale`.
    async fn replace_scale(self, cx: Context<'_>, manager: &str) -> Result<Object, ApiError> {
        let scale: Value = serde_json::from_slice(&self.object).map_err(|e| {
            ApiError::bad_request(target(&cx.info, ""), format!("malformed Scale: {e}"))
        })?;
        let name = scale
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let ns = object_namespace(&cx.info, &self.namespace);
        check_names(&cx.info, &ns, &name)?;
        let t = target(&cx.info, &name);
        let store = cx.authorize(Self::NAME, &ns, &name, "scale").await?;
        let sub = Subresource::parse(&cx.info, "scale", &t)?;
        let replicas = keel_api::scale::replicas(&scale, &t)?;
        let mut patch = json!({"spec": {"replicas": replicas}});
        let rv = scale
            .get("metadata")
            .and_then(|m| m.get("resourceVersion"))
            .and_then(Value::as_str)
            .filter(|rv| !rv.is_empty());
        if let Some(rv) = rv {
            patch["metadata"] = json!({ "resourceVersion": rv });
        }
        let body = serde_json::to_vec(&patch).map_err(|e| ApiError::internal(e.to_string()))?;
        let patched = store
            .patch(
                &cx.info,
                &ns,
                &name,
                sub,
                PatchType::Merge,
                &body,
                Write {
                    requester: cx.admission(),
                    ..Write::by(cx.user(), manager, self.dry_run)
                },
                cx.deadline,
            )
            .await?;
        store.scale_view(&cx.info, &patched)
    }
}
