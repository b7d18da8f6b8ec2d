//! The socket under attack and under load: tools that try to drive cordond through a connection
//! opened by a child that then exits, connection floods from one uid, SIGHUP storms while the
//! daemon starts, and a daemon without invocation cgroups (run as a normal user). Needs root
//! (to create the agent user and run as it); skips otherwise.

use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cordon_tests::agent::{self, AGENT, SOCKET_GROUP};
use cordon_tests::require_root;
use cordon_tests::{Daemon, Output, bin, cordon_at, eventually};
use serde_json::{Value, json};

fn q(p: impl AsRef<Path>) -> String {
    serde_json::to_string(p.as_ref().to_str().unwrap()).unwrap()
}

/// `cordon --socket SOCKET ARGS...` as the agent user.
fn as_agent(socket: &Path, args: &[&str]) -> Output {
    agent::cordon(socket, args)
}

/// Tools running `cordon-peer MODE SOCKET OP [TOOL]` with Unix sockets allowed on the daemon's
/// socket directory: `peer` as its caller, `peer-root` as root, `peer-agent` as the agent with
/// the socket's group (tools get no supplementary groups, so `peer` run by the agent cannot even
/// connect); all admit the agent. `hidden` has no `allow`: admins only.
fn peer_policy(socket: &Path) -> String {
    let peer = bin("cordon-peer");
    let mut text = format!("version = 1\n\n[defaults]\nexec = [{}]\ntimeout = \"20s\"\n", q(peer.parent().unwrap()));
    let tools = [
        ("peer", String::new()),
        ("peer-root", "run_as = \"root\"\n".to_string()),
        ("peer-agent", format!("run_as = \"{AGENT}:{SOCKET_GROUP}\"\n")),
    ];
    for (name, extra) in tools {
        text.push_str(&format!(
            r#"
[tools.{name}]
description = "drives cordond from inside the sandbox"
reason = "tests"
command = [{peer}, "{{{{mode}}}}", {socket}, "{{{{op}}}}", "{{{{tool}}}}"]
unix_sockets = [{dir}]
allow = {{ users = ["{AGENT}"] }}
{extra}
[tools.{name}.params.mode]
type = "enum"
values = ["direct", "exited-child", "zombie-child"]
required = true

[tools.{name}.params.op]
type = "enum"
values = ["status", "reload", "invoke", "health"]
required = true

[tools.{name}.params.tool]
type = "string"
pattern = "[a-z-]*"
"#,
            peer = q(&peer),
            socket = q(socket),
            dir = q(socket.parent().unwrap()),
        ));
    }
    text.push_str("\n[tools.hidden]\ndescription = \"admins only\"\nreason = \"tests\"\ncommand = [\"/bin/true\"]\n");
    text
}

/// A daemon the agent can reach (socket group, traversable directory).
fn start(policy: impl FnOnce(&Path) -> String) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    // Daemon::start_in puts the socket here.
    let socket = dir.path().join("run").join("cordon.sock");
    std::fs::write(policies.join("t.toml"), policy(&socket)).unwrap();
    Daemon::start_in(dir, policies, &["--socket-group", SOCKET_GROUP])
}

/// Runs the `peer`/`peer-root` tool as root or as the agent; returns cordon-peer's JSON line.
#[track_caller]
fn drive(d: &Daemon, agent: bool, tool: &str, mode: &str, op: &str, target: &str) -> Value {
    let mut args = json!({ "mode": mode, "op": op });
    if !target.is_empty() {
        args["tool"] = json!(target);
    }
    let argv = ["run", tool, "--args-json", &args.to_string(), "--json"];
    let out = if agent { as_agent(&d.socket, &argv) } else { d.cordon(&argv) };
    let result = out.json();
    assert_eq!(result["exit_code"], 0, "{tool} {mode} {op} did not run: {out:?}\n{}", d.log_text());
    let line = result["stdout"].as_str().unwrap().lines().next().unwrap_or_default().to_string();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("no JSON line from cordon-peer ({e}): {result:#}"))
}

/// The tool's request was refused as coming from a sandboxed or unidentifiable peer, and the
/// refusal is in the audit log under the connecting process's pid.
#[track_caller]
fn assert_refused_and_audited(d: &Daemon, report: &Value, operation: &str, expect: &[&str]) {
    assert_eq!(report["ok"], false, "cordond served a request from inside its sandbox: {report}");
    assert_eq!(report["grpc_code"], 7, "PERMISSION_DENIED expected: {report}");
    let code = report["code"].as_str().unwrap_or_default();
    assert!(expect.contains(&code), "expected one of {expect:?}: {report}");
    let connector = report["child_pid"].as_u64().or_else(|| report["pid"].as_u64()).unwrap();
    let found = eventually(Duration::from_secs(5), || {
        d.audit_records().iter().any(|r| {
            r["decision"] == "unauthorized"
                && r["code"] == code
                && r["operation"] == operation
                && r["caller"]["pid"].as_u64() == Some(connector)
        })
    });
    assert!(found, "no `unauthorized` {code} record for {operation} by pid {connector}:\n{:#?}", d.audit_records());
}

/// Nothing the tools asked for happened: no reload by RPC, the admin-only tool never started.
#[track_caller]
fn assert_nothing_served(d: &Daemon) {
    for r in d.audit_records() {
        assert!(!(r["decision"] == "reload" && r["by"] != "SIGHUP"), "a reload was served: {r}");
        assert!(!(r["decision"] == "started" && r["tool"] == "hidden"), "the admin-only tool ran: {r}");
    }
}

/// A tool connects from a child that exits (reaped, or left a zombie), then sends Reload and
/// Invoke of an admin-only tool over the descriptor it inherited. Each request is refused and
/// audited, whoever the caller (root or the agent) and whoever the tool runs as (`run_as =
/// "root"` included). Before the per-connection check, cordond looked at /proc/PID per request
/// and served such a peer as its uid.
#[test]
fn a_tool_cannot_drive_cordond_over_a_connection_its_exited_child_opened() {
    require_root!();
    let d = start(peer_policy);
    let cases =
        [(false, "peer"), (false, "peer-root"), (false, "peer-agent"), (true, "peer-root"), (true, "peer-agent")];
    for (agent, tool) in cases {
        for mode in ["exited-child", "zombie-child"] {
            let report = drive(&d, agent, tool, mode, "reload", "");
            assert_refused_and_audited(&d, &report, "reload", &["SANDBOXED_PEER", "UNKNOWN_PEER"]);
            let report = drive(&d, agent, tool, mode, "invoke", "hidden");
            assert_refused_and_audited(&d, &report, "invoke", &["SANDBOXED_PEER", "UNKNOWN_PEER"]);
        }
        // The tool's own process is alive and in its invocation cgroup: always SANDBOXED_PEER.
        let report = drive(&d, agent, tool, "direct", "reload", "");
        assert_refused_and_audited(&d, &report, "reload", &["SANDBOXED_PEER"]);
    }
    // The health service (and reflection) refuse such peers too.
    let report = drive(&d, false, "peer", "direct", "health", "");
    assert_eq!((&report["grpc_code"], &report["code"]), (&json!(7), &json!("SANDBOXED_PEER")), "{report}");
    let out = Command::new(bin("cordon-peer")).arg("direct").arg(&d.socket).arg("health").output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ok"], true, "the health service refused a peer outside the sandbox: {report}");
    // Run by the agent, `peer` runs as the agent without the socket's group: the socket's mode
    // is the first gate.
    let report = drive(&d, true, "peer", "direct", "status", "");
    assert_eq!((&report["step"], &report["errno"]), (&json!("connect"), &json!(libc::EACCES)), "{report}");
    assert_nothing_served(&d);
    let doctor = d.cordon(&["doctor", "--json"]);
    assert_eq!(peers_check(&doctor), ("ok".to_string(), "own tools refused on the socket".to_string()), "{doctor:?}");
    // The daemon still serves everyone else.
    d.cordon(&["status"]).assert_code(0);
    d.cordon(&["run", "hidden"]).assert_code(0);
}

/// Another cordond's tool is no more a client than this daemon's own: a tool of daemon A with
/// `unix_sockets` on daemon B's socket directory is refused by B (say, a root cordond's tool run
/// as alice, and alice's own cordond). Before, B only recognised its own invocation cgroups and
/// served A's tool as an admin.
#[test]
fn a_tool_of_another_cordond_cannot_drive_this_one() {
    require_root!();
    let b = start(peer_policy);
    let a = start(|_| peer_policy(&b.socket));
    for tool in ["peer", "peer-root"] {
        let report = drive(&a, false, tool, "direct", "reload", "");
        assert_refused_and_audited(&b, &report, "reload", &["SANDBOXED_PEER"]);
        let report = drive(&a, false, tool, "exited-child", "invoke", "hidden");
        assert_refused_and_audited(&b, &report, "invoke", &["SANDBOXED_PEER", "UNKNOWN_PEER"]);
    }
    assert_nothing_served(&b);
    b.cordon(&["run", "hidden"]).assert_code(0);
}

/// cordond in its own pid namespace (a container) cannot see a client of the host's namespace:
/// SO_PEERCRED reports pid 0 and the pidfd has no pid there. Such a peer cannot be checked, so
/// its requests are refused (UNKNOWN_PEER), audited; the daemon is not fooled into serving it.
#[test]
fn a_peer_in_a_pid_namespace_cordond_cannot_see_is_refused() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), "version = 1\n").unwrap();
    let d = Daemon::start_under(&["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"], dir, policies, &[]);
    let out = Command::new(bin("cordon-peer")).arg("direct").arg(&d.socket).arg("status").output().unwrap();
    let text = d.log_text();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!((&report["grpc_code"], &report["code"]), (&json!(7), &json!("UNKNOWN_PEER")), "{report}\n{text}");
    assert!(report["message"].as_str().unwrap().contains("pid namespace"), "{report}");
    let found = eventually(Duration::from_secs(10), || {
        d.audit_records()
            .iter()
            .any(|r| r["decision"] == "unauthorized" && r["code"] == "UNKNOWN_PEER" && r["operation"] == "status")
    });
    assert!(found, "{:#?}", d.audit_records());
}

/// Two daemons on one host, one of them in a pid namespace of its own (a container sharing the
/// host's cgroups): when the second starts, it must not take the first one's invocation cgroups
/// for a dead daemon's (the first's pid means nothing in its namespace) and kill them, nor share
/// a directory with a daemon of the same pid in another namespace.
#[test]
fn a_daemon_in_a_pid_namespace_leaves_another_daemons_invocations_alone() {
    require_root!();
    let policy = "version = 1\n[tools.nap]\ndescription = \"sleeps\"\nreason = \"tests\"\ncommand = [\"/bin/sleep\", \"29.25\"]\n";
    let host = Daemon::start(&[("t.toml", policy)]);
    if host.cordon(&["status", "--json"]).json()["cgroup_mode"] == "none" {
        cordon_tests::skip!(cordon_tests::Skip::NoCgroupDelegation, "no cgroups here");
        return;
    }
    let mut call = host.cordon_spawn(&["run", "nap"]);
    // The tool's process, found by its command line in /proc (no procps needed).
    let sleeping = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
            .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == b"/bin/sleep\x0029.25\x00"))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
    };
    assert!(eventually(Duration::from_secs(10), || sleeping().len() == 1), "the tool never started");
    let pid = sleeping()[0].clone();

    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), policy).unwrap();
    let contained =
        Daemon::start_under(&["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"], dir, policies, &[]);
    // The contained daemon listens (start_under waited for its socket): its startup clean-up of
    // stale cgroups, which comes before, is done. (It cannot serve this host-side client.)
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "the host daemon's invocation was killed when a daemon started in a pid namespace:\n{}",
        contained.log_text()
    );
    // The host daemon still runs tools (its cgroup directory was not removed under it).
    let running = host.cordon(&["status", "--json"]).json();
    assert_eq!(running["running"].as_array().map(Vec::len), Some(1), "{running}");
    let id = running["running"][0]["invocation_id"].as_str().unwrap().to_string();
    host.cordon(&["cancel", &id]).assert_code(0);
    let _ = call.wait();
}

/// `cordon doctor`'s `peers` check: (level, found).
fn peers_check(doctor: &Output) -> (String, String) {
    let json: Value = serde_json::from_str(&doctor.stdout).unwrap_or_else(|e| panic!("doctor: {e}: {doctor:?}"));
    let check = json["checks"].as_array().unwrap().iter().find(|c| c["name"] == "peers").cloned().unwrap_or_default();
    (check["level"].as_str().unwrap_or_default().into(), check["found"].as_str().unwrap_or_default().into())
}

/// The same from a peer whose connecting process is gone before cordond accepts, from outside
/// any sandbox: a client that connects and exits is refused as UNKNOWN_PEER (the decision fails
/// closed), while its parent that opened its own connection is served.
#[test]
fn a_connection_whose_opener_exited_before_accept_is_refused_outside_the_sandbox_too() {
    require_root!();
    let d = start(peer_policy);
    let out = Command::new(bin("cordon-peer")).arg("exited-child").arg(&d.socket).arg("reload").output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Outside a sandbox the child may still be alive at accept (then it is served) or not.
    if report["ok"] == false {
        assert_refused_and_audited(&d, &report, "reload", &["UNKNOWN_PEER"]);
    }
    let out = Command::new(bin("cordon-peer")).arg("direct").arg(&d.socket).arg("status").output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ok"], true, "{report}");
}

/// Opens `n` connections as the agent (`cordon-peer flood`); returns the process once the
/// daemon has closed the ones over the cap, with how many it closed. The connections stay open
/// until the process's stdin is closed.
fn agent_flood(socket: &Path, n: usize) -> (std::process::Child, usize) {
    let mut child = Command::new("setpriv")
        .args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--"])
        .arg(bin("cordon-peer"))
        .arg("flood")
        .arg(socket)
        .arg(n.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    (child, line.trim().parse().unwrap_or_else(|_| panic!("cordon-peer flood said {line:?}")))
}

/// One uid holding its whole connection allowance (256) neither locks out another uid nor
/// takes more: the agent's flood leaves root served, root's flood leaves the agent served, and
/// the flooding uid gets its connections back once it lets go.
#[test]
fn a_connection_flood_from_one_uid_does_not_lock_out_another() {
    require_root!();
    let d = start(|_| "version = 1\n".into());
    // The agent floods.
    let (mut flood, closed) = agent_flood(&d.socket, 300);
    assert_eq!(closed, 300 - 256, "the daemon closed {closed} of the agent's 300 connections");
    d.cordon(&["status"]).assert_code(0);
    let refused = as_agent(&d.socket, &["status"]);
    assert_ne!(refused.code, Some(0), "the agent got a 257th connection: {refused:?}");
    drop(flood.stdin.take());
    flood.wait().unwrap();
    assert!(eventually(Duration::from_secs(5), || as_agent(&d.socket, &["status"]).code == Some(0)));

    // Root floods (this process holds the connections).
    let held: Vec<_> = (0..300).map(|_| std::os::unix::net::UnixStream::connect(&d.socket).unwrap()).collect();
    assert!(eventually(Duration::from_secs(5), || d.cordon(&["status"]).code != Some(0)), "root's 257th was served");
    as_agent(&d.socket, &["status"]).assert_code(0);
    drop(held);
    assert!(eventually(Duration::from_secs(5), || d.cordon(&["status"]).code == Some(0)));
}

/// A tool (running as the agent, with the socket's group) opens 300 connections to cordond.
/// Connections from sandboxed peers count against their own small budget (8 per uid), not the
/// uid's 256: while the tool holds them, the agent's own clients and root are still served.
#[test]
fn a_tool_flooding_the_socket_does_not_lock_out_its_user() {
    require_root!();
    let marks = tempfile::tempdir().unwrap();
    std::fs::set_permissions(marks.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let marker = marks.path().join("flooded");
    let d = start(|socket| {
        format!(
            "version = 1\n[tools.flooder]\ndescription = \"d\"\nreason = \"tests\"\ncommand = [{peer}, \"flood\", {socket}, \"300\", \"6000\", {marker}]\nexec = [{bin}]\nwrite = [{marks}]\nunix_sockets = [{dir}]\ntimeout = \"30s\"\nrun_as = \"{AGENT}:{SOCKET_GROUP}\"\nallow = {{ users = [\"{AGENT}\"] }}\n",
            peer = q(bin("cordon-peer")),
            socket = q(socket),
            marker = q(&marker),
            bin = q(bin("cordon-peer").parent().unwrap()),
            marks = q(marks.path()),
            dir = q(socket.parent().unwrap()),
        )
    });
    let run = Command::new("setpriv")
        .args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--"])
        .arg(bin("cordon"))
        .arg("--socket")
        .arg(&d.socket)
        .args(["run", "flooder", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(15), || marker.exists()), "the flood did not start:\n{}", d.log_text());
    let closed: usize = std::fs::read_to_string(&marker).unwrap().trim().parse().unwrap();
    assert_eq!(closed, 300 - 8, "sandboxed connections beyond 8 must be closed at accept");
    // While the tool holds its 8 (refused) connections, its user and root are served.
    as_agent(&d.socket, &["status"]).assert_code(0);
    d.cordon(&["status"]).assert_code(0);
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

/// Whether `pid` has a handler for SIGHUP (bit 0 of SigCgt in /proc/PID/status).
fn catches_sighup(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|mask| mask & 1 != 0)
}

/// SIGHUP in a loop from the moment cordond can catch it (its handler is the first thing
/// main installs; before that, no program can) or binds its socket, whichever comes first,
/// through the bind and the first accepts, until it serves: cordond
/// survives every time (20 starts) and reloads after startup. Before, a SIGHUP between the bind
/// and the handler's installation killed it (8/10 in the review).
#[test]
fn sighup_storms_during_startup_never_kill_cordond() {
    let mut before_bind = 0;
    for attempt in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let policies = dir.path().join("policies");
        std::fs::create_dir(&policies).unwrap();
        std::fs::write(
            policies.join("t.toml"),
            "version = 1\n[tools.t]\ndescription = \"d\"\nreason = \"r\"\ncommand = [\"/bin/true\"]\n",
        )
        .unwrap();
        let socket = dir.path().join("run").join("cordon.sock");
        let audit = dir.path().join("audit").join("a.jsonl");
        let log = dir.path().join("cordond.log");
        let mut child = Command::new(bin("cordond"))
            .arg("--policies")
            .arg(&policies)
            .arg("--socket")
            .arg(&socket)
            .arg("--audit")
            .arg(&audit)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let pid = child.id();
        let stop = AtomicBool::new(false);
        let first_before_bind = std::thread::scope(|s| {
            let storm = s.spawn(|| {
                let deadline = Instant::now() + Duration::from_secs(20);
                // From the handler's installation, or from the bind if that came first (then a
                // daemon that installs its handler late dies here).
                while !catches_sighup(pid) && !socket.exists() && Instant::now() < deadline {
                    std::hint::spin_loop();
                }
                let first_before_bind = !socket.exists();
                while !stop.load(Ordering::SeqCst) {
                    if nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::SIGHUP).is_err()
                    {
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                first_before_bind
            });
            let served = eventually(Duration::from_secs(20), || {
                child.try_wait().unwrap().is_none() && cordon_at(&socket, &["status"]).code == Some(0)
            });
            // A little more storm while it serves.
            std::thread::sleep(Duration::from_millis(100));
            stop.store(true, Ordering::SeqCst);
            let first = storm.join().unwrap();
            assert!(
                served,
                "attempt {attempt}: cordond did not serve: {:?}\n{}",
                child.try_wait(),
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            first
        });
        if first_before_bind {
            before_bind += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            child.try_wait().unwrap().is_none(),
            "attempt {attempt}: cordond died: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        cordon_at(&socket, &["status"]).assert_code(0);
        let reloaded = eventually(Duration::from_secs(10), || {
            cordon_tests::audit_records(&audit).iter().any(|r| r["decision"] == "reload" && r["by"] == "SIGHUP")
        });
        assert!(reloaded, "attempt {attempt}: no reload by SIGHUP was recorded");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::SIGTERM).unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "attempt {attempt}: {status}");
    }
    // The storm must really have started before the socket existed, or this tested nothing.
    assert!(before_bind >= 10, "only {before_bind} of 20 storms began before the bind");
}

/// cordond run by a normal user (a supported configuration: a per-user daemon) has no
/// invocation cgroups, so nothing tells its tools from its other clients of the same uid: tools
/// with `unix_sockets` are unavailable there, with the reason in `tools --all`, and refused.
#[test]
fn a_daemon_without_invocation_cgroups_offers_no_unix_socket_tools() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let uid = nix::unistd::User::from_name(AGENT).unwrap().unwrap();
    let socket = dir.path().join("run").join("cordon.sock");
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), peer_policy(&socket).replace("run_as = \"root\"\n", "")).unwrap();
    for p in [dir.path(), &policies, &policies.join("t.toml")] {
        nix::unistd::chown(p, Some(uid.uid), Some(uid.gid)).unwrap();
    }
    let log = dir.path().join("cordond.log");
    let mut child = Command::new("setpriv")
        .args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--"])
        .arg(bin("cordond"))
        .arg("--policies")
        .arg(&policies)
        .arg("--socket")
        .arg(&socket)
        .arg("--audit")
        .arg(dir.path().join("audit").join("a.jsonl"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let up = eventually(Duration::from_secs(20), || as_agent(&socket, &["status"]).code == Some(0));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    if !up {
        let _ = child.kill();
        panic!("the non-root cordond did not serve:\n{text}");
    }
    let out = as_agent(&socket, &["tools", "--all", "--json"]);
    let tools = out.json();
    let peer = tools["tools"].as_array().unwrap().iter().find(|t| t["name"] == "peer").cloned();
    let run = as_agent(&socket, &["run", "peer", "--args-json", r#"{"mode":"direct","op":"status"}"#]);
    let doctor = as_agent(&socket, &["doctor", "--json"]);
    let _ = child.kill();
    let _ = child.wait();
    let peer = peer.unwrap_or_else(|| panic!("no peer tool: {tools:#}"));
    assert_eq!(peer["available"], false, "{peer:#}");
    let reason = peer["unavailable_reason"].as_str().unwrap();
    assert!(reason.contains("unix_sockets needs invocation cgroups") && reason.contains("not root"), "{reason}");
    assert_ne!(run.code, Some(0), "an unavailable tool ran: {run:?}");
    assert_eq!(peers_check(&doctor), ("warn".to_string(), "unix_sockets tools unavailable".to_string()), "{doctor:?}");
    assert!(run.stderr.contains("unix_sockets needs invocation cgroups"), "{run:?}");
}
