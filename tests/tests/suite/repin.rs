//! The re-pin rule (docs/pins.md), both sides of it, through the real daemon. A developer's own
//! `rm -rf target` (then a rebuild, or nothing) must not lock their agent out: a grant root the
//! call's identity owns, recreated by that identity in a place only root and it control, is
//! re-pinned at the next call (a missing write root created, mode 0700, as that identity), with
//! a `repinned` record. Every other change still makes the tool unavailable until a reload:
//! recreated by another account, as a symlink, as a file, group/other-writable, under a
//! directory another account can write, as a mount point, or for a call that runs as root.
//! Called by a root caller (the tool runs as the project's owner through
//! `run_as = { owner_of = "working_dir" }`) and by the unprivileged agent user as the owner.
//! Needs root (a test user, chown, mount); skips otherwise.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;

use cordon_tests::agent::{self, AGENT, SOCKET_GROUP};
use cordon_tests::{Daemon, require_root};
use serde_json::{Value, json};

const ATTACK: &str = env!("CARGO_BIN_EXE_cordon-attack");

fn q(s: impl AsRef<Path>) -> String {
    serde_json::to_string(s.as_ref().to_str().unwrap()).unwrap()
}

fn agent_uid() -> u32 {
    agent::id("-u", AGENT)
}

/// Runs a shell command as `user` (the developer's own action).
fn as_user(user: &str, script: &str) {
    let out = Command::new("setpriv")
        .args(["--reuid", user, "--regid", user, "--init-groups", "--", "sh", "-ec", script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
}

fn sh(script: &str) {
    let out = Command::new("sh").args(["-ec", script]).output().unwrap();
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
}

fn dev_ino(p: &Path) -> String {
    let m = std::fs::symlink_metadata(p).unwrap();
    format!("{}:{}", m.dev(), m.ino())
}

/// A developer's home-like tree under a root-owned 0755 area: `home/dev` (the agent's), with
/// the project `proj` and its build output `proj/target`, both the agent's, mode 0755.
struct Project {
    _area: tempfile::TempDir,
    root: PathBuf,
    proj: PathBuf,
    target: PathBuf,
}

impl Project {
    fn new() -> Project {
        let area = tempfile::Builder::new().prefix("cordon-repin-").tempdir().unwrap();
        let root = area.path().to_path_buf();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let home = root.join("home/dev");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::set_permissions(root.join("home"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let uid = agent_uid();
        let gid = agent::id("-g", AGENT);
        std::os::unix::fs::chown(&home, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
        let proj = home.join("proj");
        let target = proj.join("target");
        as_user(AGENT, &format!("umask 022; mkdir -p {}", target.display()));
        Project { _area: area, root, proj, target }
    }

    /// Starts cordond on tools that write `target`: `owned` runs as the project's owner, `plain`
    /// as its caller.
    fn daemon(&self) -> Daemon {
        self.daemon_writing(&self.target)
    }

    /// [`Project::daemon`] with `write` as the tools' write root.
    fn daemon_writing(&self, write: &Path) -> Daemon {
        let tool = |name: &str, extra: &str| {
            let keys = format!(
                "exec = [{}]\ntimeout = \"5s\"\nallow = {{ users = [\"{AGENT}\"] }}\nworking_dir = {}\nread = [{}]\n\
                 write = [{}]\n{extra}",
                q(Path::new(ATTACK).parent().unwrap()),
                q(&self.proj),
                q(&self.proj),
                q(write),
            );
            cordon_tests::attack_tool(name, Path::new(ATTACK), &keys)
        };
        let policy =
            format!("version = 1\n{}{}", tool("owned", "run_as = { owner_of = \"working_dir\" }"), tool("plain", ""));
        let policies = self.root.join("policies");
        std::fs::create_dir(&policies).unwrap();
        std::fs::write(policies.join("repin.toml"), policy).unwrap();
        let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        Daemon::start_in(dir, policies, &["--socket-group", SOCKET_GROUP])
    }
}

/// `cordon run TOOL` writing `path`, by root or the agent: the exit code and the `--json` result.
fn write(d: &Daemon, agent: bool, tool: &str, path: &Path) -> (Option<i32>, Value) {
    let call = json!({ "attack": "write", "a": path.to_str().unwrap() }).to_string();
    let argv = ["run", tool, "--args-json", &call, "--json"];
    let out = if agent { agent::cordon(&d.socket, &argv) } else { d.cordon(&argv) };
    let v = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{tool}: not JSON ({e}): {out:?}"));
    (out.code, v)
}

#[track_caller]
fn wrote(r: &(Option<i32>, Value)) {
    assert_eq!(r.0, Some(0), "{:#}", r.1);
    let line = r.1["stdout"].as_str().unwrap_or_default().lines().next().unwrap_or_default().to_string();
    let report: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("no attack line ({e}): {:#}", r.1));
    assert_eq!(report["ok"], true, "{:#}", r.1);
}

/// Refused as unavailable, not re-pinned, for `why`.
#[track_caller]
fn refused(r: &(Option<i32>, Value), target: &Path, why: &str) {
    assert_eq!(r.0, Some(69), "{:#}", r.1);
    assert_eq!(r.1["error"]["code"], "TOOL_UNAVAILABLE", "{:#}", r.1);
    let message = r.1["error"]["message"].as_str().unwrap();
    assert!(message.contains(&format!("write {} changed since the registry loaded", target.display())), "{message}");
    assert!(message.contains("(not re-pinned: ") && message.contains(why), "{message}\nexpected: {why}");
    assert!(message.contains("docs/pins.md") && message.contains("cordon reload"), "{message}");
}

fn repinned(d: &Daemon) -> Vec<Value> {
    d.audit_records().into_iter().filter(|r| r["decision"] == "repinned").collect()
}

/// The developer's `rm -rf target && mkdir target` (and a missing target) re-pins for both
/// callers of the owner's tool; the write lands in the new directory; one record per re-pin.
fn recreated_by_the_owner(agent_calls: bool) {
    let p = Project::new();
    let d = p.daemon();
    wrote(&write(&d, agent_calls, "owned", &p.target.join("a")));
    let was = dev_ino(&p.target);

    as_user(AGENT, &format!("rm -rf {t} && mkdir {t}", t = p.target.display()));
    let now = dev_ino(&p.target);
    wrote(&write(&d, agent_calls, "owned", &p.target.join("b")));
    assert!(p.target.join("b").exists(), "the write went to the new directory");
    assert_eq!(std::fs::metadata(p.target.join("b")).unwrap().uid(), agent_uid());
    let records = repinned(&d);
    assert_eq!(records.len(), 1, "{records:#?}");
    let r = &records[0];
    assert_eq!(
        (&r["tool"], &r["key"], &r["path"], &r["was"], &r["now"], &r["created"], &r["run_as"]["uid"]),
        (
            &json!("owned"),
            &json!("write"),
            &json!(p.target.to_str().unwrap()),
            &json!(was),
            &json!(now),
            &json!(false),
            &json!(agent_uid())
        ),
        "{r:#}"
    );
    // Later calls use the re-pinned root: no second record.
    wrote(&write(&d, agent_calls, "owned", &p.target.join("c")));
    assert_eq!(repinned(&d).len(), 1);
    // Listed as available to the agent.
    let listed = agent::cordon(&d.socket, &["tools", "--json"]).json();
    assert!(listed["tools"].as_array().unwrap().iter().any(|t| t["name"] == "owned"), "{listed:#}");

    // `cargo clean` with no rebuild yet: the write root is created, as the owner, mode 0700.
    as_user(AGENT, &format!("rm -rf {}", p.target.display()));
    wrote(&write(&d, agent_calls, "owned", &p.target.join("d")));
    let m = std::fs::symlink_metadata(&p.target).unwrap();
    assert!(m.is_dir());
    assert_eq!((m.uid(), m.mode() & 0o7777), (agent_uid(), 0o700));
    let records = repinned(&d);
    assert_eq!(records.len(), 2, "{records:#?}");
    assert_eq!((&records[1]["created"], &records[1]["now"]), (&json!(true), &json!(dev_ino(&p.target))));
}

#[test]
fn a_write_root_the_owner_recreates_is_repinned_for_a_root_caller_of_the_owners_tool() {
    require_root!("to create a test user and chown test directories");
    recreated_by_the_owner(false);
}

#[test]
fn a_write_root_the_owner_recreates_is_repinned_for_the_owner_calling() {
    require_root!("to create a test user and chown test directories");
    recreated_by_the_owner(true);
}

/// A tool that runs as its caller: the agent's call re-pins (it runs as the owner), root's
/// never does (root's paths are the admin's).
#[test]
fn a_call_that_runs_as_root_never_repins_and_the_owners_call_does() {
    require_root!("to create a test user and chown test directories");
    let p = Project::new();
    let d = p.daemon();
    as_user(AGENT, &format!("rm -rf {t} && mkdir {t}", t = p.target.display()));
    refused(&write(&d, false, "plain", &p.target.join("x")), &p.target, "the call runs as root");
    assert!(!p.target.join("x").exists());
    wrote(&write(&d, true, "plain", &p.target.join("y")));
    assert_eq!(repinned(&d).len(), 1);
}

/// Each way the new node or its place fails the rule, for both callers: refused, nothing
/// written, no record.
#[test]
fn recreated_by_someone_else_or_as_something_else_stays_unavailable() {
    require_root!("to create a test user, chown and mount test directories");
    let nobody = agent::id("-u", "nobody");
    type Setup = Box<dyn Fn(&Project)>;
    let cases: Vec<(&str, Setup, String)> = vec![
        (
            "recreated by another account",
            Box::new(|p: &Project| {
                sh(&format!("rm -rf {t} && mkdir {t} && chown nobody {t}", t = p.target.display()));
            }),
            format!("it is now owned by uid {nobody}, not by uid {}", agent_uid()),
        ),
        (
            "recreated as a symlink to the owner's own directory",
            Box::new(|p: &Project| {
                as_user(
                    AGENT,
                    &format!(
                        "rm -rf {t} && mkdir -p {o} && ln -s {o} {t}",
                        t = p.target.display(),
                        o = p.proj.join("other").display()
                    ),
                );
            }),
            "it is now a symlink".into(),
        ),
        (
            "recreated as a file",
            Box::new(|p: &Project| as_user(AGENT, &format!("rm -rf {t} && touch {t}", t = p.target.display()))),
            "it is now not a directory".into(),
        ),
        (
            "recreated other-writable",
            Box::new(|p: &Project| {
                as_user(AGENT, &format!("rm -rf {t} && mkdir -m 0777 {t}", t = p.target.display()));
            }),
            "it is now group- or other-writable (mode 777".into(),
        ),
        (
            "recreated under a directory everyone can write",
            Box::new(|p: &Project| {
                as_user(
                    AGENT,
                    &format!("rm -rf {t} && mkdir {t} && chmod 0777 {}", p.proj.display(), t = p.target.display()),
                );
            }),
            "above it (mode 777) is writable by everyone".into(),
        ),
        (
            "recreated under a directory another account owns",
            Box::new(|p: &Project| {
                as_user(AGENT, &format!("rm -rf {t} && mkdir {t}", t = p.target.display()));
                sh(&format!("chown nobody {}", p.proj.parent().unwrap().display()));
            }),
            format!("above it is owned by uid {nobody}"),
        ),
    ];
    for (case, setup, why) in &cases {
        for agent_calls in [false, true] {
            let p = Project::new();
            let d = p.daemon();
            setup(&p);
            let r = write(&d, agent_calls, "owned", &p.target.join("x"));
            eprintln!("case: {case}, agent caller: {agent_calls}");
            refused(&r, &p.target, why);
            assert!(!p.proj.join("other/x").exists() && std::fs::symlink_metadata(p.target.join("x")).is_err());
            assert!(repinned(&d).is_empty(), "{case}");
            // The admin sees the same reason in the listing.
            let all = d.cordon(&["tools", "--all", "--json"]).json();
            let t = all["tools"].as_array().unwrap().iter().find(|t| t["name"] == "owned").unwrap().clone();
            assert_eq!(t["available"], false, "{case}: {t:#}");
        }
    }
}

/// A directory mounted over the recreated root (by root: the owner cannot) is not re-pinned,
/// even when the mount is the owner's and 0755.
#[test]
fn a_mount_point_is_never_repinned() {
    require_root!("to create a test user and mount a tmpfs");
    let p = Project::new();
    let d = p.daemon();
    as_user(AGENT, &format!("rm -rf {t} && mkdir {t}", t = p.target.display()));
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("uid={},mode=0755,size=1m", agent_uid()), "tmpfs"])
        .arg(&p.target)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        cordon_tests::skip!(cordon_tests::Skip::CannotMount, "cannot mount a tmpfs here");
        return;
    }
    for agent_calls in [false, true] {
        refused(&write(&d, agent_calls, "owned", &p.target.join("x")), &p.target, "it is now a mount point");
    }
    let _ = Command::new("umount").arg(&p.target).status();
    assert!(repinned(&d).is_empty());
    // Unmounted, the owner's own directory qualifies again.
    wrote(&write(&d, true, "owned", &p.target.join("x")));
    assert_eq!(repinned(&d).len(), 1);
}

/// The whole project deleted and made again by its owner (a fresh clone): the working_dir, the
/// read root (the same path: one descriptor, one record) and the write root are re-pinned.
#[test]
fn a_project_recloned_by_its_owner_repins_its_working_dir_and_grants() {
    require_root!("to create a test user and chown test directories");
    let p = Project::new();
    let d = p.daemon();
    wrote(&write(&d, true, "owned", &p.target.join("a")));
    as_user(AGENT, &format!("rm -rf {pr} && mkdir -p {t}", pr = p.proj.display(), t = p.target.display()));
    wrote(&write(&d, false, "owned", &p.target.join("b")));
    let keys: Vec<String> = repinned(&d).iter().map(|r| r["key"].as_str().unwrap().to_string()).collect();
    assert_eq!(keys, ["working_dir", "write"], "{:#?}", repinned(&d));
}

/// Many calls at once after the owner recreated the root: one re-pin, one record, all run.
#[test]
fn concurrent_calls_repin_once() {
    require_root!("to create a test user and chown test directories");
    let p = Project::new();
    let d = p.daemon();
    as_user(AGENT, &format!("rm -rf {t} && mkdir {t}", t = p.target.display()));
    let calls: Vec<_> = (0..6)
        .map(|i| {
            let call = json!({ "attack": "write", "a": p.target.join(format!("f{i}")).to_str().unwrap() }).to_string();
            d.cordon_spawn(&["run", "owned", "--args-json", &call])
        })
        .collect();
    for c in calls {
        assert!(c.wait_with_output().unwrap().status.success());
    }
    assert_eq!(repinned(&d).len(), 1, "{:#?}", repinned(&d));
    assert!((0..6).all(|i| p.target.join(format!("f{i}")).exists()));
}

/// The tool as `cordon tools --all --json` lists it to root.
fn listed(d: &Daemon, name: &str) -> Value {
    let all = d.cordon(&["tools", "--all", "--json"]).json();
    all["tools"].as_array().unwrap().iter().find(|t| t["name"] == name).unwrap().clone()
}

/// A write root missing when cordond starts (`cargo clean`, then a restart; a fresh clone before
/// its first build): the owner's tool loads available, every listing says the next call creates
/// it, and the first call creates it as the owner, mode 0700, with a `repinned` record
/// (`was` "missing", `created` true); later calls use it without another record.
fn missing_at_load_created_by_the_first_call(agent_calls: bool) {
    let p = Project::new();
    as_user(AGENT, &format!("rm -rf {}", p.target.display()));
    let d = p.daemon();
    let t = listed(&d, "owned");
    assert_eq!(t["available"], true, "{t:#}");
    let note = t["note"].as_str().unwrap_or_default();
    assert!(
        note.contains(&format!("write root {} missing", p.target.display())) && note.contains("creates it"),
        "{t:#}"
    );
    // The agent's listing says so too, without the path (agents are not shown grants).
    let mine = agent::cordon(&d.socket, &["tools", "--json"]).json();
    let t = mine["tools"].as_array().unwrap().iter().find(|t| t["name"] == "owned").unwrap().clone();
    assert_eq!(t["available"], true, "{t:#}");
    let note = t["note"].as_str().unwrap_or_default();
    assert!(note.contains("the next call creates it") && !note.contains(p.target.to_str().unwrap()), "{t:#}");
    let shown = d.cordon(&["tool", "owned"]);
    assert!(shown.stdout.contains("note") && shown.stdout.contains("the next call creates it"), "{shown:?}");
    let mut mcp = cordon_tests::mcp_lines::Session::start(&d.socket);
    let tools = mcp.request("tools/list", json!({}));
    let t = tools["tools"].as_array().unwrap().iter().find(|t| t["name"] == "owned").unwrap().clone();
    assert!(t["description"].as_str().unwrap().contains("the next call creates it"), "{t:#}");
    assert!(std::fs::symlink_metadata(&p.target).is_err(), "listing created nothing");

    wrote(&write(&d, agent_calls, "owned", &p.target.join("a")));
    let m = std::fs::symlink_metadata(&p.target).unwrap();
    assert!(m.is_dir());
    assert_eq!((m.uid(), m.mode() & 0o7777), (agent_uid(), 0o700));
    assert_eq!(std::fs::metadata(p.target.join("a")).unwrap().uid(), agent_uid());
    let records = repinned(&d);
    assert_eq!(records.len(), 1, "{records:#?}");
    let r = &records[0];
    assert_eq!(
        (&r["tool"], &r["key"], &r["path"], &r["was"], &r["now"], &r["created"], &r["run_as"]["uid"]),
        (
            &json!("owned"),
            &json!("write"),
            &json!(p.target.to_str().unwrap()),
            &json!("missing"),
            &json!(dev_ino(&p.target)),
            &json!(true),
            &json!(agent_uid())
        ),
        "{r:#}"
    );
    wrote(&write(&d, agent_calls, "owned", &p.target.join("b")));
    assert_eq!(repinned(&d).len(), 1);
    let t = listed(&d, "owned");
    assert!(t["note"].is_null() || t["note"] == "", "created: no note any more: {t:#}");
}

#[test]
fn a_write_root_missing_at_load_is_created_by_a_root_callers_first_call_as_the_owner() {
    require_root!("to create a test user and chown test directories");
    missing_at_load_created_by_the_first_call(false);
}

#[test]
fn a_write_root_missing_at_load_is_created_by_the_owners_first_call() {
    require_root!("to create a test user and chown test directories");
    missing_at_load_created_by_the_first_call(true);
}

/// Missing at load, then built by the owner before the first call: taken (not created).
#[test]
fn a_write_root_missing_at_load_that_the_owner_builds_first_is_taken() {
    require_root!("to create a test user and chown test directories");
    let p = Project::new();
    as_user(AGENT, &format!("rm -rf {}", p.target.display()));
    let d = p.daemon();
    as_user(AGENT, &format!("umask 022; mkdir {}", p.target.display()));
    wrote(&write(&d, false, "owned", &p.target.join("a")));
    let records = repinned(&d);
    assert_eq!((records.len(), &records[0]["was"], &records[0]["created"]), (1, &json!("missing"), &json!(false)));
    assert_eq!(std::fs::metadata(&p.target).unwrap().mode() & 0o7777, 0o755);
}

/// A tool that runs as its caller, its write root missing at load: listed available (the call
/// decides), a root caller is refused (root's paths are the admin's), the agent's call creates it.
#[test]
fn a_write_root_missing_at_load_is_never_created_for_a_call_that_runs_as_root() {
    require_root!("to create a test user and chown test directories");
    let p = Project::new();
    as_user(AGENT, &format!("rm -rf {}", p.target.display()));
    let d = p.daemon();
    assert_eq!(listed(&d, "plain")["available"], true);
    let r = write(&d, false, "plain", &p.target.join("x"));
    assert_eq!(r.0, Some(69), "{:#}", r.1);
    let message = r.1["error"]["message"].as_str().unwrap();
    assert!(
        message
            .contains(&format!("write {} was missing when the registry loaded and is not created", p.target.display()))
            && message.contains("the call runs as root")
            && message.contains("docs/pins.md"),
        "{message}"
    );
    assert!(std::fs::symlink_metadata(&p.target).is_err(), "nothing created for root");
    wrote(&write(&d, true, "plain", &p.target.join("y")));
    let m = std::fs::symlink_metadata(&p.target).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o7777), (agent_uid(), 0o700));
    assert_eq!(repinned(&d).len(), 1);
}

/// A write root missing at load whose parent chain does not qualify: unavailable at load with
/// the reason, for both tools, and nothing is created by any call.
#[test]
fn a_write_root_missing_at_load_in_a_place_others_control_stays_unavailable() {
    require_root!("to create a test user, chown test directories");
    type Setup = Box<dyn Fn(&Project) -> PathBuf>;
    let cases: Vec<(&str, Setup, String)> = vec![
        (
            "a parent everyone can write",
            Box::new(|p: &Project| {
                as_user(AGENT, &format!("rm -rf {t} && chmod 0777 {}", p.proj.display(), t = p.target.display()));
                p.target.clone()
            }),
            "(mode 777) is writable by everyone".into(),
        ),
        (
            "a parent another account owns",
            Box::new(|p: &Project| {
                as_user(AGENT, &format!("rm -rf {}", p.target.display()));
                sh(&format!("mkdir -m 0755 {o} && chown nobody {o}", o = p.proj.join("theirs").display()));
                p.proj.join("theirs/target")
            }),
            "above it is owned by uid".into(),
        ),
        (
            "a symlinked parent (to the owner's own directory)",
            Box::new(|p: &Project| {
                as_user(
                    AGENT,
                    &format!(
                        "rm -rf {t} && mkdir {o} && ln -s {o} {l}",
                        t = p.target.display(),
                        o = p.proj.join("real").display(),
                        l = p.proj.join("link").display()
                    ),
                );
                p.proj.join("link/target")
            }),
            "passes through a symlink".into(),
        ),
    ];
    for (case, setup, why) in &cases {
        let p = Project::new();
        let root = setup(&p);
        let d = p.daemon_writing(&root);
        for tool in ["owned", "plain"] {
            let t = listed(&d, tool);
            eprintln!("case: {case}, tool {tool}");
            assert_eq!(t["available"], false, "{t:#}");
            let reason = t["unavailable_reason"].as_str().unwrap();
            assert!(reason.contains(why), "{reason}\nexpected: {why}");
            for agent_calls in [false, true] {
                let r = write(&d, agent_calls, tool, &root.join("x"));
                assert_eq!(r.1["error"]["code"], "TOOL_UNAVAILABLE", "{:#}", r.1);
            }
        }
        assert!(std::fs::symlink_metadata(&root).is_err(), "{case}: nothing created");
        assert!(repinned(&d).is_empty(), "{case}");
    }
}

/// Pending at load, then the place changes before the first call: the directory that would
/// hold it becomes a symlink (to the owner's own directory) or everyone-writable. The call is
/// refused with the reason and creates nothing; in the symlink case nothing appears where the
/// link leads.
#[test]
fn a_pending_write_root_whose_parent_changes_before_the_first_call_is_not_created() {
    require_root!("to create a test user and chown test directories");
    type Change = Box<dyn Fn(&Project, &Path)>;
    let cases: Vec<(&str, Change, &str)> = vec![
        (
            "parent swapped for a symlink",
            Box::new(|p: &Project, build: &Path| {
                as_user(
                    AGENT,
                    &format!(
                        "rm -rf {b} && mkdir {o} && ln -s {o} {b}",
                        b = build.display(),
                        o = p.proj.join("other").display()
                    ),
                );
            }),
            "is a symlink",
        ),
        (
            "parent made everyone-writable",
            Box::new(|_: &Project, build: &Path| as_user(AGENT, &format!("chmod 0777 {}", build.display()))),
            "(mode 777) is writable by everyone",
        ),
    ];
    for (case, change, why) in &cases {
        for agent_calls in [false, true] {
            let p = Project::new();
            let build = p.proj.join("build");
            as_user(AGENT, &format!("umask 022; mkdir {}", build.display()));
            let root = build.join("out");
            let d = p.daemon_writing(&root);
            assert_eq!(listed(&d, "owned")["available"], true, "{case}");
            change(&p, &build);
            let r = write(&d, agent_calls, "owned", &root.join("x"));
            eprintln!("case: {case}, agent caller: {agent_calls}");
            assert_eq!((r.0, &r.1["error"]["code"]), (Some(69), &json!("TOOL_UNAVAILABLE")), "{:#}", r.1);
            let message = r.1["error"]["message"].as_str().unwrap();
            assert!(
                message.contains(&format!(
                    "write {} was missing when the registry loaded and is not created",
                    root.display()
                )) && message.contains(why),
                "{message}\nexpected: {why}"
            );
            assert!(std::fs::symlink_metadata(p.proj.join("other/out")).is_err(), "{case}: nothing through the link");
            assert!(repinned(&d).is_empty());
            assert_eq!(listed(&d, "owned")["available"], false, "{case}");
        }
    }
}

/// Removes `nobody` from the agent's group again, however the test ends.
struct SharedGroup;

impl SharedGroup {
    fn add() -> SharedGroup {
        sh(&format!("gpasswd -a nobody {AGENT} >/dev/null"));
        SharedGroup
    }
}

impl Drop for SharedGroup {
    fn drop(&mut self) {
        let _ = Command::new("gpasswd").args(["-d", "nobody", AGENT]).output();
    }
}

/// `cordon policy check` of the project's policy: what it says about the tool `owned`.
fn owned_warnings(p: &Project) -> Vec<String> {
    let out = Command::new(cordon_tests::bin("cordon"))
        .args(["policy", "check"])
        .arg(p.root.join("policies/repin.toml"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stderr).lines().filter(|l| l.contains("tool \"owned\"")).map(str::to_string).collect()
}

/// umask 002 (Fedora/RHEL, Debian's option): the developer's directories are 0775 with the
/// developer's user private group. That group is the developer alone: such a directory is
/// re-pinned (and holds a created root), and gives no `replaceable` warning for a tool that runs
/// as the developer. Once the group has another member, it is someone else: refused with a
/// reason naming the group, and warned about. Both callers. (One test: the group's member list
/// is the machine's.)
#[test]
fn group_write_by_the_owners_private_group_repins_and_a_shared_group_does_not() {
    require_root!("to create a test user and change a group's members");
    let gid = agent::id("-g", AGENT);
    let group = format!("group {AGENT} ({gid})");
    for agent_calls in [false, true] {
        let p = Project::new();
        let d = p.daemon();
        as_user(
            AGENT,
            &format!("chmod 0775 {} && rm -rf {t} && umask 002 && mkdir {t}", p.proj.display(), t = p.target.display()),
        );
        let m = std::fs::metadata(&p.target).unwrap();
        assert_eq!((m.mode() & 0o7777, m.gid()), (0o775, gid));
        wrote(&write(&d, agent_calls, "owned", &p.target.join("a")));
        as_user(AGENT, &format!("rm -rf {}", p.target.display()));
        wrote(&write(&d, agent_calls, "owned", &p.target.join("b")));
        assert_eq!(repinned(&d).len(), 2, "{:#?}", repinned(&d));
        assert!(!owned_warnings(&p).iter().any(|w| w.contains("can be replaced")), "{:#?}", owned_warnings(&p));

        let shared = SharedGroup::add();
        // The directory above: the group can replace the root.
        as_user(AGENT, &format!("rm -rf {t} && umask 002 && mkdir {t}", t = p.target.display()));
        let why = format!("{} above it (mode 775) is writable by {group}, shared with nobody", p.proj.display());
        refused(&write(&d, agent_calls, "owned", &p.target.join("x")), &p.target, &why);
        let warned = owned_warnings(&p);
        assert!(
            warned.iter().any(|w| w
                .contains(&format!("{} (mode 775) is writable by {group}, shared with nobody", p.proj.display()))
                && w.contains(&format!("`chmod go-w {}`", p.proj.display()))),
            "{warned:#?}"
        );
        // The root itself group-writable by the shared group.
        as_user(AGENT, &format!("chmod 0755 {}", p.proj.display()));
        let why =
            format!("it is now group- or other-writable (mode 775; `chmod go-w` it): {group}, shared with nobody");
        refused(&write(&d, agent_calls, "owned", &p.target.join("x")), &p.target, &why);
        drop(shared);
        assert!(std::fs::symlink_metadata(p.target.join("x")).is_err());
        assert_eq!(repinned(&d).len(), 2);
        // Private again: taken.
        wrote(&write(&d, agent_calls, "owned", &p.target.join("y")));
        assert_eq!(repinned(&d).len(), 3);
    }
}
