//! `cordon policy replay`: every call recorded in an audit log decided again under a candidate
//! policy set, with the code cordond decides with: `allow` (`Allow::admits_user` and
//! `admits_groups`),
//! [`crate::validate`], `confirm`, [`crate::argv::plan`] and the egress host rules
//! ([`crate::egress::Egress::matching`]).
//!
//! A *call* is one record of a call's decision: `started` and `cache_hit` (allowed), `dry_run`
//! (allowed, its confirmation unknown), `confirmation_requested` (allowed with a confirmation;
//! the `started` record of the same approval is the same call and not counted again), `denied`
//! (refused by `allow`), `invalid` (unknown tool or refused by validation, with its code and
//! field). Each `egress` record is decided again under the candidate's `hosts`. What a record
//! cannot tell is reported per call as *not replayable* with the reason, never guessed.
//!
//! Nothing here reads a file or looks a name up: the caller hands in the records (see
//! [`crate::audit::read`]) and how to resolve a group name. Arguments any candidate param marks
//! secret are never put in the report (cordond redacted the recorded policy's own).
//!
//! # Layout
//! - [`Replayer`]: fed one record at a time, keeps only what correlation needs (bounded).
//! - [`Report`]: counts and one example per (tool, caller, kind); [`Report::json`] is the
//!   documented `--json` shape.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use crate::argv::{self, Account};
use crate::egress::Target;
use crate::policy::{Confirm, PolicySet, Tool};
use crate::validate;

/// How many approvals (`confirmation_requested` waiting for their `started`) and running
/// invocations (for their `egress` records' caller) are remembered; older ones are forgotten.
const MAX_PENDING: usize = 65_536;

/// How a decision flipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    AllowedNowRefused,
    RefusedNowAllowed,
    ConfirmationAdded,
    ConfirmationDropped,
    ArgvChanged,
    EgressNowRefused,
    EgressNowAllowed,
    /// A terminal record's denial (landlock or the egress proxy) the candidate now grants.
    DenialNowGranted,
    /// An allowed call's path argument the candidate's read, write and exec grants no longer cover.
    GrantRemoved,
}

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::AllowedNowRefused,
        Kind::RefusedNowAllowed,
        Kind::ConfirmationAdded,
        Kind::ConfirmationDropped,
        Kind::ArgvChanged,
        Kind::EgressNowRefused,
        Kind::EgressNowAllowed,
        Kind::DenialNowGranted,
        Kind::GrantRemoved,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::AllowedNowRefused => "allowed_now_refused",
            Kind::RefusedNowAllowed => "refused_now_allowed",
            Kind::ConfirmationAdded => "confirmation_added",
            Kind::ConfirmationDropped => "confirmation_dropped",
            Kind::ArgvChanged => "argv_changed",
            Kind::EgressNowRefused => "egress_now_refused",
            Kind::EgressNowAllowed => "egress_now_allowed",
            Kind::DenialNowGranted => "denial_now_granted",
            Kind::GrantRemoved => "grant_removed",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Why a call cannot be decided again from its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// Written before records carried the raw arguments and role.
    NoArguments,
    /// The arguments were longer than a record keeps.
    ClippedArguments,
    /// A secret argument's value was redacted.
    RedactedSecret,
    /// `allow` needs the caller's user name or groups, and the record does not hold them.
    NoCallerEvidence,
    /// Refused for the moment (busy, unavailable, shutting down): nothing policy decides.
    RuntimeRefusal,
    /// A call of an MCP server's tool (its schema is the server's, not the policy's).
    ServerTool,
    /// A workflow call (its steps are replayed as calls of their tools).
    Workflow,
    /// An egress refusal that depended on DNS answers, addresses or limits.
    EgressRuntime,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NoArguments => "no_arguments",
            Reason::ClippedArguments => "clipped_arguments",
            Reason::RedactedSecret => "redacted_secret",
            Reason::NoCallerEvidence => "no_caller_evidence",
            Reason::RuntimeRefusal => "runtime_refusal",
            Reason::ServerTool => "server_tool",
            Reason::Workflow => "workflow",
            Reason::EgressRuntime => "egress_runtime",
        }
    }

    /// What the report says of it.
    pub fn explain(self) -> &'static str {
        match self {
            Reason::NoArguments => "the record holds no arguments or role (written before cordond recorded them)",
            Reason::ClippedArguments => {
                "the arguments were longer than a record keeps (4 KiB); they cannot be validated again"
            }
            Reason::RedactedSecret => {
                "a secret argument was redacted in the record; its value cannot be validated again"
            }
            Reason::NoCallerEvidence => {
                "the candidate's allow needs the caller's user name or groups, which the record does not hold"
            }
            Reason::RuntimeRefusal => "refused for the moment (busy, unavailable, shutting down), not by policy",
            Reason::ServerTool => "a call of an MCP server's tool: its schema is the server's",
            Reason::Workflow => "a workflow call: its steps are replayed as calls of their tools",
            Reason::EgressRuntime => "the refusal depended on DNS answers, addresses or connection limits",
        }
    }
}

/// A decision, recorded or made again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    /// `confirmation`: `None` when the record does not say (a dry run). `argv`: as recorded
    /// (redacted), or `None` when unknown.
    Allowed {
        confirmation: Option<Confirm>,
        argv: Option<ArgvSeen>,
    },
    Refused {
        by: By,
        code: String,
        field: Option<String>,
        message: String,
    },
}

impl Decided {
    /// Refused by validation, with the validator's code, field and message.
    fn by_validation(e: validate::ValidationError) -> Decided {
        Decided::Refused { by: By::Validation, code: e.code.to_string(), field: e.field, message: e.message }
    }
}

/// What refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    /// The tool is not defined (or disabled).
    Unknown,
    Allow,
    Validation,
}

impl By {
    fn as_str(self) -> &'static str {
        match self {
            By::Unknown => "unknown tool",
            By::Allow => "allow",
            By::Validation => "validation",
        }
    }
}

/// A recorded argv: the elements, or (clipped) the SHA-256 of the whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgvSeen {
    Full(Vec<String>),
    Sha256(String),
}

impl Decided {
    fn show(&self) -> String {
        match self {
            Decided::Allowed { confirmation: Some(c), .. } if *c != Confirm::None => {
                format!("allowed with {} confirmation", c.as_str())
            }
            Decided::Allowed { .. } => "allowed".into(),
            Decided::Refused { by, code, field: Some(f), .. } => {
                format!("refused by {} ({code}, field {f})", by.as_str())
            }
            Decided::Refused { by, code, .. } => format!("refused by {} ({code})", by.as_str()),
        }
    }
}

/// Who called, for grouping.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Who {
    pub uid: Option<u64>,
    pub user: Option<String>,
}

/// One example of a group.
#[derive(Debug, Clone)]
pub struct Example {
    pub seq: u64,
    pub time: String,
    /// The call's arguments, redacted again with the candidate's secret params.
    pub arguments: Value,
    pub old: String,
    pub new: String,
    pub why: String,
}

/// A count and its first example.
#[derive(Debug, Clone)]
pub struct Group {
    pub count: u64,
    pub example: Example,
}

/// What a replay found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Call records read (after `--tool` and `--since`).
    pub calls: u64,
    /// Calls decided again (the rest are not replayable).
    pub replayed: u64,
    /// Egress records decided again.
    pub egress: u64,
    pub flips: BTreeMap<(String, Who, Kind), Group>,
    pub not_replayable: BTreeMap<(String, Who, Reason), Group>,
}

impl Report {
    /// Flips by kind.
    pub fn flip_counts(&self) -> BTreeMap<Kind, u64> {
        let mut out = BTreeMap::new();
        for ((_, _, k), g) in &self.flips {
            *out.entry(*k).or_default() += g.count;
        }
        out
    }

    /// Not replayable calls by reason.
    pub fn not_replayable_counts(&self) -> BTreeMap<Reason, u64> {
        let mut out = BTreeMap::new();
        for ((_, _, r), g) in &self.not_replayable {
            *out.entry(*r).or_default() += g.count;
        }
        out
    }

    /// Flips of the kinds in `gate` (all kinds when empty).
    pub fn gated_flips(&self, gate: &[Kind]) -> u64 {
        self.flip_counts().into_iter().filter(|(k, _)| gate.is_empty() || gate.contains(k)).map(|(_, n)| n).sum()
    }

    /// The `--json` shape's `flips`, `not_replayable` and counts (see docs/replay.md).
    pub fn json(&self) -> Value {
        let example = |e: &Example| json!({ "seq": e.seq, "time": e.time, "arguments": e.arguments, "old": e.old, "new": e.new, "why": e.why });
        let flips: Vec<Value> = self
            .flips
            .iter()
            .map(|((tool, who, kind), g)| {
                json!({ "tool": tool, "uid": who.uid, "user": who.user, "kind": kind.as_str(), "count": g.count, "example": example(&g.example) })
            })
            .collect();
        let not: Vec<Value> = self
            .not_replayable
            .iter()
            .map(|((tool, who, reason), g)| {
                json!({ "tool": tool, "uid": who.uid, "user": who.user, "reason": reason.as_str(), "count": g.count, "example": example(&g.example) })
            })
            .collect();
        let by_kind: serde_json::Map<String, Value> = Kind::ALL
            .iter()
            .map(|k| (k.as_str().to_string(), json!(self.flip_counts().get(k).copied().unwrap_or(0))))
            .collect();
        let by_reason: serde_json::Map<String, Value> =
            self.not_replayable_counts().into_iter().map(|(r, n)| (r.as_str().to_string(), json!(n))).collect();
        json!({
            "calls": self.calls,
            "replayed": self.replayed,
            "egress": self.egress,
            "flip_counts": by_kind,
            "not_replayable_counts": by_reason,
            "flips": flips,
            "not_replayable": not,
        })
    }
}

/// Decides recorded calls again under a candidate policy set.
pub struct Replayer<'a> {
    tools: HashMap<&'a str, &'a Arc<Tool>>,
    workflows: HashSet<&'a str>,
    /// The candidate's digest: a call recorded under the same set cannot have lost a grant.
    digest: &'a str,
    gid_of: &'a dyn Fn(&str) -> Option<u32>,
    /// Only this tool's calls (`--tool`).
    pub tool: Option<String>,
    /// Only records at or after this time (Unix nanoseconds; `--since`).
    pub since: Option<u64>,
    /// Approvals requested whose `started` has not been seen.
    approvals: HashSet<String>,
    approvals_order: VecDeque<String>,
    /// Running invocations' callers, for their `egress` records.
    running: HashMap<String, Who>,
    running_order: VecDeque<String>,
    report: Report,
}

impl std::fmt::Debug for Replayer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replayer").field("tool", &self.tool).field("report", &self.report).finish_non_exhaustive()
    }
}

fn s<'v>(v: &'v Value, key: &str) -> Option<&'v str> {
    v.get(key).and_then(Value::as_str)
}

impl<'a> Replayer<'a> {
    /// A replayer of `candidate`; `gid_of` resolves a group name of its `allow` (on this host).
    pub fn new(candidate: &'a PolicySet, gid_of: &'a dyn Fn(&str) -> Option<u32>) -> Replayer<'a> {
        Replayer {
            tools: candidate.tools.iter().map(|t| (t.name.as_str(), t)).collect(),
            workflows: candidate.workflows.iter().map(|w| w.name.as_str()).collect(),
            digest: candidate.digest.as_str(),
            gid_of,
            tool: None,
            since: None,
            approvals: HashSet::new(),
            approvals_order: VecDeque::new(),
            running: HashMap::new(),
            running_order: VecDeque::new(),
            report: Report::default(),
        }
    }

    pub fn finish(self) -> Report {
        self.report
    }

    /// Takes the next record of the log (in seq order).
    pub fn feed(&mut self, v: &Value) {
        let decision = s(v, "decision").unwrap_or_default();
        let tool = s(v, "tool").unwrap_or_default().to_string();
        // Correlation first, whatever the filters.
        match decision {
            "started" => {
                if let Some(id) = s(v, "id") {
                    remember(&mut self.running, &mut self.running_order, id.to_string(), who(v));
                }
            }
            "finished" | "timed_out" | "cancelled" | "failed" | "aborted" => {
                let who = s(v, "id").and_then(|id| self.running.remove(id));
                let wanted = self.tool.as_ref().is_none_or(|t| *t == tool)
                    && self.since.is_none_or(|since| {
                        s(v, "time").and_then(crate::audit::chain::unix_nanos).is_some_and(|t| t >= since)
                    });
                if wanted {
                    self.denials(v, &tool, who.unwrap_or_default());
                }
                return;
            }
            _ => {}
        }
        if self.tool.as_ref().is_some_and(|t| *t != tool) {
            return;
        }
        if let Some(since) = self.since
            && s(v, "time").and_then(crate::audit::chain::unix_nanos).is_none_or(|t| t < since)
        {
            return;
        }
        if v.get("reported_by").is_some() {
            return; // the front-end's report of a refusal it made itself, not cordond's decision
        }
        let recorded = match decision {
            "started" => {
                if let Some(approval) = v.pointer("/confirmation/approval_id").and_then(Value::as_str)
                    && self.approvals.remove(approval)
                {
                    return; // its confirmation_requested record was the call
                }
                let confirmation = match v.pointer("/confirmation") {
                    Some(_) => Some(Confirm::Agent),
                    None => Some(Confirm::None),
                };
                Decided::Allowed { confirmation, argv: argv_seen(v) }
            }
            "cache_hit" => Decided::Allowed { confirmation: Some(Confirm::None), argv: argv_seen(v) },
            "dry_run" => Decided::Allowed { confirmation: None, argv: argv_seen(v) },
            "confirmation_requested" => {
                if let Some(approval) = s(v, "approval_id") {
                    remember_set(&mut self.approvals, &mut self.approvals_order, approval.to_string());
                }
                let mode = match s(v, "mode") {
                    Some("human") => Confirm::Human,
                    _ => Confirm::Agent,
                };
                Decided::Allowed { confirmation: Some(mode), argv: argv_seen(v) }
            }
            "denied" if matches!(s(v, "operation"), Some("invoke" | "dry_run" | "run_workflow")) => {
                refused(v, By::Allow)
            }
            "invalid" if s(v, "code") == Some("UNKNOWN_TOOL") => refused(v, By::Unknown),
            "invalid" => refused(v, By::Validation),
            "refused" => {
                self.report.calls += 1;
                self.not_replayable(v, &tool, Reason::RuntimeRefusal);
                return;
            }
            "egress" => {
                self.egress(v, &tool);
                return;
            }
            _ => return,
        };
        self.report.calls += 1;
        if v.get("server").is_some() || tool.contains("__") && !self.tools.contains_key(tool.as_str()) {
            self.not_replayable(v, &tool, Reason::ServerTool);
            return;
        }
        if s(v, "operation") == Some("run_workflow") && v.get("step").is_none()
            || self.workflows.contains(tool.as_str())
        {
            self.not_replayable(v, &tool, Reason::Workflow);
            return;
        }
        match self.decide_with_paths(v, &tool) {
            Err(reason) => self.not_replayable(v, &tool, reason),
            Ok((new, outside)) => {
                self.report.replayed += 1;
                for (kind, why) in compare(&recorded, &new) {
                    let ex = self.example(v, &tool, recorded.show(), new.show(), why);
                    add(&mut self.report.flips, (tool.clone(), who(v), kind), ex);
                }
                // The record holds the digest of the set it ran under, not its grants: a path no
                // grant of the candidate covers is a lost grant only when the set changed (under
                // the same set the call ran as it would now).
                if decision == "started" && s(v, "policy") != Some(self.digest) {
                    for (param, path) in outside {
                        let path = path.display();
                        let why = format!(
                            "param {param:?}: {path} is inside no `read`, `write` or `exec` grant of the candidate (the call ran with it)"
                        );
                        let ex = self.example(
                            v,
                            &tool,
                            format!("ran with {param} = {path}"),
                            format!("no grant covers {path}"),
                            why,
                        );
                        add(&mut self.report.flips, (tool.clone(), who(v), Kind::GrantRemoved), ex);
                    }
                }
            }
        }
    }

    /// The candidate's decision on a recorded call.
    pub fn decide(&self, v: &Value, tool_name: &str) -> Result<Decided, Reason> {
        self.decide_with_paths(v, tool_name).map(|(d, _)| d)
    }

    /// [`Replayer::decide`], with the path arguments (param, path) of an allowed call that no
    /// `read`, `write` or `exec` grant of the candidate covers (a grant's `deny` carve-outs
    /// taken out).
    fn decide_with_paths(&self, v: &Value, tool_name: &str) -> Result<(Decided, Vec<(String, PathBuf)>), Reason> {
        let decided = self.decide_inner(v, tool_name)?;
        let (decided, args) = match decided {
            (d @ Decided::Allowed { .. }, Some(args)) => (d, args),
            (d, _) => return Ok((d, Vec::new())),
        };
        let Some(tool) = self.tools.get(tool_name) else { return Ok((decided, Vec::new())) };
        let outside = args
            .iter()
            .filter_map(|(name, value)| match value {
                validate::ArgValue::Path(p) if !covered(&tool.sandbox, p) => Some((name.to_string(), p.clone())),
                _ => None,
            })
            .collect();
        Ok((decided, outside))
    }

    fn decide_inner(&self, v: &Value, tool_name: &str) -> Result<(Decided, Option<validate::Arguments>), Reason> {
        let Some(tool) = self.tools.get(tool_name).filter(|t| !t.disabled) else {
            return Ok((
                Decided::Refused {
                    by: By::Unknown,
                    code: "UNKNOWN_TOOL".into(),
                    field: None,
                    message: format!("the candidate has no tool {tool_name:?} (or it is disabled)"),
                },
                None,
            ));
        };
        let Some(role) = s(v, "role") else { return Err(Reason::NoArguments) };
        if role != "admin" {
            let uid = v.pointer("/caller/uid").and_then(Value::as_u64).and_then(|u| u32::try_from(u).ok());
            let Some(uid) = uid else { return Err(Reason::NoCallerEvidence) };
            let admitted = match &tool.allow {
                None => false,
                Some(allow) => {
                    let user = match v.get("user") {
                        Some(Value::String(u)) => Some(Some(u.as_str())),
                        Some(Value::Null) => Some(None),
                        _ => None,
                    };
                    let by_user = match (allow.needs_user_name(), user) {
                        (true, None) if allow.users.iter().any(|p| matches!(p, crate::policy::Principal::Name(_))) => {
                            // Only a name principal needs the name; ids decide without it.
                            if allow.admits_user(uid, None) {
                                true
                            } else {
                                return Err(Reason::NoCallerEvidence);
                            }
                        }
                        (_, user) => allow.admits_user(uid, user.flatten()),
                    };
                    if by_user || allow.groups.is_empty() {
                        by_user
                    } else {
                        let groups: Option<Vec<u32>> =
                            v.get("groups").or_else(|| v.pointer("/caller/groups")).and_then(Value::as_array).map(
                                |a| a.iter().filter_map(|g| g.as_u64().and_then(|g| u32::try_from(g).ok())).collect(),
                            );
                        let Some(mut groups) = groups else { return Err(Reason::NoCallerEvidence) };
                        if let Some(gid) =
                            v.pointer("/caller/gid").and_then(Value::as_u64).and_then(|g| u32::try_from(g).ok())
                            && !groups.contains(&gid)
                        {
                            groups.push(gid);
                        }
                        let admitted = allow.admits_groups(&groups, self.gid_of);
                        if !admitted && v.get("groups_total").is_some() {
                            // The record kept only the first of the caller's groups.
                            return Err(Reason::NoCallerEvidence);
                        }
                        admitted
                    }
                }
            };
            if !admitted {
                return Ok((
                    Decided::Refused {
                        by: By::Allow,
                        code: "PERMISSION_DENIED".into(),
                        field: None,
                        message: format!("the candidate's allow of {tool_name:?} does not admit uid {uid}"),
                    },
                    None,
                ));
            }
        }
        let arguments = match v.get("arguments") {
            Some(Value::String(a)) => a.as_str(),
            Some(Value::Object(_)) => return Err(Reason::ClippedArguments),
            Some(_) => return Err(Reason::RedactedSecret),
            None => return Err(Reason::NoArguments),
        };
        let json = match validate::parse_arguments(arguments) {
            Ok(j) => j,
            Err(e) => return Ok((Decided::by_validation(e), None)),
        };
        if json.as_object().is_some_and(|m| m.values().any(|x| x.as_str() == Some(argv::REDACTED))) {
            return Err(Reason::RedactedSecret);
        }
        let args = match validate::validate(tool, &json) {
            Ok(a) => a,
            Err(e) => return Ok((Decided::by_validation(e), None)),
        };
        let run_uid = v
            .pointer("/run_as/uid")
            .or_else(|| v.pointer("/caller/uid"))
            .and_then(Value::as_u64)
            .and_then(|u| u32::try_from(u).ok())
            .unwrap_or(0);
        let plan = argv::plan(tool, Path::new(&tool.program), &args, &Account::for_uid(run_uid));
        Ok((
            Decided::Allowed { confirmation: Some(tool.confirm), argv: Some(ArgvSeen::Full(plan.display_argv)) },
            Some(args),
        ))
    }

    /// An `egress` record decided again under the candidate's `hosts`.
    fn egress(&mut self, v: &Value, tool_name: &str) {
        let (Some(host), Some(port)) = (s(v, "host"), v.get("port").and_then(Value::as_u64)) else { return };
        let Ok(port) = u16::try_from(port) else { return };
        let who = s(v, "id").and_then(|id| self.running.get(id)).cloned().unwrap_or_default();
        let was = match (v.get("allowed").and_then(Value::as_bool), s(v, "why")) {
            (Some(false), Some("not-listed")) => false,
            (Some(false), _) => {
                let ex = self.example(
                    v,
                    tool_name,
                    format!("{host}:{port} refused"),
                    "not decided".into(),
                    Reason::EgressRuntime.explain().into(),
                );
                add(&mut self.report.not_replayable, (tool_name.to_string(), who, Reason::EgressRuntime), ex);
                return;
            }
            _ => true,
        };
        self.report.egress += 1;
        let rule = Target::parse(host).and_then(|t| {
            self.tools
                .get(tool_name)
                .filter(|t| !t.disabled)
                .and_then(|tool| tool.sandbox.network.egress())
                .and_then(|e| e.matching(&t, port))
                .map(|r| r.to_string())
        });
        let (kind, now) = match (was, rule) {
            (true, None) => (Kind::EgressNowRefused, "refused: no rule of the candidate's hosts grants it".to_string()),
            (false, Some(rule)) => (Kind::EgressNowAllowed, format!("allowed by {rule:?}")),
            _ => return,
        };
        let old = format!("{host}:{port} {}", if was { "allowed" } else { "refused (not-listed)" });
        let ex = self.example(v, tool_name, old, now.clone(), now);
        add(&mut self.report.flips, (tool_name.to_string(), who, kind), ex);
    }

    /// A terminal record's exact denials (landlock, the egress proxy) the candidate now grants:
    /// `read` under a read, write or exec grant, `write` under a write grant (not inside a
    /// `.git` directory: the default protected set), `exec` under an exec grant, `hosts` by its
    /// host rules. A tool with carve-outs is not decided (a carve-out may refuse inside a grant).
    fn denials(&mut self, v: &Value, tool_name: &str, who: Who) {
        let Some(denials) = v.get("denials").and_then(Value::as_array) else { return };
        let tool = self.tools.get(tool_name).filter(|t| !t.disabled).copied();
        for d in denials {
            if !matches!(s(d, "source"), Some("landlock" | "proxy")) {
                continue; // inferred from the tool's words: unverified
            }
            let (Some(key), Some(target)) = (s(d, "grant_key"), s(d, "target")) else { continue };
            let Some(tool) = tool else { continue };
            let sb = &tool.sandbox;
            let under = |roots: &[&Vec<std::path::PathBuf>]| {
                roots.iter().any(|r| r.iter().any(|g| Path::new(target).starts_with(g)))
            };
            let granted = match key {
                "read" => under(&[&sb.read, &sb.write, &sb.exec]),
                "write" => under(&[&sb.write]) && !Path::new(target).components().any(|c| c.as_os_str() == ".git"),
                "exec" => under(&[&sb.exec]),
                "hosts" => target.rsplit_once(':').is_some_and(|(host, port)| {
                    let (Some(t), Ok(port)) = (Target::parse(host), port.parse::<u16>()) else { return false };
                    sb.network.egress().and_then(|e| e.matching(&t, port)).is_some()
                }),
                _ => false,
            };
            if !granted {
                continue;
            }
            if !sb.carve.is_empty() && key != "hosts" {
                continue; // a carve-out may still refuse it: not decided
            }
            let old = format!("denied: {}", s(d, "message").unwrap_or(target));
            let why = format!("the candidate's `{key}` grants {target}");
            let ex = self.example(v, tool_name, old, format!("granted by `{key}`"), why);
            add(&mut self.report.flips, (tool_name.to_string(), who.clone(), Kind::DenialNowGranted), ex);
        }
    }

    fn not_replayable(&mut self, v: &Value, tool: &str, reason: Reason) {
        let ex = self.example(v, tool, recorded_text(v), "not decided".into(), reason.explain().into());
        add(&mut self.report.not_replayable, (tool.to_string(), who(v), reason), ex);
    }

    /// An example: the record's seq and time and its arguments redacted with the candidate's
    /// secret params; every text scrubbed of their values.
    fn example(&self, v: &Value, tool: &str, old: String, new: String, why: String) -> Example {
        let (arguments, secrets) = redact(v.get("arguments"), self.tools.get(tool).map(|t| &***t));
        let scrub = |t: String| secrets.iter().fold(t, |t, secret| t.replace(secret.as_str(), argv::REDACTED));
        Example {
            seq: v.get("seq").and_then(Value::as_u64).unwrap_or_default(),
            time: s(v, "time").unwrap_or_default().to_string(),
            arguments,
            old: scrub(old),
            new: scrub(new),
            why: scrub(why),
        }
    }
}

/// Whether a `read`, `write` or `exec` grant covers `path`: it is at or under the grant and no
/// `deny` carve-out of that grant matches it or a directory above it.
fn covered(sb: &crate::policy::SandboxPolicy, path: &Path) -> bool {
    sb.read.iter().chain(&sb.write).chain(&sb.exec).any(|root| {
        let Ok(rel) = path.strip_prefix(root) else { return false };
        let rel: Vec<&str> = rel.components().filter_map(|c| c.as_os_str().to_str()).collect();
        !crate::policy::carve::for_root(&sb.carve, root)
            .any(|c| c.deny.iter().any(|d| (1..=rel.len()).any(|n| d.matches(&rel[..n]))))
    })
}

/// What the record's decision was, in words.
fn recorded_text(v: &Value) -> String {
    match (s(v, "decision"), s(v, "code")) {
        (Some(d), Some(c)) => format!("{d} ({c})"),
        (Some(d), None) => d.to_string(),
        _ => String::new(),
    }
}

fn refused(v: &Value, by: By) -> Decided {
    Decided::Refused {
        by,
        code: s(v, "code").unwrap_or_default().to_string(),
        field: s(v, "field").map(str::to_string),
        message: s(v, "message").unwrap_or_default().to_string(),
    }
}

fn argv_seen(v: &Value) -> Option<ArgvSeen> {
    if let Some(sha) = v.pointer("/argv_clipped/sha256").and_then(Value::as_str) {
        return Some(ArgvSeen::Sha256(sha.to_string()));
    }
    let argv = v.get("argv")?.as_array()?;
    Some(ArgvSeen::Full(argv.iter().map(|a| a.as_str().unwrap_or_default().to_string()).collect()))
}

fn who(v: &Value) -> Who {
    Who { uid: v.pointer("/caller/uid").and_then(Value::as_u64), user: s(v, "user").map(str::to_string) }
}

fn add<K: Ord>(map: &mut BTreeMap<K, Group>, key: K, example: Example) {
    map.entry(key).and_modify(|g| g.count += 1).or_insert(Group { count: 1, example });
}

fn remember(map: &mut HashMap<String, Who>, order: &mut VecDeque<String>, key: String, value: Who) {
    if map.len() >= MAX_PENDING
        && let Some(old) = order.pop_front()
    {
        map.remove(&old);
    }
    order.push_back(key.clone());
    map.insert(key, value);
}

fn remember_set(set: &mut HashSet<String>, order: &mut VecDeque<String>, key: String) {
    if set.len() >= MAX_PENDING
        && let Some(old) = order.pop_front()
    {
        set.remove(&old);
    }
    order.push_back(key.clone());
    set.insert(key);
}

/// The flips between a recorded decision and the candidate's, each with why.
pub fn compare(old: &Decided, new: &Decided) -> Vec<(Kind, String)> {
    match (old, new) {
        (Decided::Allowed { .. }, Decided::Refused { message, .. }) => vec![(Kind::AllowedNowRefused, message.clone())],
        (Decided::Refused { .. }, Decided::Allowed { .. }) => {
            vec![(Kind::RefusedNowAllowed, "the candidate admits and validates the call".into())]
        }
        (Decided::Refused { .. }, Decided::Refused { .. }) => Vec::new(),
        (
            Decided::Allowed { confirmation: was, argv: argv_was },
            Decided::Allowed { confirmation: now, argv: argv_now },
        ) => {
            let mut out = Vec::new();
            match (was, now) {
                (Some(Confirm::None), Some(c)) if *c != Confirm::None => {
                    out.push((Kind::ConfirmationAdded, format!("the candidate asks for {} confirmation", c.as_str())));
                }
                (Some(c), Some(Confirm::None)) if *c != Confirm::None => {
                    out.push((Kind::ConfirmationDropped, "the candidate asks for no confirmation".into()));
                }
                _ => {}
            }
            if let (Some(was), Some(ArgvSeen::Full(now))) = (argv_was, argv_now) {
                let same = match was {
                    ArgvSeen::Full(w) => w == now,
                    ArgvSeen::Sha256(sha) => crate::audit::argv_sha256(now) == *sha,
                };
                if !same {
                    let was_text = match was {
                        ArgvSeen::Full(w) => format!("{w:?}"),
                        ArgvSeen::Sha256(sha) => format!("(clipped, sha256 {sha})"),
                    };
                    out.push((Kind::ArgvChanged, format!("argv was {was_text}, now {now:?}")));
                }
            }
            out
        }
    }
}

/// The recorded arguments for the report: values of the candidate tool's secret params (and,
/// for a tool with secrets, every unknown field) redacted; a clipped value shows only its size.
/// Also the values taken out, to scrub from other text.
fn redact(arguments: Option<&Value>, tool: Option<&Tool>) -> (Value, Vec<String>) {
    let any_secret = tool.is_some_and(|t| t.params.iter().any(|p| p.secret));
    let mut secrets = Vec::new();
    let value = match arguments {
        None => Value::Null,
        Some(Value::Object(clipped)) => json!({ "clipped_bytes": clipped.get("bytes") }),
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(mut map)) => {
                for (key, value) in &mut map {
                    let secret = tool.is_some_and(|t| t.param(key).map_or(any_secret, |p| p.secret));
                    if secret {
                        if let Some(text) = value.as_str().filter(|t| !t.is_empty() && *t != argv::REDACTED) {
                            secrets.push(text.to_string());
                        } else if !value.is_string() {
                            secrets.push(value.to_string());
                        }
                        *value = Value::from(argv::REDACTED);
                    }
                }
                Value::Object(map)
            }
            _ if any_secret => Value::from(argv::REDACTED),
            Ok(other) => other,
            Err(_) => Value::from(text.as_str()),
        },
        Some(other) => other.clone(),
    };
    (value, secrets)
}

#[cfg(test)]
mod tests;
