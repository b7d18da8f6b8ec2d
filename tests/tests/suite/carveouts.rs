//! Carve-outs inside grants (issue 30, item 2; docs/carve-outs.md): `deny` and `read_only` paths
//! inside a write grant, and the protected set of a git work tree, made real in the tool's mount
//! view. Each attack runs through the real daemon, as a root caller of the owner's tool (`run_as
//! = { owner_of = "working_dir" }`) and as the unprivileged agent user who owns the project, and
//! asserts the exact errno: read or write the carved path, rename or remove it or its parents,
//! hard-link it out, rename over it, reach it through a symlink, `openat` from a directory above
//! it, `/proc/self/fd/N/...`, bind the granted root elsewhere or leave the namespace (seccomp:
//! EPERM), create it when missing, delete and recreate its parent between calls, and the
//! project re-pinned after its owner recreated it. The git cases use the real `git init`,
//! `git worktree add`, `git config` and `git commit`. Needs root (a test user, chown); skips
//! otherwise.

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

/// Runs a shell script as the agent (the developer's own action).
fn as_agent(script: &str) {
    let out = Command::new("setpriv")
        .args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--", "sh", "-ec", script])
        .env("HOME", "/nonexistent")
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A shell script's stdout, run as the agent.
fn agent_output(script: &str) -> String {
    let out = Command::new("setpriv")
        .args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--", "sh", "-ec", script])
        .env("HOME", "/nonexistent")
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The agent's project under a root-owned 0755 area: `home/dev/proj` (mode 0755, the agent's).
struct Project {
    area: tempfile::TempDir,
    proj: PathBuf,
}

impl Project {
    fn new() -> Project {
        agent::ensure();
        let area = tempfile::Builder::new().prefix("cordon-carve-").tempdir().unwrap();
        std::fs::set_permissions(area.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let home = area.path().join("home/dev");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::set_permissions(area.path().join("home"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let (uid, gid) = (agent::id("-u", AGENT), agent::id("-g", AGENT));
        std::os::unix::fs::chown(&home, Some(uid), Some(gid)).unwrap();
        let proj = home.join("proj");
        as_agent(&format!("umask 022; mkdir -p {}", proj.display()));
        Project { area, proj }
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.proj.join(rel)
    }

    fn ps(&self, rel: &str) -> String {
        self.p(rel).to_str().unwrap().to_string()
    }

    /// Starts cordond with the attack tool `t` (working_dir the project, run as its owner) whose
    /// `write` is `write` (TOML), and any `extra` tools.
    fn daemon(&self, write: &str, extra: &str) -> Daemon {
        let keys = format!(
            "exec = [{}]\ntimeout = \"10s\"\nallow = {{ users = [\"{AGENT}\"] }}\nworking_dir = {}\n\
             run_as = {{ owner_of = \"working_dir\" }}\nwrite = {write}\n",
            q(Path::new(ATTACK).parent().unwrap()),
            q(&self.proj),
        );
        let policy = format!("version = 1\n{}\n{extra}", cordon_tests::attack_tool("t", Path::new(ATTACK), &keys));
        let policies = self.area.path().join("policies");
        std::fs::create_dir_all(&policies).unwrap();
        std::fs::write(policies.join("carve.toml"), policy).unwrap();
        let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        Daemon::start_in(dir, policies, &["--socket-group", SOCKET_GROUP])
    }
}

/// Runs `tool` with `args` as root or as the agent: the exit code and the `--json` result.
fn call(d: &Daemon, agent: bool, tool: &str, args: &Value) -> (Option<i32>, Value) {
    let call = args.to_string();
    let argv = ["run", tool, "--args-json", &call, "--json"];
    let out = if agent { agent::cordon(&d.socket, &argv) } else { d.cordon(&argv) };
    let v = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{tool}: not JSON ({e}): {out:?}"));
    (out.code, v)
}

/// One attack: its JSON line.
#[track_caller]
fn attack(d: &Daemon, agent: bool, name: &str, a: &str, b: &str) -> Value {
    let (code, r) = call(d, agent, "t", &json!({ "attack": name, "a": a, "b": b }));
    assert!(r.get("error").is_none(), "{name} {a} {b} was not run: {r:#}");
    let line = r["stdout"].as_str().unwrap_or_default().lines().next().unwrap_or_default().to_string();
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("no attack line ({e}): {r:#}"));
    let _ = code;
    v
}

/// The attack failed with exactly `errno`.
#[track_caller]
fn denied(d: &Daemon, agent: bool, name: &str, a: &str, b: &str, errno: i32) {
    let v = attack(d, agent, name, a, b);
    assert_eq!((&v["ok"], &v["errno"]), (&json!(false), &json!(errno)), "{name} {a} {b}: {v}");
}

#[track_caller]
fn allowed(d: &Daemon, agent: bool, name: &str, a: &str, b: &str) {
    let v = attack(d, agent, name, a, b);
    assert_eq!(v["ok"], true, "{name} {a} {b}: {v}");
}

fn carve_outs(agent_calls: bool) {
    let p = Project::new();
    let proj = p.proj.display().to_string();
    as_agent(&format!(
        "cd {proj} && umask 022 && printf 'TOKEN=real-secret\\n' > .env && mkdir -p src deploy secrets conf && \
         echo code > src/main.rs && echo run > deploy/run.sh && echo key > secrets/a.pem && echo note > \
         secrets/b.txt && echo s1 > conf/secret && mkdir private && echo p > private/key"
    ));
    let write = format!(
        "[{{ path = {}, deny = [\".env\", \"secrets/*.pem\", \"conf/secret\", \"later\", \"private/\"], read_only = [\"deploy/\", \
         \"made/\"] }}]",
        q(&p.proj)
    );
    let d = p.daemon(&write, "");
    let ag = agent_calls;
    let (eacces, erofs, ebusy, exdev, eperm) = (libc::EACCES, libc::EROFS, libc::EBUSY, libc::EXDEV, libc::EPERM);

    // The grant itself still works.
    allowed(&d, ag, "write", &p.ps("src/new.rs"), "");
    allowed(&d, ag, "read", &p.ps("secrets/b.txt"), "");
    allowed(&d, ag, "read", &p.ps("deploy/run.sh"), "");

    // deny: no access at all, by any name or way (reads EACCES: a mode-000 cover; writes EROFS:
    // the cover's mount is read-only, which the kernel checks first).
    denied(&d, ag, "read", &p.ps(".env"), "", eacces);
    denied(&d, ag, "write", &p.ps(".env"), "", erofs);
    denied(&d, ag, "read", &p.ps("secrets/a.pem"), "", eacces);
    denied(&d, ag, "unlink", &p.ps(".env"), "", ebusy);
    denied(&d, ag, "mv", &p.ps(".env"), &p.ps("env.old"), ebusy);
    denied(&d, ag, "hardlink", &p.ps(".env"), &p.ps("env.link"), exdev);
    // Renaming another file over it: the name is a mount point.
    allowed(&d, ag, "write", &p.ps("evil"), "");
    denied(&d, ag, "mv", &p.ps("evil"), &p.ps(".env"), ebusy);
    // Through a symlink, a descriptor above it, /proc/self/fd.
    denied(&d, ag, "symlink-write", &p.ps("l-env"), &p.ps(".env"), erofs);
    denied(&d, ag, "openat-write", &proj, ".env", erofs);
    denied(&d, ag, "fd-path-write", &proj, ".env", erofs);
    // Its parents are mount points: neither renamed nor removed, so nothing walks around the cover.
    denied(&d, ag, "mv", &p.ps("secrets"), &p.ps("secrets.old"), ebusy);
    denied(&d, ag, "mv", &p.ps("conf"), &p.ps("conf.old"), ebusy);
    denied(&d, ag, "rmdir", &p.ps("conf"), "", ebusy);
    // A denied directory: neither listed nor entered.
    denied(&d, ag, "opendir", &p.ps("private"), "", eacces);
    denied(&d, ag, "read", &p.ps("private/key"), "", eacces);
    denied(&d, ag, "write", &p.ps("private/new"), "", eacces);
    denied(&d, ag, "rmdir", &p.ps("private"), "", ebusy);
    // A literal carve-out missing when the call started was made (empty) and covered.
    denied(&d, ag, "write", &p.ps("later"), "", erofs);
    denied(&d, ag, "unlink", &p.ps("later"), "", ebusy);

    // read_only: readable, never changed.
    denied(&d, ag, "write", &p.ps("deploy/run.sh"), "", erofs);
    denied(&d, ag, "write", &p.ps("deploy/new.sh"), "", erofs);
    denied(&d, ag, "mkdir", &p.ps("made/sub"), "", erofs);
    denied(&d, ag, "mv", &p.ps("deploy"), &p.ps("deploy.old"), ebusy);
    denied(&d, ag, "rmdir", &p.ps("made"), "", ebusy);
    denied(&d, ag, "hardlink", &p.ps("deploy/run.sh"), &p.ps("run.link"), exdev);
    denied(&d, ag, "mv", &p.ps("deploy/run.sh"), &p.ps("run.moved"), exdev);
    denied(&d, ag, "mv", &p.ps("evil"), &p.ps("deploy/run.sh"), exdev);
    denied(&d, ag, "symlink-write", &p.ps("l-run"), &p.ps("deploy/run.sh"), erofs);
    denied(&d, ag, "openat-write", &proj, "deploy/run.sh", erofs);
    denied(&d, ag, "fd-path-write", &proj, "deploy/x", erofs);
    denied(&d, ag, "meta", "chmod", &p.ps("deploy/run.sh"), erofs);
    denied(&d, ag, "meta", "chmod", &p.ps(".env"), erofs);

    // Undoing the mounts: every mount call and leaving the namespace are refused (seccomp).
    denied(&d, ag, "umount", &p.ps(".env"), "", eperm);
    denied(&d, ag, "bind", &proj, &p.ps("src"), eperm);
    denied(&d, ag, "open-tree", &proj, "", eperm);
    denied(&d, ag, "unshare-mnt", "", "", eperm);
    denied(&d, ag, "unshare-user", "", "", eperm);
    denied(&d, ag, "move-mount", &p.ps(".env"), &p.ps("src"), eperm);
    denied(&d, ag, "mount-setattr", &p.ps("deploy"), "", eperm);
    denied(&d, ag, "pivot-root", &proj, &p.ps("src"), eperm);
    for call in ["fsopen", "fsmount", "fsconfig"] {
        denied(&d, ag, call, "", "", eperm);
    }
    denied(&d, ag, "fspick", &p.ps("deploy"), "", eperm);

    // The secret never left, and what the tool could not change is unchanged.
    assert_eq!(std::fs::read_to_string(p.p(".env")).unwrap(), "TOKEN=real-secret\n");
    assert_eq!(std::fs::read_to_string(p.p("deploy/run.sh")).unwrap(), "run\n");
    // The placeholders are the owner's, empty, of the right kind.
    let later = std::fs::symlink_metadata(p.p("later")).unwrap();
    assert!(later.is_file() && later.len() == 0 && later.uid() == agent::id("-u", AGENT), "{later:?}");
    assert!(std::fs::symlink_metadata(p.p("made")).unwrap().is_dir());

    // `cordon tool t` shows the carve-outs and the protected set, never a file's contents.
    let shown = d.cordon(&["tool", "t"]).stdout;
    assert!(
        shown.contains(&format!("carve-outs  {proj}: deny .env conf/secret later private/ secrets/*.pem")),
        "{shown}"
    );
    assert!(shown.contains(&format!("{proj}: read-only deploy/ made/")), "{shown}");
    assert!(shown.contains("protected: in each write root that is a git work tree"), "{shown}");
    assert!(!shown.contains("real-secret"), "{shown}");

    // The owner deletes and recreates the parent between calls: the next call covers the new file.
    as_agent(&format!("cd {proj} && rm -rf conf && mkdir conf && echo s2 > conf/secret"));
    denied(&d, ag, "read", &p.ps("conf/secret"), "", eacces);
    // A glob covers what exists when the call starts.
    as_agent(&format!("cd {proj} && echo key2 > secrets/c.pem"));
    denied(&d, ag, "read", &p.ps("secrets/c.pem"), "", eacces);
}

#[test]
fn deny_and_read_only_hold_against_every_way_in_for_a_root_caller() {
    require_root!("to create a test user and chown test directories");
    carve_outs(false);
}

#[test]
fn deny_and_read_only_hold_against_every_way_in_for_the_agent() {
    require_root!("to create a test user and chown test directories");
    carve_outs(true);
}

/// The error of a call that was refused before the tool ran.
#[track_caller]
fn refused_with(d: &Daemon, agent: bool, args: &Value, needle: &str) {
    let (code, r) = call(d, agent, "t", args);
    assert_ne!(code, Some(0), "{r:#}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(needle), "expected {needle:?} in: {r:#}");
}

/// A carve-out that is a symlink, or a file with another name: the call does not run.
#[test]
fn a_symlinked_or_hard_linked_carve_out_refuses_the_call() {
    require_root!("to create a test user and chown test directories");
    let p = Project::new();
    let proj = p.proj.display().to_string();
    as_agent(&format!("cd {proj} && echo secret > real && ln -s real .env && echo k > key && ln key key2"));
    let write = format!("[{{ path = {}, deny = [\".env\"] }}]", q(&p.proj));
    let d = p.daemon(&write, "");
    let probe = json!({ "attack": "write", "a": p.ps("x") });
    for agent in [false, true] {
        refused_with(&d, agent, &probe, "is a symbolic link");
    }
    assert!(!p.p("x").exists(), "the tool never ran");
    std::fs::remove_file(p.p(".env")).unwrap();
    as_agent(&format!("cd {proj} && mv key .env"));
    for agent in [false, true] {
        refused_with(&d, agent, &probe, "has 2 hard links");
    }
    // The owner removes the other name: the tool runs, with .env covered.
    std::fs::remove_file(p.p("key2")).unwrap();
    for agent in [false, true] {
        denied(&d, agent, "read", &p.ps(".env"), "", libc::EACCES);
    }
}

/// `git` as a tool of the project, as its owner.
fn git_tool(name: &str, proj: &Path, args: &[&str], write: &str) -> String {
    let mut command = vec![q("/usr/local/bin/git"), q("-C"), q(proj)];
    command.extend(args.iter().map(q));
    format!(
        "[tools.{name}]\ndescription = \"git\"\nreason = \"tests\"\ncommand = [{}]\nexec = [\"/usr/local/bin\", \
         \"/usr/local/libexec/git-core\"]\nread = [\"/usr/local/share\"]\ntimeout = \"20s\"\nallow = {{ users = \
         [\"{AGENT}\"] }}\nworking_dir = {}\nrun_as = {{ owner_of = \"working_dir\" }}\nwrite = {write}\n\
         env = {{ GIT_CONFIG_NOSYSTEM = \"1\", HOME = {} }}\naccept_warnings = [\"program-choice\", \"write-exec\"]\n",
        command.join(", "),
        q(proj),
        q(proj),
    )
}

fn git_repo(agent_calls: bool) {
    let p = Project::new();
    let proj = p.proj.display().to_string();
    // A real repository, made by the real git, as its owner; a linked worktree beside it.
    as_agent(&format!(
        "cd {proj} && git init -q . && git config user.email dev@example.org && git config user.name dev && echo one \
         > f && git add f && git commit -qm one && git worktree add -q ../wt 2>/dev/null"
    ));
    let wt = p.proj.parent().unwrap().join("wt");
    let write = format!("[{}, {}]", q(&p.proj), q(&wt));
    let extra = format!(
        "{}\n{}\n{}",
        git_tool("commit", &p.proj, &["commit", "-q", "--allow-empty", "-m", "from the tool"], &write),
        git_tool("hookspath", &p.proj, &["config", "core.hooksPath", "/tmp/evil"], &write),
        git_tool("wt-commit", &wt, &["commit", "-q", "--allow-empty", "-m", "from the tool in wt"], &write),
    );
    let d = p.daemon(&write, &extra);
    let ag = agent_calls;
    let (erofs, ebusy) = (libc::EROFS, libc::EBUSY);

    // Planting a hook, by any way.
    denied(&d, ag, "write", &p.ps(".git/hooks/pre-commit"), "", erofs);
    denied(&d, ag, "openat-write", &p.ps(".git"), "hooks/pre-commit", erofs);
    denied(&d, ag, "fd-path-write", &proj, ".git/hooks/pre-commit", erofs);
    denied(&d, ag, "write", &p.ps(".git/config"), "", erofs);
    // Moving .git or its hooks aside to make new ones.
    denied(&d, ag, "mv", &p.ps(".git"), &p.ps(".git.old"), ebusy);
    denied(&d, ag, "mv", &p.ps(".git/hooks"), &p.ps(".git/hooks.old"), ebusy);
    allowed(&d, ag, "write", &p.ps("cfg"), "");
    // Across the anchor on .git: another mount (EXDEV), and the name is a mount point.
    denied(&d, ag, "mv", &p.ps("cfg"), &p.ps(".git/config"), libc::EXDEV);
    // commondir (git would follow it to a config and hooks of the tool's choosing) and
    // config.worktree were made read-only placeholders.
    denied(&d, ag, "write", &p.ps(".git/commondir"), "", erofs);
    denied(&d, ag, "write", &p.ps(".git/config.worktree"), "", erofs);
    assert_eq!(std::fs::read_to_string(p.p(".git/commondir")).unwrap(), ".\n");

    // The real git: `git config core.hooksPath` fails, `git commit` works.
    let (code, r) = call(&d, ag, "hookspath", &json!({}));
    assert_ne!(code, Some(0), "{r:#}");
    let stderr = r["stderr"].as_str().unwrap_or_default();
    // git writes config.lock beside it and renames it over config: a mount point (EBUSY).
    assert!(stderr.contains("could not write config file") && stderr.contains("Device or resource busy"), "{r:#}");
    let (code, r) = call(&d, ag, "commit", &json!({}));
    assert_eq!(code, Some(0), "git commit inside the tool: {r:#}");
    let log = agent_output(&format!("git -C {proj} log --format=%s"));
    assert!(log.contains("from the tool"), "{log}");
    let cfg = agent_output(&format!("git -C {proj} config --get core.hooksPath || true"));
    assert!(cfg.is_empty(), "core.hooksPath was set: {cfg}");

    // The worktree: its .git file, the gitdir's commondir, the common hooks.
    let wts = |rel: &str| wt.join(rel).to_str().unwrap().to_string();
    denied(&d, ag, "write", &wts(".git"), "", erofs);
    denied(&d, ag, "mv", &wts(".git"), &wts("git.old"), ebusy);
    denied(&d, ag, "write", &p.ps(".git/worktrees/wt/commondir"), "", erofs);
    denied(&d, ag, "write", &p.ps(".git/worktrees/wt/config.worktree"), "", erofs);
    let (code, r) = call(&d, ag, "wt-commit", &json!({}));
    assert_eq!(code, Some(0), "git commit in the worktree: {r:#}");
    assert!(std::fs::read_dir(p.p(".git/hooks")).unwrap().all(|e| !e.unwrap().file_name().eq("pre-commit")));
}

#[test]
fn a_git_work_tree_keeps_its_hooks_and_config_for_a_root_caller_and_commits_still_work() {
    require_root!("to create a test user and chown test directories");
    git_repo(false);
}

#[test]
fn a_git_work_tree_keeps_its_hooks_and_config_for_the_agent_and_commits_still_work() {
    require_root!("to create a test user and chown test directories");
    git_repo(true);
}

/// `unprotect` lifts one entry, with its reason, and nothing else.
#[test]
fn unprotect_lifts_exactly_the_named_entry() {
    require_root!("to create a test user and chown test directories");
    let p = Project::new();
    as_agent(&format!("cd {} && git init -q .", p.proj.display()));
    let write = format!(
        "[{{ path = {}, unprotect = [{{ path = \".git/hooks\", reason = \"the tool installs hooks\" }}] }}]",
        q(&p.proj)
    );
    let d = p.daemon(&write, "");
    for agent in [false, true] {
        allowed(&d, agent, "write", &p.ps(".git/hooks/pre-commit"), "");
        denied(&d, agent, "write", &p.ps(".git/config"), "", libc::EROFS);
    }
    let shown = d.cordon(&["tool", "t"]).stdout;
    assert!(
        shown.contains(&format!("{}: unprotect .git/hooks (the tool installs hooks)", p.proj.display())),
        "{shown}"
    );
}

/// A write root its owner deleted and recreated (re-pinned, docs/pins.md) gets its carve-outs
/// and protected set again before the tool runs.
#[test]
fn a_repinned_write_root_gets_its_carve_outs_again() {
    require_root!("to create a test user and chown test directories");
    let p = Project::new();
    let proj = p.proj.display().to_string();
    as_agent(&format!("cd {proj} && git init -q . && echo s > .env"));
    let write = format!("[{{ path = {}, deny = [\".env\"] }}]", q(&p.proj));
    let d = p.daemon(&write, "");
    denied(&d, true, "read", &p.ps(".env"), "", libc::EACCES);
    // The owner re-clones the project: a new directory at the same path.
    as_agent(&format!("rm -rf {proj} && mkdir {proj} && cd {proj} && git init -q . && echo s2 > .env"));
    for agent in [true, false] {
        denied(&d, agent, "read", &p.ps(".env"), "", libc::EACCES);
        denied(&d, agent, "write", &p.ps(".git/hooks/pre-commit"), "", libc::EROFS);
    }
    let repinned: Vec<Value> = d.audit_records().into_iter().filter(|r| r["decision"] == "repinned").collect();
    assert!(!repinned.is_empty(), "the root was re-pinned");
}
