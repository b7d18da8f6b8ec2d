//! The keys a `[defaults]` table and a `[tools.NAME]` table share, and the merge of a tool's own
//! values over its file's defaults.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use toml::de::{DeTable, DeValue};

use super::{Parser, Value};
use crate::policy::carve::GrantCarve;
use crate::policy::diag::did_you_mean;
use crate::policy::keys::{SERVER_KEYS, TOOL_KEYS};
use crate::policy::model::{
    Allow, Confirm, DEFAULT_MAX_OUTPUT, DEFAULT_TIMEOUT, Danger, Limits, MIN_TEMP_SIZE, Network, RunAs, SandboxPolicy,
    Temp,
};

/// Values a `[defaults]` table and a `[tools.NAME]` table share.
#[derive(Debug, Default, Clone)]
pub(super) struct Common {
    pub(super) working_dir: Option<PathBuf>,
    pub(super) env: Option<BTreeMap<String, (String, Range<usize>)>>,
    pub(super) args_env_prefix: Option<(String, Range<usize>)>,
    pub(super) timeout: Option<Duration>,
    pub(super) max_output: Option<u64>,
    pub(super) confirm: Option<Confirm>,
    pub(super) danger: Option<Danger>,
    pub(super) arg_separator: Option<bool>,
    pub(super) read: Option<Vec<PathBuf>>,
    pub(super) write: Option<Vec<PathBuf>>,
    pub(super) exec: Option<Vec<PathBuf>>,
    pub(super) network: Option<Network>,
    pub(super) unix_sockets: Option<Vec<PathBuf>>,
    pub(super) limits: Option<Limits>,
    pub(super) allow: Option<Allow>,
    pub(super) run_as: Option<RunAs>,
    pub(super) min_landlock_abi: Option<u32>,
    pub(super) search_path: Option<Vec<PathBuf>>,
    pub(super) temp: Option<Temp>,
    /// Carve-outs of the `read`/`write` entries in table form (they add up like the paths).
    pub(super) carve: Vec<GrantCarve>,
}

/// A tool's shared values after the merge: its own where set, else its file's defaults; path
/// lists add up. `env` and `args_env_prefix` keep their spans for the cross-checks.
pub(super) struct Merged {
    pub(super) working_dir: Option<PathBuf>,
    pub(super) env: BTreeMap<String, (String, Range<usize>)>,
    pub(super) args_env_prefix: Option<(String, Range<usize>)>,
    pub(super) timeout: Duration,
    pub(super) max_output: u64,
    pub(super) confirm: Confirm,
    pub(super) danger: Danger,
    pub(super) arg_separator: bool,
    pub(super) sandbox: SandboxPolicy,
    pub(super) allow: Option<Allow>,
}

impl Common {
    /// `self` (a tool's own values) over `defaults`.
    pub(super) fn over(self, defaults: &Common) -> Merged {
        let mut env = defaults.env.clone().unwrap_or_default();
        env.extend(self.env.unwrap_or_default());
        // A tool's own `search_path` replaces its file's (the order is the lookup order); each
        // directory is also granted read and execute through `exec`.
        let search_path = self.search_path.or(defaults.search_path.clone()).unwrap_or_default();
        let mut exec = concat(&defaults.exec, &self.exec);
        for dir in &search_path {
            if !exec.contains(dir) {
                exec.push(dir.clone());
            }
        }
        let sandbox = SandboxPolicy {
            read: concat(&defaults.read, &self.read),
            write: concat(&defaults.write, &self.write),
            exec,
            search_path,
            network: self.network.or(defaults.network.clone()).unwrap_or_default(),
            unix_sockets: concat(&defaults.unix_sockets, &self.unix_sockets),
            limits: self.limits.unwrap_or_default().or(defaults.limits.unwrap_or_default()),
            run_as: self.run_as.or(defaults.run_as.clone()),
            min_landlock_abi: self.min_landlock_abi.or(defaults.min_landlock_abi),
            temp: self.temp.or(defaults.temp).unwrap_or_default(),
            carve: defaults.carve.iter().chain(&self.carve).cloned().collect(),
            pins: Default::default(),
            repinned: Default::default(),
        };
        Merged {
            working_dir: self.working_dir.or(defaults.working_dir.clone()),
            env,
            args_env_prefix: self.args_env_prefix.or(defaults.args_env_prefix.clone()),
            timeout: self.timeout.or(defaults.timeout).unwrap_or(DEFAULT_TIMEOUT),
            max_output: self.max_output.or(defaults.max_output).unwrap_or(DEFAULT_MAX_OUTPUT),
            confirm: self.confirm.or(defaults.confirm).unwrap_or_default(),
            danger: self.danger.or(defaults.danger).unwrap_or_default(),
            arg_separator: self.arg_separator.or(defaults.arg_separator).unwrap_or(false),
            sandbox,
            allow: self.allow.or(defaults.allow.clone()),
        }
    }
}

/// `a` then `b`, each path once.
fn concat(a: &Option<Vec<PathBuf>>, b: &Option<Vec<PathBuf>>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = a.iter().chain(b.iter()).flatten().cloned().collect();
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| seen.insert(p.clone()));
    out
}

impl Parser<'_> {
    /// The file's `[defaults]` table (nothing when it is missing or not a table).
    pub(super) fn defaults(&mut self, doc: &DeTable<'_>) -> Common {
        match doc.get("defaults") {
            Some(v) => match self.table(v, "defaults") {
                Some(t) => self.common_table(t, "[defaults]", true),
                None => Common::default(),
            },
            None => Common::default(),
        }
    }

    /// Parses the keys shared by `[defaults]` and tools; reports unknown keys.
    pub(super) fn common_table(&mut self, table: &DeTable<'_>, ctx: &str, is_defaults: bool) -> Common {
        let mut c = Common::default();
        for (k, v) in table {
            let name = k.get_ref().as_ref();
            let Some(doc) = TOOL_KEYS.iter().find(|d| d.name == name) else {
                let allowed: Vec<&str> =
                    TOOL_KEYS.iter().filter(|d| !is_defaults || d.defaultable).map(|d| d.name).collect();
                self.sink.error(k.span(), format!("unknown key {name:?} in {ctx}{}", did_you_mean(name, allowed)));
                continue;
            };
            if !doc.defaultable {
                if is_defaults {
                    let why = if name == "accept_warnings" {
                        " (accepting a warning is a review of one tool, with its reason shown by `cordon tool NAME`; \
                         a default would also silence the warnings of tools added to the file later, unreviewed)"
                    } else {
                        ""
                    };
                    self.sink
                        .error(k.span(), format!("`{name}` cannot be set in [defaults]; set it on each tool{why}"));
                }
                continue;
            }
            self.common_key(&mut c, name, v);
        }
        c
    }

    /// The sandbox keys of a `[servers.NAME]` table (read as a tool's); the server's own keys are
    /// left to the caller, tool keys that make no sense for a server are refused with why.
    pub(super) fn server_common_table(&mut self, table: &DeTable<'_>, ctx: &str) -> Common {
        let mut c = Common::default();
        for (k, v) in table {
            let name = k.get_ref().as_ref();
            let Some(doc) = SERVER_KEYS.iter().find(|d| d.name == name) else {
                let why = match name {
                    "params" | "examples" | "refuse" => Some(
                        "a server's tools and their arguments come from the server itself (tools/list); constrain \
                         arguments with [servers.NAME.rules.TOOL] instead",
                    ),
                    "args_env_prefix" | "arg_separator" => {
                        Some("a server's command is a fixed argv; its tools take their arguments over MCP")
                    }
                    "budget" => Some(
                        "budget is not supported on servers in this version (a server's tool calls are not counted \
                         against one); remove it, or limit the calls with a budget on a [tools.NAME] that runs the \
                         same program",
                    ),
                    "confirm" | "danger" | "annotations" | "output" | "ok_exit_codes" | "cache" | "reason" => {
                        Some("it is a tool key that servers do not take in this version")
                    }
                    _ => None,
                };
                let message = match why {
                    Some(why) => format!("`{name}` is not a key of {ctx}: {why}"),
                    None => format!(
                        "unknown key {name:?} in {ctx}{}",
                        did_you_mean(name, SERVER_KEYS.iter().map(|d| d.name))
                    ),
                };
                self.sink.error(k.span(), message);
                continue;
            };
            if doc.defaultable {
                self.common_key(&mut c, name, v);
            }
        }
        c
    }

    /// One defaultable key into `c`.
    fn common_key(&mut self, c: &mut Common, name: &str, v: &Value<'_>) {
        match name {
            "working_dir" => c.working_dir = self.abs_path(v, name),
            "env" => c.env = self.env(v),
            "args_env_prefix" => c.args_env_prefix = self.args_env_prefix(v),
            "timeout" => c.timeout = self.timeout(v),
            "max_output" => c.max_output = self.max_output(v),
            "confirm" => c.confirm = self.confirm(v),
            "danger" => c.danger = self.danger(v),
            "arg_separator" => c.arg_separator = self.boolean(v, name),
            "read" | "write" => {
                let (paths, carve) = self.grant_list(v, name);
                if name == "read" {
                    c.read = paths;
                } else {
                    c.write = paths;
                }
                c.carve.retain(|g| g.write != (name == "write"));
                c.carve.extend(carve);
            }
            "exec" => c.exec = self.path_list(v, name),
            "search_path" => c.search_path = self.search_path(v),
            "network" => c.network = self.network(v),
            "unix_sockets" => c.unix_sockets = self.unix_sockets(v),
            "limits" => c.limits = self.limits(v),
            "allow" => c.allow = self.allow(v),
            "run_as" => c.run_as = self.run_as(v),
            "min_landlock_abi" => c.min_landlock_abi = self.min_landlock_abi(v),
            "temp" => c.temp = self.temp(v),
            _ => {}
        }
    }

    fn danger(&mut self, v: &Value<'_>) -> Option<Danger> {
        self.choice(v, "danger", &["safe", "moderate", "high"]).map(|s| match s {
            "moderate" => Danger::Moderate,
            "high" => Danger::High,
            _ => Danger::Safe,
        })
    }

    fn confirm(&mut self, v: &Value<'_>) -> Option<Confirm> {
        match v.get_ref() {
            DeValue::Boolean(false) => Some(Confirm::None),
            DeValue::Boolean(true) => {
                self.sink.error(v.span(), "`confirm = true` is ambiguous; write confirm = \"agent\" (the agent confirms with a token) or confirm = \"human\" (a person approves)");
                None
            }
            DeValue::String(s) if s == "agent" => Some(Confirm::Agent),
            DeValue::String(s) if s == "human" => Some(Confirm::Human),
            DeValue::String(s) => {
                self.sink.error(v.span(), format!("invalid confirm {s:?}; expected false, \"agent\" or \"human\""));
                None
            }
            other => {
                self.type_error(v.span(), "confirm", "false, \"agent\" or \"human\"", other);
                None
            }
        }
    }

    fn min_landlock_abi(&mut self, v: &Value<'_>) -> Option<u32> {
        let n = self.integer(v, "min_landlock_abi")?;
        match u32::try_from(n) {
            Ok(n @ 1..=16) => Some(n),
            _ => {
                self.sink.error(
                    v.span(),
                    format!("min_landlock_abi {n} is out of range; landlock ABIs are 1 and up (e.g. 4 for TCP rules)"),
                );
                None
            }
        }
    }

    /// `temp = true | false | { size = "256MiB" }`.
    fn temp(&mut self, v: &Value<'_>) -> Option<Temp> {
        const EXPECTED: &str = "true, false or { size = \"256MiB\" }";
        match v.get_ref() {
            DeValue::Boolean(true) => Some(Temp::On),
            DeValue::Boolean(false) => Some(Temp::Off),
            DeValue::Table(t) => {
                self.unknown_keys(t, crate::policy::keys::TEMP_KEYS, "in temp");
                let Some(size) = t.get("size") else {
                    return Some(Temp::On);
                };
                let n = self.size(size, "temp.size")?;
                if n < MIN_TEMP_SIZE {
                    self.sink.error(
                        size.span(),
                        "temp.size must be at least 1MiB; write temp = false to give the tool no temp space",
                    );
                    return None;
                }
                Some(Temp::Sized(n))
            }
            other => {
                self.type_error(v.span(), "temp", EXPECTED, other);
                None
            }
        }
    }
}
