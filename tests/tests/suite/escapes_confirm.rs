//! Attacks on confirmations and on the audit log's and daemon's bounds, through the real
//! binaries: an agent approving its own human confirmation, an approval outliving a reload,
//! audit records that grow with what the agent sends, and per-agent memory (pending
//! confirmations, HTTP/2 streams). Tests that run as the unprivileged agent need root.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_tests::agent::{self, AGENT, SOCKET_GROUP};
use cordon_tests::require_root;
use cordon_tests::{Daemon, Output, bin, cordon_at, eventually, is_root, wait_pending};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, Implementation, ProtocolVersion,
};
use rmcp::service::{RequestContext, RoleClient};
use rmcp::transport::{ConfigureCommandExt as _, TokioChildProcess};
use rmcp::{ClientHandler, ErrorData, ServiceExt as _};
use serde_json::{Value, json};

const ALLOW: &str = r#"allow = { users = ["cordon-t-agent", "root"] }"#;

const POLICY: &str = r#"
version = 1

[defaults]
timeout = "5s"
allow = { users = ["cordon-t-agent", "root"] }

[tools.approved]
description = "print a word, after a human approval"
reason = "tests"
command = ["/usr/bin/printf", "[%s]", "{{text}}"]
confirm = "human"

[tools.approved.params.text]
type = "string"
required = true

[tools.noted]
description = "take a note, after an agent confirmation"
reason = "tests"
command = ["/bin/true", "{{text}}"]
confirm = "agent"

[tools.noted.params.text]
type = "string"
required = true

[tools.plain]
description = "take a note"
reason = "tests"
command = ["/bin/true", "{{text}}"]

[tools.plain.params.text]
type = "string"
required = true
"#;

fn uid_of(name: &str) -> u64 {
    let out = Command::new("id").arg("-u").arg(name).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// A daemon the agent can reach, with `POLICY` (without `defaults.allow` when not root, where
/// no agent user exists) and `extra` flags.
fn start(extra: &[&str]) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    let mut args = Vec::new();
    if is_root() {
        agent::ensure();
        args.extend(["--socket-group", SOCKET_GROUP]);
    }
    std::fs::write(policies.join("t.toml"), for_host(POLICY)).unwrap();
    args.extend_from_slice(extra);
    Daemon::start_in(dir, policies, &args)
}

/// The policy as written, without the allow list naming the agent user when there is none.
fn for_host(policy: &str) -> String {
    if is_root() { policy.to_string() } else { policy.replace(ALLOW, "") }
}

/// Runs `cordon` as the agent user.
fn as_agent(d: &Daemon, args: &[&str]) -> Output {
    agent::cordon(&d.socket, args)
}

fn records(d: &Daemon, decision: &str) -> Vec<Value> {
    d.audit_records().into_iter().filter(|r| r["decision"] == decision).collect()
}

/// The records matching `pred`, once there is one: refusals are queued, not synced, so they
/// may reach the file a moment after the answer.
fn matching(d: &Daemon, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut found = Vec::new();
    eventually(Duration::from_secs(10), || {
        found = d.audit_records().into_iter().filter(|r| pred(r)).collect();
        !found.is_empty()
    });
    found
}

fn started_of(d: &Daemon, tool: &str) -> usize {
    records(d, "started").iter().filter(|r| r["tool"] == tool).count()
}

// ---------------------------------------------------------------------------------------------
// F1: a human confirmation approved by the agent's own front-end
// ---------------------------------------------------------------------------------------------

/// An MCP client that declares elicitation and accepts whatever it is asked.
#[derive(Debug, Clone, Default)]
struct Accepter {
    asked: Arc<Mutex<Vec<String>>>,
}

impl ClientHandler for Accepter {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::builder().enable_elicitation().build(), Implementation::new("t", "0"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked.lock().unwrap().push(format!("{request:?}"));
        Ok(ElicitResult::new(ElicitationAction::Accept))
    }
}

/// The agent's own `cordon mcp` (run as its uid), driven by an [`Accepter`].
async fn agent_mcp(d: &Daemon) -> (rmcp::service::RunningService<RoleClient, Accepter>, Accepter) {
    let socket = d.socket.clone();
    let command = tokio::process::Command::new("setpriv").configure(|c| {
        c.args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--"])
            .arg(bin("cordon"))
            .arg("--socket")
            .arg(&socket)
            .arg("mcp");
    });
    let (transport, _) = TokioChildProcess::builder(command).stderr(Stdio::null()).spawn().unwrap();
    let accepter = Accepter::default();
    let client = accepter.clone().serve(transport).await.unwrap();
    (client, accepter)
}

fn call_params(tool: &str, args: Value) -> CallToolRequestParams {
    let Value::Object(map) = args else { panic!("arguments must be an object") };
    CallToolRequestParams::new(tool.to_string()).with_arguments(map)
}

fn result_text(r: &CallToolResult) -> String {
    r.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect::<Vec<_>>().join("\n")
}

/// The agent starts its own `cordon mcp` (as its own uid, as anything of that uid can) with a
/// client that declares elicitation and answers "accept". Without the admin's opt-in the
/// front-end is told elicitation does not count: it asks nobody, the call waits for an admin,
/// and the admin's denial ends it; nothing ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_run_cordon_mcp_answering_accept_cannot_approve_its_own_call() {
    require_root!();
    let d = start(&[]);
    let socket = d.socket.clone();
    let (client, accepter) = agent_mcp(&d).await;

    let admin = tokio::task::spawn_blocking(move || {
        let p = wait_pending(&socket);
        cordon_at(&socket, &["deny", p["approval_id"].as_str().unwrap()]).assert_code(0);
        p
    });
    let (r, p) = tokio::join!(client.call_tool(call_params("approved", json!({ "text": "self" }))), admin);
    let p = p.unwrap();
    let r = r.unwrap();
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert!(result_text(&r).starts_with("APPROVAL_DENIED: "), "{r:?}");
    assert!(accepter.asked.lock().unwrap().is_empty(), "asked the host's user pointlessly");
    assert_eq!(p["tool"], "approved");
    assert_eq!(p["caller_uid"].as_u64(), Some(uid_of(AGENT)), "{p}");
    assert_eq!(started_of(&d, "approved"), 0, "the tool ran");
    let requested = matching(&d, |r| r["decision"] == "confirmation_requested");
    assert_eq!(requested.len(), 1, "{requested:?}");
    assert_eq!(requested[0]["mode"], "human");
    let refused = matching(&d, |r| r["decision"] == "confirmation_refused");
    assert_eq!(refused.len(), 1, "the admin's denial is audited: {refused:?}");
    assert!(records(&d, "confirmation_granted").is_empty());
    client.cancel().await.unwrap();
}

/// A front-end that claims an elicitation approval anyway (the flag in Confirm is the
/// front-end's word, nothing more) is refused, audited as unauthorized with the reason; the
/// approval stays for an admin. With the admin's opt-in the same request runs the tool.
#[test]
fn a_claimed_elicitation_approval_is_refused_without_the_admins_opt_in() {
    use cordon_proto::v1;
    use cordon_proto::v1::cordon_client::CordonClient;

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    for opted_in in [false, true] {
        let d = if opted_in { start(&["--human-approval-via-elicitation"]) } else { start(&[]) };
        let (required, confirm) = rt.block_on(async {
            let mut c = CordonClient::new(cordon_proto::connect(&d.socket).await.unwrap());
            let request = v1::InvokeRequest {
                tool: "approved".into(),
                arguments_json: json!({ "text": "claimed" }).to_string(),
                ..Default::default()
            };
            let mut events = c.invoke(request).await.unwrap().into_inner();
            let Some(v1::invoke_event::Event::ConfirmationRequired(required)) =
                events.message().await.unwrap().and_then(|e| e.event)
            else {
                panic!("expected a confirmation")
            };
            let request = v1::ConfirmRequest {
                token: required.token.clone(),
                approved_by_elicitation: true,
                stream_output: false,
            };
            let confirm = match c.confirm(request).await {
                Ok(stream) => {
                    let mut stream = stream.into_inner();
                    let mut finished = None;
                    while let Some(e) = stream.message().await.unwrap() {
                        if let Some(v1::invoke_event::Event::Finished(f)) = e.event {
                            finished = Some(f);
                        }
                    }
                    Ok(finished.expect("a finished event"))
                }
                Err(status) => Err(status),
            };
            (required, confirm)
        });
        assert_eq!(required.mode, "human");
        assert_eq!(required.elicitation_approves, opted_in);
        if opted_in {
            let finished = confirm.unwrap();
            assert_eq!(finished.stdout, b"[claimed]");
            assert_eq!(started_of(&d, "approved"), 1);
            let granted = matching(&d, |r| r["decision"] == "confirmation_granted");
            assert_eq!(granted[0]["via"], "elicitation", "{granted:?}");
            continue;
        }
        let status = confirm.unwrap_err();
        assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
        let code = status.metadata().get(cordon_proto::ERROR_CODE_KEY).unwrap().to_str().unwrap();
        assert_eq!(code, "ELICITATION_NOT_ACCEPTED");
        assert!(status.message().contains("`cordon approve ID`"), "{status:?}");
        assert_eq!(started_of(&d, "approved"), 0, "the tool ran");
        let refused = matching(&d, |r| r["decision"] == "unauthorized");
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(refused[0]["code"], "ELICITATION_NOT_ACCEPTED");
        assert_eq!(refused[0]["tool"], "approved");
        assert_eq!(refused[0]["approval_id"], required.approval_id.as_str());
        assert_eq!(refused[0]["requested_via"], "elicitation");
        // The approval is still the admin's to give.
        let pending = d.cordon(&["pending", "--json"]).json()["pending"].clone();
        assert_eq!(pending[0]["approval_id"], required.approval_id.as_str(), "{pending}");
        assert!(records(&d, "daemon_started")[0]["human_approval_via_elicitation"] == false);
    }
}

// ---------------------------------------------------------------------------------------------
// F2: an approval given after a reload
// ---------------------------------------------------------------------------------------------

/// A human call waits; the admin removes (then, second round, changes) the tool and reloads;
/// the approval that follows runs nothing: POLICY_CHANGED, audited with the tool and approval.
#[test]
fn an_approval_after_a_reload_runs_nothing() {
    let changed =
        POLICY.replace(r#"["/usr/bin/printf", "[%s]", "{{text}}"]"#, r#"["/usr/bin/printf", "<%s>", "{{text}}"]"#);
    let removed =
        POLICY.replace("[tools.approved]", "[tools.gone]").replace("[tools.approved.params", "[tools.gone.params");
    for (round, policy) in [removed, changed].into_iter().enumerate() {
        let d = start(&[]);
        let waiting = d.cordon_spawn(&["run", "approved", "--args-json", r#"{"text":"late"}"#, "--json"]);
        let p = wait_pending(&d.socket);
        std::fs::write(d.policies.join("t.toml"), for_host(&policy)).unwrap();
        d.cordon(&["reload"]).assert_code(0);
        d.cordon(&["approve", p["approval_id"].as_str().unwrap()]).assert_code(0);
        let out = waiting.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let answer: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
        assert_eq!(answer["error"]["code"], "POLICY_CHANGED", "round {round}: {answer}");
        assert_eq!(started_of(&d, "approved"), 0, "round {round}: the old tool ran");
        let refused = matching(&d, |r| r["decision"] == "refused" && r["code"] == "POLICY_CHANGED");
        assert_eq!(refused.len(), 1, "round {round}: {refused:?}");
        assert_eq!(refused[0]["tool"], "approved");
        assert_eq!(refused[0]["approval_id"], p["approval_id"]);
    }
}

// ---------------------------------------------------------------------------------------------
// F4: audit volume from an agent
// ---------------------------------------------------------------------------------------------

fn sha256_of_argv(argv: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("argv");
    let mut bytes = Vec::new();
    for a in argv {
        bytes.extend_from_slice(a.as_bytes());
        bytes.push(0);
    }
    std::fs::write(&file, bytes).unwrap();
    let out = Command::new("sha256sum").arg(&file).output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap().to_string()
}

/// 200 calls with 512 KiB arguments from the agent through its `cordon mcp` (runs, and agent
/// confirmations it redeems): every record stays small, with the full argv's SHA-256; the log
/// rotates inside batches, so no file passes its limit by more than a record; nothing is
/// deleted; the chain verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_flooding_large_arguments_cannot_bloat_the_audit_log() {
    require_root!();
    const MAX_SIZE: u64 = 256 * 1024;
    const MAX_LINE: usize = 32 * 1024;
    let d = start(&["--audit-max-size", "256KiB", "--audit-keep", "100000"]);
    let (client, _) = agent_mcp(&d).await;
    let big = "x".repeat(512 * 1024);
    for i in 0..200 {
        let args = json!({ "text": big });
        if i % 2 == 0 {
            // Runs (or fails to exec: the argument is over the kernel's per-string limit).
            client.call_tool(call_params("plain", args)).await.unwrap();
        } else {
            let r = client.call_tool(call_params("noted", args)).await.unwrap();
            let token = r.structured_content.as_ref().and_then(|c| c["confirmation_required"]["token"].as_str());
            let token = token.unwrap_or_else(|| panic!("no token: {r:?}")).to_string();
            client.call_tool(call_params("confirm", json!({ "token": token }))).await.unwrap();
        }
    }
    client.cancel().await.unwrap();
    let audit = d.audit.clone();
    let mut files: Vec<_> = std::fs::read_dir(audit.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("audit.jsonl"))
        .collect();
    files.sort();
    assert!(files.len() > 2, "the log should have rotated: {files:?}");
    let mut total = 0;
    let expected_sha = sha256_of_argv(&["/bin/true", &big]);
    let mut clipped = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        total += text.len();
        if f != &audit {
            assert!(text.len() as u64 <= MAX_SIZE + MAX_LINE as u64, "{} is {} bytes", f.display(), text.len());
        }
        for line in text.lines() {
            assert!(line.len() <= MAX_LINE, "a {} byte record in {}", line.len(), f.display());
            let r: Value = serde_json::from_str(line).unwrap();
            if r["decision"] == "started" || r["decision"] == "confirmation_requested" {
                assert_eq!(r["argv_clipped"]["sha256"], expected_sha.as_str(), "{}", &line[..200.min(line.len())]);
                assert_eq!(r["argv_clipped"]["bytes"], 512 * 1024 + "/bin/true".len());
                assert_eq!(r["argv_clipped"]["elements"], 2);
                clipped += 1;
            }
        }
    }
    assert_eq!(clipped, 300, "a started record per call and a confirmation_requested per confirmed one");
    assert!(total < 200 * 4 * MAX_LINE, "{total} bytes of audit for 200 calls");
    eprintln!("measured: {total} bytes of audit in {} files for 200 calls of 512 KiB", files.len());
    let out = d.cordon(&["audit", "verify", audit.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{out:?}");
}

// ---------------------------------------------------------------------------------------------
// F5: per-agent memory
// ---------------------------------------------------------------------------------------------

/// An agent parks confirmations without redeeming them: the 33rd is refused (RESOURCE_EXHAUSTED,
/// TOO_MANY_CONFIRMATIONS, audited), while another caller still gets one.
#[test]
fn an_agent_cannot_park_confirmations_without_bound() {
    require_root!();
    let d = start(&[]);
    for i in 0..32 {
        let out = as_agent(&d, &["run", "noted", "--args-json", r#"{"text":"a"}"#, "--json"]);
        assert_eq!(out.code, Some(3), "call {i}: {out:?}");
    }
    let out = as_agent(&d, &["run", "noted", "--args-json", r#"{"text":"a"}"#, "--json"]);
    let answer = out.json();
    assert_eq!(answer["error"]["code"], "TOO_MANY_CONFIRMATIONS", "{out:?}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("the limit is 32"), "{answer}");
    let refused = matching(&d, |r| r["decision"] == "refused" && r["code"] == "TOO_MANY_CONFIRMATIONS");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["tool"], "noted");
    assert_eq!(refused[0]["caller"]["uid"].as_u64(), Some(uid_of(AGENT)));
    // The cap is the agent's, not everyone's.
    d.cordon(&["run", "noted", "--args-json", r#"{"text":"a"}"#, "--json"]).assert_code(3);
}

/// Large invocations hit the per-caller byte cap before the count cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_cannot_park_large_confirmations_without_bound() {
    require_root!();
    let d = start(&[]);
    let (client, _) = agent_mcp(&d).await;
    let big = json!({ "text": "y".repeat(900 * 1024) });
    let mut parked = 0;
    let refusal = loop {
        let r = client.call_tool(call_params("noted", big.clone())).await.unwrap();
        if r.is_error == Some(true) {
            break result_text(&r);
        }
        parked += 1;
        assert!(parked < 32, "the byte cap never applied");
    };
    assert!(refusal.starts_with("TOO_MANY_CONFIRMATIONS: "), "{refusal}");
    assert!(refusal.contains("MiB"), "{refusal}");
    assert!(parked >= 5, "refused after {parked}");
    eprintln!(
        "measured: {parked} confirmations of 900 KiB parked, then refused; cordond peak RSS {} KiB",
        d.peak_rss_kib()
    );
    client.cancel().await.unwrap();
}

/// Raw HTTP/2: HEADERS opening streams on one connection, never closed. The server allows 100
/// at once: stream 101 is reset with REFUSED_STREAM while the others and the connection live.
#[test]
fn a_connection_cannot_open_unbounded_streams() {
    let d = start(&[]);
    let mut s = UnixStream::connect(&d.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let frame = |kind: u8, flags: u8, stream: u32, payload: &[u8]| {
        let len = payload.len() as u32;
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    };
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(4, 0, 0, &[]));
    // HPACK: literal header fields without indexing, new names, no Huffman.
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/cordon.v1.Cordon/WatchRegistry"),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        block.push(0);
        block.push(name.len() as u8);
        block.extend_from_slice(name.as_bytes());
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    for n in 0..101u32 {
        out.extend(frame(1, 0x4, 2 * n + 1, &block));
    }
    s.write_all(&out).unwrap();
    // Read frames until the reset of stream 201 (the 101st), answering SETTINGS and PINGs.
    let mut resets = Vec::new();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    let found = loop {
        while buf.len() >= 9 {
            let len = (usize::from(buf[0]) << 16) | (usize::from(buf[1]) << 8) | usize::from(buf[2]);
            if buf.len() < 9 + len {
                break;
            }
            let (kind, flags) = (buf[3], buf[4]);
            let stream = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff;
            let payload = buf[9..9 + len].to_vec();
            buf.drain(..9 + len);
            match kind {
                4 if flags & 1 == 0 => s.write_all(&frame(4, 1, 0, &[])).unwrap(),
                6 if flags & 1 == 0 => s.write_all(&frame(6, 1, 0, &payload)).unwrap(),
                3 => resets.push((stream, u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]))),
                7 => panic!("the server closed the connection (GOAWAY {payload:?})"),
                _ => {}
            }
        }
        if resets.iter().any(|(stream, _)| *stream == 201) {
            break true;
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    assert!(found, "stream 101 was not refused; resets: {resets:?}");
    // REFUSED_STREAM (7) for it, and no other stream reset.
    assert_eq!(resets, vec![(201, 7)]);
    // The connection lives: a PING is answered.
    s.write_all(&frame(6, 0, 0, b"cordon!!")).unwrap();
    let mut header = [0u8; 9];
    let answered = loop {
        s.read_exact(&mut header).unwrap();
        let len = (usize::from(header[0]) << 16) | (usize::from(header[1]) << 8) | usize::from(header[2]);
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).unwrap();
        if header[3] == 6 && header[4] & 1 == 1 {
            break payload;
        }
    };
    assert_eq!(answered, b"cordon!!");
}
