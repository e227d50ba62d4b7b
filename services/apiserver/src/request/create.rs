//! Create: decode the body, settle its namespace, hand it to the registry.

use keel_api::{ApiError, Metadata, Object};

use super::fields::FieldValidation;
use super::handler::{Context, Verb};
use super::limits::Class;
use super::manager::FieldManager;
use super::names::resolve_namespace;
use crate::registry::{Write, strategy, target};

pub struct Create {
    /// The namespace of the request (may be empty: the object's, else `default`).
    pub namespace: String,
    /// The object's JSON.
    pub object: Vec<u8>,
    /// Answer what would be created, creating nothing.
    pub dry_run: bool,
    pub field_validation: FieldValidation,
    pub manager: FieldManager,
}

impl Verb for Create {
    const NAME: &'static str = "create";
    const CLASS: Class = Class::Mutating;
    const OK_CODE: u16 = 201;
    type Output = Object;

    async fn run(self, cx: Context<'_>) -> Result<Object, ApiError> {
        let manager = self.manager.resolve("CreateOptions", false)?;
        let mut obj = strategy::decode(&cx.info, &self.object)?;
        if cx.info.create_only {
            // A review: answered, not stored.
            let registry = cx.authorize(Self::NAME, "", "", "").await?;
            let (requester, authorizing) = cx.requester();
            return registry
                .review(&cx.info, obj, requester, authorizing, cx.deadline)
                .await;
        }
        let ns = resolve_namespace(&cx.info, &self.namespace, &mut obj)?;
        // As in Kubernetes, a create is authorized without the new object's name.
        let store = cx.authorize(Self::NAME, &ns, "", "").await?;
        let t = target(&cx.info, obj.name());
        for w in self
            .field_validation
            .check(store, &cx.info, obj.as_map(), &t)?
        {
            cx.warn(w);
        }
        let made = store
            .create(
                &cx.info,
                obj,
                Write {
                    requester: cx.admission(),
                    ..Write::by(cx.user(), &manager, self.dry_run)
                },
                cx.deadline,
            )
            .await?;
        cx.made(made.name());
        Ok(made)
    }
}
