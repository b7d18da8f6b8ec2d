//! The grant chooser: each distinct denial of the evidence to the one grant that allows exactly
//! it, or the reason none is suggested. Pure: the policy in force is given, nothing is read.
//!
//! The rules (docs/suggest.md): a landlock `read_file`/`read_dir` on P is `read` of P,
//! `execute` is `exec` of P, a write right is `write` of P (landlock names the directory for a
//! `make_*`/`remove_*`, the file for `write_file`/`truncate`); `--broader` takes P's parent
//! directory instead. `connect_tcp`/`bind_tcp` on a port is that port in `network`; the proxy's
//! `not-listed` host:port is a `network.hosts` entry; seccomp's `socket` (with `network` as its
//! key) is `network = { connect_tcp = [] }` (TCP sockets, no port yet). Everything else, and a
//! path no suggestion may name (not absolute and normal, control characters, a system or
//! secret file, cordon's own files), is "not suggested" with the reason.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use cordon_core::policy::{Network, SandboxPolicy};

use super::evidence::Denial;

/// One grant a suggestion adds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Grant {
    Read(PathBuf),
    Write(PathBuf),
    Exec(PathBuf),
    ConnectTcp(u16),
    BindTcp(u16),
    /// A `network.hosts` entry, `host:port`.
    Host(String),
    /// `network = { connect_tcp = [] }`: TCP sockets may be made (seccomp's `socket`), no port.
    TcpSockets,
}

impl Grant {
    /// The policy key, as the reference names it.
    pub(crate) fn key(&self) -> &'static str {
        match self {
            Grant::Read(_) => "read",
            Grant::Write(_) => "write",
            Grant::Exec(_) => "exec",
            Grant::ConnectTcp(_) | Grant::TcpSockets => "connect_tcp",
            Grant::BindTcp(_) => "bind_tcp",
            Grant::Host(_) => "hosts",
        }
    }

    /// The value added, as written in the policy (`"/p"`, `443`, `"host:443"`, `[]`).
    pub(crate) fn value(&self) -> String {
        match self {
            Grant::Read(p) | Grant::Write(p) | Grant::Exec(p) => p.display().to_string(),
            Grant::ConnectTcp(n) | Grant::BindTcp(n) => n.to_string(),
            Grant::Host(h) => h.clone(),
            Grant::TcpSockets => "[]".to_string(),
        }
    }

    /// `read = ["/p"]`, `network.connect_tcp = [443]`: the grant as a reader would write it.
    pub(crate) fn shown(&self) -> String {
        match self {
            Grant::Read(_) | Grant::Write(_) | Grant::Exec(_) => format!("{} += {:?}", self.key(), self.value()),
            Grant::ConnectTcp(n) => format!("network.connect_tcp += {n}"),
            Grant::BindTcp(n) => format!("network.bind_tcp += {n}"),
            Grant::Host(h) => format!("network.hosts += {h:?}"),
            Grant::TcpSockets => "network.connect_tcp = [] (TCP sockets, no port)".to_string(),
        }
    }

    fn path(&self) -> Option<&Path> {
        match self {
            Grant::Read(p) | Grant::Write(p) | Grant::Exec(p) => Some(p),
            _ => None,
        }
    }
}

/// A grant to add and the denials (indices into the evidence) it allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Suggestion {
    pub(crate) grant: Grant,
    pub(crate) denials: Vec<usize>,
    /// From the tool's own words only (`inferred`): no kernel record of it.
    pub(crate) unverified: bool,
}

/// A denial nothing is suggested for, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotSuggested {
    pub(crate) denial: usize,
    pub(crate) why: String,
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Options {
    /// The parent directory of a denied path instead of the path itself.
    pub(crate) broader: bool,
    /// Inferred denials too (unverified: the tool's own stderr).
    pub(crate) include_inferred: bool,
    /// Incidental denials too (probes the tool went on from).
    pub(crate) include_incidental: bool,
}

/// Files and trees no suggestion names, whatever the key: secrets, cordon's own policies, state
/// and audit log, the kernel's trees.
const NEVER: &[&str] = &[
    "/proc",
    "/sys",
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/cordon",
    "/var/lib/cordon",
    "/run/cordon",
    "/root",
    "/boot",
    "/dev/mem",
    "/dev/kmem",
    "/dev/port",
];

/// Trees no `write` or `exec` suggestion names: what every program and account relies on.
/// (`exec` from them is the default; a refusal there is a file's mode, not a grant.)
const SYSTEM: &[&str] = &[
    "/etc",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/dev",
    "/var/lib",
    "/var/log",
    "/var/spool",
    "/run",
];

/// Why `path` may not be suggested for `key`, if it may not.
pub(crate) fn refuse_path(key: &str, path: &str, protected: &[PathBuf]) -> Option<String> {
    if path.chars().any(char::is_control) {
        return Some("the path has control characters".into());
    }
    let p = Path::new(path);
    if !p.is_absolute() {
        return Some("the path is not absolute".into());
    }
    let normal: PathBuf = p.components().collect();
    let plain = p.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !plain || normal.as_os_str() != p.as_os_str() {
        return Some("the path is not normalised (`.`, `..`, `//` or a trailing `/`)".into());
    }
    if p == Path::new("/") {
        return Some("a grant of `/` is everything".into());
    }
    if let Some(n) = NEVER.iter().find(|n| p.starts_with(n)) {
        return Some(format!(
            "{n} holds the system's secrets, cordon's own files or the kernel's; grant it by hand if you must"
        ));
    }
    if let Some(own) = protected.iter().find(|d| p.starts_with(d) || d.starts_with(p)) {
        return Some(format!(
            "it would reach {} (cordon's policies or audit log); grant it by hand if you must",
            own.display()
        ));
    }
    if key != "read"
        && let Some(s) = SYSTEM.iter().find(|s| p.starts_with(s))
    {
        return Some(format!(
            "{s} is a system directory: cordon never suggests `{key}` in it; grant it by hand if you mean it"
        ));
    }
    None
}

/// The chosen grant for one denial, or why there is none.
fn grant_for(d: &Denial, opts: Options, exists: &dyn Fn(&Path) -> bool) -> Result<Grant, String> {
    let path_grant = |key: &str| -> Result<Grant, String> {
        let mut path = PathBuf::from(&d.target);
        // A file to be written that is not there is made in its directory (landlock's
        // `make_reg` is the directory's right): the directory is the grant.
        let create = key == "write" && !exists(&path);
        if (opts.broader || create)
            && let Some(parent) = path.parent()
            && parent != Path::new("/")
        {
            path = parent.to_path_buf();
        }
        Ok(match key {
            "read" => Grant::Read(path),
            "write" => Grant::Write(path),
            _ => Grant::Exec(path),
        })
    };
    match (d.source.as_str(), d.grant_key.as_str()) {
        (_, "") => Err(format!("no policy key allows it: {}", clip_reason(&d.message))),
        ("inferred", _) if !opts.include_inferred => Err(
            "inferred from the tool's own stderr (no kernel record of it: unverified); --include-inferred suggests it"
                .into(),
        ),
        (_, _) if d.incidental && !opts.include_incidental => {
            Err("incidental: another denial explains the failure and the tool went on after this one (a probe); \
             --include-incidental suggests it"
                .into())
        }
        ("landlock" | "inferred", key @ ("read" | "write" | "exec")) => path_grant(key),
        ("landlock", key @ ("connect_tcp" | "bind_tcp")) => {
            let port = d.target.strip_prefix("port ").and_then(|n| n.parse::<u16>().ok()).filter(|p| *p > 0);
            match (port, key) {
                (Some(p), "connect_tcp") => Ok(Grant::ConnectTcp(p)),
                (Some(p), _) => Ok(Grant::BindTcp(p)),
                (None, _) => Err(format!("the record names no port ({:?})", clip_reason(&d.target))),
            }
        }
        ("proxy", "hosts") if d.access.first().map(String::as_str) == Some("not-listed") => {
            valid_host(&d.target).map(|h| Grant::Host(h.to_string()))
        }
        ("proxy", "hosts") => Err(format!(
            "the proxy refused it as {}, not as unlisted: a special address is granted by naming the address, \
             review it by hand",
            d.access.first().map_or("?", String::as_str)
        )),
        ("proxy", key @ ("max_connections" | "max_connections_per_call" | "max_bytes")) => {
            Err(format!("network.{key} is a bound, not a grant: raise it by hand if the tool needs more"))
        }
        ("seccomp", "network") if d.target == "socket" => Ok(Grant::TcpSockets),
        ("seccomp", "bind_tcp") => {
            Err("listening needs `network = { bind_tcp = [PORT] }` and the record does not say which port".into())
        }
        (source, key) => Err(format!("cordon does not suggest `{key}` for a {source} denial: grant it by hand")),
    }
}

/// `host:port` as a `hosts` entry: a name, an IPv4 address or a bracketed IPv6 address, a port
/// from 1 to 65535; nothing else (no wildcard, no control characters).
fn valid_host(target: &str) -> Result<&str, String> {
    let bad = || format!("{:?} is not a host:port cordon would list", clip_reason(target));
    let (host, port) = target.rsplit_once(':').ok_or_else(bad)?;
    let port_ok = port.parse::<u16>().is_ok_and(|p| p > 0) && !port.starts_with('0');
    let host_ok = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        v6.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            })
    };
    if port_ok && host_ok { Ok(target) } else { Err(bad()) }
}

/// A reason quoted from a record, on one line and short.
pub(crate) fn clip_reason(s: &str) -> String {
    let one: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if one.chars().count() > 300 { format!("{}...", one.chars().take(300).collect::<String>()) } else { one }
}

/// Whether the tool's policy grants `grant` already (the key's grants hold the path; the port
/// or host is listed).
fn granted(grant: &Grant, have: &SandboxPolicy) -> Option<String> {
    let under = |grants: &[&Vec<PathBuf>], p: &Path| {
        grants.iter().flat_map(|g| g.iter()).find(|g| p.starts_with(g)).map(|g| g.display().to_string())
    };
    match grant {
        Grant::Read(p) => under(&[&have.read, &have.write, &have.exec], p),
        Grant::Write(p) => under(&[&have.write], p),
        Grant::Exec(p) => under(&[&have.exec, &have.search_path], p),
        Grant::ConnectTcp(n) => match &have.network {
            Network::Tcp { connect, .. } if connect.contains(n) => Some(format!("connect_tcp {n}")),
            _ => None,
        },
        Grant::BindTcp(n) => match &have.network {
            Network::Tcp { bind, .. } if bind.contains(n) => Some(format!("bind_tcp {n}")),
            _ => None,
        },
        Grant::Host(h) => have.network.egress().and_then(|e| e.hosts.iter().map(ToString::to_string).find(|r| r == h)),
        Grant::TcpSockets => match &have.network {
            Network::Tcp { .. } => Some("network (TCP sockets)".into()),
            Network::None => None,
        },
    }
}

/// The suggestions for `denials` under the policy `have`, and the denials nothing is suggested
/// for. One grant per distinct value; a path under another suggested path of the same key is
/// folded into it. `protected`: cordon's own directories (policies, audit log), never named;
/// `exists`: whether a path is there now (a missing file to write is granted by its directory).
pub(crate) fn choose(
    denials: &[Denial],
    have: &SandboxPolicy,
    opts: Options,
    protected: &[PathBuf],
    exists: &dyn Fn(&Path) -> bool,
) -> (Vec<Suggestion>, Vec<NotSuggested>) {
    let mut out: BTreeMap<Grant, Suggestion> = BTreeMap::new();
    let mut skipped = Vec::new();
    for (i, d) in denials.iter().enumerate() {
        let grant = match grant_for(d, opts, exists) {
            Ok(g) => g,
            Err(why) => {
                skipped.push(NotSuggested { denial: i, why });
                continue;
            }
        };
        // The path denied and the path granted (its directory, with --broader) must both be
        // ones a suggestion may name: --broader never lifts /etc/shadow to /etc.
        let refused = grant.path().and_then(|path| {
            refuse_path(grant.key(), &d.target, protected)
                .or_else(|| refuse_path(grant.key(), &path.display().to_string(), protected))
        });
        if let Some(why) = refused {
            skipped.push(NotSuggested { denial: i, why: format!("not suggested for {}: {why}", grant.shown()) });
            continue;
        }
        if let Some(by) = granted(&grant, have) {
            skipped.push(NotSuggested {
                denial: i,
                why: format!(
                    "already granted ({} has {by}): the policy allows it now (a grant added since), or the file's \
                     mode or owner refused it, not the sandbox",
                    grant.key()
                ),
            });
            continue;
        }
        let s = out.entry(grant.clone()).or_insert_with(|| Suggestion { grant, denials: Vec::new(), unverified: true });
        s.denials.push(i);
        s.unverified &= d.source == "inferred";
    }
    // Fold a path under another suggestion of the same key into it.
    let all: Vec<Grant> = out.keys().cloned().collect();
    for g in &all {
        let Some(p) = g.path() else { continue };
        let outer = all.iter().find(|o| {
            o != &g
                && std::mem::discriminant(*o) == std::mem::discriminant(g)
                && o.path().is_some_and(|op| p.starts_with(op))
        });
        if let Some(outer) = outer
            && let Some(inner) = out.remove(g)
            && let Some(o) = out.get_mut(outer)
        {
            o.denials.extend(inner.denials);
            o.unverified &= inner.unverified;
        }
    }
    let mut suggestions: Vec<Suggestion> = out.into_values().collect();
    for s in &mut suggestions {
        s.denials.sort_unstable();
    }
    (suggestions, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denial(source: &str, target: &str, access: &[&str], key: &str) -> Denial {
        Denial {
            source: source.into(),
            target: target.into(),
            access: access.iter().map(|a| a.to_string()).collect(),
            grant_key: key.into(),
            incidental: false,
            message: format!("{source} denied {target}"),
            ..Denial::default()
        }
    }

    fn pick(denials: &[Denial], have: &SandboxPolicy, opts: Options) -> (Vec<(Grant, Vec<usize>)>, Vec<String>) {
        let (s, n) = choose(denials, have, opts, &[PathBuf::from("/etc/cordon/policies.d")], &|p| !p.ends_with("new"));
        (s.into_iter().map(|s| (s.grant, s.denials)).collect(), n.into_iter().map(|n| n.why).collect())
    }

    #[test]
    fn a_file_read_is_the_file_and_broader_is_its_directory() {
        let d = [denial("landlock", "/srv/data/in.txt", &["read_file"], "read")];
        let (s, n) = pick(&d, &SandboxPolicy::default(), Options::default());
        assert_eq!((s, n.len()), (vec![(Grant::Read("/srv/data/in.txt".into()), vec![0])], 0));
        let (s, _) = pick(&d, &SandboxPolicy::default(), Options { broader: true, ..Options::default() });
        assert_eq!(s, vec![(Grant::Read("/srv/data".into()), vec![0])]);
        // A directory listed is that directory.
        let d = [denial("landlock", "/srv/data", &["read_dir"], "read")];
        let (s, _) = pick(&d, &SandboxPolicy::default(), Options::default());
        assert_eq!(s, vec![(Grant::Read("/srv/data".into()), vec![0])]);
    }

    #[test]
    fn writes_execs_ports_hosts_and_sockets_get_their_keys() {
        let d = [
            denial("landlock", "/srv/out", &["make_reg"], "write"),
            denial("landlock", "/srv/bin/t", &["execute"], "exec"),
            denial("landlock", "port 5432", &["connect_tcp"], "connect_tcp"),
            denial("proxy", "pypi.org:443", &["not-listed"], "hosts"),
            denial("seccomp", "socket", &[], "network"),
        ];
        let (s, n) = pick(&d, &SandboxPolicy::default(), Options::default());
        let grants: Vec<Grant> = s.into_iter().map(|(g, _)| g).collect();
        assert_eq!(
            grants,
            vec![
                Grant::Write("/srv/out".into()),
                Grant::Exec("/srv/bin/t".into()),
                Grant::ConnectTcp(5432),
                Grant::Host("pypi.org:443".into()),
                Grant::TcpSockets
            ]
        );
        assert!(n.is_empty(), "{n:?}");
        // A file to write that is not there: its directory.
        let d = [denial("inferred", "/srv/out/new", &["write"], "write")];
        let (s, _) = pick(&d, &SandboxPolicy::default(), Options { include_inferred: true, ..Options::default() });
        assert_eq!(s, vec![(Grant::Write("/srv/out".into()), vec![0])]);
    }

    #[test]
    fn the_same_grant_is_suggested_once_and_an_inner_path_folds_into_an_outer_one() {
        let d = [
            denial("landlock", "/srv/data/a", &["read_file"], "read"),
            denial("landlock", "/srv/data", &["read_dir"], "read"),
            denial("landlock", "/srv/data/a", &["read_file"], "read"),
            denial("landlock", "/srv/other", &["read_file"], "read"),
        ];
        let (s, n) = pick(&d, &SandboxPolicy::default(), Options::default());
        assert_eq!(
            s,
            vec![(Grant::Read("/srv/data".into()), vec![0, 1, 2]), (Grant::Read("/srv/other".into()), vec![3])]
        );
        assert!(n.is_empty());
    }

    #[test]
    fn a_path_already_granted_or_under_a_granted_parent_is_not_suggested() {
        let have = SandboxPolicy {
            read: vec!["/srv/data".into()],
            write: vec!["/srv/out/file".into()],
            ..SandboxPolicy::default()
        };
        let d = [
            denial("landlock", "/srv/data", &["read_dir"], "read"),
            denial("landlock", "/srv/data/deep/x", &["read_file"], "read"),
            denial("landlock", "/srv/out/file", &["write_file"], "write"),
            // A read under a write grant is granted too (write grants read).
            denial("landlock", "/srv/out/file", &["read_file"], "read"),
        ];
        let (s, n) = pick(&d, &have, Options::default());
        assert!(s.is_empty(), "{s:?}");
        assert_eq!(n.len(), 4);
        assert!(n[1].starts_with("already granted (read has /srv/data)"), "{}", n[1]);
    }

    #[test]
    fn ungrantable_incidental_and_inferred_denials_are_not_suggested_unless_asked() {
        let mut incidental = denial("landlock", "/home/u/.npmrc", &["read_file"], "read");
        incidental.incidental = true;
        let d = [
            denial("seccomp", "unshare", &[], ""),
            incidental,
            denial("inferred", "/srv/x", &["read"], "read"),
            denial("proxy", "h:80", &["max-bytes"], "max_bytes"),
        ];
        let (s, n) = pick(&d, &SandboxPolicy::default(), Options::default());
        assert!(s.is_empty());
        assert!(n[0].starts_with("no policy key allows it"), "{}", n[0]);
        assert!(n[1].starts_with("incidental"), "{}", n[1]);
        assert!(n[2].contains("--include-inferred"), "{}", n[2]);
        assert!(n[3].contains("a bound, not a grant"), "{}", n[3]);
        let all = Options { include_inferred: true, include_incidental: true, broader: false };
        let (s, _) = pick(&d, &SandboxPolicy::default(), all);
        assert_eq!(
            s.into_iter().map(|(g, _)| g).collect::<Vec<_>>(),
            vec![Grant::Read("/home/u/.npmrc".into()), Grant::Read("/srv/x".into())]
        );
    }

    #[test]
    fn crafted_paths_and_hosts_are_refused() {
        let opts = Options { include_inferred: true, ..Options::default() };
        for (target, key) in [
            ("/etc/sudoers.d", "write"),
            ("/etc/sudoers.d/x", "write"),
            ("/etc/shadow", "read"),
            ("/etc/cordon/policies.d/a.toml", "read"),
            ("/usr/local/bin", "write"),
            ("/", "read"),
            ("relative/path", "read"),
            ("/srv/../etc", "read"),
            ("/srv//x", "read"),
            ("/srv/x/", "read"),
            ("/srv/x\n\"/\"", "write"),
            ("/proc/self", "exec"),
        ] {
            let d = [denial("inferred", target, &[key], key)];
            let (s, n) = pick(&d, &SandboxPolicy::default(), opts);
            assert!(s.is_empty() && n.len() == 1, "{target}: {s:?}");
        }
        for host in ["*.example.com:443", "a b:80", "h:0", "h:99999", "h", "h:80\n", "[zz]:80", "-h:1"] {
            let (s, _) = pick(&[denial("proxy", host, &["not-listed"], "hosts")], &SandboxPolicy::default(), opts);
            assert!(s.is_empty(), "{host}: {s:?}");
        }
        let (s, _) = pick(&[denial("proxy", "[::1]:8080", &["not-listed"], "hosts")], &SandboxPolicy::default(), opts);
        assert_eq!(s.len(), 1);
        // cordon's own files, or a directory above them.
        let (s, n) = pick(&[denial("landlock", "/etc", &["read_dir"], "read")], &SandboxPolicy::default(), opts);
        assert!(s.is_empty() && n[0].contains("it would reach /etc/cordon/policies.d"), "{n:?}");
    }
}
