//! `cordon mcp` at the JSON-RPC line level, driven by a raw client that writes whatever it likes:
//! every request that can be attributed to an id gets exactly one answer with that id and the
//! code that names its fault, what cannot gets a null id, notifications get nothing, and the
//! session survives. Also the front-end's connection to cordond: one per session, shared by a
//! burst of pipelined calls, and never "not running" while cordond runs.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cordon_tests::agent::{self, AGENT, SOCKET_GROUP};
use cordon_tests::{Daemon, Output, bin, eventually, is_root};
use proptest::prelude::*;
use serde_json::{Value, json};

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

/// A `cordon mcp` process and a thread that parses every line it writes to stdout.
struct Session {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<Result<Value, String>>,
}

impl Session {
    /// Starts `cordon mcp` on `socket` and completes the `initialize` handshake in `version`.
    fn start(socket: &Path, version: &str) -> Session {
        Session::start_with(Command::new(bin("cordon")), socket, version)
    }

    /// As [`Session::start`], as the unprivileged test user.
    fn start_as_agent(socket: &Path, version: &str) -> Session {
        let mut command = Command::new("setpriv");
        command.args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--"]).arg(bin("cordon"));
        Session::start_with(command, socket, version)
    }

    fn start_with(mut command: Command, socket: &Path, version: &str) -> Session {
        let mut child = command
            .arg("--socket")
            .arg(socket)
            .arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn cordon mcp");
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            let mut out = BufReader::new(stdout);
            let mut line = Vec::new();
            loop {
                line.clear();
                match out.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        let parsed = serde_json::from_slice::<Value>(&line).map_err(|e| {
                            format!("stdout carried a non-JSON line ({e}): {}", String::from_utf8_lossy(&line))
                        });
                        if tx.send(parsed).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let mut s = Session { child, stdin, lines };
        s.send_json(&json!({ "jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": { "name": "raw", "version": "1" } } }));
        let init = s.until(&json!("init"), Duration::from_secs(10));
        let answer = init.last().unwrap();
        assert_eq!(answer["result"]["protocolVersion"], version, "{answer}");
        s.send_json(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        s
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stdin.write_all(bytes).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    fn send_json(&mut self, v: &Value) {
        self.send(&serde_json::to_vec(v).unwrap());
    }

    /// Every message up to and including the answer with `id`.
    fn until(&mut self, id: &Value, limit: Duration) -> Vec<Value> {
        let deadline = Instant::now() + limit;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(Ok(m)) => {
                    let done = m.get("method").is_none() && &m["id"] == id;
                    seen.push(m);
                    if done {
                        return seen;
                    }
                }
                Ok(Err(bad)) => panic!("{bad}"),
                Err(e) => panic!("no answer with id {id} within {limit:?} ({e}); saw {seen:#?}"),
            }
        }
    }

    /// Sends a ping and returns every answer (not server notifications or requests) before its own.
    fn answers_before_ping(&mut self, id: &str) -> Vec<Value> {
        self.send_json(&json!({ "jsonrpc": "2.0", "id": id, "method": "ping" }));
        let mut seen = self.until(&json!(id), Duration::from_secs(30));
        let pong = seen.pop().unwrap();
        assert_eq!(pong["result"], json!({}), "the session did not survive: {pong}");
        seen.retain(|m| m.get("method").is_none());
        seen
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn code(m: &Value) -> i64 {
    m["error"]["code"].as_i64().unwrap_or_else(|| panic!("not an error answer: {m}"))
}

#[test]
fn every_malformed_request_is_answered_with_its_id_and_the_right_code() {
    let d = Daemon::start(&[("tools.toml", TOOLS)]);
    let mut s = Session::start(&d.socket, "2025-11-25");
    // (line, the id it must be answered with, the code); Value::Null: cannot be attributed.
    let long = format!(
        r#"{{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{}"}}}}}}"#,
        "a".repeat(17 * 1024 * 1024)
    );
    let cases: Vec<(Vec<u8>, Value, i64)> = vec![
        (b"garbage".to_vec(), Value::Null, -32700),
        (b"\xff\xfe{".to_vec(), Value::Null, -32700),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"ping\",\"params\":{\"x\":\"\xff\"}}".to_vec(),
            json!(10),
            -32700,
        ),
        (br#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":[1,2]}"#.to_vec(), json!(11), -32602),
        (br#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":5}}"#.to_vec(), json!(12), -32602),
        (br#"{"jsonrpc":"2.0","id":"13","method":"no/such/method"}"#.to_vec(), json!("13"), -32601),
        (br#"{"jsonrpc":"2.0","id":14}"#.to_vec(), json!(14), -32600),
        (br#"{"jsonrpc":"2.0","id":15,"method":"tools/list","params":7}"#.to_vec(), json!(15), -32602),
        (
            br#"{"jsonrpc":"2.0","id":16,"method":"logging/setLevel","params":{"level":"loud"}}"#.to_vec(),
            json!(16),
            -32602,
        ),
        (br#"{"jsonrpc":"1.0","id":18,"method":"ping"}"#.to_vec(), json!(18), -32600),
        (br#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#.to_vec(), Value::Null, -32600),
        (br#"[{"jsonrpc":"2.0","id":19,"method":"ping"}]"#.to_vec(), Value::Null, -32600),
        (long.into_bytes(), json!(17), -32600),
        (
            br#"{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"echo","arguments":{"text":"fine"}}}"#
                .to_vec(),
            json!(20),
            0,
        ),
    ];
    let notifications: [&[u8]; 4] = [
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":5}"#,
        br#"{"jsonrpc":"2.0","method":"notifications/no-such"}"#,
        br#"{"jsonrpc":"2.0","method":"notifications/initialized","params":[1]}"#,
        br#"{"jsonrpc":"2.0","method":7}"#,
    ];
    for (line, _, _) in &cases {
        s.send(line);
    }
    for n in notifications {
        s.send(n);
    }
    let mut answers = s.answers_before_ping("last");
    // The valid call may be answered after the ping.
    if !answers.iter().any(|a| a["id"] == 20) {
        answers.extend(s.until(&json!(20), Duration::from_secs(10)).into_iter().filter(|m| m.get("method").is_none()));
    }
    let nulls: Vec<&Value> = answers.iter().filter(|a| a["id"].is_null()).collect();
    let bad_name = answers.iter().find(|a| a["id"] == 12).unwrap();
    assert!(bad_name["error"]["message"].as_str().unwrap().contains("expected a string"), "{bad_name}");
    let expected_nulls: Vec<i64> = cases.iter().filter(|(_, id, _)| id.is_null()).map(|(_, _, c)| *c).collect();
    assert_eq!(nulls.iter().map(|a| code(a)).collect::<Vec<_>>(), expected_nulls, "{nulls:#?}");
    for (line, id, want) in cases.iter().filter(|(_, id, _)| !id.is_null()) {
        let mine: Vec<&Value> = answers.iter().filter(|a| &a["id"] == id).collect();
        let shown = String::from_utf8_lossy(&line[..line.len().min(120)]).into_owned();
        assert_eq!(mine.len(), 1, "answers for {shown}: {mine:#?}");
        if *want == 0 {
            assert_eq!(mine[0]["result"]["isError"], false, "{}", mine[0]);
        } else {
            assert_eq!(code(mine[0]), *want, "{shown}: {}", mine[0]);
            let message = mine[0]["error"]["message"].as_str().unwrap();
            assert!(message.len() > 10, "a message that says what to do: {message}");
        }
    }
    // One answer per request line, none for the notifications.
    assert_eq!(answers.len(), cases.len(), "{answers:#?}");
}

#[test]
fn batches_are_refused_in_every_protocol_version_that_has_initialize() {
    // MCP had JSON-RPC batches only in 2025-03-26 and removed them in 2025-06-18; rmcp cannot
    // take them. cordon refuses a batch in every version with one -32600 (null id), and none
    // of its requests runs.
    for version in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
        let mut s = Session::start(Path::new("/nonexistent/cordon.sock"), version);
        s.send(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]"#);
        s.send(b"[]");
        let answers = s.answers_before_ping("after");
        assert_eq!(answers.len(), 2, "{version}: {answers:#?}");
        for a in &answers {
            assert_eq!((code(a), &a["id"]), (-32600, &Value::Null), "{version}: {a}");
        }
    }
}

/// The daemon-side ends of connections to `socket` whose client end is one of `pid`'s sockets.
fn connections_of(pid: u32, socket: &Path) -> usize {
    let mine: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|l| l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']').map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let ss = Command::new("ss").args(["-xn", "state", "established"]).output().expect("run ss");
    let socket = socket.to_str().unwrap();
    String::from_utf8_lossy(&ss.stdout)
        .lines()
        .filter_map(|l| {
            // Netid Recv-Q Send-Q Local Port Peer Port
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 7 && f[3] == socket).then(|| f[6].to_string())
        })
        .filter(|peer| mine.contains(peer))
        .count()
}

#[test]
fn a_burst_of_pipelined_calls_on_a_fresh_session_shares_one_connection() {
    const CALLS: usize = 1000;
    let d = Daemon::start(&[("tools.toml", TOOLS)]);
    let mut s = Session::start(&d.socket, "2025-11-25");
    let pid = s.child.id();
    // Everything at once, before the front-end has talked to the daemon about tools.
    let mut burst = Vec::new();
    for i in 0..CALLS {
        burst.extend_from_slice(
            json!({ "jsonrpc": "2.0", "id": i, "method": "tools/call",
                    "params": { "name": "echo", "arguments": { "text": "burst" } } })
            .to_string()
            .as_bytes(),
        );
        burst.push(b'\n');
    }
    let mut stdin = s.stdin.try_clone_for_test();
    let writer = std::thread::spawn(move || {
        stdin.write_all(&burst).unwrap();
        stdin.flush().unwrap();
        stdin
    });
    let mut results: HashMap<u64, Value> = HashMap::new();
    let mut admin_runs = 0;
    let mut most_connections = 0;
    let deadline = Instant::now() + Duration::from_secs(300);
    while results.len() < CALLS {
        assert!(Instant::now() < deadline, "only {} of {CALLS} calls answered", results.len());
        while let Ok(line) = s.lines.try_recv() {
            let m = line.unwrap_or_else(|bad| panic!("{bad}"));
            if m.get("method").is_none()
                && let Some(id) = m["id"].as_u64()
            {
                assert!(results.insert(id, m).is_none(), "two answers for call {id}");
            }
        }
        most_connections = most_connections.max(connections_of(pid, &d.socket));
        // The admin CLI of the same uid keeps working during the burst.
        let out = d.cordon(&["tools", "--json"]);
        assert_eq!(out.code, Some(0), "cordon tools during the burst: {out:#?}");
        admin_runs += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(writer.join().unwrap());
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for m in results.values() {
        let r = &m["result"];
        let key = if r["isError"] == false {
            "ok".to_string()
        } else {
            let text = r["content"][0]["text"].as_str().unwrap_or_default();
            text.split(':').next().unwrap_or_default().to_string()
        };
        *outcomes.entry(key).or_default() += 1;
    }
    eprintln!(
        "{CALLS} pipelined calls: {outcomes:?}; cordon tools ran {admin_runs} times meanwhile; at most \
         {most_connections} connection(s) from the front-end"
    );
    assert!(
        !outcomes.contains_key("DAEMON_NOT_RUNNING") && !outcomes.contains_key("DAEMON_CONNECTION_LOST"),
        "{outcomes:?}"
    );
    // 1000 calls are within the front-end's queue bound, so none may be refused as BUSY either.
    assert_eq!(outcomes.get("ok"), Some(&CALLS), "{outcomes:?}");
    assert!(admin_runs >= 1);
    assert_eq!(most_connections, 1, "the front-end held more than one connection to cordond");
    assert_eq!(connections_of(pid, &d.socket), 1, "the front-end's connection after the burst");
    let pong = s.answers_before_ping("done");
    assert!(pong.is_empty(), "{pong:#?}");
}

/// Holds `n` connections to the daemon as this uid (each sends the HTTP/2 preface and an empty
/// SETTINGS frame, so it is a live client as far as the daemon can tell).
fn hold_connections(socket: &Path, n: usize) -> Vec<UnixStream> {
    (0..n)
        .map(|_| {
            let mut c = UnixStream::connect(socket).unwrap();
            c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00").unwrap();
            c
        })
        .collect()
}

fn accepted(socket: &Path) -> usize {
    let ss = Command::new("ss").args(["-xn", "state", "established"]).output().expect("run ss");
    let socket = socket.to_str().unwrap();
    String::from_utf8_lossy(&ss.stdout).lines().filter(|l| l.split_whitespace().nth(3) == Some(socket)).count()
}

#[test]
fn at_the_connection_cap_no_client_is_told_the_daemon_is_down() {
    let d = Daemon::start(&[("tools.toml", TOOLS)]);
    // A session made before the cap keeps working through its one connection.
    let mut before = Session::start(&d.socket, "2025-11-25");
    before.send_json(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                              "params": { "name": "echo", "arguments": { "text": "early" } } }));
    let r = before.until(&json!(1), Duration::from_secs(10)).pop().unwrap();
    assert_eq!(r["result"]["isError"], false, "{r}");

    // This uid holds the rest of its 256 connections.
    let held = hold_connections(&d.socket, 255);
    assert!(
        eventually(Duration::from_secs(10), || accepted(&d.socket) >= 256),
        "only {} accepted",
        accepted(&d.socket)
    );

    let out = d.cordon(&["tools", "--json"]);
    let j = out.json();
    assert_eq!(j["error"]["code"], "DAEMON_CONNECTION_LOST", "{out:#?}");
    assert_eq!(out.code, Some(75), "EX_TEMPFAIL: retry later, {out:#?}");
    assert!(!out.stdout.contains("not running") && !out.stderr.contains("not running"), "{out:#?}");
    let out = d.cordon(&["tools"]);
    assert!(out.stderr.contains("closed the connection"), "{out:#?}");
    assert!(out.stderr.contains("limit of open connections"), "says what to do: {out:#?}");

    let mut late = Session::start(&d.socket, "2025-11-25");
    late.send_json(&json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call",
                            "params": { "name": "echo", "arguments": { "text": "capped" } } }));
    let r = late.until(&json!(2), Duration::from_secs(10)).pop().unwrap();
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(text.starts_with("DAEMON_CONNECTION_LOST: "), "{text}");

    before.send_json(&json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/call",
                              "params": { "name": "echo", "arguments": { "text": "still" } } }));
    let r = before.until(&json!(3), Duration::from_secs(10)).pop().unwrap();
    assert_eq!(r["result"]["isError"], false, "the session that had its connection lost nothing: {r}");

    // Below the cap again, the refused session connects on its next call.
    drop(held);
    assert!(eventually(Duration::from_secs(10), || accepted(&d.socket) <= 2));
    late.send_json(&json!({ "jsonrpc": "2.0", "id": 4, "method": "tools/call",
                            "params": { "name": "echo", "arguments": { "text": "later" } } }));
    let r = late.until(&json!(4), Duration::from_secs(10)).pop().unwrap();
    assert_eq!(r["result"]["isError"], false, "{r}");
}

#[test]
fn a_stopped_daemon_is_not_running_on_both_surfaces() {
    let socket = Path::new("/nonexistent/cordon.sock");
    let out = cordon_tests::cordon_at(socket, &["tools", "--json"]);
    assert_eq!(out.json()["error"]["code"], "DAEMON_NOT_RUNNING", "{out:#?}");
    assert_eq!(out.code, Some(69));
    let mut s = Session::start(socket, "2025-11-25");
    s.send_json(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                         "params": { "name": "describe_schema", "arguments": {} } }));
    s.send_json(&json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call",
                         "params": { "name": "echo", "arguments": { "text": "x" } } }));
    let r = s.until(&json!(2), Duration::from_secs(10)).pop().unwrap();
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("DAEMON_NOT_RUNNING: cordond is not running at /nonexistent/cordon.sock"), "{text}");
}

// ---- arbitrary lines through the real binary ----

/// What the client sent on one line.
#[derive(Debug, Clone)]
enum Sent {
    /// A request with this id: exactly one answer with it.
    Request(Value),
    /// A notification: no answer.
    Notification,
    /// Anything else (bytes, a bad id, a batch): at most one null-id answer.
    Other,
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        "[a-z\\-]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(2, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,5}", inner, 0..3).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Methods a client may send, valid and not. `subscriptions/listen` is left out: a valid one is
/// a stream that is answered only when it ends.
const METHODS: &[&str] = &[
    "ping",
    "initialize",
    "tools/list",
    "tools/call",
    "logging/setLevel",
    "prompts/list",
    "resources/list",
    "resources/read",
    "completion/complete",
    "tasks/get",
    "no/such",
];

fn params() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        any_json().prop_map(Some),
        Just(Some(json!({ "name": "describe_schema", "arguments": {} }))),
        Just(Some(json!({ "name": "echo", "arguments": { "text": "p" } }))),
        Just(Some(json!({ "level": "debug" }))),
    ]
}

/// One generated line, before it gets its unique number.
#[derive(Debug, Clone)]
enum Line {
    /// Arbitrary bytes (no newline inside a line).
    Bytes(Vec<u8>),
    /// A request with a unique id, near valid: any method, params of any shape, maybe a bad version.
    Request { method: &'static str, params: Option<Value>, jsonrpc: Value, string_id: bool },
    /// A notification, valid or not.
    Notification { method: &'static str, params: Option<Value> },
    /// A message with an id that cannot be used, or a batch.
    Unattributable(Value),
}

impl Line {
    fn render(&self, n: usize) -> (Vec<u8>, Sent) {
        match self {
            Line::Bytes(b) => (b.clone(), Sent::Other),
            Line::Request { method, params, jsonrpc, string_id } => {
                let id = if *string_id { json!(format!("r{n}")) } else { json!(n) };
                let mut m = json!({ "jsonrpc": jsonrpc, "id": id, "method": method });
                if let Some(p) = params {
                    m["params"] = p.clone();
                }
                (serde_json::to_vec(&m).unwrap(), Sent::Request(id))
            }
            Line::Notification { method, params } => {
                let mut m = json!({ "jsonrpc": "2.0", "method": method });
                if let Some(p) = params {
                    m["params"] = p.clone();
                }
                (serde_json::to_vec(&m).unwrap(), Sent::Notification)
            }
            Line::Unattributable(v) => (serde_json::to_vec(v).unwrap(), Sent::Other),
        }
    }
}

fn line() -> impl Strategy<Value = Line> {
    prop_oneof![
        prop::collection::vec(any::<u8>().prop_filter("no newline", |b| *b != b'\n'), 0..64).prop_map(Line::Bytes),
        (prop::sample::select(METHODS), params(), prop_oneof![3 => Just(json!("2.0")), 1 => any_json()], any::<bool>())
            .prop_map(|(method, params, jsonrpc, string_id)| Line::Request { method, params, jsonrpc, string_id }),
        (
            prop::sample::select(
                &["notifications/initialized", "notifications/cancelled", "notifications/progress", "x/y"][..]
            ),
            params()
        )
            .prop_map(|(method, params)| Line::Notification { method, params }),
        (any_json(), any_json()).prop_map(|(bad_id, element)| {
            if element.is_object() {
                Line::Unattributable(json!([element]))
            } else {
                let bad_id = if bad_id.is_string() || bad_id.as_i64().is_some() { Value::Null } else { bad_id };
                Line::Unattributable(json!({ "jsonrpc": "2.0", "id": bad_id, "method": "ping" }))
            }
        }),
    ]
}

proptest! {
    // Each case starts a `cordon mcp`: a smaller budget than the in-crate line-layer properties
    // (256 cases there), fixed so CI time is bounded.
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_lines_get_one_answer_per_request_id_and_the_session_survives(
        lines in prop::collection::vec(line(), 1..12),
    ) {
        let mut s = Session::start(Path::new("/nonexistent/cordon.sock"), "2025-11-25");
        let mut sent = Vec::new();
        for (n, line) in lines.iter().enumerate() {
            let (bytes, what) = line.render(n);
            s.send(&bytes);
            sent.push((bytes, what));
        }
        let mut answers = s.answers_before_ping("final");
        let ids: Vec<Value> = sent.iter().filter_map(|(_, w)| match w { Sent::Request(id) => Some(id.clone()), _ => None }).collect();
        // Calls may still be running when the ping is answered: wait for each id still missing.
        for id in &ids {
            if !answers.iter().any(|a| &a["id"] == id) {
                answers.extend(s.until(id, Duration::from_secs(10)).into_iter().filter(|m| m.get("method").is_none()));
            }
        }
        let others = sent.iter().filter(|(_, w)| matches!(w, Sent::Other)).count();
        let mut by_id: HashMap<String, usize> = HashMap::new();
        for a in &answers {
            prop_assert!(a["jsonrpc"] == "2.0", "{}", a);
            if a["id"].is_null() {
                prop_assert!(a["error"]["code"].as_i64().is_some_and(|c| c == -32700 || c == -32600), "{}", a);
            } else {
                prop_assert!(ids.contains(&a["id"]), "an answer to nothing that was sent: {}", a);
                *by_id.entry(a["id"].to_string()).or_default() += 1;
            }
        }
        for id in &ids {
            prop_assert_eq!(by_id.get(&id.to_string()), Some(&1), "answers for id {}: {:#?}", id, answers);
        }
        let nulls = answers.iter().filter(|a| a["id"].is_null()).count();
        prop_assert!(nulls <= others, "{} null-id answers for {} unattributable lines: {:#?}", nulls, others, answers);
    }
}

/// `ChildStdin` cannot be cloned; the burst writes through a duplicate of its descriptor.
trait CloneForTest {
    fn try_clone_for_test(&self) -> std::fs::File;
}

impl CloneForTest for ChildStdin {
    fn try_clone_for_test(&self) -> std::fs::File {
        use std::os::fd::AsFd as _;
        std::fs::File::from(self.as_fd().try_clone_to_owned().unwrap())
    }
}

// ---- the same as an unprivileged agent user ----

/// Creates the test user and socket group (idempotent; another test module may create them
/// at the same time, so wait until the user exists).
fn ensure_agent() {
    let run = |args: &[&str]| {
        let _ = Command::new(args[0]).args(&args[1..]).output();
    };
    run(&["groupadd", "-f", SOCKET_GROUP]);
    run(&["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", AGENT]);
    run(&["usermod", "-aG", SOCKET_GROUP, AGENT]);
    let exists = || {
        let groups = Command::new("id").args(["-nG", AGENT]).output().unwrap();
        String::from_utf8_lossy(&groups.stdout).split_whitespace().any(|g| g == SOCKET_GROUP)
    };
    if !eventually(Duration::from_secs(10), exists) {
        run(&["usermod", "-aG", SOCKET_GROUP, AGENT]);
        assert!(exists(), "could not create {AGENT} in {SOCKET_GROUP}");
    }
}

fn as_agent(d: &Daemon, args: &[&str]) -> Output {
    agent::cordon(&d.socket, args)
}

/// A python any user can run (a pyenv shim under /root is not).
const PYTHON: &str = "/usr/bin/python3";

/// Opens 255 connections to `argv[1]`, each with the HTTP/2 preface and an empty SETTINGS frame,
/// says "ready", and holds them until stdin closes.
const HOLD_CONNECTIONS: &str = r#"
import socket, sys
cs = []
for _ in range(255):
    c = socket.socket(socket.AF_UNIX)
    c.connect(sys.argv[1])
    c.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
    cs.append(c)
print("ready", flush=True)
sys.stdin.read()
"#;

#[test]
fn an_agent_at_its_connection_cap_is_told_so_and_other_users_are_not_locked_out() {
    if !is_root() {
        cordon_tests::skip!(cordon_tests::Skip::NotRoot, "needs root to create a test user");
        return;
    }
    if !Path::new(PYTHON).exists() {
        cordon_tests::skip!(
            cordon_tests::Skip::MissingTool(PYTHON),
            "needs {PYTHON} (run as the agent user) to hold its connections"
        );
        return;
    }
    ensure_agent();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(
        policies.join("t.toml"),
        TOOLS.replacen(
            "version = 1\n",
            &format!("version = 1\n\n[defaults]\nallow = {{ users = [\"{AGENT}\"] }}\n"),
            1,
        ),
    )
    .unwrap();
    let d = Daemon::start_in(dir, policies, &["--socket-group", SOCKET_GROUP]);

    // The agent's burst on a fresh session: one connection, every call answered.
    let mut s = Session::start_as_agent(&d.socket, "2025-11-25");
    for i in 0..200 {
        s.send_json(&json!({ "jsonrpc": "2.0", "id": i, "method": "tools/call",
                             "params": { "name": "echo", "arguments": { "text": "agent" } } }));
    }
    let mut answered: HashMap<u64, Value> = HashMap::new();
    while answered.len() < 200 {
        let m = s.lines.recv_timeout(Duration::from_secs(60)).expect("an answer").unwrap();
        if let Some(id) = m["id"].as_u64() {
            assert_eq!(m["result"]["isError"], false, "call {id} as the agent: {m}");
            assert!(answered.insert(id, m).is_none(), "two answers for {id}");
        }
    }
    assert_eq!(connections_of(s.child.id(), &d.socket), 1);

    // The agent's uid holds all of its 256 connections (the session has one).
    let mut holder = Command::new("setpriv")
        .args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--", PYTHON, "-c"])
        .arg(HOLD_CONNECTIONS)
        .arg(&d.socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 holds the connections");
    let mut ready = String::new();
    BufReader::new(holder.stdout.take().unwrap()).read_line(&mut ready).unwrap();
    assert_eq!(ready.trim(), "ready");
    assert!(
        eventually(Duration::from_secs(10), || accepted(&d.socket) >= 256),
        "only {} accepted",
        accepted(&d.socket)
    );

    let out = as_agent(&d, &["tools", "--json"]);
    assert_eq!(out.json()["error"]["code"], "DAEMON_CONNECTION_LOST", "{out:#?}");
    assert_eq!(out.code, Some(75), "{out:#?}");
    // Root (another uid) is not locked out, and the agent's open session goes on.
    d.cordon(&["tools", "--json"]).assert_code(0);
    s.send_json(&json!({ "jsonrpc": "2.0", "id": "after", "method": "tools/call",
                         "params": { "name": "echo", "arguments": { "text": "still" } } }));
    let r = s.until(&json!("after"), Duration::from_secs(10)).pop().unwrap();
    assert_eq!(r["result"]["isError"], false, "{r}");
    drop(holder.stdin.take());
    let _ = holder.wait();
}
