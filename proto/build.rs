//! Compiles `cordon/v1/*.proto` with protox (pure Rust), so no system `protoc` is needed.

use std::path::PathBuf;

use prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["cordon/v1/cordon.proto"];
    println!("cargo:rerun-if-changed=cordon");
    let fds = protox::compile(protos, ["."])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    // Server reflection serves this descriptor set.
    std::fs::write(out.join("cordon_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
