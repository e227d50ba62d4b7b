//! The one error type of this crate.

/// Why a patch could not be applied. Every variant is the caller's fault (bad patch or a
/// patch that does not fit the document); the server maps them to `BadRequest`/`Invalid`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch document is not of the expected shape (not a JSON array of operations, an
    /// unknown `op`, a missing `path`, a merge patch that is not an object where one is needed,
    /// an unknown `$patch` directive, a list element without its merge key, a document nested
    /// deeper than [`MAX_DEPTH`](crate::MAX_DEPTH)...).
    #[error("malformed patch: {0}")]
    Malformed(String),
    /// A JSON Patch `test` operation did not hold: the patch is refused as a whole.
    #[error("test operation failed at {path}")]
    TestFailed { path: String },
    /// An operation could not be applied to this document (missing path, bad index...).
    #[error("cannot apply patch at {path}: {reason}")]
    Inapplicable { path: String, reason: String },
    /// The patch is larger than the server accepts.
    #[error("patch has {count} operations, more than the limit of {limit}")]
    TooManyOperations { count: usize, limit: usize },
    /// A three-way patch would overwrite a field that another writer changed since the
    /// last apply (its live value differs from the last-applied configuration). Only returned
    /// when the caller did not ask to overwrite: re-read the object and resolve the change,
    /// or apply again with overwrite (what `kubectl apply` does by default). `path` names the
    /// first such field.
    #[error("conflict at {path}: another writer changed this field since the last apply")]
    Conflict {
        /// The field, with list elements named by their keys:
        /// `spec.template.spec.containers[name=app].image`.
        path: String,
    },
}
