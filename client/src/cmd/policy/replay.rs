//! `cordon policy replay --audit FILE... --against DIR`: every call recorded in an audit log
//! decided again under the policies of DIR, offline, with cordond's own code
//! ([`cordon_core::replay`]); the log read as untrusted evidence ([`cordon_core::audit::read`]).
//! Exit status: 0 no flips, 1 flips found, 2 trouble (like `policy diff`).

use std::path::{Path, PathBuf};

use cordon_core::policy::{self, Host};
use cordon_core::replay::{Kind, Replayer, Report};
use serde_json::{Value, json};

use crate::cmd::output::print_json;
use crate::error::CliError;
use crate::term::outln;

/// What `cordon policy replay` was asked.
#[derive(Debug)]
pub(crate) struct Options {
    pub audit: Vec<PathBuf>,
    pub against: PathBuf,
    pub tool: Option<String>,
    pub since: Option<String>,
    pub fail_on: Vec<String>,
}

pub(crate) fn run(o: &Options, as_json: bool) -> Result<u8, CliError> {
    let gate = o
        .fail_on
        .iter()
        .flat_map(|k| k.split(','))
        .filter(|k| !k.is_empty())
        .map(|k| {
            Kind::parse(k.trim()).ok_or_else(|| {
                let kinds: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
                CliError::Usage(format!("--fail-on {k:?}: not a flip kind; the kinds are {}", kinds.join(", ")))
            })
        })
        .collect::<Result<Vec<Kind>, CliError>>()?;
    let since = match &o.since {
        None => None,
        Some(text) => {
            let d = policy::units::parse_duration(text)
                .map_err(|e| CliError::Usage(format!("--since {text:?}: {e} (e.g. 24h, 7d, 30m)")))?;
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            Some(u64::try_from(now.saturating_sub(d).as_nanos()).unwrap_or(u64::MAX))
        }
    };
    let set = load(&o.against)?;
    let gid_of = |name: &str| nix::unistd::Group::from_name(name).ok().flatten().map(|g| g.gid.as_raw());
    let mut replayer = Replayer::new(&set, &gid_of);
    replayer.tool = o.tool.clone();
    replayer.since = since;
    let walked = cordon_core::audit::read::walk(&o.audit, |_, _, v| replayer.feed(v))
        .map_err(|e| CliError::Other(format!("{e}; nothing was replayed")))?;
    let report = replayer.finish();
    let flips = report.gated_flips(&gate);
    let code = u8::from(flips > 0);
    if as_json {
        let mut out = report.json();
        if let Value::Object(m) = &mut out {
            m.insert("against".into(), json!({ "dir": o.against.display().to_string(), "policy": set.digest }));
            m.insert(
                "log".into(),
                json!({
                    "files": walked.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
                    "records": walked.records,
                    "first_seq": walked.first_seq,
                    "last_seq": walked.last_seq,
                    "starts_mid_chain": walked.starts_mid_chain,
                    "recorded_gaps": walked.gaps.iter().map(|g| json!({ "seq": g.seq, "decision": g.decision, "detail": g.detail })).collect::<Vec<_>>(),
                }),
            );
            m.insert("exit".into(), json!(code));
        }
        print_json(&out);
    } else {
        print(&report, &walked, &o.against, &set.digest);
    }
    Ok(code)
}

/// Loads the candidate as a cordond running as this user would (trust rules, parse, link),
/// without asking the host: availability is no part of a decision replayed.
fn load(dir: &Path) -> Result<policy::PolicySet, CliError> {
    if !std::fs::metadata(dir).is_ok_and(|m| m.is_dir()) {
        return Err(CliError::Usage(format!(
            "--against {}: not a directory; give the candidate policy directory",
            dir.display()
        )));
    }
    let host = Host::new(nix::unistd::geteuid().is_root(), i32::MAX);
    policy::load_dir_as(dir, &host, policy::Trust::current(), None).map_err(|e| {
        CliError::Other(format!(
            "{e}: the candidate policies of {} do not load, so nothing was replayed; `cordon policy check {}` says why",
            dir.display(),
            dir.display()
        ))
    })
}

fn print(report: &Report, walked: &cordon_core::audit::read::Walked, against: &Path, digest: &str) {
    let first = walked.first_seq.map_or_else(|| "-".into(), |s| s.to_string());
    let last = walked.last_seq.map_or_else(|| "-".into(), |s| s.to_string());
    outln!(
        "replayed {} file(s), records {first}..{last}, against {} (policy {})",
        walked.files.len(),
        against.display(),
        &digest[..digest.len().min(12)]
    );
    if walked.starts_mid_chain {
        outln!("  the log starts at seq {first}: older records were rotated away (--audit-keep) or not given");
    }
    for g in &walked.gaps {
        outln!("  recorded gap at seq {}: {} ({})", g.seq, g.decision, g.detail);
    }
    let mut current: Option<(&str, &cordon_core::replay::Who)> = None;
    for ((tool, who, kind), g) in &report.flips {
        if current != Some((tool.as_str(), who)) {
            outln!("");
            outln!("{tool}, called by {}:", caller(who));
            current = Some((tool.as_str(), who));
        }
        let e = &g.example;
        outln!("  {} x{}: e.g. seq {} at {}", kind.as_str(), g.count, e.seq, e.time);
        outln!("    arguments: {}", e.arguments);
        outln!("    was: {}", e.old);
        outln!("    now: {}", e.new);
        outln!("    why: {}", e.why);
    }
    if !report.not_replayable.is_empty() {
        outln!("");
        outln!("not replayable:");
        for ((tool, who, reason), g) in &report.not_replayable {
            outln!(
                "  {tool}, called by {}: {} x{} ({}), e.g. seq {}",
                caller(who),
                reason.as_str(),
                g.count,
                reason.explain(),
                g.example.seq
            );
        }
    }
    let flips: Vec<String> = report.flip_counts().iter().map(|(k, n)| format!("{} {n}", k.as_str())).collect();
    let not: Vec<String> = report.not_replayable_counts().iter().map(|(r, n)| format!("{} {n}", r.as_str())).collect();
    outln!("");
    outln!(
        "summary: {} call(s) read, {} replayed, {} egress record(s); flips: {}; not replayable: {}; recorded gaps: {}",
        report.calls,
        report.replayed,
        report.egress,
        if flips.is_empty() { "none".into() } else { flips.join(", ") },
        if not.is_empty() { "none".into() } else { not.join(", ") },
        walked.gaps.len()
    );
}

fn caller(who: &cordon_core::replay::Who) -> String {
    match (who.uid, &who.user) {
        (Some(uid), Some(user)) => format!("uid {uid} ({user})"),
        (Some(uid), None) => format!("uid {uid}"),
        _ => "an unknown caller".into(),
    }
}
