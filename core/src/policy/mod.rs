//! Policy files: TOML text -> validated [`Tool`]s.
//!
//! Parsing walks the spanned TOML document by hand instead of deriving serde structs, so that
//! every problem in a file is reported with its `file:line:col`, not only the first one. A file
//! with any error contributes no tools; a load with any error fails as a whole.
//!
//! Architecture invariant: a [`Tool`] cannot hold an invalid state. Every rule in the key tables
//! below is checked while parsing; later stages (validation, execution) never re-check policy
//! syntax.

pub mod defaults;
pub mod diag;
mod parse;
mod pattern;
mod probe;
pub mod reference;
pub mod schema;
pub mod trust;
pub mod units;

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use diag::{Diagnostic, Severity};
pub use pattern::PatternError;
pub use probe::{SEARCH_PATH, resolve_run_as};
pub use trust::{Subject, Trust, TrustError, Walked};

/// Shortest and longest timeout a tool may have.
pub const TIMEOUT_RANGE: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(3600));
/// Smallest and largest per-stream output cap.
pub const MAX_OUTPUT_RANGE: (u64, u64) = (1, 10 * 1024 * 1024);
/// Timeout of a tool that sets none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Per-stream output cap of a tool that sets none.
pub const DEFAULT_MAX_OUTPUT: u64 = 256 * 1024;
/// Compiled size limit of a param pattern, in bytes.
pub const REGEX_SIZE_LIMIT: usize = 1024 * 1024;
/// Nesting limit of a param pattern.
pub const REGEX_NEST_LIMIT: u32 = 32;
/// Longest pattern source accepted.
pub const REGEX_MAX_LEN: usize = 1024;
/// Environment keys a tool may never set.
pub const FORBIDDEN_ENV: &str = "PATH, LD_*, DYLD_*";

/// Whether a tool's `env` (or a param exported through `args_env_prefix`) may use this key.
pub fn env_key_forbidden(key: &str) -> bool {
    key == "PATH" || key.starts_with("LD_") || key.starts_with("DYLD_")
}

/// Documentation of one policy key, shared by the parser (known keys, suggestions) and the
/// authoring reference, so the two cannot drift.
#[derive(Debug, Clone, Copy)]
pub struct KeyDoc {
    pub name: &'static str,
    pub value: &'static str,
    pub doc: &'static str,
    /// May also appear in `[defaults]`.
    pub defaultable: bool,
}

const fn key(name: &'static str, value: &'static str, doc: &'static str, defaultable: bool) -> KeyDoc {
    KeyDoc { name, value, doc, defaultable }
}

/// Keys of the top level of a policy file.
pub const FILE_KEYS: &[KeyDoc] = &[
    key("version", "integer", "policy format version; must be 1", false),
    key("defaults", "table", "values every tool in this file starts from", false),
    key("tools", "table", "one [tools.NAME] table per tool; NAME matches ^[a-z][a-z0-9-]*$", false),
];

/// Keys of a `[tools.NAME]` table (and, where `defaultable`, of `[defaults]`).
pub const TOOL_KEYS: &[KeyDoc] = &[
    key("description", "string", "what the tool does, shown to the agent (required)", false),
    key("reason", "string", "why this tool is allowed, shown to admins (a warning when missing)", false),
    key(
        "command",
        "array of strings",
        "argv template; command[0] is a literal absolute path or a name looked up in the fixed PATH; \
         later elements may contain {{param}} placeholders",
        false,
    ),
    key("working_dir", "string", "absolute directory the tool runs in (no `..`)", true),
    key("env", "table of strings", "extra environment variables (PATH, LD_*, DYLD_* are forbidden)", true),
    key(
        "args_env_prefix",
        "string",
        "also pass each param as environment variable PREFIX + NAME in upper case (JSON for non-strings)",
        true,
    ),
    key("timeout", "duration", "wall-clock limit, 1s to 1h (default 60s)", true),
    key("max_output", "size", "per-stream output cap, 1B to 10MiB (default 256KiB); the middle is cut", true),
    key("params", "table", "one [tools.NAME.params.PARAM] table per parameter", false),
    key("confirm", "false | \"agent\" | \"human\"", "require a confirmation before running (default false)", true),
    key("danger", "\"safe\" | \"moderate\" | \"high\"", "how destructive the tool is (default \"safe\")", true),
    key("disabled", "boolean", "validated but never exposed or run", false),
    key("arg_separator", "boolean", "insert `--` before the first substituted argument", true),
    key("annotations", "table", "{ title = string, read_only = bool, idempotent = bool } hints for agents", false),
    key(
        "output",
        "\"text\" | \"json\" | table",
        "\"json\" or { type = \"json\", schema = {...} } for structured output",
        false,
    ),
    key("read", "array of paths", "extra paths the tool may read beneath", true),
    key("write", "array of paths", "paths the tool may write beneath", true),
    key("exec", "array of paths", "extra paths the tool may execute from", true),
    key("network", "\"none\" | table", "\"none\" or { connect_tcp = [ports], bind_tcp = [ports] }", true),
    key("unix_sockets", "false | array of paths", "Unix socket paths the tool may connect to (default none)", true),
    key(
        "limits",
        "table",
        "{ memory = size, processes = int, open_files = int, file_size = size, cpu_time = duration }",
        true,
    ),
    key("allow", "table", "{ users = [...], groups = [...] } agent callers admitted to this tool", true),
    key(
        "run_as",
        "string | integer",
        "\"user\" or \"user:group\" to run as instead of the caller (daemon must be root)",
        true,
    ),
    key("min_landlock_abi", "integer", "the tool is unavailable when the kernel's landlock ABI is lower", true),
];

/// Keys of a `[tools.NAME.params.PARAM]` table.
pub const PARAM_KEYS: &[KeyDoc] = &[
    key("type", "string", "string | integer | number | boolean | enum | path (required)", false),
    key("description", "string", "shown to the agent", false),
    key("required", "boolean", "the call must give a value (default false; cannot be combined with default)", false),
    key("default", "value", "used when the call omits the param; must pass the param's own rules", false),
    key("pattern", "string", "string only: regex the whole value must match (linear-time engine)", false),
    key("min", "number", "integer and number only: inclusive minimum (default 0: no negative values)", false),
    key("max", "number", "integer and number only: inclusive maximum", false),
    key("min_length", "integer", "string and path only: minimum length in characters", false),
    key("max_length", "integer", "string and path only: maximum length in characters", false),
    key("values", "array of strings", "enum only: the accepted values", false),
    key("secret", "boolean", "redact the value in logs and audit records", false),
];

/// Keys of a `limits` table.
pub const LIMIT_KEYS: &[KeyDoc] = &[
    key("memory", "size", "address-space / memory limit", false),
    key("processes", "integer", "maximum number of processes", false),
    key("open_files", "integer", "maximum open file descriptors (at least 4)", false),
    key("file_size", "size", "largest file the tool may write", false),
    key("cpu_time", "duration", "CPU time limit", false),
];

/// A validated tool definition.
#[derive(Debug, Clone)]
pub struct Tool {
    pub name: String,
    pub description: String,
    pub reason: Option<String>,
    /// `command[0]` as written: an absolute path or a bare name.
    pub program: String,
    /// `command[1..]`.
    pub args: Vec<ArgTemplate>,
    pub working_dir: Option<PathBuf>,
    pub env: BTreeMap<String, String>,
    pub args_env_prefix: Option<String>,
    pub timeout: Duration,
    pub max_output: u64,
    /// In definition order.
    pub params: Vec<Param>,
    pub confirm: Confirm,
    pub danger: Danger,
    pub disabled: bool,
    pub arg_separator: bool,
    pub annotations: Annotations,
    pub output: Output,
    pub sandbox: SandboxPolicy,
    /// `None`: no agent caller is admitted (admins still see the tool).
    pub allow: Option<Allow>,
    pub source: Source,
    pub availability: Availability,
    /// JSON Schema (draft 2020-12) of the arguments object.
    pub input_schema: serde_json::Value,
}

impl Tool {
    pub fn param(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }

    /// Available now: available when the registry loaded, and every pinned path (grants,
    /// working_dir, command[0], socket directories) still names what it named then.
    pub fn is_available(&self) -> bool {
        matches!(self.availability_now(), Availability::Available { .. })
    }

    /// The load-time availability, turned unavailable (with the reason) when a pinned path
    /// changed since the registry loaded. A few system calls per pinned path.
    pub fn availability_now(&self) -> Availability {
        match &self.availability {
            Availability::Available { .. } => match probe::verify(&self.sandbox.pins) {
                Ok(()) => self.availability.clone(),
                Err(reason) => Availability::Unavailable { reason },
            },
            unavailable => unavailable.clone(),
        }
    }

    /// The argv template as written in the policy.
    pub fn command_template(&self) -> Vec<String> {
        std::iter::once(self.program.clone()).chain(self.args.iter().map(ArgTemplate::to_string)).collect()
    }

    /// Whether the tool can reach the network at all.
    pub fn has_network(&self) -> bool {
        !matches!(self.sandbox.network, Network::None)
    }
}

/// Where a tool was defined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub file: PathBuf,
    pub line: u32,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// Whether a tool can run on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    Available { executable: PathBuf },
    Unavailable { reason: String },
}

/// One element of the argv template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgTemplate {
    pub segments: Vec<Segment>,
}

impl ArgTemplate {
    /// The params this element refers to.
    pub fn placeholders(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Param(name) => Some(name.as_str()),
            Segment::Literal(_) => None,
        })
    }

    pub fn has_placeholder(&self) -> bool {
        self.placeholders().next().is_some()
    }

    /// The param name when the element is exactly one placeholder.
    pub fn sole_placeholder(&self) -> Option<&str> {
        match self.segments.as_slice() {
            [Segment::Param(name)] => Some(name),
            _ => None,
        }
    }
}

impl std::fmt::Display for ArgTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for s in &self.segments {
            match s {
                Segment::Literal(text) => f.write_str(text)?,
                Segment::Param(name) => write!(f, "{{{{{name}}}}}")?,
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Literal(String),
    Param(String),
}

/// A typed tool parameter.
#[derive(Debug, Clone)]
pub struct Param {
    pub name: String,
    pub kind: ParamKind,
    pub description: Option<String>,
    pub required: bool,
    /// Already checked against the param's own rules.
    pub default: Option<serde_json::Value>,
    pub secret: bool,
}

#[derive(Debug, Clone)]
pub enum ParamKind {
    String { pattern: Option<Pattern>, min_length: Option<u64>, max_length: Option<u64> },
    Integer { min: Option<i64>, max: Option<i64> },
    Number { min: Option<f64>, max: Option<f64> },
    Boolean,
    Enum { values: Vec<String> },
    Path { min_length: Option<u64>, max_length: Option<u64> },
}

impl ParamKind {
    pub fn type_name(&self) -> &'static str {
        match self {
            ParamKind::String { .. } => "string",
            ParamKind::Integer { .. } => "integer",
            ParamKind::Number { .. } => "number",
            ParamKind::Boolean => "boolean",
            ParamKind::Enum { .. } => "enum",
            ParamKind::Path { .. } => "path",
        }
    }
}

/// A compiled pattern that must match a whole value.
#[derive(Debug, Clone)]
pub struct Pattern {
    /// As written in the policy.
    pub source: String,
    /// `source` with shorthand classes spelled out in ASCII: what the daemon and the JSON Schema
    /// both use.
    pub portable: String,
    /// `^(?:portable)$`.
    pub regex: regex::Regex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Confirm {
    #[default]
    None,
    Agent,
    Human,
}

impl Confirm {
    pub fn as_str(self) -> &'static str {
        match self {
            Confirm::None => "none",
            Confirm::Agent => "agent",
            Confirm::Human => "human",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Danger {
    #[default]
    Safe,
    Moderate,
    High,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Annotations {
    pub title: Option<String>,
    pub read_only: bool,
    pub idempotent: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub enum Output {
    #[default]
    Text,
    Json {
        schema: Option<serde_json::Value>,
    },
}

/// What the kernel sandbox grants the tool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxPolicy {
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    pub exec: Vec<PathBuf>,
    pub network: Network,
    pub unix_sockets: Vec<PathBuf>,
    pub limits: Limits,
    pub run_as: Option<RunAs>,
    pub min_landlock_abi: Option<u32>,
    /// The paths above, opened without following symlinks when the registry loaded (empty until
    /// the tool is probed, and for a tool that is unavailable).
    pub pins: Arc<Pins>,
}

/// What a tool's paths named when the registry loaded: one descriptor and (dev, ino) each.
/// Landlock rules are built from these descriptors, the working directory is entered and the
/// executable run through them, and each invocation first checks that every path still
/// resolves, without symlinks, to the same (dev, ino).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pins {
    pub read: Vec<Pin>,
    pub write: Vec<Pin>,
    pub exec: Vec<Pin>,
    pub working_dir: Option<Pin>,
    /// The directory of each `unix_sockets` path (a service re-creates its socket, so the socket
    /// itself is not pinned; the directory that holds it is).
    pub socket_dirs: Vec<Pin>,
    pub executable: Option<PinnedExecutable>,
}

impl Pins {
    /// Every pin with the policy key it came from.
    pub fn all(&self) -> impl Iterator<Item = (&'static str, &Pin)> {
        self.executable
            .iter()
            .map(|e| ("command[0]", &e.pin))
            .chain(self.working_dir.iter().map(|p| ("working_dir", p)))
            .chain(self.read.iter().map(|p| ("read", p)))
            .chain(self.write.iter().map(|p| ("write", p)))
            .chain(self.exec.iter().map(|p| ("exec", p)))
            .chain(self.socket_dirs.iter().map(|p| ("unix_sockets directory", p)))
    }
}

/// A path opened (`O_PATH`) without following symlinks.
#[derive(Debug, Clone)]
pub struct Pin {
    /// Absolute and normalized; no component is a symlink.
    pub path: PathBuf,
    pub node: crate::resolve::Node,
    pub fd: Arc<OwnedFd>,
}

impl PartialEq for Pin {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path && self.node.dev == other.node.dev && self.node.ino == other.node.ino
    }
}

impl Eq for Pin {}

/// `command[0]`: the file it named at load, through any root-owned symlinks (`/bin/sh` ->
/// `/usr/bin/dash`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedExecutable {
    /// The path as resolved from `command[0]` (may pass through symlinks).
    pub named: PathBuf,
    /// The real file (`pin.path` has no symlink).
    pub pin: Pin,
    /// Starts with `#!`: run by its real path (the interpreter opens it by name), not through
    /// the descriptor.
    pub script: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Network {
    #[default]
    None,
    Tcp {
        connect: Vec<u16>,
        bind: Vec<u16>,
    },
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub memory: Option<u64>,
    pub processes: Option<u64>,
    pub open_files: Option<u64>,
    pub file_size: Option<u64>,
    pub cpu_time: Option<Duration>,
}

impl Limits {
    /// `self`'s values where set, `base`'s elsewhere.
    fn or(self, base: Limits) -> Limits {
        Limits {
            memory: self.memory.or(base.memory),
            processes: self.processes.or(base.processes),
            open_files: self.open_files.or(base.open_files),
            file_size: self.file_size.or(base.file_size),
            cpu_time: self.cpu_time.or(base.cpu_time),
        }
    }
}

/// A user or group, by name or numeric id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    Name(String),
    Id(u32),
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Principal::Name(n) => f.write_str(n),
            Principal::Id(id) => write!(f, "{id}"),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allow {
    pub users: Vec<Principal>,
    pub groups: Vec<Principal>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub user: Principal,
    pub group: Option<Principal>,
}

/// The outcome of loading policy files.
#[derive(Debug, Clone)]
pub struct PolicySet {
    /// Sorted by name.
    pub tools: Vec<Tool>,
    /// Warnings (a successful load has no errors).
    pub diagnostics: Vec<Diagnostic>,
    pub files: Vec<PathBuf>,
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

/// Host facts that decide availability. The daemon builds it from its sandbox probe
/// (`cordon_sandbox::HostSandbox::policy_host`); an offline `policy check` asks `cordond --probe`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The daemon runs as root (needed for `run_as`).
    pub is_root: bool,
    /// The kernel's landlock ABI (0: none, and no tool can run).
    pub landlock_abi: i32,
    /// Why tools with `unix_sockets` cannot be offered on this host (`None`: they can).
    pub unix_sockets_unavailable: Option<String>,
    /// Why no tool can run on this host for want of a read-only filesystem view (`None`: views
    /// work, or this host runs tools without them, as a daemon that is not root may).
    pub views_unavailable: Option<String>,
}

impl Host {
    /// A host as an offline check assumes it before any sandbox probe: a root daemon gets
    /// invocation cgroups (so `unix_sockets` tools are offered) and read-only views.
    pub fn new(is_root: bool, landlock_abi: i32) -> Host {
        let unix_sockets_unavailable = (!is_root).then(|| NOT_IDENTIFIABLE.to_string());
        Host { is_root, landlock_abi, unix_sockets_unavailable, views_unavailable: None }
    }
}

/// Why a daemon that is not root cannot offer `unix_sockets` tools.
pub const NOT_IDENTIFIABLE: &str = "unix_sockets needs invocation cgroups, which let cordond refuse its own tools on its \
     socket (cordond is not root and cannot create cgroups); run cordond as root";

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
    let walked = match trust::walk(dir, trust, Subject::POLICY_DIR) {
        Ok(Walked::Dir(d)) => d,
        Ok(Walked::File { .. }) => {
            out.error(
                dir,
                format!("policy directory {} is not a directory; pass a directory with --policies", dir.display()),
            );
            return out;
        }
        Err(e) => {
            out.error(dir, format!("cannot read policy directory: {e}"));
            return out;
        }
    };
    let mut listing = match trust::open_listing(&walked, Subject::POLICY_DIR) {
        Ok(l) => l,
        Err(e) => {
            out.error(dir, format!("cannot read policy directory: {e}"));
            return out;
        }
    };
    let mut names: Vec<std::ffi::OsString> = Vec::new();
    let mut ignored: Vec<(PathBuf, &'static str)> = Vec::new();
    for entry in listing.iter() {
        let entry = match entry {
            Ok(e) => e,
            Err(errno) => {
                out.error(dir, format!("cannot list policy directory {}: {errno}", dir.display()));
                return out;
            }
        };
        let name = std::ffi::OsStr::from_bytes(entry.file_name().to_bytes());
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
    let hidden = ignored.len().saturating_sub(MAX_IGNORED_NAMED);
    for (path, why) in ignored.into_iter().take(MAX_IGNORED_NAMED) {
        let message = if why == "a directory" {
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
        out.warn(&path, message);
    }
    if hidden > 0 {
        out.warn(dir, format!("ignored: {hidden} more entries of {} that are not *.toml files", dir.display()));
    }
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
    push_bytes(&mut out, path.to_path_buf(), bytes, MAX_POLICY_FILE_BYTES);
    out
}

/// Loads every policy file of `dir` under the trust rules of this process's user (see
/// [`read_dir_sources`]).
pub fn load_dir(dir: &Path, host: &Host) -> Result<PolicySet, LoadError> {
    load_dir_as(dir, host, Trust::current())
}

/// [`load_dir`] under the trust rules of a daemon running as `trust`.
pub fn load_dir_as(dir: &Path, host: &Host, trust: Trust) -> Result<PolicySet, LoadError> {
    let read = read_dir_sources(dir, trust);
    let mut diagnostics = read.diagnostics;
    let files: Vec<PathBuf> = read.files.iter().map(|(f, _)| f.clone()).collect();
    match load_sources(&read.files, host) {
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
    let mut diagnostics = Vec::new();
    let mut tools: Vec<Tool> = Vec::new();
    let mut seen: BTreeMap<String, Source> = BTreeMap::new();
    let mut pinned = probe::PinCache::default();
    for (file, text) in sources {
        let parsed = parse::parse_file(file, text, &seen);
        let file_ok = !parsed.diagnostics.iter().any(Diagnostic::is_error);
        diagnostics.extend(parsed.diagnostics);
        if file_ok {
            for mut tool in parsed.tools {
                probe::probe(&mut tool, host, &mut pinned);
                seen.insert(tool.name.clone(), tool.source.clone());
                tools.push(tool);
            }
        }
    }
    if diagnostics.iter().any(Diagnostic::is_error) {
        return Err(LoadError { diagnostics });
    }
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    diagnostics.extend(probe::exposure_warnings(&tools));
    Ok(PolicySet { tools, diagnostics, files: sources.iter().map(|(f, _)| f.clone()).collect() })
}

fn file_error(file: &Path, message: String) -> Diagnostic {
    Diagnostic { severity: Severity::Error, file: file.to_path_buf(), line: 1, column: 1, message }
}
