//! Budgets (`[tools.NAME.budget]`, docs/budgets.md) through the real daemon, as root and as the
//! agent user: exact counts under concurrent callers, one caller's budget never spent by
//! another (per caller) and shared when the policy says `per = "all"`, `concurrent` waits
//! instead of refusing, `wall` lowers a call's timeout, the windows survive SIGTERM and SIGKILL
//! restarts, a tampered budgets file is not trusted, and every refusal is audited, shown in
//! `cordon status` to that caller only, and counted in the metrics. Windows are a minute or
//! more: nothing here waits for one to pass (counts, not time).

use std::path::Path;
use std::process::Child;

use cordon_tests::agent::{self, SOCKET_GROUP};
use cordon_tests::{Daemon, Output, eventually, require_root};
use serde_json::Value;

const POLICY: &str = r#"version = 1

[defaults]
timeout = "30s"
allow = { groups = ["cordon-t-sock"] }

[tools.tick]
description = "exit at once, five times a minute per caller"
reason = "tests"
command = ["/bin/true"]
budget = { calls = "5/min" }

[tools.pool]
description = "exit at once, three times a minute for everyone together"
reason = "tests"
command = ["/bin/true"]
budget = { calls = "3/min", per = "all" }

[tools.one-at-a-time]
description = "a short nap, one call at a time per caller"
reason = "tests"
command = ["/bin/sleep", "0.5"]
budget = { concurrent = 1 }

[tools.sleepy]
description = "sleeps past what is left of its wall budget"
reason = "tests"
command = ["/bin/sleep", "20"]
budget = { wall = "1s/hour" }

[tools.stepper]
description = "exit at once, twice a minute per caller"
reason = "tests"
command = ["/bin/true"]
budget = { calls = "2/min" }

[workflows.thrice]
description = "stepper three times: its third step finds the budget spent"
reason = "tests"

[[workflows.thrice.steps]]
tool = "stepper"

[[workflows.thrice.steps]]
tool = "stepper"

[[workflows.thrice.steps]]
tool = "stepper"
"#;

fn start(keep: &Path) -> Daemon {
    start_policy(keep, POLICY)
}

/// cordond with `policy` (written on the first start) and its audit log under `keep`, which
/// outlives it: a second start is a restart.
fn start_policy(keep: &Path, policy: &str) -> Daemon {
    let policies = keep.join("policies");
    if !policies.exists() {
        std::fs::create_dir(&policies).unwrap();
        std::fs::write(policies.join("b.toml"), policy).unwrap();
    }
    let audit = keep.join("audit").join("audit.jsonl");
    let audit = audit.to_str().unwrap().to_string();
    Daemon::start_in(
        tempfile::tempdir().unwrap(),
        policies,
        &["--socket-group", SOCKET_GROUP, "--audit", &audit, "--metrics", "127.0.0.1:0"],
    )
}

fn run(socket: &Path, as_agent: bool, tool: &str) -> Child {
    let args = ["--socket", socket.to_str().unwrap(), "run", tool, "--json"];
    let mut c = if as_agent {
        let mut c = agent::command();
        c.args(args);
        c
    } else {
        let mut c = std::process::Command::new(cordon_tests::bin("cordon"));
        c.args(args);
        c
    };
    c.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    c.spawn().unwrap()
}

fn finish(child: Child) -> Output {
    child.wait_with_output().unwrap().into()
}

/// The exit codes and error codes of `n` calls of `tool` started at once.
fn burst(socket: &Path, as_agent: bool, tool: &str, n: usize) -> Vec<(Option<i32>, Value)> {
    let children: Vec<Child> = (0..n).map(|_| run(socket, as_agent, tool)).collect();
    children.into_iter().map(finish).map(|o| (o.code, o.json())).collect()
}

fn refusals(d: &Daemon, code: &str) -> Vec<Value> {
    d.audit_records().into_iter().filter(|r| r["decision"] == "refused" && r["code"] == code).collect()
}

/// Waits until the audit log holds `n` refusals with `code`, and returns them.
fn wait_refusals(d: &Daemon, code: &str, n: usize) -> Vec<Value> {
    let ok = eventually(std::time::Duration::from_secs(10), || refusals(d, code).len() >= n);
    let found = refusals(d, code);
    assert!(ok && found.len() == n, "want {n} {code} records, found {}: {found:?}", found.len());
    found
}

fn json_str(s: &str) -> Value {
    Value::from(s)
}

fn count(results: &[(Option<i32>, Value)], code: Option<i32>) -> usize {
    results.iter().filter(|(c, _)| *c == code).count()
}

fn metrics(d: &Daemon) -> String {
    d.cordon(&["metrics"]).stdout
}

#[test]
fn exact_counts_per_caller_shared_pools_waits_wall_and_restarts() {
    require_root!("to run calls as the agent user and to own the budgets file");
    let keep = tempfile::tempdir().unwrap();
    let mut d = start(keep.path());
    let agent_uid = agent::id("-u", agent::AGENT);

    // 8 calls at once from each of two callers against 5/min: each gets exactly its 5.
    let children: Vec<(bool, Child)> = (0..16).map(|i| (i % 2 == 1, run(&d.socket, i % 2 == 1, "tick"))).collect();
    let results: Vec<(bool, Option<i32>, Value)> = children
        .into_iter()
        .map(|(agent, c)| {
            let o = finish(c);
            (agent, o.code, o.json())
        })
        .collect();
    for who in [false, true] {
        let mine: Vec<_> = results.iter().filter(|r| r.0 == who).map(|r| (r.1, r.2.clone())).collect();
        assert_eq!(count(&mine, Some(0)), 5, "agent={who}: {mine:?}");
        assert_eq!(count(&mine, Some(75)), 3, "agent={who}: {mine:?}");
        for (code, j) in mine.iter().filter(|r| r.0 == Some(75)) {
            assert_eq!(j["error"]["code"], "RATE_LIMITED", "{code:?} {j}");
            let message = j["error"]["message"].as_str().unwrap();
            let uid = if who { agent_uid } else { 0 };
            assert!(message.contains(&format!("budget tools.tick.budget.calls is used up for uid {uid}")), "{message}");
            assert!(message.contains("5 calls started of 5") && message.contains("resets at 20"), "{message}");
        }
    }
    let refused = wait_refusals(&d, "RATE_LIMITED", 6);
    for r in &refused {
        assert_eq!(r["tool"], "tick");
        assert_eq!(r["budget"], "tools.tick.budget.calls");
        assert!(r["reset"].as_str().unwrap().ends_with('Z'), "{r}");
        assert!(r["retry_after_s"].as_u64().unwrap() <= 60, "{r}");
    }
    assert_eq!(refused.iter().filter(|r| r["counted_for"] == format!("uid {agent_uid}")).count(), 3);
    let started = |d: &Daemon, tool: &str| {
        d.audit_records().iter().filter(|r| r["decision"] == "started" && r["tool"] == tool).count()
    };
    assert_eq!(started(&d, "tick"), 10, "no refused call ran");

    // per = "all": root's 3 calls spend the agent's too.
    let root = burst(&d.socket, false, "pool", 3);
    assert_eq!(count(&root, Some(0)), 3, "{root:?}");
    let agent_calls = burst(&d.socket, true, "pool", 1);
    assert_eq!(agent_calls[0].1["error"]["code"], "RATE_LIMITED", "{agent_calls:?}");
    assert!(agent_calls[0].1["error"]["message"].as_str().unwrap().contains("pool.budget.calls is used up for all"));

    // concurrent = 1: a second call at once waits for the first, then runs (never refused).
    let both = burst(&d.socket, false, "one-at-a-time", 2);
    assert_eq!(count(&both, Some(0)), 2, "{both:?}");
    let records = d.audit_records();
    let seqs: Vec<(&str, u64)> = records
        .iter()
        .filter(|r| r["tool"] == "one-at-a-time")
        .map(|r| (r["decision"].as_str().unwrap(), r["seq"].as_u64().unwrap()))
        .collect();
    let decisions: Vec<&str> = seqs.iter().map(|s| s.0).collect();
    assert_eq!(decisions, ["started", "finished", "started", "finished"], "the calls overlapped: {seqs:?}");

    // wall = 1s/hour: the 20 s sleep is timed out at the 1 s left, and says so; the next call
    // finds the budget used up.
    let first = burst(&d.socket, false, "sleepy", 1);
    assert_eq!(first[0].1["timed_out"], true, "{first:?}");
    let records = d.audit_records();
    let began = records.iter().find(|r| r["decision"] == "started" && r["tool"] == "sleepy").unwrap();
    assert_eq!(began["timeout_ms"], 1000, "{began}");
    assert_eq!(began["timeout_by"], "tools.sleepy.budget.wall", "{began}");
    let end = records.iter().find(|r| r["decision"] == "timed_out" && r["tool"] == "sleepy").unwrap();
    assert_eq!(end["timeout_by"], "tools.sleepy.budget.wall", "{end}");
    let second = burst(&d.socket, false, "sleepy", 1);
    assert_eq!(second[0].0, Some(75), "{second:?}");
    assert_eq!(second[0].1["error"]["code"], "BUDGET_EXCEEDED", "{second:?}");
    let exceeded = wait_refusals(&d, "BUDGET_EXCEEDED", 1);
    assert_eq!(exceeded[0]["budget"], "tools.sleepy.budget.wall");

    // A workflow's steps are calls like any other: the third is refused, marked as its step.
    let (o, r) = d.run_json("thrice", &serde_json::json!({}));
    assert_ne!(o.code, Some(0), "{o:?}");
    let records = d.audit_records();
    let ran = records.iter().filter(|r| r["decision"] == "started" && r["tool"] == "stepper").count();
    assert_eq!(ran, 2, "{r}");
    let step = records
        .iter()
        .find(|r| r["decision"] == "refused" && r["tool"] == "stepper")
        .unwrap_or_else(|| panic!("no refused step: {r}"));
    assert_eq!(
        (&step["code"], &step["budget"], &step["step"]),
        (&json_str("RATE_LIMITED"), &json_str("tools.stepper.budget.calls"), &Value::from(3)),
        "{step}"
    );

    // Status: root (an admin) sees every window; the agent only its own.
    let all = d.cordon(&["status", "--json"]).json();
    let keys = |s: &Value| -> Vec<String> {
        s["budgets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| format!("{} {} {}", b["key"].as_str().unwrap(), b["counted_for"].as_str().unwrap(), b["used"]))
            .collect()
    };
    let admin_rows = keys(&all);
    assert!(admin_rows.contains(&"tools.tick.budget.calls uid 0 \"5\"".to_string()), "{admin_rows:?}");
    assert!(admin_rows.contains(&format!("tools.tick.budget.calls uid {agent_uid} \"5\"")), "{admin_rows:?}");
    let mine = agent::cordon(&d.socket, &["status", "--json"]).json();
    let agent_rows = keys(&mine);
    assert_eq!(
        agent_rows,
        ["tools.pool.budget.calls all \"3\"".to_string(), format!("tools.tick.budget.calls uid {agent_uid} \"5\""),],
        "the agent sees its own windows only"
    );

    // Metrics: the refusals by budget key and code.
    let text = metrics(&d);
    for line in [
        "cordon_budget_refusals_total{budget=\"tools.tick.budget.calls\",code=\"RATE_LIMITED\"} 6",
        "cordon_budget_refusals_total{budget=\"tools.pool.budget.calls\",code=\"RATE_LIMITED\"} 1",
        "cordon_budget_refusals_total{budget=\"tools.sleepy.budget.wall\",code=\"BUDGET_EXCEEDED\"} 1",
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }

    // SIGTERM: the budgets file is written at shutdown, root's and 0600, and read back.
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(d.wait_exit(std::time::Duration::from_secs(20)).is_some_and(|s| s.success()), "{}", d.log_text());
    let file = keep.path().join("audit").join("budgets.json");
    let meta = std::fs::symlink_metadata(&file).unwrap();
    use std::os::unix::fs::MetadataExt as _;
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o600));
    drop(d);
    let d = start(keep.path());
    let after = burst(&d.socket, false, "tick", 1);
    assert_eq!(after[0].1["error"]["code"], "RATE_LIMITED", "the budget was reset by a restart: {after:?}");
    let agent_after = burst(&d.socket, true, "pool", 1);
    assert_eq!(agent_after[0].1["error"]["code"], "RATE_LIMITED", "{agent_after:?}");

    // The wall budget spent before the restart is still spent, after a SIGKILL too.
    drop(d);
    let d = start(keep.path());
    let sleepy = burst(&d.socket, false, "sleepy", 1);
    assert_eq!(sleepy[0].1["error"]["code"], "BUDGET_EXCEEDED", "{sleepy:?}");
}

#[test]
fn a_killed_daemon_loses_no_call_and_a_tampered_file_is_not_trusted() {
    require_root!("to own the budgets file");
    let keep = tempfile::tempdir().unwrap();
    let d = start(keep.path());
    // Three calls, then kill -9 before the periodic write can be relied on: the restart counts
    // them from the audit log (after the file's seq, or from the start when there is no file).
    assert_eq!(count(&burst(&d.socket, false, "tick", 3), Some(0)), 3);
    drop(d); // SIGKILL
    let d = start(keep.path());
    let two = burst(&d.socket, false, "tick", 3);
    assert_eq!(count(&two, Some(0)), 2, "3 before the kill + 2 = 5: {two:?}");
    assert_eq!(two.iter().filter(|r| r.1["error"]["code"] == "RATE_LIMITED").count(), 1, "{two:?}");
    drop(d);

    // A budgets file someone else could have written (a symlink to one that says "nothing
    // used") is not trusted: the audit log is counted instead, and the budget stays spent.
    let file = keep.path().join("audit").join("budgets.json");
    let forged = keep.path().join("forged.json");
    std::fs::write(&forged, r#"{"version":1,"seq":999999999,"windows":[]}"#).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&forged, std::fs::Permissions::from_mode(0o600)).unwrap();
    let _ = std::fs::remove_file(&file);
    std::os::unix::fs::symlink(&forged, &file).unwrap();
    let d = start(keep.path());
    let after = burst(&d.socket, false, "tick", 1);
    assert_eq!(after[0].1["error"]["code"], "RATE_LIMITED", "a symlinked file reset the budget: {after:?}");
    assert!(d.log_text().contains("budgets file not trusted"), "{}", d.log_text());
    assert!(d.log_text().contains("it is a symlink"), "{}", d.log_text());
    drop(d);

    // A file with the right form but another owner's, or a looser mode: not trusted either.
    std::fs::remove_file(&file).unwrap();
    std::fs::write(&file, r#"{"version":1,"seq":999999999,"windows":[]}"#).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let d = start(keep.path());
    let after = burst(&d.socket, false, "tick", 1);
    assert_eq!(after[0].1["error"]["code"], "RATE_LIMITED", "a 0644 file reset the budget: {after:?}");
    assert!(d.log_text().contains("its mode is 644, not 0600"), "{}", d.log_text());
    drop(d);
    let nobody = nix::unistd::User::from_name("nobody").unwrap().map_or(65534, |u| u.uid.as_raw());
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&file, Some(nobody), None).unwrap();
    let d = start(keep.path());
    let after = burst(&d.socket, false, "tick", 1);
    assert_eq!(after[0].1["error"]["code"], "RATE_LIMITED", "another owner's file reset the budget: {after:?}");
    assert!(d.log_text().contains(&format!("owned by uid {nobody}")), "{}", d.log_text());

    // The MCP front-end answers the agent with a tool error carrying the code.
    let mut s = cordon_tests::mcp_lines::Session::start(&d.socket);
    let result = s.call("tick", serde_json::json!({}));
    assert_eq!(result["isError"], true, "{result}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("RATE_LIMITED: budget tools.tick.budget.calls is used up for uid 0"), "{text}");
}

#[test]
fn egress_lowers_the_byte_cap_to_what_is_left_then_refuses() {
    require_root!("a network namespace per tool");
    const CURL: &str = "/usr/bin/curl";
    if !Path::new(CURL).exists() {
        cordon_tests::skip!(cordon_tests::Skip::MissingTool(CURL), "needs {CURL}");
        return;
    }
    let port = cordon_tests::hello_upstream();
    let policy = format!(
        r#"version = 1

[tools.fetch]
description = "fetches the loopback upstream; 100 bytes an hour through the proxy"
reason = "tests"
command = ["{CURL}", "-sS", "--max-time", "10", "http://127.0.0.1:{port}/"]
network = {{ hosts = ["127.0.0.1:{port}"] }}
budget = {{ egress = "100B/hour" }}
"#
    );
    let d = Daemon::start(&[("e.toml", &policy)]);
    // The request and the answer are more than 100 bytes: each call's cap is what is left of
    // the 100, and the proxy cuts it there; once the 100 are used, calls are refused.
    let mut refused = None;
    for _ in 0..5 {
        let (out, j) = d.run_json("fetch", &serde_json::json!({}));
        if !j["error"].is_null() {
            out.assert_code(75);
            refused = Some(j);
            break;
        }
    }
    let ended: Vec<Value> =
        d.audit_records().into_iter().filter(|r| r["decision"] == "finished" && r["tool"] == "fetch").collect();
    let moved: Vec<u64> = ended
        .iter()
        .map(|r| r["egress"]["bytes_up"].as_u64().unwrap() + r["egress"]["bytes_down"].as_u64().unwrap())
        .collect();
    assert!(moved[0] > 0 && moved.iter().sum::<u64>() <= 100, "the calls moved {moved:?} bytes: {ended:?}");
    // The first call was cut at its cap, the whole 100 (the proxy counts what it would not
    // forward too): it was charged all of it, and the next call is refused.
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!((&ended[0]["egress"]["cut"], &ended[0]["egress_charged"]), (&Value::from(1), &Value::from(100)));
    let refused = refused.unwrap_or_else(|| panic!("never refused: {moved:?}"));
    assert_eq!(refused["error"]["code"], "BUDGET_EXCEEDED", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("budget tools.fetch.budget.egress is used up for uid 0: 100B used of 100B"), "{message}");
}

#[test]
fn cpu_is_charged_at_the_end_from_the_calls_cgroup_then_refused() {
    require_root!("cgroups for the calls' CPU time");
    // A busy loop of one second (wall) per call against 200 ms of CPU an hour: each call is
    // charged the CPU its cgroup counted (never stopped for it), and once the sum reaches the
    // budget the next call is refused.
    let policy = r#"version = 1

[tools.burn]
description = "a busy loop for one second"
reason = "tests"
command = ["/usr/bin/timeout", "1", "/bin/sh", "-c", "while :; do :; done"]
ok_exit_codes = [0, 124]
budget = { cpu = "200ms/hour", calls = "50/hour" }
"#;
    let keep = tempfile::tempdir().unwrap();
    let d = start_policy(keep.path(), policy);
    if d.cordon(&["status", "--json"]).json()["cgroup_mode"] == "none" {
        // Without cgroups a cpu budget cannot be kept: the tool is unavailable, and says why.
        let (_, j) = d.run_json("burn", &serde_json::json!({}));
        assert_eq!(j["error"]["code"], "TOOL_UNAVAILABLE", "{j}");
        assert!(j["error"]["message"].as_str().unwrap().contains("cpu budgets need cgroups"), "{j}");
        cordon_tests::skip!(cordon_tests::Skip::NoCgroupDelegation, "no cgroups here to count CPU");
        return;
    }
    let mut refused = None;
    for _ in 0..20 {
        let (out, j) = d.run_json("burn", &serde_json::json!({}));
        if !j["error"].is_null() {
            out.assert_code(75);
            refused = Some(j);
            break;
        }
    }
    let refused = refused.unwrap_or_else(|| panic!("never refused: {:#?}", d.audit_records()));
    assert_eq!(refused["error"]["code"], "BUDGET_EXCEEDED", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("budget tools.burn.budget.cpu is used up for uid 0"), "{message}");
    // Exactly the calls that found CPU left ran: every one but the last ended below 200 ms in all.
    let spent: Vec<u64> = d
        .audit_records()
        .iter()
        .filter(|r| r["decision"] == "finished" && r["tool"] == "burn")
        .map(|r| r["cpu_ms"].as_u64().unwrap_or_else(|| panic!("no cpu_ms: {r}")))
        .collect();
    assert!(!spent.is_empty() && spent[0] > 0, "{spent:?}");
    let total: u64 = spent.iter().sum();
    let before_last: u64 = spent[..spent.len() - 1].iter().sum();
    assert!(before_last < 200 && total >= 200, "cpu_ms per call: {spent:?}");
    let exceeded = wait_refusals(&d, "BUDGET_EXCEEDED", 1);
    assert_eq!(exceeded[0]["budget"], "tools.burn.budget.cpu");

    // A restart counts the CPU again from the terminal records' cpu_ms: still used up.
    drop(d);
    let d = start_policy(keep.path(), policy);
    let (_, j) = d.run_json("burn", &serde_json::json!({}));
    assert_eq!(j["error"]["code"], "BUDGET_EXCEEDED", "a restart reset the cpu budget: {j}");
}

#[test]
fn a_budget_added_by_a_reload_counts_the_calls_already_in_its_window() {
    require_root!("to own the budgets file");
    let plain =
        "version = 1\n[tools.grow]\ndescription = \"exit at once\"\nreason = \"tests\"\ncommand = [\"/bin/true\"]\n";
    let d = Daemon::start(&[("g.toml", plain)]);
    assert_eq!(count(&burst(&d.socket, false, "grow", 3), Some(0)), 3, "no budget yet");
    // The reload adds calls = 4/min: the 3 calls already made count, so one more runs.
    d.write_policy("g.toml", &format!("{plain}budget = {{ calls = \"4/min\" }}\n"));
    d.cordon(&["reload"]).assert_code(0);
    let after = burst(&d.socket, false, "grow", 1);
    assert_eq!(after[0].0, Some(0), "{after:?}");
    let over = burst(&d.socket, false, "grow", 1);
    assert_eq!(over[0].1["error"]["code"], "RATE_LIMITED", "the reload started the budget from zero: {over:?}");
    assert!(over[0].1["error"]["message"].as_str().unwrap().contains("4 calls started of 4"), "{over:?}");
    // Another reload adding a measure (per = "all" changes who it counts for too) counts again
    // from the log, once: 4 calls ran, 5/min for everyone leaves exactly one.
    d.write_policy("g.toml", &format!("{plain}budget = {{ calls = \"5/min\", per = \"all\" }}\n"));
    d.cordon(&["reload"]).assert_code(0);
    assert_eq!(burst(&d.socket, false, "grow", 1)[0].0, Some(0));
    let over = burst(&d.socket, false, "grow", 1);
    assert_eq!(over[0].1["error"]["code"], "RATE_LIMITED", "{over:?}");
    assert!(
        over[0].1["error"]["message"].as_str().unwrap().contains("used up for all: 5 calls started of 5"),
        "{over:?}"
    );
}
