//! Delete: one object by name, with preconditions and a propagation policy.

use keel_api::{ApiError, Object};

use super::handler::{Context, Verb};
use super::limits::Class;
use super::names::{check_lookup, object_namespace};
use crate::registry::DeleteOptions;

pub struct Delete {
    pub namespace: String,
    pub name: String,
    pub options: DeleteOptions,
}

impl Verb for Delete {
    const NAME: &'static str = "delete";
    const CLASS: Class = Class::Mutating;
    /// The object as it was last, and whether it is gone (else: marked, finalizers pending).
    type Output = (Object, bool);

    async fn run(self, cx: Context<'_>) -> Result<(Object, bool), ApiError> {
        let ns = object_namespace(&cx.info, &self.namespace);
        check_lookup(&cx.info, &ns, &self.name)?;
        cx.authorize(Self::NAME, &ns, &self.name, "")
            .await?
            .delete_admitted(
                &cx.info,
                &ns,
                &self.name,
                self.options,
                Some(cx.admission()),
                cx.deadline,
            )
            .await
    }
}
