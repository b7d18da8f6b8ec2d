//! Escapes through system calls the seccomp allow-list governs (issue 9, findings 3-5): set-id
//! files by every route that sets a mode, kernel objects named by keys and ids rather than paths,
//! and calls whose target widens through another argument. Each attack runs `cordon-attack`
//! through the real daemon, as a root caller and (as root) as the unprivileged user
//! `cordon-t-agent`, and asserts the exact errno.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cordon_tests::agent::{self, AGENT, SOCKET_GROUP};
use cordon_tests::{Daemon, Output, bin, is_root, process_gone};
use serde_json::{Value, json};

const ATTACK: &str = env!("CARGO_BIN_EXE_cordon-attack");

/// A TOML basic string.
fn q(s: impl AsRef<Path>) -> String {
    serde_json::to_string(s.as_ref().to_str().unwrap()).unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Who runs `cordon`: root (the tool runs as uid 0 without capabilities) or the agent user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    Root,
    Agent,
}

/// The callers an attack runs as here: the current user, plus the agent user when root.
fn callers() -> Vec<Caller> {
    if is_root() {
        agent::ensure();
        vec![Caller::Root, Caller::Agent]
    } else {
        cordon_tests::skip!(
            cordon_tests::Skip::NotRoot,
            "the attacks as the agent user (they run as the current user only)"
        );
        vec![Caller::Root]
    }
}

impl Caller {
    /// The uid the tool runs as.
    fn uid(self) -> u32 {
        match self {
            Caller::Root => nix::unistd::geteuid().as_raw(),
            Caller::Agent => agent::id("-u", AGENT),
        }
    }

    fn gid(self) -> u32 {
        match self {
            Caller::Root => nix::unistd::getegid().as_raw(),
            Caller::Agent => agent::id("-g", AGENT),
        }
    }

    /// A command that runs as this caller.
    fn command(self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        if self == Caller::Agent {
            c.uid(self.uid()).gid(self.gid());
        }
        c
    }
}

/// A policy with one attack tool per `(name, extra keys)`, open to the agent user.
fn policy(tools: &[(&str, String)]) -> String {
    let dir = Path::new(ATTACK).parent().unwrap();
    let mut text = format!("version = 1\n\n[defaults]\nexec = [{}]\ntimeout = \"5s\"\n", q(dir));
    text.push_str(&format!("allow = {{ users = [{}] }}\n", q(AGENT)));
    for (name, extra) in tools {
        text.push_str(&cordon_tests::attack_tool(name, Path::new(ATTACK), extra));
    }
    text
}

/// A daemon whose socket the agent user can reach (as root).
fn daemon(tools: &[(&str, String)]) -> Daemon {
    let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("attacks.toml"), policy(tools)).unwrap();
    // not a skip: the agent caller's half is reported by callers()
    let extra: &[&str] = if is_root() { &["--socket-group", SOCKET_GROUP] } else { &[] };
    Daemon::start_in(dir, policies, extra)
}

fn attack_args(args: &[&str]) -> Value {
    let mut map = serde_json::Map::new();
    map.insert("attack".into(), json!(args[0]));
    for (key, value) in ["a", "b", "c"].iter().zip(&args[1..]) {
        map.insert((*key).into(), json!(value));
    }
    Value::Object(map)
}

/// `cordon run TOOL --json` as `caller`.
fn run(d: &Daemon, caller: Caller, tool: &str, args: &Value) -> (Output, Value) {
    let mut command = if caller == Caller::Agent {
        // With the agent's supplementary groups (the socket group among them).
        let mut c = Command::new("setpriv");
        c.args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--"]).arg(bin("cordon"));
        c
    } else {
        Command::new(bin("cordon"))
    };
    let out = command
        .arg("--socket")
        .arg(&d.socket)
        .args(["run", tool, "--args-json", &args.to_string(), "--json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = Output {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    let json = out.json();
    (out, json)
}

/// Runs one attack as `caller`; returns the attack's JSON line.
#[track_caller]
fn attack(d: &Daemon, caller: Caller, tool: &str, args: &[&str]) -> Value {
    let (out, result) = run(d, caller, tool, &attack_args(args));
    assert!(result.get("error").is_none(), "{caller:?} {tool} {args:?} was not run: {out:?}\n{}", d.log_text());
    let line = result["stdout"].as_str().unwrap_or_default().lines().next().unwrap_or_default().to_string();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{caller:?} {args:?}: no JSON line ({e}): {result:#}"))
}

#[track_caller]
fn assert_errno(caller: Caller, report: &Value, errno: i32) {
    assert_eq!(report["ok"], false, "{caller:?}: the attack succeeded: {report}");
    assert_eq!(
        report["errno"],
        errno,
        "{caller:?}: errno {} ({errno}) expected, got: {report}",
        nix::errno::Errno::from_raw(errno).desc()
    );
}

#[track_caller]
fn assert_ok(caller: Caller, report: &Value) {
    assert_eq!(report["ok"], true, "{caller:?}: the control case failed: {report}");
}

/// A directory the caller owns, inside a tempdir everyone can traverse.
fn owned_dir(tmp: &Path, name: &str, caller: Caller) -> PathBuf {
    let dir = tmp.join(name);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    if is_root() {
        std::os::unix::fs::chown(&dir, Some(caller.uid()), Some(caller.gid())).unwrap();
    }
    dir
}

fn tempdir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("cordon-attack-").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Every file beneath `dir` that carries a set-id bit.
fn setid_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            if meta.mode() & 0o6000 != 0 {
                found.push(e.path());
            }
            if meta.is_dir() {
                stack.push(e.path());
            }
        }
    }
    found
}

/// A process outside any sandbox, as `caller`, in a process group of its own.
fn outside_sleeper(caller: Caller) -> Child {
    caller.command("/bin/sleep").arg("30").process_group(0).stdin(Stdio::null()).spawn().unwrap()
}

fn nice_of(pid: u32) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name: state is field 3; nice is field 19.
    let rest = stat.rsplit_once(')').unwrap().1;
    rest.split_whitespace().nth(16).unwrap().parse().unwrap()
}

fn landlock_abi() -> i64 {
    // SAFETY: with a NULL attribute and the VERSION flag the call reads no memory.
    unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32) }
}

// ---------------------------------------------------------------------------------------------
// Finding 3: set-id files

/// Every system call that sets a mode, creation included, is refused a set-id bit (EPERM);
/// openat2, whose mode lives in memory a filter cannot read, answers ENOSYS (callers fall back
/// to openat); mkdir drops the bits itself. Nothing in the write root ends up set-id.
#[test]
fn no_route_makes_a_set_id_file_in_a_write_root() {
    let tmp = tempdir();
    for caller in callers() {
        let w = owned_dir(tmp.path(), &format!("w-{caller:?}"), caller);
        let d = daemon(&[("t", format!("write = [{}]", q(&w)))]);
        let mut eperm = vec!["fchmod", "fchmodat", "fchmodat-wide", "fchmodat2", "openat", "mknodat"];
        if cfg!(target_arch = "x86_64") {
            eperm.extend(["chmod", "open", "creat", "mknod"]);
        }
        for how in eperm {
            let r = attack(&d, caller, "t", &["setid", how, s(&w.join(how))]);
            assert_errno(caller, &r, libc::EPERM);
            assert_eq!(r["setid"], false, "{caller:?} {how}: {r}");
        }
        let r = attack(&d, caller, "t", &["setid", "tmpfile", s(&w)]);
        assert_errno(caller, &r, libc::EPERM);
        let r = attack(&d, caller, "t", &["setid", "openat2", s(&w.join("openat2"))]);
        assert_errno(caller, &r, libc::ENOSYS);
        assert_eq!(r["setid"], false, "{caller:?} openat2: {r}");
        // mkdir: the kernel keeps only rwx and sticky; the call succeeds without set-id bits.
        let r = attack(&d, caller, "t", &["setid", "mkdir", s(&w.join("dir"))]);
        assert_ok(caller, &r);
        assert_eq!(r["setid"], false, "{caller:?} mkdir: {r}");
        // Control: an ordinary mode change works.
        let r = attack(&d, caller, "t", &["setid", "chmod-plain", s(&w.join("plain"))]);
        assert_ok(caller, &r);
        assert_eq!(r["mode"], "755", "{r}");
        assert_eq!(setid_files(&w), Vec::<PathBuf>::new(), "{caller:?}");
    }
}

/// A file capability (security.capability) would be a set-id file by another name; setting one
/// needs CAP_SETFCAP, which no tool holds.
#[test]
fn file_capabilities_cannot_be_set_eperm() {
    let tmp = tempdir();
    for caller in callers() {
        let w = owned_dir(tmp.path(), &format!("w-{caller:?}"), caller);
        let d = daemon(&[("t", format!("write = [{}]", q(&w)))]);
        let r = attack(&d, caller, "t", &["setxattr-cap", s(&w.join("capped"))]);
        assert_eq!(r["created"], true, "{r}");
        assert_errno(caller, &r, libc::EPERM);
    }
}

/// Real tools that set modes keep working; a set-id mode is refused, not silently dropped.
#[test]
fn common_tools_set_ordinary_modes_and_fail_on_set_id_ones() {
    let tmp = tempdir();
    let w = owned_dir(tmp.path(), "w", Caller::Root);
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(src.join("prog"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(src.join("prog"), std::fs::Permissions::from_mode(0o750)).unwrap();
    std::fs::write(src.join("suid"), "x").unwrap();
    std::fs::set_permissions(src.join("suid"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    let ok_tar = tmp.path().join("ok.tar");
    let suid_tar = tmp.path().join("suid.tar");
    let tar = |archive: &Path, file: &str| {
        let st = Command::new("tar").arg("-cf").arg(archive).arg("-C").arg(&src).arg(file).status().unwrap();
        assert!(st.success());
    };
    tar(&ok_tar, "prog");
    tar(&suid_tar, "suid");
    let mut tools = String::from("version = 1\n");
    let python = ["/usr/bin/python3"].into_iter().find(|p| Path::new(p).exists());
    let mut add = |name: &str, command: Vec<String>| {
        let command: Vec<String> = command.iter().map(q).collect();
        tools.push_str(&format!(
            "[tools.{name}]\ndescription = \"t\"\nreason = \"t\"\ncommand = [{}]\nread = [{}]\nwrite = [{}]\n",
            command.join(", "),
            q(tmp.path()),
            q(&w)
        ));
    };
    let p = |path: &Path| path.to_str().unwrap().to_string();
    add(
        "install",
        vec!["/usr/bin/install".into(), "-m".into(), "755".into(), p(&src.join("prog")), p(&w.join("installed"))],
    );
    add("cp-p", vec!["/usr/bin/cp".into(), "-p".into(), p(&src.join("prog")), p(&w.join("copied"))]);
    add("mkdir-p", vec!["/usr/bin/mkdir".into(), "-p".into(), "-m".into(), "750".into(), p(&w.join("a/b/c"))]);
    add("tar-x", vec!["/usr/bin/tar".into(), "-xpf".into(), p(&ok_tar), "-C".into(), p(&w)]);
    add("chmod-suid", vec!["/usr/bin/chmod".into(), "u+s".into(), p(&w.join("installed"))]);
    add("cp-p-suid", vec!["/usr/bin/cp".into(), "-p".into(), p(&src.join("suid")), p(&w.join("suid-copy"))]);
    add("tar-x-suid", vec!["/usr/bin/tar".into(), "-xpf".into(), p(&suid_tar), "-C".into(), p(&w)]);
    if let Some(py) = python {
        let code = format!("import os; os.chmod({:?}, 0o700)", p(&w.join("copied")));
        add("python-chmod", vec![py.into(), "-c".into(), code]);
    }
    let d = Daemon::start(&[("tools.toml", &tools)]);
    let mode = |name: &str| std::fs::symlink_metadata(w.join(name)).map(|m| m.mode() & 0o7777).ok();
    let ok = |tool: &str| {
        let (out, j) = d.run_json(tool, &json!({}));
        assert_eq!(j["exit_code"], 0, "{tool}: {out:?}");
    };
    ok("install");
    assert_eq!(mode("installed"), Some(0o755));
    ok("cp-p");
    assert_eq!(mode("copied"), Some(0o750));
    ok("mkdir-p");
    assert_eq!(mode("a/b/c"), Some(0o750));
    ok("tar-x");
    assert_eq!(mode("prog"), Some(0o750));
    if python.is_some() {
        ok("python-chmod");
        assert_eq!(mode("copied"), Some(0o700));
    } else {
        cordon_tests::skip!(cordon_tests::Skip::MissingTool("/usr/bin/python3"), "python check: no /usr/bin/python3");
    }
    for tool in ["chmod-suid", "cp-p-suid", "tar-x-suid"] {
        let (out, j) = d.run_json(tool, &json!({}));
        assert_ne!(j["exit_code"], 0, "{tool} reported success: {out:?}");
        assert!(j["stderr"].as_str().unwrap().contains("Operation not permitted"), "{tool}: {j}");
    }
    assert_eq!(setid_files(&w), Vec::<PathBuf>::new());
}

// ---------------------------------------------------------------------------------------------
// Finding 4: kernel objects named by keys and ids

/// A System V segment created outside the sandbox by the tool's own uid: the tool can neither
/// find it by key, attach it by id, nor read its metadata. Queues and semaphore sets are refused
/// the same way (EPERM, where an unrestricted lookup would say ENOENT).
#[test]
fn system_v_ipc_outside_the_sandbox_is_unreachable_eperm() {
    for caller in callers() {
        let key = 0x434f_0000 | (std::process::id() as i32 & 0xfff) << 4 | caller as i32;
        // SAFETY: integer arguments; the segment is attached, written, detached.
        let shm = unsafe { libc::shmget(key, 4096, libc::IPC_CREAT | libc::IPC_EXCL | 0o600) };
        assert!(shm >= 0, "shmget: {}", std::io::Error::last_os_error());
        // SAFETY: as above.
        unsafe {
            let addr = libc::shmat(shm, std::ptr::null(), 0);
            assert_ne!(addr as isize, -1);
            *(addr as *mut u8) = 0x5a;
            libc::shmdt(addr);
            let mut ds: libc::shmid_ds = std::mem::zeroed();
            libc::shmctl(shm, libc::IPC_STAT, &mut ds);
            // The segment belongs to the tool's uid (IPC_SET as root for the agent).
            ds.shm_perm.uid = caller.uid();
            ds.shm_perm.gid = caller.gid();
            assert_eq!(libc::shmctl(shm, libc::IPC_SET, &mut ds), 0);
        }
        let d = daemon(&[("t", String::new())]);
        let r = attack(&d, caller, "t", &["sysv", &key.to_string(), &shm.to_string()]);
        // SAFETY: removes the segment created above.
        unsafe { libc::shmctl(shm, libc::IPC_RMID, std::ptr::null_mut()) };
        assert_errno(caller, &r, libc::EPERM);
        for call in ["shmget", "msgget", "semget", "shmat", "shmctl"] {
            assert_eq!(r[format!("{call}_errno")], libc::EPERM, "{caller:?} {call}: {r}");
        }
        assert_eq!(r["byte"], Value::Null, "{r}");
    }
}

/// POSIX message queues (named in the mqueue filesystem, which landlock does not govern), the
/// kernel keyrings and inotify (its watches take paths landlock does not check) are refused.
#[test]
fn message_queues_keyrings_and_inotify_are_refused_eperm() {
    let tmp = tempdir();
    for caller in callers() {
        let d = daemon(&[("t", String::new())]);
        let r = attack(&d, caller, "t", &["mq-open", "/cordon-attack"]);
        assert_errno(caller, &r, libc::EPERM);
        let r = attack(&d, caller, "t", &["keyring"]);
        assert_errno(caller, &r, libc::EPERM);
        assert_eq!(r["keyctl_errno"], libc::EPERM, "{r}");
        assert_eq!(r["add_key_errno"], libc::EPERM, "{r}");
        let r = attack(&d, caller, "t", &["inotify", s(tmp.path())]);
        assert_eq!(r["step"], "inotify_init1", "{r}");
        assert_errno(caller, &r, libc::EPERM);
    }
}

// ---------------------------------------------------------------------------------------------
// Finding 5: calls whose target widens through another argument

/// setpriority(PRIO_USER, 0, n) would renice every process of the uid; PRIO_PGRP a group; a pid
/// another process. Only the calling process may be reniced.
#[test]
fn setpriority_reaches_only_the_calling_process() {
    for caller in callers() {
        let mut sleeper = outside_sleeper(caller);
        let before = nice_of(sleeper.id());
        let d = daemon(&[("t", String::new())]);
        let daemon_before = nice_of(d.pid() as u32);
        for (which, who) in [("user", "0".to_string()), ("user", caller.uid().to_string()), ("pgrp", "0".into())] {
            let r = attack(&d, caller, "t", &["setpriority", which, &who]);
            assert_errno(caller, &r, libc::EPERM);
        }
        let r = attack(&d, caller, "t", &["setpriority", "process", &sleeper.id().to_string()]);
        assert_errno(caller, &r, libc::EPERM);
        let r = attack(&d, caller, "t", &["setpriority", "process", "0"]);
        assert_ok(caller, &r);
        assert_eq!(nice_of(sleeper.id()), before, "{caller:?}: the outside process was reniced");
        assert_eq!(nice_of(d.pid() as u32), daemon_before, "cordond was reniced");
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
    }
}

/// kill(-1, SIGKILL) is refused by seccomp (below landlock ABI 6 nothing else would stop it);
/// a signal to a process or group outside the sandbox is refused by landlock's scope (ABI 6+).
/// The outside process of the same uid and cordond survive.
#[test]
fn kill_minus_one_and_signals_outside_the_sandbox_are_refused_eperm() {
    for caller in callers() {
        let mut sleeper = outside_sleeper(caller);
        let pid = sleeper.id() as i32;
        let d = daemon(&[("t", String::new())]);
        let r = attack(&d, caller, "t", &["kill-sig", "-1", &libc::SIGKILL.to_string()]);
        assert_errno(caller, &r, libc::EPERM);
        if landlock_abi() >= 6 {
            for target in [pid, -pid, d.pid()] {
                let r = attack(&d, caller, "t", &["kill-sig", &target.to_string(), &libc::SIGKILL.to_string()]);
                assert_errno(caller, &r, libc::EPERM);
            }
        } else {
            cordon_tests::skip!(
                cordon_tests::Skip::LandlockAbi(6),
                "landlock ABI {} has no signal scope: only kill(-1) is checked",
                landlock_abi()
            );
        }
        // Control: its own process group (signal 0 only checks).
        let r = attack(&d, caller, "t", &["kill-sig", "0", "0"]);
        assert_ok(caller, &r);
        assert!(!process_gone(pid), "{caller:?}: the outside process was killed");
        d.cordon(&["status"]).assert_code(0);
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
    }
}

/// F_SETOWN / FIOSETOWN would make the kernel send SIGIO (or, with F_SETSIG, any signal) to
/// another process on I/O; for euid 0 the kernel admits every target. F_SETLEASE would hold back
/// other processes' opens of a file the tool may only read.
#[test]
fn a_signal_owner_or_a_lease_cannot_be_set_eperm() {
    for caller in callers() {
        let mut sleeper = outside_sleeper(caller);
        let d = daemon(&[("t", String::new())]);
        let r = attack(&d, caller, "t", &["sigio-owner", &sleeper.id().to_string()]);
        assert_eq!(r["fcntl_errno"], libc::EPERM, "{caller:?}: {r}");
        assert_eq!(r["ioctl_errno"], libc::EPERM, "{caller:?}: {r}");
        std::thread::sleep(Duration::from_millis(100));
        assert!(!process_gone(sleeper.id() as i32), "{caller:?}: the outside process was signalled");
        // A lease on a system file every tool may read (a root caller owns it).
        let r = attack(&d, caller, "t", &["lease", "/usr/bin/true"]);
        assert_eq!(r["step"], "fcntl", "{r}");
        assert_errno(caller, &r, libc::EPERM);
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
    }
}

/// prctl is limited to options that act on the calling process.
#[test]
fn prctl_options_outside_the_allowed_set_are_refused_eperm() {
    for caller in callers() {
        let d = daemon(&[("t", String::new())]);
        for option in [
            "set-mm",
            "set-ptracer",
            "set-securebits",
            "cap-ambient-raise",
            "capbset-drop",
            "sched-core",
            "set-io-flusher",
        ] {
            let r = attack(&d, caller, "t", &["prctl", option]);
            assert_errno(caller, &r, libc::EPERM);
        }
        for option in ["set-name", "set-child-subreaper"] {
            let r = attack(&d, caller, "t", &["prctl", option]);
            assert_ok(caller, &r);
        }
    }
}

/// clone(CLONE_PARENT) would hand cordond a child it never started; personality could turn off
/// address-space randomization.
#[test]
fn clone_parent_and_personality_are_refused_eperm() {
    for caller in callers() {
        let d = daemon(&[("t", String::new())]);
        let r = attack(&d, caller, "t", &["clone-parent"]);
        assert_errno(caller, &r, libc::EPERM);
        let r = attack(&d, caller, "t", &["personality"]);
        assert_errno(caller, &r, libc::EPERM);
    }
}

/// Extended attributes are outside landlock's reach: by path, a tool could read `user.*` values
/// and ACLs of files beyond every grant. Path-based reads answer EOPNOTSUPP (as a filesystem
/// without xattrs); the descriptor forms still work on a file landlock let the tool open.
#[test]
fn extended_attributes_outside_the_grants_cannot_be_read_eopnotsupp() {
    const PYTHON: &str = "/usr/bin/python3";
    if !Path::new(PYTHON).exists() {
        cordon_tests::skip!(cordon_tests::Skip::MissingTool(PYTHON), "needs {PYTHON}");
        return;
    }
    let tmp = tempdir();
    let outside = tmp.path().join("outside");
    let granted = tmp.path().join("granted");
    for dir in [&outside, &granted] {
        std::fs::create_dir(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let file = dir.join("f");
        std::fs::write(&file, "x").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        if nix::sys::stat::stat(&file).is_err()
            || Command::new(PYTHON)
                .args(["-c", "import os,sys; os.setxattr(sys.argv[1], 'user.secret', b's3cr3t')"])
                .arg(&file)
                .status()
                .map(|s| !s.success())
                .unwrap_or(true)
        {
            cordon_tests::skip!(cordon_tests::Skip::NoUserXattrs, "this filesystem has no user xattrs");
            return;
        }
    }
    let code = r#"
import errno, os, sys
def probe(what, f):
    try:
        print(what, "ok", f())
    except OSError as e:
        print(what, "errno", e.errno)
probe("get-by-path", lambda: os.getxattr(sys.argv[1], "user.secret", follow_symlinks=True))
probe("lget-by-path", lambda: os.getxattr(sys.argv[1], "user.secret", follow_symlinks=False))
probe("list-by-path", lambda: os.listxattr(sys.argv[1]))
fd = os.open(sys.argv[2], os.O_RDONLY)
probe("get-by-fd", lambda: os.getxattr(fd, "user.secret"))
"#;
    let text = format!(
        "version = 1\n\n[tools.xattrs]\ndescription = \"xattr probe\"\nreason = \"tests\"\n\
         command = [{}, \"-c\", {}, {}, {}]\nread = [{}]\nallow = {{ users = [{}] }}\n",
        q(PYTHON),
        q(code),
        q(outside.join("f")),
        q(granted.join("f")),
        q(&granted),
        q(AGENT)
    );
    let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("xattrs.toml"), text).unwrap();
    // not a skip: the agent caller's half is reported by callers()
    let extra: &[&str] = if is_root() { &["--socket-group", SOCKET_GROUP] } else { &[] };
    let d = Daemon::start_in(dir, policies, extra);
    for caller in callers() {
        let (out, result) = run(&d, caller, "xattrs", &json!({}));
        assert_eq!(result["exit_code"], 0, "{caller:?}: {out:?}");
        let stdout = result["stdout"].as_str().unwrap();
        let eopnotsupp = libc::EOPNOTSUPP;
        for what in ["get-by-path", "lget-by-path", "list-by-path"] {
            assert!(stdout.contains(&format!("{what} errno {eopnotsupp}\n")), "{caller:?}: {stdout}");
        }
        assert!(stdout.contains("get-by-fd ok b's3cr3t'"), "{caller:?}: {stdout}");
        assert!(!stdout.contains("get-by-path ok"), "{caller:?}: {stdout}");
    }
}
