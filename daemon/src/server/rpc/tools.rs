//! The registry's RPCs: `ListTools`, `GetTool`, `WatchRegistry`, and the policies behind it
//! (`Reload`, `CheckPolicy`, `GetPolicy`). Agents see only the tools their `allow` admits, without
//! sandbox details (`for_role`).

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
    let all = request.get_ref().include_unavailable && role == Role::Admin;
    let registry = service.daemon.registry.current();
    // Who may see a tool first (no system calls), then its pins, each distinct one checked
    // once per request.
    let mut checks = policy::PinChecks::default();
    let tools = registry
        .tools
        .values()
        .filter(|t| all || !t.disabled)
        .filter(|t| service.daemon.authz.may_use(&caller, role, t))
        .filter_map(|t| {
            let now = t.availability_checked(&mut checks);
            let available = matches!(now, Availability::Available { .. });
            (all || available).then(|| match role {
                Role::Admin => convert::tool(t, &now),
                Role::Agent => for_role(convert::tool_for_agents(t, &now), role),
            })
        })
        .collect::<Vec<_>>();
    let mut tools = tools;
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
    if registry.tools.len() > crate::registry::LARGE_REGISTRY {
        crate::registry::release_memory_soon();
    }
    Ok(Response::new(v1::ListToolsResponse { generation: registry.generation, tools }))
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
