//! Where a message's reader finds a documentation page: the one function every message that cites
//! a page goes through ([`doc_ref`]).
//!
//! The packages (and `packaging/install.sh`) install the book's markdown pages flat as
//! `PREFIX/share/doc/cordon/PAGE` beside the binaries in `PREFIX/bin`. A message printed by an
//! installed `cordon` or `cordond` names that file by its absolute path, which exists on the
//! reader's machine; a binary run from a source checkout (`target/...`) names the page as it is in
//! the source tree, `docs/PAGE`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The installed documentation directory of the running binary, `PREFIX/share/doc/cordon` for
/// `PREFIX/bin/NAME` (or `PREFIX/sbin/NAME`), when that directory exists.
fn installed_dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().ok()?;
        docs_dir_for(&exe)
    })
    .as_deref()
}

/// `PREFIX/share/doc/cordon` for the binary `exe` = `PREFIX/bin/NAME` (or `sbin`), if it is a
/// directory.
pub fn docs_dir_for(exe: &Path) -> Option<PathBuf> {
    let bin = exe.parent()?;
    if !matches!(bin.file_name().and_then(|n| n.to_str()), Some("bin" | "sbin")) {
        return None;
    }
    let dir = bin.parent()?.join("share").join("doc").join("cordon");
    dir.is_dir().then_some(dir)
}

/// How a message names the documentation page `page` (a file name such as `seccomp.md`): the
/// installed file's absolute path when the running binary's prefix has it, else `docs/PAGE`
/// (the page in cordon's source). `README.md` is `README.md` in the source.
pub fn doc_ref(page: &str) -> String {
    resolve(installed_dir(), page)
}

fn resolve(dir: Option<&Path>, page: &str) -> String {
    if let Some(path) = dir.map(|d| d.join(page)).filter(|p| p.is_file()) {
        return path.display().to_string();
    }
    if page == "README.md" { page.to_string() } else { format!("docs/{page}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_installed_page_is_named_by_its_path_and_anything_else_by_its_source_path() {
        let tmp = std::env::temp_dir().join(format!("cordon-docs-{}", std::process::id()));
        let docs = tmp.join("share/doc/cordon");
        std::fs::create_dir_all(&docs).unwrap_or_default();
        std::fs::create_dir_all(tmp.join("bin")).unwrap_or_default();
        std::fs::write(docs.join("seccomp.md"), "x").unwrap_or_default();
        let dir = docs_dir_for(&tmp.join("bin/cordond"));
        assert_eq!(dir.as_deref(), Some(docs.as_path()));
        assert_eq!(resolve(dir.as_deref(), "seccomp.md"), docs.join("seccomp.md").display().to_string());
        // A page the package does not have, and a binary outside any PREFIX/bin.
        assert_eq!(resolve(dir.as_deref(), "pins.md"), "docs/pins.md");
        assert_eq!(docs_dir_for(&tmp.join("target/debug/cordond")), None);
        assert_eq!(resolve(None, "seccomp.md"), "docs/seccomp.md");
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
