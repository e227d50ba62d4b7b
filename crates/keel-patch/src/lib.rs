//! Pure patch functions over JSON values: no I/O, no knowledge of the server.
//!
//! - [`apply_json_patch`]: RFC 6902 JSON Patch (all six operations; a failing `test` fails the
//!   whole patch and leaves the document untouched).
//! - [`apply_merge_patch`]: RFC 7386 JSON Merge Patch (`null` deletes).

#![forbid(unsafe_code)]

mod error;
mod json;
mod merge;

pub use error::PatchError;
pub use json::{MAX_JSON_PATCH_OPERATIONS, apply_json_patch, parse_json_patch};
pub use merge::apply_merge_patch;
