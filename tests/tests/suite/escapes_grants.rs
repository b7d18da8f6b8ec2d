//! Attacks on grants (issue 9, finding 1): whoever can write a parent of a granted path tries to
//! move the grant by swapping the path for a symlink. Grants, `working_dir` and `command[0]` are
//! pinned when the registry loads (no symlink followed, (dev, ino) kept); a swap makes the tool
//! unavailable with the reason, in `tools --all`, `doctor` and the audit (`refused`), and the
//! moved grant is never used. Driven through the real daemon, as a root caller and as the
//! unprivileged agent user. Needs root (a test user, chown); skips otherwise.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;

use cordon_tests::agent::{self, AGENT, SOCKET_GROUP};
use cordon_tests::require_root;
use cordon_tests::{Daemon, Output, bin};
use serde_json::{Value, json};

const ATTACK: &str = env!("CARGO_BIN_EXE_cordon-attack");

fn agent_uid() -> u32 {
    let out = Command::new("id").args(["-u", AGENT]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// A TOML basic string.
fn q(s: impl AsRef<Path>) -> String {
    serde_json::to_string(s.as_ref().to_str().unwrap()).unwrap()
}

/// One attack tool: `cordon-attack {{attack}} {{a}} {{b}}` plus `extra` keys, open to the agent.
fn attack_tool(name: &str, extra: &str) -> String {
    let keys = format!(
        "exec = [{}]\ntimeout = \"5s\"\nallow = {{ users = [\"{AGENT}\"] }}\n{extra}",
        q(Path::new(ATTACK).parent().unwrap())
    );
    cordon_tests::attack_tool(name, Path::new(ATTACK), &keys)
}

/// A root-owned 0755 test area (the agent must reach the socket and the files below).
struct Area {
    dir: tempfile::TempDir,
}

impl Area {
    fn new() -> Area {
        let dir = tempfile::Builder::new().prefix("cordon-grants-").tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        Area { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// A directory with this mode, owned by root.
    fn mkdir(&self, rel: &str, mode: u32) -> PathBuf {
        let p = self.path(rel);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    fn file(&self, rel: &str, content: &str, mode: u32) -> PathBuf {
        let p = self.path(rel);
        std::fs::write(&p, content).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    /// Starts cordond (socket reachable by the agent's group) on `policy`.
    fn daemon(self, policy: &str) -> (Daemon, PathBuf) {
        let root = self.dir.path().to_path_buf();
        let policies = self.mkdir("policies", 0o755);
        std::fs::write(policies.join("grants.toml"), policy).unwrap();
        (Daemon::start_in(self.dir, policies, &["--socket-group", SOCKET_GROUP]), root)
    }
}

/// `cordon ARGS` as the agent user.
fn as_agent(d: &Daemon, args: &[&str]) -> Output {
    agent::cordon(&d.socket, args)
}

fn args(attack: &str, a: &str, b: &str) -> String {
    json!({ "attack": attack, "a": a, "b": b }).to_string()
}

/// Runs an attack tool as root (`agent = false`) or as the agent; returns the exit code and the
/// `--json` result.
fn run(d: &Daemon, agent: bool, tool: &str, call: &str) -> (Option<i32>, Value) {
    let argv = ["run", tool, "--args-json", call, "--json"];
    let out = if agent { as_agent(d, &argv) } else { d.cordon(&argv) };
    let v = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{tool}: not JSON ({e}): {out:?}"));
    (out.code, v)
}

/// The attack's own JSON line from a result that ran.
#[track_caller]
fn report(result: &Value) -> Value {
    assert!(result.get("error").is_none(), "was not run: {result:#}");
    let line = result["stdout"].as_str().unwrap_or_default().lines().next().unwrap_or_default().to_string();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("no attack line ({e}): {result:#}"))
}

/// The unavailability reason of `tool` in `cordon tools --all --json` (admin view).
fn listed_reason(d: &Daemon, tool: &str) -> Option<String> {
    let all = d.cordon(&["tools", "--all", "--json"]).json();
    let t = all["tools"].as_array().unwrap().iter().find(|t| t["name"] == tool).cloned().unwrap();
    let available = t["available"].as_bool().unwrap_or(false);
    (!available).then(|| t["unavailable_reason"].as_str().unwrap_or_default().to_string())
}

fn dev_ino(p: &Path) -> String {
    let m = std::fs::metadata(p).unwrap();
    format!("{}:{}", m.dev(), m.ino())
}

/// The observed escape: tool `writer` may write `shared/`, which holds `reader`'s read dir.
/// `writer` swaps that dir for a symlink to a secret dir; `reader`, run by root, must then be
/// refused with the reason, and must never read the secret.
fn swap_read_dir(writer_is_agent: bool, reader_is_agent: bool) {
    let area = Area::new();
    let shared = area.mkdir("shared", 0o777);
    let data = area.mkdir("shared/data", 0o755);
    area.file("shared/data/note", "public\n", 0o644);
    let secret = area.mkdir("secret", 0o700);
    area.file("secret/note", "TOP SECRET shadow\n", 0o600);
    let was = dev_ino(&data);
    let policy = format!(
        "version = 1\n{}{}",
        attack_tool("writer", &format!("write = [{}]", q(&shared))),
        attack_tool("reader", &format!("read = [{}]", q(&data))),
    );
    let (d, _root) = area.daemon(&policy);
    let note = data.join("note");
    let note = note.to_str().unwrap();

    // Before the swap the grant works, for both callers.
    let (code, r) = run(&d, reader_is_agent, "reader", &args("read", note, ""));
    assert_eq!(code, Some(0), "{r:#}");
    assert_eq!(report(&r)["ok"], true, "{r:#}");

    // The swap, from inside the writer's sandbox.
    let (code, r) =
        run(&d, writer_is_agent, "writer", &args("swap-symlink", data.to_str().unwrap(), secret.to_str().unwrap()));
    assert_eq!(code, Some(0), "{r:#}");
    assert_eq!(report(&r)["ok"], true, "the writer may rename inside its write root: {r:#}");
    assert!(std::fs::symlink_metadata(&data).unwrap().file_type().is_symlink());

    // The reader is refused, with the reason; nothing ran, nothing was read.
    let (code, r) = run(&d, reader_is_agent, "reader", &args("read", note, ""));
    assert_eq!(code, Some(69), "{r:#}");
    assert_eq!(r["error"]["code"], "TOOL_UNAVAILABLE", "{r:#}");
    let message = r["error"]["message"].as_str().unwrap();
    let expected = format!(
        "read {} changed since the registry loaded: was {was}, now a symlink to {:?}",
        data.display(),
        secret.display().to_string()
    );
    assert!(message.contains(&expected), "{message}\nexpected: {expected}");
    assert!(message.contains("reload"), "{message}");
    assert!(!r.to_string().contains("TOP SECRET"), "{r:#}");

    // Shown to admins in `tools --all` and `doctor`, and audited as refused.
    let reason = listed_reason(&d, "reader").expect("reader is listed unavailable");
    assert!(reason.contains(&expected), "{reason}");
    let doctor = d.cordon(&["doctor", "--json"]).json();
    let found = doctor["checks"].as_array().unwrap().iter().any(|c| {
        c["name"] == "tool"
            && c["found"].as_str().is_some_and(|f| f.starts_with("reader is unavailable") && f.contains(&expected))
    });
    assert!(found, "{doctor:#}");
    let refused = d.audit_records().into_iter().any(|rec| {
        rec["decision"] == "refused"
            && rec["tool"] == "reader"
            && rec.to_string().contains("changed since the registry loaded")
    });
    assert!(refused, "no refused record: {:#?}", d.audit_records());
    assert!(!d.audit_records().iter().any(|rec| rec["decision"] == "started"
        && rec["tool"] == "reader"
        && rec["argv"].to_string().contains("secret")));
    // An agent does not even see it any more.
    let listed = as_agent(&d, &["tools", "--json"]).json();
    assert!(!listed["tools"].as_array().unwrap().iter().any(|t| t["name"] == "reader"), "{listed:#}");

    // After a reload the symlink itself is refused at load: name the real path.
    d.cordon(&["reload"]).assert_code(0);
    let reason = listed_reason(&d, "reader").expect("still unavailable after reload");
    assert!(reason.contains(&format!("read path {} is a symlink", data.display())), "{reason}");
    assert!(reason.contains(&format!("name the real path {}", secret.display())), "{reason}");
    let (code, r) = run(&d, reader_is_agent, "reader", &args("read", note, ""));
    assert_eq!(code, Some(69), "{r:#}");
}

#[test]
fn a_read_dir_swapped_for_a_symlink_by_another_tool_refuses_the_reader_run_by_root() {
    require_root!("to create a test user and chown test directories");
    swap_read_dir(true, false);
}

#[test]
fn a_read_dir_swapped_for_a_symlink_refuses_the_reader_run_by_the_agent() {
    require_root!("to create a test user and chown test directories");
    swap_read_dir(false, true);
}

#[test]
fn a_swapped_working_dir_refuses_the_tool_and_a_kept_one_still_works() {
    require_root!("to create a test user and chown test directories");
    let area = Area::new();
    let shared = area.mkdir("shared", 0o777);
    let wd = area.mkdir("shared/wd", 0o755);
    area.file("shared/wd/note", "public\n", 0o644);
    let secret = area.mkdir("secret", 0o700);
    area.file("secret/note", "TOP SECRET\n", 0o600);
    let was = dev_ino(&wd);
    let policy = format!(
        "version = 1\n{}{}",
        attack_tool("writer", &format!("write = [{}]", q(&shared))),
        attack_tool("in-wd", &format!("working_dir = {}\nread = [{}]", q(&wd), q(&shared))),
    );
    let (d, _root) = area.daemon(&policy);
    // A relative read in the kept working dir works.
    let (code, r) = run(&d, false, "in-wd", &args("read", "note", ""));
    assert_eq!((code, report(&r)["ok"].clone()), (Some(0), json!(true)), "{r:#}");
    // The agent's tool swaps it; root's next call is refused.
    let (_, r) = run(&d, true, "writer", &args("swap-symlink", wd.to_str().unwrap(), secret.to_str().unwrap()));
    assert_eq!(report(&r)["ok"], true, "{r:#}");
    for agent in [false, true] {
        let (code, r) = run(&d, agent, "in-wd", &args("read", "note", ""));
        assert_eq!(code, Some(69), "{r:#}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!(
                "working_dir {} changed since the registry loaded: was {was}, now a symlink to",
                wd.display()
            )),
            "{message}"
        );
    }
}

#[test]
fn a_swapped_executable_refuses_the_tool_whether_the_file_or_its_directory_is_swapped() {
    require_root!("to create a test user and chown test directories");
    let area = Area::new();
    let shared = area.mkdir("shared", 0o777);
    let tools = area.mkdir("shared/bin", 0o777);
    let prog = tools.join("prog");
    std::fs::copy("/usr/bin/id", &prog).unwrap();
    let elsewhere = area.mkdir("elsewhere", 0o755);
    std::fs::copy("/usr/bin/whoami", elsewhere.join("prog")).unwrap();
    let was = dev_ino(&prog);
    let policy = format!(
        r#"version = 1
{}
[tools.prog]
description = "pinned executable"
reason = "grant tests"
command = [{}, "-u"]
exec = [{}]
allow = {{ users = ["{AGENT}"] }}
"#,
        attack_tool("writer", &format!("write = [{}]", q(&shared))),
        q(&prog),
        q(&tools),
    );
    let (d, _root) = area.daemon(&policy);
    let (code, r) = run(&d, true, "prog", "{}");
    assert_eq!(code, Some(0), "{r:#}");
    assert_eq!(r["stdout"].as_str().unwrap().trim(), agent_uid().to_string());

    // The writer replaces the file (a rename over it: a new inode at the same name).
    let (_, r) = run(&d, true, "writer", &args("rename", tools.join("new").to_str().unwrap(), prog.to_str().unwrap()));
    assert_eq!(report(&r)["ok"], true, "{r:#}");
    let now = dev_ino(&prog);
    for agent in [false, true] {
        let (code, r) = run(&d, agent, "prog", "{}");
        assert_eq!(code, Some(69), "{r:#}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!(
                "command[0] {} changed since the registry loaded: was {was}, now {now}",
                prog.display()
            )),
            "{message}"
        );
    }

    // After a reload (the new file accepted, and made root's: the agent's file would run only
    // as the agent), the writer swaps the whole directory for a link.
    std::fs::write(&prog, std::fs::read("/usr/bin/id").unwrap()).unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&prog, Some(0), Some(0)).unwrap();
    d.cordon(&["reload"]).assert_code(0);
    let (code, r) = run(&d, false, "prog", "{}");
    assert_eq!((code, r["stdout"].as_str().unwrap().trim()), (Some(0), "0"), "{r:#}");
    let (_, r) = run(&d, true, "writer", &args("swap-symlink", tools.to_str().unwrap(), elsewhere.to_str().unwrap()));
    assert_eq!(report(&r)["ok"], true, "{r:#}");
    let (code, r) = run(&d, false, "prog", "{}");
    assert_eq!(code, Some(69), "{r:#}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(message.contains(&format!("command[0] {} changed since the registry loaded", prog.display())), "{message}");
    assert!(message.contains(&format!("reached through a symlink ({} -> ", tools.display())), "{message}");
}

#[test]
fn a_script_executable_still_runs_by_its_real_path() {
    require_root!("to create a test user and chown test directories");
    let area = Area::new();
    let dir = area.mkdir("bin", 0o755);
    let script = area.file("bin/hello.sh", "#!/bin/sh\necho \"hello from $0\"\n", 0o755);
    let policy = format!(
        "version = 1\n[tools.hello]\ndescription = \"a script\"\nreason = \"grant tests\"\ncommand = [{}]\nexec = [{}]\nallow = {{ users = [\"{AGENT}\"] }}\n",
        q(&script),
        q(&dir)
    );
    let (d, _root) = area.daemon(&policy);
    for agent in [false, true] {
        let (code, r) = run(&d, agent, "hello", "{}");
        assert_eq!(code, Some(0), "{r:#}");
        assert_eq!(r["stdout"].as_str().unwrap().trim(), format!("hello from {}", script.display()));
    }
}

#[test]
fn a_grant_that_is_or_passes_through_a_symlink_at_load_is_unavailable_and_policy_check_says_so() {
    require_root!("to create a test user and chown test directories");
    let area = Area::new();
    let real = area.mkdir("real/sub", 0o755);
    let link = area.path("link");
    std::os::unix::fs::symlink(area.path("real"), &link).unwrap();
    let policy = format!(
        "version = 1\n{}{}{}",
        attack_tool("final-link", &format!("read = [{}]", q(&link))),
        attack_tool("middle-link", &format!("write = [{}]", q(link.join("sub")))),
        attack_tool("real-path", &format!("read = [{}]", q(&real))),
    );
    let file = area.path("check.toml");
    std::fs::write(&file, &policy).unwrap();
    let check = Command::new(bin("cordon")).args(["policy", "check"]).arg(&file).output().unwrap();
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(0), "{stdout}");
    let real_top = std::fs::canonicalize(area.path("real")).unwrap();
    assert!(
        stdout.contains(&format!(
            "note: final-link is unavailable on this host: read path {} is a symlink (to {:?})",
            link.display(),
            real_top.display().to_string()
        )),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("name the real path {}", real_top.display())), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "note: middle-link is unavailable on this host: write path {} passes through a symlink ({} -> ",
            link.join("sub").display(),
            link.display()
        )),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("name the real path {}", real.display())), "{stdout}");
    assert!(!stdout.contains("real-path is unavailable"), "{stdout}");

    let (d, _root) = area.daemon(&policy);
    for agent in [false, true] {
        let (code, r) = run(&d, agent, "final-link", &args("read", real.to_str().unwrap(), ""));
        assert_eq!(code, Some(69), "{r:#}");
        assert_eq!(r["error"]["code"], "TOOL_UNAVAILABLE");
        let (code, r) = run(&d, agent, "real-path", &args("read", real.to_str().unwrap(), ""));
        assert_eq!(code, Some(0), "{r:#}");
    }
}

#[test]
fn write_and_exec_grants_on_kernel_trees_are_policy_errors() {
    let area = Area::new();
    let text = "version = 1\n[tools.t]\ndescription = \"x\"\nreason = \"x\"\ncommand = [\"/bin/true\"]\nwrite = [\"/sys/fs/cgroup\"]\nexec = [\"/proc/self\"]\n";
    let file = area.file("kernel.toml", text, 0o644);
    let check = Command::new(bin("cordon")).args(["policy", "check"]).arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert_eq!(check.status.code(), Some(65), "{stderr}");
    assert!(stderr.contains(":6:10: write \"/sys/fs/cgroup\" is in /sys, the kernel's own tree"), "{stderr}");
    assert!(stderr.contains(":7:9: exec \"/proc/self\" is in /proc, the kernel's own tree"), "{stderr}");
}

#[test]
fn a_write_grant_onto_a_mounted_cgroup_tree_is_unavailable() {
    require_root!("to create a test user and chown test directories");
    let area = Area::new();
    let mnt = area.mkdir("cg", 0o755);
    // The v2 hierarchy (at /sys/fs/cgroup/unified on hybrid hosts, where /sys/fs/cgroup is a tmpfs).
    let source = if Path::new("/sys/fs/cgroup/unified/cgroup.procs").exists() {
        "/sys/fs/cgroup/unified"
    } else {
        "/sys/fs/cgroup"
    };
    let mounted = Command::new("mount").args(["--bind", source]).arg(&mnt).status().is_ok_and(|s| s.success());
    if !mounted {
        cordon_tests::skip!(cordon_tests::Skip::CannotMount, "cannot bind-mount /sys/fs/cgroup here");
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _guard = Unmount(mnt.clone());
    let policy = format!("version = 1\n{}", attack_tool("cg", &format!("write = [{}]", q(&mnt))));
    let (d, _root) = area.daemon(&policy);
    let reason = listed_reason(&d, "cg").expect("unavailable");
    assert!(reason.contains(&format!("write path {} is on a cgroup filesystem", mnt.display())), "{reason}");
    let (code, _) = run(&d, false, "cg", &args("write", mnt.join("cgroup.procs").to_str().unwrap(), ""));
    assert_eq!(code, Some(69));
}

#[test]
fn policy_check_warns_about_paths_others_can_replace() {
    require_root!("to create a test user and chown test directories");
    let area = Area::new();
    let shared = area.mkdir("shared", 0o755);
    let data = area.mkdir("shared/data", 0o755);
    let open = area.mkdir("open", 0o777);
    let in_open = area.mkdir("open/data", 0o755);
    let owned = area.mkdir("owned", 0o755);
    std::os::unix::fs::chown(&owned, Some(agent_uid()), None).unwrap();
    let in_owned = area.mkdir("owned/wd", 0o755);
    let sticky = area.mkdir("sticky", 0o1777);
    let theirs = area.mkdir("sticky/theirs", 0o755);
    std::os::unix::fs::chown(&theirs, Some(agent_uid()), None).unwrap();
    let ours = area.mkdir("sticky/ours", 0o755);
    let policy = format!(
        "version = 1\n{}{}{}{}",
        attack_tool("writer", &format!("write = [{}]", q(&shared))),
        attack_tool("reader", &format!("read = [{}, {}, {}]", q(&data), q(&in_open), q(&ours))),
        attack_tool(
            "walker",
            &format!("working_dir = {}\nunix_sockets = [{}]", q(&in_owned), q(theirs.join("s.sock")))
        ),
        attack_tool("same", &format!("read = [{}]", q(&shared))),
    );
    let file = area.path("warn.toml");
    std::fs::write(&file, &policy).unwrap();
    let check = Command::new(bin("cordon")).args(["policy", "check"]).arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert_eq!(check.status.code(), Some(0), "{stderr}");
    let has = |s: &str| assert!(stderr.contains(s), "missing {s:?} in:\n{stderr}");
    has(&format!(
        "warning: tool \"reader\": read path {} lies beneath {}, a write root of tool \"writer\"",
        data.display(),
        shared.display()
    ));
    has(&format!(
        "warning: tool \"reader\": read path {} can be replaced by someone other than root: {} (mode 777) is writable by everyone",
        in_open.display(),
        open.display()
    ));
    has(&format!(
        "warning: tool \"walker\": working_dir {} can be replaced by someone other than root: {} is owned by uid {}",
        in_owned.display(),
        owned.display(),
        agent_uid()
    ));
    has(&format!(
        "warning: tool \"walker\": unix_sockets path {} can be replaced by someone other than root: {} is owned by uid {} in the shared sticky directory {}",
        theirs.join("s.sock").display(),
        theirs.display(),
        agent_uid(),
        sticky.display()
    ));
    // Equal to a write root is not beneath it; a root-owned entry of a sticky dir is safe; the
    // writer is not warned about its own root.
    assert!(!stderr.contains("warning: tool \"same\""), "{stderr}");
    assert!(!stderr.contains(&format!("read path {} ", ours.display())), "{stderr}");
    assert!(!stderr.contains("warning: tool \"writer\""), "{stderr}");
    // The daemon logs the same warnings when it loads.
    let (d, _root) = area.daemon(&policy);
    assert!(d.log_text().contains("lies beneath"), "{}", d.log_text());
}
