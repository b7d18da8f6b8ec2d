//! `cordon policy suggest TOOL`: the smallest policy change that would have allowed what the
//! sandbox denied the tool, from the denial records of a verified audit log, as a diff of the
//! tool's policy file (docs/suggest.md).
//!
//! Every grant chosen is checked before it is offered: added to the policy set in memory (the
//! files read as `cordon policy check` reads them) and loaded with the daemon's own loader, it
//! must make no error, no warning the set did not have, and must not make the tool unavailable;
//! one that does is dropped with the diagnostic as its reason. Exit status as diff(1): 0 a change
//! is suggested, 1 nothing to suggest, 2 trouble (see `cli::run`).
//!
//! # Layout
//! - `evidence`: the tool's denials read from the verified log (bounded; the file is untrusted).
//! - `choose`: each denial to the one grant that allows exactly it, or why none is suggested.
//! - `edit`: the grants written into the file with toml_edit, and the unified diff.

mod choose;
mod edit;
mod evidence;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cordon_core::policy::{self, Availability, Diagnostic, Host, PolicySet, Trust};
use serde_json::{Value, json};

use crate::api::Client;
use crate::endpoint::Endpoint;
use crate::error::{CliError, exit};
use crate::term::{errln, outln};
use choose::{Grant, NotSuggested, Options, Suggestion};
use evidence::{Denial, Evidence};

/// What `cordon policy suggest` was asked.
#[derive(Debug, Clone)]
pub(crate) struct Args {
    pub(crate) tool: String,
    pub(crate) since: Option<String>,
    pub(crate) audit: Option<PathBuf>,
    pub(crate) policies: Option<PathBuf>,
    pub(crate) broader: bool,
    pub(crate) include_inferred: bool,
    pub(crate) include_incidental: bool,
    pub(crate) write: bool,
}

/// The default window: the last 7 days.
const DEFAULT_SINCE: Duration = Duration::from_secs(7 * 24 * 3600);

/// `--since`: a duration as policies write them (`30m`, `12h`), or whole days (`7d`).
fn since(text: Option<&str>) -> Result<Duration, CliError> {
    let Some(text) = text else { return Ok(DEFAULT_SINCE) };
    let bad = |e: String| CliError::Usage(format!("--since {text:?}: {e}"));
    if let Some(days) = text.strip_suffix('d').filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())) {
        let n: u64 = days.parse().map_err(|_| bad("too large".into()))?;
        return n.checked_mul(24 * 3600).map(Duration::from_secs).ok_or_else(|| bad("too large".into()));
    }
    policy::units::parse_duration(text).map_err(bad)
}

/// Runs the command; the exit status (0 suggested, 1 nothing to suggest) or the error (exit 2).
pub(crate) async fn run(endpoint: &Endpoint, args: Args, as_json: bool) -> Result<u8, CliError> {
    let window = since(args.since.as_deref())?;
    let dir = match &args.policies {
        Some(dir) => dir.clone(),
        None => {
            let status = Client::connect(endpoint).await?.status().await?;
            if status.policy_dir.is_empty() {
                return Err(CliError::Usage(
                    "cordond tells only admins where its policies are: name the directory with --policies DIR".into(),
                ));
            }
            PathBuf::from(status.policy_dir)
        }
    };
    let audit = args.audit.clone().unwrap_or_else(cordon_core::audit::default_path);
    let since_nanos = SystemTime::now()
        .checked_sub(window)
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let evidence = evidence::read(&audit, &args.tool, since_nanos).map_err(|e| CliError::Other(e.to_string()))?;

    // The policy set as `cordon policy check` reads it, and the tool in it.
    let read = policy::read_path_sources(&dir, Trust::current());
    if let Some(e) = read.diagnostics.iter().find(|d| d.is_error()) {
        return Err(CliError::Other(format!("{e}: the policy directory does not load as it is; fix it first")));
    }
    let sources = read.files;
    let host = match crate::host::probe() {
        Ok(facts) => facts.policy_host(),
        Err(_) => Host::new(nix::unistd::geteuid().is_root(), i32::MAX),
    };
    let base = policy::load_sources(&sources, &host).map_err(|e| {
        let first = e.diagnostics.iter().find(|d| d.is_error()).map(ToString::to_string).unwrap_or_default();
        CliError::Other(format!("{first}: the policies of {} do not load as they are; fix them first", dir.display()))
    })?;
    let Some(tool) = base.tools.iter().find(|t| t.name == args.tool) else {
        return Err(CliError::Refused {
            code: cordon_core::code::ErrorCode::UnknownTool,
            message: format!("no tool {:?} in {}", args.tool, dir.display()),
        });
    };
    let file = tool.source.file.clone();
    let Some(original) = sources.iter().find(|(f, _)| *f == file).map(|(_, t)| t.clone()) else {
        return Err(CliError::Other(format!("{} defines {} but was not read", file.display(), args.tool)));
    };
    let table_name = table_name(&original, &args.tool);

    let opts = Options {
        broader: args.broader,
        include_inferred: args.include_inferred,
        include_incidental: args.include_incidental,
    };
    // No grant may reach the policy directory or the audit log (a grant of a directory above
    // them reaches them too).
    let protected: Vec<PathBuf> =
        [&dir, &audit].into_iter().map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone())).collect();
    let (candidates, mut skipped) =
        choose::choose(&evidence.denials, &tool.sandbox, opts, &protected, &|p: &Path| p.symlink_metadata().is_ok());

    // Each grant checked with the daemon's loader, on top of those accepted before it.
    let mut accepted: Vec<Suggestion> = Vec::new();
    let comments: BTreeMap<usize, String> =
        candidates.iter().enumerate().map(|(i, s)| (i, comment(s, &evidence.denials))).collect();
    let edits = |list: &[&Suggestion]| -> Vec<(Grant, String)> {
        list.iter()
            .map(|s| {
                let i = candidates.iter().position(|c| c == *s).unwrap_or_default();
                (s.grant.clone(), comments.get(&i).cloned().unwrap_or_default())
            })
            .collect()
    };
    for s in &candidates {
        let mut trial: Vec<&Suggestion> = accepted.iter().collect();
        trial.push(s);
        let why = match edit::apply(&original, &table_name, &edits(&trial)) {
            Err(e) => Some(e),
            Ok(text) => refusal(&sources, &file, text, &host, &base, &args.tool),
        };
        match why {
            None => accepted.push(s.clone()),
            Some(why) => {
                for &d in &s.denials {
                    skipped.push(NotSuggested {
                        denial: d,
                        why: format!("{} would not pass `cordon policy check`: {why}", s.grant.shown()),
                    });
                }
            }
        }
    }
    let refs: Vec<&Suggestion> = accepted.iter().collect();
    let new_text = if accepted.is_empty() {
        original.clone()
    } else {
        edit::apply(&original, &table_name, &edits(&refs)).map_err(CliError::Other)?
    };
    let label = file.file_name().map_or_else(|| file.display().to_string(), |n| n.to_string_lossy().into_owned());
    let diff = edit::unified(&original, &new_text, &label);
    skipped.sort_by_key(|n| n.denial);

    let mut written = false;
    if args.write && !accepted.is_empty() {
        write_beside(&file, &original, &new_text)?;
        written = true;
    }
    if as_json {
        print_json(&args.tool, &file, &evidence, &accepted, &skipped, &diff, written);
    } else {
        print_text(&args.tool, &file, &evidence, &accepted, &skipped, &diff, written, &audit);
    }
    Ok(if accepted.is_empty() { exit::FAILURE } else { exit::OK })
}

/// The tool's key in its file's `[tools]` (its name without the file's `namespace` prefix).
fn table_name(text: &str, tool: &str) -> String {
    let Ok(doc) = text.parse::<toml::Table>() else { return tool.to_string() };
    match doc.get("namespace") {
        Some(toml::Value::String(ns)) => tool
            .strip_prefix(&format!("{ns}{}", policy::NAMESPACE_SEPARATOR))
            .map_or_else(|| tool.to_string(), str::to_string),
        _ => tool.to_string(),
    }
}

/// Why the set with `file` replaced by `text` is refused, if it is: an error, a new warning, or
/// the tool made unavailable.
fn refusal(
    sources: &[(PathBuf, String)],
    file: &Path,
    text: String,
    host: &Host,
    base: &PolicySet,
    tool: &str,
) -> Option<String> {
    let trial: Vec<(PathBuf, String)> =
        sources.iter().map(|(f, t)| (f.clone(), if f == file { text.clone() } else { t.clone() })).collect();
    let set = match policy::load_sources(&trial, host) {
        Err(e) => {
            return Some(e.diagnostics.iter().find(|d| d.is_error()).map_or_else(|| "it does not load".into(), plain));
        }
        Ok(set) => set,
    };
    // A warning is new when the set before had fewer of the same (file, message).
    let mut before: BTreeMap<(PathBuf, String), usize> = BTreeMap::new();
    for d in &base.diagnostics {
        *before.entry((d.file.clone(), d.message.clone())).or_default() += 1;
    }
    for d in &set.diagnostics {
        let n = before.entry((d.file.clone(), d.message.clone())).or_default();
        if *n == 0 {
            return Some(format!("warning: {}", plain(d)));
        }
        *n -= 1;
    }
    let was = base.tools.iter().find(|t| t.name == tool).map(|t| &t.availability);
    let now = set.tools.iter().find(|t| t.name == tool).map(|t| &t.availability);
    if let (Some(Availability::Available { .. }), Some(Availability::Unavailable { reason })) = (was, now) {
        return Some(format!("the tool would be unavailable: {reason}"));
    }
    None
}

fn plain(d: &Diagnostic) -> String {
    d.message.clone()
}

/// `read_file denied 3 times in 2 calls (first 2026-..., invocation ID by uid 1000: cat /x)`.
fn comment(s: &Suggestion, all: &[Denial]) -> String {
    let ds: Vec<&Denial> = s.denials.iter().filter_map(|&i| all.get(i)).collect();
    let count: u64 = ds.iter().map(|d| d.count).sum();
    let calls: u64 = ds.iter().map(|d| d.calls).sum();
    let what = match ds.first() {
        Some(d) if d.source == "proxy" => format!("{} refused by the egress proxy (not listed)", d.target),
        Some(d) if d.source == "seccomp" => format!("seccomp refused {}", d.target),
        Some(d) if d.access.is_empty() => format!("{} needed on {}", d.grant_key, d.target),
        Some(d) => format!("{} denied", d.access.join(",")),
        None => String::new(),
    };
    let times = if count == 1 { "once".to_string() } else { format!("{count} times") };
    let in_calls = if calls > 1 { format!(" in {calls} calls") } else { String::new() };
    let first = ds.iter().map(|d| &d.first).min_by(|a, b| a.time.cmp(&b.time));
    let call = first.map_or_else(String::new, |c| {
        let by = c.caller_uid.map_or_else(String::new, |u| format!(" by uid {u}"));
        let argv = super::check::shell_words(&c.argv);
        let argv = if argv.chars().count() > 120 {
            format!("{}...", argv.chars().take(120).collect::<String>())
        } else {
            argv
        };
        format!(" (first {}, invocation {}{by}: {argv})", c.time, c.id)
    });
    let unverified =
        if s.unverified { "unverified, inferred from the tool's own stderr, no kernel record: " } else { "" };
    format!("{unverified}{what} {times}{in_calls}{call}")
}

/// Replaces `file` with `text` atomically: a temporary file beside it (a dot name cordond does
/// not read) with the file's mode and owner, synced, renamed over it, the directory synced.
/// Refused when the file changed since it was read.
fn write_beside(file: &Path, was: &str, text: &str) -> Result<(), CliError> {
    let fail = |e: std::io::Error| {
        let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
            " (the policy directory is root's: run this as root, e.g. with sudo)"
        } else {
            ""
        };
        CliError::Other(format!("cannot write {}: {e}{hint}", file.display()))
    };
    let meta = std::fs::symlink_metadata(file).map_err(fail)?;
    if !meta.is_file() {
        return Err(CliError::Other(format!("{} is not a regular file (a symlink?); edit it by hand", file.display())));
    }
    if std::fs::read_to_string(file).map_err(fail)? != was {
        return Err(CliError::Other(format!("{} changed while the suggestion was made; run it again", file.display())));
    }
    let dir = file.parent().unwrap_or(Path::new("."));
    let temp = crate::cmd::registry::temp_path(dir, file);
    let written = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temp)?;
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::fchown(&f, Some(meta.uid()), Some(meta.gid()))?;
        }
        f.set_permissions(std::fs::Permissions::from_mode(meta.mode() & 0o7777))?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&temp, file)?;
        crate::cmd::registry::sync_dir(dir)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(fail(e));
    }
    Ok(())
}

fn denial_json(d: &Denial) -> Value {
    json!({
        "source": d.source,
        "target": d.target,
        "access": d.access,
        "grant_key": d.grant_key,
        "incidental": d.incidental,
        "count": d.count,
        "calls": d.calls,
        "message": d.message,
        "first": {
            "invocation_id": d.first.id,
            "time": d.first.time,
            "argv": d.first.argv,
            "caller_uid": d.first.caller_uid,
        },
    })
}

fn print_json(
    tool: &str,
    file: &Path,
    e: &Evidence,
    accepted: &[Suggestion],
    skipped: &[NotSuggested],
    diff: &str,
    written: bool,
) {
    let suggested: Vec<Value> = accepted
        .iter()
        .map(|s| {
            json!({
                "key": s.grant.key(),
                "value": s.grant.value(),
                "grant": s.grant.shown(),
                "unverified": s.unverified,
                "comment": comment(s, &e.denials),
                "evidence": s.denials.iter().filter_map(|&i| e.denials.get(i)).map(denial_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    let not: Vec<Value> = skipped
        .iter()
        .filter_map(|n| e.denials.get(n.denial).map(|d| json!({ "denial": denial_json(d), "why": n.why })))
        .collect();
    crate::cmd::output::print_json(&json!({
        "tool": tool,
        "policy_file": file.display().to_string(),
        "audit": {
            "files": e.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
            "records": e.records,
            "calls": e.calls,
            "denied_calls": e.denied_calls,
            "denials": e.denials.len(),
            "denials_not_kept": e.dropped,
        },
        "suggested": suggested,
        "not_suggested": not,
        "diff": diff,
        "written": written,
    }));
}

#[allow(clippy::too_many_arguments)]
fn print_text(
    tool: &str,
    file: &Path,
    e: &Evidence,
    accepted: &[Suggestion],
    skipped: &[NotSuggested],
    diff: &str,
    written: bool,
    audit: &Path,
) {
    for line in diff.lines() {
        outln!("{line}");
    }
    errln!(
        "{tool}: {} call(s) in the window, {} denied, {} distinct denial(s) in {}",
        e.calls,
        e.denied_calls,
        e.denials.len(),
        audit.display()
    );
    for n in skipped {
        if let Some(d) = e.denials.get(n.denial) {
            let access = if d.access.is_empty() { String::new() } else { format!(" ({})", d.access.join(",")) };
            errln!("not suggested: {} {}{access}: {}", d.source, d.target, n.why);
        }
    }
    if e.dropped > 0 {
        errln!("{} more distinct denial(s) were not read (at most {} are)", e.dropped, evidence::MAX_DISTINCT);
    }
    if accepted.is_empty() {
        errln!("nothing to suggest for {tool}");
    } else if written {
        errln!("wrote {}: run `cordon reload` to apply it", file.display());
    } else {
        errln!(
            "{} grant(s) suggested for {}; review, then apply with --write and `cordon reload`",
            accepted.len(),
            file.display()
        );
    }
}
