//! `admissionregistration.k8s.io/v1` MutatingWebhookConfiguration and
//! ValidatingWebhookConfiguration: which admission webhooks writes are sent to, defaulted and
//! validated as `registry::webhooks::config` reads them.

use keel_api::{FieldCause, Object};

use super::{Kind, MergeKeys, builtin_merge_keys};
use crate::registry::webhooks::config;

pub struct WebhookConfiguration {
    /// A MutatingWebhookConfiguration's (which has `reinvocationPolicy`).
    pub mutating: bool,
}

impl Kind for WebhookConfiguration {
    fn merge_schema(&self) -> Option<MergeKeys> {
        let kind = if self.mutating {
            "MutatingWebhookConfiguration"
        } else {
            "ValidatingWebhookConfiguration"
        };
        builtin_merge_keys("admissionregistration.k8s.io/v1", kind)
    }

    fn defaults(&self, obj: &mut Object) {
        config::defaults(obj, self.mutating);
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        config::validate(obj, causes);
    }

    fn validate_create(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        config::validate_side_effects(obj, None, causes);
    }

    fn validate_update(&self, new: &Object, old: &Object, causes: &mut Vec<FieldCause>) {
        config::validate_side_effects(new, Some(old), causes);
    }
}
