//! Update (replace): the whole object, or its `status`, or a Namespace's `finalize`.

use keel_api::{ApiError, Object};

use super::handler::{Context, Verb};
use super::names::{check_names, resolve_namespace};
use crate::registry::{Subresource, strategy, target};

pub struct Update {
    pub namespace: String,
    /// `""`, `"status"` or `"finalize"`.
    pub subresource: String,
    /// The object's JSON; its `metadata.resourceVersion`, when set, is a precondition.
    pub object: Vec<u8>,
}

impl Verb for Update {
    const NAME: &'static str = "update";
    type Output = Object;

    async fn run(self, cx: Context<'_>) -> Result<Object, ApiError> {
        let mut obj = strategy::decode(&cx.info, &self.object)?;
        let ns = resolve_namespace(&cx.info, &self.namespace, &mut obj)?;
        check_names(&cx.info, &ns, obj.name())?;
        let t = target(&cx.info, obj.name());
        let sub = Subresource::parse(&cx.info, &self.subresource, &t)?;
        cx.registry.update(&cx.info, obj, sub, cx.deadline).await
    }
}
