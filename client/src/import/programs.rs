//! What an imported command needs to run in cordon's sandbox that the foreign system got for free
//! from the developer's own environment: git's configuration, a package manager's cache, and the
//! network hosts its URLs name. Both importers ask here, so a CtxNest tool and a Gandalf spell
//! running the same program get the same grants.

use std::path::{Path, PathBuf};

use super::out::{self, Table};

/// What a command needs: environment variables (the foreign file's own `env` keys win) and the
/// `network.hosts` its literal URLs name, with the comments that say why.
#[derive(Debug, Default)]
pub(crate) struct Needs {
    pub(crate) env: Vec<(String, String)>,
    pub(crate) env_note: Option<String>,
    pub(crate) hosts: Vec<String>,
    pub(crate) host_notes: Vec<String>,
}

/// The program's file name (`git` for `/usr/bin/git`).
fn base(program: &str) -> &str {
    Path::new(program).file_name().and_then(|n| n.to_str()).unwrap_or(program)
}

/// What `argv` needs, running in `dirs` (the working directory and the project root: the
/// repositories git may be asked to open).
pub(crate) fn needs(argv: &[String], dirs: &[PathBuf]) -> Needs {
    let mut n = Needs::default();
    let Some(program) = argv.first() else {
        return n;
    };
    match base(program) {
        "git" => git(&mut n, dirs),
        "npm" | "npx" | "pnpm" | "yarn" => {
            n.env = vec![
                ("npm_config_cache".into(), "/tmp/.npm".into()),
                ("npm_config_update_notifier".into(), "false".into()),
                ("npm_config_fund".into(), "false".into()),
            ];
            n.env_note = Some(format!(
                "{} keeps a cache in ~/.npm, which the sandbox does not let it write: the cache is the tool's \
                 private /tmp (fresh per call), and the update check (a network call) is off.",
                base(program)
            ));
        }
        _ => {}
    }
    hosts(&mut n, argv);
    n
}

/// git in the sandbox: it cannot read `/etc/gitconfig` or `~/.gitconfig` (an unreadable config
/// is fatal to git: exit 128), and it refuses a repository another account owns ("dubious
/// ownership", exit 128) unless `safe.directory` names it in a protected scope (the environment's
/// `GIT_CONFIG_*` is one).
fn git(n: &mut Needs, dirs: &[PathBuf]) {
    n.env = vec![
        ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
        ("GIT_CONFIG_GLOBAL".into(), "/dev/null".into()),
        ("GIT_PAGER".into(), "cat".into()),
        ("GIT_OPTIONAL_LOCKS".into(), "0".into()),
    ];
    let mut config: Vec<(&str, String)> = Vec::new();
    let mut seen = Vec::new();
    for d in dirs {
        if !seen.contains(d) {
            seen.push(d.clone());
            config.push(("safe.directory", d.to_string_lossy().into_owned()));
        }
    }
    // A repository's own config cannot make git run a program.
    config.push(("core.fsmonitor", "false".into()));
    n.env.push(("GIT_CONFIG_COUNT".into(), config.len().to_string()));
    for (i, (k, v)) in config.into_iter().enumerate() {
        n.env.push((format!("GIT_CONFIG_KEY_{i}"), k.into()));
        n.env.push((format!("GIT_CONFIG_VALUE_{i}"), v));
    }
    n.env_note = Some(
        "git: GIT_CONFIG_NOSYSTEM and GIT_CONFIG_GLOBAL=/dev/null because the sandbox does not let git read \
         /etc/gitconfig or ~/.gitconfig, which git treats as fatal (exit 128); to use a user's settings, point \
         GIT_CONFIG_GLOBAL at the file and add it to `read`. safe.directory (GIT_CONFIG_KEY_*) names the \
         repository, so a caller other than its owner is not refused for \"dubious ownership\"; \
         core.fsmonitor=false keeps the repository's own config from making git run a program. \
         GIT_OPTIONAL_LOCKS=0: no optional index writes."
            .into(),
    );
}

/// `scheme://[user@]host[:port]/...` in any word: the host and port for `network.hosts`.
fn hosts(n: &mut Needs, argv: &[String]) {
    for word in argv.iter().skip(1) {
        let Some(at) = word.find("://") else {
            continue;
        };
        let scheme = word[..at].rsplit(|c: char| !c.is_ascii_alphanumeric() && c != '+').next().unwrap_or("");
        let default_port = match scheme.to_ascii_lowercase().as_str() {
            "https" => 443,
            "http" => 80,
            other => {
                n.host_notes.push(format!(
                    "{word:?}: a {other}:// URL is not granted: the sandbox reaches hosts through cordond's HTTP \
                     proxy only (http and https); grant what it needs by hand after review."
                ));
                continue;
            }
        };
        let rest = &word[at + 3..];
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let authority = authority.rsplit('@').next().unwrap_or("");
        if authority.contains("{{") || authority.is_empty() {
            n.host_notes.push(format!(
                "{word:?}: the host comes from a param, so it cannot be granted by name: no network grant is \
                 written for it (grant the hosts the param may name, by hand, after review)."
            ));
            continue;
        }
        let (host, port) = match split_port(authority) {
            Some(hp) => hp,
            None => {
                n.host_notes.push(format!("{word:?}: its host and port could not be read; no grant is written."));
                continue;
            }
        };
        let port = port.unwrap_or(default_port);
        let entry = format!("{}:{port}", host.to_ascii_lowercase());
        if !n.hosts.contains(&entry) {
            n.hosts.push(entry);
        }
    }
}

/// `host`, `host:port`, `[v6]`, `[v6]:port`.
fn split_port(authority: &str) -> Option<(String, Option<u16>)> {
    if let Some(v6) = authority.strip_prefix('[') {
        let (addr, rest) = v6.split_once(']')?;
        let port = match rest.strip_prefix(':') {
            Some(p) => Some(p.parse().ok()?),
            None if rest.is_empty() => None,
            None => return None,
        };
        return Some((format!("[{addr}]"), port));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (h, Some(p.parse().ok()?)),
        None => (authority, None),
    };
    let valid = !host.is_empty() && host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    valid.then(|| (host.to_string(), port))
}

/// Writes the `network` key of the needs, if any, and the notes about hosts it could not grant.
pub(crate) fn write_network(n: &Needs, table: &mut Table) {
    if !n.hosts.is_empty() {
        table.set_noted(
            "network",
            format!("{{ hosts = {} }}", out::strings(&n.hosts)),
            "The command names these URLs: the tool may reach their hosts (and only those), through cordond's \
             egress proxy, which curl, wget and git use by themselves.",
        );
    }
    for note in &n.host_notes {
        table.note(note.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_string()).collect()
    }

    #[test]
    fn hosts_come_from_literal_urls_only() {
        let n = needs(
            &argv(&[
                "curl",
                "-X",
                "GET",
                "https://api.weather.com/v1/current",
                "http://Example.org:8080/x?q=1",
                "--url=https://user@files.example.com",
                "https://{{host}}/x",
                "ftp://example.net/f",
                "https://[2001:db8::1]:8443/",
            ]),
            &[],
        );
        assert_eq!(n.hosts, ["api.weather.com:443", "example.org:8080", "files.example.com:443", "[2001:db8::1]:8443"]);
        assert!(n.host_notes.iter().any(|h| h.contains("comes from a param")), "{:?}", n.host_notes);
        assert!(n.host_notes.iter().any(|h| h.contains("ftp:// URL is not granted")), "{:?}", n.host_notes);
    }

    #[test]
    fn git_gets_its_config_and_the_repository_as_safe() {
        let n = needs(&argv(&["/usr/bin/git", "ls-files"]), &[PathBuf::from("/srv/web"), PathBuf::from("/srv/web")]);
        let get = |k: &str| n.env.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        assert_eq!(get("GIT_CONFIG_GLOBAL"), Some("/dev/null"));
        assert_eq!(get("GIT_CONFIG_NOSYSTEM"), Some("1"));
        assert_eq!(get("GIT_CONFIG_COUNT"), Some("2"));
        assert_eq!((get("GIT_CONFIG_KEY_0"), get("GIT_CONFIG_VALUE_0")), (Some("safe.directory"), Some("/srv/web")));
        assert_eq!((get("GIT_CONFIG_KEY_1"), get("GIT_CONFIG_VALUE_1")), (Some("core.fsmonitor"), Some("false")));
        assert!(needs(&argv(&["ls"]), &[]).env.is_empty());
    }
}
