//! The gRPC transport: the `Objects` service (every verb) and `Discovery`, decoding protobuf
//! into requests and answers, errors and watch events back into protobuf.

mod deadline;
pub mod discovery;
pub mod limit;
pub mod objects;

pub use discovery::DiscoveryService;
pub use limit::MessageLimitLayer;
pub use objects::ObjectsService;

use std::sync::Arc;

/// Largest gRPC message decoded or sent. Well above the object limit so that oversized objects
/// get keel's typed `RequestEntityTooLarge` naming the object; still a bound on memory per
/// request. Larger requests are refused by [`MessageLimitLayer`], larger lists by `list`.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;

use crate::auth::Authenticator;

/// The interceptor in front of every API service: the request's user (from its bearer token
/// or its verified client certificate) goes into its extensions, or the call ends
/// `Unauthorized`. With no authenticator configured it lets everything through.
pub fn authenticate(
    auth: Arc<Authenticator>,
) -> impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Clone {
    move |mut req: tonic::Request<()>| {
        if !auth.enabled() {
            return Ok(req);
        }
        // A header that is not text cannot be a bearer token: refused as malformed.
        let header = req
            .metadata()
            .get("authorization")
            .map(|v| v.to_str().unwrap_or_default());
        let certificate = req.peer_certs().and_then(|c| c.first().map(|d| d.to_vec()));
        let user = auth
            .authenticate(header, certificate.as_deref())
            .map_err(keel_wire::status)?;
        req.extensions_mut().insert(user);
        Ok(req)
    }
}
