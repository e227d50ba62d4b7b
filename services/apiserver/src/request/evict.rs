//! Eviction (`POST pods/NAME/eviction`, a `policy/v1` `Eviction`), as `kubectl drain` asks
//! for it: the Pod deleted with the eviction's delete options. Authorized as `create` on
//! `pods/eviction`, as Kubernetes authorizes it, not as a delete of the Pod.

use keel_api::{ApiError, FieldCause, Object, Target};

use super::handler::{Context, Verb};
use super::limits::Class;
use super::names::{check_lookup, object_namespace};
use crate::registry::DeleteOptions;

pub struct Evict {
    pub namespace: String,
    /// The Pod, as the path names it.
    pub name: String,
    /// The name the Eviction's own metadata gives (`""`: none), which must agree.
    pub eviction_name: String,
    pub options: DeleteOptions,
    /// The Eviction as the client sent it (what admission webhooks of `pods/eviction` see).
    pub eviction: serde_json::Value,
}

impl Verb for Evict {
    const NAME: &'static str = "create";
    const CLASS: Class = Class::Mutating;
    const OK_CODE: u16 = 201;
    type Output = ();

    async fn run(self, cx: Context<'_>) -> Result<(), ApiError> {
        let t = Target::new(&cx.info.gvr.group, &cx.info.gvr.resource, &self.name);
        if !cx.info.has_subresource("eviction") {
            let mut e = ApiError::not_found(t);
            e.message = format!(
                "{} has no subresource \"eviction\"",
                cx.info.qualified_name()
            );
            return Err(e);
        }
        let ns = object_namespace(&cx.info, &self.namespace);
        check_lookup(&cx.info, &ns, &self.name)?;
        let registry = cx
            .authorize(Self::NAME, &ns, &self.name, "eviction")
            .await?;
        if !self.eviction_name.is_empty() && self.eviction_name != self.name {
            return Err(ApiError::invalid(
                Target::new("policy", "Eviction", &self.eviction_name),
                vec![FieldCause::invalid(
                    "metadata.name",
                    &self.eviction_name,
                    "name in URL does not match name in Eviction object",
                )],
            ));
        }
        // The Eviction as sent, named and placed as its Pod is.
        let mut eviction = match self.eviction {
            serde_json::Value::Object(map) => serde_json::Value::Object(map),
            _ => serde_json::json!({}),
        };
        eviction["apiVersion"] = serde_json::json!("policy/v1");
        eviction["kind"] = serde_json::json!("Eviction");
        if !eviction["metadata"].is_object() {
            eviction["metadata"] = serde_json::json!({});
        }
        eviction["metadata"]["name"] = serde_json::json!(self.name);
        eviction["metadata"]["namespace"] = serde_json::json!(ns);
        let eviction =
            Object::from_value(eviction).map_err(|e| ApiError::internal(e.to_string()))?;
        registry
            .admit_eviction(
                &cx.info,
                eviction,
                cx.admission(),
                self.options.dry_run,
                cx.deadline,
            )
            .await?;
        // No PodDisruptionBudget is served yet to hold an eviction back (DESIGN.md).
        registry
            .delete(&cx.info, &ns, &self.name, self.options, cx.deadline)
            .await?;
        Ok(())
    }
}
