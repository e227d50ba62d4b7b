//! Update (replace): the whole object, or its `status`, or a Namespace's `finalize`.

use keel_api::{ApiError, Metadata, Object};

use super::fields::FieldValidation;
use super::handler::{Context, Verb};
use super::limits::Class;
use super::manager::FieldManager;
use super::names::{check_names, resolve_namespace};
use crate::registry::{Subresource, Write, strategy, target};

pub struct Update {
    pub namespace: String,
    /// `""`, `"status"` or `"finalize"`.
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
        let mut obj = strategy::decode(&cx.info, &self.object)?;
        let ns = resolve_namespace(&cx.info, &self.namespace, &mut obj)?;
        check_names(&cx.info, &ns, obj.name())?;
        let t = target(&cx.info, obj.name());
        let sub = Subresource::parse(&cx.info, &self.subresource, &t)?;
        if sub == Subresource::Scale {
            return Err(ApiError::new(
                keel_api::Reason::MethodNotAllowed,
                t,
                "a replace of the scale subresource is not supported: PATCH it",
            ));
        }
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
                Write::by(cx.user(), &manager, self.dry_run),
                cx.deadline,
            )
            .await
    }
}
