//! The gRPC services: `Objects` (every verb) and `Discovery`.

mod deadline;
pub mod discovery;
pub mod objects;

pub use discovery::DiscoveryService;
pub use objects::ObjectsService;
