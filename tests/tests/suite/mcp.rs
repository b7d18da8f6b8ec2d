//! `cordon mcp` driven by a real MCP client (rmcp) against the real daemon, in both protocol
//! styles: 2025-11-25 (`initialize`, server-to-client requests, unscoped notifications) and
//! 2026-07-28 (`server/discover`, input-required rounds, `subscriptions/listen`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_tests::fixture;
use cordon_tests::{Daemon, cordon_at, eventually, process_gone, wait_pending};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam, ClientCapabilities,
    ClientConfig, ClientRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ErrorCode, Implementation,
    JsonObject, ProgressNotificationParam, ProtocolVersion, Request, ServerNotification, SubscriptionFilter,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt as _, NotificationContext, PeerRequestOptions, RequestContext, RoleClient,
    RunningService, Subscription,
};
use rmcp::transport::{ConfigureCommandExt as _, TokioChildProcess};
use rmcp::{ClientHandler, ErrorData, ServiceError, ServiceExt as _};
use serde_json::{Value, json};

/// Tools the MCP tests call. Timeouts are short; `hold` has a long one on purpose, so that only
/// the cancellation (never the timeout) can be what ends it within the test's window.
const TOOLS: &str = concat!(
    fixture!(header "3s"),
    r#"
[tools.echo]
description = "print one argument between brackets"
reason = "tests"
command = ["/usr/bin/printf", "[%s]", "{{text}}"]
annotations = { title = "Echo", read_only = true, idempotent = true }

[tools.echo.params.text]
type = "string"
description = "what to print"
pattern = "[a-z ]*"
required = true

[tools.exit-with]
description = "print to both streams, then exit with a code"
reason = "tests"
command = ["/bin/sh", "-c", "echo out; echo err >&2; exit \"$1\"", "sh", "{{code}}"]
danger = "moderate"

[tools.exit-with.params.code]
type = "integer"
min = 0
max = 255
required = true

[tools.fetch]
description = "a tool that may reach the network"
reason = "tests"
command = ["/bin/true"]
danger = "high"
network = { connect_tcp = [443] }
"#,
    fixture!(sleeper),
    r#"
[tools.hold]
description = "record its pids, then sleep in the foreground and the background"
reason = "tests"
command = ["/bin/sh", "-c", "echo $$ > \"$1\"; /bin/sleep 1000 & echo $! >> \"$1\"; wait", "sh", "{{pidfile}}"]
timeout = "60s"

[tools.hold.params.pidfile]
type = "path"
required = true

[tools.ticker]
description = "print a line every 250 ms for a second"
reason = "tests"
command = ["/bin/sh", "-c", "for i in 1 2 3 4 5; do echo tick $i; /bin/sleep 0.25; done"]

[tools.chatty]
description = "print more than it may"
reason = "tests"
command = ["/usr/bin/seq", "1", "3000"]
max_output = "1KiB"

[tools.report]
description = "print a JSON report"
reason = "tests"
command = ["/usr/bin/printf", "{\"files\": 3, \"names\": [\"a\", \"b\"]}"]
output = { type = "json", schema = { type = "object", properties = { files = { type = "integer" } } } }

[tools.broken-json]
description = "declare JSON output, print something else"
reason = "tests"
command = ["/usr/bin/printf", "not json"]
output = "json"
"#,
    fixture!(missing),
    fixture!(off),
);

/// The MCP-visible tools of [`TOOLS`]: every available, enabled tool and the built-ins
/// `describe_schema`, `search_tools`, `cordon_status` and the job tools (no tool asks for an
/// agent confirmation, so `confirm` is not listed).
const LISTED: &[&str] = &[
    "broken-json",
    "chatty",
    "cordon_status",
    "describe_schema",
    "echo",
    "exit-with",
    "fetch",
    "hold",
    "job_cancel",
    "job_status",
    "report",
    "search_tools",
    "sleeper",
    "start_job",
    "ticker",
];
/// The built-in tools, which are not daemon tools.
const BUILTIN: &[&str] = &["cordon_status", "describe_schema", "job_cancel", "job_status", "search_tools", "start_job"];

const CONFIRM_TOOLS: &str = concat!(
    fixture!(header "3s"),
    fixture!(guarded),
    r#"
[tools.guarded-slow]
description = "sleep past its timeout, after an agent confirmation"
reason = "tests"
command = ["/bin/sleep", "30"]
confirm = "agent"
timeout = "1s"

[tools.guarded-json]
description = "print JSON, after an agent confirmation"
reason = "tests"
command = ["/usr/bin/printf", "{\"ok\": true}"]
confirm = "agent"
output = "json"
"#,
    fixture!(approved),
);

/// A tool added by a reload.
const FRESH: &str = r#"
version = 1

[tools.fresh]
description = "a tool that appeared with a reload"
reason = "tests"
command = ["/bin/true"]
"#;

// ---------------------------------------------------------------------------------------------
// The client side
// ---------------------------------------------------------------------------------------------

/// Runs `$name(style)` as two tests, one per protocol style, from one definition:
/// `mcp::$name::legacy_2025_11_25` and `mcp::$name::modern_2026_07_28`.
macro_rules! in_both_styles {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn legacy_2025_11_25() {
                super::$name(super::Style::Legacy).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn modern_2026_07_28() {
                super::$name(super::Style::Modern).await;
            }
        }
    };
}

/// Which lifecycle the client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    /// 2025-11-25: `initialize`; elicitation is a server-to-client request; unscoped notifications.
    Legacy,
    /// 2026-07-28: `server/discover`; elicitation is an input-required round; `subscriptions/listen`.
    Modern,
}

/// How the client answers elicitations (and whether it declares the capability at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Elicit {
    Unsupported,
    Accept,
    Decline,
}

/// An MCP client that answers elicitations as configured and records what the server sent.
#[derive(Debug, Clone)]
struct Recorder {
    style: Style,
    elicit: Elicit,
    seen: Arc<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    progress: Mutex<Vec<ProgressNotificationParam>>,
    elicitations: Mutex<Vec<String>>,
    list_changed: AtomicUsize,
}

impl Recorder {
    fn progress(&self) -> Vec<ProgressNotificationParam> {
        self.seen.progress.lock().unwrap().clone()
    }

    fn elicitations(&self) -> Vec<String> {
        self.seen.elicitations.lock().unwrap().clone()
    }

    fn list_changed(&self) -> usize {
        self.seen.list_changed.load(Ordering::SeqCst)
    }
}

impl ClientHandler for Recorder {
    fn get_info(&self) -> ClientConfig {
        let capabilities = match self.elicit {
            Elicit::Unsupported => ClientCapabilities::default(),
            Elicit::Accept | Elicit::Decline => ClientCapabilities::builder().enable_elicitation().build(),
        };
        let version = match self.style {
            Style::Legacy => ProtocolVersion::V_2025_11_25,
            Style::Modern => ProtocolVersion::V_2026_07_28,
        };
        ClientConfig::new(capabilities, Implementation::new("cordon-tests", "0")).with_protocol_version(version)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let message = match &request {
            ElicitRequestParams::FormElicitationParams { message, .. } => message.clone(),
            other => format!("unexpected elicitation: {other:?}"),
        };
        self.seen.elicitations.lock().unwrap().push(message);
        let action = match self.elicit {
            Elicit::Accept => ElicitationAction::Accept,
            Elicit::Decline | Elicit::Unsupported => ElicitationAction::Decline,
        };
        Ok(ElicitResult::new(action))
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        self.seen.progress.lock().unwrap().push(params);
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.seen.list_changed.fetch_add(1, Ordering::SeqCst);
    }
}

type Client = RunningService<RoleClient, Recorder>;

/// Spawns the real `cordon --socket SOCKET mcp` and opens a session in `style`. Its stderr
/// (debug logs) is appended to `mcp.log` in the daemon's directory.
async fn connect(d: &Daemon, style: Style, elicit: Elicit) -> (Client, Recorder) {
    connect_at(&d.socket, &d.dir.path().join("mcp.log"), style, elicit).await
}

async fn connect_at(socket: &Path, log: &Path, style: Style, elicit: Elicit) -> (Client, Recorder) {
    let recorder = Recorder { style, elicit, seen: Arc::new(Seen::default()) };
    let command = tokio::process::Command::new(cordon_tests::bin("cordon")).configure(|c| {
        c.arg("--socket").arg(socket).arg("mcp").env("CORDON_LOG", "debug");
    });
    let stderr = std::fs::File::options().create(true).append(true).open(log).unwrap();
    let (transport, _) = TokioChildProcess::builder(command).stderr(stderr).spawn().unwrap();
    let client = match style {
        Style::Legacy => recorder.clone().serve(transport).await,
        Style::Modern => {
            let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
            recorder.clone().serve_with_lifecycle(transport, lifecycle).await
        }
    }
    .unwrap_or_else(|e| panic!("the MCP session ({style:?}) did not start: {e}"));
    (client, recorder)
}

fn object(v: Value) -> JsonObject {
    match v {
        Value::Object(o) => o,
        other => panic!("arguments must be an object: {other}"),
    }
}

fn params(tool: &str, arguments: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(tool.to_string()).with_arguments(object(arguments))
}

/// `tools/call`, input-required rounds included; panics on a protocol error.
async fn call(client: &Client, tool: &str, arguments: Value) -> CallToolResult {
    try_call(client, tool, arguments).await.unwrap_or_else(|e| panic!("tools/call {tool} failed: {e}"))
}

async fn try_call(client: &Client, tool: &str, arguments: Value) -> Result<CallToolResult, ServiceError> {
    client.call_tool(params(tool, arguments)).await
}

fn text(r: &CallToolResult) -> String {
    r.content.iter().filter_map(|c| c.as_text()).map(|t| t.text.as_str()).collect()
}

#[track_caller]
fn assert_ok(r: &CallToolResult) {
    assert_eq!(r.is_error, Some(false), "expected a successful result: {r:#?}");
}

#[track_caller]
fn assert_failed(r: &CallToolResult, prefix: &str) {
    assert_eq!(r.is_error, Some(true), "expected an error result: {r:#?}");
    assert!(text(r).starts_with(prefix), "expected the text to start with {prefix:?}: {r:#?}");
}

/// The listed tools, by name, as they went over the wire.
async fn listed(client: &Client) -> BTreeMap<String, Value> {
    let tools = client.list_all_tools().await.expect("tools/list");
    tools.into_iter().map(|t| (t.name.to_string(), serde_json::to_value(&t).unwrap())).collect()
}

/// The protocol error of a failed request.
#[track_caller]
fn protocol_error<T: std::fmt::Debug>(r: Result<T, ServiceError>) -> ErrorData {
    match r {
        Err(ServiceError::McpError(e)) => e,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

/// Runs blocking test-harness code (the `cordon` CLI, `eventually`) off the async workers.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

fn read_pids(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path).map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect()).unwrap_or_default()
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map(|s| s.lines().count()).unwrap_or(0)
}

fn running_invocations(socket: &Path) -> u64 {
    cordon_at(socket, &["status", "--json"]).json()["running_invocations"].as_u64().unwrap()
}

/// Where `tools/list_changed` arrives: the handler callback (2025-11-25) or a listen
/// subscription (2026-07-28).
struct ListChanged {
    recorder: Recorder,
    seen: usize,
    subscription: Option<Subscription>,
}

impl ListChanged {
    async fn open(client: &Client, recorder: &Recorder) -> ListChanged {
        let subscription = match recorder.style {
            Style::Legacy => None,
            Style::Modern => {
                let filter = SubscriptionFilter::builder().tools_list_changed().build();
                let sub = client.listen(filter).await.expect("subscriptions/listen");
                assert_eq!(sub.acknowledged().tools_list_changed, Some(true), "{:?}", sub.acknowledged());
                Some(sub)
            }
        };
        ListChanged { recorder: recorder.clone(), seen: recorder.list_changed(), subscription }
    }

    /// Whether a (further) tools/list_changed arrives within `limit`.
    async fn next(&mut self, limit: Duration) -> bool {
        match &mut self.subscription {
            Some(sub) => match tokio::time::timeout(limit, sub.next()).await {
                Ok(Ok(Some(ServerNotification::ToolListChangedNotification(_)))) => true,
                Ok(other) => panic!("the subscription ended or carried something else: {other:?}"),
                Err(_) => false,
            },
            None => {
                let deadline = Instant::now() + limit;
                loop {
                    let now = self.recorder.list_changed();
                    if now > self.seen {
                        self.seen = now;
                        return true;
                    }
                    if Instant::now() >= deadline {
                        return false;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// tools/list
// ---------------------------------------------------------------------------------------------

async fn tools_list_mirrors_the_registry(style: Style) {
    let d = Daemon::start(&[("tools.toml", TOOLS)]);
    let (client, _) = connect(&d, style, Elicit::Accept).await;
    let tools = listed(&client).await;
    let names: Vec<&str> = tools.keys().map(String::as_str).collect();
    assert_eq!(names, LISTED, "unavailable (missing) and disabled (off) tools are not listed");
    // The daemon does know about the hidden ones.
    let all = blocking(|| d.cordon(&["tools", "--all", "--json"]).json());
    let status = |name: &str| {
        let t = all["tools"].as_array().unwrap().iter().find(|t| t["name"] == name).unwrap().clone();
        (t["available"].clone(), t["disabled"].clone())
    };
    assert_eq!(status("missing"), (json!(false), json!(false)));
    assert_eq!(status("off").1, json!(true));

    // Each tool's input schema is exactly the daemon's.
    for name in LISTED.iter().filter(|n| !BUILTIN.contains(n)) {
        let daemon = blocking(|| d.cordon(&["tool", name, "--json"]).json());
        assert_eq!(tools[*name]["inputSchema"], daemon["input_schema"], "input schema of {name}");
        assert_eq!(tools[*name]["description"], daemon["description"], "description of {name}");
        match daemon.get("output_schema") {
            Some(schema) => assert_eq!(&tools[*name]["outputSchema"], schema, "output schema of {name}"),
            None => assert_eq!(tools[*name].get("outputSchema"), None, "output schema of {name}"),
        }
    }

    let echo = &tools["echo"];
    assert_eq!(echo["title"], "Echo");
    assert_eq!(
        echo["annotations"],
        json!({ "readOnlyHint": true, "idempotentHint": true, "destructiveHint": false, "openWorldHint": false })
    );
    let fetch = &tools["fetch"];
    assert_eq!(fetch["title"], "fetch", "an untitled tool is titled by its name");
    assert_eq!(
        fetch["annotations"],
        json!({ "readOnlyHint": false, "idempotentHint": false, "destructiveHint": true, "openWorldHint": true })
    );
    assert_eq!(tools["exit-with"]["annotations"]["destructiveHint"], true, "danger = moderate");
    assert_eq!(tools["report"]["outputSchema"]["properties"]["files"]["type"], "integer");

    // The built-in reference tool.
    let describe = &tools["describe_schema"];
    assert_eq!(describe["inputSchema"]["properties"], json!({}));
    assert_eq!(describe["inputSchema"]["additionalProperties"], false);
    assert_eq!(describe["annotations"]["readOnlyHint"], true);
    let r = call(&client, "describe_schema", json!({})).await;
    assert_ok(&r);
    assert!(text(&r).contains("[tools."), "the reference explains policies: {}", text(&r));

    // Prompts, resources and completions are not offered.
    let e = protocol_error(client.list_prompts(None).await);
    assert_eq!(e.code, ErrorCode::METHOD_NOT_FOUND, "{e:?}");
    let e = protocol_error(client.list_resources(None).await);
    assert_eq!(e.code, ErrorCode::METHOD_NOT_FOUND, "{e:?}");
}

in_both_styles!(tools_list_mirrors_the_registry);

// ---------------------------------------------------------------------------------------------
// tools/call
// ---------------------------------------------------------------------------------------------

async fn calls_run_and_bad_arguments_name_the_fix(style: Style) {
    let d = Daemon::start(&[("tools.toml", TOOLS)]);
    let (client, _) = connect(&d, style, Elicit::Accept).await;

    let r = call(&client, "echo", json!({ "text": "hello world" })).await;
    assert_ok(&r);
    assert_eq!(text(&r), "[hello world]\n[exit code 0]");
    assert_eq!(r.structured_content, None);

    // Each rejection carries the code the daemon gives the same arguments, then how to fix it.
    for (arguments, code, field) in [
        (json!({}), "MISSING_REQUIRED_FIELD", "code"),
        (json!({ "code": "7" }), "INVALID_FIELD_TYPE", "code"),
        (json!({ "code": null }), "INVALID_FIELD_TYPE", "code"),
        // Both the wrong type and below the minimum: the type error wins, as in the daemon.
        (json!({ "code": -1.5 }), "INVALID_FIELD_TYPE", "code"),
        (json!({ "code": 256 }), "INVALID_FIELD_VALUE", "code"),
        (json!({ "code": 1, "cod": 2 }), "UNKNOWN_FIELDS", "cod"),
    ] {
        let r = call(&client, "exit-with", arguments.clone()).await;
        assert_failed(&r, &format!("{code}: "));
        let (_, daemon) = blocking(|| d.run_json("exit-with", &arguments));
        assert_eq!(daemon["error"]["code"], code, "{daemon}");
        let message = daemon["error"]["message"].as_str().unwrap();
        // The bridge gives the daemon's own message (mcp_messages.rs checks it word for word),
        // so it names the same field.
        let field_in_text = format!("{field:?}");
        assert!(message.contains(&field_in_text) && text(&r).contains(&field_in_text), "{message} / {}", text(&r));
        assert!(text(&r).contains("Fix the arguments"), "{}", text(&r));
        let structured = r.structured_content.as_ref().expect("structured error");
        assert_eq!(structured["error"]["code"], code);
        assert_eq!(structured["error"]["field"], field);
    }
    let r = call(&client, "echo", json!({ "text": "NO" })).await;
    assert_failed(&r, "INVALID_FIELD_VALUE: field \"text\": ");

    // Unknown (and disabled, and unavailable) tools are a protocol error.
    for name in ["ech", "off", "missing"] {
        let e = protocol_error(try_call(&client, name, json!({})).await);
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{name}: {e:?}");
        assert!(e.message.starts_with("UNKNOWN_TOOL: "), "{name}: {e:?}");
    }
    let e = protocol_error(try_call(&client, "ech", json!({})).await);
    assert!(e.message.contains("did you mean \"echo\""), "{e:?}");

    // The session goes on after the rejections.
    let r = call(&client, "echo", json!({ "text": "still here" })).await;
    assert_ok(&r);
}

in_both_styles!(calls_run_and_bad_arguments_name_the_fix);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn results_say_how_the_tool_ended() {
    let d = Daemon::start(&[("tools.toml", TOOLS)]);
    let (client, _) = connect(&d, Style::Legacy, Elicit::Accept).await;

    let r = call(&client, "exit-with", json!({ "code": 7 })).await;
    assert_failed(&r, "out\n");
    assert_eq!(text(&r), "out\n[stderr]\nerr\n[exit code 7]");

    let pidfile = d.dir.path().join("sleeper.pids");
    let started = Instant::now();
    let r = call(&client, "sleeper", json!({ "pidfile": pidfile })).await;
    assert_eq!(r.is_error, Some(true), "{r:#?}");
    assert!(text(&r).contains("[timed out after 1 s and was killed]"), "{}", text(&r));
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    for pid in read_pids(&pidfile) {
        assert!(blocking(|| eventually(Duration::from_secs(5), || process_gone(pid))), "{pid} survived");
    }

    let total: usize = (1..=3000).map(|i: u32| i.to_string().len() + 1).sum();
    let r = call(&client, "chatty", json!({})).await;
    assert_ok(&r);
    let t = text(&r);
    assert!(t.starts_with("1\n2\n3\n"), "{t}");
    assert!(
        t.ends_with(&format!(
            "[exit code 0; stdout truncated: the tool wrote {total} bytes, only the first and last 512 are shown]"
        )),
        "{t}"
    );
    assert!(t.contains("bytes omitted"), "{t}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn json_tools_return_structured_content() {
    let d = Daemon::start(&[("tools.toml", TOOLS)]);
    let (client, _) = connect(&d, Style::Legacy, Elicit::Accept).await;
    let r = call(&client, "report", json!({})).await;
    assert_ok(&r);
    assert_eq!(r.structured_content, Some(json!({ "files": 3, "names": ["a", "b"] })));
    assert_eq!(text(&r), r#"{"files": 3, "names": ["a", "b"]}"#);

    let r = call(&client, "broken-json", json!({})).await;
    assert_failed(&r, "INVALID_OUTPUT: the tool declares JSON output, but its stdout is not valid JSON");
    assert!(text(&r).contains("not json"), "{}", text(&r));
    assert_eq!(r.structured_content, None);
}

async fn progress_follows_the_output(style: Style) {
    let d = Daemon::start(&[("tools.toml", TOOLS)]);
    let (client, recorder) = connect(&d, style, Elicit::Accept).await;
    let r = call(&client, "ticker", json!({})).await;
    assert_ok(&r);
    assert!(text(&r).starts_with("tick 1\ntick 2\ntick 3\ntick 4\ntick 5\n"), "{}", text(&r));

    // The client handles each notification in its own task: wait for them rather than assume
    // they were all handled when the result arrived, and do not rely on their order.
    let ticks = |p: &[ProgressNotificationParam]| {
        p.iter().filter(|p| p.message.as_deref().is_some_and(|m| m.starts_with("tick "))).count()
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    while ticks(&recorder.progress()) < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let progress = recorder.progress();
    assert!(ticks(&progress) >= 2, "expected progress while the tool printed: {progress:#?}");
    assert!(ticks(&progress) <= 5, "at most a few a second: {progress:#?}");
    let started = progress.iter().find(|p| p.message.as_deref().is_some_and(|m| m.starts_with("running: /bin/sh -c")));
    assert_eq!(started.map(|p| p.progress), Some(0.0), "the start is announced: {progress:#?}");
    let token = &progress[0].progress_token;
    assert!(progress.iter().all(|p| &p.progress_token == token), "one call, one token: {progress:#?}");
    // Progress counts the bytes printed so far.
    let mut counts: Vec<f64> = progress
        .iter()
        .filter(|p| p.message.as_deref().is_some_and(|m| m.starts_with("tick ")))
        .map(|p| p.progress)
        .collect();
    counts.sort_by(f64::total_cmp);
    assert!(counts.first().is_some_and(|c| *c >= 7.0) && counts.last().is_some_and(|c| *c <= 35.0), "{counts:?}");
}

in_both_styles!(progress_follows_the_output);

// ---------------------------------------------------------------------------------------------
// Cancellation
// ---------------------------------------------------------------------------------------------

async fn cancelling_a_call_kills_the_invocation(style: Style) {
    let d = Daemon::start(&[("tools.toml", TOOLS)]);
    let (client, _) = connect(&d, style, Elicit::Accept).await;
    let pidfile = d.dir.path().join("hold.pids");
    let request = ClientRequest::CallToolRequest(Request::new(params("hold", json!({ "pidfile": pidfile }))));
    let handle = client.send_cancellable_request(request, PeerRequestOptions::no_options()).await.unwrap();
    assert!(
        blocking(|| eventually(Duration::from_secs(10), || read_pids(&pidfile).len() == 2)),
        "the tool never started"
    );
    let pids = read_pids(&pidfile);

    let started = Instant::now();
    client
        .notify_cancelled(CancelledNotificationParam::new(Some(handle.id.clone()), Some("test".into())))
        .await
        .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(2), handle.await_response())
        .await
        .expect("the cancelled call did not end");
    assert!(matches!(outcome, Err(ServiceError::Cancelled { .. })), "{outcome:?}");
    for pid in pids {
        assert!(
            blocking(|| eventually(Duration::from_secs(3), || process_gone(pid))),
            "process {pid} survived the cancellation"
        );
    }
    assert!(
        blocking(|| eventually(Duration::from_secs(3), || running_invocations(&d.socket) == 0)),
        "the daemon still runs the invocation"
    );
    // `hold` would only time out after 60 s: the cancellation ended it.
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());

    // The session goes on.
    let r = call(&client, "echo", json!({ "text": "after" })).await;
    assert_eq!(text(&r), "[after]\n[exit code 0]");
}

in_both_styles!(cancelling_a_call_kills_the_invocation);

// ---------------------------------------------------------------------------------------------
// tools/list_changed
// ---------------------------------------------------------------------------------------------

async fn a_reload_announces_list_changed(style: Style) {
    let d = Daemon::start(&[("tools.toml", TOOLS)]);
    let (client, recorder) = connect(&d, style, Elicit::Accept).await;
    assert!(!listed(&client).await.contains_key("fresh"));
    let mut changes = ListChanged::open(&client, &recorder).await;

    d.write_policy("fresh.toml", FRESH);
    reload_until_announced(&d, &mut changes).await;
    let tools = listed(&client).await;
    assert!(tools.contains_key("fresh"), "{:?}", tools.keys());
    let r = call(&client, "fresh", json!({})).await;
    assert_ok(&r);
}

in_both_styles!(a_reload_announces_list_changed);

/// Reloads until the session announces `tools/list_changed`. The bridge follows the registry
/// through a watch it opens when the session starts; until that watch is up a reload goes
/// unseen, so one reload may not be enough.
async fn reload_until_announced(d: &Daemon, changes: &mut ListChanged) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        blocking(|| {
            d.cordon(&["reload"]).assert_code(0);
        });
        if changes.next(Duration::from_secs(1)).await {
            return;
        }
        assert!(Instant::now() < deadline, "no tools/list_changed after a reload");
    }
}

/// Three tools of one file, the middle one's description and the last one's name as given.
fn edited(middle: &str, last: &str) -> String {
    let tool = |name: &str, description: &str| {
        format!("[tools.{name}]\ndescription = \"{description}\"\nreason = \"tests\"\ncommand = [\"/bin/true\"]\n")
    };
    format!("version = 1\n{}{}{}", tool("kept", "never edited"), tool("edited", middle), tool(last, "comes and goes"))
}

/// The front-end rebuilds only what changed when the registry moves: what it lists after a
/// reload is exactly the new generation (a changed tool shows its change, a removed one is gone,
/// an added one is there, an unchanged one is listed as before).
async fn a_reload_lists_exactly_the_new_set(style: Style) {
    let d = Daemon::start(&[("tools.toml", TOOLS), ("edited.toml", &edited("before", "gone"))]);
    let (client, recorder) = connect(&d, style, Elicit::Accept).await;
    let before = listed(&client).await;
    assert!(before.contains_key("gone") && before.contains_key("edited"), "{:?}", before.keys());
    let mut changes = ListChanged::open(&client, &recorder).await;

    d.write_policy("edited.toml", &edited("after", "added"));
    reload_until_announced(&d, &mut changes).await;
    let after = listed(&client).await;
    let names: Vec<&String> = after.keys().collect();
    let mut want: Vec<String> = before.keys().filter(|n| *n != "gone").cloned().chain(["added".to_string()]).collect();
    want.sort();
    assert_eq!(names, want.iter().collect::<Vec<_>>());
    assert_eq!(after["edited"]["description"], "after");
    assert_eq!(after["kept"], before["kept"], "an unchanged tool is listed as before");
    // And agrees with a fresh session's list.
    let (fresh, _) = connect(&d, style, Elicit::Accept).await;
    assert_eq!(listed(&fresh).await, after);
}

in_both_styles!(a_reload_lists_exactly_the_new_set);

// ---------------------------------------------------------------------------------------------
// Confirmations
// ---------------------------------------------------------------------------------------------

async fn agent_token(client: &Client, tool: &str, arguments: Value) -> (CallToolResult, String) {
    let r = call(client, tool, arguments).await;
    assert_ok(&r);
    let token = r.structured_content.as_ref().and_then(|s| s["confirmation_required"]["token"].as_str());
    let token = token.unwrap_or_else(|| panic!("no confirmation token: {r:#?}")).to_string();
    (r, token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_confirmation_runs_once_through_the_confirm_tool() {
    let d = Daemon::start(&[("c.toml", CONFIRM_TOOLS)]);
    let (client, _) = connect(&d, Style::Legacy, Elicit::Accept).await;
    let tools = listed(&client).await;
    assert!(tools.contains_key("confirm"), "an agent-confirmed tool brings the confirm tool: {:?}", tools.keys());
    assert_eq!(tools["confirm"]["inputSchema"]["required"], json!(["token"]));
    assert!(
        tools["guarded"]["description"].as_str().unwrap().ends_with("(asks for agent confirmation before it runs)")
    );

    let file = d.dir.path().join("log.txt");
    let (r, token) = agent_token(&client, "guarded", json!({ "file": file, "text": "hello there" })).await;
    let t = text(&r);
    assert!(t.starts_with("Confirmation required; nothing has run yet.\n"), "{t}");
    assert!(t.contains(&format!("{{\"token\": \"{token}\"}}")), "the text carries the token: {t}");
    assert!(t.contains("within 60 s"), "{t}");
    assert_eq!(token.len(), 64);
    let description = r.structured_content.as_ref().unwrap()["confirmation_required"]["description"].as_str().unwrap();
    assert!(description.contains("'hello there'") && description.contains(file.to_str().unwrap()), "{description}");
    assert_eq!(lines(&file), 0, "nothing may run before the confirmation");

    let r = call(&client, "confirm", json!({ "token": token })).await;
    assert_ok(&r);
    assert_eq!(text(&r), "done\n[exit code 0]");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hello there\n");

    // Replay.
    let r = call(&client, "confirm", json!({ "token": token })).await;
    assert_failed(&r, "CONFIRMATION_INVALID: ");
    let r = call(&client, "confirm", json!({})).await;
    assert_failed(&r, "MISSING_REQUIRED_FIELD: ");
    assert_eq!(lines(&file), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expired_agent_confirmation_is_refused() {
    let d = Daemon::start_with(&[("c.toml", CONFIRM_TOOLS)], &["--confirm-ttl", "1s"]);
    let (client, _) = connect(&d, Style::Legacy, Elicit::Accept).await;
    let file = d.dir.path().join("log.txt");
    let (r, token) = agent_token(&client, "guarded", json!({ "file": file, "text": "late" })).await;
    assert!(text(&r).contains("within 1 s"), "{}", text(&r));
    // Waiting out the TTL is the point of this test.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let r = call(&client, "confirm", json!({ "token": token })).await;
    assert_failed(&r, "CONFIRMATION_EXPIRED: ");
    assert_eq!(lines(&file), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_confirmed_timeout_names_the_tools_timeout() {
    let d = Daemon::start(&[("c.toml", CONFIRM_TOOLS)]);
    let (client, _) = connect(&d, Style::Legacy, Elicit::Accept).await;
    let (_, token) = agent_token(&client, "guarded-slow", json!({})).await;
    let r = call(&client, "confirm", json!({ "token": token })).await;
    assert_eq!(r.is_error, Some(true), "{r:#?}");
    assert!(text(&r).contains("[timed out after 1 s and was killed]"), "{}", text(&r));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_confirmed_json_tool_returns_structured_content() {
    let d = Daemon::start(&[("c.toml", CONFIRM_TOOLS)]);
    let (client, _) = connect(&d, Style::Legacy, Elicit::Accept).await;
    let (_, token) = agent_token(&client, "guarded-json", json!({})).await;
    let r = call(&client, "confirm", json!({ "token": token })).await;
    assert_ok(&r);
    assert_eq!(r.structured_content, Some(json!({ "ok": true })), "{r:#?}");
}

/// Without elicitation the call waits for an admin: `cordon approve` or `cordon deny`.
async fn a_human_approval_through_cordon_approve(style: Style) {
    let d = Daemon::start(&[("c.toml", CONFIRM_TOOLS)]);
    let (client, recorder) = connect(&d, style, Elicit::Unsupported).await;
    let socket = d.socket.clone();
    let admin = tokio::task::spawn_blocking(move || {
        let p = wait_pending(&socket);
        assert_eq!(p["tool"], "approved");
        assert_eq!(p["argv"], json!(["/usr/bin/printf", "[%s]", "yes"]));
        cordon_at(&socket, &["approve", p["approval_id"].as_str().unwrap()]).assert_code(0);
    });
    let (r, admin) = tokio::join!(call(&client, "approved", json!({ "text": "yes" })), admin);
    admin.unwrap();
    assert_ok(&r);
    assert_eq!(text(&r), "[yes]\n[exit code 0]");
    assert_eq!(blocking(|| d.cordon(&["pending", "--json"]).json())["pending"], json!([]));

    let socket = d.socket.clone();
    let admin = tokio::task::spawn_blocking(move || {
        let p = wait_pending(&socket);
        cordon_at(&socket, &["deny", p["approval_id"].as_str().unwrap()]).assert_code(0);
    });
    let (r, admin) = tokio::join!(call(&client, "approved", json!({ "text": "no" })), admin);
    admin.unwrap();
    assert_failed(&r, "APPROVAL_DENIED: ");
    assert!(recorder.elicitations().is_empty(), "{:?}", recorder.elicitations());
}

in_both_styles!(a_human_approval_through_cordon_approve);

/// With elicitation the person answers through the client: an elicitation request on
/// 2025-11-25, an input-required round on 2026-07-28.
async fn a_human_approval_through_the_client(style: Style) {
    // Elicitation approves only when the admin opted in (see escapes_confirm.rs for without).
    let d = Daemon::start_with(&[("c.toml", CONFIRM_TOOLS)], &["--human-approval-via-elicitation"]);

    let (client, recorder) = connect(&d, style, Elicit::Accept).await;
    let r = call(&client, "approved", json!({ "text": "yes" })).await;
    assert_ok(&r);
    assert_eq!(text(&r), "[yes]\n[exit code 0]");
    let asked = recorder.elicitations();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].starts_with("Allow this?\ntool \"approved\" will run `/usr/bin/printf '[%s]' yes`"), "{asked:?}");
    assert!(asked[0].contains("danger: high"), "{asked:?}");
    assert_eq!(blocking(|| d.cordon(&["pending", "--json"]).json())["pending"], json!([]), "approved by elicitation");

    let (client, recorder) = connect(&d, style, Elicit::Decline).await;
    let r = call(&client, "approved", json!({ "text": "no" })).await;
    assert_failed(&r, "APPROVAL_DENIED: the user declined; nothing ran");
    assert_eq!(recorder.elicitations().len(), 1);
}

// Elicitation is a server-to-client request on 2025-11-25, an input-required round on 2026-07-28.
in_both_styles!(a_human_approval_through_the_client);

fn pending(socket: &Path) -> Value {
    cordon_at(socket, &["pending", "--json"]).json()["pending"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancelled_approval_wait_leaves_nothing_pending() {
    let d = Daemon::start(&[("c.toml", CONFIRM_TOOLS)]);
    let (client, _) = connect(&d, Style::Legacy, Elicit::Unsupported).await;
    let request = ClientRequest::CallToolRequest(Request::new(params("approved", json!({ "text": "late" }))));
    let handle = client.send_cancellable_request(request, PeerRequestOptions::no_options()).await.unwrap();
    let p = blocking(|| wait_pending(&d.socket));
    client
        .notify_cancelled(CancelledNotificationParam::new(Some(handle.id.clone()), Some("test".into())))
        .await
        .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(2), handle.await_response()).await.unwrap();
    assert!(matches!(outcome, Err(ServiceError::Cancelled { .. })), "{outcome:?}");
    let gone = blocking(|| eventually(Duration::from_secs(3), || pending(&d.socket) == json!([])));
    assert!(gone, "the cancelled call's approval is still pending: {}", pending(&d.socket));
    let out = blocking(|| d.cordon(&["approve", p["approval_id"].as_str().unwrap()]));
    assert_eq!(out.code, Some(66), "an approval nobody can use any more: {out:?}");
}

async fn a_declined_approval_leaves_nothing_pending(style: Style) {
    // Elicitation approves only when the admin opted in (see escapes_confirm.rs for without).
    let d = Daemon::start_with(&[("c.toml", CONFIRM_TOOLS)], &["--human-approval-via-elicitation"]);
    let (client, _) = connect(&d, style, Elicit::Decline).await;
    let r = call(&client, "approved", json!({ "text": "no" })).await;
    assert_failed(&r, "APPROVAL_DENIED: the user declined; nothing ran");
    let left = blocking(|| pending(&d.socket));
    assert_eq!(left, json!([]), "the user declined, yet an admin is still asked to decide");
}

in_both_styles!(a_declined_approval_leaves_nothing_pending);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_input_required_state_is_single_use_and_unforgeable() {
    // Elicitation approves only when the admin opted in (see escapes_confirm.rs for without).
    let d = Daemon::start_with(&[("c.toml", CONFIRM_TOOLS)], &["--human-approval-via-elicitation"]);
    let (client, recorder) = connect(&d, Style::Modern, Elicit::Accept).await;

    // The first round asks; the token itself never reaches the client.
    let first = client.call_tool_once(params("approved", json!({ "text": "yes" }))).await.unwrap();
    let CallToolResponse::InputRequired(asked) = first else { panic!("expected input required: {first:?}") };
    let state = asked.request_state.clone().expect("a request state");
    let requests = serde_json::to_value(&asked.input_requests).unwrap();
    assert!(requests["approve"].is_object(), "{requests}");
    assert!(!serde_json::to_string(&asked).unwrap().contains("token"), "{asked:?}");

    let accept = serde_json::to_value(ElicitResult::new(ElicitationAction::Accept)).unwrap();
    let answer = |state: &str| {
        let mut responses = rmcp::model::InputResponses::new();
        responses.insert("approve".into(), accept.clone());
        params("approved", json!({ "text": "yes" })).with_request_state(state).with_input_responses(responses)
    };
    // A forged state is refused.
    let forged = client.call_tool_once(answer("00")).await.unwrap();
    let CallToolResponse::Complete(r) = forged else { panic!("{forged:?}") };
    assert_failed(&r, "CONFIRMATION_INVALID: ");
    // The real one works once.
    let CallToolResponse::Complete(r) = client.call_tool_once(answer(&state)).await.unwrap() else { panic!() };
    assert_eq!(text(&r), "[yes]\n[exit code 0]");
    let CallToolResponse::Complete(r) = client.call_tool_once(answer(&state)).await.unwrap() else { panic!() };
    assert_failed(&r, "CONFIRMATION_INVALID: ");
    assert!(recorder.elicitations().is_empty(), "call_tool_once drives no rounds");
}

// ---------------------------------------------------------------------------------------------
// The daemon going away and coming back
// ---------------------------------------------------------------------------------------------

/// Kills `d`'s daemon and returns what is needed to start another on the same socket.
fn kill_keeping_the_directory(mut d: Daemon) -> (tempfile::TempDir, PathBuf, PathBuf) {
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    let dir = std::mem::replace(&mut d.dir, tempfile::tempdir().unwrap());
    (dir, d.policies.clone(), d.socket.clone())
}

async fn wait_until_calls_work(client: &Client) -> CallToolResult {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = call(client, "echo", json!({ "text": "back" })).await;
        if r.is_error == Some(false) || Instant::now() >= deadline {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn the_daemon_going_away_and_coming_back(style: Style) {
    let d = Daemon::start(&[("tools.toml", TOOLS)]);
    let log = d.dir.path().join("mcp.log");
    let (client, recorder) = connect(&d, style, Elicit::Accept).await;
    assert_eq!(listed(&client).await.len(), LISTED.len());
    assert_ok(&call(&client, "echo", json!({ "text": "up" })).await);
    let mut changes = ListChanged::open(&client, &recorder).await;

    let (dir, policies, socket) = kill_keeping_the_directory(d);
    let started = Instant::now();
    let r = call(&client, "echo", json!({ "text": "down" })).await;
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
    assert_failed(
        &r,
        &format!("DAEMON_NOT_RUNNING: cordond is not running at {}; ask the admin to start it", socket.display()),
    );
    assert!(changes.next(Duration::from_secs(5)).await, "no tools/list_changed when the daemon went away");
    let names: Vec<String> = listed(&client).await.into_keys().collect();
    assert_eq!(
        names,
        ["confirm", "cordon_status", "describe_schema", "job_cancel", "job_status", "search_tools", "start_job"],
        "only the built-in tools while the daemon is away"
    );

    let d = Daemon::start_in(dir, policies, &[]);
    assert_eq!(d.socket, socket);
    let r = wait_until_calls_work(&client).await;
    assert_eq!(
        text(&r),
        "[back]\n[exit code 0]",
        "calls never worked again: {}",
        std::fs::read_to_string(log).unwrap()
    );
    assert_eq!(listed(&client).await.len(), LISTED.len());
}

in_both_styles!(the_daemon_going_away_and_coming_back);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_daemon_coming_back_announces_list_changed() {
    let d = Daemon::start(&[("tools.toml", TOOLS)]);
    let (client, recorder) = connect(&d, Style::Legacy, Elicit::Accept).await;
    assert_eq!(listed(&client).await.len(), LISTED.len());
    let mut changes = ListChanged::open(&client, &recorder).await;
    let (dir, policies, _) = kill_keeping_the_directory(d);
    assert!(changes.next(Duration::from_secs(5)).await, "no tools/list_changed when the daemon went away");
    // A client that re-lists now sees only the built-in tools ...
    assert_eq!(
        listed(&client).await.len(),
        7,
        "confirm, describe_schema, search_tools, cordon_status and the three job tools"
    );

    let _d = Daemon::start_in(dir, policies, &[]);
    assert_eq!(text(&wait_until_calls_work(&client).await), "[back]\n[exit code 0]");
    // ... so it must be told when the daemon's tools are back (the bridge retries its registry
    // watch at least every 5 s).
    assert!(changes.next(Duration::from_secs(8)).await, "no tools/list_changed when the daemon came back");
    assert_eq!(listed(&client).await.len(), LISTED.len());
}

/// A failed call whose path argument lies outside the tool's grants says so in the result text:
/// the hint comes from cordond, so the agent hears it too (without the grants: they are for
/// admins). Here the MCP session runs as root (an admin), so the grants are named.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_path_the_sandbox_refused_is_named_in_the_result() {
    let policy = r#"version = 1
[tools.list]
description = "list a directory"
reason = "tests"
command = ["/bin/ls", "{{path}}"]
read = ["/etc/ssl"]

[tools.list.params.path]
type = "path"
required = true
"#;
    let d = Daemon::start(&[("tools.toml", policy)]);
    let (client, _) = connect(&d, Style::Legacy, Elicit::Unsupported).await;
    let outside = d.dir.path().to_path_buf();
    let r = call(&client, "list", json!({ "path": outside })).await;
    assert_eq!(r.is_error, Some(true), "{r:#?}");
    let t = text(&r);
    let hint = format!("[hint: path={} is outside what the sandbox lets list read", outside.display());
    assert!(t.contains(&hint) && t.contains("landlock refused it, not the file's mode"), "{t}");
    let r = call(&client, "list", json!({ "path": "/etc/ssl" })).await;
    assert!(!text(&r).contains("[hint:"), "{r:#?}");
}
