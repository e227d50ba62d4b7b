//! `Discovery` over gRPC: the served resources, as `kubectl api-resources` shows them.

use std::sync::Arc;

use keel_api::proto::discovery_server::Discovery;
use keel_api::proto::{ApiResource, DiscoveryRequest, DiscoveryResponse};
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
                    .map(keel_api::table::printer_column)
                    .collect(),
            })
            .collect();
        Ok(Response::new(DiscoveryResponse { resources }))
    }
}
