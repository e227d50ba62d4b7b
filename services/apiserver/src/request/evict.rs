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
        let eviction = Object::from_value(serde_json::json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": self.name, "namespace": ns},
        }))
        .map_err(|e| ApiError::internal(e.to_string()))?;
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
