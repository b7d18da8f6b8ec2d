//! Turns a tool and validated arguments into the exact argv and environment to execute.
//!
//! Architecture invariant: no shell, ever. Each template element becomes at most one argv
//! element; placeholder values are substituted once and never re-scanned, so a value containing
//! `{{x}}` stays literal.

use std::path::{Path, PathBuf};

pub use crate::policy::model::BASE_ENV;
use crate::policy::model::{SEARCH_PATH, Segment, Tool};
use crate::validate::{ArgValue, Arguments};

/// Shown in place of secret values in logs and audit records.
pub const REDACTED: &str = "<redacted>";

/// Who the child runs as, for `HOME` and `USER`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub user: String,
    pub home: PathBuf,
    /// The account's primary group; `None` when the uid has no account.
    pub gid: Option<u32>,
}

impl Account {
    /// Looks up `uid` in the user database; falls back to the numeric id and `/`. Answers are
    /// kept for a minute: the lookup reads the user database on every call otherwise.
    pub fn for_uid(uid: u32) -> Account {
        use std::collections::HashMap;
        use std::sync::Mutex;
        use std::time::{Duration, Instant};
        static CACHE: Mutex<Option<HashMap<u32, (Account, Instant)>>> = Mutex::new(None);
        const TTL: Duration = Duration::from_secs(60);
        let mut guard = CACHE.lock().unwrap_or_else(|p| p.into_inner());
        let cache = guard.get_or_insert_with(HashMap::new);
        if let Some((account, at)) = cache.get(&uid)
            && at.elapsed() < TTL
        {
            return account.clone();
        }
        let account = match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
            Ok(Some(u)) => Account { user: u.name, home: u.dir, gid: Some(u.gid.as_raw()) },
            _ => Account { user: uid.to_string(), home: PathBuf::from("/"), gid: None },
        };
        if cache.len() > 1024 {
            cache.clear();
        }
        cache.insert(uid, (account.clone(), Instant::now()));
        account
    }
}

/// Everything needed to start the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub executable: PathBuf,
    /// `argv[0]` is `command[0]` as written.
    pub argv: Vec<String>,
    /// Same as `argv` with secret values replaced by [`REDACTED`].
    pub display_argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
}

/// Builds the plan. An element that refers to an omitted param is dropped, and so is an element
/// that is exactly one placeholder whose value is the empty string.
pub fn plan(tool: &Tool, executable: &Path, args: &Arguments, account: &Account) -> Plan {
    let (argv, display_argv) = render(tool, args);
    let tz = std::env::var("TZ").unwrap_or_else(|_| ":/etc/localtime".into());
    let path = if tool.sandbox.search_path.is_empty() {
        SEARCH_PATH.to_string()
    } else {
        let dirs: Vec<String> = tool.sandbox.search_path.iter().map(|d| d.to_string_lossy().into_owned()).collect();
        dirs.join(":")
    };
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), path),
        ("HOME".into(), account.home.to_string_lossy().into_owned()),
        ("USER".into(), account.user.clone()),
        ("LANG".into(), "C.UTF-8".into()),
        ("TZ".into(), tz),
    ];
    let mut set = |key: String, value: String| match env.iter_mut().find(|(k, _)| *k == key) {
        Some(slot) => slot.1 = value,
        None => env.push((key, value)),
    };
    for (k, v) in &tool.env {
        set(k.clone(), v.clone());
    }
    if let Some(prefix) = &tool.args_env_prefix {
        for (name, value) in args.iter() {
            set(format!("{prefix}{}", name.to_ascii_uppercase()), value.to_arg());
        }
    }
    // A tool with hosts reaches them through cordond's egress proxy only (set last: neither the
    // policy's env nor an argument export can change them).
    if tool.sandbox.network.egress().is_some() {
        for (k, v) in crate::egress::proxy_env() {
            set(k, v);
        }
    }
    let cwd = tool.working_dir.clone().unwrap_or_else(|| PathBuf::from("/"));
    Plan { executable: executable.to_path_buf(), argv, display_argv, env, cwd }
}

/// The argv of a call, and the same with secret values replaced by [`REDACTED`] (see [`plan`]).
pub fn render(tool: &Tool, args: &Arguments) -> (Vec<String>, Vec<String>) {
    let mut argv = vec![tool.program.clone()];
    let mut display_argv = vec![tool.program.clone()];
    let mut separated = false;
    for element in &tool.args {
        if element.placeholders().any(|name| args.get(name).is_none()) {
            continue;
        }
        if let Some(name) = element.sole_placeholder()
            && matches!(args.get(name), Some(ArgValue::String(s)) if s.is_empty())
        {
            continue;
        }
        if tool.arg_separator && !separated && element.has_placeholder() {
            argv.push("--".into());
            display_argv.push("--".into());
            separated = true;
        }
        let (mut real, mut shown) = (String::new(), String::new());
        for segment in &element.segments {
            match segment {
                Segment::Literal(text) => {
                    real.push_str(text);
                    shown.push_str(text);
                }
                Segment::Param(name) => {
                    let value = args.get(name).map(ArgValue::to_arg).unwrap_or_default();
                    let secret = tool.param(name).is_some_and(|p| p.secret);
                    shown.push_str(if secret { REDACTED } else { &value });
                    real.push_str(&value);
                }
            }
        }
        argv.push(real);
        display_argv.push(shown);
    }
    (argv, display_argv)
}
