//! Domain types -> `cordon.v1` messages. Only the server module sees proto types; [`tool`] and
//! [`param`] are public so the front-end's round trip (daemon -> proto -> client) can be tested.

use cordon_proto::v1;

use crate::invoke::confirm::{PendingInfo, Ticket};
use crate::invoke::{Answer, CacheHit, DryRun, RunningInfo};
use cordon_core::policy::{
    Availability, Confirm, Danger, Diagnostic, Network, Output, Param, ParamKind, Principal, RunAs, Severity, Tool,
    Workflow,
};
use cordon_sandbox::OutputChunk;

use crate::servers::call::CallAnswer;
use crate::servers::catalog::{Listed, State as ListedState};
use crate::servers::instance::CallError;
use crate::servers::{Key, ServerView};
use cordon_core::policy::McpServer;

/// `now` is the tool's availability at this moment (`Tool::availability_now`, which checks its
/// pins: computed once per tool and request by the caller).
pub fn tool(t: &Tool, now: &Availability) -> v1::Tool {
    let mut out = tool_for_agents(t, now);
    if let Availability::Available { executable } = now {
        out.executable = executable.display().to_string();
        out.note = t.pending_note(true).unwrap_or_default();
    }
    out.reason = t.reason.clone().unwrap_or_default();
    out.command = t.command_template();
    out.working_dir = t.working_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default();
    out.source = t.source.to_string();
    out.grants = Some(grants(t));
    out
}

/// [`tool`] without what only admins see (command, executable, working directory, source,
/// reason, grants): not built at all for agent callers, whose `ListTools` answer leaves it out.
pub(crate) fn tool_for_agents(t: &Tool, now: &Availability) -> v1::Tool {
    let (available, unavailable_reason) = match now {
        Availability::Available { .. } => (true, String::new()),
        Availability::Unavailable { reason } => (false, reason.clone()),
    };
    let output_schema_json = t.advertised_output_schema().map(|s| s.to_string()).unwrap_or_default();
    let note = if available { t.pending_note(false).unwrap_or_default() } else { String::new() };
    v1::Tool {
        server: String::new(),
        server_tool: String::new(),
        server_rules_json: String::new(),
        note,
        name: t.name.clone(),
        title: t.annotations.title.clone().unwrap_or_default(),
        description: t.description.clone(),
        reason: String::new(),
        available,
        unavailable_reason,
        disabled: t.disabled,
        params: t.params.iter().map(param).collect(),
        input_schema_json: t.input_schema.as_str().to_string(),
        output_schema_json,
        output: match t.output {
            Output::Text => v1::OutputFormat::Text,
            Output::Json { .. } => v1::OutputFormat::Json,
        } as i32,
        confirm: match t.confirm {
            Confirm::None => v1::Confirm::None,
            Confirm::Agent => v1::Confirm::Agent,
            Confirm::Human => v1::Confirm::Human,
        } as i32,
        danger: match t.danger {
            Danger::Safe => v1::Danger::Safe,
            Danger::Moderate => v1::Danger::Moderate,
            Danger::High => v1::Danger::High,
        } as i32,
        read_only: t.annotations.read_only,
        idempotent: t.annotations.idempotent,
        network: t.has_network(),
        timeout_ms: u64::try_from(t.timeout.as_millis()).unwrap_or(u64::MAX),
        max_output_bytes: t.max_output,
        command: Vec::new(),
        executable: String::new(),
        working_dir: String::new(),
        source: String::new(),
        grants: None,
        workflow: false,
        steps: Vec::new(),
        ok_exit_codes: t.ok_exit_codes.clone(),
        cache: t.cache.as_ref().map(|c| v1::ToolCache { ttl_ms: millis(c.ttl), error_ttl_ms: c.error_ttl.map(millis) }),
    }
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A workflow as `ListTools` and `GetTool` show it: like a tool (its params, its input schema),
/// with `workflow` set, its step tools, and the schema of its result as the output schema.
/// `available` when every step tool can run now; `admin` adds its source and reason.
pub(crate) fn workflow(w: &Workflow, unavailable: Option<String>, admin: bool) -> v1::Tool {
    v1::Tool {
        server: String::new(),
        server_tool: String::new(),
        server_rules_json: String::new(),
        note: String::new(),
        name: w.name.clone(),
        title: String::new(),
        description: w.description.clone(),
        reason: if admin { w.reason.clone().unwrap_or_default() } else { String::new() },
        available: unavailable.is_none(),
        unavailable_reason: unavailable.unwrap_or_default(),
        disabled: false,
        params: w.params.iter().map(param).collect(),
        input_schema_json: w.input_schema.as_str().to_string(),
        output_schema_json: WORKFLOW_RESULT_SCHEMA.to_string(),
        output: v1::OutputFormat::Json as i32,
        confirm: v1::Confirm::None as i32,
        danger: v1::Danger::Safe as i32,
        read_only: false,
        idempotent: false,
        network: false,
        timeout_ms: 0,
        max_output_bytes: 0,
        command: Vec::new(),
        executable: String::new(),
        working_dir: String::new(),
        source: if admin { w.source.to_string() } else { String::new() },
        grants: None,
        workflow: true,
        steps: w.step_tools().map(str::to_string).collect(),
        ok_exit_codes: Vec::new(),
        cache: None,
    }
}

/// JSON Schema of a workflow's result as the MCP front-end sends it (`structuredContent`): the
/// fields of [`v1::WorkflowResult`].
pub(crate) const WORKFLOW_RESULT_SCHEMA: &str = r#"{"type":"object","properties":{"workflow":{"type":"string"},"workflow_id":{"type":"string"},"ok":{"type":"boolean"},"step_count":{"type":"integer"},"steps":{"type":"array","items":{"type":"object","properties":{"index":{"type":"integer"},"tool":{"type":"string"},"ok":{"type":"boolean"},"exit_code":{"type":["integer","null"]},"duration_ms":{"type":"integer"},"error":{"type":["string","null"]},"invocation_id":{"type":"string"},"stderr_tail":{"type":"string"}},"required":["index","tool","ok","exit_code","duration_ms","error","invocation_id"]}},"failed_step":{"type":["object","null"],"properties":{"index":{"type":"integer"},"tool":{"type":"string"},"why":{"type":"string"}},"required":["index","tool","why"]}},"required":["workflow","workflow_id","ok","step_count","steps","failed_step"]}"#;

/// How a workflow ended, as the wire says it.
pub(crate) fn workflow_result(run: &crate::invoke::workflow::WorkflowRun) -> v1::WorkflowResult {
    let n = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
    v1::WorkflowResult {
        workflow_id: run.id.clone(),
        workflow: run.workflow.clone(),
        ok: run.ok(),
        steps: run
            .steps
            .iter()
            .map(|s| v1::WorkflowStep {
                index: n(s.index),
                tool: s.tool.clone(),
                ok: s.ok,
                exit_code: s.exit_code,
                duration_ms: s.duration_ms,
                error: s.error.clone().unwrap_or_default(),
                invocation_id: s.invocation_id.clone(),
                stderr_tail: s.stderr_tail.clone(),
            })
            .collect(),
        failed_step: run.failed_step.as_ref().map(|f| v1::WorkflowFailedStep {
            index: n(f.index),
            tool: f.tool.clone(),
            why: f.why.clone(),
        }),
        step_count: n(run.step_count),
        generation: run.generation,
    }
}

/// What the tool may touch and who may call it (`for_role` removes it for agents).
fn grants(t: &Tool) -> v1::ToolGrants {
    let paths = |p: &[std::path::PathBuf]| p.iter().map(|p| p.display().to_string()).collect::<Vec<_>>();
    let s = &t.sandbox;
    let (connect_tcp, bind_tcp) = match &s.network {
        Network::None => (Vec::new(), Vec::new()),
        Network::Tcp { connect, bind, .. } => {
            (connect.iter().map(|p| u32::from(*p)).collect(), bind.iter().map(|p| u32::from(*p)).collect())
        }
    };
    let names = |p: &[Principal]| p.iter().map(ToString::to_string).collect::<Vec<_>>();
    v1::ToolGrants {
        read: paths(&s.read),
        write: paths(&s.write),
        exec: paths(&s.exec),
        connect_tcp,
        bind_tcp,
        unix_sockets: paths(&s.unix_sockets),
        memory_bytes: s.limits.memory,
        processes: s.limits.processes,
        open_files: s.limits.open_files,
        file_size_bytes: s.limits.file_size,
        cpu_time_ms: s.limits.cpu_time.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        env_keys: t.env.keys().cloned().collect(),
        allow_set: t.allow.is_some(),
        allow_users: t.allow.as_ref().map(|a| names(&a.users)).unwrap_or_default(),
        allow_groups: t.allow.as_ref().map(|a| names(&a.groups)).unwrap_or_default(),
        run_as: s
            .run_as
            .as_ref()
            .map(|r| match r {
                RunAs::Account { user, group: Some(g) } => format!("{user}:{g}"),
                RunAs::Account { user, group: None } => user.to_string(),
                RunAs::OwnerOfWorkingDir => "owner of working_dir".to_string(),
            })
            .unwrap_or_default(),
        min_landlock_abi: s.min_landlock_abi,
        temp: cordon_core::policy::Temp::describe(s, t.working_dir.as_deref()),
        hosts: s.network.egress().map(|e| e.hosts.iter().map(ToString::to_string).collect()).unwrap_or_default(),
        max_connections: s.network.egress().map(|e| e.max_connections),
        max_bytes: s.network.egress().map(|e| e.max_bytes),
        max_connections_per_call: s.network.egress().map(|e| e.max_connections_per_call),
        host_rules: s.network.egress().map(|e| e.http.iter().map(host_rules).collect()).unwrap_or_default(),
        carve_outs: cordon_core::policy::carve::describe(&s.carve, &s.write),
        accepted_warnings: t
            .accepted_warnings
            .iter()
            .map(|a| match &a.reason {
                Some(r) => format!("{}: {r}", a.lint),
                None => a.lint.clone(),
            })
            .collect(),
        secrets: secret_lines(t),
    }
}

/// What `cordon tool NAME` says of a tool's secrets: names, sources, places and hosts, never a
/// value (cordond does not hold one outside a call).
fn secret_lines(t: &Tool) -> Vec<String> {
    let mut out: Vec<String> = t
        .secrets
        .iter()
        .map(|s| {
            let hosts: Vec<String> = s.decl.hosts.iter().map(ToString::to_string).collect();
            let what = if s.file {
                "the path of a file (mode 0400, in the call's temp space) holding a per-call placeholder"
            } else {
                "a per-call placeholder"
            };
            format!(
                "{}: {what} of secret {:?} ({}), replaced in the {} of requests to {}",
                s.env,
                s.decl.name,
                s.decl.source,
                s.decl.place,
                hosts.join(", ")
            )
        })
        .collect();
    if t.terminated() {
        out.push(format!(
            "TLS to those hosts is terminated by cordond's proxy; {} name its trust bundle (the system's roots and \
             cordond's CA)",
            cordon_core::secret::TRUST_ENV.join(", ")
        ));
    }
    out
}

/// A `hosts` entry table in a line: its rule, what may be asked of it, its `upstream_ca`.
fn host_rules(h: &cordon_core::egress::HostHttp) -> String {
    let mut parts = Vec::new();
    if let Some(r) = &h.requests {
        parts.push(r.summary());
    }
    if let Some(ca) = &h.upstream_ca {
        parts.push(format!("upstream_ca {}", ca.display()));
    }
    format!("{}: {}", h.rule, parts.join("; "))
}

/// A param with its rules, from which the front-end rebuilds it (`cordon_client::api`).
pub(crate) fn param(p: &Param) -> v1::Param {
    use v1::param::Rules;
    let rules = match &p.kind {
        ParamKind::String { pattern, min_length, max_length } => Some(Rules::StringRules(v1::StringRules {
            pattern: pattern.as_ref().map(|p| p.source().to_string()),
            min_length: *min_length,
            max_length: *max_length,
        })),
        ParamKind::Integer { min, max } => Some(Rules::IntegerRules(v1::IntegerRules { min: *min, max: *max })),
        ParamKind::Number { min, max } => Some(Rules::NumberRules(v1::NumberRules { min: *min, max: *max })),
        ParamKind::Boolean => None,
        ParamKind::Enum { values } => Some(Rules::EnumRules(v1::EnumRules { values: values.clone() })),
        ParamKind::Path { min_length, max_length } => {
            Some(Rules::PathRules(v1::PathRules { min_length: *min_length, max_length: *max_length }))
        }
    };
    v1::Param {
        name: p.name.clone(),
        r#type: p.kind.type_name().into(),
        description: p.description.clone().unwrap_or_default(),
        required: p.required,
        default_json: p.default.as_ref().map(ToString::to_string).unwrap_or_default(),
        secret: p.secret,
        rules,
    }
}

pub(crate) fn diagnostic(d: &Diagnostic) -> v1::Diagnostic {
    v1::Diagnostic {
        severity: match d.severity {
            Severity::Error => v1::diagnostic::Severity::Error,
            Severity::Warning => v1::diagnostic::Severity::Warning,
        } as i32,
        file: d.file.display().to_string(),
        line: d.line,
        column: d.column,
        message: d.message.clone(),
    }
}

pub(crate) fn finished(id: &str, answer: Answer) -> v1::Finished {
    let Answer { outcome: o, verdict, denials } = answer;
    let (error_code, error) = match verdict.error {
        Some(e) => (e.code.to_string(), e.message),
        None => (String::new(), String::new()),
    };
    v1::Finished {
        ok: error_code.is_empty(),
        error_code,
        error,
        structured_json: verdict.structured.map(|v| v.to_string()).unwrap_or_default(),
        cached: false,
        cache_age_ms: 0,
        cached_from: String::new(),
        invocation_id: id.to_string(),
        exit_code: o.exit_code,
        signal: o.signal,
        timed_out: o.timed_out,
        cancelled: o.cancelled,
        stdout_truncated: o.stdout.truncated,
        stderr_truncated: o.stderr.truncated,
        stdout_total_bytes: o.stdout.total,
        stderr_total_bytes: o.stderr.total,
        stdout: o.stdout.bytes,
        stderr: o.stderr.bytes,
        duration_ms: u64::try_from(o.duration.as_millis()).unwrap_or(u64::MAX),
        sandbox: Some(v1::SandboxFacts {
            landlock_abi: o.facts.landlock_abi,
            seccomp: o.facts.seccomp,
            cgroup: o.facts.cgroup,
            uid: o.facts.uid,
            gid: o.facts.gid,
            netns: o.facts.netns,
        }),
        hints: Vec::new(),
        denials: denials.iter().map(denial).collect(),
        mcp_result_json: String::new(),
        learn_incomplete: o.learned.as_ref().is_some_and(|l| l.incomplete),
        learned: o.learned.map(|l| l.paths.into_iter().map(learned).collect()).unwrap_or_default(),
    }
}

fn learned(p: cordon_sandbox::LearnedPath) -> v1::Learned {
    v1::Learned { path: p.path.to_string_lossy().into_owned(), read: p.read, exec: p.exec, opens: p.opens, dir: p.dir }
}

fn denial(e: &cordon_core::denial::Explained) -> v1::Denial {
    v1::Denial {
        source: e.denial.denied.source().to_string(),
        target: e.denial.denied.target(),
        access: e.denial.denied.access(),
        grant_key: e.remedy.key().to_string(),
        count: e.denial.count,
        message: e.message.clone(),
        incidental: e.incidental,
    }
}

/// A call answered from the result cache: the cached run's result, under this call's id.
pub(crate) fn cached(hit: CacheHit) -> v1::Finished {
    let age = u64::try_from(crate::invoke::cache::age(&hit.entry).as_millis()).unwrap_or(u64::MAX);
    let from = hit.entry.invocation_id.clone();
    let answer = Answer { outcome: hit.entry.outcome, verdict: hit.entry.verdict, denials: Vec::new() };
    let mut f = finished(&hit.id, answer);
    f.cached = true;
    f.cache_age_ms = age;
    f.cached_from = from;
    f
}

pub(crate) fn ticket(t: &Ticket) -> v1::ConfirmationRequired {
    v1::ConfirmationRequired {
        token: t.token.clone(),
        mode: t.mode.as_str().into(),
        description: t.description.clone(),
        expires_in_ms: u64::try_from(t.expires_in.as_millis()).unwrap_or(u64::MAX),
        approval_id: if t.mode == Confirm::Human { t.approval_id.clone() } else { String::new() },
        argv: t.argv.clone(),
        elicitation_approves: t.elicitation_approves,
    }
}

pub(crate) fn pending(p: &PendingInfo) -> v1::PendingApproval {
    v1::PendingApproval {
        approval_id: p.approval_id.clone(),
        tool: p.tool.clone(),
        argv: p.argv.clone(),
        description: p.description.clone(),
        caller_uid: p.caller.uid,
        caller_pid: p.caller.pid.and_then(|p| u32::try_from(p).ok()).unwrap_or(0),
        expires_in_ms: u64::try_from(p.expires_in.as_millis()).unwrap_or(u64::MAX),
        waiting: p.waiting,
    }
}

pub(crate) fn chunk(c: OutputChunk) -> v1::OutputChunk {
    v1::OutputChunk {
        stream: if c.stderr { v1::output_chunk::Stream::Stderr } else { v1::output_chunk::Stream::Stdout } as i32,
        offset: c.offset,
        data: c.data,
    }
}

pub(crate) fn running(r: &RunningInfo) -> v1::RunningInvocation {
    v1::RunningInvocation {
        invocation_id: r.id.clone(),
        tool: r.tool.clone(),
        caller_uid: r.caller.uid,
        caller_pid: r.caller.pid.and_then(|p| u32::try_from(p).ok()).unwrap_or(0),
        elapsed_ms: u64::try_from(r.elapsed.as_millis()).unwrap_or(u64::MAX),
        // Figures are read by `figures::running`.
        cpu_usec: None,
        memory_bytes: None,
        pids: None,
    }
}

/// A dry run's answer. Agent callers get no grants, and the values of the policy's `env` as
/// `<redacted>` (they may hold secrets; GetTool shows them only their keys, and to admins only).
pub(crate) fn dry_run(d: &DryRun, host: &cordon_sandbox::HostSandbox, admin: bool) -> v1::DryRunResponse {
    let t = &d.tool;
    let env = d
        .plan
        .env
        .iter()
        .map(|(name, value)| {
            // A value the policy set (not overridden by a param through args_env_prefix).
            let from_policy = t.env.get(name).is_some_and(|v| v == value);
            let exported_secret = t.args_env_prefix.as_ref().is_some_and(|prefix| {
                t.params.iter().any(|p| p.secret && *name == format!("{prefix}{}", p.name.to_ascii_uppercase()))
            });
            let hidden = exported_secret || (from_policy && !admin);
            v1::EnvVar {
                name: name.clone(),
                value: if hidden { cordon_core::argv::REDACTED.to_string() } else { value.clone() },
            }
        })
        .collect();
    v1::DryRunResponse {
        tool: t.name.clone(),
        generation: d.generation,
        argv: d.plan.display_argv.clone(),
        executable: d.plan.executable.display().to_string(),
        working_dir: d.plan.cwd.display().to_string(),
        env,
        sandbox: Some(v1::SandboxFacts {
            landlock_abi: host.landlock_abi,
            seccomp: host.seccomp,
            cgroup: host.cgroups.available(),
            uid: d.identity.uid,
            gid: d.identity.gid,
            netns: t.sandbox.network.egress().is_some(),
        }),
        identity_source: d.identity.source.to_string(),
        timeout_ms: u64::try_from(t.timeout.as_millis()).unwrap_or(u64::MAX),
        max_output_bytes: t.max_output,
        confirm: match t.confirm {
            Confirm::None => v1::Confirm::None,
            Confirm::Agent => v1::Confirm::Agent,
            Confirm::Human => v1::Confirm::Human,
        } as i32,
        grants: admin.then(|| grants(t)),
    }
}

/// A tool of an MCP server as `ListTools` and `GetTool` show it (`SERVER__TOOL`): its
/// launcher's limits, the server's name and description for it, the schema cordon validates
/// against; `available` only when exposed (approved and listed by the policy), otherwise the
/// reason it is withheld. `admin` adds the launcher's command, grants and source.
pub(crate) fn server_tool(def: &McpServer, l: &Listed, launcher_now: &Availability, admin: bool) -> v1::Tool {
    let mut out = if admin { tool(&def.launcher, launcher_now) } else { tool_for_agents(&def.launcher, launcher_now) };
    let exposed = l.state == ListedState::Exposed;
    out.name = def.exposed_name(&l.remote.name);
    out.title = l.remote.title.clone().unwrap_or_default();
    out.description = l.tool.as_ref().map_or(l.remote.description.as_str(), |t| t.advertised_description()).to_string();
    out.params = Vec::new();
    out.input_schema_json = l.tool.as_ref().map_or(&l.remote.input_schema, |t| t.advertised_schema()).to_string();
    out.output_schema_json = l.remote.output_schema.as_ref().map(|s| s.to_string()).unwrap_or_default();
    out.output = v1::OutputFormat::Text as i32;
    out.note = String::new();
    out.ok_exit_codes = Vec::new();
    out.cache = None;
    out.server = def.name.clone();
    out.server_tool = l.remote.name.clone();
    out.server_rules_json = l.tool.as_ref().map(|t| t.wire_rules()).unwrap_or_default();
    if out.available && !exposed {
        out.available = false;
        out.unavailable_reason = l.state.reason(&def.name);
    }
    out
}

/// How a call of an MCP server's tool ended, as the wire says it.
pub(crate) fn server_finished(a: &CallAnswer) -> v1::Finished {
    let code = a.code();
    let (error, mcp_result_json) = match &a.outcome {
        Ok(o) => {
            let error = if o.is_error {
                "the server's tool reported an error (isError); its content says why".into()
            } else {
                String::new()
            };
            (error, o.result.to_string())
        }
        Err(e) => (e.to_string(), String::new()),
    };
    v1::Finished {
        invocation_id: a.id.clone(),
        timed_out: matches!(a.outcome, Err(CallError::TimedOut)),
        cancelled: matches!(a.outcome, Err(CallError::Cancelled)),
        duration_ms: millis(a.duration),
        ok: code.is_none(),
        error_code: code.map(|c| c.as_str().to_string()).unwrap_or_default(),
        error,
        mcp_result_json,
        ..Default::default()
    }
}

/// A server as `ListServers` and `Status` show it. Agents (`admin` false) see no command and
/// only instances running as themselves or shared; `tools` adds its recorded tools.
pub(crate) fn server_info(v: &ServerView, admin: bool, viewer_uid: u32, tools: bool) -> v1::ServerInfo {
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let exposed = v.listed.iter().filter(|l| l.state == ListedState::Exposed).count();
    v1::ServerInfo {
        name: v.def.name.clone(),
        description: v.def.description.clone(),
        source: if admin { v.def.source.to_string() } else { String::new() },
        state: v.state.to_string(),
        reason: v.reason.clone(),
        shared: v.def.share,
        instances: v
            .instances
            .iter()
            .filter(|i| admin || i.key == Key::Shared || i.key == Key::Uid(viewer_uid))
            .map(|i| v1::ServerInstance {
                id: if admin { i.id.clone() } else { String::new() },
                uid: i.info.uid,
                pid: if admin { i.info.pid.unwrap_or_default() } else { 0 },
                uptime_ms: millis(i.info.started.elapsed()),
                idle_ms: millis(i.info.last_used.elapsed()),
                calls_in_flight: i.info.in_flight,
                calls_total: i.info.calls_total,
                memory_bytes: i.info.memory_bytes,
            })
            .collect(),
        tools_exposed: count(exposed),
        tools_withheld: count(v.listed.len() - exposed),
        approved_digest: v.approved_digest.clone(),
        recorded_digest: v.recorded_digest.clone(),
        pinned: v.pinned,
        tools: if tools {
            v.listed
                .iter()
                .filter(|l| admin || l.state != ListedState::Hidden)
                .map(|l| v1::ServerTool {
                    name: l.remote.name.clone(),
                    exposed_name: v.def.exposed_name(&l.remote.name),
                    description: l.remote.description.clone(),
                    digest: l.digest.clone(),
                    state: l.state.as_str().into(),
                    reason: l.state.reason(&v.def.name),
                    input_schema_json: l
                        .tool
                        .as_ref()
                        .map_or(&l.remote.input_schema, |t| t.advertised_schema())
                        .to_string(),
                })
                .collect()
        } else {
            Vec::new()
        },
        retry_in_ms: v.retry_in.map(millis).unwrap_or_default(),
        restarts: v.restarts,
        command: if admin { v.def.launcher.command_template() } else { Vec::new() },
    }
}
