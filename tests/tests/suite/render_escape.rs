//! Control bytes never reach a person's terminal raw: an argument (or a policy description, or a
//! path) holding ESC sequences, CR and bidi overrides is shown escaped in every rendering meant
//! for people (`cordon pending`, `run`, `approve`/`deny`, `audit tail`, `tools`, `tool`,
//! `status`, `doctor`, error messages, the MCP elicitation message), while JSON output stays
//! exact.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_core::display::is_unsafe;
use cordon_tests::{Daemon, eventually};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    Implementation, ProtocolVersion,
};
use rmcp::service::{RequestContext, RoleClient};
use rmcp::transport::{ConfigureCommandExt as _, TokioChildProcess};
use rmcp::{ClientHandler, ErrorData, ServiceExt as _};
use serde_json::{Value, json};

/// Erase the line, return to its start, then reverse what follows.
const EVIL: &str = "\u{1b}[2K\rharmless \u{202e}txt.exe\u{2066}";

const TOOLS: &str = r#"
version = 1

[tools.approved]
description = "print, after a human approval"
reason = "tests"
command = ["/usr/bin/printf", "[%s]", "{{text}}"]
confirm = "human"

[tools.approved.params.text]
type = "string"
pattern = "[^\\x00]*"
required = true

[tools.count]
description = "takes a number \u001b]0;owned\u0007 and \u202e reversed"
reason = "tests"
command = ["/usr/bin/printf", "%s", "{{n}}"]

[tools.count.params.n]
type = "integer"
description = "a number \u001b[31m in red"
required = true
"#;

/// No character that could steer a terminal, except the line ends of multi-line output.
#[track_caller]
fn assert_clean(what: &str, text: &str) {
    let bad: Vec<char> = text.chars().filter(|c| *c != '\n' && is_unsafe(*c)).collect();
    assert!(bad.is_empty(), "{what} prints raw control or bidi characters {bad:?}:\n{text:?}");
}

/// The escaped forms of [`EVIL`] are visible.
#[track_caller]
fn assert_shows_escapes(what: &str, text: &str) {
    for shown in ["\\u{1b}[2K", "\\rharmless", "<U+202E>txt.exe<U+2066>"] {
        assert!(text.contains(shown), "{what} does not show {shown:?}:\n{text}");
    }
}

fn wait_pending(d: &Daemon) -> String {
    let mut id = String::new();
    assert!(
        eventually(Duration::from_secs(10), || {
            id = d.cordon(&["pending", "--json"]).json()["pending"][0]["approval_id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            !id.is_empty()
        }),
        "no pending approval"
    );
    id
}

#[test]
fn an_argument_with_controls_is_shown_escaped_to_the_admin_and_the_caller() {
    let d = Daemon::start(&[("t.toml", TOOLS)]);
    let waiter = d.cordon_spawn(&["run", "approved", "--args-json", &json!({ "text": EVIL }).to_string()]);
    let id = wait_pending(&d);

    let pending = d.cordon(&["pending"]);
    pending.assert_code(0);
    assert_clean("cordon pending", &pending.stdout);
    assert_shows_escapes("cordon pending", &pending.stdout);
    assert!(pending.stdout.contains("will run `/usr/bin/printf '[%s]' '"), "{}", pending.stdout);
    // JSON stays JSON (the description is the same escaped text).
    let listed = d.cordon(&["pending", "--json"]).json();
    assert_shows_escapes("cordon pending --json", listed["pending"][0]["description"].as_str().unwrap());

    let approved = d.cordon(&["approve", &id]);
    approved.assert_code(0);
    assert_clean("cordon approve", &approved.stdout);
    let run = waiter.wait_with_output().unwrap();
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let stderr = String::from_utf8(run.stderr).unwrap();
    assert_clean("cordon run (waiting for approval)", &stderr);
    assert_shows_escapes("cordon run (waiting for approval)", &stderr);
    // The tool's own output is passed through byte for byte, as documented.
    assert_eq!(String::from_utf8(run.stdout).unwrap(), format!("[{EVIL}]"));

    // An id that is itself hostile, echoed in the error.
    let deny = d.cordon(&["deny", EVIL]);
    assert_ne!(deny.code, Some(0));
    assert_clean("cordon deny (error)", &deny.stderr);
    assert!(deny.stderr.contains("\\u{1b}[2K"), "{}", deny.stderr);

    // The audit records hold the exact value; the human rendering shows it escaped.
    let tail = d.cordon(&["audit", "tail", "-n", "50"]);
    tail.assert_code(0);
    assert_clean("cordon audit tail", &tail.stdout);
    // argv is shown as JSON text (C0 escaped by JSON), with C1 and bidi escaped on top.
    assert!(tail.stdout.contains(r#""\u001b[2K\rharmless <U+202E>txt.exe<U+2066>""#), "{}", tail.stdout);
    let json_tail = d.cordon(&["audit", "tail", "-n", "50", "--decision", "started", "--json"]);
    let started: Value = serde_json::from_str(json_tail.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(started["argv"][2], EVIL, "{started}");
}

#[test]
fn errors_that_echo_arguments_are_escaped() {
    let d = Daemon::start(&[("t.toml", TOOLS)]);
    let (out, j) = d.run_json("count", &json!({ "n": EVIL }));
    out.assert_code(65);
    assert_eq!(j["error"]["code"], "INVALID_FIELD_TYPE", "{j}");
    let human = d.cordon(&["run", "count", "--args-json", &json!({ "n": EVIL, "extra": EVIL }).to_string()]);
    human.assert_code(65);
    assert_clean("cordon run (invalid arguments)", &human.stderr);
    let unknown = d.cordon(&["run", &format!("nope{EVIL}")]);
    assert_ne!(unknown.code, Some(0));
    assert_clean("cordon run (unknown tool)", &unknown.stderr);
    assert!(unknown.stderr.contains("\\u{1b}[2K"), "{}", unknown.stderr);
}

#[test]
fn descriptions_and_paths_with_controls_are_escaped_in_tools_tool_status_and_doctor() {
    // The daemon's own directory (policies, socket) has an ESC sequence in its name.
    let dir = tempfile::Builder::new().prefix("cordon-\u{1b}[2K\u{202e}-").tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), TOOLS).unwrap();
    let d = Daemon::start_in(dir, policies, &[]);
    for args in [&["tools"][..], &["tools", "--all"], &["tool", "count"], &["status"], &["doctor"]] {
        let out = d.cordon(args);
        let what = format!("cordon {}", args.join(" "));
        assert_clean(&what, &out.stdout);
        assert_clean(&what, &out.stderr);
        assert!(out.stdout.contains("\\u{1b}"), "{what} should show the escape:\n{}", out.stdout);
    }
    let tool = d.cordon(&["tool", "count"]).stdout;
    assert!(tool.contains("takes a number \\u{1b}]0;owned\\u{7} and <U+202E> reversed"), "{tool}");
    assert!(tool.contains("a number \\u{1b}[31m in red"), "{tool}");
    // JSON output keeps the exact text.
    let json = d.cordon(&["tool", "count", "--json"]).json();
    assert_eq!(json["description"], "takes a number \u{1b}]0;owned\u{7} and \u{202e} reversed");
}

/// An MCP client that accepts every elicitation and records its message.
#[derive(Debug, Clone, Default)]
struct Recorder {
    messages: Arc<Mutex<Vec<String>>>,
}

impl ClientHandler for Recorder {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new("cordon-tests", "0"),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
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
        self.messages.lock().unwrap().push(message);
        Ok(ElicitResult::new(ElicitationAction::Accept))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_elicitation_message_shows_controls_escaped() {
    let d = Daemon::start_with(&[("t.toml", TOOLS)], &["--human-approval-via-elicitation"]);
    let recorder = Recorder::default();
    let socket: &Path = &d.socket;
    let command = tokio::process::Command::new(cordon_tests::bin("cordon")).configure(|c| {
        c.arg("--socket").arg(socket).arg("mcp");
    });
    let log = std::fs::File::create(d.dir.path().join("mcp.log")).unwrap();
    let (transport, _) = TokioChildProcess::builder(command).stderr(log).spawn().unwrap();
    let client = recorder.clone().serve(transport).await.unwrap();
    let arguments = match json!({ "text": EVIL }) {
        Value::Object(o) => o,
        _ => unreachable!(),
    };
    let result =
        client.call_tool(CallToolRequestParams::new("approved".to_string()).with_arguments(arguments)).await.unwrap();
    assert_eq!(result.is_error, Some(false), "{result:#?}");
    let messages = recorder.messages.lock().unwrap().clone();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(messages[0].starts_with("Allow this?\n"), "{messages:?}");
    assert_clean("the elicitation message", &messages[0]);
    assert_shows_escapes("the elicitation message", &messages[0]);
    let _ = client.cancel().await;
}
