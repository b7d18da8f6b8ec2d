//! The policy authoring reference (served by the MCP `describe_schema` tool and
//! `cordon policy reference`), generated from the code's own definitions: the key tables, the
//! limits, the error codes, the sandbox defaults and the seccomp list. A test loads the annotated
//! example, so the example cannot drift from the loader either.

use std::fmt::Write as _;

use super::defaults::{DEFAULT_READ, DEFAULT_READ_EXEC, DEFAULT_WRITE_FILES};
use super::keys::{
    BUDGET_KEYS, CLIENT_REQUEST_KEYS, FILE_KEYS, GRANT_KEYS, HOST_KEYS, KeyDoc, LIFT_KEYS, LIMIT_KEYS, NETWORK_KEYS,
    PARAM_KEYS, SECRET_KEYS, SERVER_KEYS, SERVER_RULE_KEYS, SOURCE_KEYS, STEP_KEYS, TEMP_KEYS, TOOL_KEYS,
    TOOL_SECRET_KEYS, WORKFLOW_KEYS,
};
use super::model::{
    BASE_ENV, DEFAULT_MAX_OUTPUT, DEFAULT_TIMEOUT, FORBIDDEN_ENV, MAX_OUTPUT_RANGE, MAX_SAFE_INTEGER, REGEX_MAX_LEN,
    SEARCH_PATH, TIMEOUT_RANGE,
};
use super::units::{format_duration, format_size};
use crate::code::ErrorCode;

/// An annotated policy that exercises most keys; it must load (a test checks).
pub const EXAMPLE: &str = r#"# /etc/cordon/policies.d/project.toml
version = 1

[defaults]                          # every tool in this file starts from these
timeout = "2m"
max_output = "256KiB"
read = ["/srv/project"]             # readable trees, beyond the system directories
env = { LANG = "C.UTF-8" }

[tools.run-tests]
description = "Run the project's tests, optionally only those matching a filter"
reason = "agents must check their changes; the Makefile is reviewed like code"
command = ["make", "-C", "/srv/project", "test", "FILTER={{filter}}"]
write = ["/srv/project/target"]     # build output only
exec = ["/srv/project/target"]      # the test binaries it builds
working_dir = "/srv/project"
search_path = ["/usr/local/bin", "/usr/bin"]  # the tool's PATH; each pinned, granted read + execute
run_as = { owner_of = "working_dir" }         # the project's owner at call time (never root)
limits = { memory = "2GiB", processes = 128, cpu_time = "5m" }
annotations = { title = "Run tests", idempotent = true }

[tools.run-tests.params.filter]
type = "string"
description = "test name filter"
pattern = "[A-Za-z0-9_:]*"          # the whole value must match
default = ""                        # FILTER= (empty): the Makefile runs every test

[tools.fetch-crate]
description = "Look up a crate on crates.io (JSON)"
reason = "dependency questions need current metadata"
command = ["curl", "-fsS", "--max-time", "20", "https://crates.io/api/v1/crates/{{name}}"]
network = { connect_tcp = [53, 443] }
env = { RES_OPTIONS = "use-vc" }    # DNS over TCP: the sandbox has no UDP
read = ["/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf"]
output = "json"
annotations = { read_only = true, idempotent = true }
cache = { ttl = "10m", error_ttl = "30s" }  # answer repeats from cordond's cache (read-only, idempotent only)

[tools.fetch-crate.params.name]
type = "string"
pattern = "[A-Za-z0-9_-]{1,64}"
required = true

[tools.find-todo]
description = "List the lines of the project that mention TODO"
reason = "agents look for unfinished work"
command = ["grep", "-rn", "TODO", "/srv/project/src"]
ok_exit_codes = [0, 1]              # grep: 1 means "no match", which is an answer, not a failure
annotations = { read_only = true, idempotent = true }

[tools.deploy]
description = "Deploy a tagged release to staging"
reason = "releases go through a person"
command = ["/usr/local/bin/deploy", "--env", "staging", "--tag", "{{tag}}"]
arg_separator = false
confirm = "human"                   # an admin approves with `cordon approve ID`
danger = "high"
run_as = "deploy"                   # admin-granted account (cordond must be root)

[tools.deploy.params.tag]
type = "string"
pattern = "v[0-9]+\\.[0-9]+\\.[0-9]+"
required = true
"#;

fn keys(out: &mut String, title: &str, table: &[KeyDoc], defaults_column: bool) {
    let _ = writeln!(out, "### {title}\n");
    if defaults_column {
        out.push_str("| key | value | in [defaults] | meaning |\n|---|---|---|---|\n");
    } else {
        out.push_str("| key | value | meaning |\n|---|---|---|\n");
    }
    for k in table {
        let cell = |t: &str| t.replace('|', "\\|");
        let (value, doc) = (cell(k.value), cell(k.doc));
        if defaults_column {
            let d = if k.defaultable { "yes" } else { "no" };
            let _ = writeln!(out, "| `{}` | {value} | {d} | {doc} |", k.name);
        } else {
            let _ = writeln!(out, "| `{}` | {value} | {doc} |", k.name);
        }
    }
    out.push('\n');
}

fn list(paths: &[&str]) -> String {
    paths.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ")
}

/// What request rules mean where the proxy meets them.
const REQUEST_RULES: &str = "Request rules (`methods`, `paths`, `read_only`) hold for every request to the host: \
plain HTTP (forwarded requests, and each request inside a tunnel to it) and HTTPS, which the proxy then terminates \
(the tool must trust cordon's CA, which cordon offers it through SSL_CERT_FILE and the like; a client that pins \
certificates fails). A request they refuse is answered `403` with `X-Cordon-Refused: request-rule` and a body that \
names the rule, audited first; the connection is then closed.\n\n";

/// How workflows are checked and run.
const WORKFLOWS: &str = "Workflows: `[workflows.NAME]` declares named steps that cordond runs one after another, \
each a full call of a tool (validated, admitted, sandboxed and audited like a direct call). Its `params` are \
exactly a tool's params (same keys, same validation, same error codes). A step's `args` give the step tool's \
arguments: `\"{{param}}\"` as the whole value passes the workflow's argument with its type (left out when the call \
gives none and the param has no default); any other value is a literal. Checked at load, against every tool of \
every file: the step tool exists and is not disabled, each argument names one of its params, literals pass the \
param's rules, placeholder types fit (string/enum into string/enum, string/path into path, integer into \
integer/number), a required step param is always given, the workflow name is no tool's name, at most 32 steps. \
Workflows cannot include confirm tools: call such a tool on its own. At call time the caller must be admitted \
by the workflow's `allow` and by every step tool's `allow` (checked before any step runs, and again for each \
step when it starts). Steps run in order; a step is ok by the result contract's `ok`; the first step that is not \
ok stops the workflow unless it says `continue_on_error = true`. Each step looks its tool up in the registry \
current when the step starts: after a reload, a step whose tool is gone or changed runs the new definition or \
fails the workflow there with the reason. Steps are numbered from 1; their audit records carry `workflow_id` and \
`step`, between `workflow_started` and `workflow_finished` records.\n\n";

const SERVERS: &str = "An MCP server is an untrusted program like a tool: its sandbox keys are a tool's, read, \
checked, probed and pinned by the same code, and `[defaults]` apply to it. Its `command` is a fixed argv installed \
beforehand (a command that downloads a package at start, such as `npx -y PKG` or `uvx PKG`, is an error that says how \
to install it). cordon lists its tools as `NAME__TOOL`, only those `tools` names (or all but `hide`), each call checked \
against the server's input schema and the `rules`, then audited like a tool's call. A server name is no file's \
`namespace` and no other server's name.\n\n";

/// The complete reference, as Markdown.
pub fn authoring_reference() -> String {
    let mut out = String::new();
    out.push_str("# cordon policy authoring reference\n\n");
    out.push_str(
        "Policies are TOML files in cordond's policy directory (`*.toml`, read in name order). Each file \
         declares tools: a fixed argv template, typed parameters, and what the sandbox grants. Agents can \
         only call these tools, with arguments that pass the parameter rules.\n\n## 1. Schema\n\n",
    );
    keys(&mut out, "Top level", FILE_KEYS, false);
    keys(&mut out, "`[tools.NAME]` (and `[defaults]`)", TOOL_KEYS, true);
    keys(&mut out, "`[tools.NAME.params.PARAM]`", PARAM_KEYS, false);
    keys(&mut out, "`network`", NETWORK_KEYS, false);
    keys(&mut out, "`network.hosts` entry table", HOST_KEYS, false);
    out.push_str(REQUEST_RULES);
    keys(&mut out, "`limits`", LIMIT_KEYS, false);
    keys(&mut out, "`budget`", BUDGET_KEYS, false);
    keys(&mut out, "`temp`", TEMP_KEYS, false);
    keys(&mut out, "`[secrets.NAME]`", SECRET_KEYS, false);
    keys(&mut out, "`[secrets.NAME]` `source`", SOURCE_KEYS, false);
    keys(&mut out, "`read`/`write` entry in table form (carve-outs)", GRANT_KEYS, false);
    keys(&mut out, "`unprotect` entry", LIFT_KEYS, false);
    keys(&mut out, "`[tools.NAME]` `secrets` entry table", TOOL_SECRET_KEYS, false);
    keys(&mut out, "`[workflows.NAME]`", WORKFLOW_KEYS, false);
    keys(&mut out, "`[[workflows.NAME.steps]]`", STEP_KEYS, false);
    out.push_str(WORKFLOWS);
    keys(&mut out, "`[servers.NAME]` (MCP servers; docs/mcp-servers.md)", SERVER_KEYS, true);
    keys(&mut out, "`[servers.NAME.rules.TOOL]` argument rule", SERVER_RULE_KEYS, false);
    keys(&mut out, "`[servers.NAME]` `client_requests`", CLIENT_REQUEST_KEYS, false);
    out.push_str(SERVERS);
    let _ = write!(
        out,
        "Merging: a tool's value replaces its file's default, except `read`, `write`, `exec` and `unix_sockets` \
         (added together), `env` (merged) and `limits` (merged per key).\n\n\
         Durations are strings like \"500ms\", \"30s\", \"5m\", \"1h30m\"; sizes like \"512B\", \"100KiB\", \"10MiB\", \"1GiB\".\n\n\
         ## 2. Validation at load\n\n\
         A file with any error is rejected whole; every problem is reported as `file:line:col: message`. Errors:\n\n\
         - unknown keys (with suggestions) and wrong value types;\n\
         - tool names must match `^[a-z][a-z0-9-]*$`; param names `^[a-z][a-z0-9_]*$` (64 characters at most);\n\
         - `command` must be non-empty; `command[0]` is a literal absolute path or a bare name looked up in `{SEARCH_PATH}` \
           (or in the tool's `search_path`, which is then its whole `PATH`);\n\
         - every `{{{{param}}}}` placeholder needs a param; `{{{{ name }}}}` with spaces is literal text (a warning);\n\
         - patterns: at most {REGEX_MAX_LEN} bytes, compiled with size and nesting limits; only syntax that Rust and JSON \
           Schema (ECMA-262) validators read alike (`\\d \\w \\s` are rewritten to ASCII classes, `.` to a class without \
           line breaks; inline flags, named groups, look-around, `\\p{{..}}`, `\\b`, POSIX classes are refused);\n\
         - a default must pass its own param's rules; `required` and `default` exclude each other;\n\
         - env keys {FORBIDDEN_ENV} are forbidden (also through `args_env_prefix`);\n\
         - `working_dir` and granted paths must be absolute without `..`;\n\
         - a tool name may be defined only once across all files; with `namespace = \"proj\"` the tools of a file \
           are named `proj__NAME` (the namespace matches `^[a-z][a-z0-9-]*$`, the full name at most 64 characters);\n\
         - a `reason` that starts with `TODO` (the placeholder `cordon import` writes) is an error until it says why \
           the tool is allowed;\n\
         - `timeout` from {} to {} (default {}); `max_output` from {} to {} per stream (default {});\n\
         - integer params stay within ±{MAX_SAFE_INTEGER} (exact in every JSON implementation).\n\n\
         Warnings: a param no placeholder uses (unless `args_env_prefix` exports it), a tool without `reason`, `write` of \
         a whole system directory or beneath /etc or /boot, a path beneath another tool's write root, and these lints \
         (each named; `accept_warnings = [\"NAME\"]` on a tool silences a reviewed one; `cordon policy check \
         --deny-warnings` fails on any warning): `interpreter-code` (a placeholder in the code of `sh -c`, `python3 -c`, \
         `node -e`, `perl -e`, `ruby -e`, ...: pass it as a separate argument), `leading-dash` (a placeholder before any \
         `--` whose pattern admits a leading `-`, tried on probe strings like \"-\", \"-x\", \"-rf\", \"--x\"; or a \
         negative `min`), `program-choice` (a placeholder where `env`, `xargs`, `timeout`, `sudo`, ... take the program), \
         `write-exec` (`write` and `exec` of one tree), `root-socket` (`unix_sockets` with run_as root), `engine-socket` \
         (docker.sock, podman.sock, containerd.sock, crio.sock), `open-high-danger` (`danger = \"high\"` without \
         `confirm`, allowed to a group every user is in); and two the load raises about the paths a tool relies on, \
         which only `{{ lint = \"NAME\", reason = \"why\" }}` accepts: `replaceable` (a directory above the path that \
         someone other than root and the account the tool runs as can write: `chown root` or `chmod go-w` it, or run \
         the tool as its owner) and `beneath-write-root` (the path lies beneath a write root of a tool that runs as \
         another identity: narrow that root, or run both as one account); see docs/pins.md.\n\n\
         Policy tests: `[[tools.NAME.examples]]` (`args`, optional `argv`) must be accepted, resolving to exactly `argv` \
         (argv[0] is command[0] as written); `[[tools.NAME.refuse]]` (`args`, `code`) must be refused with that \
         validation code. Every load runs them (a failing one is an error at its position); `cordon policy test PATH` \
         runs them offline and prints each outcome.\n\n\
         Unavailable (listed with the reason, never run): `command[0]` not found, a missing `working_dir` or granted path, \
         `run_as` without root or with an unknown account, a kernel without landlock, below `min_landlock_abi`, or network \
         rules below landlock ABI 4; a `search_path` directory (or one above it) that is a symlink, group- or \
         other-writable (a root-owned sticky directory above it excepted), or owned by two accounts other than root; \
         owned by one such account, the tool runs only when the call runs as that account (a named `run_as`, the owner, \
         or the caller), and is refused otherwise.\n\n",
        format_duration(TIMEOUT_RANGE.0),
        format_duration(TIMEOUT_RANGE.1),
        format_duration(DEFAULT_TIMEOUT),
        format_size(MAX_OUTPUT_RANGE.0),
        format_size(MAX_OUTPUT_RANGE.1),
        format_size(DEFAULT_MAX_OUTPUT),
    );
    out.push_str("## 3. Validation of each call\n\nError codes:\n");
    for c in ErrorCode::VALIDATION {
        let _ = writeln!(out, "- `{c}`: {}", c.meaning());
    }
    out.push_str(
        "\n- The arguments are one JSON object; unknown fields are refused, `null` is never a value.\n\
         - string: a `pattern` must match the whole value; without a pattern a leading `-` is refused (the empty string \
           passes); NUL is always refused; lengths count characters.\n\
         - integer: a JSON number with an integral value (5 or 5.0) within `min`/`max`; number: any JSON number within \
           `min`/`max`; without `min`, integers and numbers are never negative (`-5` would read as an option); \
           boolean: `true`/`false`; enum: one of `values`.\n\
         - path: made absolute (relative to `working_dir`) and normalized without following symlinks; a `..` that climbs \
           above `working_dir` (or `/`) is refused.\n\
         - Each tool's JSON Schema (draft 2020-12) expresses these rules; cordond validates again, authoritatively.\n\n\
         ## 4. How a call becomes a process\n\n\
         - No shell. Each template element becomes at most one argv element; values are substituted once, never \
           re-expanded. An element that uses an omitted param is dropped; so is an element that is exactly one \
           placeholder whose value is \"\".\n\
         - `arg_separator = true` inserts `--` before the first substituted element.\n",
    );
    let _ = write!(
        out,
        "- Environment: exactly {} plus the tool's `env`, plus params as `args_env_prefix` + NAME (JSON text for \
         non-strings). stdin is /dev/null; the tool leads a new session, process group and (as root) cgroup.\n\
         - Output: each stream keeps its head and tail within `max_output`; the middle is cut and marked.\n\
         - Results: `ok` when the exit code is one of `ok_exit_codes` (default [0]) and, for `output = \"json\"`, \
           stdout is JSON passing `output.schema` (checked by cordond; a mismatch names the JSON pointer and the \
           schema rule). Non-object JSON is sent wrapped as {{\"result\": value}}, and the advertised schema says so. \
           `cache` results are answered again, after validation, authorization and the pin check, keyed on the \
           tool, generation, caller uid and resolved argv/env; hits are audited as `cache_hit`.\n\
         - Timeout: SIGTERM to the group, SIGKILL 3 s later, then the cgroup is killed.\n\n\
         ## 5. Security guarantees\n\n\
         - Landlock grants read+execute beneath {}; read of {}; read+write of {}; and the tool's own /proc/self. \
           Everything else only through `read`, `exec`, `write` (write roots never allow execute).\n\
         - TCP connect/bind only to the listed ports; signals and abstract Unix sockets stay inside the sandbox.\n\
         - Seccomp allow-list, default deny: no io_uring, ptrace, process_vm_*, bpf, perf, keyring, userfaultfd, mounts, \
           namespaces (clone3 answers ENOSYS), module or kexec calls; no UDP, raw, packet, netlink, vsock or MPTCP sockets; \
           no TIOCSTI; no TCP Fast Open; prlimit/setpriority/sched_set* only on the tool itself.\n\
         - As root, tools run as the caller (or `run_as`), without supplementary groups or capabilities, with no_new_privs. \
           `run_as = {{ owner_of = \"working_dir\" }}` runs as the account that owns the working_dir when it is called \
           (read from the descriptor pinned at load, the directory the tool enters), with its primary and supplementary \
           groups; never root (a root-owned working_dir is refused), and only for callers that are that account or root \
           (PERMISSION_DENIED otherwise).\n\
         - Confirmations are enforced by cordond: \"agent\" tokens are 32 random bytes, single use, short-lived, bound to \
           (tool, resolved argv, caller); \"human\" approvals come from an admin or the agent host's user.\n\n\
         ## 6. Limitations\n\n\
         - A policy like `command = [\"sh\", \"-c\", \"{{{{script}}}}\"]` runs whatever the agent writes, inside the sandbox. \
           Authoring is the admin's responsibility.\n\
         - Output can carry prompt injection; treat what a tool prints as untrusted.\n\
         - Landlock's execute right governs execve only (the dynamic loader can map code from readable files); below ABI 9 \
           it does not govern connect() to named Unix sockets, so `unix_sockets` opens every socket the user can reach.\n\
         - There is no UDP in the sandbox: DNS needs `RES_OPTIONS = \"use-vc\"` and port 53.\n\
         - Without root: no cgroups (no process-count limit, and a tool that leaves its process group survives it), and \
           tools run as cordond's user.\n\n\
         ## 7. Annotated example\n\n```toml\n{EXAMPLE}```\n",
        BASE_ENV.join(" "),
        list(DEFAULT_READ_EXEC),
        list(DEFAULT_READ),
        list(DEFAULT_WRITE_FILES),
    );
    out
}

/// The reference as data (`cordon policy reference --json`): every key of every table, the error
/// codes, the annotated example, and the Markdown text itself.
pub fn reference_json() -> serde_json::Value {
    let table = |t: &[KeyDoc]| -> Vec<serde_json::Value> {
        t.iter()
            .map(|k| {
                serde_json::json!({ "key": k.name, "value": k.value, "meaning": k.doc, "in_defaults": k.defaultable })
            })
            .collect()
    };
    let codes: Vec<serde_json::Value> =
        ErrorCode::ALL.iter().map(|c| serde_json::json!({ "code": c.as_str(), "meaning": c.meaning() })).collect();
    serde_json::json!({
        "keys": {
            "file": table(FILE_KEYS),
            "tool": table(TOOL_KEYS),
            "param": table(PARAM_KEYS),
            "network": table(NETWORK_KEYS),
            "host": table(HOST_KEYS),
            "limits": table(LIMIT_KEYS),
            "budget": table(BUDGET_KEYS),
            "temp": table(TEMP_KEYS),
            "grant": table(GRANT_KEYS),
            "unprotect": table(LIFT_KEYS),
            "secret": table(SECRET_KEYS),
            "source": table(SOURCE_KEYS),
            "tool_secret": table(TOOL_SECRET_KEYS),
            "workflow": table(WORKFLOW_KEYS),
            "step": table(STEP_KEYS),
            "server": table(SERVER_KEYS),
            "server_rule": table(SERVER_RULE_KEYS),
            "client_requests": table(CLIENT_REQUEST_KEYS),
        },
        "error_codes": codes,
        "example": EXAMPLE,
        "markdown": authoring_reference(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Host, load_sources};

    #[test]
    fn the_example_loads() {
        let set = load_sources(&[("example.toml".into(), EXAMPLE.to_string())], &Host::new(true, 7))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(set.tools.len(), 4);
        assert!(set.diagnostics.iter().all(|d| !d.is_error()));
    }

    #[test]
    fn every_key_is_documented() {
        let doc = authoring_reference();
        for k in FILE_KEYS
            .iter()
            .chain(TOOL_KEYS)
            .chain(PARAM_KEYS)
            .chain(NETWORK_KEYS)
            .chain(HOST_KEYS)
            .chain(LIMIT_KEYS)
            .chain(BUDGET_KEYS)
            .chain(TEMP_KEYS)
            .chain(GRANT_KEYS)
            .chain(LIFT_KEYS)
            .chain(SECRET_KEYS)
            .chain(SOURCE_KEYS)
            .chain(TOOL_SECRET_KEYS)
            .chain(WORKFLOW_KEYS)
            .chain(STEP_KEYS)
            .chain(SERVER_KEYS)
            .chain(SERVER_RULE_KEYS)
            .chain(CLIENT_REQUEST_KEYS)
        {
            assert!(doc.contains(&format!("`{}`", k.name)), "{} missing", k.name);
        }
        for c in ErrorCode::VALIDATION {
            assert!(doc.contains(c.as_str()));
        }
    }
}
