//! An MCP server a policy declares (`[servers.NAME]`, docs/mcp-servers.md): a long-lived program
//! cordond starts in its own sandbox and talks to as an MCP client, whose tools cordon lists as
//! `NAME__TOOL` behind the policy's rules.
//!
//! The server's sandbox is a [`Tool`] in all but name (`launcher`): the same keys (grants,
//! network, limits, env, temp, run_as, secrets, carve-outs), parsed, probed and pinned by the
//! same code, so a server can reach nothing a tool with those keys could not. The launcher is
//! never listed and never called as a tool: only cordond's server manager starts it.
//!
//! What the server's tools look like is not policy: it is what the running server says
//! ([`crate::mcp_server::RemoteTool`]), recorded with a digest and exposed only once approved
//! (or pinned here).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::model::{Pattern, Source, Tool};

/// Separates the server's name from its tool's name in the name cordon lists (`git__git_log`).
pub const SERVER_TOOL_SEPARATOR: &str = "__";

/// One `[servers.NAME]` table, loaded.
#[derive(Debug, Clone)]
pub struct McpServer {
    /// `^[a-z][a-z0-9-]*$`, at most 32 characters (it prefixes every tool's name).
    pub name: String,
    pub description: String,
    /// The server's program and sandbox, as a tool (named `NAME`; never listed or called):
    /// `command`, `env`, grants, `network`, `limits`, `temp`, `run_as`, `secrets`, `allow`
    /// (who may call its tools), `source`, `availability` and pins.
    pub launcher: Arc<Tool>,
    /// Which of the server's tools cordon lists (`tools`, `hide`).
    pub expose: Expose,
    /// Extra rules on the arguments of the server's tools, by the tool's name on the server.
    pub rules: BTreeMap<String, Vec<ArgRule>>,
    /// One instance for every caller (`share = true`); otherwise one per identity it runs as.
    pub share: bool,
    /// A running instance no call used for this long is stopped (`idle`).
    pub idle: Duration,
    /// Longest wait for the server to start and answer `initialize` and `tools/list`
    /// (`start_timeout`).
    pub start_timeout: Duration,
    /// The digest of the tool list the policy approves itself (`pin = "sha256:HEX"`): while
    /// the server's list has that digest, no admin approval is needed.
    pub pin: Option<String>,
    /// Requests the server may make of its client (`client_requests`); everything else it
    /// asks is refused and audited.
    pub client_requests: ClientRequests,
    /// Resources and prompts exposed (`resources`, `prompts`): none unless allow-listed.
    pub resources: Expose,
    pub prompts: Expose,
    pub source: Source,
}

impl McpServer {
    /// The name cordon lists a server's tool under.
    pub fn exposed_name(&self, tool: &str) -> String {
        format!("{}{SERVER_TOOL_SEPARATOR}{tool}", self.name)
    }

    /// Whether the policy lists the server's tool `tool` (approval is decided elsewhere).
    pub fn exposes(&self, tool: &str) -> bool {
        self.expose.admits(tool)
    }
}

/// Which names of a server's list (tools, resources by URI, prompts) cordon passes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expose {
    /// None (the default for resources and prompts).
    Nothing,
    /// Exactly these (`tools = ["read_file", "list_directory"]`).
    Only(BTreeSet<String>),
    /// All but these (`hide = ["write_file"]`): a tool the server adds later is exposed once
    /// approved (lint `server-exposed-whole`).
    AllBut(BTreeSet<String>),
    /// Everything the server lists (`tools = "*"`; lint `server-exposed-whole`).
    All,
}

impl Expose {
    pub fn admits(&self, name: &str) -> bool {
        match self {
            Expose::Nothing => false,
            Expose::Only(names) => names.contains(name),
            Expose::AllBut(names) => !names.contains(name),
            Expose::All => true,
        }
    }
}

/// One extra rule on one argument of a server's tool (`[servers.NAME.rules.TOOL]`, one key per
/// argument), checked by cordond and `cordon mcp` with the same code
/// ([`crate::mcp_server::ServerTool::validate`]) after the server's own input schema.
#[derive(Debug, Clone)]
pub struct ArgRule {
    /// The argument's name (a top-level property of the tool's arguments object).
    pub argument: String,
    pub check: ArgCheck,
}

/// What an [`ArgRule`] requires of its argument.
#[derive(Debug, Clone)]
pub enum ArgCheck {
    /// A path (string) that, made absolute against the first directory and normalised without
    /// touching the filesystem (`..` refused), lies beneath one of these (`under = [...]`). The
    /// sandbox's grants still decide what the server can open; this refuses the call before it
    /// reaches the server.
    Under(Vec<PathBuf>),
    /// A string matching the whole pattern (`pattern = "..."`).
    Pattern(Pattern),
    /// A string of at most this many characters (`max_length`).
    MaxLength(u64),
    /// One of these values (`one_of = [...]`), compared as JSON.
    OneOf(Vec<serde_json::Value>),
    /// A number within bounds (`min`, `max`).
    Range { min: Option<f64>, max: Option<f64> },
    /// The argument must be absent (`absent = true`): the server's default applies.
    Absent,
    /// The argument is required even where the server's schema makes it optional (`required = true`).
    Required,
}

/// Requests an MCP server may send its client, and how cordond answers them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientRequests {
    /// `roots/list` is answered with these directories (as `file://` URIs); empty: refused.
    pub roots: Vec<PathBuf>,
}

/// Where a launcher that downloads at start would have fetched its package from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackageRegistry {
    /// npm (`npx`, `npm exec`, `pnpm dlx`, `yarn dlx`, `bunx`).
    Npm,
    /// PyPI (`uvx`, `uv tool run`, `uv run --with`, `pipx run`).
    PyPi,
    /// A URL or `npm:`/`jsr:` specifier run by `deno run`.
    Deno,
}

/// A `command` that fetches and runs a package when it starts (see [`downloads_at_start`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Download {
    /// How the command downloads, as written (`npx`, `npm exec`, `uvx`, `deno run`, ...).
    pub launcher: String,
    pub registry: PackageRegistry,
    /// The package (with its version when the command gave one), when the command names it.
    pub package: Option<String>,
    /// How to install it before it runs, and the `command` that runs the installed copy;
    /// `NAME` stands for the server's name (see [`Download::how_to_install_for`]).
    pub how_to_install: String,
}

impl Download {
    /// [`Download::how_to_install`] for the server `name`.
    pub fn how_to_install_for(&self, name: &str) -> String {
        self.how_to_install.replace("/NAME", &format!("/{name}"))
    }
}

/// Longest command (in elements) looked through; a longer one is judged on its first elements.
const MAX_ARGV_SEEN: usize = 256;
/// Wrappers looked through (`env`, `sh -c`) before giving up on finding the program.
const MAX_WRAPPERS: usize = 4;

/// Whether `command` (a server's argv) downloads a package when it starts (`npx -y PKG`,
/// `npm exec`/`npm x`, `pnpm dlx`, `pnpx`, `yarn dlx`, `bunx`, `bun x`, `uvx`, `uv tool run`,
/// `uv run --with`, `uv run` without `--offline`, `pipx run`, `deno run URL`), looking through
/// wrappers (`env`, `env -S`, `sh -c`, `corepack`, `nice`, ...) and interpreters running a
/// launcher (`node .../npx-cli.js`, `python3 -m uv`):
/// a server runs a copy installed beforehand by root, never one fetched by the sandboxed
/// process. Pure (no filesystem), so `cordon import` and the policy parser share it.
pub fn downloads_at_start(command: &[String]) -> Option<Download> {
    let argv: Vec<&str> = command.iter().take(MAX_ARGV_SEEN).map(String::as_str).collect();
    recognize(&argv, 0)
}

fn recognize(argv: &[&str], depth: usize) -> Option<Download> {
    let (first, rest) = argv.split_first()?;
    let program = first.rsplit('/').next().unwrap_or(first);
    let program = program.strip_suffix(".exe").unwrap_or(program);
    if depth >= MAX_WRAPPERS {
        return None;
    }
    // Node running npm's own scripts (`node .../npx-cli.js -y PKG`), Python running a launcher
    // module (`python3 -m uv tool run PKG`): judged as the launcher they run.
    if let Some(launcher) = as_launcher(program, rest) {
        return recognize(&launcher, depth + 1);
    }
    match program {
        "env" => match strip_env(rest) {
            EnvRest::Argv(argv) => recognize(argv, depth + 1),
            EnvRest::Split(words, argv) => {
                let joined: Vec<&str> = words.split_whitespace().chain(argv.iter().copied()).collect();
                recognize(&joined, depth + 1)
            }
        },
        "corepack" | "nice" | "nohup" | "setsid" | "stdbuf" | "exec" | "command" => {
            recognize(strip_options(rest), depth + 1)
        }
        "sh" | "bash" | "dash" | "zsh" | "ash" | "ksh" => {
            let script = shell_script(rest)?;
            shell_segments(script).find_map(|seg| recognize(&seg, depth + 1))
        }
        "npx" => npm_like("npx", rest, &["-p", "--package"]),
        "pnpx" => npm_like("pnpx", rest, &["--package"]),
        "bunx" => npm_like("bunx", rest, &["-p", "--package"]),
        "npm" => match subcommand(rest) {
            Some((sub @ ("exec" | "x"), after)) => npm_like(&format!("npm {sub}"), after, &["-p", "--package"]),
            _ => None,
        },
        "pnpm" => match subcommand(rest) {
            Some(("dlx", after)) => npm_like("pnpm dlx", after, &["--package"]),
            _ => None,
        },
        "yarn" => match subcommand(rest) {
            Some(("dlx", after)) => npm_like("yarn dlx", after, &["-p", "--package"]),
            _ => None,
        },
        "bun" => match subcommand(rest) {
            Some(("x", after)) => npm_like("bun x", after, &["-p", "--package"]),
            _ => None,
        },
        "uvx" => python_like("uvx", rest, &["--from"]),
        "uv" => match subcommand(rest) {
            Some(("tool", after)) => match subcommand(after) {
                Some((sub @ ("run" | "uvx"), after)) => python_like(&format!("uv tool {sub}"), after, &["--from"]),
                _ => None,
            },
            Some(("run", after)) => {
                let with = option_values(after, &["--with", "--with-requirements", "--with-editable"]);
                if let Some(package) = with.first() {
                    return Some(python_download("uv run --with", Some((*package).to_string()), None, Vec::new()));
                }
                // `uv run` syncs the project's (or a script's inline) dependencies from the index
                // before it runs anything, unless told to stay offline.
                let offline = after.iter().take_while(|a| **a != "--").any(|a| *a == "--offline");
                (!offline).then(|| python_download("uv run", None, None, Vec::new()))
            }
            _ => None,
        },
        "pipx" => match subcommand(rest) {
            Some(("run", after)) => python_like("pipx run", after, &["--spec"]),
            _ => None,
        },
        "deno" => match subcommand(rest) {
            Some(("run", after)) => {
                let script = after.iter().find(|a| !a.starts_with('-'))?;
                let remote = ["http://", "https://", "npm:", "jsr:"].iter().any(|p| script.starts_with(p));
                remote.then(|| deno_download(script))
            }
            _ => None,
        },
        _ => None,
    }
}

/// What `env` runs: the rest of its argv, or (`-S STRING`) the words of STRING then the rest.
enum EnvRest<'a, 'b> {
    Argv(&'b [&'a str]),
    Split(&'a str, &'b [&'a str]),
}

/// `env`'s arguments after its options and `VAR=value` assignments: the command it runs.
fn strip_env<'a, 'b>(mut rest: &'b [&'a str]) -> EnvRest<'a, 'b> {
    while let Some((a, tail)) = rest.split_first() {
        if matches!(*a, "-S" | "--split-string") {
            return match tail.split_first() {
                Some((words, after)) => EnvRest::Split(words, after),
                None => EnvRest::Argv(&[]),
            };
        }
        if let Some(words) = a.strip_prefix("--split-string=").or_else(|| a.strip_prefix("-S")) {
            return EnvRest::Split(words, tail);
        }
        if matches!(*a, "-u" | "--unset" | "-C" | "--chdir") {
            rest = tail.get(1..).unwrap_or(&[]);
        } else if a.starts_with('-') || (a.contains('=') && !a.starts_with('=')) {
            rest = tail;
        } else {
            break;
        }
    }
    EnvRest::Argv(rest)
}

/// A wrapper's arguments after its options (`nice -n 5 CMD`: a numeric value is skipped too).
fn strip_options<'a, 'b>(mut rest: &'b [&'a str]) -> &'b [&'a str] {
    while let Some((a, tail)) = rest.split_first() {
        if a.starts_with('-') || a.parse::<i64>().is_ok() {
            rest = tail;
        } else {
            break;
        }
    }
    rest
}

/// `node .../npx-cli.js ARGS` as `npx ARGS` (and npm's, pnpm's, yarn's scripts), `python3 -m uv
/// ARGS` as `uv ARGS` (and `-m pipx`).
fn as_launcher<'a>(program: &str, rest: &[&'a str]) -> Option<Vec<&'a str>> {
    let is_node = matches!(program, "node" | "nodejs");
    let is_python = program.starts_with("python") || program.starts_with("pypy");
    if is_node {
        let at = rest.iter().position(|a| !a.starts_with('-'))?;
        let script = rest[at].rsplit('/').next().unwrap_or(rest[at]);
        let launcher = match script {
            "npx-cli.js" | "npx" => "npx",
            "npm-cli.js" | "npm" => "npm",
            "pnpm.cjs" | "pnpm.js" | "pnpm" => "pnpm",
            "yarn.js" | "yarn.cjs" | "yarn" => "yarn",
            _ => return None,
        };
        return Some(std::iter::once(launcher).chain(rest[at + 1..].iter().copied()).collect());
    }
    if is_python {
        let at = rest.iter().position(|a| *a == "-m")?;
        let module = *rest.get(at + 1)?;
        let launcher = match module {
            "uv" => "uv",
            "pipx" => "pipx",
            _ => return None,
        };
        return Some(std::iter::once(launcher).chain(rest[at + 2..].iter().copied()).collect());
    }
    None
}

/// The script of `sh -c SCRIPT` (options before `-c` skipped).
fn shell_script<'a>(rest: &[&'a str]) -> Option<&'a str> {
    let at = rest.iter().position(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('c'))?;
    rest.get(at + 1).copied()
}

/// The simple commands of a shell script, split at `;`, `&&`, `||`, `|` and newlines, each
/// without a leading `exec`, `command` or `VAR=value` (a rough split: quotes are not parsed).
fn shell_segments(script: &str) -> impl Iterator<Item = Vec<&str>> {
    script.split(['\n', ';', '|', '&']).map(|seg| {
        let mut words: Vec<&str> = seg.split_whitespace().map(|w| w.trim_matches(['"', '\'', '(', ')'])).collect();
        while let Some(w) = words.first() {
            if matches!(*w, "exec" | "command" | "nohup") || (w.contains('=') && !w.starts_with('-')) {
                words.remove(0);
            } else {
                break;
            }
        }
        words
    })
}

/// The first argument not an option, and the arguments after it.
fn subcommand<'a, 'b>(rest: &'b [&'a str]) -> Option<(&'a str, &'b [&'a str])> {
    let at = rest.iter().position(|a| !a.starts_with('-'))?;
    Some((rest[at], &rest[at + 1..]))
}

/// The values of the options `names` (`--with X` or `--with=X`).
fn option_values<'a>(args: &[&'a str], names: &[&str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i];
        if a == "--" {
            break;
        }
        for n in names {
            if a == *n {
                if let Some(v) = args.get(i + 1) {
                    out.push(*v);
                }
                i += 1;
            } else if let Some(v) = a.strip_prefix(*n).and_then(|r| r.strip_prefix('=')) {
                out.push(v);
            }
        }
        i += 1;
    }
    out
}

/// Options of download launchers that take a value (so the value is not the package).
const VALUE_OPTIONS: &[&str] = &[
    "-c",
    "--call",
    "--registry",
    "--cache",
    "--userconfig",
    "-w",
    "--workspace",
    "--node-options",
    "--python",
    "-p",
    "--package",
    "--from",
    "--spec",
    "--with",
    "--index",
    "--index-url",
    "--extra-index-url",
    "--pip-args",
];

/// The package (named by one of `package_options`, else the first argument not an option), the
/// program to run when an option named the package, and the arguments passed on.
fn split_launch<'a>(args: &[&'a str], package_options: &[&str]) -> (Option<&'a str>, Option<&'a str>, Vec<&'a str>) {
    let mut package = option_values(args, package_options).first().copied();
    let mut i = 0;
    while i < args.len() {
        let a = args[i];
        if a == "--" {
            i += 1;
            break;
        }
        if !a.starts_with('-') {
            break;
        }
        if !a.contains('=') && VALUE_OPTIONS.contains(&a) {
            i += 1;
        }
        i += 1;
    }
    let positional = args.get(i..).unwrap_or(&[]);
    let (program, rest) = match positional.split_first() {
        Some((p, rest)) => (Some(*p), rest.to_vec()),
        None => (None, Vec::new()),
    };
    match package {
        Some(_) => (package, program, rest),
        None => {
            package = program;
            (package, None, rest)
        }
    }
}

fn npm_like(launcher: &str, args: &[&str], package_options: &[&str]) -> Option<Download> {
    let (package, program, rest) = split_launch(args, package_options);
    let (name, version) = match package {
        Some(p) => split_npm_version(p),
        None => ("PACKAGE", None),
    };
    let bin = program.map(str::to_string).unwrap_or_else(|| match name.rsplit_once('/') {
        Some(_) => "BIN".to_string(),
        None => name.to_string(),
    });
    let spec = format!("{name}@{}", version.unwrap_or("VERSION"));
    let command = command_hint(&format!("/opt/cordon/mcp/NAME/node_modules/.bin/{bin}"), &rest);
    let mut how = format!(
        "install it first, as root: `npm install --prefix /opt/cordon/mcp/NAME {spec}`, then write command = {command}"
    );
    if bin == "BIN" {
        how.push_str(" (BIN: the package's program, listed by `ls /opt/cordon/mcp/NAME/node_modules/.bin`)");
    }
    Some(Download {
        launcher: launcher.to_string(),
        registry: PackageRegistry::Npm,
        package: package.map(str::to_string),
        how_to_install: how,
    })
}

/// `@scope/pkg@1.2.3` -> (`@scope/pkg`, `1.2.3`).
fn split_npm_version(spec: &str) -> (&str, Option<&str>) {
    let search_from = usize::from(spec.starts_with('@'));
    match spec[search_from..].find('@') {
        Some(at) => {
            let at = at + search_from;
            (&spec[..at], Some(&spec[at + 1..]).filter(|v| !v.is_empty()))
        }
        None => (spec, None),
    }
}

fn python_like(launcher: &str, args: &[&str], package_options: &[&str]) -> Option<Download> {
    let (package, program, rest) = split_launch(args, package_options);
    Some(python_download(launcher, package.map(str::to_string), program, rest))
}

fn python_download(launcher: &str, package: Option<String>, program: Option<&str>, rest: Vec<&str>) -> Download {
    let (name, version) = match package.as_deref() {
        Some(p) => split_python_version(p),
        None => ("PACKAGE".to_string(), None),
    };
    let bin = program.map(str::to_string).unwrap_or_else(|| {
        let base = name.split('[').next().unwrap_or(&name);
        if package.is_some() { base.to_string() } else { "BIN".to_string() }
    });
    let spec = format!("{name}=={}", version.unwrap_or_else(|| "VERSION".to_string()));
    let command = command_hint(&format!("/opt/cordon/mcp/NAME/bin/{bin}"), &rest);
    Download {
        launcher: launcher.to_string(),
        registry: PackageRegistry::PyPi,
        package,
        how_to_install: format!(
            "install it first, as root: `python3 -m venv /opt/cordon/mcp/NAME && /opt/cordon/mcp/NAME/bin/pip install \
             '{spec}'`, then write command = {command}"
        ),
    }
}

/// `pkg==1.2`, `pkg@1.2` (uvx) -> (`pkg`, `1.2`).
fn split_python_version(spec: &str) -> (String, Option<String>) {
    if let Some((name, version)) = spec.split_once("==") {
        return (name.to_string(), Some(version.to_string()));
    }
    if let Some((name, version)) = spec.split_once('@') {
        return (name.trim().to_string(), Some(version.trim().to_string()).filter(|v| !v.is_empty() && v != "latest"));
    }
    let end = spec.find(['<', '>', '=', '~', '!', ' ']).unwrap_or(spec.len());
    (spec[..end].to_string(), None)
}

fn deno_download(script: &str) -> Download {
    Download {
        launcher: "deno run".to_string(),
        registry: PackageRegistry::Deno,
        package: Some(script.to_string()),
        how_to_install: format!(
            "fetch it first, as root: `DENO_DIR=/opt/cordon/mcp/NAME deno cache {script}`, then run it with \
             env = {{ DENO_DIR = \"/opt/cordon/mcp/NAME\" }} and `deno run --cached-only` (read grant on \
             /opt/cordon/mcp/NAME)"
        ),
    }
}

/// `["PROGRAM", "ARG", ...]` as TOML.
fn command_hint(program: &str, rest: &[&str]) -> String {
    let items: Vec<String> = std::iter::once(program).chain(rest.iter().copied()).map(|s| format!("{s:?}")).collect();
    format!("[{}]", items.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dl(argv: &[&str]) -> Option<Download> {
        downloads_at_start(&argv.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[track_caller]
    fn refused(argv: &[&str], launcher: &str, package: Option<&str>, hint: &str) {
        let d = dl(argv).unwrap_or_else(|| panic!("{argv:?} not recognized"));
        assert_eq!(d.launcher, launcher, "{argv:?}");
        assert_eq!(d.package.as_deref(), package, "{argv:?}");
        assert!(d.how_to_install.contains(hint), "{argv:?}: {}", d.how_to_install);
    }

    #[test]
    fn npm_launchers_are_recognized() {
        refused(
            &["npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv"],
            "npx",
            Some("@modelcontextprotocol/server-filesystem"),
            "npm install --prefix /opt/cordon/mcp/NAME @modelcontextprotocol/server-filesystem@VERSION`, then write \
             command = [\"/opt/cordon/mcp/NAME/node_modules/.bin/BIN\", \"/srv\"]",
        );
        refused(&["/usr/bin/npx", "--yes", "cowsay@1.5.0", "hi"], "npx", Some("cowsay@1.5.0"), "cowsay@1.5.0");
        refused(&["npx", "-p", "@a/b@2", "b-bin", "x"], "npx", Some("@a/b@2"), ".bin/b-bin\", \"x\"]");
        refused(&["npx", "--package=@a/b", "b"], "npx", Some("@a/b"), "@a/b@VERSION");
        refused(&["npm", "exec", "--yes", "--", "pkg"], "npm exec", Some("pkg"), "pkg@VERSION");
        refused(&["npm", "--silent", "x", "pkg@1"], "npm x", Some("pkg@1"), ".bin/pkg\"]");
        refused(&["npm", "exec", "--package=pkg", "--", "bin", "a"], "npm exec", Some("pkg"), ".bin/bin\", \"a\"]");
        refused(&["pnpm", "dlx", "pkg"], "pnpm dlx", Some("pkg"), "pkg@VERSION");
        refused(&["pnpx", "pkg"], "pnpx", Some("pkg"), "pkg@VERSION");
        refused(&["yarn", "dlx", "pkg"], "yarn dlx", Some("pkg"), "pkg@VERSION");
        refused(&["bunx", "pkg"], "bunx", Some("pkg"), "pkg@VERSION");
        refused(&["bun", "x", "pkg"], "bun x", Some("pkg"), "pkg@VERSION");
        refused(&["npx"], "npx", None, "PACKAGE@VERSION");
    }

    #[test]
    fn python_launchers_are_recognized() {
        refused(
            &["uvx", "mcp-server-git", "--repository", "/srv/repo"],
            "uvx",
            Some("mcp-server-git"),
            "python3 -m venv /opt/cordon/mcp/NAME && /opt/cordon/mcp/NAME/bin/pip install 'mcp-server-git==VERSION'`, \
             then write command = [\"/opt/cordon/mcp/NAME/bin/mcp-server-git\", \"--repository\", \"/srv/repo\"]",
        );
        refused(&["uvx", "mcp-server-fetch@2025.1.1"], "uvx", Some("mcp-server-fetch@2025.1.1"), "==2025.1.1'");
        refused(&["uvx", "--from", "pkg==1.0", "tool"], "uvx", Some("pkg==1.0"), "bin/tool\"]");
        refused(&["uv", "tool", "run", "pkg"], "uv tool run", Some("pkg"), "'pkg==VERSION'");
        refused(&["uv", "run", "--with", "mcp", "server.py"], "uv run --with", Some("mcp"), "'mcp==VERSION'");
        refused(&["pipx", "run", "pkg"], "pipx run", Some("pkg"), "'pkg==VERSION'");
        refused(&["pipx", "run", "--spec", "pkg>=1", "tool"], "pipx run", Some("pkg>=1"), "bin/tool\"]");
    }

    #[test]
    fn deno_and_wrappers_are_recognized() {
        refused(
            &["deno", "run", "-A", "https://x.example/s.ts"],
            "deno run",
            Some("https://x.example/s.ts"),
            "deno cache",
        );
        refused(&["deno", "run", "npm:pkg"], "deno run", Some("npm:pkg"), "--cached-only");
        refused(&["env", "-u", "X", "A=b", "npx", "-y", "pkg"], "npx", Some("pkg"), "pkg@VERSION");
        refused(&["/bin/sh", "-c", "cd /x && exec npx -y pkg"], "npx", Some("pkg"), "pkg@VERSION");
        refused(&["bash", "-lc", "FOO=1 uvx pkg"], "uvx", Some("pkg"), "'pkg==VERSION'");
        refused(&["env", "-S", "npx -y pkg", "/srv"], "npx", Some("pkg"), ".bin/pkg\", \"/srv\"]");
        refused(&["/usr/bin/env", "-Snpx -y pkg"], "npx", Some("pkg"), "pkg@VERSION");
        refused(&["node", "/usr/lib/node_modules/npm/bin/npx-cli.js", "-y", "pkg"], "npx", Some("pkg"), "pkg@VERSION");
        refused(
            &["nodejs", "/usr/lib/node_modules/npm/bin/npm-cli.js", "exec", "pkg"],
            "npm exec",
            Some("pkg"),
            "pkg@",
        );
        refused(&["python3", "-m", "uv", "tool", "run", "pkg"], "uv tool run", Some("pkg"), "'pkg==VERSION'");
        refused(&["/usr/bin/python3.12", "-m", "pipx", "run", "pkg"], "pipx run", Some("pkg"), "'pkg==VERSION'");
        refused(&["corepack", "pnpm", "dlx", "pkg"], "pnpm dlx", Some("pkg"), "pkg@VERSION");
        refused(&["nice", "-n", "5", "bunx", "pkg"], "bunx", Some("pkg"), "pkg@VERSION");
        refused(&["uv", "run", "--project", "/opt/x", "server"], "uv run", None, "'PACKAGE==VERSION'");
    }

    #[test]
    fn installed_programs_are_not_downloads() {
        for argv in [
            &["/opt/cordon/mcp/fs/node_modules/.bin/mcp-server-filesystem", "/srv"][..],
            &["node", "/opt/cordon/mcp/fs/node_modules/x/dist/index.js"],
            &["npm", "run", "start"],
            &["pnpm", "exec", "x"],
            &["uv", "run", "--offline", "server.py"],
            &["node", "/opt/cordon/mcp/fs/node_modules/x/dist/index.js"],
            &["python3", "-m", "mcp_server_git"],
            &["python3", "-m", "pip", "--version"],
            &["env", "-S", "/opt/x --flag"],
            &["deno", "run", "--cached-only", "/opt/s.ts"],
            &["python3", "-m", "mcp_server_git"],
            &["sh", "-c", "exec /opt/x"],
            &["env"],
            &[],
        ] {
            assert_eq!(dl(argv), None, "{argv:?}");
        }
        let d = dl(&["npx", "-y", "pkg"]).expect("npx");
        assert!(d.how_to_install_for("fs").contains("/opt/cordon/mcp/fs/node_modules/.bin/pkg"));
    }
}
