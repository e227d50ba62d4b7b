//! `Discovery` over gRPC: the served resources, as `kubectl api-resources` shows them.

use std::sync::Arc;

use keel_wire::proto::discovery_server::Discovery;
use keel_wire::proto::{ApiResource, DiscoveryRequest, DiscoveryResponse, PrinterColumn};
use tonic::{Request, Response, Status};

use crate::request::{Handler, Subresource};

pub struct DiscoveryService {
    pub handler: Arc<Handler>,
}

const VERBS: [&str; 7] = [
    "create", "delete", "get", "list", "patch", "update", "watch",
];

#[tonic::async_trait]
impl Discovery for DiscoveryService {
    async fn server_resources(
        &self,
        _: Request<DiscoveryRequest>,
    ) -> Result<Response<DiscoveryResponse>, Status> {
        self.handler.catch_up().await;
        let resources = self
            .handler
            .resources()
            .iter()
            .map(|r| ApiResource {
                group: r.gvr.group.clone(),
                version: r.gvr.version.clone(),
                resource: r.gvr.resource.clone(),
                singular: r.singular.clone(),
                kind: r.kind.clone(),
                short_names: r.short_names.clone(),
                categories: r.categories.clone(),
                namespaced: r.namespaced,
                // A review is only ever created.
                verbs: if r.create_only {
                    &VERBS[..1]
                } else {
                    &VERBS[..]
                }
                .iter()
                .map(|v| v.to_string())
                .collect(),
                subresources: Subresource::served(r)
                    .into_iter()
                    .map(String::from)
                    .collect(),
                printer_columns: self
                    .handler
                    .printer_columns(&r.gvr)
                    .iter()
                    .map(printer_column)
                    .collect(),
            })
            .collect();
        Ok(Response::new(DiscoveryResponse { resources }))
    }
}

/// A custom resource's column as Discovery sends it (from its CRD's JSON, as keel-print reads it).
fn printer_column(c: &serde_json::Value) -> PrinterColumn {
    let c = keel_print::printer_column(c);
    PrinterColumn {
        name: c.name,
        r#type: c.r#type,
        json_path: c.json_path,
        priority: c.priority,
        description: c.description,
    }
}
