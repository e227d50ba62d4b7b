//! Pure patch functions over JSON values: no I/O, no knowledge of the server.
//!
//! - [`apply_json_patch`]: RFC 6902 JSON Patch (all six operations; a failing `test` fails the
//!   whole patch and leaves the document untouched).
//! - [`apply_merge_patch`]: RFC 7386 JSON Merge Patch (`null` deletes), and its diffs
//!   [`create_two_way_json_merge_patch`] and [`create_three_way_json_merge_patch`] (client-side
//!   apply of custom kinds).
//! - [`apply_strategic_merge_patch`]: Kubernetes' strategic merge patch, whose lists merge by
//!   key as a [`MergeSchema`] says ([`BuiltinSchema`] for built-in kinds, [`OpenApiSchema`] for
//!   custom ones), and its diffs [`create_two_way_merge_patch`] and
//!   [`create_three_way_merge_patch`] (`kubectl apply`).
//!
//! - [`fieldpath`]: sets of field paths and their wire form, `FieldsV1`: what server-side
//!   apply records each manager as owning; [`managed`]: the entries of `managedFields` and
//!   the words of an apply's conflicts; [`apply`]: server-side apply itself.
//!
//! The strategic functions and the merge-patch diffs refuse documents nested deeper than
//! [`MAX_DEPTH`], so no input can exhaust the stack; parsed JSON never is (serde_json stops at
//! the same depth).

#![forbid(unsafe_code)]

pub mod apply;
mod error;
pub mod fieldpath;
mod json;
mod limits;
pub mod managed;
mod merge;
mod schema;
mod shared;
mod strategic;

pub use error::PatchError;
pub use json::{JsonPatch, MAX_JSON_PATCH_OPERATIONS, apply_json_patch, parse_json_patch};
pub use limits::MAX_DEPTH;
pub use merge::{
    apply_merge_patch, create_three_way_json_merge_patch, create_two_way_json_merge_patch,
};
pub use schema::{
    BuiltinSchema, DeducedSchema, ListStrategy, MergeSchema, OpenApiSchema, Properties,
};
pub use shared::Shared;
pub use strategic::{
    apply_strategic_merge_patch, create_three_way_merge_patch, create_two_way_merge_patch,
};
