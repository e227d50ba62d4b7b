fn main() -> Result<(), Box<dyn std::error::Error>> {
    tonic_prost_build::configure()
        // Watch events are shared by every watcher: a refcounted buffer, not a copy each.
        .bytes(".keel.v1.WatchEvent.object")
        // List items come straight from the watch cache's shared buffers.
        .bytes(".keel.v1.ListResponse.items")
        // The PATCHes of one coalesced batch answer with one encoding of their object.
        .bytes(".keel.v1.ObjectResponse.object")
        .compile_protos(&["../../proto/keel/v1/keel.proto"], &["../../proto"])?;
    println!("cargo:rerun-if-changed=../../proto/keel/v1/keel.proto");
    Ok(())
}
