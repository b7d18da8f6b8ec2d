//! `cordon mcp config HOST`: the snippet that makes an agent host start cordon's MCP server, and
//! `--write` / `--remove` to merge it into (or take it out of) the host's own config file.
//!
//! The entry runs the `cordon` that printed it (`current_exe`, canonicalised) with `mcp` and the
//! daemon this command was pointed at (`--socket`, or `--remote` with its certificate files, made
//! absolute), or, with `--http URL`, names cordon's HTTP front-end with the bearer token referenced
//! through the host's own mechanism (an environment variable, VS Code's `inputs`), never inline
//! unless `--inline-token` says so. Each host's file and shape is in [`Host`]; docs/agents.md is
//! the user's page.
//!
//! Editing: the file is parsed (JSON with its key order kept, [`json`]; Codex's TOML with
//! toml_edit, comments and layout kept), only the one entry is added, replaced or removed, and the
//! result written with [`file`] (backup, atomic, mode and owner kept). A file that does not parse
//! is refused with FILE:LINE:COL and left as it is.

mod file;
mod json;

use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::ValueEnum;
use serde_json::json;

use crate::error::{CliError, exit};
use crate::term::{errln, outln};
use json::Json;

/// An agent host whose config `cordon mcp config` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Host {
    /// Claude Code: `.mcp.json` (project) or `~/.claude.json` (user), `mcpServers`.
    ClaudeCode,
    /// Cursor: `.cursor/mcp.json` (project) or `~/.cursor/mcp.json` (user), `mcpServers`.
    Cursor,
    /// VS Code: `.vscode/mcp.json` (project) or the user profile's `mcp.json`, `servers`.
    Vscode,
    /// Codex: `$CODEX_HOME/config.toml` (`~/.codex/config.toml`), `[mcp_servers.NAME]`.
    Codex,
    /// Windsurf: `~/.codeium/windsurf/mcp_config.json`, `mcpServers`.
    Windsurf,
    /// Claude Desktop (macOS and Windows only): a snippet to paste there, over ssh.
    ClaudeDesktop,
}

/// Which of a host's config files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scope {
    /// The project's file, in the current directory.
    Project,
    /// The user's file, in the home directory.
    User,
}

/// `cordon mcp config HOST [--write | --remove] ...`
#[derive(Debug, clap::Args)]
pub struct ConfigArgs {
    /// The agent host.
    #[arg(value_enum)]
    pub host: Host,
    /// The server's name in the host's config.
    #[arg(long, default_value = "cordon", value_name = "NAME")]
    pub name: String,
    /// The project's or the user's config file, where the host has both [default: project for
    /// claude-code, cursor and vscode; user for codex and windsurf]
    #[arg(long, value_enum)]
    pub scope: Option<Scope>,
    /// This config file instead of the host's usual one.
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// Merge the entry into the host's config file (the previous file is kept as FILE.bak).
    #[arg(long, conflicts_with = "remove")]
    pub write: bool,
    /// Take the entry NAME out of the host's config file.
    #[arg(long)]
    pub remove: bool,
    /// Use cordon's HTTP front-end at URL (`cordon mcp --http ADDR` serves http://ADDR/) instead
    /// of starting `cordon mcp`; the bearer token is referenced, not written.
    #[arg(long, value_name = "URL", conflicts_with = "ssh")]
    pub http: Option<String>,
    /// With --http: the environment variable the host reads the bearer token from
    /// [default: CORDON_MCP_TOKEN]
    #[arg(long, value_name = "VAR", requires = "http", conflicts_with = "inline_token")]
    pub token_env: Option<String>,
    /// With --http: write this token into the file itself (mode 0600), `-` to read it from stdin.
    /// Codex refuses inline tokens.
    #[arg(long, value_name = "TOKEN", requires = "http")]
    pub inline_token: Option<String>,
    /// Start `cordon mcp` on [USER@]HOST over ssh: for a host that runs on another machine
    /// (Claude Desktop on macOS or Windows).
    #[arg(long, value_name = "[USER@]HOST")]
    pub ssh: Option<String>,
    /// More arguments for `cordon mcp` (after `--`), e.g. `-- --page-size 50`.
    #[arg(last = true, value_name = "MCP-ARG")]
    pub extra: Vec<String>,
}

/// What the rest of the command line said: the daemon `cordon mcp` should reach.
#[derive(Debug, Default)]
pub struct Daemon {
    pub socket: Option<PathBuf>,
    /// `--remote URL` with `--cert`, `--key`, `--ca`.
    pub remote: Option<(String, PathBuf, PathBuf, PathBuf)>,
}

/// `cordon mcp config --help`'s examples.
pub const EXAMPLES: &str = "Examples:
  cordon mcp config claude-code --write                  # this project's .mcp.json
  cordon mcp config codex --write                        # ~/.codex/config.toml
  cordon mcp config cursor --write --scope user          # ~/.cursor/mcp.json
  cordon mcp config vscode --http http://127.0.0.1:8765/mcp --write   # token asked by VS Code
  cordon mcp config claude-desktop --ssh alice@build-box # paste into Claude Desktop's file
  cordon mcp config claude-code --remove

The previous file is kept as FILE.bak; a file that does not parse is left as it is (exit 65).
Every host's file and snippet: docs/agents.md.";

/// The default variable the bearer token is read from.
pub const DEFAULT_TOKEN_ENV: &str = "CORDON_MCP_TOKEN";

/// How the host reaches cordon.
#[derive(Debug, Clone, PartialEq)]
enum Server {
    Stdio { command: String, args: Vec<String> },
    Http { url: String, auth: Auth },
}

#[derive(Debug, Clone, PartialEq)]
enum Auth {
    /// The name of the environment variable holding the token.
    Env(String),
    Inline(String),
}

/// An error of this command: its message and exit code.
struct Failure {
    code: u8,
    message: String,
}

fn usage(message: impl Into<String>) -> Failure {
    Failure { code: exit::USAGE, message: message.into() }
}

/// `cordon mcp config`: prints the snippet, or writes or removes the entry.
pub fn run(args: &ConfigArgs, daemon: &Daemon, as_json: bool) -> Result<u8, CliError> {
    match run_inner(args, daemon, as_json) {
        Ok(code) => Ok(code),
        Err(f) if f.code == exit::USAGE => Err(CliError::Usage(f.message)),
        Err(f) => {
            if as_json {
                let code = if f.code == exit::PERMISSION { "PERMISSION_DENIED" } else { "ERROR" };
                crate::cmd::output::print_json(&json!({"error": {"code": code, "message": f.message}}));
            } else {
                errln!("cordon: {}", f.message);
            }
            Ok(f.code)
        }
    }
}

fn run_inner(args: &ConfigArgs, daemon: &Daemon, as_json: bool) -> Result<u8, Failure> {
    check_name(&args.name)?;
    let scope = scope(args)?;
    if args.host == Host::ClaudeDesktop && (args.write || args.remove) {
        return Err(usage(
            "Claude Desktop does not run on Linux: its claude_desktop_config.json is on your Mac \
             (~/Library/Application Support/Claude/claude_desktop_config.json) or Windows PC \
             (%APPDATA%\\Claude\\claude_desktop_config.json). Print the snippet with `cordon mcp config \
             claude-desktop --ssh USER@THIS-HOST` and paste it into that file there",
        ));
    }
    let path = match &args.file {
        Some(f) => absolute(f)?,
        None => default_file(args.host, scope)?,
    };
    if args.remove {
        return remove(args, scope, &path, as_json);
    }
    let server = server(args, daemon)?;
    if args.write { write(args, scope, &path, &server, as_json) } else { print(args, &path, &server, as_json) }
}

/// `--scope`, checked against what the host has.
fn scope(args: &ConfigArgs) -> Result<Scope, Failure> {
    match (args.host, args.scope) {
        (Host::ClaudeCode | Host::Cursor | Host::Vscode, s) => Ok(s.unwrap_or(Scope::Project)),
        (Host::Codex, Some(Scope::Project)) => Err(usage(
            "Codex reads its MCP servers from $CODEX_HOME/config.toml (~/.codex/config.toml), and a project's \
             .codex/config.toml only in a project Codex trusts: leave out --scope, or pass --file .codex/config.toml",
        )),
        (Host::Windsurf, Some(Scope::Project)) => Err(usage(
            "Windsurf has one MCP config file, ~/.codeium/windsurf/mcp_config.json: leave out --scope project",
        )),
        (Host::ClaudeDesktop, Some(_)) => {
            Err(usage("Claude Desktop's config is on the Mac or Windows PC it runs on: leave out --scope"))
        }
        _ => Ok(Scope::User),
    }
}

/// A name every host takes as a key (VS Code's schema: a letter, then letters, digits, `_`, `-`).
fn check_name(name: &str) -> Result<(), Failure> {
    let mut chars = name.chars();
    let ok = name.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(usage(format!(
            "--name {name:?}: a server name is a letter, then up to 63 letters, digits, `_` or `-` (e.g. cordon)"
        )))
    }
}

fn home() -> Result<PathBuf, Failure> {
    if let Some(h) = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute()) {
        return Ok(h);
    }
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.dir)
        .ok_or_else(|| usage("HOME is not set and this user has no home directory: pass --file PATH"))
}

fn env_dir(var: &str) -> Option<PathBuf> {
    std::env::var_os(var).map(PathBuf::from).filter(|p| p.is_absolute())
}

fn cwd() -> Result<PathBuf, Failure> {
    std::env::current_dir().map_err(|e| usage(format!("cannot read the current directory ({e}): pass --file PATH")))
}

fn absolute(p: &Path) -> Result<PathBuf, Failure> {
    if p.is_absolute() { Ok(p.to_path_buf()) } else { Ok(cwd()?.join(p)) }
}

/// The host's config file for this scope (project files in the current directory).
fn default_file(host: Host, scope: Scope) -> Result<PathBuf, Failure> {
    Ok(match (host, scope) {
        (Host::ClaudeCode, Scope::Project) => cwd()?.join(".mcp.json"),
        (Host::ClaudeCode, Scope::User) => env_dir("CLAUDE_CONFIG_DIR").unwrap_or(home()?).join(".claude.json"),
        (Host::Cursor, Scope::Project) => cwd()?.join(".cursor/mcp.json"),
        (Host::Cursor, Scope::User) => home()?.join(".cursor/mcp.json"),
        (Host::Vscode, Scope::Project) => cwd()?.join(".vscode/mcp.json"),
        // VS Code (stable) keeps the user profile's MCP servers beside its settings.json.
        (Host::Vscode, Scope::User) => {
            env_dir("XDG_CONFIG_HOME").unwrap_or(home()?.join(".config")).join("Code/User/mcp.json")
        }
        (Host::Codex, _) => env_dir("CODEX_HOME").unwrap_or(home()?.join(".codex")).join("config.toml"),
        (Host::Windsurf, _) => home()?.join(".codeium/windsurf/mcp_config.json"),
        (Host::ClaudeDesktop, _) => PathBuf::from("claude_desktop_config.json"),
    })
}

/// A word for a remote shell (ssh runs the command through the login shell there).
fn shell_word(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-=:,@+%".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The server entry's transport: `cordon mcp ...` (maybe over ssh) or the HTTP URL.
fn server(args: &ConfigArgs, daemon: &Daemon) -> Result<Server, Failure> {
    if let Some(url) = &args.http {
        check_url(url)?;
        if args.host == Host::ClaudeDesktop {
            return Err(usage(
                "Claude Desktop's claude_desktop_config.json starts local (stdio) servers only: reach cordon with \
                 `--ssh USER@THIS-HOST` instead of --http",
            ));
        }
        let auth = match (&args.inline_token, &args.token_env) {
            (Some(_), _) if args.host == Host::Codex => {
                return Err(usage(
                    "Codex refuses an inline bearer token in config.toml: leave out --inline-token; Codex reads the token \
                     from the variable --token-env names (default CORDON_MCP_TOKEN)",
                ));
            }
            (Some(t), _) => Auth::Inline(inline_token(t)?),
            (None, Some(_)) if args.host == Host::Vscode => {
                return Err(usage(
                    "VS Code asks for the token itself (an `inputs` promptString it keeps in its secret storage): leave \
                     out --token-env, or write it with --inline-token",
                ));
            }
            (None, v) => {
                let var = v.clone().unwrap_or_else(|| DEFAULT_TOKEN_ENV.to_string());
                check_var(&var)?;
                Auth::Env(var)
            }
        };
        if !args.extra.is_empty() {
            return Err(usage("arguments after `--` are for `cordon mcp`, which --http does not start"));
        }
        return Ok(Server::Http { url: url.clone(), auth });
    }
    let exe = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .map_err(|e| usage(format!("cannot tell where this cordon is ({e}); is its file still there?")))?;
    let exe = exe
        .to_str()
        .ok_or_else(|| usage(format!("this cordon's path {} is not UTF-8; hosts cannot start it", exe.display())))?
        .to_string();
    let mut mcp = vec!["mcp".to_string()];
    if let Some((url, cert, key, ca)) = &daemon.remote {
        mcp.push("--remote".into());
        mcp.push(url.clone());
        for (flag, p) in [("--cert", cert), ("--key", key), ("--ca", ca)] {
            mcp.push(flag.into());
            mcp.push(path_arg(p)?);
        }
    } else if let Some(socket) = &daemon.socket {
        mcp.push("--socket".into());
        mcp.push(path_arg(socket)?);
    } else {
        // This user's own daemon, found through XDG_RUNTIME_DIR, which a host may not pass on
        // (Codex starts servers with a short list of variables): named, so that the host reaches
        // the daemon this command would. The system daemon's socket is the default anyway.
        let found = cordon_proto::client_socket_path();
        if found != Path::new(cordon_proto::SYSTEM_SOCKET) && found.exists() {
            mcp.push("--socket".into());
            mcp.push(path_arg(&found)?);
        }
    }
    mcp.extend(args.extra.iter().cloned());
    if args.host == Host::ClaudeDesktop && args.ssh.is_none() {
        return Err(usage(
            "Claude Desktop runs on macOS and Windows, not here: give the machine it reaches this one as, \
             `cordon mcp config claude-desktop --ssh USER@THIS-HOST`",
        ));
    }
    match &args.ssh {
        Some(host) => {
            let ok = !host.is_empty()
                && !host.starts_with('-')
                && host.chars().all(|c| c.is_ascii_alphanumeric() || "._-@:[]%".contains(c));
            if !ok {
                return Err(usage(format!(
                    "--ssh {host:?}: give [USER@]HOST (letters, digits, `.`, `-`, `_`, `@`; not starting with `-`)"
                )));
            }
            let mut ssh_args = vec![host.clone(), shell_word(&exe)];
            ssh_args.extend(mcp.iter().map(|a| shell_word(a)));
            Ok(Server::Stdio { command: "ssh".into(), args: ssh_args })
        }
        None => Ok(Server::Stdio { command: exe, args: mcp }),
    }
}

fn path_arg(p: &Path) -> Result<String, Failure> {
    let abs = absolute(p)?;
    abs.to_str()
        .map(str::to_string)
        .ok_or_else(|| usage(format!("{} is not UTF-8; hosts cannot pass it", abs.display())))
}

fn check_url(url: &str) -> Result<(), Failure> {
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
    let Some(rest) = rest else {
        return Err(usage(format!(
            "--http {url:?}: give the URL of `cordon mcp --http ADDR`, e.g. http://127.0.0.1:8765/mcp"
        )));
    };
    let authority = rest.split('/').next().unwrap_or("");
    if authority.is_empty() {
        return Err(usage(format!("--http {url:?}: the URL names no host")));
    }
    if authority.contains('@') {
        return Err(usage(format!(
            "--http {url:?}: credentials do not go in the URL; cordon's HTTP front-end takes a bearer token (--token-env)"
        )));
    }
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) || url.contains("${") {
        return Err(usage(format!("--http {url:?}: the URL holds spaces, control characters or `${{`")));
    }
    Ok(())
}

fn check_var(var: &str) -> Result<(), Failure> {
    let mut chars = var.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(usage(format!("--token-env {var:?}: an environment variable's name (letters, digits, `_`)")))
    }
}

/// `--inline-token TOKEN`, or `-`: the first line of stdin.
fn inline_token(given: &str) -> Result<String, Failure> {
    let token = if given == "-" {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .map_err(|e| usage(format!("--inline-token -: cannot read stdin: {e}")))?;
        line.trim().to_string()
    } else {
        given.to_string()
    };
    if token.is_empty() || !token.chars().all(|c| c.is_ascii_graphic()) || token.contains("${") {
        return Err(usage(
            "--inline-token: a token is printable ASCII without spaces (as `cordon token issue` prints it)",
        ));
    }
    Ok(token)
}

/// The key the host keeps its servers under.
fn servers_key(host: Host) -> &'static str {
    if host == Host::Vscode { "servers" } else { "mcpServers" }
}

/// VS Code's `inputs` id for the token of server NAME.
fn input_id(name: &str) -> String {
    format!("{name}-token")
}

/// The host's entry for the server, and VS Code's `inputs` item for its token.
fn json_entry(host: Host, name: &str, server: &Server) -> (Json, Option<Json>) {
    match server {
        Server::Stdio { command, args } => {
            let body = [("command", Json::str(command)), ("args", Json::strings(args)), ("env", Json::object())];
            let entry = match host {
                Host::ClaudeCode | Host::Vscode => {
                    let [c, a, e] = body;
                    Json::obj([("type", Json::str("stdio")), c, a, e])
                }
                _ => Json::obj(body),
            };
            (entry, None)
        }
        Server::Http { url, auth } => {
            let (bearer, input) = match (host, auth) {
                (_, Auth::Inline(t)) => (format!("Bearer {t}"), None),
                (Host::ClaudeCode, Auth::Env(v)) => (format!("Bearer ${{{v}}}"), None),
                (Host::Vscode, Auth::Env(_)) => {
                    let id = input_id(name);
                    let input = Json::obj([
                        ("type", Json::str("promptString")),
                        ("id", Json::str(&id)),
                        ("description", Json::str(&format!("cordon bearer token for {name} (`cordon token issue`)"))),
                        ("password", Json::Bool(true)),
                    ]);
                    (format!("Bearer ${{input:{id}}}"), Some(input))
                }
                (_, Auth::Env(v)) => (format!("Bearer ${{env:{v}}}"), None),
            };
            let headers = Json::obj([("Authorization", Json::String(bearer))]);
            let entry = match host {
                Host::ClaudeCode | Host::Vscode => {
                    Json::obj([("type", Json::str("http")), ("url", Json::str(url)), ("headers", headers)])
                }
                Host::Windsurf => Json::obj([("serverUrl", Json::str(url)), ("headers", headers)]),
                _ => Json::obj([("url", Json::str(url)), ("headers", headers)]),
            };
            (entry, input)
        }
    }
}

/// Codex's `[mcp_servers.NAME]` table (never an inline token: refused before).
fn codex_table(server: &Server) -> toml_edit::Table {
    let mut t = toml_edit::Table::new();
    match server {
        Server::Stdio { command, args } => {
            t.insert("command", toml_edit::value(command.as_str()));
            let arr: toml_edit::Array = args.iter().map(String::as_str).collect();
            t.insert("args", toml_edit::value(arr));
            t.insert("env", toml_edit::value(toml_edit::InlineTable::new()));
        }
        Server::Http { url, auth } => {
            t.insert("url", toml_edit::value(url.as_str()));
            if let Auth::Env(v) = auth {
                t.insert("bearer_token_env_var", toml_edit::value(v.as_str()));
            }
        }
    }
    t
}

/// The whole snippet as a document of the host's format.
fn snippet(host: Host, name: &str, server: &Server) -> Snippet {
    if host == Host::Codex {
        let mut doc = toml_edit::DocumentMut::new();
        let mut servers = toml_edit::Table::new();
        servers.set_implicit(true);
        servers.insert(name, toml_edit::Item::Table(codex_table(server)));
        doc.insert("mcp_servers", toml_edit::Item::Table(servers));
        return Snippet::Toml(doc.to_string());
    }
    let (entry, input) = json_entry(host, name, server);
    let mut servers = Json::object();
    if let Some(m) = servers.as_object_mut() {
        m.insert(name.to_string(), entry);
    }
    let mut root = Json::object();
    if let Some(m) = root.as_object_mut() {
        if let Some(input) = input {
            m.insert("inputs".into(), Json::Array(vec![input]));
        }
        m.insert(servers_key(host).into(), servers);
    }
    Snippet::Json(root)
}

enum Snippet {
    Json(Json),
    Toml(String),
}

impl Snippet {
    fn text(&self) -> String {
        match self {
            Snippet::Json(j) => j.pretty(),
            Snippet::Toml(t) => t.clone(),
        }
    }
    fn value(&self) -> serde_json::Value {
        match self {
            Snippet::Json(j) => j.to_value(),
            Snippet::Toml(t) => serde_json::Value::String(t.clone()),
        }
    }
}

fn host_name(host: Host) -> &'static str {
    match host {
        Host::ClaudeCode => "Claude Code",
        Host::Cursor => "Cursor",
        Host::Vscode => "VS Code",
        Host::Codex => "Codex",
        Host::Windsurf => "Windsurf",
        Host::ClaudeDesktop => "Claude Desktop",
    }
}

fn host_arg(host: Host) -> String {
    host.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default()
}

/// Writes to stdout, quietly ending on a closed pipe.
fn out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush());
}

fn print(args: &ConfigArgs, path: &Path, server: &Server, as_json: bool) -> Result<u8, Failure> {
    let snip = snippet(args.host, &args.name, server);
    let file = if args.host == Host::ClaudeDesktop {
        "claude_desktop_config.json on the Mac (~/Library/Application Support/Claude/) or Windows PC (%APPDATA%\\Claude\\)"
            .to_string()
    } else {
        path.display().to_string()
    };
    if as_json {
        crate::cmd::output::print_json(&json!({
            "host": host_arg(args.host), "name": args.name, "file": file, "action": "printed", "snippet": snip.value(),
        }));
        return Ok(exit::OK);
    }
    out(&snip.text());
    if args.host == Host::ClaudeDesktop {
        errln!("# {}: merge this into {file}; quit and reopen Claude Desktop", host_name(args.host));
    } else {
        errln!(
            "# {}: this goes in {file}; `cordon mcp config {} --write` merges it there",
            host_name(args.host),
            host_arg(args.host)
        );
    }
    Ok(exit::OK)
}

/// What an edit did to the entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Added,
    Replaced,
    Unchanged,
    Removed,
    Absent,
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::Added => "added",
            Action::Replaced => "replaced",
            Action::Unchanged => "unchanged",
            Action::Removed => "removed",
            Action::Absent => "absent",
        }
    }
}

/// A file that does not parse: FILE:LINE:COL, exit 65, nothing changed.
fn unparsable(path: &Path, line: usize, col: usize, what: &str) -> Failure {
    Failure {
        code: exit::DATA,
        message: format!(
            "{}:{line}:{col}: {what}; nothing changed (fix the file, or print the snippet without --write and merge it \
             by hand)",
            path.display()
        ),
    }
}

/// The new text of the file for this edit, or None when nothing changes.
fn edit(
    args: &ConfigArgs,
    path: &Path,
    text: Option<&str>,
    server: Option<&Server>,
) -> Result<(Action, Option<String>), Failure> {
    if args.host == Host::Codex {
        edit_toml(&args.name, path, text, server)
    } else {
        edit_json(args.host, &args.name, path, text, server)
    }
}

fn edit_json(
    host: Host,
    name: &str,
    path: &Path,
    text: Option<&str>,
    server: Option<&Server>,
) -> Result<(Action, Option<String>), Failure> {
    let mut root = match text {
        Some(t) if !t.trim().is_empty() => serde_json::from_str::<Json>(t)
            .map_err(|e| unparsable(path, e.line(), e.column(), &format!("not valid JSON ({e})")))?,
        _ => Json::object(),
    };
    let kind = root.kind();
    let Some(top) = root.as_object_mut() else {
        return Err(unparsable(path, 1, 1, &format!("the file holds {kind}, not a JSON object")));
    };
    let key = servers_key(host);
    let (action, changed) = match server {
        Some(server) => {
            let (entry, input) = json_entry(host, name, server);
            let servers = top.entry(key.to_string()).or_insert_with(Json::object);
            let skind = servers.kind();
            let Some(servers) = servers.as_object_mut() else {
                return Err(unparsable(path, 1, 1, &format!("\"{key}\" is {skind}, not an object")));
            };
            let action = match servers.get(name) {
                None => Action::Added,
                Some(old) if *old == entry => Action::Unchanged,
                Some(_) => Action::Replaced,
            };
            servers.insert(name.to_string(), entry);
            let mut changed = action != Action::Unchanged;
            if let Some(input) = input {
                let inputs = top.entry("inputs".to_string()).or_insert_with(|| Json::Array(Vec::new()));
                let ikind = inputs.kind();
                let Json::Array(items) = inputs else {
                    return Err(unparsable(path, 1, 1, &format!("\"inputs\" is {ikind}, not an array")));
                };
                let id = input_id(name);
                let same_id = |v: &Json| v.as_object().and_then(|o| o.get("id")) == Some(&Json::String(id.clone()));
                match items.iter_mut().find(|v| same_id(v)) {
                    Some(old) if *old == input => {}
                    Some(old) => {
                        *old = input;
                        changed = true;
                    }
                    None => {
                        items.push(input);
                        changed = true;
                    }
                }
            }
            (if changed && action == Action::Unchanged { Action::Replaced } else { action }, changed)
        }
        None => {
            let removed = match top.get_mut(key) {
                None => false,
                Some(Json::Object(servers)) => servers.shift_remove(name).is_some(),
                Some(other) => {
                    let skind = other.kind();
                    return Err(unparsable(path, 1, 1, &format!("\"{key}\" is {skind}, not an object")));
                }
            };
            if host == Host::Vscode && removed {
                // The token input goes too, unless another server still uses it.
                let id = input_id(name);
                let used = top.get(key).is_some_and(|s| s.mentions(&format!("${{input:{id}}}")));
                if !used && let Some(Json::Array(items)) = top.get_mut("inputs") {
                    items.retain(|v| v.as_object().and_then(|o| o.get("id")) != Some(&Json::String(id.clone())));
                }
            }
            if removed { (Action::Removed, true) } else { (Action::Absent, false) }
        }
    };
    Ok((action, changed.then(|| root.pretty())))
}

fn edit_toml(
    name: &str,
    path: &Path,
    text: Option<&str>,
    server: Option<&Server>,
) -> Result<(Action, Option<String>), Failure> {
    let text = text.unwrap_or("");
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
        let (line, col) = e.span().map_or((1, 1), |s| line_col(text, s.start));
        let msg = e.message().trim().to_string();
        unparsable(path, line, col, &format!("not valid TOML ({msg})"))
    })?;
    let Some(server) = server else {
        let removed = match doc.get_mut("mcp_servers") {
            None => false,
            Some(item) => match item.as_table_like_mut() {
                Some(t) => t.remove(name).is_some(),
                None => {
                    let kind = item.type_name();
                    return Err(unparsable(path, 1, 1, &format!("mcp_servers is {kind}, not a table")));
                }
            },
        };
        return Ok(if removed { (Action::Removed, Some(doc.to_string())) } else { (Action::Absent, None) });
    };
    let mut table = codex_table(server);
    let servers = doc.entry("mcp_servers").or_insert_with(|| {
        let mut t = toml_edit::Table::new();
        t.set_implicit(true);
        toml_edit::Item::Table(t)
    });
    let new_value = semantic(&toml_edit::Item::Table(table.clone()));
    let action = match servers {
        toml_edit::Item::Table(servers) => {
            let action = match servers.get(name) {
                None => Action::Added,
                Some(old) if semantic(old) == new_value => Action::Unchanged,
                Some(old) => {
                    // In its old place, with the comments above its header.
                    if let Some(old) = old.as_table() {
                        table.set_position(old.position());
                        *table.decor_mut() = old.decor().clone();
                    }
                    Action::Replaced
                }
            };
            if action != Action::Unchanged {
                servers.insert(name, toml_edit::Item::Table(table));
            }
            action
        }
        toml_edit::Item::Value(toml_edit::Value::InlineTable(servers)) => {
            let action = match servers.get(name) {
                None => Action::Added,
                Some(old) if semantic(&toml_edit::Item::Value(old.clone())) == new_value => Action::Unchanged,
                Some(_) => Action::Replaced,
            };
            if action != Action::Unchanged {
                servers.insert(name, toml_edit::Value::InlineTable(table.into_inline_table()));
            }
            action
        }
        other => {
            let kind = other.type_name();
            return Err(unparsable(path, 1, 1, &format!("mcp_servers is {kind}, not a table")));
        }
    };
    Ok((action, (action != Action::Unchanged).then(|| doc.to_string())))
}

/// An item's value without its formatting, to compare entries.
fn semantic(item: &toml_edit::Item) -> Option<toml::Value> {
    let mut doc = toml_edit::DocumentMut::new();
    let mut item = item.clone();
    if let toml_edit::Item::Table(t) = &mut item {
        t.set_position(None);
    }
    doc.insert("x", item);
    toml::from_str::<toml::Table>(&doc.to_string()).ok()?.remove("x")
}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// The file's mode when it is new: a project's file is shared (0644), a user's is theirs (0600).
fn new_mode(host: Host, scope: Scope) -> u32 {
    match (host, scope) {
        (Host::ClaudeCode | Host::Cursor | Host::Vscode, Scope::Project) => 0o644,
        _ => 0o600,
    }
}

/// Reads, edits and replaces the file, again from the start if it changed meanwhile.
fn apply(
    args: &ConfigArgs,
    path: &Path,
    mode: u32,
    private: bool,
    server: Option<&Server>,
) -> Result<(Action, PathBuf, Option<file::Written>), Failure> {
    let fail = |message: String| Failure { code: exit::FAILURE, message };
    file::root_guard(path).map_err(|message| Failure { code: exit::PERMISSION, message })?;
    for _ in 0..5 {
        let current = match file::read(path) {
            Ok(c) => c,
            Err(file::WriteError::Denied(message)) => return Err(Failure { code: exit::PERMISSION, message }),
            Err(file::WriteError::Io(m)) => return Err(fail(m)),
            Err(file::WriteError::Changed) => continue,
        };
        let (action, text) = edit(args, &current.path, current.text.as_deref(), server)?;
        let Some(text) = text else {
            return Ok((action, current.path, None));
        };
        match file::replace(&current, &text, mode, private) {
            Ok(w) => return Ok((action, current.path, Some(w))),
            Err(file::WriteError::Changed) => continue,
            Err(file::WriteError::Io(m)) => return Err(fail(m)),
            Err(file::WriteError::Denied(message)) => return Err(Failure { code: exit::PERMISSION, message }),
        }
    }
    Err(fail(format!("{} keeps changing while cordon writes it; close the host and retry", path.display())))
}

fn next_step(host: Host, scope: Scope, path: &Path) -> String {
    match (host, scope) {
        (Host::ClaudeCode, Scope::Project) => format!(
            "next: run `claude` in {} and approve the project's server once (`claude mcp list` shows it); \
             restart Claude Code sessions that are open",
            path.parent().map_or_else(|| ".".into(), |p| p.display().to_string())
        ),
        (Host::ClaudeCode, Scope::User) => {
            "next: `claude mcp list` shows it; restart Claude Code sessions that are open".into()
        }
        (Host::Cursor, _) => "next: reload Cursor; Cursor Settings > MCP lists the server".into(),
        (Host::Vscode, _) => "next: in VS Code run `MCP: List Servers` and start the server".into(),
        (Host::Codex, _) => "next: `codex mcp list` shows it; new Codex sessions start it".into(),
        (Host::Windsurf, _) => "next: press Refresh in Windsurf's MCP servers panel (Cascade)".into(),
        (Host::ClaudeDesktop, _) => String::new(),
    }
}

fn write(args: &ConfigArgs, scope: Scope, path: &Path, server: &Server, as_json: bool) -> Result<u8, Failure> {
    let private = matches!(server, Server::Http { auth: Auth::Inline(_), .. });
    let (action, real, written) = apply(args, path, new_mode(args.host, scope), private, Some(server))?;
    let backup = written.as_ref().and_then(|w| w.backup.clone());
    if as_json {
        crate::cmd::output::print_json(&json!({
            "host": host_arg(args.host), "name": args.name, "file": real, "action": action.as_str(),
            "backup": backup, "mode": written.as_ref().map(|w| format!("{:04o}", w.mode)),
            "snippet": snippet(args.host, &args.name, server).value(),
        }));
        return Ok(exit::OK);
    }
    let what = match server {
        Server::Stdio { command, .. } if command == "ssh" => "over ssh".to_string(),
        Server::Stdio { command, .. } => format!("starting {command} mcp"),
        Server::Http { url, .. } => format!("at {url}"),
    };
    let (name, file) = (&args.name, real.display());
    match action {
        Action::Added => outln!("added MCP server {name:?} to {file} ({what})"),
        Action::Replaced => outln!("replaced the MCP server {name:?} that {file} had with this one ({what})"),
        _ => outln!("{file} already has this MCP server {name:?}; nothing written"),
    }
    if let Some(b) = &backup {
        outln!("the previous file is in {}", b.display());
    }
    if let Server::Http { auth, .. } = server {
        match auth {
            Auth::Inline(_) => {
                outln!("the token is written inline in {file}, which is now mode 0600");
                if scope == Scope::Project && args.file.is_none() {
                    errln!(
                        "cordon: warning: {file} is a project file, often committed to git; keep it out (.gitignore)"
                    );
                }
            }
            Auth::Env(var) => outln!(
                "{} reads the bearer token from ${var}: set it to a token from `cordon token issue` (an admin issues it)",
                host_name(args.host)
            ),
        }
    }
    outln!("{}", next_step(args.host, scope, &real));
    Ok(exit::OK)
}

fn remove(args: &ConfigArgs, scope: Scope, path: &Path, as_json: bool) -> Result<u8, Failure> {
    let (action, real, written) = apply(args, path, new_mode(args.host, scope), false, None)?;
    let backup = written.as_ref().and_then(|w| w.backup.clone());
    let code = if action == Action::Absent { exit::NOT_FOUND } else { exit::OK };
    if as_json {
        crate::cmd::output::print_json(&json!({
            "host": host_arg(args.host), "name": args.name, "file": real, "action": action.as_str(), "backup": backup,
        }));
        return Ok(code);
    }
    if action == Action::Absent {
        errln!("cordon: {} has no MCP server {:?}; nothing changed", real.display(), args.name);
        return Ok(code);
    }
    outln!("removed MCP server {:?} from {}", args.name, real.display());
    if let Some(b) = &backup {
        outln!("the previous file is in {}", b.display());
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("a\nbc\n", 3), (2, 2));
        assert_eq!(line_col("x", 0), (1, 1));
    }

    #[test]
    fn shell_words_quote_what_a_shell_would_split() {
        assert_eq!(shell_word("/usr/bin/cordon"), "/usr/bin/cordon");
        assert_eq!(shell_word("/a b/it's"), r"'/a b/it'\''s'");
    }
}
