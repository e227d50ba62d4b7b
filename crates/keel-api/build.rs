fn main() -> Result<(), Box<dyn std::error::Error>> {
    tonic_prost_build::configure()
        .compile_protos(&["../../proto/keel/v1/keel.proto"], &["../../proto"])?;
    println!("cargo:rerun-if-changed=../../proto/keel/v1/keel.proto");
    Ok(())
}
