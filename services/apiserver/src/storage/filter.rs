//! Which objects a List or a Watch wants: a namespace, label and field selectors, and whether
//! objects still being initialized count.

use keel_api::Selectable;
use keel_api::selector::{FieldSelector, LabelSelector};
use keel_api::shard::ShardSelector;

/// The objects a List or Watch selects.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only objects of this namespace (`None`: every namespace, or a cluster-scoped resource).
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    /// Objects whose initializers are still pending are seen too (`includeUninitialized`);
    /// without it they appear, as `ADDED` to a watch, once the last initializer is done.
    pub include_uninitialized: bool,
    /// Only objects of these shards of a controller's keyspace.
    pub shard: Option<ShardSelector>,
}

impl Filter {
    pub fn matches(&self, obj: &impl Selectable) -> bool {
        self.namespace
            .as_ref()
            .is_none_or(|ns| obj.namespace() == ns)
            && self.labels.matches_object(obj)
            && self.fields.matches_object(obj)
            && (self.include_uninitialized || obj.is_initialized())
            && self.shard.as_ref().is_none_or(|s| s.matches(obj))
    }

    /// Whether every object matches but for the namespace (`remainingItemCount` is only known
    /// then; objects still being initialized are counted in it, as they are few and brief).
    pub fn selects_all(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty() && self.shard.is_none()
    }
}
