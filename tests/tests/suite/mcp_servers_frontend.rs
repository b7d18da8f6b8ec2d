//! The front-end's side of MCP servers (issue 31), mock-free: the real cordond runs a tiny stdio
//! MCP server (tests/fixtures/mcp-frontend/tiny_server.py, standard-library Python) in its
//! sandbox, and the real `cordon mcp` is driven line by line as an agent host would: the server's
//! tools listed once approved (with `tools/list_changed` when an admin approves), a call that
//! breaks a rule refused by the front-end with the daemon's code and reported (the audit shows the
//! reported refusal and no call of the server), results passed on (every content kind, `isError`,
//! `structuredContent`), progress passed on exactly when the agent asked for it. And the admin's
//! CLI: `cordon server list|show|approve|stop` against the same daemon.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cordon_tests::{Daemon, eventually};
use serde_json::{Value, json};

const PYTHON: &str = "/usr/bin/python3";

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp-frontend")
}

/// A policy with the tiny server: every tool listed, `echo`'s text at most 8 characters.
fn policy() -> String {
    let dir = fixture_dir();
    format!(
        r#"version = 1

[servers.tiny]
description = "a tiny stdio MCP server for tests"
command = ["{PYTHON}", "{script}"]
read = ["{dir}"]
tools = ["echo", "steps", "kinds", "broken", "measure"]
timeout = "20s"

[servers.tiny.rules.echo]
text = {{ max_length = 8 }}
"#,
        script = dir.join("tiny_server.py").display(),
        dir = dir.display(),
    )
}

/// The daemon with the tiny server, or a named skip when this host has no python3.
fn daemon() -> Option<Daemon> {
    if !Path::new(PYTHON).exists() {
        cordon_tests::skip!(cordon_tests::Skip::MissingTool("python3"), "the tiny MCP server needs {PYTHON}");
        return None;
    }
    Some(Daemon::start(&[("servers.toml", &policy())]))
}

/// `cordon mcp` on stdio, every line it writes kept (answers and notifications alike).
struct Agent {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<Value>,
    /// Messages read while waiting for something else.
    seen: Vec<Value>,
    next: u64,
}

impl Agent {
    fn start(socket: &Path) -> Agent {
        let mut child = Command::new(cordon_tests::bin("cordon"))
            .arg("--socket")
            .arg(socket)
            .arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let v: Value = serde_json::from_str(&line).expect("stdout is JSON-RPC");
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        let mut a = Agent { child, stdin, lines, seen: Vec::new(), next: 0 };
        let init = json!({ "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } });
        a.request("initialize", init);
        a.send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        a
    }

    fn send(&mut self, message: Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends a request; its answer (`result` or `error`), and the notifications that came first.
    fn exchange(&mut self, method: &str, params: Value) -> (Value, Vec<Value>) {
        self.next += 1;
        let id = self.next;
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut notes = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = self.lines.recv_timeout(left).expect("an answer in time");
            if m.get("method").is_none() && m["id"] == json!(id) {
                self.seen.extend(notes.iter().cloned());
                return (m, notes);
            }
            notes.push(m);
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let (answer, _) = self.exchange(method, params);
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        answer["result"].clone()
    }

    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({ "name": tool, "arguments": arguments }))
    }

    /// The listed tools by name.
    fn tools(&mut self) -> serde_json::Map<String, Value> {
        let list = self.request("tools/list", json!({}));
        list["tools"].as_array().unwrap().iter().map(|t| (t["name"].as_str().unwrap().to_string(), t.clone())).collect()
    }

    /// Whether a notification with `method` arrives (or arrived) within `limit`.
    fn notified(&mut self, method: &str, limit: Duration) -> bool {
        if let Some(i) = self.seen.iter().position(|m| m["method"] == method) {
            self.seen.remove(i);
            return true;
        }
        let deadline = Instant::now() + limit;
        while let Ok(m) = self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            if m["method"] == method {
                return true;
            }
            self.seen.push(m);
        }
        false
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn text(result: &Value) -> String {
    result["content"].as_array().unwrap().iter().filter_map(|c| c["text"].as_str()).collect()
}

/// Records about the tiny server's tools.
fn records_of(d: &Daemon, tool: &str) -> Vec<Value> {
    d.audit_records().into_iter().filter(|r| r["tool"] == tool).collect()
}

/// Starts the server for review and approves its recorded list, as an admin does.
fn approve(d: &Daemon) -> String {
    let shown = d.cordon(&["server", "show", "tiny", "--start", "--json"]);
    shown.assert_code(0);
    let digest = shown.json()["server"]["recorded_digest"].as_str().unwrap().to_string();
    assert!(digest.starts_with("sha256:"), "{shown:?}");
    d.cordon(&["server", "approve", "tiny", "--digest", &digest, "--yes"]).assert_code(0);
    digest
}

#[test]
fn server_tools_are_listed_once_approved_and_called_through_the_front_end() {
    let Some(d) = daemon() else { return }; // not a skip: daemon() reported it
    let mut agent = Agent::start(&d.socket);
    let before = agent.tools();
    assert!(!before.keys().any(|n| n.starts_with("tiny__")), "nothing before approval: {:?}", before.keys());

    approve(&d);
    assert!(agent.notified("notifications/tools/list_changed", Duration::from_secs(20)), "list_changed after approve");
    let tools = agent.tools();
    let names: Vec<&str> = tools.keys().filter(|n| n.starts_with("tiny__")).map(String::as_str).collect();
    assert_eq!(names, ["tiny__broken", "tiny__echo", "tiny__kinds", "tiny__measure", "tiny__steps"]);
    let echo = &tools["tiny__echo"];
    assert_eq!(echo["title"], "Echo", "{echo}");
    assert!(echo["description"].as_str().unwrap().starts_with("Answers its text between brackets"), "{echo}");
    assert_eq!(echo["inputSchema"]["properties"]["text"]["type"], "string", "{echo}");
    assert_eq!(tools["tiny__measure"]["outputSchema"]["properties"]["length"]["type"], "integer");

    // A call within the rules runs on the server.
    let r = agent.call("tiny__echo", json!({ "text": "hello" }));
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(text(&r), "[hello]");
    assert!(r["_meta"]["cordon/result"]["invocation_id"].as_str().is_some_and(|s| !s.is_empty()), "{r}");

    // One that breaks the policy's rule is refused by the front-end with the daemon's code,
    // reported, and never reaches the server.
    let calls_before = records_of(&d, "tiny__echo").len();
    let r = agent.call("tiny__echo", json!({ "text": "far too long" }));
    assert_eq!(r["isError"], true, "{r}");
    assert!(text(&r).starts_with("INVALID_FIELD_VALUE: "), "{r}");
    assert_eq!(r["structuredContent"]["error"]["field"], "text", "{r}");
    let mut reported = Vec::new();
    assert!(
        eventually(Duration::from_secs(20), || {
            reported = records_of(&d, "tiny__echo").into_iter().filter(|r| r["reported_by"] == "front-end").collect();
            !reported.is_empty()
        }),
        "the refusal is reported: {:#?}",
        records_of(&d, "tiny__echo")
    );
    assert_eq!(reported[0]["decision"], "invalid", "{:#?}", reported[0]);
    assert_eq!(
        records_of(&d, "tiny__echo").len(),
        calls_before + 1,
        "nothing but the report is recorded: the call never went out"
    );
    // A mistyped argument: the server's own schema, checked front-end side too.
    let r = agent.call("tiny__echo", json!({ "text": 5 }));
    assert!(text(&r).starts_with("INVALID_FIELD_TYPE: "), "{r}");

    // Results as the server sent them.
    let r = agent.call("tiny__kinds", json!({}));
    assert_eq!(r["isError"], false, "{r}");
    let kinds: Vec<&str> = r["content"].as_array().unwrap().iter().map(|c| c["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["text", "image", "audio", "resource", "resource_link"], "{r}");
    assert_eq!(r["content"][1]["data"], "iVBORw0KGgo=");
    let r = agent.call("tiny__broken", json!({}));
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(text(&r), "the tiny server failed on purpose", "the server's own words: {r}");
    let r = agent.call("tiny__measure", json!({ "text": "abc" }));
    assert_eq!(r["structuredContent"], json!({ "length": 3 }), "{r}");
}

#[test]
fn progress_is_passed_on_exactly_when_the_agent_asked_for_it() {
    let Some(d) = daemon() else { return }; // not a skip: daemon() reported it
    approve(&d);
    let mut agent = Agent::start(&d.socket);
    let params = json!({ "name": "tiny__steps", "arguments": { "count": 3 }, "_meta": { "progressToken": "p-7" } });
    let (answer, notes) = agent.exchange("tools/call", params);
    assert_eq!(text(&answer["result"]), "done after 3 steps", "{answer}");
    let progress: Vec<&Value> = notes.iter().filter(|n| n["method"] == "notifications/progress").collect();
    // cordond passes on at most one notification per 50 ms of a call (the excess is dropped), so
    // under load fewer than the server's three may arrive; at least one does, each as sent.
    assert!(!progress.is_empty() && progress.len() <= 3, "the server's progress, passed on: {notes:#?}");
    let mut last = 0.0;
    for p in &progress {
        assert_eq!(p["params"]["progressToken"], "p-7", "the agent's own token: {p}");
        assert_eq!(p["params"]["total"], json!(3.0), "{p}");
        let step = p["params"]["progress"].as_f64().unwrap();
        assert!(step > last && step <= 3.0 && step.fract() == 0.0, "in order, as the server counted: {notes:#?}");
        assert_eq!(p["params"]["message"], format!("step {step}"), "{p}");
        last = step;
    }
    // Without a token: no progress at all.
    let (answer, notes) = agent.exchange("tools/call", json!({ "name": "tiny__steps", "arguments": { "count": 2 } }));
    assert_eq!(text(&answer["result"]), "done after 2 steps", "{answer}");
    assert!(!notes.iter().any(|n| n["method"] == "notifications/progress"), "{notes:#?}");
}

#[test]
fn the_admin_cli_lists_shows_approves_and_stops_a_server() {
    let Some(d) = daemon() else { return }; // not a skip: daemon() reported it
    let out = d.cordon(&["server", "list"]);
    out.assert_code(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "NAME  STATE              INSTANCES  TOOLS                  APPROVED", "{out:?}");
    assert_eq!(lines[1], "tiny  awaiting approval  0          0 exposed, 0 withheld  -", "{out:?}");
    assert!(lines[2].starts_with("tiny: no tool list recorded yet"), "{out:?}");

    // Approving before anything was recorded says how to record it.
    let out = d.cordon(&["server", "approve", "tiny", "--yes"]);
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("cordon server show tiny --start"), "{out:?}");

    // show --start records the list for review: every tool awaiting approval, with its digest.
    let out = d.cordon(&["server", "show", "tiny", "--start"]);
    out.assert_code(0);
    let shown = out.stdout.clone();
    assert!(shown.starts_with("server       tiny ("), "{shown}");
    assert!(shown.contains("\nstate        running\n"), "{shown}");
    assert!(shown.contains("\napproved     none\n"), "{shown}");
    assert!(shown.contains("\ninstances    1\n"), "{shown}");
    assert!(shown.contains("\ntools        0 exposed, 5 withheld\n"), "{shown}");
    assert!(shown.contains("\n  tiny__echo  awaiting approval  sha256:"), "{shown}");
    assert!(shown.contains("\n      Answers its text between brackets\n"), "{shown}");
    let json = d.cordon(&["server", "show", "tiny", "--json"]).json();
    let digest = json["server"]["recorded_digest"].as_str().unwrap().to_string();
    assert!(shown.contains(&format!("\nrecorded     {digest} (not approved)\n")), "{shown}");
    assert!(shown.contains(&format!("\nnext         cordon server approve tiny --digest {digest}\n")), "{shown}");

    // Without a terminal and without --yes, nothing is approved.
    let out = d.cordon(&["server", "approve", "tiny"]);
    out.assert_code(2);
    assert!(out.stderr.contains("pass --yes"), "{out:?}");
    // A digest other than the recorded one is refused before anything is sent.
    let other = format!("sha256:{}", "0".repeat(64));
    let out = d.cordon(&["server", "approve", "tiny", "--digest", &other, "--yes"]);
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("review it again with `cordon server show tiny`"), "{out:?}");

    let out = d.cordon(&["server", "approve", "tiny", "--digest", &digest, "--yes"]);
    out.assert_code(0);
    assert_eq!(
        out.stdout.lines().last(),
        Some(format!("approved tiny: 5 tool(s), digest {digest}").as_str()),
        "{out:?}"
    );

    let out = d.cordon(&["server", "list"]);
    out.assert_code(0);
    let short: String = digest.chars().take("sha256:".len() + 12).collect();
    assert_eq!(
        out.stdout.lines().nth(1),
        Some(format!("tiny  running  1          5 exposed, 0 withheld  {short}").as_str()),
        "{out:?}"
    );

    let out = d.cordon(&["server", "stop", "tiny"]);
    out.assert_code(0);
    assert_eq!(out.stdout.trim_end(), "stopped 1 instance(s) of tiny; it starts again on the next call");
    let out = d.cordon(&["server", "stop", "tiny"]);
    assert_eq!(out.stdout.trim_end(), "tiny: no instance was running", "{out:?}");

    // status and doctor name it; tools --all lists nothing withheld any more.
    let status = d.cordon(&["status"]);
    assert!(
        status.stdout.contains("\nservers      tiny: stopped, 0 instance(s), 5 tool(s) exposed, 0 withheld"),
        "{status:?}"
    );
    let all = d.cordon(&["tools", "--all", "--json"]).json();
    assert_eq!(all["withheld_server_tools"], json!([]), "{all:#}");
}
