//! What the sandbox denied a tool, and which policy grant would allow it.
//!
//! The daemon learns denials from the kernel's audit records (landlock's `AUDIT_LANDLOCK_ACCESS`,
//! seccomp's `AUDIT_SECCOMP`; see `cordon-sandbox`'s `denials` module) and, where the kernel said
//! nothing, infers a note from the tool's own error message. Every surface (gRPC `Finished`,
//! `cordon run`, MCP, the audit record) shows the same [`Denial`]s with the same messages, made
//! here.

use std::path::Path;

use serde_json::{Value, json};

use crate::egress::Refusal;
use crate::policy::defaults::{DEFAULT_READ, DEFAULT_READ_EXEC, DEFAULT_WRITE_FILES};
use crate::policy::{Network, SandboxPolicy, Tool};

/// At most this many distinct denials are kept per invocation (the rest are only counted).
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
    /// or `EPERM`; `path` when the message names one). `not_seccomp`: seccomp's refusals are
    /// logged and none was, so an EPERM came from elsewhere (a capability, a file's owner).
    Inferred { errno: &'static str, path: Option<String>, not_seccomp: bool },
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
            Denied::Inferred { path, errno, .. } => path.clone().unwrap_or_else(|| (*errno).to_string()),
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
            "a system call of a foreign architecture (32-bit on a 64-bit host) kills the tool; no policy key allows it".into(),
        ),
        // The tool may make TCP sockets already: what seccomp refused was another kind (UDP for
        // DNS or QUIC, netlink, raw, ...), which no key allows; a hint to grant `network` would
        // send the admin the wrong way.
        Denied::Syscall { name: Some(name), .. } if name == "socket" && matches!(policy.network, Network::Tcp { .. }) => {
            Remedy::NotGrantable(
                "the tool may make TCP sockets; this one was of another family or type (UDP for DNS or QUIC, netlink, \
                 raw, ...), which cordon never allows (Unix sockets come with `unix_sockets`; with network.hosts, \
                 names are resolved by cordond's egress proxy)"
                    .into(),
            )
        }
        Denied::Syscall { name, .. } => match name.as_deref().and_then(syscall_key) {
            Some((key, how)) => Remedy::Grant { key, value: how.to_string() },
            None => Remedy::NotGrantable(
                "not grantable: it is outside cordon's seccomp allow-list (docs/seccomp.md lists what is allowed and why)"
                    .into(),
            ),
        },
        Denied::Inferred { errno: "EACCES", path: Some(path), .. } => {
            let p = Path::new(path);
            if writable(policy, p) {
                Remedy::NotSandbox(format!(
                    "{path} is inside the tool's `write` grants: the file's mode or owner refused it (see `run_as`)"
                ))
            } else if readable(policy, p) {
                Remedy::Grant { key: "write", value: path.clone() }
            } else {
                // Under no grant: reading is what every access needs first.
                Remedy::Grant { key: "read", value: path.clone() }
            }
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
            Refusal::SniMismatch { .. } | Refusal::HostMismatch { .. } | Refusal::Unverifiable(_) => {
                Remedy::NotGrantable(refusal.explain(host, *port))
            }
            Refusal::MaxConnections(_) => Remedy::Grant { key: "max_connections", value: String::new() },
            Refusal::ConnectionsPerCall(_) => Remedy::Grant { key: "max_connections_per_call", value: String::new() },
            Refusal::MaxBytes(_) => Remedy::Grant { key: "max_bytes", value: String::new() },
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
}

impl Explained {
    /// The audit record's and `--json`'s form.
    pub fn json(&self) -> Value {
        json!({
            "source": self.denial.denied.source(),
            "target": self.denial.denied.target(),
            "access": self.denial.denied.access(),
            "grant_key": self.remedy.key(),
            "count": self.denial.count,
            "message": self.message,
        })
    }
}

fn times(n: u32) -> String {
    if n > 1 { format!(" ({n} times)") } else { String::new() }
}

/// Explains each denial of a tool's run.
pub fn explain(tool: &Tool, denials: &[Denial]) -> Vec<Explained> {
    explain_for(&tool.sandbox, denials)
}

fn explain_for(policy: &SandboxPolicy, denials: &[Denial]) -> Vec<Explained> {
    denials
        .iter()
        .map(|d| {
            let remedy = remedy(&d.denied, policy);
            let n = times(d.count);
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
                    format!(
                        "unverified: the path is from the tool's own message and the kernel logged no denial; only if \
                         the tool should have {value:?} at all, `{key}` would allow it{or_write}"
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
                Denied::Inferred { errno, path, .. } => {
                    let on = path.as_deref().map(|p| format!(" on {p}")).unwrap_or_default();
                    let why = if *errno == "EROFS" {
                        "outside its `write` grants the tool sees a read-only filesystem"
                    } else {
                        "no kernel record of it"
                    };
                    format!("the tool reported {errno}{on} ({why}): {fix}")
                }
            };
            Explained { denial: d.clone(), remedy, message }
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

const EACCES_TEXT: &str = "Permission denied";
const EPERM_TEXT: &str = "Operation not permitted";
const EROFS_TEXT: &str = "Read-only file system";

/// Notes from the tool's stderr when the kernel logged nothing of the kind its message shows:
/// a line saying "Permission denied" (EACCES: landlock or a file mode), "Read-only file system"
/// (EROFS: outside the `write` grants in cordond's read-only view, which the kernel never
/// logs) or "Operation not permitted" (EPERM: seccomp or a capability), with the absolute path
/// the line names, if any. EACCES is left out when landlock's denials are logged (none was, so
/// none happened); for EPERM when seccomp's are, the note says it was not seccomp.
pub fn infer(stderr: &[u8], logged: Logged, have: &[Denial]) -> Vec<Denial> {
    let text = String::from_utf8_lossy(stderr);
    let mut out: Vec<Denial> = Vec::new();
    let mut push = |d: Denied| {
        if let Some(e) = out.iter_mut().find(|e| e.denied == d) {
            e.count += 1;
        } else if out.len() < 4 {
            out.push(Denial { denied: d, count: 1 });
        }
    };
    let kernel_fs = have.iter().any(|d| d.denied.source() == "landlock");
    let kernel_sys = have.iter().any(|d| d.denied.source() == "seccomp");
    for line in text.lines() {
        if line.contains(EACCES_TEXT) && !logged.landlock && !kernel_fs {
            push(Denied::Inferred { errno: "EACCES", path: path_in(line), not_seccomp: false });
        } else if line.contains(EROFS_TEXT) {
            push(Denied::Inferred { errno: "EROFS", path: path_in(line), not_seccomp: false });
        } else if line.contains(EPERM_TEXT) && !kernel_sys {
            push(Denied::Inferred { errno: "EPERM", path: None, not_seccomp: logged.seccomp });
        }
    }
    out
}

/// The first absolute path a message names: quoted ('...', "...", ‘...’) or a bare word
/// starting with `/` (a trailing `:` dropped).
fn path_in(line: &str) -> Option<String> {
    for (open, close) in [('\'', '\''), ('"', '"'), ('‘', '’')] {
        let mut rest = line;
        while let Some(i) = rest.find(open) {
            let after = &rest[i + open.len_utf8()..];
            let Some(j) = after.find(close) else { break };
            let inner = &after[..j];
            if inner.starts_with('/') && !inner.contains('\n') {
                return Some(inner.to_string());
            }
            rest = &after[j + close.len_utf8()..];
        }
    }
    // The last one before the message: "sh: 1: cannot create /etc/x: Permission denied".
    let at = [EACCES_TEXT, EROFS_TEXT].iter().find_map(|t| line.find(t));
    let before = at.map_or(line, |i| &line[..i]);
    before
        .split_whitespace()
        .map(|w| w.trim_end_matches([':', ',', ';']))
        .rfind(|w| w.starts_with('/') && w.len() > 1)
        .map(str::to_string)
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

    #[test]
    fn inference_only_where_the_kernel_was_silent() {
        let err = b"cat: /root/x: Permission denied\nmkdir: cannot create directory 'd': Operation not permitted\n";
        let got = infer(err, Logged::default(), &[]);
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[0].denied,
            Denied::Inferred { errno: "EACCES", path: Some("/root/x".into()), not_seccomp: false }
        );
        assert_eq!(got[1].denied, Denied::Inferred { errno: "EPERM", path: None, not_seccomp: false });
        let logged = Logged { landlock: true, seccomp: true };
        let got = infer(err, logged, &[]);
        assert_eq!(got.len(), 1, "landlock logs every denial: none logged, none happened");
        assert_eq!(got[0].denied, Denied::Inferred { errno: "EPERM", path: None, not_seccomp: true });
        let sys = Denial { denied: Denied::Syscall { nr: 83, name: Some("mkdir".into()), killed: false }, count: 1 };
        assert!(infer(b"x: Operation not permitted", logged, &[sys]).is_empty());
        assert!(infer(b"exit 1, nothing denied\n", Logged::default(), &[]).is_empty());
    }
}
