//! Documentation of every policy key, shared by the parser (known keys, suggestions) and the
//! authoring reference, so the two cannot drift.

/// Documentation of one policy key, shared by the parser (known keys, suggestions) and the
/// authoring reference, so the two cannot drift.
#[derive(Debug, Clone, Copy)]
pub struct KeyDoc {
    pub name: &'static str,
    pub value: &'static str,
    pub doc: &'static str,
    /// May also appear in `[defaults]`.
    pub defaultable: bool,
}

pub(super) const fn key(name: &'static str, value: &'static str, doc: &'static str, defaultable: bool) -> KeyDoc {
    KeyDoc { name, value, doc, defaultable }
}

/// Keys of the top level of a policy file.
pub const FILE_KEYS: &[KeyDoc] = &[
    key("version", "integer", "policy format version; must be 1", false),
    key(
        "namespace",
        "string",
        "prefix of every tool name in this file: namespace \"proj\" makes [tools.run-tests] the tool \
         proj__run-tests (^[a-z][a-z0-9-]*$; keeps two projects' tools apart)",
        false,
    ),
    key("defaults", "table", "values every tool in this file starts from", false),
    key("tools", "table", "one [tools.NAME] table per tool; NAME matches ^[a-z][a-z0-9-]*$", false),
    key(
        "secrets",
        "table",
        "one [secrets.NAME] table per secret a tool of this file may use without seeing it (the tool gets a \
         placeholder, cordond's egress proxy puts the value in its place); NAME matches ^[a-z][a-z0-9_-]*$",
        false,
    ),
    key(
        "servers",
        "table",
        "one [servers.NAME] table per MCP server cordond runs in a sandbox, its tools listed as NAME__TOOL \
         (docs/mcp-servers.md); NAME matches ^[a-z][a-z0-9-]*$, at most 32 characters, and is no file's namespace",
        false,
    ),
    key(
        "workflows",
        "table",
        "one [workflows.NAME] table per workflow: steps that call tools one after another; NAME matches \
         ^[a-z][a-z0-9-]*$ and is not a tool's name",
        false,
    ),
];

/// Keys of a `[workflows.NAME]` table.
pub const WORKFLOW_KEYS: &[KeyDoc] = &[
    key("description", "string", "what the workflow does, shown to the agent (required)", false),
    key("reason", "string", "why this workflow is allowed, shown to admins (a warning when missing)", false),
    key("params", "table", "one [workflows.NAME.params.PARAM] table per parameter, exactly like a tool's", false),
    key(
        "allow",
        "table",
        "{ users = [...], groups = [...] } agent callers admitted to the workflow (default: the file's \
         [defaults] allow); a caller must also be admitted to every step's tool",
        false,
    ),
    key(
        "steps",
        "array of tables",
        "[[workflows.NAME.steps]] tool = \"NAME\", args = {...}, continue_on_error = bool: the calls, in order \
         (1 to 32 steps)",
        false,
    ),
];

/// Keys of a `[[workflows.NAME.steps]]` table.
pub const STEP_KEYS: &[KeyDoc] = &[
    key(
        "tool",
        "string",
        "the tool this step calls, by its full name (with its file's namespace), from any policy file; a tool \
         with `confirm` cannot be a step (required)",
        false,
    ),
    key(
        "args",
        "table",
        "the tool's arguments: \"{{param}}\" (a whole value) passes the workflow's argument with its type; \
         \"{{steps.N.FIELD}}\" a top-level field of earlier step N's JSON result (its output schema gives the type); \
         any other value is a literal that must fit the tool's param",
        false,
    ),
    key(
        "continue_on_error",
        "boolean",
        "run the next steps even when this one fails (default false: the workflow stops at the first failed step)",
        false,
    ),
];

/// Keys of a `[tools.NAME]` table (and, where `defaultable`, of `[defaults]`).
pub const TOOL_KEYS: &[KeyDoc] = &[
    key("description", "string", "what the tool does, shown to the agent (required)", false),
    key("reason", "string", "why this tool is allowed, shown to admins (a warning when missing)", false),
    key(
        "command",
        "array of strings",
        "argv template; command[0] is a literal absolute path or a name looked up in the fixed PATH; \
         later elements may contain {{param}} placeholders",
        false,
    ),
    key("working_dir", "string", "absolute directory the tool runs in (no `..`)", true),
    key("env", "table of strings", "extra environment variables (PATH, LD_*, DYLD_* are forbidden)", true),
    key(
        "secrets",
        "table of strings or tables",
        "{ VAR = \"NAME\" }: environment variable VAR holds a per-call placeholder of the file's [secrets.NAME]; \
         cordond's egress proxy replaces it with the value on requests to the secret's hosts only (each must be in \
         network.hosts). The tool never sees the value. { VAR = { secret = \"NAME\", file = true } }: VAR names a \
         file in the call's private temp space holding the placeholder (needs temp)",
        false,
    ),
    key(
        "args_env_prefix",
        "string",
        "also pass each param as environment variable PREFIX + NAME in upper case (JSON for non-strings)",
        true,
    ),
    key("timeout", "duration", "wall-clock limit, 1s to 1h (default 60s)", true),
    key("max_output", "size", "per-stream output cap, 1B to 10MiB (default 256KiB); the middle is cut", true),
    key("params", "table", "one [tools.NAME.params.PARAM] table per parameter", false),
    key("confirm", "false | \"agent\" | \"human\"", "require a confirmation before running (default false)", true),
    key("danger", "\"safe\" | \"moderate\" | \"high\"", "how destructive the tool is (default \"safe\")", true),
    key("disabled", "boolean", "validated but never exposed or run", false),
    key("arg_separator", "boolean", "insert `--` before the first substituted argument", true),
    key("annotations", "table", "{ title = string, read_only = bool, idempotent = bool } hints for agents", false),
    key(
        "output",
        "\"text\" | \"json\" | table",
        "\"json\" or { type = \"json\", schema = {...} } for structured output",
        false,
    ),
    key(
        "ok_exit_codes",
        "array of integers",
        "exit codes that mean success, 0 to 255 (default [0]); e.g. [0, 1] for grep, whose 1 means \"no match\"",
        false,
    ),
    key(
        "cache",
        "table",
        "{ ttl = duration, error_ttl = duration } answer repeated identical calls from cordond's result cache \
         (1s to 24h; error_ttl caches failed results, default not cached); only for tools with annotations \
         read_only and idempotent, and without confirm",
        false,
    ),
    key(
        "read",
        "array of paths or tables",
        "extra paths the tool may read beneath; an entry may be { path = \"/p\", deny = [...] } to hide paths \
         inside it (see the grant table keys)",
        true,
    ),
    key(
        "write",
        "array of paths or tables",
        "paths the tool may write beneath; an entry may be { path = \"/p\", deny = [...], read_only = [...], \
         unprotect = [...] } to carve paths out of it (see the grant table keys); a write root that is a git work \
         tree keeps .git/hooks, .git/config (and the repository a .git file names) read-only unless unprotected",
        true,
    ),
    key("exec", "array of paths", "extra paths the tool may execute from", true),
    key(
        "search_path",
        "array of paths",
        "the directories, in order, of the tool's PATH and where a bare command[0] is looked up (default the \
         fixed PATH); each is pinned and granted read and execute; one that anyone but root (or the one account \
         the tool runs as) can write makes the tool unavailable",
        true,
    ),
    key(
        "network",
        "\"none\" | table",
        "\"none\" or { connect_tcp = [ports], bind_tcp = [ports] } (landlock, any host), or { hosts = \
         [\"api.github.com:443\", \"*.pypi.org:443\"] } (only those, through cordond's egress proxy from a network \
         namespace of the tool's own; max_connections, max_connections_per_call, max_bytes bound it)",
        true,
    ),
    key("unix_sockets", "false | array of paths", "Unix socket paths the tool may connect to (default none)", true),
    key(
        "limits",
        "table",
        "{ memory = size, processes = int, open_files = int, file_size = size, cpu_time = duration }",
        true,
    ),
    key(
        "budget",
        "table",
        "{ calls = \"30/min\", concurrent = 2, wall = \"2h/day\", egress = \"500MB/day\", per = \"caller\" } how much \
         the tool's callers may do, enforced by cordond and kept across its restarts (see the budget keys, \
         docs/budgets.md)",
        false,
    ),
    key("allow", "table", "{ users = [...], groups = [...] } agent callers admitted to this tool", true),
    key(
        "run_as",
        "string | integer | table",
        "\"user\" or \"user:group\" to run as instead of the caller, or { owner_of = \"working_dir\" }: the \
         owner of the working_dir at call time, with its groups, never root, callable only by that owner or root \
         (daemon must be root)",
        true,
    ),
    key("min_landlock_abi", "integer", "the tool is unavailable when the kernel's landlock ABI is lower", true),
    key(
        "temp",
        "boolean | table",
        "the tool's private temp space, fresh per invocation and named by TMPDIR (default true); \
         { size = size } bounds it (default limits.memory, else 512MiB); false gives none",
        true,
    ),
    key(
        "accept_warnings",
        "array of strings or { lint, reason } tables",
        "lints reviewed and accepted for this tool (interpreter-code, leading-dash, program-choice, write-exec, \
         root-socket, engine-socket, open-high-danger, connect-inside-netns, cache-inputs, tls-termination; and, only as \
         { lint = NAME, reason = \"why\" }, replaceable and beneath-write-root): `policy check` no longer warns \
         about them, and `cordon tool NAME` shows them with their reasons",
        false,
    ),
    key(
        "examples",
        "array of tables",
        "[[tools.NAME.examples]] args = {...}, argv = [...]: calls that must be accepted (resolving to argv, \
         when given); checked on every load and by `cordon policy test`",
        false,
    ),
    key(
        "refuse",
        "array of tables",
        "[[tools.NAME.refuse]] args = {...}, code = \"CODE\": calls that must be refused with that validation \
         code; checked on every load and by `cordon policy test`",
        false,
    ),
];

/// Keys of a `[secrets.NAME]` table.
pub const SECRET_KEYS: &[KeyDoc] = &[
    key(
        "source",
        "table",
        "where the value is read, at load and again at each call: { file = \"/abs/path\" } (a regular file owned by \
         root, mode 0600 or stricter, every directory above it root-owned and not writable by others) or \
         { credential = \"NAME\" } (a systemd credential, from cordond's $CREDENTIALS_DIRECTORY); one trailing \
         newline is dropped (required)",
        false,
    ),
    key(
        "hosts",
        "array of strings",
        "the \"host:port\" entries the value may be sent to; each must be in the network.hosts of every tool that \
         uses the secret, and cordond's proxy terminates TLS for them (required)",
        false,
    ),
    key(
        "header",
        "string",
        "the request header whose value holds the placeholder (e.g. \"Authorization\" for `Bearer PLACEHOLDER`, \
         \"X-Api-Key\"); one of header, basic, query",
        false,
    ),
    key(
        "basic",
        "\"user\" | \"password\"",
        "the placeholder is the user or the password of `Authorization: Basic` (as the client encodes it)",
        false,
    ),
    key("query", "string", "the query parameter of the request target that holds the placeholder", false),
];

/// Keys of the table form of a tool's `secrets` entry (`VAR = { secret = "NAME", file = true }`).
pub const TOOL_SECRET_KEYS: &[KeyDoc] = &[
    key("secret", "string", "the name of the file's [secrets.NAME] (required)", false),
    key(
        "file",
        "boolean",
        "true: VAR names a file holding exactly the placeholder (no newline), mode 0400, owned by the identity the \
         tool runs as, in the call's private temp space (so the tool needs temp); false: VAR holds the placeholder \
         (the default, like VAR = \"NAME\")",
        false,
    ),
];

/// Keys of a secret's `source` table.
pub const SOURCE_KEYS: &[KeyDoc] = &[
    key("file", "path", "a root-owned file, mode 0600 or stricter", false),
    key("credential", "string", "a systemd credential's name (LoadCredential=NAME:...)", false),
];

/// Keys of a `[tools.NAME.params.PARAM]` table.
pub const PARAM_KEYS: &[KeyDoc] = &[
    key("type", "string", "string | integer | number | boolean | enum | path (required)", false),
    key("description", "string", "shown to the agent", false),
    key("required", "boolean", "the call must give a value (default false; cannot be combined with default)", false),
    key("default", "value", "used when the call omits the param; must pass the param's own rules", false),
    key("pattern", "string", "string only: regex the whole value must match (linear-time engine)", false),
    key("min", "number", "integer and number only: inclusive minimum (default 0: no negative values)", false),
    key("max", "number", "integer and number only: inclusive maximum", false),
    key("min_length", "integer", "string and path only: minimum length in characters", false),
    key("max_length", "integer", "string and path only: maximum length in characters", false),
    key("values", "array of strings", "enum only: the accepted values", false),
    key("secret", "boolean", "redact the value in logs and audit records", false),
];

/// Keys of a `temp = { ... }` table.
pub const TEMP_KEYS: &[KeyDoc] =
    &[key("size", "size", "bound of each private tmpfs (TMPDIR or /tmp, and /dev/shm); at least 1MiB", false)];

/// Keys of a `network = { ... }` table.
pub const NETWORK_KEYS: &[KeyDoc] = &[
    key("connect_tcp", "array of ports", "TCP ports the tool may connect to", false),
    key("bind_tcp", "array of ports", "TCP ports the tool may bind", false),
    key(
        "hosts",
        "array of \"host:port\" or tables",
        "hosts the tool may reach through cordond's egress proxy, from a network namespace of its own: \
         \"name:port\", \"*.suffix:port\", \"IP:port\", \"10.0.0.0/8:port\", or a table { host = \"host:port\", ... } \
         that also says what may be asked of it (see the hosts entry table)",
        false,
    ),
    key("max_connections", "integer", "connections open at once through the proxy (hosts)", false),
    key("max_connections_per_call", "integer", "connections through the proxy per invocation, all told (hosts)", false),
    key("max_bytes", "size", "bytes through the proxy per invocation, both directions (hosts)", false),
];

/// Keys of a table entry of `network.hosts`.
pub const HOST_KEYS: &[KeyDoc] = &[
    key("host", "string", "\"host:port\", exactly as a string entry writes it (required)", false),
    key(
        "methods",
        "array of strings",
        "the HTTP methods the tool may send to it, upper case, matched exactly (default any); every request is \
         checked, and one refused is answered 403 with X-Cordon-Refused: request-rule and audited",
        false,
    ),
    key(
        "paths",
        "array of strings",
        "path prefixes the tool may ask for (default any): \"/repos/ORG/\" allows every path beneath it, \
         \"/repos/ORG\" itself and beneath it at a `/`; the query string is not matched; a path with dot or empty \
         segments, a backslash, or a percent-encoded dot, slash, backslash or percent sign is refused",
        false,
    ),
    key("read_only", "boolean", "true: only GET, HEAD and OPTIONS (with methods, those must be among them)", false),
    key(
        "upstream_ca",
        "absolute path",
        "a PEM file of the CA the upstream's certificate must chain to when the proxy terminates TLS for this host, \
         instead of the system's roots; it must be a root-owned regular file no one else can write (else the tool \
         is unavailable); nothing turns verification off",
        false,
    ),
];

/// Keys of a `read` or `write` entry in table form (carve-outs, docs/carve-outs.md).
pub const GRANT_KEYS: &[KeyDoc] = &[
    key("path", "string", "the grant's absolute path (required)", false),
    key(
        "deny",
        "array of strings",
        "paths or globs relative to the grant the tool may not reach at all (an empty mode-000 directory or file \
         covers each, EACCES); `*` and `?` within a component, `**` as a whole component; a trailing / makes a \
         missing literal path a directory; globs cover what exists when the call starts",
        false,
    ),
    key(
        "read_only",
        "array of strings",
        "paths or globs relative to a write grant the tool may read but not change (EROFS); same syntax as deny",
        false,
    ),
    key(
        "unprotect",
        "array of tables",
        "[{ path = \".git/hooks\", reason = \"why\" }] lifts an entry of a write root's protected git set \
         (.git/hooks, .git/config, .git/config.worktree, .git); the reason is required",
        false,
    ),
];

/// Keys of an `unprotect` entry.
pub const LIFT_KEYS: &[KeyDoc] = &[
    key("path", "string", "the protected entry: .git/hooks, .git/config, .git/config.worktree or .git", false),
    key("reason", "string", "why the tool must change it (required; shown by `cordon tool NAME`)", false),
];

/// Keys of a tool's `budget` table.
pub const BUDGET_KEYS: &[KeyDoc] = &[
    key(
        "calls",
        "rate",
        "calls started per window, e.g. \"30/min\" (windows: sec, min, hour, day); one more is refused RATE_LIMITED until the window ends",
        false,
    ),
    key(
        "concurrent",
        "integer",
        "calls running at once, 1 to 1024; one more waits in cordond's fair queue (BUSY only when the queue is full or the wait passes --queue-timeout)",
        false,
    ),
    key(
        "wall",
        "rate",
        "wall-clock time of calls per window, e.g. \"2h/day\"; a call's timeout is lowered to what is left, and once it is used up calls are refused BUDGET_EXCEEDED",
        false,
    ),
    key(
        "cpu",
        "rate",
        "CPU time of calls per window, e.g. \"10m/hour\" (counted by each call's cgroup: needs cgroups); charged when a call ends (a call is never stopped for it), and once it is used up calls are refused BUDGET_EXCEEDED",
        false,
    ),
    key(
        "egress",
        "rate",
        "bytes through the egress proxy (up and down) per window, e.g. \"500MB/day\" (tools with network.hosts); a call's network.max_bytes is lowered to what is left, and once it is used up calls are refused BUDGET_EXCEEDED",
        false,
    ),
    key(
        "per",
        "\"caller\" | \"group\" | \"all\"",
        "who the budget is counted for: each caller's uid (default), each caller's primary group, or everyone together",
        false,
    ),
];

/// Keys of a `limits` table.
pub const LIMIT_KEYS: &[KeyDoc] = &[
    key("memory", "size", "address-space / memory limit", false),
    key("processes", "integer", "maximum number of processes", false),
    key("open_files", "integer", "maximum open file descriptors (at least 4)", false),
    key("file_size", "size", "largest file the tool may write", false),
    key("cpu_time", "duration", "CPU time limit", false),
];

/// A [`TOOL_KEYS`] entry by name, at compile time (a missing name fails the build).
const fn tool_key(name: &'static str) -> KeyDoc {
    let mut i = 0;
    while i < TOOL_KEYS.len() {
        if same(TOOL_KEYS[i].name, name) {
            return TOOL_KEYS[i];
        }
        i += 1;
    }
    panic!("no such tool key")
}

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Keys of a `[servers.NAME]` table (and, where `defaultable`, taken from the file's
/// `[defaults]`): the sandbox keys of a tool, read by the same code, and the server's own.
pub const SERVER_KEYS: &[KeyDoc] = &[
    key("description", "string", "what the server is for, shown to admins (required)", false),
    key(
        "command",
        "array of strings",
        "the server's fixed argv (stdio transport): command[0] a literal absolute path or a name looked up in the \
         search path, no {{placeholders}}; a command that downloads at start (npx, npm exec, pnpm dlx, yarn dlx, \
         bunx, uvx, uv tool run, uv run, pipx run, deno run URL) is refused: install the server first (required)",
        false,
    ),
    key(
        "tools",
        "array of strings | \"*\"",
        "the server's tools cordon lists, by their names on the server (as NAME__TOOL); \"*\" lists them all \
         (lint server-exposed-whole); one of tools and hide is required",
        false,
    ),
    key(
        "hide",
        "array of strings",
        "list every tool of the server but these (lint server-exposed-whole: a tool the server adds later is \
         listed once approved); one of tools and hide is required",
        false,
    ),
    key(
        "rules",
        "table",
        "[servers.NAME.rules.TOOL] ARG = { under = [...], pattern = \"..\", ... }: extra checks on an exposed \
         tool's arguments, on top of the server's own input schema (see the server rule keys)",
        false,
    ),
    key(
        "share",
        "boolean",
        "true: one instance of the server serves every caller (lint server-shared-writes with write grants); \
         default false: one instance per identity it runs as",
        false,
    ),
    key(
        "idle",
        "duration",
        "a running instance no call used for this long is stopped (10s to 24h, default 10m)",
        false,
    ),
    key(
        "start_timeout",
        "duration",
        "longest wait for the server to start and answer initialize and tools/list (1s to 10m, default 30s)",
        false,
    ),
    key(
        "pin",
        "string",
        "\"sha256:HEX\": the digest of the tool list the policy approves itself (shown by `cordon server show`); \
         while the server lists exactly that, no `cordon server approve` is needed",
        false,
    ),
    key(
        "client_requests",
        "table",
        "{ roots = [absolute directories] }: requests the server may make of its client; roots/list is answered \
         with these; everything else (sampling, elicitation) is refused (default: all refused)",
        false,
    ),
    key(
        "resources",
        "array of strings",
        "reserved: a server's resources are never passed on in this version; only [] is accepted",
        false,
    ),
    key(
        "prompts",
        "array of strings",
        "reserved: a server's prompts are never passed on in this version; only [] is accepted",
        false,
    ),
    key("timeout", "duration", "wall-clock limit of each call of the server's tools, 1s to 1h (default 60s)", true),
    key(
        "max_output",
        "size",
        "largest result of one call of the server's tools, 1B to 10MiB (default 256KiB); a bigger one fails the call",
        true,
    ),
    key("disabled", "boolean", "validated but never started; its tools are not listed", false),
    key("allow", "table", "{ users = [...], groups = [...] } agent callers admitted to the server's tools", true),
    key(
        "accept_warnings",
        "array of strings or { lint, reason } tables",
        "lints reviewed and accepted for this server: the tool lints of its sandbox keys and server-exposed-whole, \
         server-shared-writes",
        false,
    ),
    tool_key("working_dir"),
    tool_key("env"),
    tool_key("secrets"),
    tool_key("read"),
    tool_key("write"),
    tool_key("exec"),
    tool_key("search_path"),
    tool_key("network"),
    tool_key("unix_sockets"),
    tool_key("limits"),
    tool_key("run_as"),
    tool_key("min_landlock_abi"),
    tool_key("temp"),
];

/// Keys of one argument's rule table (`[servers.NAME.rules.TOOL] ARG = { ... }`): one or more
/// checks, all of which the argument must pass.
pub const SERVER_RULE_KEYS: &[KeyDoc] = &[
    key(
        "under",
        "array of absolute paths",
        "a path argument must be given and lie beneath one of these, made absolute against the first and \
         normalised without touching the filesystem (`..` refused)",
        false,
    ),
    key("pattern", "string", "a string argument must be given and match the whole regex (linear-time engine)", false),
    key("max_length", "integer", "a string argument has at most this many characters", false),
    key("one_of", "array", "the argument must be one of these values (compared as JSON)", false),
    key("min", "number", "a number argument is at least this", false),
    key("max", "number", "a number argument is at most this", false),
    key("absent", "true", "the argument must not be given (the server's default applies); alone", false),
    key("required", "true", "the argument must be given even where the server's schema makes it optional", false),
];

/// Keys of a server's `client_requests` table.
pub const CLIENT_REQUEST_KEYS: &[KeyDoc] = &[key(
    "roots",
    "array of absolute paths",
    "directories the server is told as its roots (roots/list, as file:// URIs); default none: roots/list refused",
    false,
)];
