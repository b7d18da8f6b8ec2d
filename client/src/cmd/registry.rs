//! `cordon tool add|remove`: an admin changes cordond's policy directory without an editor, and
//! `cordon policy check --tool NAME`: one tool's findings.
//!
//! Every change is checked before it lands: the directory as it would be afterwards is read and
//! loaded with cordon_core's own loader, under the trust rules of the running daemon's user, and
//! nothing is written when that load has an error. A file is written beside its final name
//! (a name starting with `.`, which cordond never reads), mode 0644, synced, and renamed into
//! place; then cordond reloads. A reload that cordond still rejects (its host differs from this
//! check's) undoes the change, so the directory never holds what the daemon refused.

use std::collections::BTreeSet;
use std::fs;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use cordon_core::code::ErrorCode;
use cordon_core::policy::{self, Diagnostic, Host, Trust};
use serde_json::{Value, json};

use super::output::print_json;
use crate::api::{Client, DiagnosticInfo, PolicyReport};
use crate::endpoint::Endpoint;
use crate::error::{CliError, exit};
use crate::host;
use crate::term::{errln, outln};

/// Where the change goes and who checks it.
struct Target {
    dir: PathBuf,
    /// The trust rules of the daemon's user.
    trust: Trust,
    host: Host,
    /// None when cordond is not running (`--policies` named the directory).
    client: Option<Client>,
    endpoint: Endpoint,
}

/// `cordon tool add --file FILE [--replace] [--policies DIR]`.
pub(super) async fn add(
    endpoint: &Endpoint,
    file: &Path,
    replace: bool,
    policies: Option<&Path>,
    as_json: bool,
) -> Result<u8, CliError> {
    let mut target = target(endpoint, policies, "add").await?;
    let (label, text) = read_snippet(file)?;
    // The snippet alone first: its own errors, named by its own path.
    let snippet = match policy::load_sources(&[(label.clone(), text.clone())], &target.host) {
        Ok(set) => set,
        Err(e) => {
            return Ok(rejected(
                &e.diagnostics,
                &format!(
                    "{} is not a valid policy file; nothing was written: fix it (`cordon policy check {}` shows the same) and run again",
                    label.display(),
                    label.display()
                ),
                as_json,
            ));
        }
    };
    let name = match snippet.tools.as_slice() {
        [one] => one.name.clone(),
        many => {
            let names: Vec<&str> = many.iter().map(|t| t.name.as_str()).collect();
            return Err(rejected_change(format!(
                "{} defines {} tools ({}); `cordon tool add` installs exactly one tool per file: put each in a file of its own",
                label.display(),
                many.len(),
                if names.is_empty() { "none".into() } else { names.join(", ") }
            )));
        }
    };
    let files = read_dir(&target, as_json)?;
    let owners = owners(&files, &name);
    let (dest, previous) = match owners.as_slice() {
        [] => {
            let dest = target.dir.join(format!("{name}.toml"));
            if fs::symlink_metadata(&dest).is_ok() {
                return Err(rejected_change(format!(
                    "{} exists and does not define the tool {name}; rename that file, then run `cordon tool add` again",
                    dest.display()
                )));
            }
            (dest, None)
        }
        [(path, text)] if replace => {
            let others: Vec<String> = tool_names(text).into_iter().filter(|n| *n != name).collect();
            if !others.is_empty() {
                return Err(rejected_change(format!(
                    "{name} is defined in {} together with {}; `--replace` only replaces a file that holds this one tool: \
                     edit that file by hand, then `cordon reload`",
                    path.display(),
                    others.join(", ")
                )));
            }
            (path.clone(), Some(text.clone()))
        }
        found => {
            let at: Vec<String> = found.iter().map(|(p, _)| p.display().to_string()).collect();
            return Err(rejected_change(format!(
                "a tool named {name} already exists in {}; pass --replace to replace it, or choose another name",
                at.join(" and ")
            )));
        }
    };
    let mut after: Vec<(PathBuf, String)> = files.into_iter().filter(|(p, _)| *p != dest).collect();
    after.push((dest.clone(), text.clone()));
    after.sort_by(|a, b| a.0.cmp(&b.0));
    if let Err(e) = policy::load_sources(&after, &target.host) {
        return Ok(rejected(
            &e.diagnostics,
            &format!(
                "nothing was written: {} with {name} added would be rejected; fix the problems above and run again",
                target.dir.display()
            ),
            as_json,
        ));
    }
    write_atomic(&target.dir, &dest, &text)?;
    let action = if previous.is_some() { "replaced" } else { "added" };
    finish(&mut target, Change { name: &name, file: &dest, action, previous }, as_json).await
}

/// `cordon tool remove NAME [--policies DIR]`.
pub(super) async fn remove(
    endpoint: &Endpoint,
    name: &str,
    policies: Option<&Path>,
    as_json: bool,
) -> Result<u8, CliError> {
    let mut target = target(endpoint, policies, "remove").await?;
    let files = read_dir(&target, as_json)?;
    let owners = owners(&files, name);
    let (path, text) = match owners.as_slice() {
        [] => {
            let all: BTreeSet<String> = files.iter().flat_map(|(_, t)| tool_names(t)).collect();
            // `build` for `proj__build`: a file's namespace is part of its tools' names.
            let suffix = format!("{}{name}", policy::NAMESPACE_SEPARATOR);
            let namespaced: Vec<&str> = all.iter().map(String::as_str).filter(|n| n.ends_with(&suffix)).collect();
            let hint = if namespaced.is_empty() {
                policy::diag::did_you_mean(name, all.iter().map(String::as_str))
            } else {
                format!(" (a namespaced file names it {})", namespaced.join(" or "))
            };
            return Err(CliError::Refused {
                code: ErrorCode::UnknownTool,
                message: format!(
                    "no tool {name:?} in {}{hint}; `cordon tools --all` lists the tools",
                    target.dir.display(),
                ),
            });
        }
        [one] => one.clone(),
        many => {
            let at: Vec<String> = many.iter().map(|(p, _)| p.display().to_string()).collect();
            return Err(rejected_change(format!(
                "{name} is defined in more than one file ({}), which cordond refuses; remove the duplicate by hand",
                at.join(", ")
            )));
        }
    };
    let others: Vec<String> = tool_names(&text).into_iter().filter(|n| n != name).collect();
    // A file with other tools (an import, a hand-written set) keeps them: only this tool's tables
    // and the comments attached to them go, checked to be exactly that.
    let edited = if others.is_empty() {
        None
    } else {
        Some(without_tool(&text, name).map_err(|why| {
            rejected_change(format!(
                "{name} is defined in {} together with {}, and {why}: delete the [tools.{name}] table and its \
                 params from that file by hand, then `cordon reload`",
                path.display(),
                others.join(", ")
            ))
        })?)
    };
    let mut after: Vec<(PathBuf, String)> = files.iter().filter(|(p, _)| *p != path).cloned().collect();
    if let Some(edited) = &edited {
        after.push((path.clone(), edited.clone()));
        after.sort_by(|a, b| a.0.cmp(&b.0));
    }
    if let Err(e) = policy::load_sources(&after, &target.host) {
        return Ok(rejected(
            &e.diagnostics,
            &format!("nothing was removed: {} without {name} would be rejected", target.dir.display()),
            as_json,
        ));
    }
    match &edited {
        Some(edited) => write_atomic(&target.dir, &path, edited)?,
        None => {
            fs::remove_file(&path).map_err(|e| write_error(&path, &e))?;
            sync_dir(&target.dir).map_err(|e| write_error(&target.dir, &e))?;
        }
    }
    finish(&mut target, Change { name, file: &path, action: "removed", previous: Some(text) }, as_json).await
}

/// `text` without the tables of the tool `name` (`[tools.KEY]`, `[tools.KEY.params.P]`, ...),
/// the comment lines directly above each of them and directly after their last key. The result
/// is checked: parsed, it must be the original document minus `tools.KEY` and nothing else
/// (a tool written as an inline table or with dotted keys is refused, not half-removed).
fn without_tool(text: &str, name: &str) -> Result<String, String> {
    let doc: toml::Table = text.parse().map_err(|e| format!("the file is not valid TOML ({e})"))?;
    let prefix = namespace_prefix(&doc);
    let key = name.strip_prefix(&prefix).unwrap_or(name);
    let lines: Vec<&str> = text.lines().collect();
    let owners = line_owners(text);
    let is_comment = |i: usize| lines[i].trim_start().starts_with('#');
    let is_blank = |i: usize| lines[i].trim().is_empty();
    let mut drop = vec![false; lines.len()];
    let mut i = 0;
    while i < lines.len() {
        if owners[i].as_deref() != Some(name) {
            i += 1;
            continue;
        }
        let start = i;
        while i < lines.len() && owners[i].as_deref() == Some(name) {
            i += 1;
        }
        // [start, i): a header of the tool and the lines up to the next header. Keep what
        // belongs to the next table: the comments after the last key that a blank line parts.
        let last_key = (start..i).rev().find(|&k| !is_comment(k) && !is_blank(k)).unwrap_or(start);
        let mut end = last_key + 1;
        while end < i && is_comment(end) {
            end += 1;
        }
        let mut first = start;
        while first > 0 && is_comment(first - 1) && !drop[first - 1] {
            first -= 1;
        }
        for d in &mut drop[first..end] {
            *d = true;
        }
        // One blank line where two would meet.
        if first > 0 && is_blank(first - 1) && (end == lines.len() || is_blank(end)) {
            drop[first - 1] = true;
        }
    }
    let mut out = String::with_capacity(text.len());
    for (line, dropped) in lines.iter().zip(&drop) {
        if !dropped {
            out.push_str(line);
            out.push('\n');
        }
    }
    let mut expected = doc.clone();
    if let Some(toml::Value::Table(tools)) = expected.get_mut("tools") {
        tools.remove(key);
    }
    let got: toml::Table = out.parse().map_err(|_| "its tables could not be cut out cleanly".to_string())?;
    if got != expected {
        return Err("it is not written as [tools.NAME] tables this command can cut out".into());
    }
    Ok(out)
}

/// A change written to the directory, and what to restore if cordond refuses it.
struct Change<'a> {
    name: &'a str,
    file: &'a Path,
    /// "added", "replaced", "removed".
    action: &'static str,
    /// The file's text before the change (None: the file did not exist).
    previous: Option<String>,
}

/// Reloads cordond after a change (undoing the change when the reload is rejected) and reports.
async fn finish(target: &mut Target, change: Change<'_>, as_json: bool) -> Result<u8, CliError> {
    let Change { name, file, action, previous } = change;
    let Some(client) = target.client.as_mut() else {
        if as_json {
            print_json(&json!({ "ok": true, "tool": name, "file": file, "action": action, "reloaded": false }));
        } else {
            outln!("{action} {name}: {}", file.display());
            outln!("cordond is not running at {}: it loads the policy directory when it starts", target.endpoint);
        }
        return Ok(exit::OK);
    };
    let report: PolicyReport = client.reload().await?;
    let generation = report.generation.unwrap_or(0);
    if !report.ok {
        // The daemon's view differs from this check's (another host fact, a file changed
        // meanwhile): put the file back as it was, so the directory matches what is in force.
        let undone = match &previous {
            Some(text) => write_atomic(&target.dir, file, text),
            None => fs::remove_file(file)
                .map_err(|e| write_error(file, &e))
                .and_then(|()| sync_dir(&target.dir).map_err(|e| write_error(&target.dir, &e))),
        };
        let undo = match undone {
            Ok(()) => format!("the change to {} was undone", file.display()),
            Err(e) => format!("undoing the change to {} failed too ({e}): restore it by hand", file.display()),
        };
        let message = format!(
            "cordond rejected the reload; {undo}; generation {generation} ({} tool(s)) stays in force",
            report.tools
        );
        if as_json {
            print_json(&json!({ "ok": false, "message": message, "diagnostics": report.diagnostics }));
        } else {
            for d in &report.diagnostics {
                errln!("{d}");
            }
            errln!("cordon: {message}");
        }
        return Ok(exit::DATA);
    }
    if as_json {
        print_json(&json!({
            "ok": true, "tool": name, "file": file, "action": action, "reloaded": true,
            "generation": generation, "tools": report.tools, "diagnostics": report.diagnostics,
        }));
    } else {
        for d in &report.diagnostics {
            errln!("{d}");
        }
        outln!("{action} {name}: {}", file.display());
        outln!("reloaded: generation {generation}, {} tool(s)", report.tools);
    }
    Ok(exit::OK)
}

/// Finds the directory to change, and checks that this caller is an admin of the running daemon.
async fn target(endpoint: &Endpoint, policies: Option<&Path>, verb: &str) -> Result<Target, CliError> {
    let host = match host::probe() {
        Ok(facts) => facts.policy_host(),
        Err(_) => Host::new(nix::unistd::geteuid().is_root(), i32::MAX),
    };
    let not_admin = |why: &str| CliError::Refused {
        code: ErrorCode::PermissionDenied,
        message: format!(
            "`cordon tool {verb}` changes cordond's policies, which only admins may do ({why}): run it as root \
             (`sudo cordon tool {verb} ...`); the policy directory is root's to write"
        ),
    };
    let mut client = match Client::connect(endpoint).await {
        Ok(client) => client,
        Err(CliError::SocketPermission { .. }) => return Err(not_admin("this user may not even connect to cordond")),
        Err(CliError::DaemonDown { path, .. }) => {
            let Some(dir) = policies else {
                return Err(CliError::Usage(format!(
                    "cordond is not running at {}, so it cannot say where its policies are: start it, point --socket \
                     at it, or name the directory with --policies DIR (the change then takes effect when cordond starts)",
                    path.display()
                )));
            };
            return Ok(Target {
                dir: dir.to_path_buf(),
                trust: Trust::current(),
                host,
                client: None,
                endpoint: endpoint.clone(),
            });
        }
        Err(e) => return Err(e),
    };
    let status = client.status().await?;
    if !status.caller.admin {
        return Err(not_admin(&format!("cordond sees this caller as {}, not an admin", status.caller)));
    }
    let reported = PathBuf::from(&status.policy_dir);
    let dir = match policies {
        Some(dir) => {
            let same = |a: &Path, b: &Path| match (fs::canonicalize(a), fs::canonicalize(b)) {
                (Ok(a), Ok(b)) => a == b,
                _ => a == b,
            };
            if !status.policy_dir.is_empty() && !same(dir, &reported) {
                return Err(CliError::Usage(format!(
                    "--policies {} is not the directory cordond at {} serves ({}); a change there would not be loaded: \
                     leave out --policies, or point --socket at the daemon that serves it",
                    dir.display(),
                    endpoint,
                    reported.display()
                )));
            }
            dir.to_path_buf()
        }
        None if status.policy_dir.is_empty() => {
            return Err(CliError::Protocol("cordond did not report its policy directory; pass --policies DIR".into()));
        }
        None => reported,
    };
    Ok(Target { dir, trust: daemon_trust(status.daemon_uid), host, client: Some(client), endpoint: endpoint.clone() })
}

/// The trust rules of a daemon running as `uid` (with that user's primary group).
fn daemon_trust(uid: u32) -> Trust {
    let current = Trust::current();
    if current.uid == uid {
        return current;
    }
    let gid = nix::unistd::User::from_uid(uid.into()).ok().flatten().map_or(uid, |u| u.gid.as_raw());
    Trust { uid, gid }
}

/// The tool's policy text: FILE, or stdin for `-`. Returns the name to report it by.
fn read_snippet(file: &Path) -> Result<(PathBuf, String), CliError> {
    let limit = policy::MAX_POLICY_FILE_BYTES;
    let mut bytes = Vec::new();
    let label = if file == Path::new("-") {
        std::io::stdin()
            .take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| CliError::Other(format!("cannot read the tool from stdin: {e}")))?;
        PathBuf::from("<stdin>")
    } else {
        fs::File::open(file).and_then(|f| f.take(limit + 1).read_to_end(&mut bytes)).map_err(|e| {
            CliError::Usage(format!("cannot read {}: {e}; pass the policy file with --file", file.display()))
        })?;
        file.to_path_buf()
    };
    if bytes.len() as u64 > limit {
        return Err(rejected_change(format!(
            "{} is larger than {limit} bytes, the most cordond reads from one policy file",
            label.display()
        )));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| rejected_change(format!("{} is not UTF-8 text; policy files are UTF-8", label.display())))?;
    Ok((label, text))
}

/// The directory's policy files as the daemon reads them; its own errors refuse any change.
fn read_dir(target: &Target, as_json: bool) -> Result<Vec<(PathBuf, String)>, CliError> {
    let read = policy::read_dir_sources(&target.dir, target.trust);
    if read.diagnostics.iter().any(Diagnostic::is_error) {
        rejected(
            &read.diagnostics,
            &format!("{} cannot be read as cordond reads it; fix the problems above first", target.dir.display()),
            as_json,
        );
        return Err(CliError::Other(format!("cannot read the policy directory {}", target.dir.display())));
    }
    Ok(read.files)
}

/// `"NS__"` for a file with `namespace = "NS"`, else empty.
fn namespace_prefix(doc: &toml::Table) -> String {
    match doc.get("namespace") {
        Some(toml::Value::String(ns)) => format!("{ns}{}", policy::NAMESPACE_SEPARATOR),
        _ => String::new(),
    }
}

/// The files (path, text) that define a tool named `name`.
fn owners(files: &[(PathBuf, String)], name: &str) -> Vec<(PathBuf, String)> {
    files.iter().filter(|(_, text)| tool_names(text).iter().any(|n| n == name)).cloned().collect()
}

/// The names of the tools a policy text defines (none when it is not TOML): the keys under
/// `[tools]`, prefixed with the file's `namespace` as cordond names them (`proj__build`).
fn tool_names(text: &str) -> Vec<String> {
    let Ok(doc) = text.parse::<toml::Table>() else {
        return Vec::new();
    };
    let prefix = namespace_prefix(&doc);
    match doc.get("tools") {
        Some(toml::Value::Table(tools)) => tools.keys().map(|k| format!("{prefix}{k}")).collect(),
        _ => Vec::new(),
    }
}

/// A change the policy directory refuses (a data error, exit 65: see `cordon --help`).
fn rejected_change(message: String) -> CliError {
    CliError::Refused { code: ErrorCode::PolicyRejected, message }
}

/// Prints why a change was refused (with every diagnostic) and returns the data-error exit code.
fn rejected(diagnostics: &[Diagnostic], message: &str, as_json: bool) -> u8 {
    let infos: Vec<DiagnosticInfo> = diagnostics.iter().map(info).collect();
    if as_json {
        print_json(&json!({ "ok": false, "message": message, "diagnostics": infos }));
    } else {
        for d in &infos {
            errln!("{d}");
        }
        errln!("cordon: {message}");
    }
    exit::DATA
}

fn info(d: &Diagnostic) -> DiagnosticInfo {
    DiagnosticInfo {
        severity: if d.is_error() { "error" } else { "warning" },
        file: d.file.display().to_string(),
        line: d.line,
        column: d.column,
        message: d.message.clone(),
    }
}

fn write_error(path: &Path, e: &std::io::Error) -> CliError {
    let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
        " (the policy directory is root's: run this as root, e.g. with sudo)"
    } else {
        ""
    };
    CliError::Refused {
        code: if hint.is_empty() { ErrorCode::Error } else { ErrorCode::PermissionDenied },
        message: format!("cannot write {}: {e}{hint}", path.display()),
    }
}

/// Writes `text` to `dest` in `dir` atomically: a temporary file beside it (its name starts
/// with `.`: cordond never reads it), mode 0644, owned like the directory when run as root,
/// synced, renamed over `dest`, and the directory synced.
pub(super) fn write_atomic(dir: &Path, dest: &Path, text: &str) -> Result<(), CliError> {
    let temp = temp_path(dir, dest);
    let written = (|| -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(&temp)?;
        f.set_permissions(fs::Permissions::from_mode(0o644))?;
        if nix::unistd::geteuid().is_root() {
            let meta = fs::metadata(dir)?;
            std::os::unix::fs::fchown(&f, Some(meta.uid()), Some(meta.gid()))?;
        }
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        fs::rename(&temp, dest)?;
        sync_dir(dir)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(write_error(dest, &e));
    }
    Ok(())
}

/// `.NAME.cordon-PID-RANDOM` beside `dest`.
pub(crate) fn temp_path(dir: &Path, dest: &Path) -> PathBuf {
    let mut random = [0u8; 6];
    let _ = getrandom::fill(&mut random);
    let suffix = data_encoding::HEXLOWER.encode(&random);
    let base = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    dir.join(format!(".{base}.cordon-{}-{suffix}", std::process::id()))
}

pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// `cordon policy check --tool NAME [PATH...]`: where the tool is defined, the diagnostics of its
/// tables (and of its file's top level, which apply to it), and whether it is available.
pub(super) async fn check_tool(
    endpoint: &Endpoint,
    paths: &[PathBuf],
    name: &str,
    as_json: bool,
) -> Result<u8, CliError> {
    let paths: Vec<PathBuf> = if paths.is_empty() {
        let mut client = Client::connect(endpoint).await?;
        let status = client.status().await?;
        if status.policy_dir.is_empty() {
            return Err(CliError::Usage(
                "cordond tells only admins where its policies are: name the files, `cordon policy check --tool NAME PATH`"
                    .into(),
            ));
        }
        vec![PathBuf::from(status.policy_dir)]
    } else {
        paths.to_vec()
    };
    let trust = Trust::current();
    let mut sources = Vec::new();
    let mut diagnostics = Vec::new();
    for path in &paths {
        let read = policy::read_path_sources(path, trust);
        sources.extend(read.files);
        diagnostics.extend(read.diagnostics);
    }
    let owners = owners(&sources, name);
    let Some((file, text)) = owners.first() else {
        let all: BTreeSet<String> = sources.iter().flat_map(|(_, t)| tool_names(t)).collect();
        let shown: Vec<&str> = all.iter().map(String::as_str).collect();
        let close = policy::diag::suggestions(name, shown.iter().copied());
        let hint = match (close.as_slice(), shown.len()) {
            ([], 0) => "; they define no tools".to_string(),
            ([], _) if shown.len() <= 10 => format!("; the tools there: {}", shown.join(", ")),
            ([], n) => format!("; they define {n} tools (`cordon policy check PATH` lists problems for all)"),
            (close, _) => format!("; close names: {}", close.join(", ")),
        };
        let at: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(CliError::Refused {
            code: ErrorCode::UnknownTool,
            message: format!("no tool {name:?} in {}{hint}", at.join(" ")),
        });
    };
    let host = match host::probe() {
        Ok(facts) => facts.policy_host(),
        Err(_) => Host::new(nix::unistd::geteuid().is_root(), i32::MAX),
    };
    let result = policy::load_sources(&sources, &host);
    let (status, detail) = match &result {
        Ok(set) => match set.tools.iter().find(|t| t.name == name) {
            Some(t) if t.disabled => ("disabled", String::new()),
            Some(t) => match &t.availability {
                policy::Availability::Available { executable } => ("available", executable.display().to_string()),
                policy::Availability::Unavailable { reason } => ("unavailable", reason.clone()),
            },
            None => ("rejected", String::new()),
        },
        Err(_) => ("rejected", String::new()),
    };
    match &result {
        Ok(set) => diagnostics.extend(set.diagnostics.iter().cloned()),
        Err(e) => diagnostics.extend(e.diagnostics.iter().cloned()),
    }
    let owned = line_owners(text);
    let concerns = |d: &Diagnostic| {
        d.file == *file
            && match owned.get(d.line.saturating_sub(1) as usize) {
                Some(Some(owner)) => owner == name,
                _ => true,
            }
    };
    let mine: Vec<&Diagnostic> = diagnostics.iter().filter(|d| concerns(d)).collect();
    let elsewhere = diagnostics.iter().filter(|d| d.is_error() && !concerns(d)).count();
    let ok = result.is_ok() && !diagnostics.iter().any(Diagnostic::is_error);
    let line = result
        .as_ref()
        .ok()
        .and_then(|s| s.tools.iter().find(|t| t.name == name))
        .map_or_else(|| header_line(text, name), |t| t.source.line);
    if as_json {
        let infos: Vec<DiagnosticInfo> = mine.iter().map(|d| info(d)).collect();
        let mut out = json!({
            "ok": ok, "tool": name, "file": file, "line": line, "status": status,
            "diagnostics": infos, "errors_elsewhere": elsewhere,
        });
        if !detail.is_empty() {
            let key = if status == "available" { "executable" } else { "reason" };
            out[key] = Value::from(detail.clone());
        }
        print_json(&out);
    } else {
        for d in &mine {
            errln!("{d}");
        }
        outln!("{name}: defined at {}:{line}", file.display());
        match status {
            "available" => outln!("  status       available ({detail})"),
            "unavailable" => outln!("  status       unavailable on this host: {detail}"),
            "disabled" => outln!("  status       disabled (validated, never exposed)"),
            _ => outln!("  status       rejected: cordond would not load it"),
        }
        let errors = mine.iter().filter(|d| d.is_error()).count();
        let warnings = mine.len() - errors;
        outln!("  findings     {errors} error(s), {warnings} warning(s) concern this tool");
        if elsewhere > 0 {
            outln!(
                "  elsewhere    {elsewhere} more error(s) reject the whole load: `cordon policy check {}` lists them",
                paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" ")
            );
        }
    }
    Ok(if ok { exit::OK } else { exit::DATA })
}

/// For each line of a policy text, the tool whose table it is in (`[tools.NAME]`,
/// `[tools.NAME.params.P]`, ...), or None at the file's top level and in `[defaults]`, which
/// apply to every tool of the file.
fn line_owners(text: &str) -> Vec<Option<String>> {
    let prefix = text.parse::<toml::Table>().map(|doc| namespace_prefix(&doc)).unwrap_or_default();
    let mut owner: Option<String> = None;
    text.lines()
        .map(|l| {
            let t = l.trim_start();
            if t.starts_with('[') {
                let inner = t.trim_start_matches('[');
                let header = inner.split(']').next().unwrap_or("").trim();
                owner = header.strip_prefix("tools.").map(|rest| {
                    let rest = rest.trim_start();
                    let key = match rest.strip_prefix('"') {
                        Some(quoted) => quoted.split('"').next().unwrap_or(""),
                        None => rest.split('.').next().unwrap_or("").trim(),
                    };
                    format!("{prefix}{key}")
                });
                if header != "defaults" && owner.is_none() {
                    owner = Some(String::new());
                }
            }
            owner.clone()
        })
        .collect()
}

/// The line of `[tools.NAME]` (1 when it is not found as a header).
fn header_line(text: &str, name: &str) -> u32 {
    let owned = line_owners(text);
    owned.iter().position(|o| o.as_deref() == Some(name)).map_or(1, |i| u32::try_from(i + 1).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_belong_to_their_tool_tables() {
        let text = "version = 1\n[defaults]\ntimeout = \"1s\"\n[tools.a]\nx = 1\n[tools.a.params.p]\ntype = \"string\"\n[tools.\"b\"]\ny = 2\n[workflows.w]\n";
        let owners = line_owners(text);
        let at = |i: usize| owners[i - 1].clone();
        assert_eq!(at(1), None);
        assert_eq!(at(3), None, "[defaults] applies to every tool");
        assert_eq!(at(5).as_deref(), Some("a"));
        assert_eq!(at(7).as_deref(), Some("a"));
        assert_eq!(at(9).as_deref(), Some("b"));
        assert_eq!(at(10).as_deref(), Some(""), "another table is nobody's");
        assert_eq!(header_line(text, "b"), 8);
        assert_eq!(tool_names(text), vec!["a".to_string(), "b".to_string()]);
    }

    #[test]
    fn a_tool_is_cut_out_of_a_file_with_others_and_nothing_else() {
        let text = "# header\nversion = 1\nnamespace = \"web\"\n\n# a's note\n[tools.a]\ncommand = [\"ls\"]\n# \n# [tools.a.params.x] example\n\n# b's note\n[tools.b]\ncommand = [\"id\"]\n\n[tools.b.params.p]\ntype = \"string\"\n\n# c\n[tools.c]\ncommand = [\"pwd\"]\n\n# NOT IMPORTED: x\n#   {}\n";
        let without_b = without_tool(text, "web__b").unwrap();
        assert_eq!(
            without_b,
            "# header\nversion = 1\nnamespace = \"web\"\n\n# a's note\n[tools.a]\ncommand = [\"ls\"]\n# \n# [tools.a.params.x] example\n\n# c\n[tools.c]\ncommand = [\"pwd\"]\n\n# NOT IMPORTED: x\n#   {}\n"
        );
        let without_c = without_tool(text, "web__c").unwrap();
        assert!(without_c.ends_with("type = \"string\"\n\n# NOT IMPORTED: x\n#   {}\n"), "{without_c}");
        let without_a = without_tool(text, "web__a").unwrap();
        assert!(
            without_a.starts_with("# header\nversion = 1\nnamespace = \"web\"\n\n# b's note\n[tools.b]"),
            "{without_a}"
        );
        // Written another way than as tables: refused, not half-removed.
        let dotted = "version = 1\n[tools]\na.command = [\"ls\"]\nb.command = [\"id\"]\n";
        assert!(without_tool(dotted, "a").is_err());
        let inline = "version = 1\n[tools.a]\ncommand = [\"ls\"]\n[tools.b]\ncommand = [\"id\"]\nparams = { p = { type = \"string\" } }\n";
        assert!(without_tool(inline, "b").is_ok(), "an inline table inside the tool's own table goes with it");
    }
}
