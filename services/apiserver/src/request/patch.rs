//! Patch: JSON, merge, strategic merge patch or server-side apply of one object. An apply of
//! an object that does not exist creates it, when the caller may create too.

use std::sync::Arc;

use keel_api::{ApiError, FieldCause, Object, Reason};

use super::fields::FieldValidation;
use super::handler::{Context, Verb};
use super::limits::Class;
use super::manager::FieldManager;
use super::names::{check_lookup, object_namespace};
use crate::registry::managed::options_invalid;
use crate::registry::{PatchType, Subresource, Write, patch, target};

/// How many times an apply goes between "not found" and "already exists" (two appliers
/// creating one object at once) before it gives up.
const CREATE_ON_APPLY_ATTEMPTS: usize = 3;

pub struct Patch {
    pub namespace: String,
    pub name: String,
    /// `""`, `"status"`, `"scale"` or `"finalize"`.
    pub subresource: String,
    pub patch_type: PatchType,
    /// The patch document (JSON; an apply's may be YAML).
    pub patch: Vec<u8>,
    /// Answer the patched object, writing nothing.
    pub dry_run: bool,
    /// Checked on merge and strategic merge patches and applies (a JSON patch's values are not).
    pub field_validation: FieldValidation,
    pub manager: FieldManager,
    /// `force` as the client sent it: only an apply may send it.
    pub force: Option<bool>,
}

/// A patched object (shared by the PATCHes committed with it), and whether the patch (an
/// apply) created it.
pub struct Patched {
    pub object: Arc<Object>,
    pub created: bool,
}

impl Verb for Patch {
    const NAME: &'static str = "patch";
    const CLASS: Class = Class::Mutating;
    type Output = Patched;

    async fn run(self, cx: Context<'_>) -> Result<Patched, ApiError> {
        let apply = self.patch_type == PatchType::Apply;
        let manager = self.manager.resolve("PatchOptions", apply)?;
        if !apply && self.force.is_some() {
            return Err(options_invalid(
                "PatchOptions",
                FieldCause {
                    reason: "FieldValueForbidden".into(),
                    message: "Forbidden: may not be specified for non-apply patch".into(),
                    field: "force".into(),
                },
            ));
        }
        let ns = object_namespace(&cx.info, &self.namespace);
        check_lookup(&cx.info, &ns, &self.name)?;
        let t = target(&cx.info, &self.name);
        // Authorized first, as Kubernetes authorizes `resource/subresource` before it looks
        // for the subresource.
        let store = cx
            .authorize(Self::NAME, &ns, &self.name, &self.subresource)
            .await?;
        let sub = Subresource::parse(&cx.info, &self.subresource, &t)?;
        // An apply in YAML is checked and applied as the JSON it reads as.
        let is_json = serde_json::from_slice::<serde::de::IgnoredAny>(&self.patch).is_ok();
        let body = if apply && !is_json {
            let config = patch::parse(&t, PatchType::Apply, &self.patch)?;
            serde_json::to_vec(&config).map_err(|e| ApiError::internal(e.to_string()))?
        } else {
            self.patch
        };
        // A scale patch is a Scale's, not the kind's.
        if self.patch_type != PatchType::Json && sub != Subresource::Scale {
            self.field_validation
                .check_patch(store, &cx.info, &body, &t)?
                .into_iter()
                .for_each(|w| cx.warn(w));
        }
        let w = Write {
            force: self.force.unwrap_or(false),
            requester: cx.admission(),
            ..Write::by(cx.user(), &manager, self.dry_run)
        };
        let mut attempts = 0;
        loop {
            attempts += 1;
            let patched = store
                .patch(
                    &cx.info,
                    &ns,
                    &self.name,
                    sub,
                    self.patch_type,
                    &body,
                    w,
                    cx.deadline,
                )
                .await;
            match patched {
                // A subresource is never created (Kubernetes' status and scale stores do not
                // create on update): its NotFound stands.
                Err(e) if apply && e.reason == Reason::NotFound && sub == Subresource::Main => {}
                Ok(object) if sub == Subresource::Scale => {
                    return Ok(Patched {
                        object: Arc::new(store.scale_view(&cx.info, &object)?),
                        created: false,
                    });
                }
                patched => {
                    return patched.map(|object| Patched {
                        object,
                        created: false,
                    });
                }
            }
            // Create-on-apply: the caller must be allowed to create as well as to patch.
            cx.authorize("create", &ns, &self.name, &self.subresource)
                .await?;
            match store
                .create_on_apply(&cx.info, &ns, &self.name, sub, &body, w, cx.deadline)
                .await
            {
                Err(e)
                    if e.reason == Reason::AlreadyExists && attempts < CREATE_ON_APPLY_ATTEMPTS => {
                }
                made => {
                    let object = made?;
                    cx.made(&self.name);
                    return Ok(Patched {
                        object: Arc::new(object),
                        created: true,
                    });
                }
            }
        }
    }
}
