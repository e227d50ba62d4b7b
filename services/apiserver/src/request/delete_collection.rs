//! DeleteCollection: every object a namespace and selectors choose, deleted one by one with the
//! same options, as Kubernetes' `deletecollection` does (authorized as that verb).

use keel_api::{ApiError, Metadata, Object};

use super::handler::{Context, Verb};
use super::limits::Class;
use super::names::collection_scope;
use crate::registry::{DeleteOptions, ListOptions};

/// At most this many objects per request: the rest stay for the next (bounded work and memory).
pub const MAX_ITEMS: i64 = 10_000;

pub struct DeleteCollection {
    pub namespace: String,
    pub label_selector: String,
    pub field_selector: String,
    pub options: DeleteOptions,
}

impl Verb for DeleteCollection {
    const NAME: &'static str = "deletecollection";
    const CLASS: Class = Class::Mutating;
    /// The objects as they were last (deleted, or marked with finalizers pending).
    type Output = Vec<Object>;

    async fn run(self, cx: Context<'_>) -> Result<Vec<Object>, ApiError> {
        let filter = collection_scope(
            &cx.info,
            &self.namespace,
            &self.label_selector,
            &self.field_selector,
        )?;
        let namespace = filter.namespace.clone().unwrap_or_default();
        let registry = cx.authorize(Self::NAME, &namespace, "", "").await?;
        let list = registry
            .list(
                &cx.info,
                ListOptions {
                    filter,
                    limit: MAX_ITEMS,
                    ..ListOptions::default()
                },
                cx.deadline,
            )
            .await?;
        let mut deleted = Vec::with_capacity(list.items.len());
        for item in &list.items {
            let obj = Object::from_slice(item)
                .map_err(|e| ApiError::internal(format!("a listed object does not parse: {e}")))?;
            let options = DeleteOptions {
                uid: obj.uid().to_string(),
                ..self.options.clone()
            };
            match registry
                .delete_admitted(
                    &cx.info,
                    obj.namespace(),
                    obj.name(),
                    options,
                    Some(cx.admission()),
                    cx.deadline,
                )
                .await
            {
                Ok((o, _)) => deleted.push(o),
                // Deleted meanwhile by someone else (or replaced: another uid): not ours to.
                Err(e)
                    if matches!(
                        e.reason,
                        keel_api::Reason::NotFound | keel_api::Reason::Conflict
                    ) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }
}
