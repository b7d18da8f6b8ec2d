//! `cordon mcp --http` (issue 17 part 2) through the real binaries, driven with curl on
//! 127.0.0.1: bearer tokens an admin issues, the identity of each session, the DNS-rebinding
//! checks and a token smuggled out of the sandbox. Needs root (real accounts); skips otherwise.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cordon_tests::agent::{self, AGENT};
use cordon_tests::{Daemon, bin, eventually, require_root};
use serde_json::{Value, json};

const CURL: &str = "/usr/bin/curl";
/// A non-admin account every host has (the second agent).
const OTHER: &str = "nobody";

fn policy() -> String {
    format!(
        r#"version = 1

[tools.id-a]
description = "prints the uid it runs as"
reason = "mcp over http tests"
command = ["/usr/bin/id", "-u"]
allow = {{ users = ["{AGENT}"] }}

[tools.id-b]
description = "prints the uid it runs as"
reason = "mcp over http tests"
command = ["/usr/bin/id", "-u"]
allow = {{ users = ["{OTHER}"] }}
"#
    )
}

/// `cordon mcp --http 127.0.0.1:0` on the daemon's socket, killed on drop.
struct Front {
    child: Child,
    port: u16,
}

impl Drop for Front {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn front(d: &Daemon, extra: &[&str]) -> Front {
    let mut child = Command::new(bin("cordon"))
        .arg("--socket")
        .arg(&d.socket)
        .args(["mcp", "--http", "127.0.0.1:0"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stderr.take().unwrap()).read_line(&mut first).unwrap();
    let port = first
        .split("http://127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no address in {first:?}"));
    Front { child, port }
}

/// Issues a token as root; returns the whole token.
fn issue(d: &Daemon, account: &str, extra: &[&str]) -> String {
    let mut args = vec!["token", "issue", account, "--label", "mcp-http test"];
    args.extend_from_slice(extra);
    let out = d.cordon(&args);
    out.assert_code(0);
    out.stdout.trim().to_string()
}

fn id_of(token: &str) -> &str {
    &token["cordon_".len().."cordon_".len() + 16]
}

/// One HTTP exchange.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC messages of the body (an SSE stream or one JSON object).
    fn messages(&self) -> Vec<Value> {
        if let Ok(v) = serde_json::from_str::<Value>(&self.body) {
            return vec![v];
        }
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect()
    }

    /// The answer to request `id`.
    fn reply(&self, id: u64) -> Value {
        self.messages().into_iter().find(|m| m["id"] == json!(id)).unwrap_or_else(|| panic!("no reply {id}: {self:#?}"))
    }
}

/// POSTs `body` with the MCP headers, `token` as `Authorization: Bearer`, and `headers`.
fn post(port: u16, token: Option<&str>, headers: &[String], body: &Value) -> Answer {
    post_as(None, port, token, headers, body)
}

/// [`post`] from local account `user` (`None`: root, this process).
fn post_as(user: Option<&str>, port: u16, token: Option<&str>, headers: &[String], body: &Value) -> Answer {
    let mut c = match user {
        Some(u) => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid", u, "--regid", u, "--init-groups", "--", CURL]);
            c
        }
        None => Command::new(CURL),
    };
    c.args(["-s", "-i", "--max-time", "30", "-X", "POST"]).args([
        "-H",
        "Content-Type: application/json",
        "-H",
        "Accept: application/json, text/event-stream",
    ]);
    if let Some(t) = token {
        c.arg("-H").arg(format!("Authorization: Bearer {t}"));
    }
    for h in headers {
        c.arg("-H").arg(h);
    }
    c.arg("--data-binary").arg(body.to_string()).arg(format!("http://127.0.0.1:{port}/mcp"));
    let out = c.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n");
    let (head, body) = text.split_once("\n\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {text:?} {:?}", String::from_utf8_lossy(&out.stderr)));
    let headers =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect();
    Answer { status, headers, body: body.to_string() }
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}})
}

/// An MCP session over HTTP: initialized, with its id.
struct Session {
    port: u16,
    token: String,
    id: String,
}

impl Session {
    #[track_caller]
    fn open(port: u16, token: &str) -> Session {
        let a = post(port, Some(token), &[], &initialize());
        assert_eq!(a.status, 200, "{a:#?}");
        assert_eq!(a.reply(1)["result"]["serverInfo"]["name"], "cordon", "{a:#?}");
        let id = a.header("mcp-session-id").unwrap_or_else(|| panic!("no session id: {a:#?}")).to_string();
        let s = Session { port, token: token.to_string(), id };
        let n = s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert_eq!(n.status, 202, "{n:#?}");
        s
    }

    fn headers(&self) -> Vec<String> {
        vec![format!("Mcp-Session-Id: {}", self.id), "MCP-Protocol-Version: 2025-06-18".into()]
    }

    fn send(&self, body: &Value) -> Answer {
        post(self.port, Some(&self.token), &self.headers(), body)
    }

    fn request(&self, id: u64, method: &str, params: Value) -> Value {
        let a = self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        assert_eq!(a.status, 200, "{method}: {a:#?}");
        a.reply(id)
    }

    fn daemon_tools(&self) -> Vec<String> {
        let list = self.request(2, "tools/list", json!({}));
        let mut names: Vec<String> = list["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{list}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .filter(|n| n.starts_with("id-"))
            .collect();
        names.sort();
        names
    }
}

fn start() -> Daemon {
    Daemon::start(&[("t.toml", &policy())])
}

#[track_caller]
fn assert_unauthorized(a: &Answer, error: Option<&str>, says: &str) {
    assert_eq!(a.status, 401, "{a:#?}");
    let challenge = a.header("www-authenticate").unwrap_or_else(|| panic!("no WWW-Authenticate: {a:#?}"));
    match error {
        Some(e) => assert_eq!(challenge, format!("Bearer realm=\"cordon\", error=\"{e}\""), "{a:#?}"),
        None => assert_eq!(challenge, "Bearer realm=\"cordon\"", "{a:#?}"),
    }
    assert!(a.body.contains(says), "expected {says:?} in {a:#?}");
}

/// No token, another scheme, a malformed token, two tokens: 401 with the challenge, before
/// anything else (a forged Host does not even get that far), and cordond never hears of it.
#[test]
fn a_request_without_a_token_is_refused_with_401_before_anything_else() {
    require_root!();
    let d = start();
    let f = front(&d, &[]);
    let before = d.audit_records().len();
    assert_unauthorized(&post(f.port, None, &[], &initialize()), None, "send Authorization: Bearer <token>");
    assert_unauthorized(
        &post(f.port, None, &["Host: evil.example".into(), "Origin: http://evil.example".into()], &initialize()),
        None,
        "send Authorization: Bearer <token>",
    );
    assert_unauthorized(
        &post(f.port, None, &["Authorization: Basic YWxpY2U6c2VjcmV0".into()], &initialize()),
        Some("invalid_request"),
        "only the Bearer scheme",
    );
    assert_unauthorized(
        &post(f.port, Some("cordon_abc"), &[], &initialize()),
        Some("invalid_token"),
        "cordon token is",
    );
    let good = issue(&d, AGENT, &[]);
    let twice = format!("Authorization: Bearer {good}");
    assert_unauthorized(&post(f.port, Some(&good), &[twice], &initialize()), None, "exactly one");
    // Only the issue reached cordond.
    let new: Vec<Value> = d.audit_records().into_iter().skip(before).collect();
    assert_eq!(new.iter().map(|r| r["decision"].as_str().unwrap()).collect::<Vec<_>>(), ["token_issued"], "{new:#?}");
}

/// A well-formed token cordond does not know, one revoked mid-session and one that expired: 401
/// `invalid_token` saying which, and an `unauthenticated` record naming the token.
#[test]
fn unknown_revoked_and_expired_tokens_are_refused_and_audited() {
    require_root!();
    let d = start();
    let f = front(&d, &[]);
    let unknown = format!("cordon_{}_{}", "0".repeat(16), "1".repeat(64));
    assert_unauthorized(
        &post(f.port, Some(&unknown), &[], &initialize()),
        Some("invalid_token"),
        "TOKEN_REFUSED: unknown bearer token 0000000000000000",
    );
    let token = issue(&d, AGENT, &[]);
    let s = Session::open(f.port, &token);
    assert_eq!(s.daemon_tools(), ["id-a"]);
    d.cordon(&["token", "revoke", id_of(&token)]).assert_code(0);
    let a = s.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}));
    assert_unauthorized(&a, Some("invalid_token"), &format!("bearer token {} was revoked", id_of(&token)));
    let short = issue(&d, AGENT, &["--expires", "1s"]);
    let expired = eventually(Duration::from_secs(10), || {
        let a = post(f.port, Some(&short), &[], &initialize());
        a.status == 401 && a.body.contains(&format!("bearer token {} expired", id_of(&short)))
    });
    assert!(expired, "a token issued for 1s was still accepted");
    // cordond answers, then its audit writer writes: wait for the records.
    let mut records = Vec::new();
    for (id, says) in
        [("0000000000000000", "unknown bearer token"), (id_of(&token), "was revoked"), (id_of(&short), "expired")]
    {
        let found = eventually(Duration::from_secs(10), || {
            records = d.audit_records();
            records.iter().any(|r| {
                r["decision"] == "unauthenticated"
                    && r["code"] == "TOKEN_REFUSED"
                    && r["token"] == id
                    && r["message"].as_str().unwrap_or_default().contains(says)
            })
        });
        assert!(found, "no refusal record for {id}: {records:#?}");
    }
    let revoked = records.iter().find(|r| r["decision"] == "token_revoked").unwrap();
    assert_eq!((&revoked["token"], &revoked["account"]), (&json!(id_of(&token)), &json!(AGENT)));
}

/// Two sessions on one front-end, tokens for two accounts: each lists only the tools its account
/// may use, a call runs as that account, and neither can use the other's session.
#[test]
fn two_sessions_with_tokens_for_two_accounts_see_only_their_tools_and_run_as_them() {
    require_root!();
    let d = start();
    let f = front(&d, &[]);
    let (ta, tb) = (issue(&d, AGENT, &[]), issue(&d, OTHER, &[]));
    let (a, b) = (Session::open(f.port, &ta), Session::open(f.port, &tb));
    assert_eq!(a.daemon_tools(), ["id-a"]);
    assert_eq!(b.daemon_tools(), ["id-b"]);
    for (s, tool, account) in [(&a, "id-a", AGENT), (&b, "id-b", OTHER)] {
        let r = s.request(5, "tools/call", json!({"name": tool, "arguments": {}}));
        assert_eq!(r["result"]["isError"], false, "{r}");
        let text = r["result"]["content"][0]["text"].as_str().unwrap();
        assert_eq!(text.lines().next(), Some(agent::id("-u", account).to_string().as_str()), "{r}");
    }
    // The other's tool is unknown to each.
    let r = a.request(6, "tools/call", json!({"name": "id-b", "arguments": {}}));
    assert!(r["error"]["message"].as_str().unwrap().contains("UNKNOWN_TOOL"), "{r}");
    // B's token on A's session: refused, the session stays A's.
    let stolen = post(f.port, Some(&tb), &a.headers(), &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}));
    assert_eq!(stolen.status, 403, "{stolen:#?}");
    assert!(stolen.body.contains("opened with another token"), "{stolen:#?}");
    assert_eq!(a.daemon_tools(), ["id-a"]);
    // A session id this front-end never bound: 404, nothing reaches the session layer.
    let made_up = post(
        f.port,
        Some(&ta),
        &["Mcp-Session-Id: 00000000-0000-4000-8000-000000000000".into(), "MCP-Protocol-Version: 2025-06-18".into()],
        &json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list"}),
    );
    assert_eq!(made_up.status, 404, "{made_up:#?}");
    assert!(made_up.body.contains("no such session"), "{made_up:#?}");
    // The started records carry the token's account and id.
    let records = d.audit_records();
    for (tool, token, account) in [("id-a", &ta, AGENT), ("id-b", &tb, OTHER)] {
        let r = records.iter().find(|r| r["decision"] == "started" && r["tool"] == tool).unwrap();
        assert_eq!(r["caller"]["uid"], agent::id("-u", account), "{r}");
        assert_eq!(r["caller"]["token"], id_of(token), "{r}");
    }
}

/// DNS rebinding: a Host that is not the bound address or a loopback name, or an Origin that is
/// not this server's own or allowed, is refused (403) even with a good token.
#[test]
fn a_foreign_origin_or_host_is_refused() {
    require_root!();
    let d = start();
    let f = front(&d, &["--allow-origin", "https://app.example:443"]);
    let t = issue(&d, AGENT, &[]);
    let port = f.port;
    for (header, says) in [
        ("Host: evil.example".to_string(), "Host header is not allowed"),
        (format!("Host: evil.example:{port}"), "Host header is not allowed"),
        (format!("Host: localhost:{}", port + 1), "Host header is not allowed"),
        ("Origin: http://evil.example".to_string(), "Origin header is not allowed"),
        (format!("Origin: http://localhost:{}", port + 1), "Origin header is not allowed"),
        ("Origin: https://app.example:8443".to_string(), "Origin header is not allowed"),
    ] {
        let a = post(port, Some(&t), std::slice::from_ref(&header), &initialize());
        assert_eq!(a.status, 403, "{header}: {a:#?}");
        assert!(a.body.contains(says), "{header}: {a:#?}");
        assert!(a.header("mcp-session-id").is_none(), "{header}: a session was opened");
    }
    for header in [
        format!("Host: localhost:{port}"),
        format!("Origin: http://localhost:{port}"),
        "Origin: https://app.example:443".into(),
    ] {
        let a = post(port, Some(&t), std::slice::from_ref(&header), &initialize());
        assert_eq!(a.status, 200, "{header}: {a:#?}");
    }
}

/// A tool that gets hold of a token (here in its environment) and calls cordond with it from
/// inside the sandbox is refused as a sandboxed peer: the token is never looked at.
#[test]
fn a_token_cannot_be_used_from_inside_a_sandboxed_tool() {
    require_root!();
    let d = start();
    let token = issue(&d, AGENT, &[]);
    let peer = bin("cordon-peer");
    // Control, outside the sandbox: cordon-peer does send the token (a revoked one is refused).
    let revoked = issue(&d, AGENT, &[]);
    d.cordon(&["token", "revoke", id_of(&revoked)]).assert_code(0);
    let out = Command::new(&peer)
        .args(["direct"])
        .arg(&d.socket)
        .arg("status")
        .env("CORDON_PEER_TOKEN", &revoked)
        .output()
        .unwrap();
    let control: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((&control["grpc_code"], &control["code"]), (&json!(16), &json!("TOKEN_REFUSED")), "{control}");
    let q = |p: &Path| serde_json::to_string(p.to_str().unwrap()).unwrap();
    d.write_policy(
        "peer.toml",
        &format!(
            r#"version = 1

[tools.peer]
description = "calls cordond with a token from inside the sandbox"
reason = "mcp over http tests"
command = [{peer}, "direct", {socket}, "status"]
exec = [{dir}]
unix_sockets = [{sockdir}]
env = {{ CORDON_PEER_TOKEN = "{token}" }}
"#,
            peer = q(&peer),
            dir = q(peer.parent().unwrap()),
            socket = q(&d.socket),
            sockdir = q(d.socket.parent().unwrap()),
        ),
    );
    d.cordon(&["reload"]).assert_code(0);
    let out = d.cordon(&["run", "peer", "--json"]);
    let result = out.json();
    assert_eq!(result["exit_code"], 0, "{out:?}");
    let line: Value = serde_json::from_str(result["stdout"].as_str().unwrap().lines().next().unwrap()).unwrap();
    assert_eq!((&line["ok"], &line["code"]), (&json!(false), &json!("SANDBOXED_PEER")), "{line}");
    let records = d.audit_records();
    assert!(records.iter().any(|r| r["decision"] == "unauthorized" && r["code"] == "SANDBOXED_PEER"), "{records:#?}");
    assert!(!records.iter().any(|r| r["caller"]["token"] == id_of(&token)), "the token was used: {records:#?}");
}

/// OPEN FINDING (not fixed): the same token, sent from inside the sandbox to the HTTP front-end
/// instead of to cordond's socket. A tool granted `network.connect_tcp` on the front-end's port
/// (landlock grants ports on any host, loopback included) reaches it over TCP; cordond sees
/// the front-end as the peer, never the sandboxed process, so the token is accepted and the
/// tool opens a session as the token's account. Secure behaviour: refused. Run with
/// `--ignored` to see it answered 200.
#[test]
#[ignore = "open finding: a sandboxed tool with connect_tcp to the front-end's port uses a token through it"]
fn a_token_cannot_be_used_from_inside_a_sandboxed_tool_through_the_http_front_end() {
    require_root!();
    let d = start();
    let f = front(&d, &[]);
    let token = issue(&d, AGENT, &[]);
    let body = initialize().to_string();
    d.write_policy(
        "sneak.toml",
        &format!(
            r#"version = 1

[tools.sneak]
description = "posts to the HTTP front-end with a token from inside the sandbox"
reason = "mcp over http tests"
command = ["{CURL}", "-s", "-o", "/dev/null", "-w", "%{{http_code}}", "-X", "POST",
  "-H", "Authorization: Bearer {token}", "-H", "Content-Type: application/json",
  "-H", "Accept: application/json, text/event-stream", "--data-binary", '{body}',
  "http://127.0.0.1:{port}/mcp"]
network = {{ connect_tcp = [{port}] }}
"#,
            port = f.port,
        ),
    );
    d.cordon(&["reload"]).assert_code(0);
    let out = d.cordon(&["run", "sneak", "--json"]);
    let result = out.json();
    let status = result["stdout"].as_str().unwrap_or_default().trim().to_string();
    assert_ne!(status, "200", "the sandboxed tool opened a session with the token: {out:?}");
}

/// The token file beside the audit log holds each secret's SHA-256, never the secret, and is
/// root's alone; `token list` shows no secret either; tokens are not for admins, and an agent
/// cannot issue one.
#[test]
fn the_token_file_never_holds_the_secret_and_tokens_are_not_for_admins() {
    require_root!();
    // A daemon the agent can reach (socket group, traversable directory).
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), policy()).unwrap();
    let d = Daemon::start_in(dir, policies, &["--socket-group", agent::SOCKET_GROUP]);
    let token = issue(&d, AGENT, &["--group", agent::SOCKET_GROUP]);
    let secret = &token[token.len() - 64..];
    let path = d.audit.parent().unwrap().join("tokens.json");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains(secret), "the secret is in {}: {text}", path.display());
    let file: Value = serde_json::from_str(&text).unwrap();
    let entry = &file["tokens"][0];
    assert_eq!((&entry["id"], &entry["account"]), (&json!(id_of(&token)), &json!(AGENT)));
    assert_eq!(entry["groups"], json!([agent::SOCKET_GROUP]));
    use sha2_free::sha256_hex;
    assert_eq!(entry["sha256"], sha256_hex(secret));
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    let list = d.cordon(&["token", "list", "--json"]);
    list.assert_code(0);
    assert!(!list.stdout.contains(secret), "{list:?}");
    assert_eq!(list.json()["tokens"][0]["id"], id_of(&token));
    // Admin accounts get no token.
    let root = d.cordon(&["token", "issue", "root", "--label", "x"]);
    assert_eq!(root.code, Some(65), "{root:?}");
    assert!(root.stderr.contains("is an admin") && root.stderr.contains("non-admin account"), "{root:?}");
    // An agent caller cannot issue, list or revoke.
    for (args, what) in [
        (vec!["token", "issue", OTHER, "--label", "x"], "issuing tokens is for admins"),
        (vec!["token", "list"], "listing tokens is for admins"),
        (vec!["token", "revoke", id_of(&token)], "revoking tokens is for admins"),
    ] {
        let out = agent::cordon(&d.socket, &args);
        assert_eq!(out.code, Some(77), "{args:?}: {out:?}");
        assert!(out.stderr.contains(what), "{args:?}: {out:?}");
    }
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "an agent changed the token file");
    let audit = d.audit_records();
    assert!(audit.iter().any(|r| r["decision"] == "token_issued" && r["token"] == id_of(&token)), "{audit:#?}");
    assert!(!audit.iter().any(|r| r.to_string().contains(secret)), "the secret is in the audit log");
}

/// sha256 in hex with the system's sha256sum (the test crate has no hash crate).
mod sha2_free {
    pub(super) fn sha256_hex(text: &str) -> String {
        use std::io::Write as _;
        let mut c = std::process::Command::new("sha256sum")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        let out = c.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap().to_string()
    }
}

/// Guessing tokens cannot fill the audit log through the front-end: after 30 refusals within a
/// minute it answers 429 without asking cordond, so there are exactly 30 refusal records.
#[test]
fn guessed_tokens_are_refused_and_then_no_longer_checked() {
    require_root!();
    let d = start();
    let f = front(&d, &[]);
    let statuses: Vec<u16> = (0..40)
        .map(|i| {
            let guess = format!("cordon_{i:016x}_{}", "a".repeat(64));
            post(f.port, Some(&guess), &[], &initialize()).status
        })
        .collect();
    assert_eq!(statuses[..30], [401; 30], "{statuses:?}");
    assert_eq!(statuses[30..], [429; 10], "{statuses:?}");
    let refused = d.audit_records().iter().filter(|r| r["code"] == "TOKEN_REFUSED").count();
    assert_eq!(refused, 30);
    let a = post(f.port, Some(&format!("cordon_{}_{}", "f".repeat(16), "a".repeat(64))), &[], &initialize());
    assert!(a.body.contains("tokens from there that cordond has not accepted before are not checked"), "{a:#?}");
    assert!(a.body.contains("from uid 0"), "{a:#?}");
    assert!(a.header("retry-after").is_some_and(|v| v.parse::<u64>().is_ok_and(|n| n >= 1)), "{a:#?}");
}

/// DNS rebinding: a web page whose name now resolves to 127.0.0.1 is same-origin with the
/// front-end and may send any header, `Authorization` included. Its guesses, under its own
/// `Host`, are refused (403) before cordond is asked: no `TOKEN_REFUSED` record, and the
/// refusal window stays open for a token cordond has never seen (a fresh agent).
#[test]
fn a_rebinding_page_guessing_tokens_is_refused_before_cordond_hears_of_them() {
    require_root!();
    let d = start();
    let f = front(&d, &[]);
    for i in 0..35 {
        let guess = format!("cordon_{i:016x}_{}", "d".repeat(64));
        let host = [format!("Host: rebind.example:{}", f.port), format!("Origin: http://rebind.example:{}", f.port)];
        let a = post(f.port, Some(&guess), &host, &initialize());
        assert_eq!(a.status, 403, "guess {i}: {a:#?}");
        assert!(a.body.contains("Host header is not allowed"), "{a:#?}");
    }
    let records = d.audit_records();
    assert!(!records.iter().any(|r| r["code"] == "TOKEN_REFUSED"), "{records:#?}");
    let fresh = issue(&d, AGENT, &[]);
    assert_eq!(Session::open(f.port, &fresh).daemon_tools(), ["id-a"]);
}

/// Whoever can reach the port (any local user, any process on the host) sends 30 guesses a
/// minute: that must not lock out the agents at work. A token cordond accepted before is still
/// checked while guesses get 429, and still asked about each time: revoked, it is refused once
/// (with cordond's reason) and then answered 429 like any guess.
#[test]
fn guessing_tokens_does_not_lock_out_an_agent_whose_token_cordond_accepted() {
    require_root!();
    let d = start();
    let f = front(&d, &[]);
    let token = issue(&d, AGENT, &[]);
    let s = Session::open(f.port, &token);
    let statuses: Vec<u16> = (0..31)
        .map(|i| {
            let guess = format!("cordon_{i:016x}_{}", "b".repeat(64));
            post(f.port, Some(&guess), &[], &initialize()).status
        })
        .collect();
    assert_eq!(statuses[..30], [401; 30], "{statuses:?}");
    assert_eq!(statuses[30], 429, "{statuses:?}");
    // The agent's session works on, and the token opens a new one.
    assert_eq!(s.daemon_tools(), ["id-a"]);
    assert_eq!(Session::open(f.port, &token).daemon_tools(), ["id-a"]);
    // The same id with another secret is a guess, not the known token.
    let forged = format!("cordon_{}_{}", id_of(&token), "c".repeat(64));
    assert_eq!(post(f.port, Some(&forged), &[], &initialize()).status, 429);
    d.cordon(&["token", "revoke", id_of(&token)]).assert_code(0);
    let a = s.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}));
    assert_unauthorized(&a, Some("invalid_token"), &format!("bearer token {} was revoked", id_of(&token)));
    let again = s.send(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}));
    assert_eq!(again.status, 429, "{again:#?}");
    let refused = d.audit_records().iter().filter(|r| r["code"] == "TOKEN_REFUSED").count();
    assert_eq!(refused, 31);
}

/// A token holds at most `--max-sessions-per-token` sessions: one more is 429 (and is not kept);
/// ending one (DELETE) makes room; another token is not affected.
#[test]
fn a_token_holds_at_most_its_share_of_sessions() {
    require_root!();
    let d = start();
    let f = front(&d, &["--max-sessions-per-token", "2"]);
    let (ta, tb) = (issue(&d, AGENT, &[]), issue(&d, OTHER, &[]));
    let first = Session::open(f.port, &ta);
    let _second = Session::open(f.port, &ta);
    let third = post(f.port, Some(&ta), &[], &initialize());
    assert_eq!(third.status, 429, "{third:#?}");
    assert!(third.body.contains("this token holds 2 sessions"), "{third:#?}");
    let _other = Session::open(f.port, &tb);
    let out = Command::new(CURL)
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "DELETE"])
        .arg("-H")
        .arg(format!("Authorization: Bearer {ta}"))
        .arg("-H")
        .arg(format!("Mcp-Session-Id: {}", first.id))
        .arg(format!("http://127.0.0.1:{}/mcp", f.port))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with('2'), "DELETE: {out:?}");
    let again = Session::open(f.port, &ta);
    assert_eq!(again.daemon_tools(), ["id-a"]);
}

/// `--stateless`: no sessions, every request stands alone and is answered as plain JSON, still
/// as the token's account (each request builds its bridge with that request's token).
#[test]
fn stateless_mode_answers_json_and_runs_as_the_token_account() {
    require_root!();
    let d = start();
    let f = front(&d, &["--stateless"]);
    let (ta, tb) = (issue(&d, AGENT, &[]), issue(&d, OTHER, &[]));
    let init = post(f.port, Some(&ta), &[], &initialize());
    assert_eq!(init.status, 200, "{init:#?}");
    assert!(init.header("mcp-session-id").is_none(), "a session in stateless mode: {init:#?}");
    assert_eq!(init.header("content-type"), Some("application/json"), "{init:#?}");
    let version = ["MCP-Protocol-Version: 2025-06-18".to_string()];
    for (token, tool, account) in [(&ta, "id-a", AGENT), (&tb, "id-b", OTHER)] {
        let call =
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": tool, "arguments": {}}});
        let r = post(f.port, Some(token), &version, &call).reply(4);
        let text = r["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{r}"));
        assert_eq!(text.lines().next(), Some(agent::id("-u", account).to_string().as_str()), "{r}");
    }
    let wrong = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "id-b", "arguments": {}}});
    let r = post(f.port, Some(&ta), &version, &wrong).reply(5);
    assert!(r["error"]["message"].as_str().unwrap_or_default().contains("UNKNOWN_TOOL"), "{r}");
}

/// A token file that does not load at reload (garbled, writable by others, a directory in its
/// place) rejects the whole reload: `cordon reload` exits 65 naming the file and why, the
/// record is `reload_rejected` with `what: ["tokens"]`, the generation does not move, and the
/// tokens in force keep working over HTTP (before, the reload said "reloaded" and every agent
/// got 401 from then on). Fixed, the next reload loads.
#[test]
fn a_token_file_that_does_not_load_rejects_the_whole_reload_and_the_tokens_in_force_stay() {
    require_root!();
    use std::os::unix::fs::PermissionsExt as _;
    let d = start();
    let token = issue(&d, AGENT, &[]);
    let path = d.audit.parent().unwrap().join("tokens.json");
    let good = std::fs::read(&path).unwrap();
    let generation = |d: &Daemon| d.cordon(&["status", "--json"]).json()["generation"].clone();
    let before = generation(&d);
    type Breakage<'a> = (&'a str, Box<dyn Fn() + 'a>);
    let breakages: [Breakage<'_>; 3] = [
        ("garbled", Box::new(|| std::fs::write(&path, b"{\"version\": 1, \"tokens\": [").unwrap())),
        (
            "writable by others",
            Box::new(|| {
                std::fs::write(&path, &good).unwrap();
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
            }),
        ),
        (
            "a directory",
            Box::new(|| {
                std::fs::remove_file(&path).unwrap();
                std::fs::create_dir(&path).unwrap();
            }),
        ),
    ];
    for (i, (what, breakage)) in breakages.iter().enumerate() {
        breakage();
        let reload = d.cordon(&["reload"]);
        assert_eq!(reload.code, Some(65), "{what}: {reload:?}");
        assert!(reload.stderr.contains("tokens.json") && reload.stderr.contains("token file"), "{what}: {reload:?}");
        assert!(reload.stdout.contains("reload rejected"), "{what}: {reload:?}");
        // The record is queued for the audit writer as the answer goes out: wait for it.
        let mut rejected: Vec<Value> = Vec::new();
        eventually(Duration::from_secs(10), || {
            rejected = d.audit_records().into_iter().filter(|r| r["decision"] == "reload_rejected").collect();
            rejected.len() > i
        });
        assert_eq!(rejected.len(), i + 1, "{what}: {rejected:#?}");
        assert_eq!(rejected[i]["what"], json!(["tokens"]), "{what}: {}", rejected[i]);
        assert_eq!(generation(&d), before, "{what}: nothing of the reload took effect");
        // The token in force still opens a session (a fresh front-end: nothing cached).
        let f = front(&d, &[]);
        Session::open(f.port, &token);
    }
    std::fs::remove_dir(&path).unwrap();
    std::fs::write(&path, &good).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    d.cordon(&["reload"]).assert_code(0);
    let f = front(&d, &[]);
    Session::open(f.port, &token);
}

/// Over HTTP, a call the front-end refuses (bad arguments, an unknown tool) is recorded by
/// cordond as reported by the front-end: the caller is the token's account (verified by
/// cordond), the reporter the front-end's own process on the socket, the transport `http`.
#[test]
fn a_call_the_http_front_end_refuses_is_recorded_as_the_tokens_account() {
    require_root!();
    let d = start();
    let token = issue(&d, AGENT, &[]);
    let f = front(&d, &[]);
    let s = Session::open(f.port, &token);
    let bad = s.request(5, "tools/call", json!({ "name": "id-a", "arguments": { "x": 1 } }));
    assert_eq!(bad["result"]["isError"], true, "{bad}");
    let unknown = s.request(6, "tools/call", json!({ "name": "no-such", "arguments": {} }));
    assert!(unknown.get("error").is_some(), "{unknown}");
    let mut got = Vec::new();
    assert!(eventually(Duration::from_secs(20), || {
        got = d.audit_records().into_iter().filter(|r| r["reported_by"] == "front-end").collect();
        got.len() >= 2
    }));
    let agent_uid = agent::id("-u", AGENT);
    for (r, (tool, code)) in got.iter().zip([("id-a", "UNKNOWN_FIELDS"), ("no-such", "UNKNOWN_TOOL")]) {
        assert_eq!(r["tool"], tool, "{r}");
        assert_eq!(r["reported"]["code"], code, "{r}");
        assert_eq!(r["reported"]["transport"], "http", "{r}");
        assert_eq!(r["caller"]["uid"], agent_uid, "the token's account: {r}");
        assert_eq!(r["reporter"]["uid"], 0, "the front-end's process, from SO_PEERCRED: {r}");
        assert_eq!(r["verdict"]["code"], code, "{r}");
    }
}

/// Issue 26, class 3: any local account, with no token, sends 40 well-formed bogus tokens. Its
/// guesses are budgeted to its own account: 30 are asked about (401), then its own requests get
/// 429. Meanwhile a token cordond has never accepted before (a fresh agent after a restart of the
/// front-end) from another account is verified and served, and so is every further one: the
/// guesser shut out nobody but itself.
#[test]
fn a_local_account_guessing_tokens_shuts_out_only_itself() {
    require_root!();
    let d = start();
    let f = front(&d, &[]);
    let statuses: Vec<u16> = (0..40)
        .map(|i| {
            let guess = format!("cordon_{i:016x}_{}", "e".repeat(64));
            post_as(Some(AGENT), f.port, Some(&guess), &[], &initialize()).status
        })
        .collect();
    assert_eq!(statuses[..30], [401; 30], "{statuses:?}");
    assert_eq!(statuses[30..], [429; 10], "{statuses:?}");
    let agent_uid = agent::id("-u", AGENT);
    let over = post_as(
        Some(AGENT),
        f.port,
        Some(&format!("cordon_{}_{}", "9".repeat(16), "e".repeat(64))),
        &[],
        &initialize(),
    );
    assert_eq!(over.status, 429, "{over:#?}");
    assert!(over.body.contains(&format!("from uid {agent_uid}")), "{over:#?}");
    // Fresh tokens, never seen by this front-end, from root's account: each verified and served.
    for _ in 0..3 {
        let fresh = issue(&d, AGENT, &[]);
        assert_eq!(Session::open(f.port, &fresh).daemon_tools(), ["id-a"]);
    }
    // cordond heard exactly the 30 guesses within the guesser's budget.
    let refused = d.audit_records().iter().filter(|r| r["code"] == "TOKEN_REFUSED").count();
    assert_eq!(refused, 30);
}

/// Issue 26, class 3: another local account holds 200 silent connections to the front-end
/// (more than its share of 128 and its 64 places in the queue): those beyond are answered (503,
/// with the reason) at once, and an agent on another account is served all the while.
#[test]
fn silent_connections_of_one_account_do_not_starve_another() {
    require_root!();
    let d = start();
    let f = front(&d, &[]);
    let token = issue(&d, AGENT, &[]);
    // 128 served, 64 waiting: the server answers the 8 beyond at once.
    let held = cordon_tests::silent::hold(Some(AGENT), f.port, 200, &["127.0.0.1".to_string()], 8);
    assert_eq!(held.opened, 200);
    assert!(held.refused >= 8, "{held:?}");
    for _ in 0..3 {
        assert_eq!(Session::open(f.port, &token).daemon_tools(), ["id-a"]);
    }
    drop(held);
}
