//! Namespaces prepared ahead of calls (daemon/sandbox/src/pool.rs), through the real daemon as
//! root: a call's private `/tmp` and `/dev/shm` and a `hosts` tool's network namespace come from
//! a bounded pool, each used by one call only. Nothing of a previous call (of any identity) is in
//! them, the mounts are as before (tmpfs, mode 1777, root's), the pools stay within their
//! bounds across many calls and a reload, and a killed daemon leaves no mount on the host.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use cordon_tests::{Daemon, eventually, require_root, toml_str};
use serde_json::{Value, json};

const ATTACK: &str = env!("CARGO_BIN_EXE_cordon-attack");

/// The pool's bounds (daemon/sandbox/src/pool.rs): per shape, and network namespaces.
const PER_SHAPE: usize = 4;
const NETS: usize = 4;

/// One `/bin/sh -c {{script}}` tool per `(name, extra keys)`, and one attack tool with `hosts`.
fn policy(tools: &[(&str, &str)]) -> String {
    let mut text = String::from("version = 1\n");
    for (name, extra) in tools {
        text.push_str(&format!(
            r#"
[tools.{name}]
description = "a shell script"
reason = "pool tests"
command = ["/bin/sh", "-c", "{{{{script}}}}"]
accept_warnings = ["interpreter-code", "leading-dash"]
timeout = "20s"
{extra}

[tools.{name}.params.script]
type = "string"
pattern = "[^\\x00]*"
required = true
"#
        ));
    }
    let bin = Path::new(ATTACK).parent().unwrap();
    text.push_str(&cordon_tests::attack_tool(
        "net",
        Path::new(ATTACK),
        &format!("exec = [{}]\nnetwork = {{ hosts = [\"127.0.0.1:9\"] }}", toml_str(bin)),
    ));
    text
}

#[track_caller]
fn sh(d: &Daemon, tool: &str, script: &str) -> String {
    let (out, j) = d.run_json(tool, &json!({ "script": script }));
    assert!(j.get("error").is_none(), "{tool} was not run: {out:?}\n{}", d.log_text());
    assert_eq!(j["exit_code"], 0, "{tool}: {j}");
    j["stdout"].as_str().unwrap_or_default().to_string()
}

#[track_caller]
fn attack(d: &Daemon, args: &[&str]) -> Value {
    let mut a = json!({ "attack": args[0] });
    for (k, v) in ["a", "b", "c"].iter().zip(&args[1..]) {
        a[*k] = json!(v);
    }
    let (out, j) = d.run_json("net", &a);
    assert!(j.get("error").is_none(), "net was not run: {out:?}\n{}", d.log_text());
    let line = j["stdout"].as_str().unwrap_or_default().lines().next().unwrap_or_default().to_string();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("no JSON line from the attack ({e}): {j:#}"))
}

/// The distinct mount and network namespaces cordond holds by descriptor, but the host's own
/// (cordond runs in the test's namespaces; its pool's thread holds them to return to).
fn held_namespaces(pid: i32) -> (usize, usize) {
    let (mut mnt, mut net) = (HashSet::new(), HashSet::new());
    let host: Vec<String> = ["mnt", "net"]
        .iter()
        .map(|k| std::fs::read_link(format!("/proc/self/ns/{k}")).unwrap().to_string_lossy().into_owned())
        .collect();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().flatten() {
        let Ok(target) = std::fs::read_link(e.path()) else { continue };
        let t = target.to_string_lossy().into_owned();
        if host.contains(&t) {
            continue;
        }
        if t.starts_with("mnt:[") {
            mnt.insert(t);
        } else if t.starts_with("net:[") {
            net.insert(t);
        }
    }
    (mnt.len(), net.len())
}

/// Lists /tmp and /dev/shm (counts), their modes, owners and filesystem, then leaves a marker in
/// each for the next call to find.
const LOOK_AND_MARK: &str = "echo tmp=$(ls -A /tmp | wc -l) shm=$(ls -A /dev/shm | wc -l); \
     stat -c '%a %u %g' /tmp /dev/shm; stat -f -c %T /tmp /dev/shm; \
     echo mark > /tmp/cordon-pool-marker && echo mark > /dev/shm/cordon-pool-marker && id -u";

#[test]
fn successive_calls_of_any_identity_never_see_each_others_temp_files() {
    require_root!("a daemon that can make mount namespaces");
    let d = Daemon::start(&[(
        "p.toml",
        &policy(&[("as-root", ""), ("as-nobody", "run_as = \"nobody\""), ("small", "temp = { size = \"1MiB\" }")]),
    )]);
    // Enough calls that most come from the pool (refilled between them), alternating identities.
    for i in 0..16 {
        let (tool, uid) = if i % 2 == 0 { ("as-root", "0") } else { ("as-nobody", "65534") };
        let out = sh(&d, tool, LOOK_AND_MARK);
        assert_eq!(out, format!("tmp=0 shm=0\n1777 0 0\n1777 0 0\ntmpfs\ntmpfs\n{uid}\n"), "call {i} ({tool})");
        if i % 4 == 3 {
            // Let the pool refill: the next calls then surely come from it.
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // Another shape (size bound) gets its own namespaces, bounded as asked.
    for _ in 0..4 {
        let out = sh(&d, "small", "stat -f -c '%T %b %S' /tmp /dev/shm; ls -A /tmp /dev/shm | grep -c marker; true");
        assert_eq!(out, "tmpfs 256 4096\ntmpfs 256 4096\n0\n");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_namespaces_cordond_holds_stay_within_the_pool_bounds_across_calls_and_a_reload() {
    require_root!("a daemon that can make mount namespaces");
    let tools = [("a", ""), ("b", "temp = { size = \"2MiB\" }")];
    let d = Daemon::start(&[("p.toml", &policy(&tools))]);
    // Two temp shapes, the hosts shape, and the views (one here: no write roots).
    let bound = |(mnt, net): (usize, usize)| mnt <= 2 * PER_SHAPE + 1 && net <= NETS;
    for _ in 0..12 {
        sh(&d, "a", "true");
        sh(&d, "b", "true");
        assert_eq!(attack(&d, &["net-view"])["interfaces"], json!(["lo"]));
    }
    assert!(eventually(Duration::from_secs(5), || bound(held_namespaces(d.pid()))), "{:?}", held_namespaces(d.pid()));
    // Filled ahead: at least one of each is ready once the pool's thread has caught up.
    assert!(
        eventually(Duration::from_secs(5), || {
            let (mnt, net) = held_namespaces(d.pid());
            mnt > 1 && net >= 1
        }),
        "nothing pooled: {:?}",
        held_namespaces(d.pid())
    );
    // A reload makes new views: the old views' pooled namespaces go, the bound holds.
    d.write_policy("p.toml", &policy(&[("a", ""), ("b", "temp = { size = \"2MiB\" }"), ("c", "")]));
    d.cordon(&["reload"]).assert_code(0);
    for _ in 0..6 {
        sh(&d, "a", "true");
        sh(&d, "c", "true");
    }
    assert!(eventually(Duration::from_secs(5), || bound(held_namespaces(d.pid()))), "{:?}", held_namespaces(d.pid()));
}

#[test]
fn a_hosts_call_gets_a_namespace_no_call_used_with_only_its_listener() {
    require_root!("a daemon that can make network namespaces");
    let d = Daemon::start(&[("p.toml", &policy(&[]))]);
    let host = std::fs::read_link("/proc/self/ns/net").unwrap().display().to_string();
    for i in 0..8 {
        // A connection to the proxy's port that the tool closes first when it exits: its end
        // stays in TIME_WAIT in that namespace for a minute, listed in /proc/net/tcp.
        let r = attack(&d, &["tcp-connect-to", "127.0.0.1", "3128"]);
        assert_eq!(r["ok"], true, "{r}");
        // The next call's namespace holds exactly one socket, its listener (a header line and
        // one line of 150 bytes each): nothing queued or left from an earlier call. (Namespace
        // inode numbers are recycled once one is freed, so they prove nothing here.)
        let r = attack(&d, &["read", "/proc/self/net/tcp"]);
        assert_eq!(r["bytes"], 300, "call {i}: {r}");
        let r = attack(&d, &["net-view"]);
        assert_eq!(r["interfaces"], json!(["lo"]), "{r}");
        assert_ne!(r["netns"], json!(host), "call {i} ran in the host's namespace");
        // The listener is cordond's: never among the tool's descriptors.
        assert_eq!(attack(&d, &["fds"])["fds"], json!([0, 1, 2]));
        if i % 2 == 1 {
            std::thread::sleep(Duration::from_millis(150));
        }
    }
}

#[test]
fn a_killed_daemon_leaves_no_pooled_mount_on_the_host() {
    require_root!("a daemon that can make mount namespaces");
    // A size no other test uses, to find the pool's tmpfs by its mount options.
    let mut d = Daemon::start(&[("p.toml", &policy(&[("odd", "temp = { size = \"3MiB\" }")]))]);
    let ours = || std::fs::read_to_string("/proc/self/mountinfo").unwrap().lines().any(|l| l.contains("size=3072k"));
    for _ in 0..4 {
        assert_eq!(sh(&d, "odd", "stat -f -c '%b' /tmp"), "768\n");
        assert_eq!(attack(&d, &["net-view"])["interfaces"], json!(["lo"]));
    }
    assert!(eventually(Duration::from_secs(5), || held_namespaces(d.pid()).0 >= 2), "nothing pooled");
    assert!(!ours(), "a pooled tmpfs is in the host's mount table");
    let pid = d.pid();
    d.signal(nix::sys::signal::Signal::SIGKILL);
    assert!(d.wait_exit(Duration::from_secs(10)).is_some(), "cordond did not die");
    assert!(cordon_tests::process_gone(pid));
    assert!(!ours(), "a pooled tmpfs is in the host's mount table after kill -9");
}
