//! MCP servers run by the real cordond (`[servers.NAME]`, daemon/src/servers): a small Python
//! stdio server (tests/fixtures/mcp_manager_server.py) started lazily in its sandbox, its tools
//! withheld until an admin approves the list it recorded, called through `Invoke` with every
//! record in the audit log, a changed tool withheld again (the rug pull) while the others stay,
//! the approval kept across a restart of cordond, instances stopped when idle and when a reload
//! changes the server, and servers invisible to an agent their `allow` does not admit.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cordon_proto::v1;
use cordon_tests::agent::{self, SOCKET_GROUP};
use cordon_tests::{Daemon, audit_records, eventually, require_root};
use serde_json::{Value, json};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp_manager_server.py")
}

fn policy(extra: &str) -> String {
    format!(
        "version = 1\n\n[servers.demo]\ndescription = \"the manager's fixture\"\ncommand = [\"/usr/bin/python3\", {:?}]\n\
         read = [{:?}]\ntools = [\"echo\", \"greet\", \"pull\"]\ntimeout = \"20s\"\n{extra}\n",
        fixture().display().to_string(),
        fixture().parent().unwrap().display().to_string()
    )
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

async fn client(socket: &Path) -> v1::cordon_client::CordonClient<tonic::transport::Channel> {
    let socket = socket.to_path_buf();
    let channel = tonic::transport::Endpoint::from_static("http://cordon.invalid")
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move { cordon_proto::connect_trusted(&socket).await.map(hyper_util::rt::TokioIo::new) }
        }))
        .await
        .unwrap();
    v1::cordon_client::CordonClient::new(channel)
}

/// `Invoke` of `tool`: its `accepted` and `finished`, or the refusal.
async fn invoke(
    c: &mut v1::cordon_client::CordonClient<tonic::transport::Channel>,
    tool: &str,
    args: Value,
) -> Result<(v1::Accepted, v1::Finished), tonic::Status> {
    let request = v1::InvokeRequest { tool: tool.into(), arguments_json: args.to_string(), ..Default::default() };
    let mut events = c.invoke(request).await?.into_inner();
    let mut accepted = None;
    while let Some(e) = events.message().await? {
        match e.event {
            Some(v1::invoke_event::Event::Accepted(a)) => accepted = Some(a),
            Some(v1::invoke_event::Event::Finished(f)) => return Ok((accepted.expect("accepted first"), f)),
            _ => {}
        }
    }
    panic!("no finished event");
}

async fn server(c: &mut v1::cordon_client::CordonClient<tonic::transport::Channel>, start: bool) -> v1::ServerInfo {
    let request = v1::ListServersRequest { name: "demo".into(), start, tools: true };
    let mut list = c.list_servers(request).await.unwrap().into_inner();
    assert_eq!(list.servers.len(), 1);
    list.servers.remove(0)
}

fn states(s: &v1::ServerInfo) -> Vec<(String, String)> {
    s.tools.iter().map(|t| (t.name.clone(), t.state.clone())).collect()
}

fn records(audit: &Path, decision: &str) -> Vec<Value> {
    audit_records(audit).into_iter().filter(|r| r["decision"] == decision).collect()
}

fn text_of(f: &v1::Finished) -> String {
    let result: Value = serde_json::from_str(&f.mcp_result_json).unwrap();
    result["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_server_is_approved_called_audited_rug_pulled_and_its_approval_survives_a_restart() {
    require_root!("to run a server in its sandbox as a root cordond");
    let state = tempfile::tempdir().unwrap();
    let audit = state.path().join("audit.jsonl");
    let args = ["--audit", audit.to_str().unwrap()];
    let d = Daemon::start_with(&[("demo.toml", &policy(""))], &args);
    let rt = rt();
    rt.block_on(async {
        let mut c = client(&d.socket).await;
        // Nothing recorded yet: refused with the reason, audited; the server did not start.
        let e = invoke(&mut c, "demo__echo", json!({"text": "hi"})).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
        assert!(e.message().contains("no recorded tool list"), "{}", e.message());
        // Refusals are queued records (not waited for): read until the writer has them.
        let refused_demo =
            || records(&audit, "refused").iter().any(|r| r["tool"] == "demo__echo" && r["server"] == "demo");
        assert!(eventually(Duration::from_secs(10), refused_demo), "{:#?}", records(&audit, "refused"));
        assert!(records(&audit, "server_started").is_empty());

        // An admin starts it for review: its list is recorded, every tool awaits approval.
        let s = server(&mut c, true).await;
        assert_eq!(s.state, "awaiting approval", "{s:#?}");
        assert!(s.recorded_digest.starts_with("sha256:") && s.approved_digest.is_empty(), "{s:#?}");
        assert!(states(&s).iter().all(|(_, st)| st == "awaiting approval"), "{s:#?}");
        assert_eq!(s.instances.len(), 1);
        assert!(eventually(Duration::from_secs(10), || !records(&audit, "server_started").is_empty()));
        assert!(eventually(Duration::from_secs(10), || !records(&audit, "server_tools_recorded").is_empty()));
        let started = records(&audit, "server_started");
        assert_eq!(started.len(), 1, "{started:#?}");
        assert_eq!(started[0]["tools_digest"], s.recorded_digest.as_str());
        assert_eq!(records(&audit, "server_tools_recorded").len(), 1);
        let e = invoke(&mut c, "demo__echo", json!({"text": "hi"})).await.unwrap_err();
        assert!(e.message().contains("awaiting approval"), "{}", e.message());
        let tools = c.list_tools(v1::ListToolsRequest::default()).await.unwrap().into_inner().tools;
        assert!(!tools.iter().any(|t| t.server == "demo"), "nothing listed before approval");

        // Approval names exactly the digest reviewed.
        let wrong = v1::ApproveServerRequest { name: "demo".into(), digest: format!("sha256:{}", "0".repeat(64)) };
        let e = c.approve_server(wrong).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
        let approve = v1::ApproveServerRequest { name: "demo".into(), digest: s.recorded_digest.clone() };
        let approved = c.approve_server(approve).await.unwrap().into_inner();
        assert_eq!((approved.digest.as_str(), approved.tools), (s.recorded_digest.as_str(), 3));
        assert_eq!(records(&audit, "server_approved").len(), 1);
        let tools = c.list_tools(v1::ListToolsRequest::default()).await.unwrap().into_inner().tools;
        let echo = tools.iter().find(|t| t.name == "demo__echo").expect("listed once approved");
        assert_eq!((echo.server.as_str(), echo.server_tool.as_str(), echo.available), ("demo", "echo", true));

        // The call: accepted, answered, both records on disk naming the server and its instance.
        let (accepted, finished) = invoke(&mut c, "demo__echo", json!({"text": "hi"})).await.unwrap();
        assert!(finished.ok, "{finished:#?}");
        assert_eq!(text_of(&finished), "hi");
        let id = accepted.invocation_id;
        let all = audit_records(&audit);
        let mine: Vec<&Value> = all.iter().filter(|r| r["id"] == id.as_str()).collect();
        let decisions: Vec<&str> = mine.iter().map(|r| r["decision"].as_str().unwrap()).collect();
        assert_eq!(decisions, ["started", "finished"], "{mine:#?}");
        assert_eq!(mine[0]["tool"], "demo__echo");
        assert_eq!(mine[0]["server"], "demo");
        assert_eq!(mine[0]["instance"], started[0]["instance"]);
        assert_eq!(mine[0]["arguments"], json!({"text": "hi"}).to_string());
        // Arguments outside the server's schema never reach it.
        let e = invoke(&mut c, "demo__echo", json!({})).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        let invalid = || records(&audit, "invalid").iter().any(|r| r["tool"] == "demo__echo");
        assert!(eventually(Duration::from_secs(10), invalid), "no invalid record");

        // The rug pull: `greet` describes itself anew; it alone is withheld, and audited.
        let (_, pulled) = invoke(&mut c, "demo__pull", json!({})).await.unwrap();
        assert!(pulled.ok, "{pulled:#?}");
        let changed = || records(&audit, "server_tools_changed");
        assert!(eventually(Duration::from_secs(10), || !changed().is_empty()), "no server_tools_changed record");
        assert_eq!(changed()[0]["changed"], json!(["greet"]));
        assert_eq!((changed()[0]["added"].clone(), changed()[0]["removed"].clone()), (json!([]), json!([])));
        let s = server(&mut c, false).await;
        assert_eq!(
            states(&s),
            [
                ("echo".to_string(), "exposed".to_string()),
                ("greet".to_string(), "changed since approval".to_string()),
                ("pull".to_string(), "exposed".to_string())
            ]
        );
        let e = invoke(&mut c, "demo__greet", json!({})).await.unwrap_err();
        assert!(e.message().contains("changed since its approval"), "{}", e.message());
        assert!(invoke(&mut c, "demo__echo", json!({"text": "still"})).await.unwrap().1.ok);
    });
    drop(d);

    // A new cordond on the same audit directory: the approval is kept; the call starts it anew.
    let d = Daemon::start_with(&[("demo.toml", &policy(""))], &args);
    rt.block_on(async {
        let mut c = client(&d.socket).await;
        let s = server(&mut c, false).await;
        assert!(!s.approved_digest.is_empty(), "{s:#?}");
        let (_, finished) = invoke(&mut c, "demo__echo", json!({"text": "again"})).await.unwrap();
        assert!(finished.ok, "{finished:#?}");
        assert_eq!(text_of(&finished), "again");
    });
}

#[test]
fn instances_stop_when_idle_and_when_a_reload_changes_their_server() {
    require_root!("to run a server in its sandbox as a root cordond");
    let d = Daemon::start(&[("demo.toml", &policy("idle = \"10s\""))]);
    let rt = rt();
    rt.block_on(async {
        let mut c = client(&d.socket).await;
        let s = server(&mut c, true).await;
        let approve = v1::ApproveServerRequest { name: "demo".into(), digest: s.recorded_digest.clone() };
        c.approve_server(approve).await.unwrap();
        assert!(invoke(&mut c, "demo__echo", json!({"text": "x"})).await.unwrap().1.ok);
    });
    let stopped = |why: &str| records(&d.audit, "server_stopped").into_iter().filter(|r| r["why"] == why).count();
    assert!(eventually(Duration::from_secs(40), || stopped("idle") == 1), "{}", d.log_text());
    rt.block_on(async {
        let mut c = client(&d.socket).await;
        assert_eq!(server(&mut c, false).await.state, "stopped");
        assert!(invoke(&mut c, "demo__echo", json!({"text": "y"})).await.unwrap().1.ok, "started again");
    });
    d.write_policy("demo.toml", &policy("idle = \"10s\"\nshare = false\nstart_timeout = \"20s\""));
    d.cordon(&["reload"]).assert_code(0);
    assert!(eventually(Duration::from_secs(20), || stopped("reload") == 1), "{}", d.log_text());
}

#[test]
fn an_agent_not_in_allow_sees_no_server_and_calls_none() {
    require_root!();
    let d = Daemon::start_with(
        &[("demo.toml", &policy("allow = { users = [\"root\"] }"))],
        &["--socket-group", SOCKET_GROUP],
    );
    rt().block_on(async {
        let mut c = client(&d.socket).await;
        let s = server(&mut c, true).await;
        let approve = v1::ApproveServerRequest { name: "demo".into(), digest: s.recorded_digest.clone() };
        c.approve_server(approve).await.unwrap();
    });
    let tools = agent::cordon(&d.socket, &["tools", "--json"]);
    assert!(!tools.stdout.contains("demo__"), "{}", tools.stdout);
    let status = agent::cordon(&d.socket, &["status", "--json"]);
    assert!(!status.stdout.contains("\"demo\""), "{}", status.stdout);
    let run = agent::cordon(&d.socket, &["run", "demo__echo", "--args-json", "{\"text\":\"hi\"}"]);
    assert_ne!(run.code, Some(0), "{run:?}");
    assert!(records(&d.audit, "started").iter().all(|r| r["tool"] != "demo__echo"), "the agent's call never ran");
}
