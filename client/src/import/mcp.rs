//! An agent host's MCP servers (`{"mcpServers": {...}}` of Claude Desktop, Claude Code, Cursor,
//! Windsurf and `.mcp.json`; Codex's TOML `[mcp_servers.NAME]`) -> `[servers.NAME]` tables to
//! review.
//!
//! What each difference becomes (each also written as a comment in the server's table):
//! - the host ran the server with the user's full rights; cordon runs it in a sandbox that grants
//!   nothing but its installed copy (`exec`): what else it needs (the paths it was given, the hosts it
//!   reaches) is suggested in comments, never granted;
//! - `npx -y PKG`, `uvx PKG` and the like download the package when the server starts, which the
//!   sandbox does not allow (`policy::downloads_at_start` recognizes them): the server's
//!   `command` is the copy to install first under `--install-root` (default /opt/cordon/mcp),
//!   with the install command in the comment;
//! - nothing is exposed: `tools` names only a placeholder no MCP tool can be named ([`UNLISTED`])
//!   until the admin lists the tools agents may call (after `cordon server show NAME`);
//! - `env` values that look like secrets (by name or by value) are never copied: each becomes a
//!   commented `[secrets.*]` declaration to fill in (source, hosts, placement);
//! - remote servers (`url`, `type = "sse"`/`"http"`) are not run by cordon: listed in comments.

use std::path::{Path, PathBuf};

use cordon_core::policy::downloads_at_start;
use serde_json::{Map, Value};

use super::out::{self, Table};
use super::{Draft, Item, Options, Report};

/// Where `npx`/`uvx` servers are to be installed unless `--install-root` says otherwise (the
/// directory `policy::downloads_at_start`'s hints name).
pub(crate) const DEFAULT_INSTALL_ROOT: &str = "/opt/cordon/mcp";

const SERVER_KEYS: &[&str] = &[
    "command",
    "args",
    "env",
    "type",
    "url",
    "serverUrl",
    "headers",
    "cwd",
    "disabled",
    "enabled",
    "autoApprove",
    "alwaysAllow",
    "timeout",
    "description",
    "transport",
];
/// What `tools` lists until the admin names the tools: a name no MCP tool can have (a space),
/// so nothing is exposed and the policy still loads (`tools = []` is refused).
pub(crate) const UNLISTED: &str = "TODO list the tools agents may call";
/// Longest server name cordon takes (it prefixes every tool's name).
const MAX_NAME: usize = 32;

pub(crate) fn translate(doc: &Value, opts: &Options, report: &mut Report) -> Option<Draft> {
    let Some(servers) = doc.get("mcpServers").and_then(Value::as_object) else {
        report.error("a host's MCP config has an \"mcpServers\" object (one entry per server)");
        return None;
    };
    let install_root = opts.install_root.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_INSTALL_ROOT));
    if !install_root.is_absolute() {
        report.error(format!("--install-root {} is not an absolute path", install_root.display()));
        return None;
    }
    let mut items = Vec::new();
    let mut remote = Vec::new();
    let mut taken: Vec<String> = Vec::new();
    for (host_name, value) in servers {
        if is_remote(value) {
            remote.push(format!(
                "{host_name:?}: a remote server ({}) is not supported: cordon runs stdio servers it starts itself \
                 in their sandbox; it was not imported",
                value.get("url").or_else(|| value.get("serverUrl")).and_then(Value::as_str).unwrap_or("no url")
            ));
            continue;
        }
        let name = server_name(host_name);
        let entry = format!("mcpServers.{host_name}");
        items.push(Item::translate(entry, value, report, |r| {
            let mut tables = Vec::new();
            match &name {
                Err(why) => r.error(format!("server {host_name:?}: {why}")),
                Ok(name) if taken.contains(name) => r.error(format!(
                    "server {host_name:?}: its cordon name {name:?} is already another server's; rename one of them \
                     in the host's config"
                )),
                Ok(name) => {
                    taken.push(name.clone());
                    server(host_name, name, value, &install_root, &opts.file, r, &mut tables);
                }
            }
            tables
        }));
    }
    for r in &remote {
        report.warn(r.clone());
    }
    if servers.is_empty() {
        report.warn("\"mcpServers\" is empty: the policy declares no server");
    }
    let source = opts.file.display();
    let mut header = vec![
        format!("Imported by `cordon import mcp` from {source}: the MCP servers the host ran with your own rights."),
        "Review each server: install it where its comment says, list the tools agents may call (until then it \
         exposes none), grant what it needs and nothing more, and declare its secrets. Then `cordon policy check` \
         this file."
            .to_string(),
    ];
    for r in remote {
        header.push(format!("NOT IMPORTED: {r}."));
    }
    Some(Draft { header, top: vec![out::Entry { notes: Vec::new(), key: "version".into(), value: "1".into() }], items })
}

/// Whether the host reaches the server over the network rather than starting it.
fn is_remote(v: &Value) -> bool {
    let ty = v.get("type").or_else(|| v.get("transport")).and_then(Value::as_str);
    v.get("url").is_some()
        || v.get("serverUrl").is_some()
        || matches!(ty, Some("sse" | "http" | "streamable-http" | "streamableHttp"))
}

/// The host's name for a server as a cordon server name (`^[a-z][a-z0-9-]*$`, at most 32).
fn server_name(host_name: &str) -> Result<String, String> {
    let mut name = String::new();
    for c in host_name.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            name.push(c);
        } else if !name.is_empty() && !name.ends_with('-') {
            name.push('-');
        }
    }
    let name = name.trim_end_matches('-').to_string();
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err(format!(
            "cordon's server names start with a letter (a-z), then a-z, 0-9 and '-'; from this one only {name:?} \
             is left: rename it in the host's config"
        ));
    }
    if name.len() > MAX_NAME {
        return Err(format!(
            "{name:?} is {} characters long; a server's name is at most {MAX_NAME} (it prefixes every tool's name): \
             rename it in the host's config",
            name.len()
        ));
    }
    Ok(name)
}

fn strings(v: Option<&Value>, what: &str, r: &mut Report) -> Vec<String> {
    match v {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|i| match i {
                Value::String(s) => Some(s.clone()),
                other => {
                    r.error(format!("{what} holds {other}, not a string"));
                    None
                }
            })
            .collect(),
        Some(other) => {
            r.error(format!("{what} is {other}, not an array of strings"));
            Vec::new()
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn server(
    host_name: &str,
    name: &str,
    v: &Value,
    install_root: &Path,
    file: &Path,
    r: &mut Report,
    tables: &mut Vec<Table>,
) {
    let Some(obj) = v.as_object() else {
        r.error(format!("server {host_name:?} is {v}, not an object"));
        return;
    };
    r.unknown_keys(obj, SERVER_KEYS, &format!("server {host_name:?}"));
    let program = match obj.get("command") {
        Some(Value::String(c)) if !c.trim().is_empty() => c.clone(),
        _ => {
            r.error(format!("server {host_name:?} has no \"command\" (the program the host started)"));
            return;
        }
    };
    let args = strings(obj.get("args"), &format!("server {host_name:?}: \"args\""), r);
    // A command of several words with no args: the host ran it through a shell or split it.
    let mut argv = if args.is_empty() && program.contains(' ') && !Path::new(&program).exists() {
        program.split_whitespace().map(str::to_string).collect::<Vec<_>>()
    } else {
        std::iter::once(program.clone()).chain(args).collect::<Vec<_>>()
    };
    let mut t = Table::new(format!("servers.{name}"));
    let host_shown = argv.join(" ");
    if name != host_name {
        t.note(format!("Named {host_name:?} in {}.", file.display()));
    }
    t.note(format!("The host ran: {host_shown}"));
    if obj.get("disabled") == Some(&Value::Bool(true)) || obj.get("enabled") == Some(&Value::Bool(false)) {
        t.note("The host had this server disabled.");
    }
    t.set("description", out::string(&format!("{host_name}, imported from {}", file.display())));
    let mut reads = Vec::new();
    if let Some(download) = downloads_at_start(&argv) {
        let how = retarget(&download.how_to_install_for(name), install_root);
        let package = download.package.clone().unwrap_or_else(|| "its package".into());
        t.note(format!(
            "`{}` downloads {package} each time the server starts, which its sandbox does not allow: {how}",
            download.launcher
        ));
        let dir = install_root.join(name);
        match installed_command(&how) {
            Some(mut installed) => {
                if let Some(program) = installed.first_mut()
                    && program.ends_with("/BIN")
                    && let Some(package) = download.package.as_deref()
                {
                    let found = npm_bin(&dir, package);
                    if let Some(bin) = found.clone().or_else(|| conventional_bin(package)) {
                        *program = format!("{}/node_modules/.bin/{bin}", dir.display());
                        if found.is_none() {
                            t.note(format!(
                                "{bin} is the program the package's name suggests; once it is installed, check \
                                 with `ls {}/node_modules/.bin`.",
                                dir.display()
                            ));
                        }
                    }
                }
                argv = installed;
            }
            None => r.warn(format!(
                "server {host_name:?}: write its command by hand once it is installed (the import could not tell it)"
            )),
        }
        reads.push(dir.display().to_string());
    }
    t.set("command", out::strings(&argv));
    t.set_noted(
        "tools",
        out::strings(&[UNLISTED]),
        format!(
            "Nothing is exposed until you list it: {UNLISTED:?} is no tool's name (MCP tool names have no spaces), \
             so no tool is listed. Once the server is installed, `cordon server show {name}` shows its tools; \
             replace it with those agents may call (tools = \"*\" exposes all of them, even ones it adds later)."
        ),
    );
    let given: Vec<&String> = argv.iter().skip(1).filter(|a| a.starts_with('/') || a.starts_with("~/")).collect();
    let mut grant_note = String::from("Granted: the server's installed copy (to run its own files), nothing else.");
    if !given.is_empty() {
        let shown: Vec<String> = given.iter().map(|g| format!("{g:?}")).collect();
        grant_note.push_str(&format!(
            " The host gave it the paths {}: grant what it must reach, e.g. read = [{}] (or write), and confine its \
             tools' path arguments with [servers.{name}.rules.TOOL] path = {{ under = [...] }}.",
            shown.join(", "),
            shown.join(", ")
        ));
    }
    grant_note.push_str(" It has no network: add network = { hosts = [\"HOST:443\"] } for the hosts it must reach.");
    if reads.is_empty() {
        t.note(grant_note);
    } else {
        t.set_noted("exec", out::strings(&reads), grant_note);
    }
    env(host_name, name, obj, r, &mut t);
    if let Some(cwd) = obj.get("cwd").and_then(Value::as_str) {
        t.trailer.push(format!("The host started it in {cwd}; cordon starts it in its sandbox's working directory."));
    }
    tables.push(t);
}

/// The `env` of a server: plain values copied, secret-looking ones declared (commented) instead.
fn env(host_name: &str, name: &str, obj: &Map<String, Value>, r: &mut Report, t: &mut Table) {
    let Some(env) = obj.get("env") else { return };
    let Some(env) = env.as_object() else {
        r.error(format!("server {host_name:?}: \"env\" is {env}, not an object of strings"));
        return;
    };
    let mut plain = Vec::new();
    let mut secrets = Vec::new();
    let mut dropped = Vec::new();
    for (k, v) in env {
        let Some(v) = v.as_str() else {
            r.error(format!("server {host_name:?}: env {k} is {v}, not a string"));
            continue;
        };
        if looks_secret(k, v) {
            secrets.push(k.clone());
        } else if k == "PATH" || k.starts_with("LD_") || k.starts_with("DYLD_") {
            dropped.push(k.clone());
        } else {
            plain.push(format!("{} = {}", out::key(k), out::string(v)));
        }
    }
    if !plain.is_empty() {
        let mut e = out::Entry { notes: Vec::new(), key: "env".into(), value: format!("{{ {} }}", plain.join(", ")) };
        if !dropped.is_empty() {
            e.notes
                .push(format!("Not copied: {} (cordon sets the search path and loader itself).", dropped.join(", ")));
        }
        t.entries.push(e);
    } else if !dropped.is_empty() {
        t.note(format!("Not copied from env: {} (cordon sets the search path and loader itself).", dropped.join(", ")));
    }
    if secrets.is_empty() {
        return;
    }
    r.warn(format!(
        "server {host_name:?}: env {} looked secret and was not copied; declare each as a secret (a commented \
         template is in the policy)",
        secrets.join(", ")
    ));
    t.trailer
        .push(format!("SECRETS: the host gave {} values that look secret; they were not copied.", secrets.join(", ")));
    t.trailer.push("Declare each below, then give it to the server: secrets = { VAR = \"NAME\" } in this".into());
    t.trailer.push("table, and the hosts it is sent to in its network.hosts.".into());
    for k in &secrets {
        let secret = format!("{name}-{}", k.to_ascii_lowercase().replace('_', "-"));
        t.trailer.push(format!("--- {k}:"));
        t.trailer.push(format!("[secrets.{secret}]"));
        t.trailer
            .push(format!("source = {{ file = \"/etc/cordon/secrets/{secret}\" }}   # TODO: root-owned, mode 0600"));
        t.trailer.push("hosts = [\"TODO.example.com:443\"]   # TODO: where the value may be sent".into());
        t.trailer
            .push("header = \"Authorization\"   # TODO: where in a request it goes (header, basic or query)".into());
    }
}

/// Whether an environment variable holds a secret, judged by its name or its value. Errs on the
/// side of a secret: a value wrongly held back is one line for the admin, a secret copied into a
/// policy file is a leak.
pub(crate) fn looks_secret(key: &str, value: &str) -> bool {
    let k = key.to_ascii_uppercase();
    const PARTS: &[&str] = &[
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "APIKEY",
        "API_KEY",
        "ACCESS_KEY",
        "PRIVATE_KEY",
        "COOKIE",
        "CONNECTION_STRING",
    ];
    const WORDS: &[&str] =
        &["PASS", "PWD", "KEY", "AUTH", "AUTHORIZATION", "OAUTH", "SESSION", "DSN", "PAT", "SIGNATURE"];
    if PARTS.iter().any(|n| k.contains(n)) || k.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| WORDS.contains(&w))
    {
        return true;
    }
    const PREFIXES: &[&str] = &[
        "ghp_",
        "gho_",
        "ghu_",
        "ghs_",
        "github_pat_",
        "glpat-",
        "sk-",
        "xoxb-",
        "xoxp-",
        "xapp-",
        "AKIA",
        "AIza",
        "eyJ",
    ];
    if PREFIXES.iter().any(|p| value.starts_with(p)) {
        return true;
    }
    // Placeholders the host fills in (`${input:token}`, `${env:X}`) and credentials in a URL.
    if value.contains("${")
        || (value.contains("://")
            && value.split("://").nth(1).is_some_and(|r| r.split('/').next().is_some_and(|a| a.contains('@'))))
    {
        return true;
    }
    // A long word of mixed letters and digits (a key, a hash) rather than a path, a URL or prose.
    let token_chars =
        value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '+' | '/' | '=' | '.'));
    let mixed = value.chars().any(|c| c.is_ascii_digit()) && value.chars().any(|c| c.is_ascii_alphabetic());
    value.len() >= 20 && token_chars && mixed && !value.starts_with('/') && !value.starts_with('.')
}

/// `how` with the default install root replaced by `root`.
fn retarget(how: &str, root: &Path) -> String {
    let root = root.display().to_string();
    if root == DEFAULT_INSTALL_ROOT { how.to_string() } else { how.replace(DEFAULT_INSTALL_ROOT, &root) }
}

/// The command the recognizer's hint says to write (`... then write command = ["...", ...]`).
fn installed_command(how: &str) -> Option<Vec<String>> {
    let at = how.find("then write command = ")? + "then write command = ".len();
    let mut values = serde_json::Deserializer::from_str(&how[at..]).into_iter::<Vec<String>>();
    values.next()?.ok().filter(|v| !v.is_empty())
}

/// The program an installed npm package provides, from its package.json `bin` (when it is
/// installed already under `dir`): the one program, or the one named like the package.
fn npm_bin(dir: &Path, package: &str) -> Option<String> {
    let base = match package.rfind('@') {
        Some(at) if at > 0 => &package[..at],
        _ => package,
    };
    let text = std::fs::read_to_string(dir.join("node_modules").join(base).join("package.json")).ok()?;
    let doc: Value = serde_json::from_str(&text).ok()?;
    let last = base.rsplit('/').next().unwrap_or(base);
    let bin = match doc.get("bin")? {
        Value::String(_) => last.to_string(),
        Value::Object(bins) if bins.len() == 1 => bins.keys().next()?.clone(),
        Value::Object(bins) => bins.keys().find(|k| k.as_str() == last)?.clone(),
        _ => return None,
    };
    // Only a plain file name: it is joined to a path.
    let plain = !bin.is_empty() && !bin.contains('/') && bin != "." && bin != "..";
    plain.then_some(bin)
}

/// The program of an official server package by its naming convention
/// (`@modelcontextprotocol/server-NAME` provides `mcp-server-NAME`).
fn conventional_bin(package: &str) -> Option<String> {
    let base = match package.rfind('@') {
        Some(at) if at > 0 => &package[..at],
        _ => package,
    };
    let rest = base.strip_prefix("@modelcontextprotocol/server-")?;
    let plain = !rest.is_empty() && rest.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    plain.then(|| format!("mcp-server-{rest}"))
}

/// Codex's `config.toml` (`[mcp_servers.NAME]` with `command`, `args`, `env`, `url`) as the
/// JSON shape of the other hosts, when it has such servers.
pub(crate) fn from_codex_toml(text: &str) -> Option<Value> {
    let doc: toml::Table = toml::from_str(text).ok()?;
    let servers = doc.get("mcp_servers")?.as_table()?;
    let mut out = Map::new();
    for (name, v) in servers {
        let json = serde_json::to_value(v).ok()?;
        out.insert(name.clone(), json);
    }
    Some(serde_json::json!({ "mcpServers": out }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_cordon_names() {
        assert_eq!(server_name("filesystem").unwrap(), "filesystem");
        assert_eq!(server_name("My Git_Server").unwrap(), "my-git-server");
        assert_eq!(server_name("github.com/x").unwrap(), "github-com-x");
        assert!(server_name("123").is_err());
        assert!(server_name(&"a".repeat(33)).is_err());
    }

    #[test]
    fn secrets_are_recognized_by_name_and_value() {
        for (k, v) in [
            ("GITHUB_PERSONAL_ACCESS_TOKEN", "x"),
            ("OPENAI_API_KEY", "x"),
            ("DB_PASSWORD", "x"),
            ("X", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
            ("DATABASE_URL", "postgres://user:pw@db/x"),
            ("X", "${input:token}"),
            ("X", "a1b2c3d4e5f6a7b8c9d0e1f2"),
            ("SLACK_BOT_AUTH", "x"),
            ("AWS_SESSION_TOKEN", "x"),
            ("SIGNING_KEY", "x"),
        ] {
            assert!(looks_secret(k, v), "{k}={v}");
        }
        for (k, v) in [
            ("LOG_LEVEL", "debug"),
            ("HOME_DIR", "/home/u/docs"),
            ("MODE", "read only"),
            ("URL", "https://example.com/a"),
        ] {
            assert!(!looks_secret(k, v), "{k}={v}");
        }
    }

    #[test]
    fn the_installed_command_is_read_from_the_hint() {
        let how = "install it first, as root: `npm install --prefix /opt/cordon/mcp/fs x@VERSION`, then write command = [\"/opt/cordon/mcp/fs/node_modules/.bin/x\", \"/srv\"] (BIN: ...)";
        assert_eq!(
            installed_command(how).unwrap(),
            ["/opt/cordon/mcp/fs/node_modules/.bin/x".to_string(), "/srv".to_string()]
        );
        assert_eq!(installed_command("no hint"), None);
    }
}
