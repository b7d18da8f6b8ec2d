//! Metadata changes outside a tool's write roots (issue 9, next to findings 1 and 3).
//!
//! Landlock does not restrict chmod, chown, extended attributes (so POSIX ACLs) or timestamps.
//! A root daemon runs every tool in a read-only view of the filesystem (a mount namespace where
//! only the write roots are writable), so each of these fails with EROFS outside the write
//! roots, whoever the caller is, and still works inside them. Every attack runs as a root
//! caller and as a real unprivileged agent user. Needs root (to create the user); skips otherwise.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;

use cordon_tests::agent::{self, AGENT, SOCKET_GROUP};
use cordon_tests::require_root;
use cordon_tests::{Daemon, Output, bin};
use serde_json::{Value, json};

const ATTACK: &str = env!("CARGO_BIN_EXE_cordon-attack");

fn q(s: impl AsRef<Path>) -> String {
    serde_json::to_string(s.as_ref().to_str().unwrap()).unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn agent_ids() -> (u32, u32) {
    (agent::id("-u", AGENT), agent::id("-g", AGENT))
}

/// Who calls the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    Root,
    Agent,
}

/// A tree for one test: `w` (write root), `r` (read root), `o` (granted nothing), every file
/// owned by the caller, so DAC alone would let it change their metadata.
struct Tree {
    _tmp: tempfile::TempDir,
    w: PathBuf,
    r: PathBuf,
    o: PathBuf,
}

fn tree(caller: Caller) -> Tree {
    let tmp = tempfile::Builder::new().prefix("cordon-meta-").tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (uid, gid) = if caller == Caller::Agent { agent_ids() } else { (0, 0) };
    let mut dirs = Vec::new();
    for name in ["w", "r", "o"] {
        let d = tmp.path().join(name);
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&d, Some(uid), Some(gid)).unwrap();
        for (file, mode) in [("victim", 0o600), ("public", 0o644)] {
            let f = d.join(file);
            std::fs::write(&f, "original").unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            std::os::unix::fs::chown(&f, Some(uid), Some(gid)).unwrap();
            xattr_set(&f, "user.cordon", b"original");
        }
        dirs.push(d);
    }
    let o = dirs.pop().unwrap();
    let r = dirs.pop().unwrap();
    let w = dirs.pop().unwrap();
    Tree { _tmp: tmp, w, r, o }
}

fn xattr_set(path: &Path, name: &str, value: &[u8]) {
    let p = std::ffi::CString::new(s(path)).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid C strings and a live buffer of the given length.
    let r = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert_eq!(r, 0, "setxattr {name} on {}: {}", path.display(), std::io::Error::last_os_error());
}

fn xattr_get(path: &Path, name: &str) -> Option<Vec<u8>> {
    let p = std::ffi::CString::new(s(path)).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = [0u8; 256];
    // SAFETY: valid C strings and a live buffer of the given length.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (r >= 0).then(|| buf[..r as usize].to_vec())
}

/// The attack tool (`cordon-attack {{attack}} {{a}} {{b}}`) with the given grants, admitted for
/// the agent user, plus `chmod` (the reviewer's reproduction) and the tools that must keep
/// working in a write root.
fn policy(t: &Tree) -> String {
    let bin_dir = Path::new(ATTACK).parent().unwrap();
    let grants = format!("write = [{}]\nread = [{}]", q(&t.w), q(&t.r));
    let mut text = format!(
        "version = 1\n\n[defaults]\nexec = [{}]\ntimeout = \"5s\"\nallow = {{ users = [\"{AGENT}\"] }}\n",
        q(bin_dir)
    );
    let param = |tool: &str, name: &str| {
        format!("\n[tools.{tool}.params.{name}]\ntype = \"string\"\npattern = \"[^\\\\x00]*\"\n")
    };
    text.push_str(&format!(
        "\n[tools.attack]\ndescription = \"metadata attack\"\nreason = \"tests\"\n\
         command = [{}, \"{{{{attack}}}}\", \"{{{{a}}}}\", \"{{{{b}}}}\"]\n{grants}\n",
        q(ATTACK)
    ));
    text.push_str(&param("attack", "attack"));
    text.push_str(&param("attack", "a"));
    text.push_str(&param("attack", "b"));
    // The reproduction from the review: chmod with no write grant at all. Its victims live in
    // the host's /tmp, which a private /tmp would hide (`temp.rs` tests that): this tool sees
    // the host's.
    text.push_str(&format!(
        "\n[tools.chmod-nothing]\ndescription = \"chmod\"\nreason = \"tests\"\n\
         command = [\"/bin/chmod\", \"0666\", \"{{{{path}}}}\"]\ntemp = false\n{}",
        param("chmod-nothing", "path")
    ));
    for (name, command) in [
        ("chmod-x", "[\"/bin/chmod\", \"+x\", \"{{path}}\"]"),
        ("cp-p", "[\"/bin/cp\", \"-p\", \"{{path}}\", \"{{to}}\"]"),
        ("tar-x", "[\"/bin/tar\", \"-xpf\", \"{{path}}\", \"-C\", \"{{to}}\"]"),
    ] {
        text.push_str(&format!(
            "\n[tools.{name}]\ndescription = \"{name}\"\nreason = \"tests\"\ncommand = {command}\n{grants}\n"
        ));
        text.push_str(&param(name, "path"));
        if name != "chmod-x" {
            text.push_str(&param(name, "to"));
        }
    }
    text
}

fn start(t: &Tree) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), policy(t)).unwrap();
    Daemon::start_in(dir, policies, &["--socket-group", SOCKET_GROUP])
}

/// `cordon run TOOL --args-json ARGS --json` as the caller.
fn run(d: &Daemon, caller: Caller, tool: &str, args: &Value) -> Value {
    let argv = ["run", tool, "--args-json", &args.to_string(), "--json"];
    let out = match caller {
        Caller::Root => d.cordon(&argv),
        Caller::Agent => {
            let out = Command::new("setpriv")
                .args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--"])
                .arg(bin("cordon"))
                .arg("--socket")
                .arg(&d.socket)
                .args(argv)
                .output()
                .unwrap();
            Output {
                code: out.status.code(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            }
        }
    };
    let v = out.json();
    assert!(v.get("error").is_none(), "{tool} {args} was not run: {out:?}\n{}", d.log_text());
    v
}

/// One `meta` attack; returns its JSON line.
#[track_caller]
fn meta(d: &Daemon, caller: Caller, op: &str, path: &Path) -> Value {
    let result = run(d, caller, "attack", &json!({ "attack": "meta", "a": op, "b": s(path) }));
    let line = result["stdout"].as_str().unwrap_or_default().lines().next().unwrap_or_default().to_string();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{op} {}: no JSON line ({e}): {result:#}", path.display()))
}

const EROFS: i32 = libc::EROFS;

/// Every metadata operation, and the file it targets: descriptor-based ones need a file the tool
/// may open (the read root); path-based and O_PATH ones work on any file.
fn outside_cases(t: &Tree) -> Vec<(&'static str, PathBuf)> {
    let mut cases = Vec::new();
    for op in ["chmod", "fchmodat-empty", "fchownat-empty", "chown", "setxattr", "removexattr", "acl", "utime"] {
        cases.push((op, t.o.join("victim")));
        cases.push((op, t.r.join("public")));
    }
    for op in ["fchmod", "fsetxattr", "futimens", "setflags"] {
        cases.push((op, t.r.join("public")));
    }
    cases
}

/// What must not change on a file the tool may not write.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    mode: u32,
    owner: (u32, u32),
    mtime: i64,
    user_xattr: Option<Vec<u8>>,
    acl: Option<Vec<u8>>,
}

fn snapshot(p: &Path) -> Snapshot {
    let m = std::fs::metadata(p).unwrap();
    Snapshot {
        mode: m.mode(),
        owner: (m.uid(), m.gid()),
        mtime: m.mtime(),
        user_xattr: xattr_get(p, "user.cordon"),
        acl: xattr_get(p, "system.posix_acl_access"),
    }
}

fn metadata_outside_the_write_roots_is_erofs(caller: Caller) {
    let t = tree(caller);
    let d = start(&t);
    let before: Vec<_> = [t.o.join("victim"), t.r.join("public")].iter().map(|p| snapshot(p)).collect();
    for (op, path) in outside_cases(&t) {
        let r = meta(&d, caller, op, &path);
        assert_eq!(r["ok"], false, "{caller:?} {op} {} succeeded: {r}", path.display());
        if op == "fchmodat-empty" {
            // fchmodat2 is outside the seccomp allow-list (EPERM) unless it is allowed, when the
            // read-only view answers (EROFS); either way the mode stays.
            assert!(r["errno"] == libc::EPERM || r["errno"] == EROFS, "{caller:?} {op}: {r}");
        } else {
            assert_eq!(r["errno"], EROFS, "{caller:?} {op} {}: EROFS expected: {r}", path.display());
        }
    }
    let after: Vec<_> = [t.o.join("victim"), t.r.join("public")].iter().map(|p| snapshot(p)).collect();
    assert_eq!(before, after, "metadata changed outside the write roots");
}

#[test]
fn metadata_outside_the_write_roots_is_erofs_for_a_root_caller() {
    require_root!("a root daemon, and a test user");
    metadata_outside_the_write_roots_is_erofs(Caller::Root);
}

#[test]
fn metadata_outside_the_write_roots_is_erofs_for_an_agent_caller() {
    require_root!("a root daemon, and a test user");
    metadata_outside_the_write_roots_is_erofs(Caller::Agent);
}

fn metadata_inside_a_write_root_still_works(caller: Caller) {
    let t = tree(caller);
    let d = start(&t);
    let victim = t.w.join("victim");
    for op in
        ["chmod", "fchmod", "chown", "fchownat-empty", "setxattr", "fsetxattr", "acl", "utime", "futimens", "setflags"]
    {
        let r = meta(&d, caller, op, &victim);
        assert_eq!(r["ok"], true, "{caller:?} {op} inside the write root failed: {r}");
    }
    let r = meta(&d, caller, "removexattr", &victim);
    assert_eq!(r["ok"], true, "{caller:?} removexattr inside the write root failed: {r}");
    let m = std::fs::metadata(&victim).unwrap();
    assert_eq!(m.mtime(), 0, "utimensat/futimens set the epoch");
    assert!(xattr_get(&victim, "system.posix_acl_access").is_some(), "the ACL was set");
    assert_eq!(xattr_get(&victim, "user.cordon"), None, "removexattr removed it");
}

#[test]
fn metadata_inside_a_write_root_still_works_for_a_root_caller() {
    require_root!("a root daemon, and a test user");
    metadata_inside_a_write_root_still_works(Caller::Root);
}

#[test]
fn metadata_inside_a_write_root_still_works_for_an_agent_caller() {
    require_root!("a root daemon, and a test user");
    metadata_inside_a_write_root_still_works(Caller::Agent);
}

/// The review's reproduction: `/bin/chmod 0666` on a root-owned 0600 file, by a root caller,
/// with no write grant at all.
#[test]
fn chmod_by_a_root_caller_without_write_grants_fails_read_only() {
    require_root!("a root daemon, and a test user");
    let t = tree(Caller::Root);
    let d = start(&t);
    for victim in [t.o.join("victim"), t.r.join("victim")] {
        let r = run(&d, Caller::Root, "chmod-nothing", &json!({ "path": s(&victim) }));
        assert_eq!(r["exit_code"], 1, "{r}");
        assert!(r["stderr"].as_str().unwrap().contains("Read-only file system"), "{r}");
        assert_eq!(std::fs::metadata(&victim).unwrap().mode() & 0o7777, 0o600);
    }
}

/// The device nodes every tool gets stay usable, but their metadata does not change: not
/// through the path, nor through stdin (which the daemon opens on the host's /dev).
#[test]
fn dev_null_and_stdin_cannot_be_chmodded() {
    require_root!("a root daemon, and a test user");
    let t = tree(Caller::Root);
    let d = start(&t);
    for caller in [Caller::Root, Caller::Agent] {
        for path in ["/dev/null", "/proc/self/fd/0"] {
            let r = meta(&d, caller, "chmod", Path::new(path));
            assert_eq!(r["ok"], false, "{caller:?} chmod {path}: {r}");
            assert_eq!(r["errno"], EROFS, "{caller:?} chmod {path}: {r}");
        }
        // Writing to it still works (a read-only mount does not stop writes to a device node).
        let r = run(&d, caller, "attack", &json!({ "attack": "write", "a": "/dev/null" }));
        let line: Value = serde_json::from_str(r["stdout"].as_str().unwrap().lines().next().unwrap()).unwrap();
        assert_eq!(line["ok"], true, "{caller:?} write /dev/null: {line}");
    }
    assert_eq!(std::fs::metadata("/dev/null").unwrap().mode() & 0o7777, 0o666);
}

/// Another process's root (`/proc/PID/root`) leads into the host's writable mounts; landlock's
/// ptrace scoping keeps a tool from resolving it for any process outside its own domain.
#[test]
fn metadata_through_another_process_root_is_denied() {
    require_root!("a root daemon, and a test user");
    for caller in [Caller::Root, Caller::Agent] {
        let t = tree(caller);
        let d = start(&t);
        // A process of the caller's uid outside the sandbox (for root: without capabilities, so
        // that only the sandbox stands in the way).
        let user = if caller == Caller::Agent { AGENT } else { "root" };
        let mut outside = Command::new("setpriv")
            .args(["--reuid", user, "--regid", user, "--init-groups", "--inh-caps=-all", "--bounding-set=-all", "--"])
            .args(["/bin/sleep", "30"])
            .spawn()
            .unwrap();
        let via =
            PathBuf::from(format!("/proc/{}/root", outside.id())).join(t.o.join("victim").strip_prefix("/").unwrap());
        let r = meta(&d, caller, "chmod", &via);
        let _ = outside.kill();
        let _ = outside.wait();
        assert_eq!(r["ok"], false, "{caller:?} chmod through /proc/PID/root: {r}");
        assert_eq!(r["errno"], libc::EACCES, "{caller:?}: {r}");
        assert_eq!(std::fs::metadata(t.o.join("victim")).unwrap().mode() & 0o7777, 0o600);
    }
}

/// Ordinary tools that set modes and times keep working in their write roots.
#[test]
fn chmod_cp_and_tar_keep_modes_in_a_write_root() {
    require_root!("a root daemon, and a test user");
    for caller in [Caller::Root, Caller::Agent] {
        let t = tree(caller);
        let d = start(&t);
        let script = t.w.join("script");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
        if caller == Caller::Agent {
            let (uid, gid) = agent_ids();
            std::os::unix::fs::chown(&script, Some(uid), Some(gid)).unwrap();
        }
        let r = run(&d, caller, "chmod-x", &json!({ "path": s(&script) }));
        assert_eq!(r["exit_code"], 0, "{caller:?} chmod +x: {r}");
        assert_eq!(std::fs::metadata(&script).unwrap().mode() & 0o777, 0o755);

        // cp -p from the read root keeps mode and times.
        let src = t.r.join("public");
        filetime_epoch_plus(&src, 1_000_000);
        let dst = t.w.join("copy");
        let r = run(&d, caller, "cp-p", &json!({ "path": s(&src), "to": s(&dst) }));
        assert_eq!(r["exit_code"], 0, "{caller:?} cp -p: {r}");
        let m = std::fs::metadata(&dst).unwrap();
        assert_eq!((m.mode() & 0o777, m.mtime()), (0o644, 1_000_000), "{caller:?} cp -p");

        // tar -xp into the write root restores modes and times.
        let staging = tempfile::tempdir().unwrap();
        let member = staging.path().join("tool.sh");
        std::fs::write(&member, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&member, std::fs::Permissions::from_mode(0o750)).unwrap();
        filetime_epoch_plus(&member, 2_000_000);
        let archive = t.r.join("a.tar");
        let ok = Command::new("tar").arg("-cf").arg(&archive).arg("-C").arg(staging.path()).arg("tool.sh").status();
        assert!(ok.unwrap().success());
        std::fs::set_permissions(&archive, std::fs::Permissions::from_mode(0o644)).unwrap();
        let r = run(&d, caller, "tar-x", &json!({ "path": s(&archive), "to": s(&t.w) }));
        assert_eq!(r["exit_code"], 0, "{caller:?} tar -x: {r}");
        let m = std::fs::metadata(t.w.join("tool.sh")).unwrap();
        assert_eq!((m.mode() & 0o777, m.mtime()), (0o750, 2_000_000), "{caller:?} tar -x");
    }
}

fn filetime_epoch_plus(p: &Path, secs: i64) {
    let c = std::ffi::CString::new(s(p)).unwrap();
    let t = [libc::timespec { tv_sec: secs, tv_nsec: 0 }; 2];
    // SAFETY: a valid C string and a live array of two timespecs.
    assert_eq!(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), t.as_ptr(), 0) }, 0);
}

/// Starts cordond as the unprivileged test user: it runs every tool as that user, inside an
/// unprivileged user namespace that carries the read-only view (where the kernel allows one).
fn start_unprivileged(t: &Tree) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    let (uid, gid) = agent_ids();
    std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), policy(t)).unwrap();
    Daemon::start_under(&["setpriv", "--reuid", AGENT, "--regid", AGENT, "--init-groups", "--"], dir, policies, &[])
}

/// Whether an unprivileged user can create a user namespace here (then a daemon that is not
/// root gives its tools the read-only view too).
fn unprivileged_user_namespaces() -> bool {
    Command::new("setpriv")
        .args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--"])
        .args(["unshare", "--user", "--mount", "--map-current-user", "/bin/true"])
        .status()
        .is_ok_and(|s| s.success())
}

/// A daemon that is not root: its tools run as its own user, whose files they could otherwise
/// chmod anywhere. In a user namespace the same read-only view applies; where the kernel allows
/// none, the tools are not protected and `cordon doctor` says so.
#[test]
fn a_daemon_that_is_not_root_gives_its_tools_the_view_too() {
    require_root!("a root daemon, and a test user");
    if !unprivileged_user_namespaces() {
        cordon_tests::skip!(
            cordon_tests::Skip::NoUserNamespaces,
            "this kernel refuses unprivileged user namespaces (documented limitation)"
        );
        return;
    }
    let t = tree(Caller::Agent);
    let d = start_unprivileged(&t);
    // The caller is the daemon's own user (clients talk only to a daemon run by root or by
    // themselves); the tool runs as the daemon's user.
    let before: Vec<_> = [t.o.join("victim"), t.r.join("public")].iter().map(|p| snapshot(p)).collect();
    for (op, path) in outside_cases(&t) {
        let r = meta(&d, Caller::Agent, op, &path);
        assert_eq!(r["ok"], false, "{op} {} succeeded: {r}", path.display());
        if op == "fchmodat-empty" {
            assert!(r["errno"] == libc::EPERM || r["errno"] == EROFS, "{op}: {r}");
        } else {
            assert_eq!(r["errno"], EROFS, "{op} {}: EROFS expected: {r}", path.display());
        }
    }
    let after: Vec<_> = [t.o.join("victim"), t.r.join("public")].iter().map(|p| snapshot(p)).collect();
    assert_eq!(before, after, "metadata changed outside the write roots");
    let victim = t.w.join("victim");
    // (Not `acl`: an ACL naming a user the namespace does not map, here nobody, is EINVAL there.)
    for op in ["chmod", "fchmod", "chown", "setxattr", "utime"] {
        let r = meta(&d, Caller::Agent, op, &victim);
        assert_eq!(r["ok"], true, "{op} inside the write root failed: {r}");
    }
    assert_eq!(std::fs::metadata(&victim).unwrap().mode() & 0o7777, 0o666);
    // The tool has no capability left in its user namespace.
    let r = run(&d, Caller::Agent, "attack", &json!({ "attack": "status" }));
    let line: Value = serde_json::from_str(r["stdout"].as_str().unwrap().lines().next().unwrap()).unwrap();
    for key in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
        assert_eq!(line[key], "0000000000000000", "{key}: {line}");
    }
    let doctor = Command::new("setpriv")
        .args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--"])
        .arg(bin("cordon"))
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let doctor: Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let view = doctor["checks"].as_array().unwrap().iter().find(|c| c["name"] == "fs-view").cloned();
    assert_eq!(view.map(|c| c["found"].clone()), Some(json!("user-namespace-view")), "{doctor:#}");
}

/// Finding 1's neighbour: a write root swapped for a symlink after the registry loaded must not
/// make the symlink's target writable in the view (it would open its metadata to chmod).
#[test]
fn a_write_root_swapped_for_a_symlink_does_not_move_the_writable_mount() {
    require_root!("a root daemon, and a test user");
    let t = tree(Caller::Root);
    let d = start(&t);
    std::fs::rename(&t.w, t.w.with_extension("old")).unwrap();
    std::os::unix::fs::symlink(&t.o, &t.w).unwrap();
    let through = t.w.join("victim");
    let out = d.cordon(&[
        "run",
        "attack",
        "--args-json",
        &json!({ "attack": "meta", "a": "chmod", "b": s(&through) }).to_string(),
        "--json",
    ]);
    let v = out.json();
    let line = v["stdout"].as_str().and_then(|o| o.lines().next()).map(|l| serde_json::from_str::<Value>(l).unwrap());
    assert!(line.as_ref().is_none_or(|l| l["ok"] == false), "the chmod ran through the swapped root: {v}");
    assert_eq!(std::fs::metadata(t.o.join("victim")).unwrap().mode() & 0o7777, 0o600);
    assert!(v.get("error").is_some() || line.is_some_and(|l| l["errno"] == EROFS), "{v}");
}

/// A root daemon that cannot build the view (here: no CAP_SYS_ADMIN) runs no tool at all rather
/// than run one with metadata writes open: each call is refused as unavailable, with the reason.
#[test]
fn a_root_daemon_without_views_runs_no_tool() {
    require_root!("a root daemon, and a test user");
    let t = tree(Caller::Root);
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), policy(&t)).unwrap();
    let d = Daemon::start_under(
        &["setpriv", "--inh-caps=-sys_admin", "--bounding-set=-sys_admin", "--"],
        dir,
        policies,
        &[],
    );
    let out = d.cordon(&["run", "chmod-nothing", "--arg", &format!("path={}", s(&t.o.join("victim"))), "--json"]);
    assert_eq!(out.code, Some(69), "{out:?}");
    let v = out.json();
    assert_eq!(v["error"]["code"], "TOOL_UNAVAILABLE", "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("read-only filesystem view"), "{v}");
    assert_eq!(std::fs::metadata(t.o.join("victim")).unwrap().mode() & 0o7777, 0o600);
    // And the admin sees it before anyone tries: every tool is listed unavailable, with why.
    let all = d.cordon(&["tools", "--all", "--json"]).json();
    let tools = all.as_array().or_else(|| all["tools"].as_array()).expect("a tool list");
    assert!(!tools.is_empty(), "{all}");
    for t in tools {
        assert_eq!(t["available"], false, "{t}");
        assert!(t["unavailable_reason"].as_str().unwrap().contains("read-only filesystem view"), "{t}");
    }
}

/// The working directory is part of the view too: a relative path taken from it must not reach
/// the host's writable mounts (the pinned descriptor of the working dir was opened there, so the
/// child enters it by name inside the view and checks it got the pinned directory).
#[test]
fn relative_paths_from_the_working_dir_stay_in_the_read_only_view() {
    require_root!("a root daemon, and a test user");
    let dir = tempfile::Builder::new().prefix("cordon-cwd-").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "secret").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let policy = format!(
        "version = 1\n\n[tools.chmod-here]\ndescription = \"chmod a file of the working dir\"\nreason = \"tests\"\n\
         command = [\"/bin/chmod\", \"0666\", \"victim\"]\nworking_dir = {}\nread = [{}]\n",
        q(dir.path()),
        q(dir.path())
    );
    let d = Daemon::start(&[("t.toml", &policy)]);
    let out = d.cordon(&["run", "chmod-here", "--json"]);
    let r = out.json();
    assert_eq!(r["exit_code"], 1, "{out:?}");
    assert!(r["stderr"].as_str().unwrap().contains("Read-only file system"), "{r}");
    assert_eq!(std::fs::metadata(&victim).unwrap().mode() & 0o7777, 0o600);
}

/// The program itself is in the view too: run through a descriptor opened on the host's mounts,
/// `/proc/self/exe` led a root caller's tool to a writable mount, where it could chmod, ACL or
/// touch its own executable (a root caller owns `/usr/bin/python3`). In a view the child
/// reopens the pinned executable there, so `/proc/self/exe` is read-only like the rest.
#[test]
fn the_tools_own_executable_is_read_only_through_proc_self_exe() {
    require_root!("a root daemon, and a test user");
    let dir = tempfile::Builder::new().prefix("cordon-exe-").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = dir.path().join("attack");
    std::fs::copy(bin("cordon-attack"), &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let policy =
        format!("version = 1\n{}", cordon_tests::attack_tool("self", &copy, &format!("exec = [{}]", q(dir.path()))));
    let d = Daemon::start(&[("t.toml", &policy)]);
    let before = snapshot(&copy);
    for op in ["chmod", "setxattr", "utime", "fchmodat-empty"] {
        let out = d.cordon(&[
            "run",
            "self",
            "--args-json",
            &json!({ "attack": "meta", "a": op, "b": "/proc/self/exe" }).to_string(),
            "--json",
        ]);
        let r = out.json();
        let line: Value = serde_json::from_str(r["stdout"].as_str().unwrap().lines().next().unwrap()).unwrap();
        assert_eq!(line["ok"], false, "{op} through /proc/self/exe succeeded: {line}");
        assert!(line["errno"] == EROFS || (op == "fchmodat-empty" && line["errno"] == libc::EPERM), "{op}: {line}");
    }
    assert_eq!(snapshot(&copy), before, "the executable's metadata changed");
}
