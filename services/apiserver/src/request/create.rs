//! Create: decode the body, settle its namespace, hand it to the registry.

use keel_api::{ApiError, Object};

use super::handler::{Context, Verb};
use super::names::resolve_namespace;
use crate::registry::strategy;

pub struct Create {
    /// The namespace of the request (may be empty: the object's, else `default`).
    pub namespace: String,
    /// The object's JSON.
    pub object: Vec<u8>,
}

impl Verb for Create {
    const NAME: &'static str = "create";
    type Output = Object;

    async fn run(self, cx: Context<'_>) -> Result<Object, ApiError> {
        let mut obj = strategy::decode(&cx.info, &self.object)?;
        resolve_namespace(&cx.info, &self.namespace, &mut obj)?;
        cx.registry.create(&cx.info, obj, cx.deadline).await
    }
}
