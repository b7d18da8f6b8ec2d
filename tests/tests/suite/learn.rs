//! The learn run mode (`cordon run TOOL --learn DIR`, docs/learn.md): one admin's call with an
//! extra tree granted read and execute, and the report of what the tool opened in it, from the
//! kernel (fanotify on a private read-only bind of the tree). Real cordond, as root: a tool that
//! fails without the tree passes with it and the report lists exactly what it opened and ran,
//! and not what another process on the host opened meanwhile; the tree stays read-only; an agent
//! caller, `/`, a symlink are refused; a file name with a newline stays escaped and one record.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cordon_tests::agent::{self, AGENT, SOCKET_GROUP};
use cordon_tests::{Daemon, eventually};
use serde_json::Value;

fn q(s: impl AsRef<Path>) -> String {
    serde_json::to_string(s.as_ref().to_str().unwrap()).unwrap()
}

struct Fixture {
    daemon: Daemon,
    tree: PathBuf,
}

/// A tree under no grant: `lib/a.txt`, `lib/b.txt`, `lib/new\nline.txt`, `bin/true` (a copy of
/// the host's), `unused.txt`; the tools read two files and run `bin/true` there.
fn fixture() -> Fixture {
    let top = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let tree = top.path().join("tree");
    for d in ["lib", "bin", "empty"] {
        std::fs::create_dir_all(tree.join(d)).unwrap();
    }
    for f in ["lib/a.txt", "lib/b.txt", "lib/new\nline.txt", "unused.txt"] {
        std::fs::write(tree.join(f), "x\n").unwrap();
    }
    std::fs::copy("/bin/true", tree.join("bin/true")).unwrap();
    std::os::unix::fs::symlink(&tree, top.path().join("link")).unwrap();
    let t = tree.to_str().unwrap();
    let script = |body: &str| q(body.replace("$T", t));
    let policy = format!(
        r#"version = 1

[defaults]
timeout = "20s"
allow = {{ users = ["root", {agent}] }}

[tools.uses-tree]
description = "reads two files and runs a program under a tree it has no grant for"
reason = "learn tests"
command = ["sh", "-c", {uses}]

[tools.waits]
description = "reads a file, then waits for the test's go file (stat only) before it ends"
reason = "learn tests"
command = ["sh", "-c", {waits}]

[tools.writes]
description = "tries to change and create files under the learn tree"
reason = "learn tests"
command = ["sh", "-c", {writes}]

[tools.confirmed]
description = "reads a file under the tree, after a confirmation"
reason = "learn tests"
command = ["sh", "-c", {confirmed}]
confirm = "agent"

[tools.writer]
description = "has a write grant inside the tree"
reason = "learn tests"
command = ["true"]
write = [{lib}]

[tools.newline]
description = "reads a file whose name has a newline"
reason = "learn tests"
command = ["sh", "-c", {newline}]
"#,
        agent = q(AGENT),
        uses = script("cat $T/lib/a.txt $T/lib/b.txt && $T/bin/true && echo done"),
        waits = script(
            "cat $T/lib/a.txt; i=0; while [ ! -e $T/go ] && [ $i -lt 400 ]; do i=$((i+1)); sleep 0.05; done; echo waited"
        ),
        writes = script(
            "echo y > $T/lib/a.txt || echo change-failed; echo y > $T/created || echo create-failed; mkdir $T/made || echo mkdir-failed"
        ),
        newline = script("cat '$T/lib/new\nline.txt'"),
        confirmed = script("cat $T/lib/a.txt"),
        lib = q(tree.join("lib")),
    );
    let policies = top.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("learn.toml"), policy).unwrap();
    Fixture { daemon: Daemon::start_in(top, policies, &["--socket-group", SOCKET_GROUP]), tree }
}

/// `learned` of a `--json` result as (path, read, exec), in path order.
fn learned(v: &Value) -> Vec<(String, bool, bool)> {
    v["learned"]
        .as_array()
        .map(|a| {
            a.iter().map(|l| (l["path"].as_str().unwrap().to_string(), l["read"] == true, l["exec"] == true)).collect()
        })
        .unwrap_or_default()
}

fn s(p: PathBuf) -> String {
    p.to_str().unwrap().to_string()
}

#[test]
fn a_learn_run_reports_exactly_what_the_tool_opened_and_ran_and_nothing_of_other_processes() {
    cordon_tests::require_root!("learn mode needs a root cordond (fanotify)");
    let f = fixture();
    let (d, tree) = (&f.daemon, f.tree.to_str().unwrap());

    // Without the tree the tool is denied (cat fails: landlock).
    let plain = d.cordon(&["run", "uses-tree", "--json"]);
    assert_eq!(plain.json()["ok"], false, "{plain:?}");
    assert!(plain.json()["stdout"].as_str().unwrap().is_empty(), "{plain:?}");

    // With it, the tool passes and the report is exactly its two reads and one exec.
    let out = d.cordon(&["run", "uses-tree", "--learn", tree, "--json"]);
    let v = out.json();
    assert_eq!(v["ok"], true, "{out:?}\n{}", d.log_text());
    assert_eq!(v["stdout"], "x\nx\ndone\n");
    assert_eq!(
        learned(&v),
        vec![
            (s(f.tree.join("bin/true")), false, true),
            (s(f.tree.join("lib/a.txt")), true, false),
            (s(f.tree.join("lib/b.txt")), true, false),
        ],
        "{v}"
    );
    assert!(v.get("learn_incomplete").is_none(), "{v}");

    // The text report: the paths, and the narrowest grant.
    let text = d.cordon(&["run", "uses-tree", "--learn", tree]);
    text.assert_code(0);
    assert_eq!(text.stdout, "x\nx\ndone\n");
    assert!(text.stderr.contains("cordon: learned (complete):"), "{}", text.stderr);
    assert!(text.stderr.contains(&format!("  {tree}: 3 paths")), "{}", text.stderr);
    assert!(text.stderr.contains(&format!("  read = [{}]", q(f.tree.join("lib")))), "{}", text.stderr);
    assert!(text.stderr.contains(&format!("  exec = [{}]", q(f.tree.join("bin/true")))), "{}", text.stderr);
    assert!(!text.stderr.contains("unused.txt"), "{}", text.stderr);

    // The audit: `started` names the tree, the terminal record holds what was learnt.
    let id = v["invocation_id"].as_str().unwrap().to_string();
    let mut records = Vec::new();
    assert!(eventually(Duration::from_secs(5), || {
        records = d.audit_records().into_iter().filter(|r| r["id"] == id.as_str()).collect();
        records.len() == 2
    }));
    assert_eq!(records[0]["decision"], "started");
    assert_eq!(records[0]["learn"], serde_json::json!([tree]));
    assert_eq!(records[1]["decision"], "finished");
    assert_eq!(records[1]["learned"]["count"], 3);
    assert_eq!(records[1]["learned"]["paths"][0]["path"], s(f.tree.join("bin/true")));
    assert_eq!(records[1]["learned"]["paths"][0]["exec"], true);
    assert_eq!(records[1]["learn_incomplete"], false);

    // Another process on the host opens a file of the tree while a learn run watches it: not
    // reported (its opens go through the host's mount, not the call's private bind).
    let mut run = d.cordon_spawn(&["run", "waits", "--learn", tree, "--json"]);
    let unused = f.tree.join("unused.txt");
    let mut opens = 0;
    while run.try_wait().unwrap().is_none() {
        std::fs::read(&unused).unwrap();
        opens += 1;
        if opens == 20 {
            std::fs::write(f.tree.join("go"), "").unwrap();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = cordon_tests::Output::from(run.wait_with_output().unwrap());
    let v = out.json();
    assert_eq!(v["stdout"], "x\nwaited\n", "{out:?}");
    assert!(opens >= 20, "the host opened unused.txt {opens} times");
    assert_eq!(learned(&v), vec![(s(f.tree.join("lib/a.txt")), true, false)], "{v}");
}

#[test]
fn the_learn_tree_stays_read_only_and_a_newline_in_a_name_stays_escaped() {
    cordon_tests::require_root!("learn mode needs a root cordond (fanotify)");
    let f = fixture();
    let (d, tree) = (&f.daemon, f.tree.to_str().unwrap());
    // Every write under the tree fails with EROFS (the private bind is read-only; landlock
    // grants it no write right either, but the mount refuses first).
    let out = d.cordon(&["run", "writes", "--learn", tree, "--json"]);
    let v = out.json();
    assert_eq!(v["stdout"], "change-failed\ncreate-failed\nmkdir-failed\n", "{out:?}");
    let stderr = v["stderr"].as_str().unwrap();
    assert_eq!(stderr.matches("Read-only file system").count(), 3, "{stderr}");
    assert_eq!(std::fs::read_to_string(f.tree.join("lib/a.txt")).unwrap(), "x\n");
    assert!(!f.tree.join("created").exists() && !f.tree.join("made").exists());

    let out = d.cordon(&["run", "newline", "--learn", tree, "--json"]);
    let v = out.json();
    assert_eq!(v["ok"], true, "{out:?}");
    let name = s(f.tree.join("lib/new\nline.txt"));
    assert_eq!(learned(&v), vec![(name.clone(), true, false)], "{v}");
    let text = d.cordon(&["run", "newline", "--learn", tree]);
    let escaped = name.replace('\n', "\\n");
    assert!(text.stderr.contains(&escaped), "{}", text.stderr);
    assert!(!text.stderr.contains(&name), "{}", text.stderr);
    // The audit log: still one line per record, the name a JSON string.
    let id = v["invocation_id"].as_str().unwrap().to_string();
    let mut done = None;
    assert!(eventually(Duration::from_secs(5), || {
        done = d.audit_records().into_iter().find(|r| r["id"] == id.as_str() && r["decision"] == "finished");
        done.is_some()
    }));
    assert_eq!(done.unwrap()["learned"]["paths"][0]["path"], name.as_str());
}

#[test]
fn learn_is_refused_to_an_agent_for_slash_and_through_a_symlink() {
    cordon_tests::require_root!("learn mode needs a root cordond (fanotify)");
    let f = fixture();
    let (d, tree) = (&f.daemon, f.tree.to_str().unwrap());

    let out = agent::cordon(&d.socket, &["run", "uses-tree", "--learn", tree, "--json"]);
    assert_eq!(out.json()["error"]["code"], "PERMISSION_DENIED", "{out:?}");
    let mut refused = Vec::new();
    assert!(eventually(Duration::from_secs(5), || {
        refused = d
            .audit_records()
            .into_iter()
            .filter(|r| r["decision"] == "unauthorized" && r["operation"] == "invoke")
            .collect();
        refused.len() == 1
    }));
    assert_eq!(refused[0]["caller"]["uid"], agent::id("-u", AGENT));

    let slash = d.cordon(&["run", "uses-tree", "--learn", "/", "--json"]);
    let e = &slash.json()["error"];
    assert_eq!(e["code"], "LEARN_REFUSED", "{slash:?}");
    assert!(e["message"].as_str().unwrap().contains("learn tree / is the whole filesystem"), "{e}");

    let link = f.tree.parent().unwrap().join("link");
    let through = d.cordon(&["run", "uses-tree", "--learn", link.to_str().unwrap(), "--json"]);
    let e = &through.json()["error"];
    assert_eq!(e["code"], "LEARN_REFUSED", "{through:?}");
    assert!(e["message"].as_str().unwrap().contains("symlink"), "{e}");
    // A tree that holds one of the tool's write grants (the read-only bind would take it away).
    let holds = d.cordon(&["run", "writer", "--learn", tree, "--json"]);
    let e = &holds.json()["error"];
    assert_eq!(e["code"], "LEARN_REFUSED", "{holds:?}");
    assert!(e["message"].as_str().unwrap().contains("holds the tool's write grant"), "{e}");
    let inside = d.cordon(&["run", "writer", "--learn", &s(f.tree.join("lib")), "--json"]);
    assert!(inside.json()["error"]["message"].as_str().unwrap().contains("is inside the tool's write grant"));
    // Nothing ran for any of them.
    assert_eq!(d.audit_records().iter().filter(|r| r["decision"] == "started").count(), 0);

    // A `confirm` tool still needs its confirmation; the confirmed call is the learn run.
    let asked = d.cordon(&["run", "confirmed", "--learn", tree, "--json"]);
    asked.assert_code(3);
    let token = asked.json()["confirmation_required"]["token"].as_str().unwrap().to_string();
    let done = d.cordon(&["confirm", &token, "--json"]);
    let v = done.json();
    assert_eq!(v["stdout"], "x\n", "{done:?}");
    assert_eq!(learned(&v), vec![(s(f.tree.join("lib/a.txt")), true, false)], "{v}");

    // The text form says it and exits with the data code (65).
    let text = d.cordon(&["run", "uses-tree", "--learn", "/"]);
    text.assert_code(65);
    assert!(text.stderr.contains("LEARN_REFUSED") || text.stderr.contains("whole filesystem"), "{}", text.stderr);
}
