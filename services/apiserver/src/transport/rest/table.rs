//! Server-side printing: `kubectl get` asks for `Accept: application/json;as=Table;v=v1;
//! g=meta.k8s.io` and prints the `Table` it gets, so the columns it shows are the server's.
//! They are keelctl's ([`keel_print::table`]), and a custom resource's
//! `additionalPrinterColumns`.

use std::time::SystemTime;

use axum::http::{HeaderMap, header};
use keel_api::{ApiError, GroupVersionResource, Target};
use keel_print::table::{Columns, printer_column};
use serde_json::{Value, json};

use super::query::Query;
use crate::request::Handler;

/// Whether the client asked for a Table.
pub fn wanted(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|media| {
            let params: Vec<&str> = media.split(';').map(str::trim).collect();
            params.contains(&"as=Table")
                && params.contains(&"g=meta.k8s.io")
                && (params.contains(&"v=v1") || params.contains(&"v=v1beta1"))
        })
}

/// How much of each object a row carries (`includeObject`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Include {
    None,
    Metadata,
    Object,
}

/// The table of one resource.
pub struct Printer {
    definitions: Vec<(String, String, i32)>,
    columns: Columns,
    include: Include,
}

impl Printer {
    pub fn new(
        handler: &Handler,
        gvr: &GroupVersionResource,
        q: &Query,
        t: &Target,
    ) -> Result<Printer, ApiError> {
        let kind = handler.kind(gvr);
        let printer_columns: Vec<_> = handler
            .printer_columns(gvr)
            .iter()
            .map(printer_column)
            .collect();
        let include = match q.get("includeObject") {
            "" | "Metadata" => Include::Metadata,
            "Object" => Include::Object,
            "None" => Include::None,
            other => {
                return Err(ApiError::bad_request(
                    t.clone(),
                    format!(
                        "includeObject {}: supported values: \"None\", \"Metadata\", \"Object\"",
                        keel_api::echo(other)
                    ),
                ));
            }
        };
        Ok(Printer {
            definitions: Columns::definitions(&gvr.group, &kind, &printer_columns),
            columns: Columns::new(&gvr.group, &kind, &printer_columns, true, false, None),
            include,
        })
    }

    fn row(&self, o: &Value, now: SystemTime) -> Value {
        let cells = self.columns.row(o, now);
        let mut row = json!({"cells": cells});
        match self.include {
            Include::None => {}
            Include::Metadata => {
                row["object"] = json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": o["metadata"],
                });
            }
            Include::Object => row["object"] = o.clone(),
        }
        row
    }

    /// A Table of `objects` (each an object's JSON) at `resource_version`.
    pub fn table(&self, objects: &[Value], resource_version: &str, continue_token: &str) -> Value {
        let now = SystemTime::now();
        let columns: Vec<Value> = self
            .definitions
            .iter()
            .map(|(name, kind, priority)| {
                let format = if name == "NAME" { "name" } else { "" };
                json!({"name": name, "type": kind, "format": format, "description": "", "priority": priority})
            })
            .collect();
        let mut metadata = json!({"resourceVersion": resource_version});
        if !continue_token.is_empty() {
            metadata["continue"] = continue_token.into();
        }
        json!({
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": metadata,
            "columnDefinitions": columns,
            "rows": objects.iter().map(|o| self.row(o, now)).collect::<Vec<_>>(),
        })
    }
}
