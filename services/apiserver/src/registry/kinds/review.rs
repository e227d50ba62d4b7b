//! The reviews (SelfSubjectAccessReview and the like): created and answered at once by
//! `registry::reviews`, never stored, so no rule of the stored kinds applies to them. Each
//! says which review it is; the answer is the registry's (it needs the policy in force).

use super::Kind;

/// Which review a resource is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewKind {
    /// Who am I?
    SelfSubjectReview,
    /// May I do this?
    SelfSubjectAccessReview,
    /// May this user do this?
    SubjectAccessReview,
    /// What may I do in this namespace?
    SelfSubjectRulesReview,
}

pub struct Review(pub ReviewKind);

impl Kind for Review {
    fn review(&self) -> Option<ReviewKind> {
        Some(self.0)
    }
}
