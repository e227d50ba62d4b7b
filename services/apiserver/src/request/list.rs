//! List: the objects a namespace and selectors choose, in pages.

use keel_api::ApiError;

use super::handler::{Context, Verb};
use super::names::collection_scope;
pub use crate::registry::ListResult;
use crate::registry::target;

pub struct List {
    pub namespace: String,
    pub label_selector: String,
    pub field_selector: String,
    /// At most this many items per page (0: all).
    pub limit: i64,
    pub continue_token: String,
    pub resource_version: String,
    /// Objects whose initializers are still pending are listed too.
    pub include_uninitialized: bool,
}

impl Verb for List {
    const NAME: &'static str = "list";
    type Output = ListResult;

    async fn run(self, cx: Context<'_>) -> Result<ListResult, ApiError> {
        let mut filter = collection_scope(
            &cx.info,
            &self.namespace,
            &self.label_selector,
            &self.field_selector,
        )?;
        filter.include_uninitialized = self.include_uninitialized;
        if self.limit < 0 {
            return Err(ApiError::bad_request(
                target(&cx.info, ""),
                "limit must not be negative",
            ));
        }
        cx.registry
            .list(
                &cx.info,
                filter,
                self.limit,
                self.continue_token,
                &self.resource_version,
                cx.deadline,
            )
            .await
    }
}
