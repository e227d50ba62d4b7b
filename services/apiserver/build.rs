//! Kubernetes' `generated.proto` files (vendored in proto/k8s) compiled into a descriptor set
//! that the REST dialect decodes protobuf bodies with (`transport/rest/protobuf.rs`). The same
//! `protoc` the gRPC code generation uses (`PROTOC`, else on the PATH).

use std::path::PathBuf;
use std::process::Command;

const FILES: &[&str] = &[
    "k8s.io/api/core/v1/generated.proto",
    "k8s.io/api/apps/v1/generated.proto",
    "k8s.io/api/rbac/v1/generated.proto",
    "k8s.io/api/coordination/v1/generated.proto",
    "k8s.io/api/batch/v1/generated.proto",
    "k8s.io/api/networking/v1/generated.proto",
    "k8s.io/api/discovery/v1/generated.proto",
    "k8s.io/api/autoscaling/v1/generated.proto",
    "k8s.io/api/autoscaling/v2/generated.proto",
    "k8s.io/api/policy/v1/generated.proto",
    "k8s.io/api/scheduling/v1/generated.proto",
    "k8s.io/api/storage/v1/generated.proto",
    // keel's own, from Kubernetes' wire facts (see proto/k8s/README.md).
    "k8s.io/api/authorization/v1/reviews.proto",
    "k8s.io/api/authentication/v1/reviews.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from("../../proto/k8s");
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("k8s.bin");
    let protoc = std::env::var_os("PROTOC").unwrap_or_else(|| "protoc".into());
    let status = Command::new(&protoc)
        .arg("--include_imports")
        .arg(format!("--descriptor_set_out={}", out.display()))
        .arg(format!("--proto_path={}", root.display()))
        .args(FILES)
        .status()
        .map_err(|e| format!("running {protoc:?} (Debian: protobuf-compiler): {e}"))?;
    if !status.success() {
        return Err(format!("{protoc:?} failed on proto/k8s: {status}").into());
    }
    println!("cargo:rerun-if-changed=../../proto/k8s");
    println!("cargo:rerun-if-env-changed=PROTOC");
    Ok(())
}
