//! keel-initializer: the Envoy sidecar injector of the seeds. For each Pod whose
//! `metadata.initializers.pending` starts with this initializer's name, it reads the
//! `envoy-initializer` ConfigMap and PATCHes the Pod with the sidecar, removing its own name in
//! the same patch ([`inject`]).

#![forbid(unsafe_code)]

pub mod inject;
