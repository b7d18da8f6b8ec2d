//! The policy model: validated tools, their params and grants, the host facts that decide
//! availability, and the policy facts (limits, the base environment, the safe integer range)
//! that the parser, the validator, argv planning and the reference all read.
//!
//! Architecture invariant: this module imports nothing else of the crate but [`crate::resolve`]
//! (for [`Pin`]'s node), [`crate::code`] (for [`Example`]'s expected code), [`crate::egress`]
//! (a tool's host rules) and [`crate::secret`] (the secrets a tool uses), all leaves: every
//! other policy module, [`crate::validate`] and [`crate::argv`]
//! stand above it.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

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

/// Separates a file's `namespace` from its tool names: `namespace = "proj"` makes
/// `[tools.run-tests]` the tool `proj__run-tests`. A plain tool name never contains `_`, so a
/// namespaced name cannot collide with an unnamespaced one.
pub const NAMESPACE_SEPARATOR: &str = "__";

/// How a `reason` that nobody wrote yet starts (`cordon import` writes one): such a reason is an
/// error until an admin replaces it with the real one.
pub const REASON_PLACEHOLDER: &str = "TODO";

/// Whether `reason` is still a placeholder: it starts with [`REASON_PLACEHOLDER`] in any case,
/// after any whitespace (`"todo: ..."` is no more a reason than `"TODO: ..."`).
pub fn reason_is_placeholder(reason: &str) -> bool {
    reason
        .trim_start()
        .get(..REASON_PLACEHOLDER.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(REASON_PLACEHOLDER))
}

#[cfg(test)]
mod placeholder_tests {
    use super::reason_is_placeholder;

    #[test]
    fn a_placeholder_reason_is_recognised_in_any_case_after_whitespace() {
        for r in ["TODO: why", "todo", " \u{2003}Todo: x", "\tTODO"] {
            assert!(reason_is_placeholder(r), "{r:?}");
        }
        for r in ["", "to do", "builds the docs; TODO later", "tod", "\u{e9}todo"] {
            assert!(!reason_is_placeholder(r), "{r:?}");
        }
    }
}

/// The fixed PATH used to resolve bare program names, and given to every child.
pub const SEARCH_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Most directories a tool's `search_path` may list.
pub const MAX_SEARCH_PATH: usize = 32;

/// The only variables a child inherits from the base environment.
pub const BASE_ENV: &[&str] = &["PATH", "HOME", "USER", "LANG", "TZ"];

/// Largest integer a param accepts (2^53 - 1): every integer up to here is exact as a JSON
/// number in every implementation, so the daemon, the JSON Schema and the agent agree on it.
pub const MAX_SAFE_INTEGER: i64 = 9_007_199_254_740_991;

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
    /// JSON Schema (draft 2020-12) of the arguments object, as compact JSON text (shared by the
    /// tools of a load that have the same one).
    pub input_schema: JsonText,
    /// The policy's own tests: `[[tools.NAME.examples]]` then `[[tools.NAME.refuse]]`, in file
    /// order (see `policy::examples`).
    pub examples: Vec<Example>,
    /// Exit codes that mean the call succeeded (`ok_exit_codes`; default `[0]`). Sorted, unique.
    pub ok_exit_codes: Vec<i32>,
    /// `cache = { ttl, error_ttl }`: results may be answered from the daemon's result cache
    /// (only read-only, idempotent tools without confirmation).
    pub cache: Option<CachePolicy>,
    /// `accept_warnings`: the warnings an admin reviewed and accepts for this tool, each with
    /// the reason given (required for the exposure warnings, `replaceable` and
    /// `beneath-write-root`, which the load raises).
    pub accepted_warnings: Vec<AcceptedWarning>,
    /// `secrets`: the declared secrets the tool uses, each by the environment variable that
    /// holds its placeholder (in the order written).
    pub secrets: Vec<crate::secret::ToolSecret>,
    /// `budget`: how much its callers may do (cordond enforces it).
    pub budget: Option<crate::policy::budget::Budget>,
}

/// One entry of `accept_warnings`: `"NAME"`, or `{ lint = "NAME", reason = "..." }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedWarning {
    pub lint: String,
    pub reason: Option<String>,
}

impl Tool {
    /// The tool's policy accepts the warning `lint`.
    pub fn accepts(&self, lint: &str) -> bool {
        self.accepted_warnings.iter().any(|a| a.lint == lint)
    }
}

/// Exit codes a tool that sets no `ok_exit_codes` succeeds with.
pub const DEFAULT_OK_EXIT_CODES: &[i32] = &[0];
/// Shortest and longest `cache.ttl` / `cache.error_ttl`.
pub const CACHE_TTL_RANGE: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(24 * 3600));

/// How long a tool's results may be answered from the result cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachePolicy {
    /// For a result that is `ok`.
    pub ttl: Duration,
    /// For a result that is not `ok` (`None`: such results are not cached).
    pub error_ttl: Option<Duration>,
}

/// One policy test of a tool: arguments and what a call with them must give.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// The arguments object, as a call would send it.
    pub args: serde_json::Value,
    pub expect: Expect,
    /// Where the example's table starts (1-based line and column).
    pub line: u32,
    pub column: u32,
}

/// What an [`Example`] must give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// `[[examples]]`: accepted; with `argv`, resolving to exactly that argv (`argv[0]` is
    /// `command[0]` as written).
    Accepted { argv: Option<Vec<String>> },
    /// `[[refuse]]`: refused with this validation code.
    Refused { code: crate::code::ErrorCode },
}

impl Tool {
    pub fn param(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }

    /// The argv template as written in the policy.
    pub fn command_template(&self) -> Vec<String> {
        std::iter::once(self.program.clone()).chain(self.args.iter().map(ArgTemplate::to_string)).collect()
    }

    /// Whether the tool can reach the network at all.
    pub fn has_network(&self) -> bool {
        !matches!(self.sandbox.network, Network::None)
    }

    /// Whether cordond's egress proxy terminates TLS for some of the tool's hosts: a secret is
    /// bound to one, or one has request rules. Such a tool gets the trust bundle (the system's
    /// roots and cordond's CA) and the variables that name it.
    pub fn terminated(&self) -> bool {
        !self.secrets.is_empty()
            || self.sandbox.network.egress().is_some_and(|e| e.http.iter().any(|h| h.requests.is_some()))
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

/// A compiled pattern that must match a whole value. A handle: the tools of a registry that use
/// the same pattern share one compiled regex (and its match caches); cloning is cheap.
#[derive(Debug, Clone)]
pub struct Pattern(Arc<CompiledPattern>);

#[derive(Debug)]
struct CompiledPattern {
    source: String,
    portable: String,
    regex: regex::Regex,
}

impl Pattern {
    /// Only `Pattern::compile` (in `pattern.rs`) makes one.
    pub(super) fn from_parts(source: String, portable: String, regex: regex::Regex) -> Pattern {
        Pattern(Arc::new(CompiledPattern { source, portable, regex }))
    }

    /// As written in the policy.
    pub fn source(&self) -> &str {
        &self.0.source
    }

    /// The source with shorthand classes spelled out in ASCII: what the daemon and the JSON
    /// Schema both use.
    pub fn portable(&self) -> &str {
        &self.0.portable
    }

    /// Whether the whole of `value` matches (`^(?:portable)$`).
    pub fn is_match(&self, value: &str) -> bool {
        self.0.regex.is_match(value)
    }

    /// Whether both handles share one compiled regex.
    pub fn shares_regex_with(&self, other: &Pattern) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// A JSON document kept as its compact text: what `ListTools` sends as it is, a fraction of the
/// size of a `serde_json::Value` tree, and shared (one allocation) by the tools of a registry
/// that have the same document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonText(Arc<str>);

impl JsonText {
    /// Compact JSON text of `value`.
    pub fn of(value: &serde_json::Value) -> JsonText {
        JsonText(Arc::from(value.to_string()))
    }

    pub(super) fn from_shared(text: Arc<str>) -> JsonText {
        JsonText(text)
    }

    pub(super) fn shared(&self) -> &Arc<str> {
        &self.0
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The document as a tree (it was made from one, so it parses; `Null` otherwise).
    pub fn value(&self) -> serde_json::Value {
        serde_json::from_str(&self.0).unwrap_or(serde_json::Value::Null)
    }

    /// Whether both share one allocation.
    pub fn shares_text_with(&self, other: &JsonText) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Display for JsonText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
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
        schema: Option<OutputSchema>,
    },
}

/// A tool's `output.schema`, compiled when the registry loaded (see `policy::output`).
#[derive(Clone)]
pub struct OutputSchema {
    /// As written in the policy.
    pub schema: serde_json::Value,
    /// The schema does not say `type = "object"`: values are sent wrapped as `{"result": value}`,
    /// and the schema advertised to MCP clients says so.
    pub wrapped: bool,
    pub(super) validator: Arc<jsonschema::Validator>,
}

impl std::fmt::Debug for OutputSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputSchema").field("schema", &self.schema).field("wrapped", &self.wrapped).finish()
    }
}

impl PartialEq for OutputSchema {
    fn eq(&self, other: &Self) -> bool {
        self.schema == other.schema
    }
}

/// Size of a tool's private temp space when neither `temp.size` nor `limits.memory` sets one.
pub const DEFAULT_TEMP_SIZE: u64 = 512 << 20;

/// Smallest `temp.size` a policy may set.
pub const MIN_TEMP_SIZE: u64 = 1 << 20;

/// A tool's private temp space (policy key `temp`): a fresh directory per invocation, granted
/// read, write and exec, named by `TMPDIR`; where cordond can make mount namespaces, a size-bounded
/// tmpfs, with a private `/tmp` and `/dev/shm` besides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Temp {
    /// `temp = false`: no temp space, no `TMPDIR` (the tool sees only its grants).
    Off,
    /// The default (`temp = true`, or `temp = { size = "256MiB" }`).
    #[default]
    On,
    /// `temp = { size = ... }`.
    Sized(u64),
}

impl Temp {
    /// The size bound of each private tmpfs: `temp.size`, else `limits.memory`, else
    /// [`DEFAULT_TEMP_SIZE`]. (tmpfs pages count against the writer's memory cgroup too.)
    pub fn size(self, limits: &Limits) -> u64 {
        match self {
            Temp::Sized(n) => n,
            _ => limits.memory.unwrap_or(DEFAULT_TEMP_SIZE),
        }
    }

    pub fn enabled(self) -> bool {
        self != Temp::Off
    }

    /// What the tool's temp space is, in a sentence (`cordon tool NAME`). `sandbox` is the
    /// tool's, `working_dir` its own (the executable is among the pins once probed).
    pub fn describe(sandbox: &SandboxPolicy, working_dir: Option<&Path>) -> String {
        let size = crate::policy::units::format_size(sandbox.temp.size(&sandbox.limits));
        if !sandbox.temp.enabled() {
            return "none (temp = false): no TMPDIR".into();
        }
        let beneath = |root: &str| {
            let root = Path::new(root);
            sandbox.relies_beneath(root) || working_dir.is_some_and(|w| w.starts_with(root))
        };
        let shm = if beneath("/dev/shm") {
            "/dev/shm stays the host's (the tool's paths lie beneath it)"
        } else {
            "a private /dev/shm"
        };
        if beneath("/tmp") {
            format!(
                "TMPDIR = a fresh directory per call, a private {size} tmpfs, and {shm}, where cordond makes mount \
                 namespaces (else a plain directory); /tmp stays the host's: the tool's paths lie beneath /tmp"
            )
        } else {
            format!(
                "TMPDIR = /tmp, a private {size} tmpfs per call, and {shm}, where cordond makes mount namespaces \
                 (else TMPDIR = a fresh plain directory and /tmp is the host's)"
            )
        }
    }
}

impl SandboxPolicy {
    /// Whether any path of the tool (its grants, and once probed its pinned working dir and
    /// executable) is `root` or lies beneath it: a private mount there would hide it.
    pub fn relies_beneath(&self, root: &Path) -> bool {
        self.read
            .iter()
            .chain(&self.write)
            .chain(&self.exec)
            .chain(&self.unix_sockets)
            .map(PathBuf::as_path)
            .chain(self.pins.all().map(|(_, p)| p.path.as_path()))
            .any(|p| p.starts_with(root))
    }
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
    /// `search_path`: the directories, in order, that make the tool's `PATH` (and where a bare
    /// `command[0]` is looked up); empty: the fixed [`SEARCH_PATH`]. Each is also in `exec`
    /// (granted read and execute, pinned like every grant).
    pub search_path: Vec<PathBuf>,
    /// The tool's private temp space (`temp`).
    pub temp: Temp,
    /// The carve-outs of the grants written in table form (`deny`, `read_only`, `unprotect`;
    /// see [`super::carve`]). The default protected set of a git work tree needs no entry here:
    /// it applies to every write root unless a grant lifts it.
    pub carve: Vec<super::carve::GrantCarve>,
    /// The paths above, opened without following symlinks when the registry loaded (empty until
    /// the tool is probed, and for a tool that is unavailable).
    pub pins: Arc<Pins>,
    /// The pins in force since a call re-pinned a grant root its identity owns (docs/pins.md);
    /// empty until then. Shared by the clones of one loaded tool, so a re-pin serves every later
    /// call of this generation; a reload starts afresh.
    pub repinned: Repinned,
}

/// The pins a tool's calls use after a re-pin ([`SandboxPolicy::repinned`]): one slot per loaded
/// tool, set under its lock. Never part of a tool's identity: two tools compare equal whatever
/// their slots hold.
#[derive(Debug, Clone, Default)]
pub struct Repinned(Arc<std::sync::Mutex<Option<Arc<Pins>>>>);

impl Repinned {
    /// The pins a re-pin put in force, if one did.
    pub fn get(&self) -> Option<Arc<Pins>> {
        self.lock().clone()
    }

    /// The slot, locked (a poisoned lock still holds whole pins: each is swapped in at once).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<Pins>>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl PartialEq for Repinned {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Repinned {}

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
    /// The one account other than root (and cordond's own user) that can change a program the
    /// tool may run, when there is one: it can write a `search_path` directory or a directory
    /// above it, or owns an entry of one (or what a symlink entry leads to), or owns the real
    /// file of `command[0]`. The tool may then only run as that account (whatever it puts there
    /// runs with no more than its own rights).
    pub search_path_writer: Option<SearchPathWriter>,
    /// `write` roots that were missing when the registry loaded, in a place where the re-pin
    /// rule lets the first call create them (docs/pins.md). Until a call has, the tool's pins
    /// are incomplete (the sandbox refuses to build from them) and every call re-pins first.
    pub pending_write: Vec<PendingRoot>,
    /// The trust bundle (the system's roots and cordond's CA), for a tool whose connections the
    /// proxy terminates ([`Tool::terminated`]), when cordond has one: granted read.
    pub trust_bundle: Option<Pin>,
}

/// A `write` root missing at load, created (as the identity the call runs as) by the first call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingRoot {
    pub path: PathBuf,
    /// Its place in the tool's `write` list, where its pin goes once it is made.
    pub index: usize,
}

/// An account that can change a program a tool may run, and the first path that lets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchPathWriter {
    pub uid: u32,
    /// The directory it can write, or the file it owns.
    pub path: PathBuf,
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
            .chain(self.trust_bundle.iter().map(|p| ("trust bundle", p)))
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
    /// Landlock's TCP rules; with `egress` (`hosts`), the tool also runs in a network namespace
    /// of its own whose only way out is cordond's egress proxy, and `connect`/`bind` apply inside
    /// that namespace (its own loopback).
    Tcp { connect: Vec<u16>, bind: Vec<u16>, egress: Option<crate::egress::Egress> },
}

impl Network {
    /// The tool's host rules (`network.hosts`), when it has any.
    pub fn egress(&self) -> Option<&crate::egress::Egress> {
        match self {
            Network::Tcp { egress, .. } => egress.as_ref(),
            Network::None => None,
        }
    }
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
    pub(super) fn or(self, base: Limits) -> Limits {
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

/// Whether an `allow` admits an agent caller: the one decision cordond makes when a call comes
/// in and `cordon policy replay` makes again from a record. Pure: the caller's user name and
/// groups, and a group name's gid, are looked up by whoever calls (NSS stays at the edges).
impl Allow {
    /// Whether deciding needs the caller's user name: `users` names one, or `groups` is not
    /// empty (an account's groups are found from its name).
    pub fn needs_user_name(&self) -> bool {
        !self.groups.is_empty() || self.users.iter().any(|p| matches!(p, Principal::Name(_)))
    }

    /// Whether `users` admits uid `uid` whose account is named `name` (`None`: no such account).
    pub fn admits_user(&self, uid: u32, name: Option<&str>) -> bool {
        self.users.iter().any(|p| match p {
            Principal::Id(id) => *id == uid,
            Principal::Name(n) => name == Some(n.as_str()),
        })
    }

    /// Whether `groups` admits a caller in the groups `groups` (gids); `gid_of` resolves a
    /// group name (`None`: no such group, which admits nobody).
    pub fn admits_groups(&self, groups: &[u32], gid_of: impl Fn(&str) -> Option<u32>) -> bool {
        self.groups.iter().any(|p| match p {
            Principal::Id(id) => groups.contains(id),
            Principal::Name(n) => gid_of(n).is_some_and(|g| groups.contains(&g)),
        })
    }

    /// [`Self::admits_user`] or [`Self::admits_groups`].
    pub fn admits(&self, uid: u32, name: Option<&str>, groups: &[u32], gid_of: impl Fn(&str) -> Option<u32>) -> bool {
        self.admits_user(uid, name) || self.admits_groups(groups, gid_of)
    }
}

/// Whom a tool runs as instead of the caller (cordond must be root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunAs {
    /// `run_as = "user"` or `"user:group"`: an account the admin names (its primary group unless
    /// a group is given; no supplementary groups).
    Account { user: Principal, group: Option<Principal> },
    /// `run_as = { owner_of = "working_dir" }`: the account that owns the tool's working
    /// directory when it is called (its primary group and its supplementary groups), never root;
    /// only that account itself or root may call the tool.
    OwnerOfWorkingDir,
}

/// Most supplementary groups a tool run as the owner of its working directory gets; an owner
/// in more groups is refused (never silently cut).
pub const MAX_OWNER_GROUPS: usize = 64;

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
    /// Why tools with `network.hosts` cannot be offered here: they need a network namespace of
    /// their own (`None`: cordond can make one).
    pub netns_unavailable: Option<String>,
    /// cordond's `$CREDENTIALS_DIRECTORY` (systemd credentials), where `credential` secret
    /// sources are read.
    pub credentials: Option<PathBuf>,
    /// The trust bundle cordond wrote for tools whose connections its proxy terminates
    /// (`Some(Err(why))`: it could not, and such tools are unavailable; `None`: not known, as in
    /// an offline check, which then assumes it).
    pub trust: Option<Result<PathBuf, String>>,
    /// Why carve-outs inside grants (and the protected git set) cannot be made real here: they
    /// need a mount view, and this daemon runs tools without one (`None`: they can).
    pub carve_unavailable: Option<String>,
}

impl Host {
    /// A host as an offline check assumes it before any sandbox probe: a root daemon gets
    /// invocation cgroups (so `unix_sockets` tools are offered) and read-only views.
    pub fn new(is_root: bool, landlock_abi: i32) -> Host {
        let unix_sockets_unavailable = (!is_root).then(|| NOT_IDENTIFIABLE.to_string());
        Host {
            is_root,
            landlock_abi,
            unix_sockets_unavailable,
            views_unavailable: None,
            netns_unavailable: None,
            credentials: std::env::var_os(crate::secret::CREDENTIALS_ENV).map(PathBuf::from),
            trust: None,
            carve_unavailable: None,
        }
    }

    /// The reason a tool with carve-outs is unavailable on a host whose daemon runs tools without
    /// a mount view (`why`).
    pub fn no_carve(why: &str) -> String {
        format!(
            "carve-outs inside grants (deny, read_only, and the protected .git set of a write root that is a git work \
             tree) are made real in the tool's mount view, and this host runs tools without one ({why}); run cordond \
             as root, or allow unprivileged user namespaces, or lift the protected entries with unprotect (and a \
             reason)"
        )
    }

    /// The reason a tool with `network.hosts` is unavailable on a host whose daemon is not root
    /// and cannot create user namespaces (`why`).
    pub fn no_netns(why: &str) -> String {
        format!(
            "network.hosts needs a network namespace of the tool's own, and cordond is not root and cannot create \
             user namespaces here ({why}); run cordond as root, or allow unprivileged user namespaces \
             (sysctl kernel.unprivileged_userns_clone=1, or an AppArmor profile that permits them)"
        )
    }
}

/// Why a daemon that is not root cannot offer `unix_sockets` tools.
pub const NOT_IDENTIFIABLE: &str = "unix_sockets needs invocation cgroups, which let cordond refuse its own tools on its \
     socket (cordond is not root and cannot create cgroups); run cordond as root";

/// Most steps a workflow may have.
pub const MAX_WORKFLOW_STEPS: usize = 32;

/// A validated workflow: named steps, each a call of a tool of the same load, run one after
/// another by cordond (see `[workflows.NAME]` in the reference). Every step tool exists, takes the
/// arguments the step gives it and needs no confirmation: checked when the registry loaded.
#[derive(Debug, Clone)]
pub struct Workflow {
    /// With the file's namespace, like a tool's.
    pub name: String,
    pub description: String,
    pub reason: Option<String>,
    /// The workflow's own arguments, validated like a tool's.
    pub params: Vec<Param>,
    /// `None`: no agent caller is admitted (admins may run it).
    pub allow: Option<Allow>,
    /// In order; at most [`MAX_WORKFLOW_STEPS`].
    pub steps: Vec<Step>,
    pub source: Source,
    /// JSON Schema of the arguments object, as compact JSON text.
    pub input_schema: JsonText,
}

impl Workflow {
    pub fn param(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }

    /// The step tools' names, in order.
    pub fn step_tools(&self) -> impl Iterator<Item = &str> {
        self.steps.iter().map(|s| s.tool.as_str())
    }
}

/// One `[[workflows.NAME.steps]]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The full tool name (with its file's namespace).
    pub tool: String,
    /// The step tool's arguments, in name order.
    pub args: BTreeMap<String, StepArg>,
    /// Run the next steps even when this one fails (default false: the workflow stops).
    pub continue_on_error: bool,
    /// Where the step's `tool` is written (1-based line and column).
    pub line: u32,
    pub column: u32,
    /// Where each argument's value is written.
    pub arg_at: BTreeMap<String, (u32, u32)>,
}

/// One argument of a step.
#[derive(Debug, Clone, PartialEq)]
pub enum StepArg {
    /// `"{{param}}"`: the workflow's argument, with its type (left out when the call gives none
    /// and the param has no default).
    Param(String),
    /// A TOML value, as JSON.
    Literal(serde_json::Value),
    /// `"{{steps.N.FIELD}}"`: top-level field `FIELD` of an earlier step's JSON result (step `N`,
    /// from 1), as the daemon validated it against that tool's output schema. The step tool
    /// validates the value like any argument; a step whose value is missing (step N failed, or
    /// its result has no such field) fails there.
    Output { step: usize, field: String },
}
