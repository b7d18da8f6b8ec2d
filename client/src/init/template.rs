//! `cordon init --template rust|python|node|c`: a ready-made policy for one kind of project,
//! granting exactly what its toolchain needs, found on the PATH of whoever runs `cordon init`
//! (nothing of the project or the toolchain is run; scripts' `#!` lines and symlinks are read).
//!
//! Every template: the project root as `working_dir` and `read`; the toolchain's directories as
//! `search_path` (so bare names and `cargo clippy`'s subcommand lookup work) and its homes
//! read-only; only the build output writable; no network; no `allow` (admins only until one is
//! added); real `reason`s, so the file passes `cordon policy check`.
//!
//! Temporary space is cordond's own: every invocation gets a private `TMPDIR` (read, write,
//! exec; and where cordond can make mount namespaces a private `/tmp` and `/dev/shm`), so
//! rustdoc's doctests, gcc, pytest's `tmp_path` and multiprocessing need no grant here.

use std::path::{Path, PathBuf};

use cordon_core::policy::defaults::DEFAULT_READ_EXEC;

use super::{q, q_path, which};
use crate::error::CliError;

/// The kinds of project `--template` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Template {
    /// cargo test (with doctests) and cargo clippy, offline.
    Rust,
    /// pytest (multiprocessing included) from the active virtualenv or the pytest on PATH.
    Python,
    /// npm test and node --test, offline.
    Node,
    /// make test with gcc.
    C,
}

impl Template {
    pub fn name(self) -> &'static str {
        match self {
            Template::Rust => "rust",
            Template::Python => "python",
            Template::Node => "node",
            Template::C => "c",
        }
    }
}

/// npm's cache directory, inside the project (npm writes its logs there on every run).
pub const NPM_CACHE_DIR: &str = ".npm-cache";

/// The system directories after a toolchain's own in every `search_path`.
const SYSTEM_PATH: &[&str] = &["/usr/local/bin", "/usr/bin", "/bin"];

/// One tool of a template.
struct T {
    suffix: &'static str,
    description: String,
    reason: &'static str,
    command: Vec<String>,
    /// A free-form argument behind `--` (name, description, pattern).
    param: Option<(&'static str, &'static str, &'static str)>,
}

/// What a template grants, shared by its tools (written as `[defaults]`).
#[derive(Default)]
struct Grants {
    search_path: Vec<PathBuf>,
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
    exec: Vec<PathBuf>,
    env: Vec<(&'static str, String)>,
    /// Comments above each key: (key, lines).
    why: Vec<(&'static str, String)>,
    /// The lint the tools accept, with the reason.
    accept_write_exec: Option<&'static str>,
}

fn push(list: &mut Vec<PathBuf>, p: PathBuf) {
    if !list.contains(&p) {
        list.push(p);
    }
}

/// Readable without a grant (the default read and execute directories).
fn by_default(p: &Path) -> bool {
    DEFAULT_READ_EXEC.iter().any(|d| p.starts_with(d))
}

/// `first`, then the system directories; only real directories (cordond pins `search_path`
/// without following symlinks, and `/bin` is a link to `usr/bin` on merged-/usr systems, whose
/// real directory is in the list anyway).
fn search_path_with(first: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in first.iter().cloned().chain(SYSTEM_PATH.iter().map(PathBuf::from)) {
        if std::fs::symlink_metadata(&d).is_ok_and(|m| m.is_dir()) {
            push(&mut out, d);
        }
    }
    out
}

/// The first `#!` interpreter of a script (the path only), if it is one.
fn shebang(path: &Path) -> Option<PathBuf> {
    let mut head = [0u8; 256];
    let n = std::io::Read::read(&mut std::fs::File::open(path).ok()?, &mut head).ok()?;
    let text = std::str::from_utf8(head.get(..n)?).ok()?;
    let line = text.strip_prefix("#!")?.lines().next()?;
    let interp = PathBuf::from(line.split_whitespace().next()?);
    interp.is_absolute().then_some(interp)
}

fn missing(program: &str, what: &str) -> CliError {
    CliError::Usage(format!(
        "{program} was not found on PATH, and the {what} template grants the toolchain it finds there: install it \
         (or activate the environment that has it) and run `cordon init --template` again"
    ))
}

/// The notes `cordon init` prints after writing a template, and the text of the policy.
pub fn render(
    kind: Template,
    root: &Path,
    project: &str,
    path_var: &std::ffi::OsStr,
) -> Result<(String, Vec<String>), CliError> {
    let mut g = Grants::default();
    let mut notes: Vec<String> = Vec::new();
    let mut must_exist: Vec<PathBuf> = Vec::new();
    let tools: Vec<T> = match kind {
        Template::Rust => {
            let cargo = which("cargo", path_var).ok_or_else(|| missing("cargo", "rust"))?;
            let bin = cargo.parent().map(Path::to_path_buf).unwrap_or_default();
            let home = std::env::var_os("HOME").map(PathBuf::from);
            let cargo_home = std::env::var_os("CARGO_HOME")
                .map(PathBuf::from)
                .or_else(|| bin.ends_with(".cargo/bin").then(|| bin.parent().map(Path::to_path_buf)).flatten());
            let rustup_home = std::env::var_os("RUSTUP_HOME")
                .map(PathBuf::from)
                .or_else(|| home.map(|h| h.join(".rustup")))
                .filter(|r| r.join("toolchains").is_dir());
            g.search_path = search_path_with(std::slice::from_ref(&bin));
            g.why.push((
                "search_path",
                "cargo's directory first: cargo finds rustc and its subcommands (cargo-clippy) on PATH".into(),
            ));
            let target = root.join("target");
            push(&mut g.write, target.clone());
            push(&mut g.exec, target.clone());
            must_exist.push(target);
            if let Some(h) = &cargo_home {
                if !by_default(h) {
                    push(&mut g.read, h.clone());
                }
                g.env.push(("CARGO_HOME", h.display().to_string()));
            }
            if let Some(r) = &rustup_home {
                push(&mut g.read, r.clone());
                push(&mut g.exec, r.join("toolchains"));
                g.env.push(("RUSTUP_HOME", r.display().to_string()));
                g.why.push(("exec", "rustup's proxies run the toolchain's cargo, rustc and clippy-driver".into()));
            }
            // A toolchain that is not rustup's proxies (a toolchain directory on PATH, an
            // installer's /opt/rust): rustc loads librustc_driver and the standard library from
            // its PREFIX/lib, and links with the rust-lld it ships in PREFIX/lib/rustlib/*/bin.
            if !bin.ends_with(".cargo/bin")
                && let Some(prefix) =
                    std::fs::canonicalize(&cargo).ok().and_then(|r| r.parent()?.parent().map(Path::to_path_buf))
                && !by_default(&prefix)
            {
                push(&mut g.read, prefix.clone());
                push(&mut g.exec, prefix);
                g.why.push(("exec", "the toolchain's own programs: rustc links with the rust-lld it ships".into()));
            }
            g.env.push(("CARGO_NET_OFFLINE", "true".into()));
            g.env.push(("CARGO_TERM_COLOR", "never".into()));
            g.accept_write_exec = Some(
                "cargo builds the test binaries (and rustdoc the doctests) in target/ and the temp dir, then runs them",
            );
            notes.push(
                "cargo runs offline (CARGO_NET_OFFLINE) with CARGO_HOME and RUSTUP_HOME read-only: fetch dependencies \
                 first (cargo fetch)"
                    .into(),
            );
            if !root.join("Cargo.lock").is_file() {
                notes.push(
                    "the project has no Cargo.lock, and the tools may not write the project root: create it \
                     (cargo generate-lockfile) before installing"
                        .into(),
                );
            }
            vec![
                T {
                    suffix: "cargo-test",
                    description: "Run the Rust project's tests and doctests (cargo test, offline), optionally only those whose name contains FILTER".into(),
                    reason: "agents check their changes by running the project's tests",
                    command: vec!["cargo".into(), "test".into(), "{{filter}}".into()],
                    param: Some(("filter", "run only tests whose path contains this (e.g. parser::tests)", "[A-Za-z0-9_][A-Za-z0-9_:]*")),
                },
                T {
                    suffix: "cargo-clippy",
                    description: "Lint the Rust project (cargo clippy --all-targets, offline)".into(),
                    reason: "agents check their changes with the project's linter",
                    command: vec!["cargo".into(), "clippy".into(), "--all-targets".into()],
                    param: None,
                },
            ]
        }
        Template::Python => {
            let pytest = which("pytest", path_var).ok_or_else(|| missing("pytest", "python"))?;
            let bin = pytest.parent().map(Path::to_path_buf).unwrap_or_default();
            let interp = shebang(&pytest).ok_or_else(|| {
                CliError::Usage(format!(
                    "{} has no #! line naming its Python; install pytest with pip (in a virtualenv) and try again",
                    pytest.display()
                ))
            })?;
            let real = std::fs::canonicalize(&interp).map_err(|e| {
                CliError::Usage(format!("pytest's interpreter {} cannot be resolved: {e}", interp.display()))
            })?;
            let real_bin = real.parent().map(Path::to_path_buf).unwrap_or_default();
            let prefix = real_bin.parent().map(Path::to_path_buf).unwrap_or_default();
            g.search_path = search_path_with(&[bin.clone(), real_bin]);
            g.why.push((
                "search_path",
                "pytest's directory, then its Python's (the virtualenv's python links there)".into(),
            ));
            if let Some(venv) = interp.parent().and_then(Path::parent).filter(|v| v.join("pyvenv.cfg").is_file())
                && !by_default(venv)
            {
                push(&mut g.read, venv.to_path_buf());
            }
            if !by_default(&prefix) {
                push(&mut g.read, prefix);
            }
            g.env.push(("PYTHONDONTWRITEBYTECODE", "1".into()));
            vec![T {
                suffix: "pytest",
                description: "Run the Python tests with pytest (no cache written), optionally one test file or node id"
                    .into(),
                reason: "agents check their changes by running the project's tests",
                command: vec!["pytest".into(), "-p".into(), "no:cacheprovider".into(), "{{test}}".into()],
                param: Some((
                    "test",
                    "a test file or node id relative to the project, e.g. tests/test_x.py::test_y",
                    "[A-Za-z0-9_][A-Za-z0-9_./:\\[\\]-]*",
                )),
            }]
        }
        Template::Node => {
            let node = which("node", path_var).ok_or_else(|| missing("node", "node"))?;
            let npm = which("npm", path_var).ok_or_else(|| missing("npm", "node"))?;
            let bin = node.parent().map(Path::to_path_buf).unwrap_or_default();
            let mut first = vec![bin];
            if let Some(d) = npm.parent() {
                push(&mut first, d.to_path_buf());
            }
            for p in [&node, &npm] {
                // nvm and similar: the installation's lib/node_modules (npm itself) must be readable.
                if let Some(prefix) =
                    std::fs::canonicalize(p).ok().and_then(|r| r.parent()?.parent().map(Path::to_path_buf))
                    && !by_default(&prefix)
                {
                    push(&mut g.read, prefix);
                }
            }
            g.search_path = search_path_with(&first);
            g.why.push((
                "search_path",
                "node's directory first: npm runs scripts with the node it finds on PATH".into(),
            ));
            let cache = root.join(NPM_CACHE_DIR);
            push(&mut g.write, cache.clone());
            g.why.push(("write", format!("npm's cache and logs ({NPM_CACHE_DIR}, add it to .gitignore)")));
            g.env.push(("npm_config_cache", cache.display().to_string()));
            must_exist.push(cache);
            g.env.push(("npm_config_update_notifier", "false".into()));
            g.env.push(("npm_config_audit", "false".into()));
            g.env.push(("npm_config_fund", "false".into()));
            notes.push("npm runs without network: install dependencies first (npm ci)".into());
            vec![
                T {
                    suffix: "npm-test",
                    description: "Run the project's test script (npm test), offline".into(),
                    reason: "agents check their changes by running the project's tests",
                    command: vec!["npm".into(), "test".into()],
                    param: None,
                },
                T {
                    suffix: "node-test",
                    description: "Run the project's tests with node's own runner (node --test)".into(),
                    reason: "agents check their changes by running the project's tests",
                    command: vec!["node".into(), "--test".into()],
                    param: None,
                },
            ]
        }
        Template::C => {
            which("make", path_var).ok_or_else(|| missing("make", "c"))?;
            which("gcc", path_var).or_else(|| which("cc", path_var)).ok_or_else(|| missing("gcc", "c"))?;
            g.search_path = search_path_with(&[]);
            // make builds next to the sources unless the Makefile says otherwise, and `make
            // test` runs what it built.
            let out = if root.join("build").is_dir() { root.join("build") } else { root.to_path_buf() };
            push(&mut g.write, out.clone());
            push(&mut g.exec, out);
            g.why.push((
                "write",
                "make builds in the project (narrow this to the build directory if the Makefile has one)".into(),
            ));
            g.accept_write_exec = Some("`make test` builds the test programs in the project and runs them");
            vec![T {
                suffix: "make-test",
                description: "Build and run the project's tests (make test)".into(),
                reason: "agents check their changes by running the project's tests",
                command: vec!["make".into(), "test".into()],
                param: None,
            }]
        }
    };
    for d in &must_exist {
        if !d.is_dir() {
            notes.push(format!(
                "{} does not exist yet, and a missing grant makes the tools unavailable: create it as the project's \
                 owner (mkdir {}) before installing",
                d.display(),
                d.display()
            ));
        }
    }
    Ok((text(kind, root, project, &g, &tools), notes))
}

fn list(paths: &[PathBuf]) -> String {
    let items: Vec<String> = paths.iter().map(|p| q_path(p)).collect();
    format!("[{}]", items.join(", "))
}

fn text(kind: Template, root: &Path, project: &str, g: &Grants, tools: &[T]) -> String {
    let mut s = String::new();
    let mut line = |l: &str| {
        s.push_str(l);
        s.push('\n');
    };
    let why = |key: &str| g.why.iter().filter(|(k, _)| *k == key).map(|(_, w)| format!("# {w}")).collect::<Vec<_>>();
    line(&format!(
        "# cordon policy for the {} project {project} at {}, from `cordon init --template {}`.",
        kind.name(),
        root.display(),
        kind.name()
    ));
    line("# The toolchain was found on the PATH of whoever ran `cordon init`. Review before installing:");
    line("# no tool has `allow`, so only admins may call them until you add e.g. allow = { users = [\"alice\"] };");
    line("# the tools run code the project defines (tests, build scripts) within the grants below.");
    line("# Temporary files need no grant: cordond gives every invocation its own TMPDIR.");
    line("version = 1");
    line("");
    line("[defaults]");
    line(&format!("working_dir = {}", q_path(root)));
    line("network = \"none\"");
    line("timeout = \"10m\"");
    for w in why("search_path") {
        line(&w);
    }
    line(&format!("search_path = {}", list(&g.search_path)));
    let mut read = vec![root.to_path_buf()];
    read.extend(g.read.iter().cloned());
    line(&format!("read = {}", list(&read)));
    for w in why("write") {
        line(&w);
    }
    if !g.write.is_empty() {
        line(&format!("write = {}", list(&g.write)));
    }
    for w in why("exec") {
        line(&w);
    }
    if !g.exec.is_empty() {
        line(&format!("exec = {}", list(&g.exec)));
    }
    let env: Vec<String> = g.env.iter().map(|(k, v)| format!("{k} = {}", q(v))).collect();
    if !env.is_empty() {
        line("");
        line("[defaults.env]");
        for e in env {
            line(&e);
        }
    }
    for t in tools {
        line("");
        line(&format!("[tools.{project}-{}]", t.suffix));
        line(&format!("description = {}", q(&t.description)));
        line(&format!("reason = {}", q(t.reason)));
        let command: Vec<String> = t.command.iter().map(q).collect();
        line(&format!("command = [{}]", command.join(", ")));
        if let Some(why) = g.accept_write_exec {
            line(&format!("# write-exec: {why}"));
            line("accept_warnings = [\"write-exec\"]");
        }
        if let Some((name, description, pattern)) = t.param {
            line("arg_separator = true            # `--` before the value: it can never be an option");
            line("");
            line(&format!("[tools.{project}-{}.params.{name}]", t.suffix));
            line("type = \"string\"");
            line(&format!("pattern = {}", q(pattern)));
            line("max_length = 200");
            line(&format!("description = {}", q(description)));
        }
    }
    s
}
