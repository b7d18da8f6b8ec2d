//! Carve-outs inside grants: paths (or globs) relative to a `read` or `write` grant that the tool
//! may not reach at all (`deny`) or may only read (`read_only`, inside a write grant), and the
//! default protected set of a write root that is a git work tree (`.git/hooks`, `.git/config`,
//! `.git/config.worktree`, and when `.git` is a file, that file and the repository it names),
//! which a grant lifts entry by entry with a reason (`unprotect`).
//!
//! This module is the model and the pure rules (the glob syntax and its matching); the policy
//! parser (`parse/carve.rs`) builds it, and cordond makes it real per call in the tool's mount
//! view (`cordon-sandbox`, `carve.rs`; docs/carve-outs.md), because landlock cannot deny inside
//! an allowed tree.
//!
//! Why these choices:
//! - Carve-out paths are relative to their grant and may not contain `..` or start with `/`: a
//!   carve-out outside its grant would carve nothing, and reading the policy should say where it
//!   applies without resolving anything.
//! - A trailing `/` says the carve-out is a directory. A literal carve-out that is missing when
//!   a call starts is created empty by cordond before the tool runs (a directory with the `/`,
//!   else a file), so the tool cannot create it: without the `/` a missing path is covered as a
//!   file.
//! - The glob syntax is deliberately small (`*` and `?` within one component, `**` as a whole
//!   component for any depth): character classes and braces are refused rather than guessed at,
//!   and a glob covers what exists when the call starts.

use std::fmt;
use std::path::{Path, PathBuf};

/// Most carve-out entries (deny plus read_only) one grant may list.
pub const MAX_CARVE_ENTRIES: usize = 64;

/// Deepest a carve-out path may be (components).
pub const MAX_CARVE_DEPTH: usize = 32;

/// The carve-outs of one grant: the table form of a `read` or `write` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantCarve {
    /// The grant's path (absolute, normalised like every grant).
    pub root: PathBuf,
    /// A `write` grant (else `read`).
    pub write: bool,
    /// No access at all.
    pub deny: Vec<CarvePath>,
    /// Read-only inside the write grant.
    pub read_only: Vec<CarvePath>,
    /// Entries of the default protected set this grant lifts, each with its reason.
    pub unprotect: Vec<Lift>,
}

/// One carve-out path as the policy wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CarvePath {
    /// As written (for display).
    pub text: String,
    /// Its components, relative to the grant (no `.`, `..` or empty component).
    pub components: Vec<String>,
    /// Written with a trailing `/`: a directory.
    pub dir: bool,
}

impl CarvePath {
    /// Whether any component is a glob (`*`, `?`, or `**`).
    pub fn is_glob(&self) -> bool {
        self.components.iter().any(|c| c.contains(['*', '?']))
    }

    /// The path relative to the grant.
    pub fn relative(&self) -> PathBuf {
        self.components.iter().collect()
    }
}

/// Why a carve-out path is refused (the parser's diagnostics say what to write instead).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CarvePathError {
    #[error("is empty; name a path relative to the grant")]
    Empty,
    #[error("is absolute; carve-outs are relative to their grant (write \"{0}\")")]
    Absolute(String),
    #[error("contains `..`; a carve-out must lie inside its grant")]
    ParentDir,
    #[error("contains an empty or `.` component; write the path without it")]
    EmptyComponent,
    #[error("contains a NUL byte")]
    Nul,
    #[error(
        "uses `{0}`, which carve-out globs do not support; use `*` and `?` within a component, or `**` as a \
         whole component"
    )]
    Unsupported(char),
    #[error("uses `**` inside a component; `**` must be a whole component (e.g. \"**/*.pem\")")]
    DoubleStar,
    #[error("is deeper than {MAX_CARVE_DEPTH} components")]
    TooDeep,
    #[error("ends in `**`, which would match every path below; name what to carve out (e.g. \"secrets/\")")]
    TrailingDoubleStar,
}

impl CarvePath {
    /// Parses a carve-out path as written in a policy.
    pub fn parse(text: &str) -> Result<CarvePath, CarvePathError> {
        if text.is_empty() {
            return Err(CarvePathError::Empty);
        }
        if text.contains('\0') {
            return Err(CarvePathError::Nul);
        }
        if let Some(rest) = text.strip_prefix('/') {
            return Err(CarvePathError::Absolute(rest.trim_start_matches('/').to_string()));
        }
        if let Some(c) = text.chars().find(|c| matches!(c, '[' | ']' | '{' | '}' | '\\')) {
            return Err(CarvePathError::Unsupported(c));
        }
        let dir = text.ends_with('/');
        let body = text.strip_suffix('/').unwrap_or(text);
        let mut components = Vec::new();
        for c in body.split('/') {
            match c {
                "" | "." => return Err(CarvePathError::EmptyComponent),
                ".." => return Err(CarvePathError::ParentDir),
                c if c != "**" && c.contains("**") => return Err(CarvePathError::DoubleStar),
                c => components.push(c.to_string()),
            }
        }
        if components.len() > MAX_CARVE_DEPTH {
            return Err(CarvePathError::TooDeep);
        }
        if components.last().is_some_and(|c| c == "**") {
            return Err(CarvePathError::TrailingDoubleStar);
        }
        Ok(CarvePath { text: text.to_string(), components, dir })
    }

    /// Whether the relative path `rel` (components) matches this carve-out.
    pub fn matches(&self, rel: &[&str]) -> bool {
        match_components(&self.components, rel)
    }
}

fn match_components(pattern: &[String], rel: &[&str]) -> bool {
    match pattern.split_first() {
        None => rel.is_empty(),
        Some((first, rest)) if first == "**" => (0..=rel.len()).any(|skip| match_components(rest, &rel[skip..])),
        Some((first, rest)) => match rel.split_first() {
            Some((name, more)) => component_matches(first, name) && match_components(rest, more),
            None => false,
        },
    }
}

/// `*` (any run of characters, `/` excluded by construction) and `?` (one character) within one
/// component. A leading `.` is matched only by a literal `.` (as in shells), so `*` does not
/// reach `.git` or `.env` unless written.
pub fn component_matches(pattern: &str, name: &str) -> bool {
    if name.starts_with('.') && !pattern.starts_with('.') {
        return false;
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative wildcard matching with one backtrack point (linear in practice).
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

/// An entry of the default protected set of a git work tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protected {
    /// `.git/hooks` (and the hooks of the repository a `.git` file names): code git runs later,
    /// outside the sandbox, as the developer.
    Hooks,
    /// `.git/config` (and the config of the repository a `.git` file names): `core.hooksPath`,
    /// `core.fsmonitor`, aliases, filters: code too.
    Config,
    /// `.git/config.worktree` (read when `extensions.worktreeConfig` is on).
    ConfigWorktree,
    /// The `.git` file of a linked worktree or submodule (and the `commondir` file of the
    /// worktree's gitdir): rewritten, it points git at a repository the tool controls.
    GitFile,
}

impl Protected {
    pub const ALL: [Protected; 4] =
        [Protected::Hooks, Protected::Config, Protected::ConfigWorktree, Protected::GitFile];

    /// The name a policy's `unprotect` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Protected::Hooks => ".git/hooks",
            Protected::Config => ".git/config",
            Protected::ConfigWorktree => ".git/config.worktree",
            Protected::GitFile => ".git",
        }
    }

    pub fn parse(s: &str) -> Option<Protected> {
        let s = s.strip_suffix('/').unwrap_or(s);
        Protected::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// What the entry protects, in a sentence.
    pub fn describe(self) -> &'static str {
        match self {
            Protected::Hooks => "read-only: git runs its hooks later, outside the sandbox",
            Protected::Config => "read-only: core.hooksPath, core.fsmonitor, aliases and filters run code",
            Protected::ConfigWorktree => "read-only when present or enabled: per-worktree config, code as above",
            Protected::GitFile => {
                "read-only when .git is a file (worktree, submodule), with the gitdir's commondir: they name the \
                 repository git uses"
            }
        }
    }
}

impl fmt::Display for Protected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One lifted entry of the default protected set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lift {
    pub entry: Protected,
    pub reason: String,
}

impl GrantCarve {
    /// Whether the grant lifts `entry`.
    pub fn lifts(&self, entry: Protected) -> bool {
        self.unprotect.iter().any(|l| l.entry == entry)
    }
}

/// The carve-outs of a tool for the grant at `root` (every table that names it: a file's
/// defaults and the tool may both carve the same grant; all of them apply).
pub fn for_root<'a>(carve: &'a [GrantCarve], root: &'a Path) -> impl Iterator<Item = &'a GrantCarve> + 'a {
    carve.iter().filter(move |c| c.root == root)
}

/// The carve-outs of a tool, one line each, for `cordon tool NAME` (paths and reasons, never
/// contents): `GRANT: deny ...`, `GRANT: read-only ...`, `GRANT: unprotect ENTRY (REASON)`, and
/// the protected git set of its write roots (`protected: ...`).
pub fn describe(carve: &[GrantCarve], write: &[PathBuf]) -> Vec<String> {
    let mut out = Vec::new();
    for c in carve {
        let root = c.root.display();
        let list = |v: &[CarvePath]| v.iter().map(|p| p.text.as_str()).collect::<Vec<_>>().join(" ");
        if !c.deny.is_empty() {
            out.push(format!("{root}: deny {}", list(&c.deny)));
        }
        if !c.read_only.is_empty() && c.write {
            out.push(format!("{root}: read-only {}", list(&c.read_only)));
        }
        for l in &c.unprotect {
            out.push(format!("{root}: unprotect {} ({})", l.entry, l.reason));
        }
    }
    if !write.is_empty() {
        let all_lifted = |w: &PathBuf| Protected::ALL.into_iter().all(|e| for_root(carve, w).any(|c| c.lifts(e)));
        if !write.iter().all(all_lifted) {
            out.push(
                "protected: in each write root that is a git work tree, .git/hooks, .git/config, \
                 .git/config.worktree and .git/commondir read-only (and a .git file, its gitdir's commondir and the \
                 repository it names), decided at each call"
                    .to_string(),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_or_say_why_not() {
        let p = CarvePath::parse("secrets/*.pem").unwrap();
        assert_eq!(p.components, ["secrets", "*.pem"]);
        assert!(!p.dir && p.is_glob());
        let d = CarvePath::parse("deploy/").unwrap();
        assert!(d.dir && !d.is_glob());
        assert_eq!(CarvePath::parse(""), Err(CarvePathError::Empty));
        assert_eq!(CarvePath::parse("/etc/x"), Err(CarvePathError::Absolute("etc/x".into())));
        assert_eq!(CarvePath::parse("a/../b"), Err(CarvePathError::ParentDir));
        assert_eq!(CarvePath::parse(".."), Err(CarvePathError::ParentDir));
        assert_eq!(CarvePath::parse("a//b"), Err(CarvePathError::EmptyComponent));
        assert_eq!(CarvePath::parse("./a"), Err(CarvePathError::EmptyComponent));
        assert_eq!(CarvePath::parse("a/[bc]"), Err(CarvePathError::Unsupported('[')));
        assert_eq!(CarvePath::parse("{a,b}"), Err(CarvePathError::Unsupported('{')));
        assert_eq!(CarvePath::parse("a**"), Err(CarvePathError::DoubleStar));
        assert_eq!(CarvePath::parse("a/**"), Err(CarvePathError::TrailingDoubleStar));
        let deep = vec!["a"; MAX_CARVE_DEPTH + 1].join("/");
        assert_eq!(CarvePath::parse(&deep), Err(CarvePathError::TooDeep));
    }

    #[test]
    fn globs_match_components() {
        let m = |p: &str, rel: &str| CarvePath::parse(p).unwrap().matches(&rel.split('/').collect::<Vec<_>>());
        assert!(m("secrets/*.pem", "secrets/a.pem"));
        assert!(!m("secrets/*.pem", "secrets/sub/a.pem"));
        assert!(!m("secrets/*.pem", "secrets/a.pem.bak"));
        assert!(m("**/*.pem", "a.pem"));
        assert!(m("**/*.pem", "x/y/a.pem"));
        assert!(m("?.env", "a.env"));
        assert!(!m("?.env", "ab.env"));
        assert!(!m("*", ".env"), "a leading dot needs a literal dot");
        assert!(m(".*", ".env"));
        assert!(m("a*b*c", "aXXbYYc"));
        assert!(!m("a*b*c", "aXXbYY"));
    }

    #[test]
    fn protected_names_round_trip() {
        for p in Protected::ALL {
            assert_eq!(Protected::parse(p.as_str()), Some(p));
        }
        assert_eq!(Protected::parse(".git/hooks/"), Some(Protected::Hooks));
        assert_eq!(Protected::parse(".git/objects"), None);
    }
}
