//! What the sandbox grants a tool: `read`/`write`/`exec` paths, `network`, `unix_sockets`, and
//! who may call it (`allow`) or whom it runs as (`run_as`).

use std::ops::Range;
use std::path::{Component, Path, PathBuf};

use toml::de::{DeTable, DeValue};

use super::{Parser, Value};
use crate::policy::keys::{KeyDoc, NETWORK_KEYS, key};
use crate::policy::model::{Allow, MAX_SEARCH_PATH, Network, Principal, RunAs, SEARCH_PATH};

/// Directories a `write` grant of the whole of is a warning: they hold what every program and
/// account relies on.
const SYSTEM_DIRS: &[&str] = &[
    "/dev",
    "/etc",
    "/boot",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/var",
    "/root",
    "/usr/bin",
    "/usr/sbin",
    "/usr/lib",
    "/usr/lib64",
    "/usr/libexec",
    "/usr/local",
    "/usr/local/bin",
    "/usr/local/sbin",
    "/usr/local/lib",
    "/usr/share",
    "/var/lib",
    "/var/log",
    "/var/spool",
    "/run",
];

impl Parser<'_> {
    pub(super) fn path_list(&mut self, v: &Value<'_>, what: &str) -> Option<Vec<PathBuf>> {
        let items = self.array(v, what, "an array of absolute paths")?;
        let paths: Vec<Option<PathBuf>> = items.iter().map(|i| self.abs_path(i, what)).collect();
        if what == "write" || what == "exec" {
            for (item, path) in items.iter().zip(&paths) {
                if let Some(path) = path {
                    self.kernel_grant(item.span(), what, path);
                }
            }
        }
        paths.into_iter().collect()
    }

    /// `search_path`: absolute directories, each once, none with a `:` (the `PATH` separator),
    /// at most [`MAX_SEARCH_PATH`]; not empty (leave the key out for the fixed default).
    pub(super) fn search_path(&mut self, v: &Value<'_>) -> Option<Vec<PathBuf>> {
        let items = self.array(v, "search_path", "an array of absolute directories")?;
        if items.is_empty() {
            self.sink.error(
                v.span(),
                format!(
                    "search_path is empty, so the tool would find no program by name; list the directories \
                     (e.g. [\"/usr/bin\"]), or leave the key out for the fixed PATH {SEARCH_PATH}"
                ),
            );
            return None;
        }
        if items.len() > MAX_SEARCH_PATH {
            self.sink.error(
                v.span(),
                format!("search_path has {} directories; at most {MAX_SEARCH_PATH} are allowed", items.len()),
            );
            return None;
        }
        let mut out: Vec<PathBuf> = Vec::new();
        let mut ok = true;
        for item in items.iter() {
            let Some(path) = self.abs_path(item, "search_path") else {
                ok = false;
                continue;
            };
            if path.as_os_str().as_encoded_bytes().contains(&b':') {
                self.sink.error(
                    item.span(),
                    format!(
                        "search_path {:?} contains `:`, which separates PATH's directories; name a directory without it",
                        path.display().to_string()
                    ),
                );
                ok = false;
                continue;
            }
            if out.contains(&path) {
                self.sink.error(
                    item.span(),
                    format!("search_path lists {:?} twice; keep the first", path.display().to_string()),
                );
                ok = false;
                continue;
            }
            self.kernel_grant(item.span(), "search_path", &path);
            out.push(path);
        }
        ok.then_some(out)
    }

    /// `write` and `exec` may not reach the kernel's own trees: writing beneath /sys/fs/cgroup
    /// lets a tool leave its invocation cgroup (which cordond relies on to recognise and kill its
    /// tools), /proc and /sys hold kernel settings. `/` contains both. System directories as
    /// write roots are allowed with a warning.
    pub(super) fn kernel_grant(&mut self, span: Range<usize>, what: &str, path: &Path) {
        let kernel = ["/proc", "/sys"].iter().find(|k| path.starts_with(k));
        if let Some(k) = kernel {
            self.sink.error(span, format!("{what} {:?} is in {k}, the kernel's own tree; a tool may not write or execute there (it could leave its cgroup or change kernel settings): remove it", path.display().to_string()));
        } else if path == Path::new("/") {
            self.sink.error(span, format!("{what} \"/\" contains /proc and /sys (a tool could leave its cgroup or change kernel settings); grant the directories the tool needs"));
        } else if what == "write" && SYSTEM_DIRS.iter().any(|d| path == Path::new(d)) {
            self.sink.warning(span, format!("write {:?} lets the tool change the whole system directory (for a tool run as root: devices, accounts, programs every tool runs); grant the subdirectory the tool needs", path.display().to_string()));
        } else if what == "write" && ["/etc", "/boot"].iter().any(|d| path.starts_with(d)) {
            self.sink.warning(span, format!("write {:?} lets the tool change the system's configuration or boot files (accounts, sudoers, services, cordon's own policies: root on the host for a tool run as root); keep system configuration out of tools' write grants, or write a copy elsewhere that an admin installs", path.display().to_string()));
        }
    }

    pub(super) fn abs_path(&mut self, v: &Value<'_>, what: &str) -> Option<PathBuf> {
        let s = self.string(v, what)?;
        if s.contains('\0') {
            self.sink.error(v.span(), format!("{what} contains a NUL byte"));
            return None;
        }
        let path = Path::new(&s);
        if !path.is_absolute() {
            self.sink.error(v.span(), format!("{what} {s:?} is relative; write an absolute path"));
            return None;
        }
        if path.components().any(|c| c == Component::ParentDir) {
            self.sink.error(v.span(), format!("{what} {s:?} contains `..`; write the path without it"));
            return None;
        }
        Some(path.components().collect())
    }

    pub(super) fn network(&mut self, v: &Value<'_>) -> Option<Network> {
        match v.get_ref() {
            DeValue::String(s) if s == "none" => Some(Network::None),
            DeValue::String(s) => {
                self.sink.error(
                    v.span(),
                    format!(
                        "invalid network {s:?}; expected \"none\" or {{ connect_tcp = [ports], bind_tcp = [ports] }}"
                    ),
                );
                None
            }
            DeValue::Table(t) => {
                self.unknown_keys(t, NETWORK_KEYS, "in network");
                let connect = t.get("connect_tcp").and_then(|v| self.ports(v, "connect_tcp")).unwrap_or_default();
                let bind = t.get("bind_tcp").and_then(|v| self.ports(v, "bind_tcp")).unwrap_or_default();
                let egress = match t.get("hosts") {
                    Some(h) => self.egress(h, t, &bind),
                    None => {
                        for k in ["max_connections", "max_connections_per_call", "max_bytes"] {
                            if let Some(v) = t.get(k) {
                                self.sink.error(
                                    v.span(),
                                    format!("network.{k} bounds the connections of `hosts`, and this network has none"),
                                );
                            }
                        }
                        None
                    }
                };
                Some(Network::Tcp { connect, bind, egress })
            }
            other => {
                self.type_error(v.span(), "network", "\"none\" or a table", other);
                None
            }
        }
    }

    /// `network.hosts` and its bounds. The proxy's port inside the namespace is cordon's, so the
    /// tool may not bind it.
    fn egress(&mut self, hosts: &Value<'_>, t: &DeTable<'_>, bind: &[u16]) -> Option<crate::egress::Egress> {
        use crate::egress::{
            CONNECTIONS_PER_CALL_LIMIT, DEFAULT_CONNECTIONS_PER_CALL, DEFAULT_MAX_BYTES, DEFAULT_MAX_CONNECTIONS,
            Egress, MAX_CONNECTIONS_LIMIT, MAX_HOSTS, PROXY_PORT,
        };
        let items = self.array(hosts, "hosts", "an array of \"host:port\" strings and { host = ... } tables")?;
        if items.is_empty() {
            self.sink.error(
                hosts.span(),
                "hosts = [] grants no host; remove it (the tool then has no network), or list \"host:port\" entries",
            );
            return None;
        }
        if items.len() > MAX_HOSTS {
            self.sink.error(hosts.span(), format!("hosts has {} entries; at most {MAX_HOSTS}", items.len()));
            return None;
        }
        let parsed = self.host_entries(items);
        let mut ok = parsed.is_some();
        if bind.contains(&PROXY_PORT) {
            self.sink.error(
                hosts.span(),
                format!(
                    "bind_tcp has {PROXY_PORT}, the port of cordond's egress proxy inside the tool's network \
                     namespace (hosts); bind another port"
                ),
            );
            ok = false;
        }
        let max_connections = match t.get("max_connections") {
            None => Some(DEFAULT_MAX_CONNECTIONS),
            Some(v) => self.integer(v, "max_connections").and_then(|n| match u32::try_from(n) {
                Ok(n) if (1..=MAX_CONNECTIONS_LIMIT).contains(&n) => Some(n),
                _ => {
                    self.sink.error(
                        v.span(),
                        format!("max_connections = {n} is out of range (1 to {MAX_CONNECTIONS_LIMIT})"),
                    );
                    None
                }
            }),
        };
        let per_call = match t.get("max_connections_per_call") {
            None => Some(DEFAULT_CONNECTIONS_PER_CALL),
            Some(v) => self.integer(v, "max_connections_per_call").and_then(|n| match u32::try_from(n) {
                Ok(n) if (1..=CONNECTIONS_PER_CALL_LIMIT).contains(&n) => Some(n),
                _ => {
                    self.sink.error(
                        v.span(),
                        format!("max_connections_per_call = {n} is out of range (1 to {CONNECTIONS_PER_CALL_LIMIT})"),
                    );
                    None
                }
            }),
        };
        let max_bytes = match t.get("max_bytes") {
            None => Some(DEFAULT_MAX_BYTES),
            Some(v) => self.size(v, "max_bytes").and_then(|n| {
                if n == 0 {
                    self.sink.error(v.span(), "max_bytes = 0 lets no byte through; remove hosts instead");
                }
                (n > 0).then_some(n)
            }),
        };
        let (Some(max_connections), Some(max_connections_per_call), Some(max_bytes)) =
            (max_connections, per_call, max_bytes)
        else {
            return None;
        };
        let parsed = parsed.filter(|_| ok)?;
        Some(Egress { hosts: parsed.rules, max_connections, max_connections_per_call, max_bytes, http: parsed.http })
    }

    fn ports(&mut self, v: &Value<'_>, what: &str) -> Option<Vec<u16>> {
        let items = self.array(v, what, "an array of port numbers")?;
        let mut out = Vec::new();
        for item in items.iter() {
            let n = self.integer(item, what)?;
            match u16::try_from(n) {
                Ok(p) if p > 0 => out.push(p),
                _ => self.sink.error(item.span(), format!("port {n} in {what} is out of range (1 to 65535)")),
            }
        }
        Some(out)
    }

    pub(super) fn unix_sockets(&mut self, v: &Value<'_>) -> Option<Vec<PathBuf>> {
        match v.get_ref() {
            DeValue::Boolean(false) => Some(Vec::new()),
            DeValue::Boolean(true) => {
                self.sink.error(v.span(), "unix_sockets = true does not say which sockets; list their paths, e.g. unix_sockets = [\"/run/app.sock\"]");
                None
            }
            _ => self.path_list(v, "unix_sockets"),
        }
    }

    pub(super) fn allow(&mut self, v: &Value<'_>) -> Option<Allow> {
        const KEYS: &[KeyDoc] =
            &[key("users", "array", "user names or uids", false), key("groups", "array", "group names or gids", false)];
        let table = self.table(v, "allow")?;
        self.unknown_keys(table, KEYS, "in allow");
        let users = table.get("users").and_then(|v| self.principals(v, "allow.users")).unwrap_or_default();
        let groups = table.get("groups").and_then(|v| self.principals(v, "allow.groups")).unwrap_or_default();
        Some(Allow { users, groups })
    }

    fn principals(&mut self, v: &Value<'_>, what: &str) -> Option<Vec<Principal>> {
        let items = self.array(v, what, "an array of names or ids")?;
        items.iter().map(|i| self.principal(i, what)).collect::<Vec<_>>().into_iter().collect()
    }

    fn principal(&mut self, v: &Value<'_>, what: &str) -> Option<Principal> {
        match v.get_ref() {
            DeValue::String(s) if valid_account_name(s) => Some(Principal::Name(s.to_string())),
            DeValue::String(s) => {
                self.sink.error(v.span(), format!("invalid name {s:?} in {what}"));
                None
            }
            DeValue::Integer(_) => {
                let n = self.integer(v, what)?;
                u32::try_from(n)
                    .map(Principal::Id)
                    .map_err(|_| self.sink.error(v.span(), format!("id {n} in {what} is out of range")))
                    .ok()
            }
            other => {
                self.type_error(v.span(), what, "a name or a numeric id", other);
                None
            }
        }
    }

    pub(super) fn run_as(&mut self, v: &Value<'_>) -> Option<RunAs> {
        match v.get_ref() {
            DeValue::String(s) => {
                let (user, group) = match s.split_once(':') {
                    Some((u, g)) => (u, Some(g)),
                    None => (s.as_ref(), None),
                };
                let parse = |t: &str| match t.parse::<u32>() {
                    Ok(id) => Some(Principal::Id(id)),
                    Err(_) => valid_account_name(t).then(|| Principal::Name(t.to_string())),
                };
                match (parse(user), group.map(parse)) {
                    (Some(user), None) => Some(RunAs::Account { user, group: None }),
                    (Some(user), Some(Some(g))) => Some(RunAs::Account { user, group: Some(g) }),
                    _ => {
                        self.sink.error(
                            v.span(),
                            format!(
                                "invalid run_as {s:?}; write \"user\", \"user:group\" or {{ owner_of = \"working_dir\" }}"
                            ),
                        );
                        None
                    }
                }
            }
            DeValue::Integer(_) => self.principal(v, "run_as").map(|user| RunAs::Account { user, group: None }),
            DeValue::Table(t) => {
                const KEYS: &[KeyDoc] = &[key(
                    "owner_of",
                    "string",
                    "\"working_dir\": run as the account that owns the tool's working_dir when it is called",
                    false,
                )];
                self.unknown_keys(t, KEYS, "in run_as");
                match t.get("owner_of") {
                    Some(o) => match o.get_ref() {
                        DeValue::String(s) if s == "working_dir" => Some(RunAs::OwnerOfWorkingDir),
                        DeValue::String(s) => {
                            self.sink.error(
                                o.span(),
                                format!(
                                    "invalid run_as owner_of {s:?}; the only one is \"working_dir\" (the owner of the \
                                     tool's working directory)"
                                ),
                            );
                            None
                        }
                        other => {
                            self.type_error(o.span(), "run_as.owner_of", "\"working_dir\"", other);
                            None
                        }
                    },
                    None => {
                        self.sink.error(v.span(), "run_as table needs owner_of = \"working_dir\"".to_string());
                        None
                    }
                }
            }
            other => {
                self.type_error(
                    v.span(),
                    "run_as",
                    "\"user\", \"user:group\", a uid or { owner_of = \"working_dir\" }",
                    other,
                );
                None
            }
        }
    }
}

fn valid_account_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && !name.starts_with('-')
        && name.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
}
