//! Get: one object by name.

use keel_api::{ApiError, Object};

use super::handler::{Context, Verb};
use super::names::{check_lookup, namespace_of};

pub struct Get {
    pub namespace: String,
    pub name: String,
    /// `""`: from etcd; `"0"`: any version (the watch cache may serve it).
    pub resource_version: String,
    /// An object whose initializers are still pending is found too (else: `NotFound`).
    pub include_uninitialized: bool,
}

impl Verb for Get {
    const NAME: &'static str = "get";
    type Output = Object;

    async fn run(self, cx: Context<'_>) -> Result<Object, ApiError> {
        let ns = namespace_of(&cx.info, &self.namespace);
        check_lookup(&cx.info, &ns, &self.name)?;
        cx.registry
            .get(
                &cx.info,
                &ns,
                &self.name,
                &self.resource_version,
                self.include_uninitialized,
                cx.deadline,
            )
            .await
    }
}
