//! Get: one object by name.

use keel_api::{ApiError, Object};

use super::handler::{Context, Verb};
use super::limits::Class;
use super::names::{check_lookup, object_namespace};
use crate::registry::{Subresource, target};

pub struct Get {
    pub namespace: String,
    pub name: String,
    /// `""`: from etcd; `"0"`: any version (the watch cache may serve it).
    pub resource_version: String,
    /// An object whose initializers are still pending is found too (else: `NotFound`).
    pub include_uninitialized: bool,
    /// `""`, or a subresource the object has (`status`, `scale`): the object is read the
    /// same; a `scale` is answered as the object's `Scale`.
    pub subresource: String,
}

impl Verb for Get {
    const NAME: &'static str = "get";
    const CLASS: Class = Class::ReadOnly;
    type Output = Object;

    async fn run(self, cx: Context<'_>) -> Result<Object, ApiError> {
        let ns = object_namespace(&cx.info, &self.namespace);
        check_lookup(&cx.info, &ns, &self.name)?;
        // Authorized first, as Kubernetes authorizes `resource/subresource` before it looks
        // for the subresource (and so the request's record names the object).
        let registry = cx
            .authorize(Self::NAME, &ns, &self.name, &self.subresource)
            .await?;
        let sub = Subresource::parse(&cx.info, &self.subresource, &target(&cx.info, &self.name))?;
        let obj = registry
            .get(
                &cx.info,
                &ns,
                &self.name,
                &self.resource_version,
                self.include_uninitialized,
                cx.deadline,
            )
            .await?;
        match sub {
            Subresource::Scale => registry.scale_view(&cx.info, &obj),
            _ => Ok(obj),
        }
    }
}
