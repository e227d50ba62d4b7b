//! The gRPC transport: the `Objects` service (every verb) and `Discovery`, decoding protobuf
//! into requests and answers, errors and watch events back into protobuf.

mod deadline;
pub mod discovery;
pub mod objects;

pub use discovery::DiscoveryService;
pub use objects::ObjectsService;
