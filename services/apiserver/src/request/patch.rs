//! Patch: JSON, merge or strategic merge patch of one object.

use keel_api::{ApiError, Object};

use super::fields::FieldValidation;
use super::handler::{Context, Verb};
use super::limits::Class;
use super::names::{check_lookup, object_namespace};
use crate::registry::{PatchType, Subresource, target};

pub struct Patch {
    pub namespace: String,
    pub name: String,
    /// `""`, `"status"` or `"finalize"`.
    pub subresource: String,
    pub patch_type: PatchType,
    /// The patch document (JSON).
    pub patch: Vec<u8>,
    /// Answer the patched object, writing nothing.
    pub dry_run: bool,
    /// Checked on merge and strategic merge patches (a JSON patch's values are not).
    pub field_validation: FieldValidation,
}

impl Verb for Patch {
    const NAME: &'static str = "patch";
    const CLASS: Class = Class::Mutating;
    type Output = Object;

    async fn run(self, cx: Context<'_>) -> Result<Object, ApiError> {
        let ns = object_namespace(&cx.info, &self.namespace);
        check_lookup(&cx.info, &ns, &self.name)?;
        let t = target(&cx.info, &self.name);
        // Authorized first, as Kubernetes authorizes `resource/subresource` before it looks
        // for the subresource.
        let store = cx
            .authorize(Self::NAME, &ns, &self.name, &self.subresource)
            .await?;
        let sub = Subresource::parse(&cx.info, &self.subresource, &t)?;
        // A scale patch is a Scale's, not the kind's.
        if self.patch_type != PatchType::Json && sub != Subresource::Scale {
            self.field_validation
                .check_patch(store, &cx.info, &self.patch, &t)?
                .into_iter()
                .for_each(|w| cx.warn(w));
        }
        store
            .patch(
                &cx.info,
                &ns,
                &self.name,
                sub,
                self.patch_type,
                &self.patch,
                cx.user(),
                self.dry_run,
                cx.deadline,
            )
            .await
    }
}
