//! List: the objects a namespace and selectors choose, in pages.

use keel_api::ApiError;
use keel_api::shard::ShardSelector;

use super::handler::{Context, Verb};
use super::limits::Class;
use super::names::{collection_scope, selected_name, shard_scope};
pub use crate::registry::ListResult;
use crate::registry::{ListOptions, target};

pub struct List {
    pub namespace: String,
    pub label_selector: String,
    pub field_selector: String,
    /// At most this many items per page (0: all).
    pub limit: i64,
    pub continue_token: String,
    pub resource_version: String,
    /// `"Exact"`: at exactly `resource_version`; else not older than it.
    pub resource_version_match: String,
    /// Objects whose initializers are still pending are listed too.
    pub include_uninitialized: bool,
    /// Only these shards (as the client sent it; checked here).
    pub shard: Option<ShardSelector>,
}

impl Verb for List {
    const NAME: &'static str = "list";
    const CLASS: Class = Class::ReadOnly;
    type Output = ListResult;

    async fn run(self, cx: Context<'_>) -> Result<ListResult, ApiError> {
        let mut filter = collection_scope(
            &cx.info,
            &self.namespace,
            &self.label_selector,
            &self.field_selector,
        )?;
        filter.include_uninitialized = self.include_uninitialized;
        filter.shard = shard_scope(&cx.info, self.shard)?;
        if self.limit < 0 {
            return Err(ApiError::bad_request(
                target(&cx.info, ""),
                "limit must not be negative",
            ));
        }
        let namespace = filter.namespace.clone().unwrap_or_default();
        cx.authorize(Self::NAME, &namespace, &selected_name(&filter), "")
            .await?
            .list(
                &cx.info,
                ListOptions {
                    filter,
                    limit: self.limit,
                    continue_token: self.continue_token,
                    resource_version: self.resource_version,
                    resource_version_match: self.resource_version_match,
                },
                cx.deadline,
            )
            .await
    }
}
