//! What the sandbox denied a tool, and which policy grant would allow it.
//!
//! The daemon learns denials from the kernel's audit records (landlock's `AUDIT_LANDLOCK_ACCESS`,
//! seccomp's `AUDIT_SECCOMP`; see `cordon-sandbox`'s `denials` module) and, where the kernel said
//! nothing, infers a note from the tool's own error message. Every surface (gRPC `Finished`,
//! `cordon run`, MCP, the audit record) shows the same [`Denial`]s with the same messages, made
//! here.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::egress::Refusal;
use crate::policy::defaults::{DEFAULT_READ, DEFAULT_READ_EXEC, DEFAULT_WRITE_FILES};
use crate::policy::{Network, SandboxPolicy, Tool};

/// At most this many distinct denials are kept per invocation (the first half and the latest).
pub const MAX_DENIALS: usize = 16;

/// One thing the sandbox refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Denied {
    /// Landlock refused a filesystem access. `access` are the kernel's blockers without the
    /// `fs.` prefix (`write_file`, `make_reg`, `read_file`, `execute`, ...); `path` is the object
    /// the kernel names (for a file being created, its directory).
    Fs { access: Vec<String>, path: String },
    /// Landlock refused a TCP `bind_tcp` or `connect_tcp` on a port.
    Net { access: String, port: u16 },
    /// Landlock's scoping refused an abstract Unix socket or a signal outside the sandbox.
    Scope { what: String },
    /// The seccomp filter refused a system call (answered EPERM) or killed the process (a
    /// foreign architecture).
    Syscall { nr: u32, name: Option<String>, killed: bool },
    /// No kernel record: inferred from the tool's error message (`errno` is `EACCES`, `EROFS`
    /// or `EPERM`; `path` when the message names one, made absolute against the tool's working
    /// directory or found on its search path, symlinks resolved where the tool's grants let
    /// cordond look). `not_seccomp`: seccomp's refusals are logged and none was, so an EPERM
    /// came from elsewhere (a capability, a file's owner). `seen` is what the message says.
    Inferred { errno: &'static str, path: Option<String>, not_seccomp: bool, seen: Box<Seen> },
    /// cordond's egress proxy refused (or, at `max_bytes`, cut) a connection to `host:port` (a
    /// tool with `network.hosts`). `host` is what the tool asked for: a valid name or address.
    Host { host: String, port: u16, refusal: Refusal },
}

/// A denial and how many times it happened in the invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub denied: Denied,
    pub count: u32,
}

/// Who decided: `landlock`, `seccomp` (both from kernel records), `proxy` (cordond's egress
/// proxy, which knows exactly what it refused) or `inferred`.
impl Denied {
    pub fn source(&self) -> &'static str {
        match self {
            Denied::Fs { .. } | Denied::Net { .. } | Denied::Scope { .. } => "landlock",
            Denied::Syscall { .. } => "seccomp",
            Denied::Inferred { .. } => "inferred",
            Denied::Host { .. } => "proxy",
        }
    }

    /// What was denied, in a word or a path: the path, `port 443`, the syscall's name.
    pub fn target(&self) -> String {
        match self {
            Denied::Fs { path, .. } => path.clone(),
            Denied::Net { port, .. } => format!("port {port}"),
            Denied::Scope { what } => what.clone(),
            Denied::Syscall { nr, name, .. } => name.clone().unwrap_or_else(|| format!("syscall {nr}")),
            Denied::Inferred { path: Some(path), .. } => path.clone(),
            Denied::Inferred { errno, seen, .. } => seen.via.clone().unwrap_or_else(|| (*errno).to_string()),
            Denied::Host { host, port, .. } if host.contains(':') => format!("[{host}]:{port}"),
            Denied::Host { host, port, .. } => format!("{host}:{port}"),
        }
    }

    /// The access rights refused (landlock's names; the syscall for seccomp).
    pub fn access(&self) -> Vec<String> {
        match self {
            Denied::Fs { access, .. } => access.clone(),
            Denied::Net { access, .. } => vec![access.clone()],
            Denied::Scope { what } => vec![what.clone()],
            Denied::Host { refusal, .. } => vec![refusal.kind().to_string()],
            Denied::Inferred { errno: "EACCES" | "EROFS", seen, .. } if seen.op != Op::Unknown => {
                vec![seen.op.word().to_string()]
            }
            Denied::Syscall { .. } | Denied::Inferred { .. } => Vec::new(),
        }
    }
}

/// The policy key that would allow a denial, or why none does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remedy {
    /// A grant key and the value to add, e.g. (`write`, `"/srv/out"`) or (`connect_tcp`, `443`).
    Grant { key: &'static str, value: String },
    /// Not something a policy can grant: why.
    NotGrantable(String),
    /// Inside the tool's grants: the file's mode or owner refused it, not the sandbox.
    NotSandbox(String),
    /// Unknown which key: the candidates, in a sentence.
    Unsure(String),
}

impl Remedy {
    /// The grant key, when one would allow it.
    pub fn key(&self) -> &str {
        match self {
            Remedy::Grant { key, .. } => key,
            _ => "",
        }
    }
}

/// The landlock filesystem blockers that the `exec` grant gives.
fn is_exec(access: &str) -> bool {
    access == "execute"
}

/// The blockers that the `read` grant gives (the rest need `write`).
fn is_read(access: &str) -> bool {
    matches!(access, "read_file" | "read_dir")
}

/// Whether `path` lies under one of `grants`.
fn under<'a>(path: &Path, grants: impl IntoIterator<Item = &'a Path>) -> bool {
    grants.into_iter().any(|g| path.starts_with(g))
}

fn readable(policy: &SandboxPolicy, path: &Path) -> bool {
    let defaults = DEFAULT_READ_EXEC.iter().chain(DEFAULT_READ).chain(DEFAULT_WRITE_FILES).map(Path::new);
    under(path, policy.read.iter().chain(&policy.write).chain(&policy.exec).map(|p| p.as_path()).chain(defaults))
}

fn writable(policy: &SandboxPolicy, path: &Path) -> bool {
    under(path, policy.write.iter().map(|p| p.as_path()))
}

fn executable(policy: &SandboxPolicy, path: &Path) -> bool {
    let defaults = DEFAULT_READ_EXEC.iter().map(Path::new);
    under(path, policy.exec.iter().chain(&policy.search_path).map(|p| p.as_path()).chain(defaults))
}

/// Whether a tool with `policy` could see `path` at all (under any of its grants or the
/// defaults): where cordond may look at a path a tool's message names.
pub fn visible(policy: &SandboxPolicy, path: &Path) -> bool {
    readable(policy, path) || executable(policy, path)
}

/// The key for an EACCES the tool reported on `path`, by what it tried and what is there.
fn eacces_remedy(policy: &SandboxPolicy, path: &str, seen: &Seen) -> Remedy {
    let p = Path::new(path);
    let grant = |key| Remedy::Grant { key, value: path.to_string() };
    let mode = |key: &str| {
        Remedy::NotSandbox(format!(
            "{path} is inside the tool's `{key}` grants: the file's mode or owner refused it (see `run_as`)"
        ))
    };
    match seen.op {
        Op::Exec if !executable(policy, p) => grant("exec"),
        Op::Exec if seen.file == Some(FileKind::Plain) => Remedy::NotSandbox(format!(
            "{path} is inside the tool's `exec` grants but its mode has no execute bit (chmod +x, as its owner)"
        )),
        Op::Exec => mode("exec"),
        Op::Write if writable(policy, p) => mode("write"),
        Op::Write => grant("write"),
        Op::Read if readable(policy, p) => mode("read"),
        // Under no grant: reading is what every access needs first.
        Op::Read => grant("read"),
        Op::Unknown if !readable(policy, p) => grant("read"),
        Op::Unknown if seen.file == Some(FileKind::Executable) && !executable(policy, p) => grant("exec"),
        Op::Unknown if !writable(policy, p) => grant("write"),
        Op::Unknown => mode("write"),
    }
}

/// System calls a policy key unlocks (the rest of seccomp's refusals are not grantable).
fn syscall_key(name: &str) -> Option<(&'static str, &'static str)> {
    match name {
        "socket" => Some((
            "network",
            "TCP sockets come with `network = { connect_tcp = [...] }` or `bind_tcp`, Unix sockets with `unix_sockets`; other families are never allowed",
        )),
        "listen" => Some(("bind_tcp", "listening comes with `network = { bind_tcp = [PORT] }` (or `unix_sockets`)")),
        _ => None,
    }
}

/// Which key would allow `denied` for a tool with `policy`.
pub fn remedy(denied: &Denied, policy: &SandboxPolicy) -> Remedy {
    match denied {
        Denied::Fs { access, path } => {
            let key = if access.iter().all(|a| is_exec(a)) {
                "exec"
            } else if access.iter().all(|a| is_read(a)) {
                "read"
            } else {
                "write"
            };
            Remedy::Grant { key, value: path.clone() }
        }
        Denied::Net { access, port } => {
            let key = if access == "bind_tcp" { "bind_tcp" } else { "connect_tcp" };
            Remedy::Grant { key, value: port.to_string() }
        }
        Denied::Scope { what } => Remedy::NotGrantable(format!(
            "landlock scopes every tool to its own sandbox ({what}); no policy key lifts it"
        )),
        Denied::Syscall { killed: true, .. } => Remedy::NotGrantable(
            "a system call of a foreign architecture (32-bit on a 64-bit host) kills the tool; no policy key allows it"
                .into(),
        ),
        // The tool may make TCP sockets already: what seccomp refused was another kind (UDP for
        // DNS or QUIC, netlink, raw, ...), which no key allows; a hint to grant `network` would
        // send the admin the wrong way.
        Denied::Syscall { name: Some(name), .. }
            if name == "socket" && matches!(policy.network, Network::Tcp { .. }) =>
        {
            Remedy::NotGrantable(
                "the tool may make TCP sockets; this one was of another family or type (UDP for DNS or QUIC, netlink, \
                 raw, ...), which cordon never allows (Unix sockets come with `unix_sockets`; with network.hosts, \
                 names are resolved by cordond's egress proxy)"
                    .into(),
            )
        }
        Denied::Syscall { name, .. } => match name.as_deref().and_then(syscall_key) {
            Some((key, how)) => Remedy::Grant { key, value: how.to_string() },
            None => Remedy::NotGrantable(format!(
                "not grantable: it is outside cordon's seccomp allow-list ({} lists what is allowed and why)",
                crate::docs::doc_ref("seccomp.md")
            )),
        },
        Denied::Inferred { errno: "EACCES", path: Some(path), seen, .. } => eacces_remedy(policy, path, seen),
        Denied::Inferred { errno: "EACCES", path: None, seen, .. } if seen.op == Op::Exec && seen.via.is_some() => {
            Remedy::Grant { key: "exec", value: seen.via.clone().unwrap_or_default() }
        }
        Denied::Inferred { errno: "EROFS", path: Some(path), .. } => {
            if writable(policy, Path::new(path)) {
                Remedy::NotSandbox(format!("{path} is inside the tool's `write` grants: its filesystem is read-only"))
            } else {
                Remedy::Grant { key: "write", value: path.clone() }
            }
        }
        Denied::Inferred { errno: "EROFS", path: None, .. } => Remedy::Unsure(
            "outside its `write` grants the filesystem is read-only to the tool (cordond's read-only view): \
             `write` grants a path"
                .into(),
        ),
        Denied::Inferred { errno: "EACCES", path: None, .. } => Remedy::Unsure(
            "EACCES is landlock (a path outside the tool's `read`/`write`/`exec` grants) or the file's mode".into(),
        ),
        Denied::Inferred { not_seccomp: true, .. } => Remedy::NotSandbox(
            "not seccomp (its refusals are logged, and none was): a capability the tool does not have (tools run \
             without any) or a file owned by another user (`run_as` = its owner)"
                .into(),
        ),
        Denied::Host { host, port, refusal } => match refusal {
            Refusal::NotListed => Remedy::Grant { key: "hosts", value: denied.target() },
            Refusal::Special { addr, .. } => Remedy::Grant {
                key: "hosts",
                value: crate::egress::HostRule { host: crate::egress::HostPattern::Addr(*addr), port: *port }
                    .to_string(),
            },
            Refusal::Unresolved(_) => Remedy::NotSandbox(refusal.explain(host, *port)),
            Refusal::SniMismatch { .. }
            | Refusal::HostMismatch { .. }
            | Refusal::Unverifiable(_)
            | Refusal::Exfiltration { .. }
            | Refusal::UpstreamUnverified(_)
            | Refusal::UpstreamCaUnusable(_)
            | Refusal::NoAuthority => Remedy::NotGrantable(refusal.explain(host, *port)),
            Refusal::MaxConnections(_) => Remedy::Grant { key: "max_connections", value: String::new() },
            Refusal::ConnectionsPerCall(_) => Remedy::Grant { key: "max_connections_per_call", value: String::new() },
            Refusal::MaxBytes(_) => Remedy::Grant { key: "max_bytes", value: String::new() },
            Refusal::Request(r) => match (r.key(), &r.why) {
                (Some(key), crate::egress::RequestWhy::Method { .. }) => Remedy::Grant { key, value: r.method.clone() },
                (Some(key), _) => Remedy::Grant { key, value: r.path.clone() },
                (None, _) => Remedy::NotGrantable(refusal.explain(host, *port)),
            },
        },
        Denied::Inferred { .. } => Remedy::Unsure(
            "EPERM is seccomp (a system call outside the allow-list, not grantable) or a capability the tool does not \
             have (tools run without any; a file owned by another user needs `run_as` = its owner)"
                .into(),
        ),
    }
}

/// A denial explained: what, which key, one line for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explained {
    pub denial: Denial,
    pub remedy: Remedy,
    pub message: String,
    /// The run failed, something else it was denied explains that, and nothing the tool said
    /// points at this one: a probe it went on from (a `socket()` try, an optional config file).
    pub incidental: bool,
}

impl Explained {
    /// The audit record's and `--json`'s form.
    pub fn json(&self) -> Value {
        let mut v = json!({
            "source": self.denial.denied.source(),
            "target": self.denial.denied.target(),
            "access": self.denial.denied.access(),
            "grant_key": self.remedy.key(),
            "count": self.denial.count,
            "incidental": self.incidental,
            "message": self.message,
        });
        if let Denied::Inferred { seen, .. } = &self.denial.denied
            && let Some(via) = &seen.via
            && let Some(o) = v.as_object_mut()
        {
            o.insert("via".into(), json!(via));
        }
        v
    }
}

fn times(n: u32) -> String {
    if n > 1 { format!(" ({n} times)") } else { String::new() }
}

/// Explains each denial of a tool's run, in the order given (nothing is ranked: for the
/// refusals of the egress proxy on a run that did not fail).
pub fn explain(tool: &Tool, denials: &[Denial]) -> Vec<Explained> {
    explain_for(&tool.sandbox, denials, &[])
}

/// The denials of a failed run, explained and ranked: the kernel's records and the proxy's
/// refusals (`have`), plus what is inferred from the tool's messages where the kernel logged
/// nothing; the first is the one that explains the failure (see [`rank`]).
pub fn explain_run(policy: &SandboxPolicy, have: &[Denial], run: &Run<'_>) -> Vec<Explained> {
    let mut all = have.to_vec();
    all.extend(infer(run, have));
    if !have.iter().any(|d| d.denied.source() == "landlock") {
        all.extend(cargo_home_unread(policy, run));
    }
    let stderr = String::from_utf8_lossy(run.stderr);
    let (order, incidental) = rank(&all, policy, &stderr);
    let ranked: Vec<Denial> = order.iter().map(|&i| all[i].clone()).collect();
    let flags: Vec<bool> = order.iter().map(|&i| incidental[i]).collect();
    explain_for(policy, &ranked, &flags)
}

/// Whether the tool's stderr points at `d`: its path (or, for a program it was refused, the
/// program's name as a shell reports it), its port or host, or for seccomp an EPERM it
/// reported. Inferred denials come from the tool's own lines.
fn mentioned(d: &Denied, stderr: &str, names: &[String]) -> bool {
    let base = |p: &str| Path::new(p).file_name().map(|f| f.to_string_lossy().into_owned());
    match d {
        Denied::Inferred { .. } => true,
        Denied::Fs { path, .. } => {
            (!path.is_empty() && stderr.contains(path.as_str()))
                || base(path).is_some_and(|b| names.iter().any(|n| base(n).as_deref() == Some(b.as_str())))
        }
        Denied::Net { port, .. } => word_in(stderr, &port.to_string()),
        Denied::Host { host, .. } => stderr.contains(host.as_str()),
        Denied::Syscall { killed: true, .. } => true,
        Denied::Syscall { name, .. } => {
            errno_of(stderr) == Some("EPERM")
                || stderr.lines().any(|l| errno_of(l) == Some("EPERM"))
                || name.as_deref().is_some_and(|n| n.len() > 3 && word_in(stderr, n))
        }
        Denied::Scope { .. } => false,
    }
}

/// How much a kind of denial tends to stop a tool: a program it could not run most, then a
/// write, a read, the network, a refused system call (usually a probe with a fallback).
fn weight(d: &Denied) -> u8 {
    match d {
        Denied::Fs { access, .. } if access.iter().any(|a| is_exec(a)) => 5,
        Denied::Fs { access, .. } if access.iter().all(|a| is_read(a)) => 3,
        Denied::Fs { .. } => 4,
        Denied::Inferred { seen, .. } => match seen.op {
            Op::Exec => 5,
            Op::Write => 4,
            Op::Read | Op::Unknown => 3,
        },
        Denied::Net { .. } | Denied::Host { .. } => 2,
        Denied::Syscall { .. } => 1,
        Denied::Scope { .. } => 0,
    }
}

/// The order of a failed run's denials, first the one that explains the failure, and which
/// are incidental. By, in turn: the tool's stderr points at it ([`mentioned`]); a key would
/// allow it or the file's mode explains it (so the line names an action); the kind
/// ([`weight`]: exec over write over read over network over a system call); the later first
/// (the last denial before the tool gave up). A denial nothing points at is incidental when
/// another one is pointed at.
pub fn rank(denials: &[Denial], policy: &SandboxPolicy, stderr: &str) -> (Vec<usize>, Vec<bool>) {
    let lines: Vec<&str> = stderr.lines().collect();
    let names: Vec<String> = (0..lines.len())
        .filter_map(|i| refusal_at(&lines, i))
        .filter_map(|(errno, _, word, _)| word.filter(|_| errno != "EPERM"))
        .collect();
    let pointed: Vec<bool> = denials.iter().map(|d| mentioned(&d.denied, stderr, &names)).collect();
    let actionable = |d: &Denial| matches!(remedy(&d.denied, policy), Remedy::Grant { .. } | Remedy::NotSandbox(_));
    let mut order: Vec<usize> = (0..denials.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse((pointed[i], actionable(&denials[i]), weight(&denials[i].denied), i)));
    let any = pointed.iter().any(|p| *p);
    let incidental = pointed.iter().map(|p| any && !p).collect();
    (order, incidental)
}

/// The deepest directory above both `a` and `b`.
fn common_dir(a: &Path, b: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for (x, y) in a.parent()?.components().zip(b.parent()?.components()) {
        if x != y {
            break;
        }
        out.push(x);
    }
    (out.components().count() > 1).then_some(out)
}

fn explain_for(policy: &SandboxPolicy, denials: &[Denial], incidental: &[bool]) -> Vec<Explained> {
    denials
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let incidental = incidental.get(i).copied().unwrap_or(false);
            let remedy = remedy(&d.denied, policy);
            let n = times(d.count);
            let n = if incidental { format!("{n} (incidental: the tool went on)") } else { n };
            let fix = match (&remedy, &d.denied) {
                // The host is the tool's own request: what would allow it, never that it should.
                (Remedy::Grant { .. }, Denied::Host { host, port, refusal }) => refusal.explain(host, *port),
                _ => String::new(),
            };
            let fix = match &remedy {
                _ if !fix.is_empty() => fix,
                // The path of an inferred denial is the tool's own words (its stderr), which the
                // tool controls: never offered as a grant to make, only as what would allow it.
                Remedy::Grant { key: key @ ("read" | "write" | "exec"), value } if d.denied.source() == "inferred" => {
                    let or_write = if *key == "read" { " (`write` if it must change it)" } else { "" };
                    // Landlock checks the file a link leads to: the directory holding both.
                    let both = match &d.denied {
                        Denied::Inferred { path: Some(p), seen, .. } => seen
                            .via
                            .as_deref()
                            .filter(|v| v.starts_with('/'))
                            .and_then(|v| common_dir(Path::new(p), Path::new(v)))
                            .filter(|c| c.components().count() > 2),
                        _ => None,
                    };
                    let unfound = matches!(&d.denied, Denied::Inferred { path: None, .. });
                    let above = match both {
                        _ if unfound => " on the directory that holds it (cordond did not find it on the tool's PATH \
                                         or in a node_modules/.bin; each `search_path` entry is granted `exec` too)"
                            .to_string(),
                        Some(c) => format!(
                            " on it or a directory above it, such as {} (landlock checks the file a link leads to)",
                            c.display()
                        ),
                        None => String::new(),
                    };
                    format!(
                        "unverified: the path is from the tool's own message and the kernel logged no denial; only if \
                         the tool should have {value:?} at all, `{key}`{above} would allow it{or_write}"
                    )
                }
                Remedy::Grant { key: key @ ("read" | "write" | "exec"), value } => {
                    format!("the policy key `{key}` allows it: {key} = [{value:?}] (or a directory above it)")
                }
                Remedy::Grant { key: key @ ("connect_tcp" | "bind_tcp"), value } => {
                    format!("the policy key `{key}` allows it: network = {{ {key} = [{value}] }}")
                }
                Remedy::Grant { key, value } => format!("the policy key `{key}` decides: {value}"),
                Remedy::NotGrantable(why) | Remedy::NotSandbox(why) | Remedy::Unsure(why) => why.clone(),
            };
            let message = match &d.denied {
                Denied::Fs { access, path } => {
                    format!("landlock denied {} on {path}{n}: {fix}", access.join(","))
                }
                Denied::Net { access, port } => format!("landlock denied {access} to port {port}{n}: {fix}"),
                Denied::Scope { what } => format!("landlock denied {what}{n}: {fix}"),
                Denied::Syscall { nr, name, killed } => {
                    let what = name.clone().unwrap_or_else(|| format!("system call number {nr}"));
                    let how = if *killed { "killed the tool at" } else { "denied (EPERM)" };
                    format!("seccomp {how} {what} (syscall {nr}){n}: {fix}")
                }
                Denied::Host { refusal: Refusal::MaxBytes(_), .. } => {
                    format!("the egress proxy cut or refused a connection to {}{n}: {fix}", d.denied.target())
                }
                Denied::Host { .. } => format!("the egress proxy refused {}{n}: {fix}", d.denied.target()),
                Denied::Inferred { errno, path: Some(path), seen, .. } if *errno != "EPERM" => {
                    let op = if *errno == "EROFS" { "write" } else { seen.op.word() };
                    let via = seen.via.as_deref().map(|v| format!(" (via {v})")).unwrap_or_default();
                    let why = if *errno == "EROFS" {
                        "; outside its `write` grants the tool sees a read-only filesystem"
                    } else {
                        "; no kernel record of it"
                    };
                    format!(
                        "inferred: {op} of {path}{via} refused ({errno}){n}, from the tool's message {:?}{why}: {fix}",
                        seen.line
                    )
                }
                Denied::Inferred { errno: "EACCES", seen, .. } if seen.op == Op::Exec && seen.via.is_some() => {
                    let name = seen.via.as_deref().unwrap_or_default();
                    format!(
                        "inferred: execute of {name} refused (EACCES){n}, from the tool's message {:?}; no kernel record \
                         of it: {fix}",
                        seen.line
                    )
                }
                Denied::Inferred { errno, seen, .. } => {
                    format!(
                        "inferred: the tool reported {errno}{n}, in its message {:?} (no kernel record of it): {fix}",
                        seen.line
                    )
                }
            };
            Explained { denial: d.clone(), remedy, message, incidental }
        })
        .collect()
}

/// What the kernel could have told about this run: which kinds of denial are logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Logged {
    /// Landlock denials are logged (ABI 7+, kernel audit enabled, and cordond reads the log).
    pub landlock: bool,
    /// Seccomp refusals are logged (cordond reads the log).
    pub seccomp: bool,
}

/// What the tool tried, by its own message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Op {
    /// Run a program (`sh: 1: tape: Permission denied`, `spawn x EACCES`, `could not execute`).
    Exec,
    /// Read or list (`cannot open`, `cannot access`, `scandir`).
    Read,
    /// Create, change or remove (`cannot create`, `cannot touch`, `mkdir`, `failed to write`).
    Write,
    /// Not said (`PermissionError: [Errno 13] Permission denied: 'x'`, node's `open`).
    #[default]
    Unknown,
}

impl Op {
    /// The word for it in messages and in `access`.
    pub fn word(self) -> &'static str {
        match self {
            Op::Exec => "execute",
            Op::Read => "read",
            Op::Write => "write",
            Op::Unknown => "access",
        }
    }
}

/// What cordond found at a path an inferred denial names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    Dir,
    /// A file whose mode has an execute bit.
    Executable,
    /// Any other file.
    Plain,
}

/// What an inferred denial rests on: the tool's message, and what cordond found where it points.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Seen {
    pub op: Op,
    /// The tool's line (its own words, at most [`LINE_MAX`] characters).
    pub line: String,
    /// The name or path as the tool wrote it, when the lookup (the search path, a symlink)
    /// led to another path.
    pub via: Option<String>,
    /// What is at the path; `None` when cordond did not look (outside the tool's grants) or
    /// found nothing.
    pub file: Option<FileKind>,
}

/// The most of a tool's line an inferred denial quotes.
pub const LINE_MAX: usize = 160;

/// A failed run, as inference and ranking see it.
pub struct Run<'a> {
    pub stderr: &'a [u8],
    /// The tool's stdout: read only for the few messages a tool writes there (rustdoc reports
    /// a doctest's failed link on stdout).
    pub stdout: &'a [u8],
    /// The tool's `CARGO_HOME` (from its environment, else `$HOME/.cargo`): cargo reports an
    /// unreadable registry index as a missing package, naming no path.
    pub cargo_home: Option<PathBuf>,
    /// The tool's working directory (relative paths in its messages are resolved against it).
    pub cwd: &'a Path,
    /// The tool's `PATH`, in order (a command name in a shell's message is looked up in each
    /// `node_modules/.bin` from `cwd` upwards, as npm runs scripts, then here).
    pub search: Vec<PathBuf>,
    pub logged: Logged,
    /// Looks at a path the way the tool would reach it: the real path (symlinks resolved) and
    /// what is there, or `None` (nothing there, or a path cordond does not look at for this
    /// tool). The daemon answers only inside the tool's grants.
    pub look: &'a dyn Fn(&Path) -> Option<(PathBuf, FileKind)>,
}

impl std::fmt::Debug for Run<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("cwd", &self.cwd)
            .field("search", &self.search)
            .field("logged", &self.logged)
            .finish()
    }
}

const EACCES_TEXT: &str = "Permission denied";

/// The errno a line reports: its text (`Permission denied`, any case, as node writes it) or
/// its name.
fn errno_of(line: &str) -> Option<&'static str> {
    let lower = line.to_ascii_lowercase();
    if lower.contains("permission denied") || word_in(line, "EACCES") {
        Some("EACCES")
    } else if lower.contains("read-only file system") || word_in(line, "EROFS") {
        Some("EROFS")
    } else if lower.contains("operation not permitted") || word_in(line, "EPERM") {
        Some("EPERM")
    } else {
        None
    }
}

/// `word` in `line` as a word of its own (not part of a longer name).
fn word_in(line: &str, word: &str) -> bool {
    line.match_indices(word).any(|(i, _)| {
        let before = line[..i].chars().next_back();
        let after = line[i + word.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Programs whose `PROG: [line N: ]NAME: Permission denied` means running NAME was refused.
const RUNNERS: &[&str] =
    &["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox", "env", "make", "xargs", "nice", "nohup", "exec"];

const WRITE_WORDS: &[&str] = &[
    "cannot create",
    "can't create",
    "cannot touch",
    "cannot remove",
    "cannot make",
    "cannot mkdir",
    "cannot move",
    "cannot overwrite",
    "cannot write",
    "cannot unlink",
    "cannot rename",
    "cannot lock",
    "for writing",
    "failed to create",
    "failed to write",
    "failed to remove",
    "failed to rename",
    "failed to lock",
    "failed to link",
    "failed to copy",
    "could not create",
    "could not write",
    "could not remove",
    "could not lock",
    "unable to create",
    "unable to write",
    "unable to remove",
    "mkdir",
    "unlink",
    "rmdir",
    "rename",
    "symlink",
    "utime",
    "chmod",
    "mkdtemp",
];
const EXEC_WORDS: &[&str] = &[
    "cannot execute",
    "can't execute",
    "cannot run",
    "failed to run",
    "failed to execute",
    "could not execute",
    "could not run",
    "unable to execute",
    "unable to run",
    "execvp",
    "execve",
    "fork/exec",
    "spawn",
];
/// (An open says nothing of read or write: `cannot open` is left `Unknown`, decided by the
/// grants.)
const READ_WORDS: &[&str] = &[
    "cannot read",
    "cannot access",
    "cannot stat",
    "failed to read",
    "could not read",
    "unable to read",
    "scandir",
    "opendir",
    "readdir",
    "lstat",
];

/// What a line says the tool tried, by its words (`Unknown` when it does not say).
fn op_in(line: &str) -> Op {
    let lower = line.to_ascii_lowercase();
    // A word of the message, not part of a name or path in it (`platformdirs` holds `rmdir`,
    // `/src/mkdir-test/x` holds `mkdir`): it starts the line or follows a space or punctuation
    // other than what names are made of.
    let starts_word = |at: usize| {
        lower[..at].chars().next_back().is_none_or(|c| !(c.is_alphanumeric() || matches!(c, '/' | '.' | '-' | '_')))
    };
    let has = |words: &[&str]| words.iter().any(|w| lower.match_indices(w).any(|(at, _)| starts_word(at)));
    if has(EXEC_WORDS) {
        Op::Exec
    } else if has(WRITE_WORDS) {
        Op::Write
    } else if has(READ_WORDS) {
        Op::Read
    } else {
        Op::Unknown
    }
}

/// `sh: 1: tape: Permission denied`, `bash: line 1: ./x: Permission denied`, `/usr/bin/env:
/// 'node': Permission denied`, `make: ./t: Permission denied`: a runner refused to run NAME.
fn runner_refused(line: &str) -> Option<String> {
    let parts: Vec<&str> = line.trim().split(": ").collect();
    let (first, mut rest) = parts.split_first()?;
    let prog = first.rsplit('/').next().unwrap_or(first);
    if !RUNNERS.contains(&prog) {
        return None;
    }
    if let Some((n, more)) = rest.split_first()
        && (n.parse::<u32>().is_ok() || n.strip_prefix("line ").is_some_and(|k| k.parse::<u32>().is_ok()))
    {
        rest = more;
    }
    match rest {
        [name, tail] | [name, _, tail]
            if tail.trim().eq_ignore_ascii_case(EACCES_TEXT)
                && !name.is_empty()
                && !name.contains(char::is_whitespace)
                && !name.starts_with("cannot") =>
        {
            Some(unquote(name).to_string())
        }
        _ => None,
    }
}

/// node's `Error: spawn NAME EACCES` / `spawnSync NAME EACCES`.
fn spawn_refused(line: &str) -> Option<String> {
    let i = line.find("spawn")?;
    let after = line[i..].split_once(' ')?.1;
    let (name, tail) = after.split_once(' ')?;
    tail.trim_start().starts_with("EACCES").then(|| unquote(name).to_string())
}

fn unquote(s: &str) -> &str {
    s.trim_matches(|c| matches!(c, '\'' | '"' | '`' | '‘' | '’'))
}

/// A path a line names: the last quoted one after its errno text (`Permission denied: 'x'`,
/// node's `permission denied, open 'x'`), else a quoted one that looks like a path
/// ('...', "...", ‘...’, `...`), else the last bare word starting with `/` before the errno
/// text (a trailing `:` dropped).
fn path_in(line: &str) -> Option<String> {
    let lower = line.to_ascii_lowercase();
    let marker = ["permission denied", "read-only file system", "operation not permitted"]
        .iter()
        .find_map(|t| lower.find(t).map(|i| i + t.len()));
    let quoted = |text: &str| -> Vec<String> {
        let mut found = Vec::new();
        for (open, close) in [('\'', '\''), ('"', '"'), ('‘', '’'), ('`', '`')] {
            let mut rest = text;
            while let Some(i) = rest.find(open) {
                let after = &rest[i + open.len_utf8()..];
                let Some(j) = after.find(close) else { break };
                let inner = &after[..j];
                if !inner.is_empty() && !inner.contains('\n') {
                    found.push(inner.to_string());
                }
                rest = &after[j + close.len_utf8()..];
            }
        }
        found
    };
    if let Some(at) = marker
        && let Some(last) = quoted(&line[at..]).pop()
        && !last.contains(char::is_whitespace)
    {
        return Some(last);
    }
    // Before the errno text: a quoted path (`cp: cannot create regular file 'target/t'`), one
    // with a `/` first, else a single quoted word (`mkdir: cannot create directory 'd'`).
    let head = marker.map_or(line, |at| &line[..at]);
    // cargo's `could not execute process `/p/target/debug/deps/t-0a1b filter``: the program is
    // the first word of the command line it quotes.
    let process = lower.contains("execute process");
    let words: Vec<String> = quoted(head)
        .into_iter()
        .filter_map(|q| match q.split_whitespace().next() {
            _ if !q.contains(char::is_whitespace) => Some(q),
            Some(first) if process && first.starts_with('/') => Some(first.to_string()),
            _ => None,
        })
        .collect();
    // An errno's name is never a path (node's error object: `code: 'EACCES',`).
    let words: Vec<String> = words.into_iter().filter(|q| !is_errno_name(q)).collect();
    if let Some(p) = words.iter().find(|q| q.contains('/')).or(words.first()) {
        return Some(p.clone());
    }
    // dash's `sh: 1: cannot create FILE: Read-only file system`: FILE bare (often relative),
    // before the shell's own path could be taken for it below.
    if let Some(i) = lower.find(": cannot create ") {
        let after = &line[i + ": cannot create ".len()..];
        if let Some((name, _)) = after.split_once(": ")
            && !name.is_empty()
            && !name.contains(char::is_whitespace)
        {
            return Some(unquote(name).to_string());
        }
    }
    let at = ["permission denied", "read-only file system"].iter().find_map(|t| lower.find(t));
    let before = at.map_or(line, |i| &line[..i]);
    before
        .split_whitespace()
        .map(|w| w.trim_end_matches([':', ',', ';']))
        .rfind(|w| w.starts_with('/') && w.len() > 1)
        .map(str::to_string)
}

/// `EACCES`, `EROFS`, `EPERM`, ...: an errno's name.
fn is_errno_name(word: &str) -> bool {
    word.len() >= 4 && word.starts_with('E') && word.bytes().all(|b| b.is_ascii_uppercase())
}

/// node's error object, printed over several lines (npm prefixes each with `npm error`):
/// `code: 'EACCES',` then `syscall: 'open',` and `path: '/p/package.json'` within a few lines.
/// The path and what the syscall says was tried.
fn node_error_object(lines: &[&str], i: usize) -> Option<(String, Op)> {
    if !lines[i].contains("code: '") {
        return None;
    }
    let mut op = Op::Unknown;
    for line in lines.iter().skip(i + 1).take(4) {
        if let Some(at) = line.find("syscall: '") {
            op = op_in(&line[at..]);
        }
        if let Some(at) = line.find("path: '") {
            let rest = &line[at + "path: '".len()..];
            let path = rest.split('\'').next()?;
            return (!path.is_empty()).then(|| (path.to_string(), op));
        }
    }
    None
}

/// `path` without `.` and with `..` taken lexically (a message's path, never opened as is).
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// One refusal a line reports: (errno, what was tried, the word it names: a path or a
/// command name), looking back a few lines for the path and the operation where the errno's
/// line has none (Rust's `error: failed to create directory `/x`` ... `Caused by:` ...
/// `Permission denied (os error 13)`).
fn refusal_at(lines: &[&str], i: usize) -> Option<(&'static str, Op, Option<String>, bool)> {
    let line = lines[i];
    let errno = errno_of(line)?;
    if errno == "EACCES"
        && let Some(name) = runner_refused(line).or_else(|| spawn_refused(line))
    {
        return Some((errno, Op::Exec, Some(name), true));
    }
    let mut op = op_in(line);
    let mut word = path_in(line);
    if word.is_none()
        && let Some((path, said)) = node_error_object(lines, i)
    {
        word = Some(path);
        op = said;
    }
    if word.is_none() {
        for back in lines[i.saturating_sub(4)..i].iter().rev() {
            let back = back.trim();
            if back.is_empty() || back.eq_ignore_ascii_case("caused by:") {
                continue;
            }
            if let Some(p) = path_in(back) {
                word = Some(p);
                if op == Op::Unknown {
                    op = op_in(back);
                }
                break;
            }
        }
    }
    Some((errno, op, word, false))
}

/// Where programs usually are in a project, for a name a script put on its own PATH.
const PROJECT_BINS: &[&str] =
    &["bin", "tools", "scripts", "script", ".venv/bin", "venv/bin", "target/debug", "target/release", "build"];

/// Where the tool found `name` (a command word with no `/`): each `node_modules/.bin` from the
/// working directory up (npm puts them first on a script's PATH), the search path, then the
/// working directory's usual program directories ([`PROJECT_BINS`]; a script may put one on
/// its PATH).
fn lookup(run: &Run<'_>, name: &str) -> Option<(PathBuf, PathBuf, FileKind)> {
    let npm = run.cwd.ancestors().map(|d| d.join("node_modules").join(".bin"));
    let project = PROJECT_BINS.iter().map(|d| run.cwd.join(d));
    npm.chain(run.search.iter().cloned()).chain(project).find_map(|dir| {
        let candidate = dir.join(name);
        (run.look)(&candidate).map(|(real, kind)| (candidate, real, kind))
    })
}

/// Notes from the tool's stderr where the kernel logged nothing of the kind its message shows:
/// a line saying "Permission denied" (EACCES: landlock or a file mode), "Read-only file system"
/// (EROFS: outside the `write` grants in cordond's read-only view, which the kernel never
/// logs) or "Operation not permitted" (EPERM: seccomp or a capability), with the path the line
/// names (made absolute against the working directory; a command name looked up as the tool
/// would), what the line says was tried, and what is at the path. EACCES is left out when
/// landlock's denials are logged (none was, so none happened); for EPERM when seccomp's are,
/// the note says it was not seccomp.
pub fn infer(run: &Run<'_>, have: &[Denial]) -> Vec<Denial> {
    let text = String::from_utf8_lossy(run.stderr);
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<Denial> = Vec::new();
    let kernel_fs = have.iter().any(|d| d.denied.source() == "landlock");
    let kernel_sys = have.iter().any(|d| d.denied.source() == "seccomp");
    for i in 0..lines.len() {
        let Some((errno, op, word, command)) = refusal_at(&lines, i) else { continue };
        match errno {
            "EACCES" if run.logged.landlock || kernel_fs => continue,
            "EPERM" if kernel_sys => continue,
            _ => {}
        }
        let line: String = lines[i].trim().chars().take(LINE_MAX).collect();
        let mut seen = Seen { op, line, via: None, file: None };
        let path = match (errno, word) {
            ("EPERM", _) | (_, None) => None,
            (_, Some(w)) if command && !w.contains('/') => match lookup(run, &w) {
                Some((candidate, real, kind)) => {
                    seen.via = Some(candidate.display().to_string());
                    seen.file = Some(kind);
                    Some(real.display().to_string())
                }
                None => {
                    seen.via = Some(w);
                    None
                }
            },
            (_, Some(w)) => {
                let p = normal(&run.cwd.join(&w));
                match (run.look)(&p) {
                    Some((real, kind)) => {
                        if real != p || w != p.display().to_string() {
                            seen.via = Some(w);
                        }
                        seen.file = Some(kind);
                        Some(real.display().to_string())
                    }
                    None => {
                        if w != p.display().to_string() {
                            seen.via = Some(w);
                        }
                        Some(p.display().to_string())
                    }
                }
            }
        };
        let not_seccomp = errno == "EPERM" && run.logged.seccomp;
        add(&mut out, Denied::Inferred { errno, path, not_seccomp, seen: Box::new(seen) });
    }
    if !(run.logged.landlock || kernel_fs) {
        let text = String::from_utf8_lossy(run.stdout);
        let lines: Vec<&str> = text.lines().collect();
        for i in 0..lines.len() {
            if let Some(denied) = linker_refused(run, &lines, i) {
                add(&mut out, denied);
            }
        }
    }
    out
}

/// Counts `denied` into `out` (the same errno, path and operation once), at most 4 notes.
fn add(out: &mut Vec<Denial>, denied: Denied) {
    let same = |e: &Denial| match (&e.denied, &denied) {
        (
            Denied::Inferred { errno: a, path: pa, seen: sa, .. },
            Denied::Inferred { errno: b, path: pb, seen: sb, .. },
        ) => a == b && pa == pb && sa.op == sb.op,
        _ => false,
    };
    if let Some(e) = out.iter_mut().find(|e| same(e)) {
        e.count += 1;
    } else if out.len() < 4 {
        out.push(Denial { denied, count: 1 });
    }
}

/// rustc's failed link, as rustdoc prints a doctest's on stdout: `= note: collect2: fatal
/// error: execvp: Permission denied` after the linker's command line, whose
/// `"-B<sysroot>/lib/rustlib/TRIPLE/bin/gcc-ld" "-fuse-ld=lld"` says what gcc ran: `ld.lld` in
/// that directory (the toolchain's wrapper of rust-lld). `<sysroot>` is the directory above
/// the `rustc` on the tool's PATH.
fn linker_refused(run: &Run<'_>, lines: &[&str], i: usize) -> Option<Denied> {
    let line = lines[i];
    if !(line.contains("collect2") && line.contains("execvp") && errno_of(line) == Some("EACCES")) {
        return None;
    }
    let command = lines[i.saturating_sub(4)..i].iter().rev().find(|l| l.contains("\"-fuse-ld=lld\""))?;
    let b = command.split('"').find(|w| w.starts_with("-B") && w.ends_with("/gcc-ld"))?;
    let dir = &b[2..];
    let written = format!("{dir}/ld.lld");
    let dir = match dir.strip_prefix("<sysroot>") {
        Some(rest) => {
            let (_, rustc, _) = lookup(run, "rustc")?;
            format!("{}{rest}", rustc.parent()?.parent()?.display())
        }
        None => dir.to_string(),
    };
    let p = normal(Path::new(&dir).join("ld.lld").as_path());
    if !p.is_absolute() {
        return None;
    }
    let line: String = line.trim().chars().take(LINE_MAX).collect();
    let mut seen = Seen { op: Op::Exec, line, via: Some(written), file: None };
    let path = match (run.look)(&p) {
        Some((real, kind)) => {
            seen.file = Some(kind);
            real
        }
        None => p,
    };
    Some(Denied::Inferred {
        errno: "EACCES",
        path: Some(path.display().to_string()),
        not_seccomp: false,
        seen: Box::new(seen),
    })
}

/// cargo's `error: no matching package named `X` found` / `location searched: crates.io
/// index` with the tool's `CARGO_HOME` under none of its grants: cargo could not read its
/// registry index there (it reports the index's refused files as a missing package, naming no
/// path), so `read` on `CARGO_HOME`. Not where landlock logs (its record names the path).
fn cargo_home_unread(policy: &SandboxPolicy, run: &Run<'_>) -> Option<Denial> {
    let home = run.cargo_home.as_ref().filter(|h| h.is_absolute())?;
    if run.logged.landlock || readable(policy, home) {
        return None;
    }
    let text = String::from_utf8_lossy(run.stderr);
    let lines: Vec<&str> = text.lines().collect();
    let at = (0..lines.len()).find(|&i| {
        lines[i].trim_start().starts_with("error: no matching package named `")
            && lines[i + 1..(i + 4).min(lines.len())]
                .iter()
                .any(|l| l.trim_start().starts_with("location searched:") && l.contains("index"))
    })?;
    let line: String = lines[at].trim().chars().take(LINE_MAX).collect();
    let seen = Seen { op: Op::Read, line, via: None, file: None };
    let path = Some(normal(home).display().to_string());
    Some(Denial {
        denied: Denied::Inferred { errno: "EACCES", path, not_seccomp: false, seen: Box::new(seen) },
        count: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_in_messages() {
        assert_eq!(path_in("touch: cannot touch '/etc/x': Permission denied").as_deref(), Some("/etc/x"));
        assert_eq!(path_in("/bin/sh: 1: cannot create /etc/x: Permission denied").as_deref(), Some("/etc/x"));
        assert_eq!(path_in("mkdir: cannot create directory ‘/proc/foo’: x").as_deref(), Some("/proc/foo"));
        assert_eq!(
            path_in("PermissionError: [Errno 13] Permission denied: '/root/secret'").as_deref(),
            Some("/root/secret")
        );
        assert_eq!(path_in("cat: /root/x: Permission denied").as_deref(), Some("/root/x"));
        assert_eq!(path_in("Permission denied"), None);
        assert_eq!(path_in("sh: /x/y: Permission denied, see /docs"), Some("/x/y".into()));
    }

    #[test]
    fn proxy_refusals_say_what_would_allow_them_never_that_it_should() {
        let host =
            |host: &str, port, refusal| Denial { denied: Denied::Host { host: host.into(), port, refusal }, count: 2 };
        let special = Refusal::Special { addr: "127.0.0.1".parse().unwrap(), class: "loopback" };
        let v6 = Refusal::Special { addr: "fd00::7".parse().unwrap(), class: "unique local" };
        let got = explain_for(
            &SandboxPolicy::default(),
            &[
                host("evil.example", 443, Refusal::NotListed),
                host("localhost", 8080, special),
                host("internal.example", 443, v6),
                host("2001:db8::1", 443, Refusal::NotListed),
                host("api.example.com", 443, Refusal::MaxBytes(1024)),
            ],
            &[],
        );
        assert_eq!(
            got[0].message,
            "the egress proxy refused evil.example:443 (2 times): evil.example:443 is not in the tool's network.hosts; \
             only if the tool should reach it at all, network = { hosts = [\"evil.example:443\"] } would allow it"
        );
        assert_eq!(got[0].remedy, Remedy::Grant { key: "hosts", value: "evil.example:443".into() });
        assert_eq!(
            (got[0].denial.denied.source(), got[0].denial.denied.access()),
            ("proxy", vec!["not-listed".into()])
        );
        assert_eq!(
            got[1].message,
            "the egress proxy refused localhost:8080 (2 times): localhost resolved to 127.0.0.1, a loopback address; \
             names reach special addresses only where network.hosts grants the address itself: only if the tool \
             should reach 127.0.0.1 at all, adding \"127.0.0.1:8080\" would allow it"
        );
        assert_eq!(got[1].remedy, Remedy::Grant { key: "hosts", value: "127.0.0.1:8080".into() });
        assert_eq!(got[2].remedy, Remedy::Grant { key: "hosts", value: "[fd00::7]:443".into() });
        assert_eq!(got[3].denial.denied.target(), "[2001:db8::1]:443");
        assert!(got[3].message.contains("hosts = [\"[2001:db8::1]:443\"]"), "{}", got[3].message);
        assert!(got[4].message.starts_with("the egress proxy cut or refused a connection to api.example.com:443"));
        assert_eq!(got[4].remedy.key(), "max_bytes");
    }

    #[test]
    fn request_rule_refusals_name_the_request_and_the_key_that_decides() {
        use crate::egress::RequestRules;
        let rules = RequestRules { methods: vec!["GET".into()], paths: vec!["/repos/ORG/".into()] };
        let refused = |method, target| {
            let refusal = Refusal::Request(rules.check(method, target).unwrap_err());
            Denial { denied: Denied::Host { host: "api.github.com".into(), port: 443, refusal }, count: 1 }
        };
        let got = explain_for(
            &SandboxPolicy::default(),
            &[
                refused("DELETE", "/repos/ORG/x"),
                refused("GET", "/orgs/ORG?x=1"),
                refused("GET", "/repos/ORG/%2e%2e/x"),
            ],
            &[],
        );
        assert_eq!(got[0].remedy, Remedy::Grant { key: "methods", value: "DELETE".into() });
        assert!(
            got[0].message.starts_with(
                "the egress proxy refused api.github.com:443: DELETE /repos/ORG/x to api.github.com:443 was refused: \
                 the method DELETE is not among"
            ),
            "{}",
            got[0].message
        );
        assert_eq!(got[0].denial.denied.access(), vec!["request-rule".to_string()]);
        assert_eq!(got[1].remedy, Remedy::Grant { key: "paths", value: "/orgs/ORG".into() });
        assert!(got[1].message.contains("adding \"/orgs/ORG\""), "{}", got[1].message);
        assert!(matches!(&got[2].remedy, Remedy::NotGrantable(why) if why.contains("percent-encoded dot (%2e)")));
    }

    #[test]
    fn a_refused_socket_of_a_tool_with_tcp_is_not_sent_to_the_network_key() {
        let socket = Denied::Syscall { nr: 41, name: Some("socket".into()), killed: false };
        let none = remedy(&socket, &SandboxPolicy::default());
        assert_eq!(none.key(), "network", "{none:?}");
        let tcp = SandboxPolicy {
            network: Network::Tcp { connect: vec![443], bind: Vec::new(), egress: None },
            ..SandboxPolicy::default()
        };
        match remedy(&socket, &tcp) {
            Remedy::NotGrantable(why) => assert!(why.contains("another family or type"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    /// A project at /p with node_modules/.bin/tape -> ../tape/bin/tape, a venv, a target dir.
    fn look(p: &Path) -> Option<(PathBuf, FileKind)> {
        let s = p.to_str()?;
        match s {
            "/p/node_modules/.bin/tape" | "/p/node_modules/tape/bin/tape" => {
                Some((PathBuf::from("/p/node_modules/tape/bin/tape"), FileKind::Executable))
            }
            "/p/.venv/bin/python" => Some((PathBuf::from("/usr/bin/python3.13"), FileKind::Executable)),
            "/p/x" | "/p/target/debug/t" => Some((p.to_path_buf(), FileKind::Executable)),
            "/p/notes.txt" => Some((p.to_path_buf(), FileKind::Plain)),
            "/p" | "/p/target" | "/p/target/debug" => Some((p.to_path_buf(), FileKind::Dir)),
            _ => None,
        }
    }

    fn run_of(stderr: &[u8]) -> Run<'_> {
        Run {
            stderr,
            stdout: b"",
            cargo_home: Some("/h/.cargo".into()),
            cwd: Path::new("/p"),
            search: vec!["/usr/local/bin".into(), "/usr/bin".into()],
            logged: Logged { landlock: false, seccomp: true },
            look: &look,
        }
    }

    fn policy() -> SandboxPolicy {
        SandboxPolicy { read: vec!["/p".into()], write: vec!["/p/.npm".into()], ..SandboxPolicy::default() }
    }

    #[test]
    fn inference_only_where_the_kernel_was_silent() {
        let err = b"cat: /root/x: Permission denied\nmkdir: cannot create directory 'd': Operation not permitted\n";
        let mut run = run_of(err);
        run.logged = Logged::default();
        let got = infer(&run, &[]);
        assert_eq!(got.len(), 2);
        let Denied::Inferred { errno: "EACCES", path: Some(p), seen, .. } = &got[0].denied else { panic!("{got:?}") };
        assert_eq!((p.as_str(), seen.op), ("/root/x", Op::Unknown));
        assert!(matches!(&got[1].denied, Denied::Inferred { errno: "EPERM", path: None, not_seccomp: false, .. }));
        run.logged = Logged { landlock: true, seccomp: true };
        let got = infer(&run, &[]);
        assert_eq!(got.len(), 1, "landlock logs every denial: none logged, none happened");
        assert!(matches!(&got[0].denied, Denied::Inferred { errno: "EPERM", not_seccomp: true, .. }));
        let sys = Denial { denied: Denied::Syscall { nr: 83, name: Some("mkdir".into()), killed: false }, count: 1 };
        assert!(infer(&run_of(b"x: Operation not permitted"), &[sys]).is_empty());
        assert!(infer(&run_of(b"exit 1, nothing denied\n"), &[]).is_empty());
    }

    /// (errno, op, path, via) of the single note inferred from `line`.
    fn one(line: &str) -> (&'static str, Op, Option<String>, Option<String>) {
        let got = infer(&run_of(line.as_bytes()), &[]);
        assert_eq!(got.len(), 1, "{line}: {got:?}");
        let Denied::Inferred { errno, path, seen, .. } = &got[0].denied else { panic!("{got:?}") };
        (errno, seen.op, path.clone(), seen.via.clone())
    }

    #[test]
    fn messages_name_what_was_tried_and_where() {
        let s = |x: &str| Some(x.to_string());
        // dash under npm: the name found in node_modules/.bin, the symlink resolved.
        assert_eq!(
            one("sh: 1: tape: Permission denied"),
            ("EACCES", Op::Exec, s("/p/node_modules/tape/bin/tape"), s("/p/node_modules/.bin/tape"))
        );
        assert_eq!(one("bash: ./x: Permission denied"), ("EACCES", Op::Exec, s("/p/x"), s("./x")));
        assert_eq!(one("bash: line 1: /p/x: Permission denied"), ("EACCES", Op::Exec, s("/p/x"), None));
        assert_eq!(one("/usr/bin/env: 'tape': Permission denied").1, Op::Exec);
        assert_eq!(one("make: ./target/debug/t: Permission denied").2, s("/p/target/debug/t"));
        assert_eq!(
            one("Error: spawn /p/.venv/bin/python EACCES"),
            ("EACCES", Op::Exec, s("/usr/bin/python3.13"), s("/p/.venv/bin/python"))
        );
        assert_eq!(
            one("PermissionError: [Errno 13] Permission denied: 'notes.txt'"),
            ("EACCES", Op::Unknown, s("/p/notes.txt"), s("notes.txt"))
        );
        assert_eq!(one("Error: EACCES: permission denied, mkdir '/p/out'"), ("EACCES", Op::Write, s("/p/out"), None));
        assert_eq!(one("sh: 1: cannot create /etc/x: Permission denied"), ("EACCES", Op::Write, s("/etc/x"), None));
        // What was tried is read from the message's words, never from a name in it
        // (`platformdirs` holds `rmdir`).
        assert_eq!(
            one("PermissionError: [Errno 13] Permission denied: '/src/platformdirs/.venv/pyvenv.cfg'"),
            ("EACCES", Op::Unknown, s("/src/platformdirs/.venv/pyvenv.cfg"), None)
        );
        // make's recipe under dash, a relative file (bzip2's `make test`): the file, not /bin/sh.
        assert_eq!(
            one("/bin/sh: 1: cannot create sample1.rb2: Read-only file system"),
            ("EROFS", Op::Write, s("/p/sample1.rb2"), s("sample1.rb2"))
        );
        // npm's error object: the path from its `path:` line, what was tried from `syscall:`;
        // the errno's name is never taken for a path.
        let npm = b"npm error code EACCES\nnpm error syscall open\nnpm error   code: 'EACCES',\n\
                    npm error   syscall: 'open',\nnpm error   path: '/p/package.json'\n";
        let got = infer(&run_of(npm), &[]);
        let paths: Vec<Option<String>> = got
            .iter()
            .map(|d| match &d.denied {
                Denied::Inferred { path, .. } => path.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(paths.contains(&s("/p/package.json")), "{got:?}");
        assert!(!paths.iter().flatten().any(|p| p.ends_with("EACCES")), "{got:?}");
        // Rust: the path and what was tried on an earlier line.
        assert_eq!(
            one(
                "error: failed to create directory `/p/target/debug`\n\nCaused by:\n  Read-only file system (os error 30)"
            ),
            ("EROFS", Op::Write, s("/p/target/debug"), None)
        );
        assert_eq!(
            one(
                "error: could not execute process `/p/target/debug/t` (never executed)\n\nCaused by:\n  Permission denied (os error 13)"
            ),
            ("EACCES", Op::Exec, s("/p/target/debug/t"), None)
        );
        // Not found under anything cordond looks at: the name, no path.
        assert_eq!(one("sh: 1: mocha: Permission denied"), ("EACCES", Op::Exec, None, s("mocha")));
        let got = explain_run(&policy(), &[], &run_of(b"sh: 1: mocha: Permission denied"));
        assert_eq!((got[0].remedy.key(), got[0].denial.denied.target().as_str()), ("exec", "mocha"));
        assert!(got[0].message.starts_with("inferred: execute of mocha refused (EACCES), from"), "{}", got[0].message);
        assert!(got[0].message.contains("`exec` on the directory that holds it"), "{}", got[0].message);
        assert_eq!(one("cat: /root/x: Permission denied").1, Op::Unknown);
        // cargo's lock file: an open for writing, said as "failed to open".
        assert_eq!(
            one("error: failed to open: /p/target/debug/.cargo-lock\n\nCaused by:\n  Permission denied (os error 13)"),
            ("EACCES", Op::Unknown, s("/p/target/debug/.cargo-lock"), None)
        );
        // Go's os/exec.
        assert_eq!(one("fork/exec /p/x: permission denied"), ("EACCES", Op::Exec, s("/p/x"), None));
        assert_eq!(
            one("cp: cannot create regular file 'target/debug/t': Read-only file system"),
            ("EROFS", Op::Write, s("/p/target/debug/t"), s("target/debug/t"))
        );
    }

    #[test]
    fn the_key_follows_what_was_tried_and_the_grants() {
        let key = |line: &str, p: SandboxPolicy| {
            let got = infer(&run_of(line.as_bytes()), &[]);
            remedy(&got[0].denied, &p).key().to_string()
        };
        let exec_granted = SandboxPolicy { exec: vec!["/p/node_modules".into()], ..policy() };
        assert_eq!(key("sh: 1: tape: Permission denied", policy()), "exec");
        assert!(matches!(
            remedy(&infer(&run_of(b"sh: 1: tape: Permission denied"), &[])[0].denied, &exec_granted),
            Remedy::NotSandbox(_)
        ));
        assert_eq!(key("sh: 1: cannot create /p/out: Permission denied", policy()), "write");
        assert_eq!(key("cat: /q/x: Permission denied", policy()), "read");
        assert_eq!(key("error: failed to open: /p/target/.cargo-lock: Permission denied", policy()), "write");
        // Said nothing of what it tried: an executable file, readable, not executable: exec.
        assert_eq!(key("PermissionError: [Errno 13] Permission denied: '/p/x'", policy()), "exec");
        assert_eq!(key("PermissionError: [Errno 13] Permission denied: '/p/notes.txt'", policy()), "write");
        let venv = SandboxPolicy { read: vec!["/p".into()], ..SandboxPolicy::default() };
        // The venv's python is a symlink to /usr/bin (exec by default): not the sandbox.
        assert!(matches!(
            remedy(&infer(&run_of(b"Error: spawn /p/.venv/bin/python EACCES"), &[])[0].denied, &venv),
            Remedy::NotSandbox(_)
        ));
    }

    #[test]
    fn the_first_denial_explains_the_failure_and_probes_are_incidental() {
        let socket =
            Denial { denied: Denied::Syscall { nr: 41, name: Some("socket".into()), killed: false }, count: 3 };
        let npmrc =
            Denial { denied: Denied::Fs { access: vec!["read_file".into()], path: "/root/.npmrc".into() }, count: 1 };
        let stderr = b"\n> p@1.0.0 test\n> tape test.js\n\nsh: 1: tape: Permission denied\n";
        // Landlock's denials are not logged here (audit disabled): the exec is inferred.
        let got = explain_run(&policy(), std::slice::from_ref(&socket), &run_of(stderr));
        assert_eq!(got.len(), 2, "{got:#?}");
        assert_eq!(got[0].remedy.key(), "exec", "{got:#?}");
        assert_eq!(got[0].denial.denied.target(), "/p/node_modules/tape/bin/tape");
        assert!(!got[0].incidental);
        assert!(
            got[0].message.starts_with(
                "inferred: execute of /p/node_modules/tape/bin/tape (via /p/node_modules/.bin/tape) refused (EACCES), \
                 from the tool's message \"sh: 1: tape: Permission denied\"; no kernel record of it: unverified"
            ),
            "{}",
            got[0].message
        );
        assert!(
            got[0].message.ends_with(
                "`exec` on it or a directory above it, such as /p/node_modules (landlock checks the file a link leads \
                 to) would allow it"
            ),
            "{}",
            got[0].message
        );
        assert!(got[1..].iter().all(|e| e.incidental && e.message.contains("(incidental: the tool went on)")));
        assert_eq!(got[0].json()["via"], "/p/node_modules/.bin/tape");
        assert_eq!(got[0].json()["access"], json!(["execute"]));
        // With the kernel's record of the exec (audit enabled): that record first, by name.
        let exec = Denial {
            denied: Denied::Fs { access: vec!["execute".into()], path: "/p/node_modules/tape/bin/tape".into() },
            count: 1,
        };
        let mut run = run_of(stderr);
        run.logged.landlock = true;
        let got = explain_run(&policy(), &[npmrc.clone(), exec.clone(), socket.clone()], &run);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].denial, exec);
        assert!(got[0].message.contains("exec = [\"/p/node_modules/tape/bin/tape\"]"), "{}", got[0].message);
        assert!(got[1].incidental && got[2].incidental);
        // A seccomp refusal the tool reported is what explains it.
        let got = explain_run(&policy(), &[npmrc, socket], &run_of(b"socket: Operation not permitted\n"));
        assert_eq!(got[0].denial.denied.target(), "socket");
        assert!(!got[0].incidental && got[1].incidental);
        // Nothing the tool said points anywhere: exec over read over a system call, none marked.
        let got = explain_run(
            &policy(),
            &[
                Denial { denied: Denied::Syscall { nr: 41, name: Some("socket".into()), killed: false }, count: 1 },
                Denial { denied: Denied::Fs { access: vec!["read_file".into()], path: "/q".into() }, count: 1 },
                exec,
            ],
            &run_of(b"it failed\n"),
        );
        assert_eq!(got.iter().map(|e| e.remedy.key()).collect::<Vec<_>>(), ["exec", "read", "network"]);
        assert!(got.iter().all(|e| !e.incidental));
    }

    /// The three Rust toolchain failures of the corpus (cargo from a toolchain directory,
    /// `CARGO_NET_OFFLINE`, kernel audit off), by their real messages.
    #[test]
    fn cargo_and_rustdoc_refusals_name_the_path_and_the_key() {
        let s = |x: &str| Some(x.to_string());
        // No `exec` on target/: cargo quotes the test binary with its arguments (`cargo test -- either`).
        assert_eq!(
            one("     Running unittests src/lib.rs (target/debug/deps/either-d46adb0f13b1e37d)\n\
                 error: test failed, to rerun pass `--lib`\n\nCaused by:\n  could not execute process \
                 `/p/target/debug/t either` (never executed)\n\nCaused by:\n  Permission denied (os error 13)"),
            ("EACCES", Op::Exec, s("/p/target/debug/t"), None)
        );
        // Only a program's path is taken from a quoted command line, and only cargo's.
        assert_eq!(one("error: `/p/a b` Permission denied").2, None);

        // No `exec` on the toolchain: a doctest's link (rustdoc prints it on stdout) cannot run
        // the toolchain's ld.lld, which rustc names under `<sysroot>`.
        let stdout = "---- src/lib.rs - either (line 44) stdout ----\n\
            error: linking with `cc` failed: exit status: 1\n  |\n  = note:  \"cc\" \"-m64\" \"/tmp/t/symbols.o\" \
            \"-B<sysroot>/lib/rustlib/x86_64-unknown-linux-gnu/bin/gcc-ld\" \"-fuse-ld=lld\" \"-Wl,--eh-frame-hdr\" \
            \"-o\" \"/tmp/t/rust_out\" \"-nodefaultlibs\"\n  = note: some arguments are omitted. use `--verbose` to \
            show all linker arguments\n  = note: collect2: fatal error: execvp: Permission denied\n          \
            compilation terminated.\n";
        let look = |p: &Path| -> Option<(PathBuf, FileKind)> {
            match p.to_str()? {
                "/r/bin/rustc" | "/r/lib/rustlib/x86_64-unknown-linux-gnu/bin/gcc-ld/ld.lld" => {
                    Some((p.to_path_buf(), FileKind::Executable))
                }
                _ => None,
            }
        };
        let stderr = b"   Doc-tests either\nerror: doctest failed, to rerun pass `--doc`\n";
        let mut run = run_of(stderr);
        run.stdout = stdout.as_bytes();
        run.search = vec!["/r/bin".into(), "/usr/bin".into()];
        run.look = &look;
        let toolchain = SandboxPolicy {
            read: vec!["/p".into(), "/r".into()],
            search_path: vec!["/r/bin".into()],
            ..SandboxPolicy::default()
        };
        let got = explain_run(&toolchain, &[], &run);
        assert_eq!(got.len(), 1, "{got:?}");
        let ld = "/r/lib/rustlib/x86_64-unknown-linux-gnu/bin/gcc-ld/ld.lld";
        assert_eq!((got[0].remedy.key(), got[0].denial.denied.target().as_str()), ("exec", ld));
        assert!(
            got[0].message.starts_with(&format!(
                "inferred: execute of {ld} (via <sysroot>/lib/rustlib/x86_64-unknown-linux-gnu/bin/gcc-ld/ld.lld) \
                 refused (EACCES), from the tool's message \"= note: collect2: fatal error: execvp: Permission denied\""
            )),
            "{}",
            got[0].message
        );
        // With `exec` on the toolchain, the file's mode; with landlock's log on, nothing inferred.
        let granted = SandboxPolicy { exec: vec!["/r".into()], ..toolchain.clone() };
        assert!(matches!(explain_run(&granted, &[], &run)[0].remedy, Remedy::NotSandbox(_)));
        run.logged.landlock = true;
        assert!(explain_run(&toolchain, &[], &run).is_empty());
        // The same line on stdout without the linker's command line: nothing (a test's own output).
        run.logged.landlock = false;
        run.stdout = b"collect2: fatal error: execvp: Permission denied\n";
        assert!(explain_run(&toolchain, &[], &run).is_empty());

        // No `read` on CARGO_HOME: cargo reports its unreadable index as a missing package.
        let stderr = b"error: no matching package named `serde_json` found\nlocation searched: crates.io index\n\
            required by package `either v1.13.0 (/p)`\nAs a reminder, you're using offline mode (--offline) which can \
            sometimes cause surprising resolution failures, if this error is too confusing you may wish to retry \
            without `--offline`.\n";
        let got = explain_run(&policy(), &[], &run_of(stderr));
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!((got[0].remedy.key(), got[0].denial.denied.target().as_str()), ("read", "/h/.cargo"));
        assert!(
            got[0].message.starts_with(
                "inferred: read of /h/.cargo refused (EACCES), from the tool's message \"error: no matching package \
                 named `serde_json` found\""
            ),
            "{}",
            got[0].message
        );
        // CARGO_HOME granted: the package is missing indeed; unknown CARGO_HOME or landlock logging: nothing.
        let home = SandboxPolicy { read: vec!["/p".into(), "/h/.cargo".into()], ..SandboxPolicy::default() };
        assert!(explain_run(&home, &[], &run_of(stderr)).is_empty());
        let mut run = run_of(stderr);
        run.cargo_home = None;
        assert!(explain_run(&policy(), &[], &run).is_empty());
        run.cargo_home = Some("/h/.cargo".into());
        run.logged.landlock = true;
        assert!(explain_run(&policy(), &[], &run).is_empty());
        // Without cargo's "location searched: ... index" line: not this.
        assert!(explain_run(&policy(), &[], &run_of(b"error: no matching package named `x` found\n")).is_empty());
    }
}
