//! Delete: one object by name, with preconditions and a propagation policy.

use keel_api::{ApiError, Object};

use super::handler::{Context, Verb};
use super::names::{check_lookup, namespace_of};
use crate::registry::DeleteOptions;

pub struct Delete {
    pub namespace: String,
    pub name: String,
    pub options: DeleteOptions,
}

impl Verb for Delete {
    const NAME: &'static str = "delete";
    /// The object as it was last, and whether it is gone (else: marked, finalizers pending).
    type Output = (Object, bool);

    async fn run(self, cx: Context<'_>) -> Result<(Object, bool), ApiError> {
        let ns = namespace_of(&cx.info, &self.namespace);
        check_lookup(&cx.info, &ns, &self.name)?;
        cx.registry
            .delete(&cx.info, &ns, &self.name, self.options, cx.deadline)
            .await
    }
}
