//! Transports: each turns its wire into the request layer's requests and the answers back.
//! gRPC ([`grpc`]) and Kubernetes' REST dialect ([`rest`]) serve the API on one port; [`http`]
//! is the side port for health, readiness and metrics.
//!
//! A transport knows the request layer below it and nothing further down.

pub mod grpc;
pub mod http;
pub mod rest;
