//! Compiles `cordon/v1/*.proto` (and the OTLP logs protos in `opentelemetry/`) with protox (pure Rust), so no system `protoc` is needed.

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
    // OpenTelemetry's OTLP logs service (opentelemetry/, vendored from opentelemetry-proto
    // v1.x as shipped in the opentelemetry-proto 0.33.1 crate): cordond's audit export is its
    // client; tests run its server. Compiled apart, so reflection serves cordon.v1 only.
    println!("cargo:rerun-if-changed=opentelemetry");
    let otlp = protox::compile(["opentelemetry/proto/collector/logs/v1/logs_service.proto"], ["."])?;
    tonic_prost_build::configure().compile_fds(otlp)?;
    println!("cargo:rustc-env=CORDON_COMMIT={}", commit());
    Ok(())
}

/// The commit this build is from (`--version` shows it), read from `.git` without running git;
/// `CORDON_COMMIT` in the environment wins (packaging from a tarball); "unknown" otherwise.
/// A linked worktree's `.git` is a file (`gitdir: PATH`): HEAD is read there, and the refs from
/// the repository it names in `commondir`.
fn commit() -> String {
    println!("cargo:rerun-if-env-changed=CORDON_COMMIT");
    if let Ok(c) = std::env::var("CORDON_COMMIT") {
        return c;
    }
    let Some((head_dir, refs_dir)) = git_dirs(&PathBuf::from("..")) else {
        return "unknown".into();
    };
    let Ok(head) = std::fs::read_to_string(head_dir.join("HEAD")) else {
        return "unknown".into();
    };
    watch(&head_dir.join("HEAD"));
    let head = head.trim();
    let hash = match head.strip_prefix("ref: ") {
        None => head.to_string(),
        Some(name) => {
            watch(&refs_dir.join(name));
            watch(&refs_dir.join("packed-refs"));
            std::fs::read_to_string(refs_dir.join(name)).map(|h| h.trim().to_string()).unwrap_or_else(|_| {
                std::fs::read_to_string(refs_dir.join("packed-refs"))
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

/// Where HEAD is, and where the refs are, for the checkout at `top`: both `top/.git` in a plain
/// clone; in a linked worktree (`.git` is a file saying `gitdir: PATH`) HEAD in PATH and the
/// refs in the repository PATH/commondir names.
fn git_dirs(top: &std::path::Path) -> Option<(PathBuf, PathBuf)> {
    let dot_git = top.join(".git");
    if dot_git.is_dir() {
        return Some((dot_git.clone(), dot_git));
    }
    let text = std::fs::read_to_string(&dot_git).ok()?;
    watch(&dot_git);
    let gitdir = PathBuf::from(text.trim().strip_prefix("gitdir:")?.trim());
    let gitdir = if gitdir.is_absolute() { gitdir } else { top.join(gitdir) };
    let common = match std::fs::read_to_string(gitdir.join("commondir")) {
        Ok(c) => {
            let c = PathBuf::from(c.trim());
            if c.is_absolute() { c } else { gitdir.join(c) }
        }
        Err(_) => gitdir.clone(),
    };
    Some((gitdir, common))
}

/// Reruns the build script when `path` changes; only for files that exist (cargo reruns a
/// script whose watched file is missing every time).
fn watch(path: &std::path::Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
