//! The real server, started inside the test process (`cordon_daemon::load`, `start`,
//! `Server::serve`, as `cordond` does) on a temporary socket with a temporary audit log, driven
//! by the generated tonic client: the fast path for tests that need no separate daemon process
//! (no signals, no exit codes, no second uid). The end-to-end suite (`tests/`) runs the binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use cordon_proto::v1;
use cordon_proto::v1::cordon_client::CordonClient;

const TOOLS: &str = r#"
version = 1

[tools.echo]
description = "print one argument between brackets"
reason = "tests"
command = ["/usr/bin/printf", "[%s]", "{{text}}"]

[tools.echo.params.text]
type = "string"
pattern = "[a-z ]*"
required = true
"#;

fn error_code(status: &tonic::Status) -> &str {
    status.metadata().get(cordon_proto::ERROR_CODE_KEY).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// Runs `echo` with `arguments` and returns its `finished` event, or the status it failed with.
async fn invoke(
    client: &mut CordonClient<tonic::transport::Channel>,
    arguments: &str,
) -> Result<v1::Finished, tonic::Status> {
    let request = v1::InvokeRequest {
        tool: "echo".into(),
        arguments_json: arguments.into(),
        stream_output: false,
        learn: Vec::new(),
    };
    let mut events = client.invoke(request).await?.into_inner();
    while let Some(event) = events.message().await? {
        if let Some(v1::invoke_event::Event::Finished(finished)) = event.event {
            return Ok(finished);
        }
    }
    panic!("the stream ended without `finished`");
}

fn audit_decisions(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["decision"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_runs_in_process_lists_invokes_refuses_and_stops() {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("tools.toml"), TOOLS).unwrap();
    let mut config = cordon_daemon::Config::new(policies);
    config.socket = dir.path().join("run").join("cordon.sock");
    config.audit.path = dir.path().join("state").join("audit.jsonl");
    // Where the host has invocation cgroups, the reaper is cordond (not this test binary).
    config.reaper = Some(env!("CARGO_BIN_EXE_cordond").into());
    let socket = config.socket.clone();
    let audit = config.audit.path.clone();

    let loaded = {
        let config = config.clone();
        tokio::task::spawn_blocking(move || cordon_daemon::load(&config)).await.unwrap().unwrap()
    };
    let server = cordon_daemon::start(config, loaded).await.unwrap();
    assert_eq!(server.socket(), socket);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (_reload, reloads) = tokio::sync::mpsc::channel(1);
    let serving = tokio::spawn(server.serve(
        async move {
            let _ = stopped.await;
        },
        reloads,
    ));

    let mut client = CordonClient::new(cordon_proto::connect(&socket).await.unwrap());

    // The tools this caller may use.
    let tools = client.list_tools(v1::ListToolsRequest::default()).await.unwrap().into_inner();
    let names: Vec<&str> = tools.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!((tools.generation, names), (1, vec!["echo"]));

    // A call that runs, in the sandbox.
    let finished = invoke(&mut client, r#"{"text": "hello"}"#).await.unwrap();
    assert_eq!((finished.exit_code, finished.stdout.as_slice()), (Some(0), b"[hello]".as_slice()), "{finished:?}");

    // An invalid call: refused with its code, nothing runs.
    let status = invoke(&mut client, "{}").await.unwrap_err();
    assert_eq!(
        (status.code(), error_code(&status)),
        (tonic::Code::InvalidArgument, "MISSING_REQUIRED_FIELD"),
        "{status:?}"
    );
    let status = invoke(&mut client, r#"{"text": "NO"}"#).await.unwrap_err();
    assert_eq!(
        (status.code(), error_code(&status)),
        (tonic::Code::InvalidArgument, "INVALID_FIELD_VALUE"),
        "{status:?}"
    );

    // Shutdown: the server returns, the socket is gone, the log holds the whole story.
    drop(client);
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
    assert!(!socket.exists(), "the socket must be removed");
    let decisions = audit_decisions(&audit);
    assert_eq!(decisions.first().map(String::as_str), Some("daemon_started"), "{decisions:?}");
    assert_eq!(decisions.last().map(String::as_str), Some("daemon_stopped"), "{decisions:?}");
    assert_eq!(decisions.iter().filter(|d| *d == "invalid").count(), 2, "{decisions:?}");
    assert!(decisions.iter().any(|d| d == "finished"), "{decisions:?}");
}
