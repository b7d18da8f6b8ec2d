//! The registry's RPCs: `ListTools`, `GetTool`, `WatchRegistry`, and the policies behind it
//! (`Reload`, `CheckPolicy`, `GetPolicy`). Agents see only the tools their `allow` admits, without
//! sandbox details (`for_role`).

use std::ops::Bound;

use cordon_proto::v1;
use cordon_proto::v1::cordon_server::Cordon;
use tonic::{Request, Response, Status};

use crate::server::service::CordonService;
use crate::server::{convert, status};
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::WatchStream;

use crate::audit::{Decision, Record};
use crate::authz::Role;
use crate::server::service::{for_role, workflow_unavailable};
use cordon_core::code::ErrorCode;
use cordon_core::policy::{self, Availability};

pub(in crate::server) async fn list_tools(
    service: &CordonService,
    request: Request<v1::ListToolsRequest>,
) -> Result<Response<v1::ListToolsResponse>, Status> {
    let caller = service.caller(&request, "list_tools")?;
    let role = service.role(&caller);
    let v1::ListToolsRequest { include_unavailable, page_size, ref page_token } = *request.get_ref();
    let all = include_unavailable && role == Role::Admin;
    let registry = service.daemon.registry.current();
    // The page: the `[tools]` after the token's name (in name order), at most `page_size` of
    // them; 0: all of them.
    let after = match page_token.as_str() {
        "" => None,
        token => match page::decode(token) {
            Some((generation, _)) if generation != registry.generation => {
                return Err(Status::failed_precondition(format!(
                    "this page token belongs to registry generation {generation}; the registry is now generation {}: list again from the first page",
                    registry.generation
                )));
            }
            Some((_, after)) => Some(after),
            None => {
                return Err(Status::invalid_argument(
                    "malformed page token: pass back the previous answer's next_page_token unchanged, or send none for the first page",
                ));
            }
        },
    };
    let limit = if page_size == 0 { usize::MAX } else { page_size as usize };
    let range = match &after {
        Some(name) => registry.tools.range::<str, _>((Bound::Excluded(name.as_str()), Bound::Unbounded)),
        None => registry.tools.range::<str, _>(..),
    };
    // Who may see a tool first (no system calls), then its pins, each distinct one checked
    // once per request.
    let mut checks = policy::PinChecks::default();
    let mut last = None;
    let mut tools = Vec::new();
    let mut rest = range
        .map(|(_, t)| t)
        .filter(|t| all || !t.disabled)
        .filter(|t| service.daemon.authz.may_use(&caller, role, t))
        .filter_map(|t| {
            let now = t.availability_checked(&mut checks);
            let available = matches!(now, Availability::Available { .. });
            (all || available).then(|| match role {
                Role::Admin => convert::tool(t, &now),
                Role::Agent => for_role(convert::tool_for_agents(t, &now), role),
            })
        });
    for t in rest.by_ref() {
        if tools.len() == limit {
            // One more listed tool: this page is full and another follows.
            let next = last.map(|name| page::encode(registry.generation, name)).unwrap_or_default();
            return Ok(Response::new(v1::ListToolsResponse {
                generation: registry.generation,
                tools,
                next_page_token: next,
            }));
        }
        last = Some(t.name.clone());
        tools.push(t);
    }
    drop(rest);
    tools.extend(
        registry
            .workflows
            .values()
            .filter(|w| service.may_run_all(&caller, role, &registry, w))
            .map(|w| convert::workflow(w, workflow_unavailable(&registry, w), role == Role::Admin))
            .filter(|t| all || t.available),
    );
    // The tools of MCP servers whose launcher's `allow` admits the caller: exposed ones, and
    // for admins who ask, the withheld ones as unavailable with the reason.
    for def in registry.servers.values().filter(|d| service.daemon.authz.may_use(&caller, role, &d.launcher)) {
        let now = def.launcher.availability_checked(&mut checks);
        for l in service.daemon.servers.listed(def).iter() {
            let t = convert::server_tool(def, l, &now, role == Role::Admin);
            if t.available || (all && l.state != crate::servers::catalog::State::Hidden) {
                tools.push(t);
            }
        }
    }
    if page_size == 0 && registry.tools.len() > crate::registry::LARGE_REGISTRY {
        crate::registry::release_memory_soon();
    }
    Ok(Response::new(v1::ListToolsResponse { generation: registry.generation, tools, next_page_token: String::new() }))
}

/// `ListTools` page tokens: the registry generation and the name of the last tool of the page
/// before (the next page starts after it, in name order, so a tool whose availability changes
/// between pages never moves another one across a page boundary: nothing is skipped or repeated
/// within a generation). Not secret: a token only says where the caller's own list resumes,
/// and every page is filtered for its caller as a whole answer is.
mod page {
    /// The format version (the first field of the decoded text).
    const VERSION: &str = "p1";
    /// Longer tokens are not ours (tool names are short).
    const MAX_LEN: usize = 1024;

    pub(super) fn encode(generation: u64, after: String) -> String {
        data_encoding::HEXLOWER.encode(format!("{VERSION}:{generation}:{after}").as_bytes())
    }

    /// The (generation, name) of a token this daemon made; `None`: not one of ours.
    pub(super) fn decode(token: &str) -> Option<(u64, String)> {
        if token.len() > MAX_LEN {
            return None;
        }
        let bytes = data_encoding::HEXLOWER.decode(token.as_bytes()).ok()?;
        let text = String::from_utf8(bytes).ok()?;
        let mut parts = text.splitn(3, ':');
        if parts.next()? != VERSION {
            return None;
        }
        let generation = parts.next()?;
        if generation.is_empty() || !generation.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let after = parts.next()?;
        (!after.is_empty()).then(|| Some((generation.parse().ok()?, after.to_string())))?
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn tokens_round_trip_and_others_are_refused() {
            assert_eq!(decode(&encode(7, "tool-00012".into())), Some((7, "tool-00012".into())));
            assert_eq!(decode(&encode(7, "a:b".into())), Some((7, "a:b".into())));
            let hex = |s: &str| data_encoding::HEXLOWER.encode(s.as_bytes());
            for bad in [
                String::new(),
                "zz".into(),
                "abc".into(),
                hex("p1:7:"),
                hex("p1::x"),
                hex("p1:+7:x"),
                hex("p0:7:x"),
                hex("p1:7"),
                hex("p1:99999999999999999999999:x"),
                encode(7, "x".into()).to_uppercase(),
                "0".repeat(MAX_LEN + 2),
            ] {
                assert_eq!(decode(&bad), None, "{bad}");
            }
        }
    }
}

pub(in crate::server) async fn get_tool(
    service: &CordonService,
    request: Request<v1::GetToolRequest>,
) -> Result<Response<v1::GetToolResponse>, Status> {
    let caller = service.caller(&request, "get_tool")?;
    let role = service.role(&caller);
    let name = &request.get_ref().name;
    let registry = service.daemon.registry.current();
    match registry.get(name) {
        Some(t) if service.daemon.authz.may_use(&caller, role, t) => Ok(Response::new(v1::GetToolResponse {
            generation: registry.generation,
            tool: Some(for_role(convert::tool(t, &t.availability_now()), role)),
        })),
        Some(_) => Err(service.not_admitted(&caller, name, "get_tool", None)),
        None if let Some((def, remote)) = crate::servers::Manager::split(&registry, name) => {
            if !service.daemon.authz.may_use(&caller, role, &def.launcher) {
                return Err(service.not_admitted(&caller, name, "get_tool", None));
            }
            let listed = service.daemon.servers.listed(def);
            match listed.iter().find(|l| l.remote.name == remote && l.state != crate::servers::catalog::State::Hidden) {
                Some(l) => Ok(Response::new(v1::GetToolResponse {
                    generation: registry.generation,
                    tool: Some(convert::server_tool(def, l, &def.launcher.availability_now(), role == Role::Admin)),
                })),
                None => Err(service.unknown(&caller, name)),
            }
        }
        None if let Some(w) = registry.workflow(name) => {
            if !service.may_run_all(&caller, role, &registry, w) {
                return Err(service.not_admitted(&caller, name, "get_tool", None));
            }
            let tool = convert::workflow(w, workflow_unavailable(&registry, w), role == Role::Admin);
            Ok(Response::new(v1::GetToolResponse { generation: registry.generation, tool: Some(tool) }))
        }
        // Audited like an unknown tool in Invoke (`cordon run` looks the tool up first).
        None => {
            let status = service.unknown(&caller, name);
            service.audit(
                Record::new(Decision::Invalid)
                    .tool(name)
                    .caller(&caller)
                    .with("operation", "get_tool")
                    .error(ErrorCode::UnknownTool, status.message()),
            );
            Err(status)
        }
    }
}

pub(in crate::server) async fn watch_registry(
    service: &CordonService,
    request: Request<v1::WatchRegistryRequest>,
) -> Result<Response<<CordonService as Cordon>::WatchRegistryStream>, Status> {
    let _caller = service.caller(&request, "watch_registry")?;
    // A new generation, or a change of the exposed MCP server tools (`servers_version`).
    let daemon = service.daemon.clone();
    let generations = WatchStream::new(service.daemon.registry.subscribe()).map(|_| ());
    let versions = WatchStream::from_changes(service.daemon.servers.subscribe()).map(|_| ());
    let stream = generations.merge(versions).map(move |()| {
        let r = daemon.registry.current();
        Ok(v1::RegistryGeneration {
            generation: r.generation,
            tools: u32::try_from(r.tools.len()).unwrap_or(u32::MAX),
            servers_version: daemon.servers.version(),
        })
    });
    Ok(Response::new(Box::pin(stream)))
}

pub(in crate::server) async fn reload(
    service: &CordonService,
    request: Request<v1::ReloadRequest>,
) -> Result<Response<v1::ReloadResponse>, Status> {
    let caller = service.caller(&request, "reload")?;
    service.require_admin(&caller, "reload", "reloading policies")?;
    let daemon = service.daemon.clone();
    let result = tokio::task::spawn_blocking(move || daemon.reload(Some(&caller)))
        .await
        .map_err(|e| status::task_failed("reload task", &e))?;
    Ok(Response::new(result))
}

pub(in crate::server) async fn check_policy(
    service: &CordonService,
    request: Request<v1::CheckPolicyRequest>,
) -> Result<Response<v1::CheckPolicyResponse>, Status> {
    let caller = service.caller(&request, "check_policy")?;
    service.require_admin(&caller, "check_policy", "checking policies")?;
    let sources: Vec<(std::path::PathBuf, String)> =
        request.into_inner().files.into_iter().map(|f| (f.name.into(), f.content)).collect();
    let host = service.daemon.registry.host().clone();
    let response = tokio::task::spawn_blocking(move || match policy::load_sources(&sources, &host) {
        Ok(set) => v1::CheckPolicyResponse {
            ok: true,
            diagnostics: set.diagnostics.iter().map(convert::diagnostic).collect(),
            tools: u32::try_from(set.tools.len()).unwrap_or(u32::MAX),
        },
        Err(e) => v1::CheckPolicyResponse {
            ok: false,
            diagnostics: e.diagnostics.iter().map(convert::diagnostic).collect(),
            tools: 0,
        },
    })
    .await
    .map_err(|e| status::task_failed("policy check", &e))?;
    Ok(Response::new(response))
}

pub(in crate::server) async fn get_policy(
    service: &CordonService,
    request: Request<v1::GetPolicyRequest>,
) -> Result<Response<v1::GetPolicyResponse>, Status> {
    let caller = service.caller(&request, "get_policy")?;
    service.require_admin(&caller, "get_policy", "reading the loaded policies")?;
    let d = &service.daemon;
    let registry = d.registry.current();
    Ok(Response::new(v1::GetPolicyResponse {
        generation: registry.generation,
        policy_digest: registry.policy_digest.to_string(),
        policy_dir: d.registry.dir().display().to_string(),
        files: registry.files.iter().map(|f| f.display().to_string()).collect(),
        tools: registry
            .tools
            .values()
            .map(|t| v1::ToolPolicy { name: t.name.clone(), policy_json: policy::fleet::describe(t).to_string() })
            .collect(),
        workflows: registry
            .workflows
            .values()
            .map(|w| v1::ToolPolicy {
                name: w.name.clone(),
                policy_json: policy::fleet::describe_workflow(w).to_string(),
            })
            .collect(),
        servers: registry
            .servers
            .values()
            .map(|s| v1::ToolPolicy {
                name: s.name.clone(),
                policy_json: policy::fleet::describe_server(s).to_string(),
            })
            .collect(),
    }))
}
