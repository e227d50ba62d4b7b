//! `Discovery`: the served resources, as `kubectl api-resources` shows them.

use std::sync::Arc;

use keel_api::proto::discovery_server::Discovery;
use keel_api::proto::{ApiResource, DiscoveryRequest, DiscoveryResponse};
use tonic::{Request, Response, Status};

use crate::registry::Resources;

pub struct DiscoveryService {
    pub resources: Arc<Resources>,
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
        let resources = self
            .resources
            .all()
            .iter()
            .map(|r| ApiResource {
                group: r.gvr.group.clone(),
                version: r.gvr.version.clone(),
                resource: r.gvr.resource.clone(),
                singular: r.singular.clone(),
                kind: r.kind.clone(),
                short_names: r.short_names.clone(),
                namespaced: r.namespaced,
                verbs: VERBS.iter().map(|v| v.to_string()).collect(),
                subresources: {
                    let mut subs = Vec::new();
                    if r.status_subresource {
                        subs.push("status".to_string());
                    }
                    if r.kind == "Namespace" {
                        subs.push("finalize".to_string());
                    }
                    subs
                },
            })
            .collect();
        Ok(Response::new(DiscoveryResponse { resources }))
    }
}
