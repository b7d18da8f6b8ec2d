//! Tool search (`cordon tools --search`, the MCP built-in `search_tools`), `tools/list`
//! pagination (`cordon mcp --page-size`) and status figures (`cordon status`, the MCP built-in
//! `cordon_status`), against the real daemon. The agent parts need root (to act as the test
//! user) and skip otherwise.

use std::collections::BTreeSet;
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cordon_tests::agent::{self, SOCKET_GROUP};
use cordon_tests::{Daemon, bin, eventually, require_root};
use serde_json::{Value, json};

const POLICY: &str = r#"
version = 1

[tools.git-log]
description = "show the commit history"
reason = "tests"
command = ["/bin/echo", "log"]
allow = { groups = ["cordon-t-sock"] }

[tools.git-log-all]
description = "every branch's history"
reason = "tests"
command = ["/bin/echo", "all"]
allow = { groups = ["cordon-t-sock"] }

[tools.grep]
description = "search files"
reason = "tests"
command = ["/bin/echo", "{{pattern}}"]
allow = { groups = ["cordon-t-sock"] }

[tools.grep.params.pattern]
type = "string"
description = "the git log line to look for"
required = true

[tools.log-reader]
description = "read the git log (admins only)"
reason = "tests"
command = ["/bin/echo", "secret"]

[tools.hold]
description = "sleep a while"
reason = "tests"
command = ["/bin/sleep", "30"]
limits = { memory = "64MiB" }
allow = { groups = ["cordon-t-sock"] }
"#;

/// A daemon the agent user can reach, with `extra` flags.
fn start(policy: &str, extra: &[&str]) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), policy).unwrap();
    let mut args = vec!["--socket-group", SOCKET_GROUP];
    args.extend_from_slice(extra);
    Daemon::start_in(dir, policies, &args)
}

/// A `cordon mcp` process driven line by line.
struct Session {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<Value>,
    next: u64,
}

impl Session {
    fn start(mut command: Command, socket: &Path, mcp_args: &[&str]) -> Session {
        let mut child = command
            .arg("--socket")
            .arg(socket)
            .arg("mcp")
            .args(mcp_args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn cordon mcp");
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let Ok(v) = serde_json::from_str(&line) else { return };
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        let mut s = Session { child, stdin, lines, next: 0 };
        s.request(
            "initialize",
            json!({ "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": { "name": "raw", "version": "1" } }),
        );
        s.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        s
    }

    fn send(&mut self, v: &Value) {
        self.stdin.write_all(&serde_json::to_vec(v).unwrap()).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The whole answer (`result` or `error`) to one request.
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = self.lines.recv_timeout(left).unwrap_or_else(|e| panic!("no answer to {method} ({e})"));
            if m.get("method").is_none() && m["id"] == id {
                return m;
            }
        }
    }

    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let m = self.request("tools/call", json!({ "name": tool, "arguments": arguments }));
        m["result"].clone()
    }

    /// Every tool name, walking the pages; asserts the built-ins are on the first.
    fn walk(&mut self) -> (Vec<String>, usize) {
        let mut names = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let m = self.request("tools/list", params);
            let result = &m["result"];
            let page: Vec<String> =
                result["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
            if pages == 0 {
                for builtin in ["describe_schema", "search_tools", "cordon_status"] {
                    assert!(page.iter().any(|n| n == builtin), "{builtin} not on the first page: {page:?}");
                }
            }
            pages += 1;
            names.extend(page);
            match result["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => return (names, pages),
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn names(v: &Value) -> Vec<String> {
    v["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn search_ranks_the_exact_name_first_and_shows_only_what_the_caller_may_see() {
    require_root!();
    let d = start(POLICY, &[]);
    let admin = d.cordon(&["tools", "--search", "git-log", "--json"]).json();
    assert_eq!(names(&admin)[..2], ["git-log", "git-log-all"], "{admin}");
    assert!(names(&admin).contains(&"log-reader".to_string()), "admins see every tool: {admin}");
    assert!(admin["tools"][0]["score"].as_u64().unwrap() > admin["tools"][1]["score"].as_u64().unwrap());
    assert_eq!(admin["tools"][0]["input_schema"]["type"], "object");

    let agent = agent::cordon(&d.socket, &["tools", "--search", "git log", "--json"]).json();
    let found = names(&agent);
    assert!(!found.contains(&"log-reader".to_string()), "a tool the agent may not call: {agent}");
    assert!(found.contains(&"grep".to_string()), "param descriptions count: {agent}");
    let text = agent::cordon(&d.socket, &["tools", "--search", "secret reader"]);
    assert!(text.stdout.contains("no tool matches"), "{}", text.stdout);

    let mut s = Session::start(agent::command(), &d.socket, &[]);
    let r = s.call("search_tools", json!({ "query": "GIT-LOG", "limit": 2 }));
    assert_eq!(r["isError"], false, "{r}");
    let hits = &r["structuredContent"];
    assert_eq!(names(hits), ["git-log", "git-log-all"], "{r}");
    assert_eq!(hits["matches"], 3, "git-log, git-log-all and grep match; log-reader is not the agent's: {r}");
    let all = s.call("search_tools", json!({ "query": "reader log" }));
    assert!(!names(&all["structuredContent"]).contains(&"log-reader".to_string()), "{all}");
    let r = s.call("search_tools", json!({ "query": "git", "bogus": 1 }));
    assert_eq!(r["isError"], true, "{r}");
    assert!(r["content"][0]["text"].as_str().unwrap().starts_with("UNKNOWN_FIELDS:"), "{r}");
    let r = s.call("search_tools", json!({ "query": "git", "limit": 51 }));
    assert!(r["content"][0]["text"].as_str().unwrap().starts_with("INVALID_FIELD_VALUE:"), "{r}");
    let r = s.call("search_tools", json!({}));
    assert!(r["content"][0]["text"].as_str().unwrap().starts_with("MISSING_REQUIRED_FIELD:"), "{r}");
}

fn many_tools(n: usize, description: &str) -> String {
    let mut p = String::from("version = 1\n");
    for i in 0..n {
        p.push_str(&format!(
            "\n[tools.t{i:02}]\ndescription = \"{description} {i}\"\nreason = \"tests\"\ncommand = [\"/bin/true\"]\n"
        ));
    }
    p
}

#[test]
fn tools_list_pages_walk_to_the_whole_list_and_old_or_malformed_cursors_are_refused() {
    let d = Daemon::start(&[("t.toml", &many_tools(25, "tool"))]);
    let mut whole = Session::start(Command::new(bin("cordon")), &d.socket, &[]);
    let (all, pages) = whole.walk();
    assert_eq!(pages, 1, "unpaginated by default");
    let mut paged = Session::start(Command::new(bin("cordon")), &d.socket, &["--page-size", "4"]);
    let (walked, pages) = paged.walk();
    assert_eq!(walked.len(), all.len(), "no tool twice: {walked:?}");
    assert_eq!(walked.iter().collect::<BTreeSet<_>>(), all.iter().collect::<BTreeSet<_>>());
    assert_eq!(pages, all.len().div_ceil(4));

    let first = paged.request("tools/list", json!({}));
    let cursor = first["result"]["nextCursor"].as_str().unwrap().to_string();
    let bad = paged.request("tools/list", json!({ "cursor": "not-a-cursor" }));
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    assert!(bad["error"]["message"].as_str().unwrap().contains("without a cursor"), "{bad}");
    let unasked = whole.request("tools/list", json!({ "cursor": cursor }));
    assert_eq!(unasked["error"]["code"], -32602, "an unpaginated session made no cursor: {unasked}");

    d.write_policy("t.toml", &many_tools(26, "changed"));
    d.cordon(&["reload"]).assert_code(0);
    // The session moves to the new generation when cordond announces it.
    let mut last = Value::Null;
    let stale = eventually(Duration::from_secs(10), || {
        last = paged.request("tools/list", json!({ "cursor": cursor }));
        last["error"]["code"] == -32602
    });
    assert!(stale, "an old cursor still worked after the reload: {last}");
    assert!(last["error"]["message"].as_str().unwrap().contains("older tool list"), "{last}");
    let (walked, _) = paged.walk();
    assert_eq!(walked.len(), all.len() + 1, "a fresh walk lists the new set");
}

/// `cordon status --json` as root.
fn status(d: &Daemon) -> Value {
    d.cordon(&["status", "--json"]).json()
}

#[test]
fn status_shows_running_figures_the_queue_and_audit_space_and_agents_see_their_own() {
    require_root!();
    let d = start(POLICY, &["--max-concurrent", "1", "--max-per-caller", "1"]);
    let mut root_run = d.cordon_spawn(&["run", "hold", "--json"]);
    assert!(eventually(Duration::from_secs(10), || status(&d)["running_invocations"] == 1), "hold never ran");
    let mut agent_run = agent::command()
        .arg("--socket")
        .arg(&d.socket)
        .args(["run", "hold", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || status(&d)["queued_invocations"] == 1), "{}", status(&d));

    let s = status(&d);
    let running = &s["running"][0];
    assert_eq!(running["tool"], "hold", "{s}");
    if s["cgroup_mode"] == "none" {
        cordon_tests::skip!(
            cordon_tests::Skip::NoCgroupDelegation,
            "figures: no cgroups on this host ({})",
            s["figures_note"]
        );
        assert!(s["figures_note"].as_str().unwrap().starts_with("not measured"), "{s}");
    } else {
        let measured = ["memory_bytes", "cpu_usec", "pids"].iter().filter(|k| running[**k].is_u64()).count();
        assert!(measured > 0, "a running tool with cgroups has figures: {s}");
        if running["memory_bytes"].is_u64() {
            assert!(running["memory_bytes"].as_u64().unwrap() > 0, "{s}");
        }
    }
    assert!(s["audit_free_bytes"].as_u64().unwrap() > 0, "{s}");
    assert!(s["audit_log_bytes"].as_u64().unwrap() > 0, "{s}");
    let text = d.cordon(&["status"]);
    assert!(text.stdout.contains("audit disk"), "{}", text.stdout);
    assert!(text.stdout.contains("USAGE") && text.stdout.contains("hold"), "{}", text.stdout);

    // The agent sees its own queued call, not root's running one, and no audit figures.
    let a = agent::cordon(&d.socket, &["status", "--json"]).json();
    assert!(a.get("running").is_none(), "none of its own running: left out, not shown empty: {a}");
    assert_eq!(a["queued_invocations"], 1, "{a}");
    assert!(a.get("audit_free_bytes").is_none(), "{a}");
    assert!(a.get("audit_seq").is_none() && a.get("audit_head").is_none(), "no audit position for agents: {a}");
    assert!(s["audit_seq"].as_u64().unwrap() > 0 && s["audit_head"].as_str().unwrap().len() == 64, "{s}");
    let mut mcp = Session::start(agent::command(), &d.socket, &[]);
    let r = mcp.call("cordon_status", json!({}));
    assert_eq!(r["isError"], false, "{r}");
    assert!(r["structuredContent"].get("running").is_none(), "{r}");
    assert_eq!(r["structuredContent"]["caller"]["admin"], false, "{r}");
    let r = mcp.call("cordon_status", json!({ "x": 1 }));
    assert!(r["content"][0]["text"].as_str().unwrap().starts_with("UNKNOWN_FIELDS:"), "{r}");

    // Once root's call is cancelled the agent's runs, and the agent sees it as its own.
    let id = s["running"][0]["invocation_id"].as_str().unwrap().to_string();
    d.cordon(&["cancel", &id]).assert_code(0);
    let uid = agent::id("-u", agent::AGENT);
    assert!(eventually(Duration::from_secs(10), || {
        let a = agent::cordon(&d.socket, &["status", "--json"]).json();
        a["running"].as_array().is_some_and(|r| r.len() == 1 && r[0]["caller_uid"] == uid)
    }));
    let r = mcp.call("cordon_status", json!({}));
    assert_eq!(r["structuredContent"]["running"][0]["tool"], "hold", "{r}");
    let id = status(&d)["running"][0]["invocation_id"].as_str().unwrap().to_string();
    d.cordon(&["cancel", &id]).assert_code(0);
    let _ = root_run.wait();
    let _ = agent_run.wait();
}

/// `n` tools `t0000`...: the even ones the agent's group may use, the odd ones admins only.
fn half_for_agents(n: usize) -> String {
    let mut p = String::from("version = 1\n");
    for i in 0..n {
        let allow = if i % 2 == 0 { "allow = { groups = [\"cordon-t-sock\"] }\n" } else { "" };
        p.push_str(&format!(
            "\n[tools.t{i:04}]\ndescription = \"tool {i}\"\nreason = \"tests\"\ncommand = [\"/bin/true\"]\n{allow}"
        ));
    }
    p
}

/// The names among `walked` that are daemon tools (`t0000`...), and whether any was listed twice.
fn daemon_tools(walked: &[String]) -> (BTreeSet<String>, bool) {
    let unique = walked.iter().collect::<BTreeSet<_>>().len() == walked.len();
    let tools =
        walked.iter().filter(|n| n.len() == 5 && n.starts_with('t') && n[1..].bytes().all(|b| b.is_ascii_digit()));
    (tools.cloned().collect(), unique)
}

const MANY: usize = 2100;

#[test]
fn a_long_list_is_paged_by_default_each_tool_once_and_an_agent_pages_only_its_own() {
    require_root!();
    let d = start(&half_for_agents(MANY), &[]);
    // Without --page-size a list longer than 1000 tools comes in pages of 1000 (the front-end
    // fetched it from cordond in pages of 500 too).
    let mut admin = Session::start(Command::new(bin("cordon")), &d.socket, &[]);
    let (walked, pages) = admin.walk();
    let (tools, unique) = daemon_tools(&walked);
    assert!(unique, "a tool listed twice");
    assert_eq!(tools, (0..MANY).map(|i| format!("t{i:04}")).collect::<BTreeSet<_>>());
    assert_eq!(pages, walked.len().div_ceil(1000), "pages of 1000: {pages} for {}", walked.len());
    assert_eq!(pages, 3);

    // The agent's pages hold exactly the tools its group may use, each once.
    let mut mcp = Session::start(agent::command(), &d.socket, &[]);
    let (walked, pages) = mcp.walk();
    let (tools, unique) = daemon_tools(&walked);
    assert!(unique, "a tool listed twice");
    assert_eq!(tools, (0..MANY).step_by(2).map(|i| format!("t{i:04}")).collect::<BTreeSet<_>>());
    assert_eq!(pages, 2, "{} names", walked.len());
    // An explicit page size still rules.
    let mut small = Session::start(agent::command(), &d.socket, &["--page-size", "300"]);
    let (walked, pages) = small.walk();
    assert_eq!(daemon_tools(&walked), (tools, true));
    assert_eq!(pages, walked.len().div_ceil(300));
}

/// `n` tools `t0000`... with one integer param `n` (1 to 5) each, echoed.
fn counting_tools(n: usize) -> String {
    let mut p = String::from("version = 1\n");
    for i in 0..n {
        p.push_str(&format!(
            "\n[tools.t{i:04}]\ndescription = \"tool {i}\"\nreason = \"tests\"\ncommand = [\"/bin/echo\", \"{{{{n}}}}\"]\n\
             [tools.t{i:04}.params.n]\ntype = \"integer\"\nmin = 1\nmax = 5\nrequired = true\n"
        ));
    }
    p
}

#[test]
fn a_tool_on_a_page_not_listed_yet_is_called_and_checked_as_any_other() {
    require_root!();
    // 1,200 tools: three of cordond's pages of 500; the first tools/list page of 10 needs only
    // the first.
    let d = start(&counting_tools(1200), &[]);
    let mut mcp = Session::start(Command::new(bin("cordon")), &d.socket, &["--page-size", "10"]);
    let first = mcp.request("tools/list", json!({}));
    assert!(first["result"]["nextCursor"].is_string(), "{first}");
    let last = mcp.call("t1199", json!({ "n": 9 }));
    let listed = mcp.call("t0000", json!({ "n": 9 }));
    assert_eq!(last["isError"], true, "{last}");
    assert_eq!(last["structuredContent"]["error"]["code"], "INVALID_FIELD_VALUE", "{last}");
    assert_eq!(last["structuredContent"]["error"], listed["structuredContent"]["error"], "refused alike");
    let ran = mcp.call("t1199", json!({ "n": 3 }));
    assert_eq!(ran["isError"], false, "{ran}");
    assert!(ran["content"][0]["text"].as_str().unwrap().contains('3'), "{ran}");
    // The walk goes on from the first page's cursor: every tool once.
    let mut cursor = first["result"]["nextCursor"].as_str().map(str::to_string);
    let mut names: Vec<String> =
        first["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
    while let Some(c) = cursor {
        let page = mcp.request("tools/list", json!({ "cursor": c }));
        names.extend(
            page["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()),
        );
        cursor = page["result"]["nextCursor"].as_str().map(str::to_string);
    }
    let (tools, unique) = daemon_tools(&names);
    assert!(unique, "a tool listed twice");
    assert_eq!(tools, (0..1200).map(|i| format!("t{i:04}")).collect::<BTreeSet<_>>());
}

#[test]
fn forged_foreign_and_stale_cursors_are_refused() {
    require_root!();
    let d = start(&half_for_agents(40), &[]);
    let mut one = Session::start(Command::new(bin("cordon")), &d.socket, &["--page-size", "10"]);
    let mut two = Session::start(Command::new(bin("cordon")), &d.socket, &["--page-size", "10"]);
    let mut agent = Session::start(agent::command(), &d.socket, &["--page-size", "10"]);
    let first = one.request("tools/list", json!({}));
    let cursor = first["result"]["nextCursor"].as_str().unwrap().to_string();
    let second = one.request("tools/list", json!({ "cursor": cursor }));
    assert!(second["result"]["tools"].is_array(), "{second}");
    let (payload, tag) = cursor.split_once('.').expect("payload.tag");
    let bytes = (0..payload.len()).step_by(2).map(|i| u8::from_str_radix(&payload[i..i + 2], 16).unwrap());
    let text = String::from_utf8(bytes.collect()).unwrap();
    // Another offset under this cursor's tag, a changed tag, a cursor without one.
    let other_offset = text.rsplit_once(':').map(|(head, _)| format!("{head}:30")).unwrap();
    let hex: String = other_offset.bytes().map(|b| format!("{b:02x}")).collect();
    let moved = format!("{hex}.{tag}");
    let flipped = format!("{payload}.{}{}", &tag[..tag.len() - 1], if tag.ends_with('0') { '1' } else { '0' });
    let malformed = |s: &mut Session, c: &str| {
        let m = s.request("tools/list", json!({ "cursor": c }));
        assert_eq!(m["error"]["code"], -32602, "{c}: {m}");
        assert!(m["error"]["message"].as_str().unwrap().starts_with("malformed cursor"), "{m}");
    };
    for forged in [moved.as_str(), &flipped, payload, "not-a-cursor"] {
        malformed(&mut one, forged);
    }
    // A cursor another session made (same daemon, same generation, same caller) is not this
    // session's; nor is an admin's cursor an agent's.
    malformed(&mut two, &cursor);
    malformed(&mut agent, &cursor);

    d.write_policy("t.toml", &half_for_agents(41));
    d.cordon(&["reload"]).assert_code(0);
    let mut last = Value::Null;
    let stale = eventually(Duration::from_secs(10), || {
        last = one.request("tools/list", json!({ "cursor": cursor }));
        last["error"]["code"] == -32602
    });
    assert!(stale, "an old cursor still worked after the reload: {last}");
    assert!(last["error"]["message"].as_str().unwrap().contains("older tool list"), "{last}");
}

async fn grpc(socket: &Path) -> cordon_proto::v1::cordon_client::CordonClient<tonic::transport::Channel> {
    let socket = socket.to_path_buf();
    let channel = tonic::transport::Endpoint::from_static("http://cordon.invalid")
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move { cordon_proto::connect_trusted(&socket).await.map(hyper_util::rt::TokioIo::new) }
        }))
        .await
        .unwrap();
    cordon_proto::v1::cordon_client::CordonClient::new(channel)
}

#[test]
fn list_tools_pages_cover_the_registry_once_and_stale_or_forged_tokens_are_refused() {
    use cordon_proto::v1::ListToolsRequest;
    let d = Daemon::start(&[("t.toml", &half_for_agents(1203))]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut c = grpc(&d.socket).await;
        // A request without a page (an older client) gets everything in one answer.
        let whole = c.list_tools(ListToolsRequest::default()).await.unwrap().into_inner();
        assert_eq!((whole.tools.len(), whole.next_page_token.as_str()), (1203, ""));
        let mut names = Vec::new();
        let mut token = String::new();
        let mut sizes = Vec::new();
        let mut first_token = None;
        loop {
            let request = ListToolsRequest { page_size: 500, page_token: token.clone(), ..Default::default() };
            let page = c.list_tools(request).await.unwrap().into_inner();
            assert_eq!(page.generation, whole.generation);
            sizes.push(page.tools.len());
            names.extend(page.tools.into_iter().map(|t| t.name));
            if page.next_page_token.is_empty() {
                break;
            }
            first_token.get_or_insert_with(|| page.next_page_token.clone());
            token = page.next_page_token;
        }
        assert_eq!(sizes, [500, 500, 203]);
        assert_eq!(names, whole.tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>(), "each once, in order");

        let token = first_token.unwrap();
        // (Tokens are not secret: one naming another tool of this generation is a valid place
        // to resume, and the page is still filtered for its caller.)
        for forged in ["zz", "not hex", &token.to_uppercase(), &token[..token.len() - 1]] {
            let request = ListToolsRequest { page_size: 500, page_token: forged.into(), ..Default::default() };
            let e = c.list_tools(request).await.unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{forged}: {e:?}");
        }
        d.write_policy("t.toml", &half_for_agents(1204));
        d.cordon(&["reload"]).assert_code(0);
        let request = ListToolsRequest { page_size: 500, page_token: token, ..Default::default() };
        let e = c.list_tools(request).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
        assert!(e.message().contains("list again from the first page"), "{}", e.message());
    });
}
