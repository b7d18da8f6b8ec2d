//! The policies `cordon init` writes: `cordon init [DIR]` detects the project's toolchains (lock
//! files, `.venv`, `node_modules`, a Makefile's `test`/`check` target, `go.mod`) and writes the
//! matching part for each; `cordon init --template rust|python|node|c` writes one part whatever
//! the project holds. Each part grants exactly what its toolchain runs, found on the PATH of
//! whoever runs `cordon init` and in the project (nothing of the project or the toolchain is run;
//! scripts' `#!` lines, symlinks, lock files and `package.json` are read).
//!
//! Every policy: the project root as `working_dir` and `read`; the toolchain's directories as
//! `search_path` (so bare names and `cargo clippy`'s subcommand lookup work) and its homes
//! read-only; only the build output writable; no network; real `reason`s; and, for a project
//! owned by a user other than root, `run_as = { owner_of = "working_dir" }` with that user in
//! `allow`, so the file passes `cordon policy check --deny-warnings` as written. A tool whose
//! program is not installed (clippy, rustfmt, pytest, a package manager) is left out, and the
//! file says why.
//!
//! Temporary space is cordond's own: every invocation gets a private `TMPDIR` (read, write,
//! exec; and where cordond can make mount namespaces a private `/tmp` and `/dev/shm`), so
//! rustdoc's doctests, gcc, pytest's `tmp_path` and multiprocessing need no grant here.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use cordon_core::policy::defaults::DEFAULT_READ_EXEC;

use super::{q, q_path, which};
use crate::error::CliError;

/// The kinds of project `--template` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Template {
    /// cargo test (with doctests), and cargo clippy / cargo fmt --check where installed, offline.
    Rust,
    /// pytest (multiprocessing included) from the project's .venv, the active virtualenv or PATH.
    Python,
    /// npm test (exec on the node_modules bins) and node --test, offline.
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

/// More distinct package directories than this among `node_modules/.bin`'s targets: one grant of
/// their common `node_modules` instead (said in the file).
const MAX_BIN_GRANTS: usize = 48;

/// The tests' reason, the same for every ecosystem.
const TEST_REASON: &str = "agents check their changes by running the project's tests";

/// One tool of a part.
pub(super) struct T {
    suffix: String,
    description: String,
    reason: String,
    command: Vec<String>,
    /// A free-form argument behind `--` (name, description, pattern).
    param: Option<(&'static str, &'static str, &'static str)>,
}

fn tool(suffix: &str, description: impl Into<String>, reason: &str, command: &[&str]) -> T {
    T {
        suffix: suffix.to_string(),
        description: description.into(),
        reason: reason.to_string(),
        command: command.iter().map(|s| (*s).to_string()).collect(),
        param: None,
    }
}

/// What a part grants, shared by its tools.
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

/// One ecosystem's tools and grants.
pub(super) struct Part {
    /// What was detected, e.g. "rust (Cargo workspace)".
    pub label: String,
    g: Grants,
    tools: Vec<T>,
    /// Written into the file as comments and printed: what was left out and why, what to do
    /// before installing.
    pub notes: Vec<String>,
    /// Write roots that must exist (a missing grant makes the tools unavailable).
    pub must_exist: Vec<PathBuf>,
}

impl Part {
    fn new(label: impl Into<String>) -> Part {
        Part { label: label.into(), g: Grants::default(), tools: Vec::new(), notes: Vec::new(), must_exist: Vec::new() }
    }

    pub(super) fn tool_names<'a>(&'a self, project: &'a str) -> impl Iterator<Item = String> + 'a {
        self.tools.iter().map(move |t| format!("{project}-{}", t.suffix))
    }
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

/// A small file of the project, if it is a regular file (a symlink out of the project, a FIFO or
/// a huge file is not read: the agent may write the project).
fn small_file(root: &Path, name: &str) -> Option<String> {
    super::read_checked(root, name).ok().flatten()
}

fn is_file(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file())
}

fn is_dir(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_dir())
}

/// Whether a TOML text has the table header `[name]` on a line of its own.
fn has_table(text: &str, name: &str) -> bool {
    let header = format!("[{name}]");
    text.lines().any(|l| l.trim() == header)
}

// ---------------------------------------------------------------------------------------------
// Rust

/// The rustup toolchain cargo runs for this project: `RUSTUP_TOOLCHAIN`, the project's
/// `rust-toolchain(.toml)`, or rustup's default; its directory under `toolchains/`, if found.
fn rustup_toolchain(rustup_home: &Path, root: &Path) -> Option<PathBuf> {
    let from_file = || {
        if let Some(t) = small_file(root, "rust-toolchain.toml") {
            let doc: toml::Table = t.parse().ok()?;
            return doc.get("toolchain")?.get("channel")?.as_str().map(str::to_string);
        }
        let t = small_file(root, "rust-toolchain")?;
        let line = t.lines().next()?.trim().to_string();
        (!line.is_empty() && !line.starts_with('[')).then_some(line)
    };
    let default = || {
        let t = std::fs::read_to_string(rustup_home.join("settings.toml")).ok()?;
        let doc: toml::Table = t.parse().ok()?;
        doc.get("default_toolchain")?.as_str().map(str::to_string)
    };
    let name = std::env::var("RUSTUP_TOOLCHAIN").ok().or_else(from_file).or_else(default)?;
    let dir = rustup_home.join("toolchains");
    if is_dir(&dir.join(&name)) {
        return Some(dir.join(&name));
    }
    // `stable` names `stable-x86_64-unknown-linux-gnu`.
    let prefix = format!("{name}-");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    found.sort();
    found.into_iter().next()
}

fn rust(root: &Path, path_var: &std::ffi::OsStr) -> Result<Part, String> {
    let cargo = which("cargo", path_var).ok_or("cargo was not found on PATH")?;
    let mut p = Part::new("rust");
    let bin = cargo.parent().map(Path::to_path_buf).unwrap_or_default();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| bin.ends_with(".cargo/bin").then(|| bin.parent().map(Path::to_path_buf)).flatten());
    // rustup's proxies: ~/.cargo/bin, or any cargo that is rustup (a link to it, or beside it:
    // CARGO_HOME=/usr/local/cargo in container images). A cargo that is not rustup's needs no
    // RUSTUP_HOME, even where one exists.
    let is_rustup = bin.ends_with(".cargo/bin")
        || is_file(&bin.join("rustup"))
        || std::fs::canonicalize(&cargo).is_ok_and(|r| r.file_name().is_some_and(|n| n == "rustup"));
    let rustup_home = std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".rustup")))
        .filter(|r| is_rustup && r.join("toolchains").is_dir());
    // Any other cargo (Debian's, a toolchain directory on PATH) keeps its registry cache where
    // cargo's default CARGO_HOME is, ~/.cargo: the offline build reads its index and sources there.
    let cargo_home = cargo_home
        .or_else(|| (is_rustup && rustup_home.is_some()).then(|| bin.parent().map(Path::to_path_buf)).flatten())
        .or_else(|| home.map(|h| h.join(".cargo")).filter(|h| is_dir(h)));
    let g = &mut p.g;
    g.search_path = search_path_with(std::slice::from_ref(&bin));
    g.why.push((
        "search_path",
        "cargo's directory first: cargo finds rustc and its subcommands (cargo-clippy) on PATH".into(),
    ));

    // A member of a workspace builds in the workspace's target/ and reads its Cargo.toml and lock.
    let manifest = small_file(root, "Cargo.toml").unwrap_or_default();
    let workspace = has_table(&manifest, "workspace");
    let mut build_root = root.to_path_buf();
    if !workspace {
        for up in root.ancestors().skip(1) {
            // Bounded: a regular file of at most 4 MiB (an ancestor's FIFO would block a read).
            let manifest = up.join("Cargo.toml");
            let readable = std::fs::metadata(&manifest).is_ok_and(|m| m.is_file() && m.len() <= 4 << 20);
            if readable && std::fs::read_to_string(&manifest).is_ok_and(|t| has_table(&t, "workspace")) {
                build_root = up.to_path_buf();
                push(&mut g.read, up.to_path_buf());
                p.notes.push(format!(
                    "this crate is a member of the Cargo workspace at {}: cargo builds in its target/ and reads its \
                     Cargo.toml and Cargo.lock (run `cordon init` there to test every member)",
                    up.display()
                ));
                break;
            }
        }
    }
    if workspace {
        p.label = "rust (Cargo workspace)".into();
    }
    let target = build_root.join("target");
    push(&mut g.write, target.clone());
    push(&mut g.exec, target.clone());
    p.must_exist.push(target);
    if std::env::var_os("CARGO_TARGET_DIR").is_some()
        || small_file(root, ".cargo/config.toml")
            .or_else(|| small_file(root, ".cargo/config"))
            .is_some_and(|t| t.contains("target-dir"))
    {
        p.notes.push(
            "a target directory other than target/ is set (CARGO_TARGET_DIR or .cargo/config.toml's target-dir): not \
             handled; the tools grant only target/"
                .into(),
        );
    }
    if let Some(h) = &cargo_home {
        if !by_default(h) {
            push(&mut g.read, h.clone());
        }
        g.env.push(("CARGO_HOME", h.display().to_string()));
    }
    let mut toolchain_bin: Option<PathBuf> = None;
    if let Some(r) = &rustup_home {
        push(&mut g.read, r.clone());
        push(&mut g.exec, r.join("toolchains"));
        g.env.push(("RUSTUP_HOME", r.display().to_string()));
        g.why.push(("exec", "rustup's proxies run the toolchain's cargo, rustc and clippy-driver".into()));
        toolchain_bin = rustup_toolchain(r, root).map(|t| t.join("bin"));
    }
    // A toolchain that is not rustup's proxies (a toolchain directory on PATH, an installer's
    // /opt/rust): rustc loads librustc_driver and the standard library from its PREFIX/lib, and
    // links with the rust-lld it ships in PREFIX/lib/rustlib/*/bin.
    if !is_rustup
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
    g.accept_write_exec =
        Some("cargo builds the test binaries (and rustdoc the doctests) in target/ and the temp dir, then runs them");
    p.notes.push(format!(
        "cargo runs offline (CARGO_NET_OFFLINE){}: fetch dependencies first (cargo fetch)",
        match (&cargo_home, &rustup_home) {
            (Some(_), Some(_)) => " with CARGO_HOME and RUSTUP_HOME read-only",
            (Some(_), None) => " with CARGO_HOME read-only",
            _ => "",
        }
    ));
    if !build_root.join("Cargo.lock").is_file() {
        p.notes.push(format!(
            "the project has no Cargo.lock, and the tools may not write {}: create it (cargo generate-lockfile) \
             before installing",
            build_root.display()
        ));
    }
    // Subcommands: rustup's proxies exist for every component, installed or not, so look in the
    // toolchain cargo runs; otherwise next to cargo (Debian's cargo-clippy, a toolchain's bin).
    let (where_, component_dir) = match &toolchain_bin {
        Some(t) => (format!("in the rustup toolchain {}", t.parent().unwrap_or(t).display()), t.clone()),
        None => (format!("next to cargo in {}", bin.display()), bin.clone()),
    };
    let installed = |program: &str| is_file(&component_dir.join(program));
    let all = if workspace { vec!["--workspace"] } else { Vec::new() };
    let mut test_cmd = vec!["cargo", "test"];
    test_cmd.extend(&all);
    test_cmd.push("{{filter}}");
    let mut test = tool(
        "cargo-test",
        format!(
            "Run the Rust project's tests and doctests (cargo test{}, offline), optionally only those whose name \
             contains FILTER",
            if workspace { " --workspace" } else { "" }
        ),
        TEST_REASON,
        &test_cmd,
    );
    test.param =
        Some(("filter", "run only tests whose path contains this (e.g. parser::tests)", "[A-Za-z0-9_][A-Za-z0-9_:]*"));
    p.tools.push(test);
    if installed("cargo-clippy") {
        let mut cmd = vec!["cargo", "clippy"];
        cmd.extend(&all);
        cmd.push("--all-targets");
        p.tools.push(tool(
            "cargo-clippy",
            format!(
                "Lint the Rust project (cargo clippy{} --all-targets, offline)",
                if workspace { " --workspace" } else { "" }
            ),
            "agents check their changes with the project's linter",
            &cmd,
        ));
    } else {
        p.notes.push(format!(
            "cargo clippy was left out: cargo-clippy is not installed {where_} (rustup component add clippy, or \
             Debian's rust-clippy), then run cordon init again"
        ));
    }
    if installed("cargo-fmt") && installed("rustfmt") {
        let mut cmd = vec!["cargo", "fmt"];
        cmd.extend(if workspace { vec!["--all"] } else { Vec::new() });
        cmd.push("--check");
        p.tools.push(tool(
            "cargo-fmt-check",
            "Check the Rust project's formatting (cargo fmt --check); changes nothing",
            "agents check that their changes follow the project's formatting",
            &cmd,
        ));
    } else {
        p.notes.push(format!(
            "cargo fmt --check was left out: cargo-fmt and rustfmt are not installed {where_} (rustup component add \
             rustfmt, or Debian's rustfmt)"
        ));
    }
    Ok(p)
}

// ---------------------------------------------------------------------------------------------
// Python

/// Whether pytest-cov is installed in the Python environment at `prefix` (a virtualenv or a
/// Python's installation prefix): a `pytest_cov` package in one of its `lib/python3*/site-packages`.
fn has_pytest_cov(prefix: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else { return false };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .any(|e| is_dir(&e.path().join("site-packages/pytest_cov")))
}

/// A virtualenv: a directory with `pyvenv.cfg`, canonical.
fn venv_at(p: &Path) -> Option<PathBuf> {
    is_file(&p.join("pyvenv.cfg")).then(|| std::fs::canonicalize(p).ok()).flatten()
}

fn python(root: &Path, path_var: &std::ffi::OsStr) -> Result<Part, String> {
    let mut p = Part::new("python");
    let uv = root.join("uv.lock").is_file();
    let poetry = root.join("poetry.lock").is_file();
    let in_project = [".venv", "venv"].iter().find_map(|d| venv_at(&root.join(d)).map(|v| (*d, v)));
    let active = std::env::var_os("VIRTUAL_ENV").map(PathBuf::from).and_then(|v| venv_at(&v));
    let manager = if uv {
        "uv"
    } else if poetry {
        "poetry"
    } else {
        ""
    };
    let venv = match (&in_project, &active) {
        (Some((name, v)), _) => {
            p.label =
                format!("python ({}{name})", if manager.is_empty() { String::new() } else { format!("{manager}, ") });
            Some(v.clone())
        }
        (None, Some(v)) => {
            p.label = format!("python (the active virtualenv {})", v.display());
            Some(v.clone())
        }
        (None, None) => None,
    };
    if venv.is_none() {
        match manager {
            "uv" => p.notes.push(
                "uv.lock found but no .venv in the project: run `uv sync` (it makes .venv), then cordon init again"
                    .into(),
            ),
            "poetry" => p.notes.push(
                "poetry.lock found but no .venv in the project: poetry's own virtualenvs (~/.cache/pypoetry) are not \
                 detected; set `poetry config virtualenvs.in-project true` and run `poetry install` (or activate it \
                 with `poetry shell`), then cordon init again"
                    .into(),
            ),
            _ => {}
        }
    }
    let pytest = match &venv {
        Some(v) if is_file(&v.join("bin/pytest")) => v.join("bin/pytest"),
        Some(v) => {
            return Err(format!(
                "pytest is not installed in the virtualenv {} ({}/bin/pip install pytest, then run cordon init again)",
                v.display(),
                v.display()
            ));
        }
        None => which("pytest", path_var).ok_or(
            "pytest was not found in a .venv or venv of the project, nor on PATH (make one: python3 -m venv .venv \
             && .venv/bin/pip install pytest, then run cordon init again)",
        )?,
    };
    let bin = pytest.parent().map(Path::to_path_buf).unwrap_or_default();
    let interp = shebang(&pytest).ok_or_else(|| {
        format!(
            "{} has no #! line naming its Python; install pytest with pip (in a virtualenv) and try again",
            pytest.display()
        )
    })?;
    let real = std::fs::canonicalize(&interp)
        .map_err(|e| format!("pytest's interpreter {} cannot be resolved: {e}", interp.display()))?;
    let real_bin = real.parent().map(Path::to_path_buf).unwrap_or_default();
    let prefix = real_bin.parent().map(Path::to_path_buf).unwrap_or_default();
    let g = &mut p.g;
    g.search_path = search_path_with(&[bin.clone(), real_bin]);
    g.why.push((
        "search_path",
        "the virtualenv's bin (its python and pytest; executable through search_path), then its Python's".into(),
    ));
    if let Some(v) = venv.clone().or_else(|| interp.parent().and_then(Path::parent).and_then(venv_at))
        && !by_default(&v)
        && !v.starts_with(root)
    {
        push(&mut g.read, v);
    }
    let site = prefix.clone();
    if !by_default(&prefix) {
        push(&mut g.read, prefix);
    }
    g.env.push(("PYTHONDONTWRITEBYTECODE", "1".into()));
    // pytest-cov (`--cov` in the project's addopts) writes `.coverage` and its reports into the
    // project root, which the tools may not write: `--no-cov` turns it off (same tests, same
    // outcome), and is only given where pytest-cov is installed (pytest refuses it otherwise).
    let cov = has_pytest_cov(venv.as_deref().unwrap_or(&site));
    let mut argv = vec!["pytest", "-p", "no:cacheprovider"];
    if cov {
        argv.push("--no-cov");
        p.notes.push(
            "pytest-cov is installed: the pytest tool runs with --no-cov (coverage writes .coverage and its reports \
             into the project root, which the tool may not write)"
                .into(),
        );
    }
    argv.push("{{test}}");
    let mut t = tool(
        "pytest",
        "Run the Python tests with pytest (no cache written), optionally one test file or node id",
        TEST_REASON,
        &argv,
    );
    t.param = Some((
        "test",
        "a test file or node id relative to the project, e.g. tests/test_x.py::test_y",
        "[A-Za-z0-9_][A-Za-z0-9_./:\\[\\]-]*",
    ));
    p.tools.push(t);
    if venv.is_none() {
        p.notes.push(format!("no virtualenv in the project: the pytest on PATH ({}) was used", pytest.display()));
    }
    Ok(p)
}

// ---------------------------------------------------------------------------------------------
// Node

/// npm's placeholder test script: not a test.
const NPM_NO_TEST: &str = "echo \"Error: no test specified\" && exit 1";

/// The directory of the package a file under `node_modules` belongs to: the one or two (a
/// `@scope`) components after the last `node_modules/`.
fn package_dir(file: &Path) -> Option<PathBuf> {
    let comps: Vec<_> = file.components().collect();
    let at = comps.iter().rposition(|c| c.as_os_str() == "node_modules")?;
    let first = comps.get(at + 1)?;
    let n = if first.as_os_str().to_string_lossy().starts_with('@') { 2 } else { 1 };
    if comps.len() <= at + n + 1 {
        return None;
    }
    Some(comps[..=at + n].iter().collect())
}

/// Exec grants for the programs in `modules/.bin`: the package directory each link resolves to
/// (inside the project), or `.bin` itself where its entries are scripts (pnpm's shims).
/// esbuild's native program, which its JavaScript API (vite, vitest, tsx) starts as a child:
/// `node_modules/@esbuild/PLATFORM` (pnpm: in its store), executable.
fn esbuild_grants(root: &Path, modules: &Path, out: &mut Vec<PathBuf>) {
    let mut dirs: Vec<PathBuf> = Vec::new();
    let list = |d: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(d).map(|e| e.filter_map(|e| e.ok()).map(|e| e.path()).collect()).unwrap_or_default()
    };
    dirs.extend(list(&modules.join("@esbuild")));
    for entry in list(&modules.join(".pnpm")) {
        if entry.file_name().is_some_and(|n| n.to_string_lossy().starts_with("@esbuild+")) {
            dirs.extend(list(&entry.join("node_modules/@esbuild")));
        }
    }
    dirs.sort();
    for d in dirs {
        if let Ok(real) = std::fs::canonicalize(&d)
            && real.starts_with(root)
            && is_dir(&real)
        {
            push(out, real);
        }
    }
}

fn bin_grants(root: &Path, modules: &Path, out: &mut Vec<PathBuf>, names: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(modules.join(".bin")) else { return };
    for e in entries.filter_map(|e| e.ok()) {
        let path = e.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        let Ok(real) = std::fs::canonicalize(&path) else { continue };
        if !real.starts_with(root) || !is_file(&real) {
            continue;
        }
        names.push(e.file_name().to_string_lossy().into_owned());
        if meta.file_type().is_symlink() {
            if let Some(dir) = package_dir(&real) {
                push(out, dir);
            }
        } else if let Ok(bin) = std::fs::canonicalize(modules.join(".bin")) {
            push(out, bin);
        }
    }
}

/// The directories of an npm `workspaces` list: plain paths and `dir/*` globs.
fn workspace_dirs(root: &Path, patterns: &[String]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for pat in patterns {
        if pat.contains("..") || pat.starts_with('/') {
            continue;
        }
        if let Some(dir) = pat.strip_suffix("/*") {
            if let Ok(entries) = std::fs::read_dir(root.join(dir)) {
                let mut dirs: Vec<PathBuf> =
                    entries.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| is_dir(p)).collect();
                dirs.sort();
                out.extend(dirs);
            }
        } else if !pat.contains('*') && is_dir(&root.join(pat)) {
            out.push(root.join(pat));
        }
    }
    out
}

fn node(root: &Path, path_var: &std::ffi::OsStr, template: bool) -> Result<Part, String> {
    let node = which("node", path_var).ok_or("node was not found on PATH")?;
    let (pm, lock) = if root.join("pnpm-lock.yaml").is_file() {
        ("pnpm", "pnpm-lock.yaml")
    } else if root.join("yarn.lock").is_file() {
        ("yarn", "yarn.lock")
    } else {
        ("npm", "package-lock.json")
    };
    let pm_path = which(pm, path_var).ok_or_else(|| {
        format!("the project uses {pm} ({lock}), which was not found on PATH: install it and run cordon init again")
    })?;
    let doc: serde_json::Value =
        small_file(root, "package.json").and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default();
    let test_script = doc.pointer("/scripts/test").and_then(|v| v.as_str()).filter(|s| s.trim() != NPM_NO_TEST);
    let has_deps = ["dependencies", "devDependencies"]
        .iter()
        .any(|k| doc.get(*k).and_then(|v| v.as_object()).is_some_and(|o| !o.is_empty()));
    let workspaces: Vec<String> = doc
        .get("workspaces")
        .and_then(|w| w.as_array().or_else(|| w.get("packages")?.as_array()))
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    let mut p = Part::new(format!("node ({pm}{})", if workspaces.is_empty() { "" } else { " workspaces" }));
    let g = &mut p.g;
    let bin = node.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut first = vec![bin];
    if let Some(d) = pm_path.parent() {
        push(&mut first, d.to_path_buf());
    }
    for prog in [&node, &pm_path] {
        // nvm and similar: the installation's lib/node_modules (npm itself) must be readable.
        if let Some(prefix) = std::fs::canonicalize(prog).ok().and_then(|r| r.parent()?.parent().map(Path::to_path_buf))
            && !by_default(&prefix)
        {
            push(&mut g.read, prefix);
        }
    }
    g.search_path = search_path_with(&first);
    g.why.push(("search_path", format!("node's directory first: {pm} runs scripts with the node it finds on PATH")));
    if pm == "npm" {
        let cache = root.join(NPM_CACHE_DIR);
        push(&mut g.write, cache.clone());
        g.why.push(("write", format!("npm's cache and logs ({NPM_CACHE_DIR}, add it to .gitignore)")));
        g.env.push(("npm_config_cache", cache.display().to_string()));
        p.must_exist.push(cache);
    }
    g.env.push(("npm_config_update_notifier", "false".into()));
    g.env.push(("npm_config_audit", "false".into()));
    g.env.push(("npm_config_fund", "false".into()));
    // The programs the scripts run: node_modules/.bin of the project and of each workspace.
    let modules = root.join("node_modules");
    let installed = is_dir(&modules);
    // What the installed test runners write in the project (their temp files go to the
    // invocation's own TMPDIR): the directory is granted, and made if missing.
    for (pkg, dir, what) in [
        ("ava", "node_modules/.cache", "ava's cache (node_modules/.cache/ava)"),
        ("vitest", "node_modules/.vite", "vitest's results cache (node_modules/.vite)"),
        ("c8", "coverage", "c8's coverage data (coverage/, add it to .gitignore)"),
    ] {
        if is_dir(&modules.join(pkg)) {
            push(&mut g.write, root.join(dir));
            p.must_exist.push(root.join(dir));
            g.why.push(("write", what.to_string()));
        }
    }
    if is_dir(&modules.join("nyc")) {
        p.notes.push(
            "nyc is installed: it deletes and remakes .nyc_output in the project root on every run, which a write \
             grant cannot follow (only a grant of the whole project could): not handled; a script that runs nyc \
             fails, c8 works"
                .into(),
        );
    }
    let mut exec = Vec::new();
    let mut names = Vec::new();
    for dir in std::iter::once(root.to_path_buf()).chain(workspace_dirs(root, &workspaces)) {
        bin_grants(root, &dir.join("node_modules"), &mut exec, &mut names);
    }
    names.sort();
    names.dedup();
    let mut native = Vec::new();
    for dir in std::iter::once(root.to_path_buf()).chain(workspace_dirs(root, &workspaces)) {
        esbuild_grants(root, &dir.join("node_modules"), &mut native);
    }
    if !native.is_empty() {
        g.why.push(("exec", "esbuild's native program, which vite and vitest start (node_modules/@esbuild)".into()));
        for d in native {
            push(&mut exec, d);
        }
    }
    // Collapsed only where no write root lies in node_modules (an exec root above a write root
    // would let the tools run what they wrote).
    let writes_in_modules = g.write.iter().any(|w| w.starts_with(&modules));
    if exec.len() > MAX_BIN_GRANTS && !writes_in_modules {
        let store = if pm == "pnpm" { modules.join(".pnpm") } else { modules.clone() };
        p.notes.push(format!(
            "node_modules/.bin links into {} packages: exec is granted on {} as a whole",
            exec.len(),
            store.display()
        ));
        exec = vec![std::fs::canonicalize(&store).unwrap_or(store)];
    }
    if !exec.is_empty() {
        g.why.push((
            "exec",
            format!(
                "the programs the scripts run from node_modules/.bin ({}): the package directories they link to{}",
                names.join(", "),
                if pm == "pnpm" { " in pnpm's node_modules/.pnpm store" } else { "" }
            ),
        ));
        g.exec = exec;
    }
    if root.join(".pnp.cjs").is_file() {
        p.notes.push(
            "yarn Plug'n'Play (.pnp.cjs) is not handled: the packages live in yarn's cache, which is not granted"
                .into(),
        );
    }
    if pm == "pnpm" && root.join("pnpm-workspace.yaml").is_file() {
        p.notes.push(
            "pnpm-workspace.yaml: pnpm test runs the root's test script only (pnpm -r test is not generated)".into(),
        );
    }
    let install = match pm {
        "pnpm" => "pnpm install --frozen-lockfile",
        "yarn" => "yarn install --frozen-lockfile",
        _ => "npm ci",
    };
    let test_cmd: Option<Vec<&str>> = match (test_script, workspaces.is_empty(), pm) {
        (Some(_), _, _) => Some(vec![pm, "test"]),
        (None, false, "npm") => Some(vec!["npm", "test", "--workspaces", "--if-present"]),
        _ => None,
    };
    match test_cmd.clone() {
        Some(cmd) if has_deps && !installed => p.notes.push(format!(
            "`{}` was left out: the project's dependencies are not installed (no node_modules); run `{install}` as the \
             project's owner, then cordon init again",
            cmd.join(" ")
        )),
        Some(cmd) => {
            let what = test_script.map_or_else(|| "every workspace's test script".to_string(), |s| format!("`{s}`"));
            p.tools.push(tool(
                &format!("{pm}-test"),
                format!("Run the project's tests ({}: {what}), offline", cmd.join(" ")),
                TEST_REASON,
                &cmd,
            ));
        }
        None if !template => p.notes.push(format!(
            "package.json has no test script{}: no test tool (`cordon init --template node` adds node --test)",
            if pm == "npm" { "" } else { " (workspaces other than npm's are not handled)" }
        )),
        None => {}
    }
    if template {
        // The template keeps its `npm test` tool for a project whose test script is still to come.
        if test_cmd.is_none() {
            p.tools.push(tool(
                &format!("{pm}-test"),
                format!("Run the project's test script ({pm} test), offline"),
                TEST_REASON,
                &[pm, "test"],
            ));
        }
        p.tools.push(tool(
            "node-test",
            "Run the project's tests with node's own runner (node --test)",
            TEST_REASON,
            &["node", "--test"],
        ));
    }
    p.notes.push(if installed {
        format!("{pm} runs without network: the tests use node_modules as installed (after changing dependencies, {install} again)")
    } else {
        format!("{pm} runs without network: install dependencies first ({install})")
    });
    Ok(p)
}

// ---------------------------------------------------------------------------------------------
// git

/// A git repository (`.git` a directory): read-only views of its state, as the owner (git
/// refuses a repository another account owns), with no system or global configuration (a
/// developer's `~/.gitconfig` may name hooks, pagers or credential helpers) and no optional locks
/// (`git status` would otherwise refresh the index, a write); the repository's own configuration
/// names no program they run (no fsmonitor, external diff or textconv).
fn git(root: &Path, path_var: &std::ffi::OsStr) -> Result<Part, String> {
    which("git", path_var).ok_or("git was not found on PATH")?;
    let mut p = Part::new("git");
    p.g.search_path = search_path_with(&[]);
    p.g.env.push(("GIT_CONFIG_NOSYSTEM", "1".into()));
    p.g.env.push(("GIT_CONFIG_GLOBAL", "/dev/null".into()));
    p.g.env.push(("GIT_OPTIONAL_LOCKS", "0".into()));
    if !is_dir(&root.join(".git")) {
        return Err(
            ".git is not a directory (a worktree or submodule whose repository lives elsewhere): not handled".into()
        );
    }
    let reason = "agents see the state and history of the project they work on";
    p.tools.push(tool(
        "git-status",
        "Show the working tree's status (git status --short --branch); changes nothing",
        reason,
        &["git", "-c", "core.fsmonitor=false", "status", "--short", "--branch"],
    ));
    p.tools.push(tool(
        "git-diff",
        "Show the uncommitted changes (git diff HEAD); changes nothing",
        reason,
        &["git", "diff", "--no-ext-diff", "--no-textconv", "HEAD"],
    ));
    p.tools.push(tool(
        "git-log",
        "Show the last 50 commits (git log --oneline -n 50); changes nothing",
        reason,
        &["git", "log", "--oneline", "-n", "50"],
    ));
    Ok(p)
}

// ---------------------------------------------------------------------------------------------
// make

fn make(root: &Path, path_var: &std::ffi::OsStr, targets: &[&str]) -> Result<Part, String> {
    which("make", path_var).ok_or("make was not found on PATH")?;
    let mut p = Part::new("make");
    if which("gcc", path_var).or_else(|| which("cc", path_var)).is_none() {
        p.notes.push("no C compiler (gcc, cc) was found on PATH: a Makefile that compiles C will fail".into());
    }
    let g = &mut p.g;
    g.search_path = search_path_with(&[]);
    // make builds next to the sources unless the Makefile says otherwise, and `make test` runs
    // what it built.
    let out = if is_dir(&root.join("build")) { root.join("build") } else { root.to_path_buf() };
    push(&mut g.write, out.clone());
    push(&mut g.exec, out);
    g.why.push((
        "write",
        "make builds in the project (narrow this to the build directory if the Makefile has one)".into(),
    ));
    g.accept_write_exec = Some("`make test` builds the test programs in the project and runs them");
    for t in targets {
        p.tools.push(tool(
            &format!("make-{t}"),
            format!("Build and run the project's tests (make {t})"),
            TEST_REASON,
            &["make", t],
        ));
    }
    Ok(p)
}

/// The notes `cordon init` prints after writing a template, and the text of the policy.
pub fn render(
    kind: Template,
    root: &Path,
    project: &str,
    path_var: &std::ffi::OsStr,
) -> Result<(String, Vec<String>, Vec<PathBuf>), CliError> {
    let missing = |why: String| {
        CliError::Usage(format!(
            "{why}; the {} template grants the toolchain it finds there: install it (or activate the environment \
             that has it) and run `cordon init --template` again",
            kind.name()
        ))
    };
    let part = match kind {
        Template::Rust => rust(root, path_var),
        Template::Python => python(root, path_var),
        Template::Node => node(root, path_var, true),
        Template::C => {
            if which("gcc", path_var).or_else(|| which("cc", path_var)).is_none() {
                return Err(missing("gcc was not found on PATH".into()));
            }
            make(root, path_var, &["test"])
        }
    }
    .map_err(missing)?;
    let header = format!("from `cordon init --template {}`", kind.name());
    let notes = part.notes.clone();
    let must = part.must_exist.clone();
    Ok((text(&header, root, project, &[part], &[]), notes, must))
}

/// What `cordon init` found: the parts it writes, and what it left out (for the file and report).
pub(super) struct Detected {
    pub parts: Vec<Part>,
    pub left_out: Vec<String>,
}

/// A detected part, or why it was not generated.
fn add(d: &mut Detected, what: &str, r: Result<Part, String>) {
    match r {
        Ok(p) if !p.tools.is_empty() => d.parts.push(p),
        // Nothing to run (e.g. npm test before `npm ci`): what it says is why.
        Ok(p) => d.left_out.extend(p.notes.into_iter().map(|n| format!("{what}: {n}"))),
        Err(why) => d.left_out.push(format!("{what}: {why}")),
    }
}

/// `cordon init [DIR]`: each toolchain the project uses, by its files.
pub(super) fn detect(root: &Path, path_var: &std::ffi::OsStr, make_targets: &[String]) -> Detected {
    let mut d = Detected { parts: Vec::new(), left_out: Vec::new() };
    if root.join("Cargo.toml").is_file() || root.join("Cargo.lock").is_file() {
        add(&mut d, "Cargo.toml", rust(root, path_var));
    }
    let py =
        ["pyproject.toml", "setup.py", "setup.cfg", "pytest.ini", "conftest.py", "uv.lock", "poetry.lock", "tox.ini"];
    if let Some(f) = py.iter().find(|f| root.join(f).is_file()) {
        add(&mut d, f, python(root, path_var));
    } else if [".venv", "venv"].iter().any(|v| venv_at(&root.join(v)).is_some()) {
        add(&mut d, ".venv", python(root, path_var));
    }
    if root.join("package.json").is_file() {
        add(&mut d, "package.json", node(root, path_var, false));
    }
    let tests: Vec<&str> = ["test", "check"].into_iter().filter(|t| make_targets.iter().any(|m| m == t)).collect();
    let builds_in_project = !is_dir(&root.join("build"));
    if !tests.is_empty() && builds_in_project && !d.parts.is_empty() {
        // Its write root would be the project, above every other tool's grants (target/,
        // node_modules, .venv): each of them would be replaceable by make's tools.
        d.left_out.push(format!(
            "Makefile: `make {}` would write the whole project, which holds the other toolchains' grants (a write \
             root above them makes them replaceable): write its tool by hand with the directories it builds in",
            tests.join("`, `make ")
        ));
    } else if !tests.is_empty() {
        add(&mut d, "Makefile", make(root, path_var, &tests));
    } else if !make_targets.is_empty() {
        d.left_out.push("Makefile: no `test` or `check` target (`cordon init --scan` lists every target)".into());
    }
    if std::fs::symlink_metadata(root.join(".git")).is_ok() {
        add(&mut d, ".git", git(root, path_var));
    }
    if root.join("go.mod").is_file() {
        d.left_out.push(match which("go", path_var) {
            None => "go.mod: go was not found on PATH, and cordon init has no Go template: write the Go tools by hand"
                .into(),
            Some(go) => format!(
                "go.mod: cordon init has no Go template yet ({} was found): write the Go tools by hand",
                go.display()
            ),
        });
    }
    d
}

fn list(paths: &[PathBuf]) -> String {
    let items: Vec<String> = paths.iter().map(|p| q_path(p)).collect();
    format!("[{}]", items.join(", "))
}

/// The `run_as`/`allow` lines for the project's owner, or the comment why there are none.
fn owner_lines(root: &Path) -> Vec<String> {
    let uid = std::fs::metadata(root).map(|m| m.uid()).unwrap_or(0);
    if uid == 0 {
        return vec![
            "# The project belongs to root: the tools run as their caller (run_as = { owner_of = \"working_dir\" } \
             never runs as root) and have no `allow`, so only admins may call them."
                .into(),
        ];
    }
    let name = nix::unistd::User::from_uid(uid.into()).ok().flatten().map(|u| u.name);
    let mut out = vec![
        "# The tools run as the project's owner, whoever calls them (a root caller's runs leave no root-owned files)."
            .to_string(),
        "run_as = { owner_of = \"working_dir\" }".to_string(),
    ];
    match name {
        Some(n) => {
            out.push(
                "# The owner may call them (through `cordon mcp`, their agent); add other accounts as needed.".into(),
            );
            out.push(format!("allow = {{ users = [{}] }}", q(&n)));
        }
        None => out.push(format!("# uid {uid} owns the project but has no user name: no `allow` (admins only)")),
    }
    out
}

/// The grant lines of a part, as keys of `[defaults]` or of one tool.
fn grant_lines(g: &Grants, root: &Path, with_root_read: bool) -> Vec<String> {
    let mut out = Vec::new();
    let why = |key: &str| g.why.iter().filter(|(k, _)| *k == key).map(|(_, w)| format!("# {w}")).collect::<Vec<_>>();
    out.extend(why("search_path"));
    out.push(format!("search_path = {}", list(&g.search_path)));
    let mut read = Vec::new();
    if with_root_read {
        read.push(root.to_path_buf());
    }
    read.extend(g.read.iter().cloned());
    if !read.is_empty() {
        out.push(format!("read = {}", list(&read)));
    }
    if !g.write.is_empty() {
        out.extend(why("write"));
        out.push(format!("write = {}", list(&g.write)));
    }
    if !g.exec.is_empty() {
        out.extend(why("exec"));
        out.push(format!("exec = {}", list(&g.exec)));
    }
    out
}

fn env_lines(g: &Grants) -> Vec<String> {
    g.env.iter().map(|(k, v)| format!("{k} = {}", q(v))).collect()
}

/// The policy: `[defaults]` with what every tool shares (the part's grants too when there is one
/// part), then the tools (each with its part's grants when there are several).
pub(super) fn text(how: &str, root: &Path, project: &str, parts: &[Part], left_out: &[String]) -> String {
    let mut s = String::new();
    let mut line = |l: &str| {
        s.push_str(l);
        s.push('\n');
    };
    let labels: Vec<&str> = parts.iter().map(|p| p.label.as_str()).collect();
    line(&format!("# cordon policy for the project {project} at {}, {how}.", root.display()));
    let what = if how.contains("--template") { "Toolchain" } else { "Detected" };
    line(&format!("# {what}: {}.", labels.join("; ")));
    line("# The toolchains were found on the PATH of whoever ran `cordon init` and in the project; the tools run");
    line("# code the project defines (tests, build scripts) within the grants below, and have no network.");
    line("# Temporary files need no grant: cordond gives every invocation its own TMPDIR.");
    for p in parts {
        for n in &p.notes {
            line(&format!("# {}: {n}", p.label));
        }
    }
    for l in left_out {
        line(&format!("# Not generated: {l}"));
    }
    line("version = 1");
    line("");
    line("[defaults]");
    line(&format!("working_dir = {}", q_path(root)));
    line("network = \"none\"");
    line("timeout = \"10m\"");
    for l in owner_lines(root) {
        line(&l);
    }
    let single = parts.len() == 1;
    if single {
        for l in grant_lines(&parts[0].g, root, true) {
            line(&l);
        }
        let env = env_lines(&parts[0].g);
        if !env.is_empty() {
            line("");
            line("[defaults.env]");
            for e in env {
                line(&e);
            }
        }
    } else {
        line(&format!("read = [{}]", q_path(root)));
    }
    for p in parts {
        for t in &p.tools {
            let name = format!("{project}-{}", t.suffix);
            line("");
            line(&format!("[tools.{name}]"));
            line(&format!("description = {}", q(&t.description)));
            line(&format!("reason = {}", q(&t.reason)));
            let command: Vec<String> = t.command.iter().map(q).collect();
            line(&format!("command = [{}]", command.join(", ")));
            if !single {
                for l in grant_lines(&p.g, root, false) {
                    line(&l);
                }
            }
            if let Some(why) = p.g.accept_write_exec {
                line(&format!("# write-exec: {why}"));
                line("accept_warnings = [\"write-exec\"]");
            }
            if t.param.is_some() {
                line("arg_separator = true            # `--` before the value: it can never be an option");
            }
            if !single {
                let env = env_lines(&p.g);
                if !env.is_empty() {
                    line("");
                    line(&format!("[tools.{name}.env]"));
                    for e in env {
                        line(&e);
                    }
                }
            }
            if let Some((pname, description, pattern)) = t.param {
                line("");
                line(&format!("[tools.{name}.params.{pname}]"));
                line("type = \"string\"");
                line(&format!("pattern = {}", q(pattern)));
                line("max_length = 200");
                line(&format!("description = {}", q(description)));
            }
        }
    }
    s
}
