//! The tables of `get`, as keelctl prints them and as the API server answers `as=Table`
//! (Kubernetes' server-side printing): [`table`] holds each kind's columns and cells, [`age`]
//! the AGE column's words. Its own crate, so that changing a column rebuilds only its users.

#![forbid(unsafe_code)]

pub mod age;
mod cells;
pub mod table;

pub use table::{Columns, PrinterColumn, printer_column};
