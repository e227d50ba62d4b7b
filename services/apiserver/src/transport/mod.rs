//! Transports: each turns its wire into the request layer's requests and the answers back.
//! gRPC ([`grpc`]) serves the API today (REST later); [`http`] is the side port for health,
//! readiness and metrics.
//!
//! A transport knows the request layer below it and nothing further down.

pub mod grpc;
pub mod http;
