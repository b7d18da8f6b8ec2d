//! Loading: policy files read under the trust rules, parsed, probed for availability on a
//! [`Host`], and gathered into one [`PolicySet`] or one [`LoadError`].

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use sha2::{Digest as _, Sha256};

use super::diag::{Diagnostic, Severity};
use super::examples::{self, Outcome};
use super::intern::Interner;
use super::model::{Expect, Host, Source, Tool, Workflow};
use super::server::McpServer;
use super::trust::{self, Subject, Trust, TrustError, TrustedDir, Walked};
use super::{foreign, parse, probe};

/// The outcome of loading policy files.
#[derive(Debug, Clone)]
pub struct PolicySet {
    /// Sorted by name.
    pub tools: Vec<Arc<Tool>>,
    /// Sorted by name; every step names a tool of `tools` (see `[workflows.NAME]`).
    pub workflows: Vec<Arc<Workflow>>,
    /// MCP servers (`[servers.NAME]`), sorted by name; no server's name is a tool's namespace.
    pub servers: Vec<Arc<McpServer>>,
    /// Warnings (a successful load has no errors).
    pub diagnostics: Vec<Diagnostic>,
    pub files: Vec<PathBuf>,
    /// SHA-256 (hex) of the loaded files by name (see [`super::fleet::digest`]): the same for the
    /// same files on every host.
    pub digest: String,
    /// What the next load may take over (see [`load_sources_after`]).
    pub reuse: Reuse,
}

/// What a load leaves for the next one: for each policy file, the SHA-256 of its text, its tools
/// as this load probed them and its parse warnings; and the host they were probed on. A file
/// whose text is unchanged is not parsed again: its tools are probed again (every path opened and
/// checked afresh) and keep their `Arc` when the outcome is the same.
#[derive(Debug, Clone, Default)]
pub struct Reuse {
    host: Option<Host>,
    files: HashMap<PathBuf, LoadedFile>,
}

#[derive(Debug, Clone)]
struct LoadedFile {
    digest: [u8; 32],
    tools: Vec<Arc<Tool>>,
    /// As parsed: linked to the tools again on every load.
    workflows: Vec<Arc<Workflow>>,
    /// As this load probed their launchers, with the column of each name.
    servers: Vec<(Arc<McpServer>, u32)>,
    /// The file's `namespace`, its line and column (checked against servers on every load).
    namespace: Option<(String, u32, u32)>,
    warnings: Vec<Diagnostic>,
}

impl Reuse {
    /// Every tool of the load that left this, and every server's launcher.
    fn tools(&self) -> impl Iterator<Item = &Tool> {
        self.files
            .values()
            .flat_map(|f| f.tools.iter().map(|t| &**t).chain(f.servers.iter().map(|(s, _)| &*s.launcher)))
    }
}

/// `server` with its launcher probed again (the same `Arc` when nothing changed).
fn reprobe_server(server: &Arc<McpServer>, host: &Host, pinned: &mut probe::PinCache) -> Arc<McpServer> {
    let launcher = probe::reprobe(&server.launcher, host, pinned);
    if Arc::ptr_eq(&launcher, &server.launcher) {
        return server.clone();
    }
    Arc::new(McpServer { launcher, ..(**server).clone() })
}

/// `server` with its launcher probed (availability and pins), like a tool.
fn probe_server(mut server: McpServer, host: &Host, pinned: &mut probe::PinCache) -> Arc<McpServer> {
    let mut launcher = (*server.launcher).clone();
    probe::probe(&mut launcher, host, pinned);
    server.launcher = Arc::new(launcher);
    Arc::new(server)
}

/// The names servers share with other files: two servers of one name, or a server named like a
/// file's namespace (both would list tools as `NAME__TOOL`). Each problem is reported at both
/// places, each naming the other.
fn link_servers(files: &[(&Path, &LoadedFile)]) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let error = |file: &Path, line: u32, column: u32, message: String| Diagnostic {
        severity: Severity::Error,
        file: file.to_path_buf(),
        line,
        column,
        message,
    };
    let mut servers: BTreeMap<&str, (&Path, u32, u32)> = BTreeMap::new();
    for (file, loaded) in files {
        for (server, column) in &loaded.servers {
            let here = (*file, server.source.line, *column);
            match servers.get(server.name.as_str()) {
                Some((f, l, c)) => {
                    out.push(error(
                        file,
                        here.1,
                        here.2,
                        format!("duplicate server name {:?}: already defined at {}:{l}", server.name, f.display()),
                    ));
                    out.push(error(
                        f,
                        *l,
                        *c,
                        format!(
                            "server {:?} is defined again at {}:{}; rename one of them",
                            server.name,
                            file.display(),
                            here.1
                        ),
                    ));
                }
                None => {
                    servers.insert(&server.name, here);
                }
            }
        }
    }
    for (file, loaded) in files {
        let Some((ns, line, column)) = &loaded.namespace else { continue };
        let Some((sfile, sline, scol)) = servers.get(ns.as_str()) else { continue };
        if sfile == file {
            // Reported by the parser, at both places.
            continue;
        }
        out.push(error(
            file,
            *line,
            *column,
            format!(
                "namespace {ns:?} is also the name of the server at {}:{sline}: both would list tools as {ns}__NAME; \
                 rename the server or the namespace",
                sfile.display()
            ),
        ));
        out.push(error(
            sfile,
            *sline,
            *scol,
            format!(
                "server {ns:?} has the name of the namespace of {}:{line}: both would list tools as {ns}__NAME; rename \
                 the server or the namespace",
                file.display()
            ),
        ));
    }
    out
}

/// A load that found errors; nothing from it may be used.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", render_failure(.diagnostics))]
pub struct LoadError {
    /// Errors and warnings, in file order.
    pub diagnostics: Vec<Diagnostic>,
}

fn render_failure(diagnostics: &[Diagnostic]) -> String {
    let errors = diagnostics.iter().filter(|d| d.is_error()).count();
    let lines: Vec<String> = diagnostics.iter().map(ToString::to_string).collect();
    format!("{}\npolicy rejected: {errors} error(s)", lines.join("\n"))
}

/// Largest policy file read (a bigger one is refused, not read).
pub const MAX_POLICY_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// Largest total of the policy files of one load.
pub const MAX_POLICY_TOTAL_BYTES: u64 = 64 * 1024 * 1024;
/// Ignored entries of a policy directory named one by one; more are counted.
const MAX_IGNORED_NAMED: usize = 20;

/// Policy texts read from disk, and what went wrong reading them.
#[derive(Debug, Default)]
pub struct Sources {
    /// (path, text), in name order.
    pub files: Vec<(PathBuf, String)>,
    /// Errors (a file that could not be read, or that someone but root or the daemon's user
    /// could have written) and warnings (entries of the directory that are not read).
    pub diagnostics: Vec<Diagnostic>,
}

impl Sources {
    fn error(&mut self, file: &Path, message: String) {
        self.diagnostics.push(file_error(file, message));
    }

    fn warn(&mut self, file: &Path, message: String) {
        self.diagnostics.push(Diagnostic {
            severity: Severity::Warning,
            file: file.to_path_buf(),
            line: 1,
            column: 1,
            message,
        });
    }

    /// One warning per ignored entry, up to [`MAX_IGNORED_NAMED`]; the rest are counted. A
    /// `*.json` file is read (under the trust rules) to say how to convert it when it is a
    /// CtxNest or Gandalf config.
    fn warn_ignored(&mut self, dir: &Path, walked: &TrustedDir, trust: Trust, ignored: Vec<Ignored>) {
        let hidden = ignored.len().saturating_sub(MAX_IGNORED_NAMED);
        for (path, why) in ignored.into_iter().take(MAX_IGNORED_NAMED) {
            let json = path.file_name().filter(|n| trust::has_extension(n, "json"));
            let text = json.and_then(|name| {
                trust::read_regular(walked, name, &path, trust, Subject::POLICY_FILE, MAX_POLICY_FILE_BYTES).ok()
            });
            let text = text.and_then(|b| String::from_utf8(b).ok());
            let message = if let Some(text) = text.filter(|t| foreign::Foreign::sniff(t).is_some()) {
                format!("ignored: {}", foreign::hint(&path, &text))
            } else if why == "a directory" {
                format!(
                    "ignored: {} is a directory; policies are read only from *.toml files directly in the policy directory",
                    path.display()
                )
            } else {
                format!(
                    "ignored: {} does not end in .toml; only *.toml files are read (rename it to load it)",
                    path.display()
                )
            };
            self.warn(&path, message);
        }
        if hidden > 0 {
            self.warn(dir, format!("ignored: {hidden} more entries of {} that are not *.toml files", dir.display()));
        }
    }

    fn bytes(&self) -> u64 {
        self.files.iter().map(|(_, t)| t.len() as u64).sum()
    }
}

/// Reads the policy files of `dir` as a daemon with `trust`'s rules would: every `*.toml` not
/// starting with `.`, in name order, only regular files (a symlink only through a checked walk),
/// each and every directory above them writable by root or the daemon's user only (see
/// [`trust`]), each at most [`MAX_POLICY_FILE_BYTES`]. Other entries are named in warnings.
pub fn read_dir_sources(dir: &Path, trust: Trust) -> Sources {
    let mut out = Sources::default();
    let (walked, names, ignored) = match list_dir(dir, trust) {
        Ok(listed) => listed,
        Err(e) => {
            out.error(dir, e.to_string());
            return out;
        }
    };
    out.warn_ignored(dir, &walked, trust, ignored);
    for name in names {
        let path = dir.join(&name);
        let max = MAX_POLICY_FILE_BYTES.min(MAX_POLICY_TOTAL_BYTES.saturating_sub(out.bytes()));
        let bytes = match trust::lstat_in(&walked, &name) {
            Ok(st) if trust::is_symlink(&st) => read_file_walked(&path, trust, max),
            Ok(_) => trust::read_regular(&walked, &name, &path, trust, Subject::POLICY_FILE, max),
            Err(errno) => {
                Err(TrustError::Io { action: "inspect", what: "policy file".into(), path: path.clone(), errno })
            }
        };
        push_bytes(&mut out, path, bytes, max);
    }
    out
}

/// Why a policy directory could not be listed (nothing of it is read then).
#[derive(Debug, thiserror::Error)]
enum DirError {
    #[error("policy directory {} is not a directory; pass a directory with --policies", .0.display())]
    NotADirectory(PathBuf),
    #[error("cannot read policy directory: {0}")]
    Unreadable(#[source] TrustError),
    #[error("cannot list policy directory {}: {errno}", path.display())]
    Unlistable {
        path: PathBuf,
        #[source]
        errno: Errno,
    },
}

/// An entry of a policy directory that is not read, and why.
type Ignored = (PathBuf, &'static str);

/// Opens `dir` under the trust rules and lists it: the `*.toml` names (sorted) and the other
/// entries (sorted), leaving out names that start with `.`.
fn list_dir(dir: &Path, trust: Trust) -> Result<(TrustedDir, Vec<OsString>, Vec<Ignored>), DirError> {
    let walked = match trust::walk(dir, trust, Subject::POLICY_DIR).map_err(DirError::Unreadable)? {
        Walked::Dir(d) => d,
        Walked::File { .. } => return Err(DirError::NotADirectory(dir.to_path_buf())),
    };
    let mut listing = trust::open_listing(&walked, Subject::POLICY_DIR).map_err(DirError::Unreadable)?;
    let mut names: Vec<OsString> = Vec::new();
    let mut ignored: Vec<Ignored> = Vec::new();
    for entry in listing.iter() {
        let entry = entry.map_err(|errno| DirError::Unlistable { path: dir.to_path_buf(), errno })?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if name.as_bytes().first() == Some(&b'.') {
            continue;
        }
        if trust::has_extension(name, "toml") {
            names.push(name.to_os_string());
            continue;
        }
        let is_dir = trust::lstat_in(&walked, name).is_ok_and(|st| trust::describe(&st) == "a directory");
        ignored.push((dir.join(name), if is_dir { "a directory" } else { "not a *.toml file" }));
    }
    names.sort();
    ignored.sort();
    Ok((walked, names, ignored))
}

/// Reads one policy file named by path (symlinks followed through a checked walk).
fn read_file_walked(path: &Path, trust: Trust, max: u64) -> Result<Vec<u8>, TrustError> {
    match trust::walk(path, trust, Subject::POLICY_FILE)? {
        Walked::File { parent, name, path: resolved } => {
            trust::read_regular(&parent, &name, &resolved, trust, Subject::POLICY_FILE, max)
        }
        Walked::Dir(d) => Err(TrustError::NotRegular { what: "policy file".into(), path: d.path, kind: "a directory" }),
    }
}

fn push_bytes(out: &mut Sources, path: PathBuf, bytes: Result<Vec<u8>, TrustError>, max: u64) {
    match bytes {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => out.files.push((path, text)),
            Err(_) => out.error(&path, "file is not valid UTF-8; policy files are UTF-8 text".into()),
        },
        Err(TrustError::TooLarge { what, path: p, size, .. }) if max < MAX_POLICY_FILE_BYTES => out.error(
            &path,
            format!(
                "{what} {} ({size} bytes or more) would take the policy files over {MAX_POLICY_TOTAL_BYTES} bytes in all; \
                 remove unused files",
                p.display()
            ),
        ),
        Err(e) => out.error(&path, e.to_string()),
    }
}

/// Reads `path` as `cordon policy check` does: a directory like [`read_dir_sources`], a file
/// (or a symlink to one) under the same rules.
pub fn read_path_sources(path: &Path, trust: Trust) -> Sources {
    if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        return read_dir_sources(path, trust);
    }
    let mut out = Sources::default();
    let bytes = read_file_walked(path, trust, MAX_POLICY_FILE_BYTES);
    let is_toml = path.file_name().is_some_and(|n| trust::has_extension(n, "toml"));
    // A JSON file (a CtxNest or Gandalf config, most likely) is not a policy: say how to convert
    // it instead of reporting it as broken TOML.
    if !is_toml
        && let Ok(text) = bytes.as_ref().map(|b| String::from_utf8_lossy(b))
        && foreign::looks_like_json(&text)
    {
        out.error(path, foreign::hint(path, &text));
        return out;
    }
    push_bytes(&mut out, path.to_path_buf(), bytes, MAX_POLICY_FILE_BYTES);
    out
}

/// Loads every policy file of `dir` under the trust rules of this process's user (see
/// [`read_dir_sources`]).
pub fn load_dir(dir: &Path, host: &Host) -> Result<PolicySet, LoadError> {
    load_dir_as(dir, host, Trust::current(), None)
}

/// [`load_dir`] after a load that left `previous` (see [`load_sources_after`]): what a daemon's
/// reload calls.
pub fn load_dir_after(dir: &Path, host: &Host, previous: &Reuse) -> Result<PolicySet, LoadError> {
    load_dir_as(dir, host, Trust::current(), Some(previous))
}

/// [`load_dir`] under the trust rules of a daemon running as `trust`, taking over what the
/// `previous` load can lend (see [`load_sources_after`]).
pub fn load_dir_as(dir: &Path, host: &Host, trust: Trust, previous: Option<&Reuse>) -> Result<PolicySet, LoadError> {
    let read = read_dir_sources(dir, trust);
    let mut diagnostics = read.diagnostics;
    let files: Vec<PathBuf> = read.files.iter().map(|(f, _)| f.clone()).collect();
    match load_sources_after(&read.files, host, previous) {
        Err(mut e) => {
            diagnostics.append(&mut e.diagnostics);
            Err(LoadError { diagnostics })
        }
        Ok(mut set) => {
            diagnostics.append(&mut set.diagnostics);
            if diagnostics.iter().any(Diagnostic::is_error) {
                return Err(LoadError { diagnostics });
            }
            set.diagnostics = diagnostics;
            set.files = files;
            Ok(set)
        }
    }
}

/// Loads policy texts given as (name, content), as if they were the files of one directory.
pub fn load_sources(sources: &[(PathBuf, String)], host: &Host) -> Result<PolicySet, LoadError> {
    load_sources_after(sources, host, None)
}

/// [`load_sources`], after a load that left `previous`: the result is what a fresh load gives,
/// but a file whose path and text are unchanged (on the same host) is not parsed again; its
/// tools are probed again like fresh ones and are the previous `Arc`s when nothing about them
/// changed. Pins of unchanged paths keep their descriptors, and patterns and schemas stay shared
/// with the previous generation.
pub fn load_sources_after(
    sources: &[(PathBuf, String)],
    host: &Host,
    previous: Option<&Reuse>,
) -> Result<PolicySet, LoadError> {
    let previous = previous.filter(|p| p.host.as_ref() == Some(host));
    let mut diagnostics = Vec::new();
    let mut tools: Vec<Arc<Tool>> = Vec::new();
    let mut workflows: Vec<Arc<Workflow>> = Vec::new();
    let mut seen: BTreeMap<String, Source> = BTreeMap::new();
    let (mut pinned, mut intern) = match previous {
        Some(p) => (probe::PinCache::after(p.tools()), Interner::after(p.tools())),
        None => (probe::PinCache::default(), Interner::default()),
    };
    let mut reuse = Reuse { host: Some(host.clone()), files: HashMap::new() };
    for (file, text) in sources {
        let digest: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        let unchanged = previous.and_then(|p| p.files.get(file)).filter(|f| {
            // A name an earlier file now defines is a duplicate: parse again to report it.
            f.digest == digest && f.tools.iter().all(|t| !seen.contains_key(&t.name))
        });
        if let Some(before) = unchanged {
            let mine: Vec<Arc<Tool>> = before.tools.iter().map(|t| probe::reprobe(t, host, &mut pinned)).collect();
            for tool in &mine {
                seen.insert(tool.name.clone(), tool.source.clone());
            }
            let servers: Vec<(Arc<McpServer>, u32)> =
                before.servers.iter().map(|(s, c)| (reprobe_server(s, host, &mut pinned), *c)).collect();
            diagnostics.extend(before.warnings.iter().cloned());
            tools.extend(mine.iter().cloned());
            workflows.extend(before.workflows.iter().cloned());
            let loaded = LoadedFile {
                digest,
                tools: mine,
                workflows: before.workflows.clone(),
                servers,
                namespace: before.namespace.clone(),
                warnings: before.warnings.clone(),
            };
            reuse.files.insert(file.clone(), loaded);
            continue;
        }
        let parsed = parse::parse_file(file, text, &seen, &mut intern);
        let file_ok = !parsed.diagnostics.iter().any(Diagnostic::is_error);
        if file_ok {
            let mut mine: Vec<Arc<Tool>> = Vec::with_capacity(parsed.tools.len());
            for mut tool in parsed.tools {
                probe::probe(&mut tool, host, &mut pinned);
                seen.insert(tool.name.clone(), tool.source.clone());
                mine.push(Arc::new(tool));
            }
            tools.extend(mine.iter().cloned());
            let flows: Vec<Arc<Workflow>> = parsed.workflows.into_iter().map(Arc::new).collect();
            workflows.extend(flows.iter().cloned());
            let servers: Vec<(Arc<McpServer>, u32)> =
                parsed.servers.into_iter().map(|p| (probe_server(p.server, host, &mut pinned), p.column)).collect();
            let warnings = parsed.diagnostics.clone();
            let namespace = parsed.namespace.clone();
            let loaded = LoadedFile { digest, tools: mine, workflows: flows, servers, namespace, warnings };
            reuse.files.insert(file.clone(), loaded);
        }
        diagnostics.extend(parsed.diagnostics);
    }
    if diagnostics.iter().any(Diagnostic::is_error) {
        return Err(LoadError { diagnostics });
    }
    // Servers' names are checked against every file's, in the order of the files.
    let in_order: Vec<(&Path, &LoadedFile)> =
        sources.iter().filter_map(|(f, _)| reuse.files.get(f).map(|l| (f.as_path(), l))).collect();
    let mut linked = link_servers(&in_order);
    // Workflows are checked against every tool of the load, whichever file defines them.
    linked.extend(parse::link(&tools, &workflows));
    if !linked.is_empty() {
        diagnostics.extend(linked);
        diagnostics.sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
        return Err(LoadError { diagnostics });
    }
    let mut servers: Vec<Arc<McpServer>> =
        in_order.iter().flat_map(|(_, l)| l.servers.iter().map(|(s, _)| s.clone())).collect();
    drop(in_order);
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    workflows.sort_by(|a, b| a.name.cmp(&b.name));
    servers.sort_by(|a, b| a.name.cmp(&b.name));
    // A server's launcher relies on paths like a tool does.
    let relied: Vec<Arc<Tool>> = tools.iter().cloned().chain(servers.iter().map(|s| s.launcher.clone())).collect();
    diagnostics.extend(probe::exposure_warnings(&relied, &mut pinned));
    let files = sources.iter().map(|(f, _)| f.clone()).collect();
    let digest = super::fleet::digest(sources.iter().map(|(f, text)| (file_name(f), text.as_bytes())));
    Ok(PolicySet { tools, workflows, servers, diagnostics, files, digest, reuse })
}

/// What `cordon policy test` found: the problems of the files (other than failing examples) and
/// the outcome of every example of every tool that parsed, in file order.
#[derive(Debug, Clone)]
pub struct TestReport {
    pub diagnostics: Vec<Diagnostic>,
    pub results: Vec<ExampleResult>,
}

/// One example of one tool, and what running it gave.
#[derive(Debug, Clone)]
pub struct ExampleResult {
    pub tool: String,
    pub file: PathBuf,
    pub line: u32,
    pub column: u32,
    /// A `[[refuse]]` example (else `[[examples]]`).
    pub refuse: bool,
    pub outcome: Outcome,
}

/// Runs the examples of every tool in `sources` (as if they were the files of one directory),
/// without probing the host: a tool need not be available for its examples to run.
pub fn test_sources(sources: &[(PathBuf, String)]) -> TestReport {
    let mut intern = Interner::default();
    let mut seen: BTreeMap<String, Source> = BTreeMap::new();
    let mut report = TestReport { diagnostics: Vec::new(), results: Vec::new() };
    for (file, text) in sources {
        let parsed = parse::parse_file_with(file, text, &seen, &mut intern, false);
        for tool in &parsed.tools {
            seen.insert(tool.name.clone(), tool.source.clone());
            for (example, outcome) in examples::run_all(tool) {
                report.results.push(ExampleResult {
                    tool: tool.name.clone(),
                    file: file.clone(),
                    line: example.line,
                    column: example.column,
                    refuse: matches!(example.expect, Expect::Refused { .. }),
                    outcome,
                });
            }
        }
        report.diagnostics.extend(parsed.diagnostics);
    }
    report
}

/// A policy file's name within its directory (all of the path when it has none).
fn file_name(path: &Path) -> &[u8] {
    path.file_name().map_or(path.as_os_str(), |n| n).as_bytes()
}

fn file_error(file: &Path, message: String) -> Diagnostic {
    Diagnostic { severity: Severity::Error, file: file.to_path_buf(), line: 1, column: 1, message }
}
