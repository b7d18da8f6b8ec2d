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
    println!("cargo:rustc-env=CORDON_COMMIT={}", commit());
    Ok(())
}

/// The commit this build is from (`--version` shows it), read from `.git` without running git;
/// `CORDON_COMMIT` in the environment wins (packaging from a tarball); "unknown" otherwise.
fn commit() -> String {
    println!("cargo:rerun-if-env-changed=CORDON_COMMIT");
    if let Ok(c) = std::env::var("CORDON_COMMIT") {
        return c;
    }
    let git = PathBuf::from("../.git");
    let Ok(head) = std::fs::read_to_string(git.join("HEAD")) else {
        return "unknown".into();
    };
    println!("cargo:rerun-if-changed=../.git/HEAD");
    let head = head.trim();
    let hash = match head.strip_prefix("ref: ") {
        None => head.to_string(),
        Some(name) => {
            // Only files that exist: cargo reruns a script whose watched file is missing every time.
            for watched in [name, "packed-refs"] {
                if git.join(watched).exists() {
                    println!("cargo:rerun-if-changed=../.git/{watched}");
                }
            }
            std::fs::read_to_string(git.join(name)).map(|h| h.trim().to_string()).unwrap_or_else(|_| {
                std::fs::read_to_string(git.join("packed-refs"))
                    .ok()
                    .and_then(|p| {
                        p.lines().find(|l| l.ends_with(&format!(" {name}"))).map(|l| l[..l.len().min(40)].to_string())
                    })
                    .unwrap_or_default()
            })
        }
    };
    if hash.len() >= 12 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        hash[..12].to_string()
    } else {
        "unknown".into()
    }
}
