//! Patch: JSON, merge or strategic merge patch of one object.

use keel_api::{ApiError, Object};

use super::handler::{Context, Verb};
use super::names::{check_lookup, namespace_of};
use crate::registry::{PatchType, Subresource, target};

pub struct Patch {
    pub namespace: String,
    pub name: String,
    /// `""`, `"status"` or `"finalize"`.
    pub subresource: String,
    pub patch_type: PatchType,
    /// The patch document (JSON).
    pub patch: Vec<u8>,
}

impl Verb for Patch {
    const NAME: &'static str = "patch";
    type Output = Object;

    async fn run(self, cx: Context<'_>) -> Result<Object, ApiError> {
        let ns = namespace_of(&cx.info, &self.namespace);
        check_lookup(&cx.info, &ns, &self.name)?;
        let t = target(&cx.info, &self.name);
        let sub = Subresource::parse(&cx.info, &self.subresource, &t)?;
        cx.registry
            .patch(
                &cx.info,
                &ns,
                &self.name,
                sub,
                self.patch_type,
                &self.patch,
                cx.deadline,
            )
            .await
    }
}
