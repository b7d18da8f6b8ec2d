//! Attacks on the sandbox, driven through the real daemon.
//!
//! Every test writes a policy whose tool runs `cordon-attack` (this crate's attack binary, see
//! `tests/src/bin/cordon-attack.rs`), runs one attack through `cordon run --json` and asserts
//! the exact errno, signal or outcome the kernel gives inside the sandbox. Tests that need root
//! (identity changes, cgroups) say so and skip otherwise.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cordon_tests::{Daemon, eventually, is_root, process_gone, require_root};
use serde_json::{Value, json};

/// The attack binary (a bin target of this package).
const ATTACK: &str = env!("CARGO_BIN_EXE_cordon-attack");

/// nobody's uid and gid on Debian-like systems (`run_as = "nobody"`).
const NOBODY: u32 = 65534;

fn bin_dir() -> PathBuf {
    Path::new(ATTACK).parent().unwrap().to_path_buf()
}

/// A TOML basic string (JSON string escapes are valid TOML).
fn q(s: impl AsRef<Path>) -> String {
    serde_json::to_string(s.as_ref().to_str().unwrap()).unwrap()
}

/// A policy file with one attack tool per `(name, extra keys)`. Every tool runs
/// `cordon-attack {{attack}} {{a}} {{b}} {{c}}` with the attack binary's directory granted for
/// execution and a 3 s timeout, unless the extra keys say otherwise.
fn policy(tools: &[(&str, String)]) -> String {
    let mut text = format!("version = 1\n\n[defaults]\nexec = [{}]\ntimeout = \"3s\"\n", q(bin_dir()));
    for (name, extra) in tools {
        text.push_str(&cordon_tests::attack_tool(name, Path::new(ATTACK), extra));
    }
    text
}

fn daemon(tools: &[(&str, String)]) -> Daemon {
    Daemon::start(&[("attacks.toml", &policy(tools))])
}

/// The JSON arguments of one attack: its name and up to three arguments.
fn attack_args(args: &[&str]) -> Value {
    let mut map = serde_json::Map::new();
    map.insert("attack".into(), json!(args[0]));
    for (key, value) in ["a", "b", "c"].iter().zip(&args[1..]) {
        map.insert((*key).into(), json!(value));
    }
    Value::Object(map)
}

/// Runs one attack; returns the invocation's result and the attack's JSON line.
#[track_caller]
fn attack(d: &Daemon, tool: &str, args: &[&str]) -> (Value, Value) {
    let (out, result) = d.run_json(tool, &attack_args(args));
    assert!(result.get("error").is_none(), "{tool} {args:?} was not run: {out:?}\n{}", d.log_text());
    let line = result["stdout"].as_str().unwrap_or_default().lines().next().unwrap_or_default().to_string();
    let report: Value = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("{tool} {args:?}: no JSON line from the attack ({e}): {result:#}"));
    (result, report)
}

/// Asserts that the attack's system call failed with `errno`.
#[track_caller]
fn assert_errno(report: &Value, errno: i32) {
    assert_eq!(report["ok"], false, "the attack succeeded: {report}");
    assert_eq!(report["errno"], errno, "errno {} expected, got: {report}", errno_name(errno));
}

#[track_caller]
fn assert_ok(report: &Value) {
    assert_eq!(report["ok"], true, "the control case failed: {report}");
}

fn errno_name(errno: i32) -> String {
    format!("{} ({errno})", nix::errno::Errno::from_raw(errno).desc())
}

/// A directory for one test, readable by every user (tools may run as nobody).
fn tempdir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("cordon-attack-").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn mkdir(parent: &Path, name: &str) -> PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Whether this host runs tools in a read-only view of the filesystem (see
/// `daemon/src/sandbox/mntns.rs`); the daemons these tests start run as the test's user.
fn in_view() -> bool {
    use cordon_sandbox::{ViewMode, probe_view_mode as probe_mode};
    static MODE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *MODE.get_or_init(|| matches!(probe_mode(is_root()), ViewMode::Private | ViewMode::UserNamespace))
}

/// The errno of a write landlock denies: EACCES, or EROFS in the read-only view (the kernel
/// checks the mount before the LSM).
fn write_denied() -> i32 {
    if in_view() { libc::EROFS } else { libc::EACCES }
}

/// Three directories: `w` (write root), `r` (read root), `o` (granted nothing).
struct Dirs {
    tmp: tempfile::TempDir,
    w: PathBuf,
    r: PathBuf,
    o: PathBuf,
}

fn dirs() -> Dirs {
    let tmp = tempdir();
    let (w, r, o) = (mkdir(tmp.path(), "w"), mkdir(tmp.path(), "r"), mkdir(tmp.path(), "o"));
    Dirs { tmp, w, r, o }
}

impl Dirs {
    fn grants(&self) -> String {
        format!("write = [{}]\nread = [{}]", q(&self.w), q(&self.r))
    }
}

// ---------------------------------------------------------------------------------------------
// Filesystem

#[test]
fn write_outside_the_write_roots_is_denied_eacces() {
    let x = dirs();
    std::fs::write(x.o.join("victim"), "original").unwrap();
    let d = daemon(&[("t", x.grants())]);

    let (_, r) = attack(&d, "t", &["write", s(&x.w.join("inside"))]);
    assert_ok(&r);
    assert_eq!(std::fs::read_to_string(x.w.join("inside")).unwrap(), "written by cordon-attack\n");

    for target in [x.r.join("new"), x.o.join("new"), x.o.join("victim"), d.dir.path().join("new")] {
        let (_, r) = attack(&d, "t", &["write", s(&target)]);
        assert_errno(&r, write_denied());
    }
    assert!(!x.r.join("new").exists() && !x.o.join("new").exists() && !d.dir.path().join("new").exists());
    assert_eq!(std::fs::read_to_string(x.o.join("victim")).unwrap(), "original");
}

/// Moving itself into another cgroup would escape the invocation's limits and its cgroup.kill.
#[test]
fn joining_another_cgroup_is_denied_eacces() {
    let d = daemon(&[("t", String::new())]);
    for procs in
        ["/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/unified/cgroup.procs", "/sys/fs/cgroup/pids/cgroup.procs"]
    {
        if Path::new(procs).exists() {
            let (_, r) = attack(&d, "t", &["write", procs]);
            assert_errno(&r, write_denied());
        }
    }
}

#[test]
fn read_outside_the_read_roots_is_denied_eacces() {
    let x = dirs();
    std::fs::write(x.o.join("secret"), "secret").unwrap();
    std::fs::write(x.r.join("public"), "public").unwrap();
    std::fs::write(x.w.join("scratch"), "scratch").unwrap();
    let d = daemon(&[("t", x.grants())]);

    for granted in [x.r.join("public"), x.w.join("scratch")] {
        let (_, r) = attack(&d, "t", &["read", s(&granted)]);
        assert_ok(&r);
    }
    for denied in [
        x.o.join("secret"),
        PathBuf::from("/etc/shadow"),
        PathBuf::from("/etc/passwd"),
        // The granted /proc/self does not open the whole filesystem through its root link.
        PathBuf::from("/proc/self/root/etc/shadow"),
        d.log.clone(),
    ] {
        let (_, r) = attack(&d, "t", &["read", s(&denied)]);
        assert_errno(&r, libc::EACCES);
    }
}

#[test]
fn write_through_a_symlink_planted_in_a_writable_dir_is_denied_eacces() {
    let x = dirs();
    std::fs::write(x.o.join("victim"), "original").unwrap();
    // One link planted beforehand (say, by an earlier invocation), one by the attack itself.
    std::os::unix::fs::symlink(x.o.join("victim"), x.w.join("pre-planted")).unwrap();
    let d = daemon(&[("t", x.grants())]);

    let (_, r) = attack(&d, "t", &["write", s(&x.w.join("pre-planted"))]);
    assert_errno(&r, write_denied());
    assert_eq!(std::fs::read_to_string(x.o.join("victim")).unwrap(), "original");

    let (_, r) = attack(&d, "t", &["symlink-write", s(&x.w.join("link")), s(&x.o.join("created"))]);
    assert_eq!(r["planted"], true, "symlinks may be made inside a write root: {r}");
    assert_errno(&r, write_denied());
    assert!(!x.o.join("created").exists());
}

/// Landlock answers EACCES, not EXDEV, here: the destination lacks MAKE_REG as well as REFER,
/// and the kernel prefers EACCES whenever a right other than REFER is missing
/// (`current_check_refer_path`). EXDEV only comes when nothing but REFER (or the "no gaining
/// rights by reparenting" rule) stands in the way; see the next test.
#[test]
fn hard_link_and_rename_into_a_read_only_dir_are_denied_eacces() {
    let x = dirs();
    let d = daemon(&[("t", x.grants())]);

    let (_, r) = attack(&d, "t", &["link", s(&x.w.join("a")), s(&x.r.join("a"))]);
    assert_eq!(r["created"], true, "{r}");
    assert_errno(&r, write_denied());
    let (_, r) = attack(&d, "t", &["rename", s(&x.w.join("b")), s(&x.r.join("b"))]);
    assert_eq!(r["created"], true, "{r}");
    // In the read-only view the write root is a mount of its own: rename(2) refuses to cross
    // mounts (EXDEV) before anything else looks.
    assert_errno(&r, if in_view() { libc::EXDEV } else { libc::EACCES });
    assert!(!x.r.join("a").exists() && !x.r.join("b").exists());
    assert!(x.w.join("b").exists(), "the refused rename moved the file");

    // Within the write root both work (control).
    let (_, r) = attack(&d, "t", &["link", s(&x.w.join("c")), s(&x.w.join("c2"))]);
    assert_ok(&r);
}

/// A file written in a write-only root must not gain the execute right by being linked or moved
/// into a root that is both writable and executable: landlock refuses the reparenting with EXDEV.
#[test]
fn hard_link_and_rename_that_would_gain_exec_rights_are_denied_exdev() {
    let x = dirs();
    let wx = mkdir(x.tmp.path(), "wx");
    let d = daemon(&[("t", format!("write = [{}, {}]\nexec = [{}]", q(&x.w), q(&wx), q(&wx)))]);

    let (_, r) = attack(&d, "t", &["link", s(&x.w.join("a")), s(&wx.join("a"))]);
    assert_eq!(r["created"], true, "{r}");
    assert_errno(&r, libc::EXDEV);
    let (_, r) = attack(&d, "t", &["rename", s(&x.w.join("b")), s(&wx.join("b"))]);
    assert_errno(&r, libc::EXDEV);
    assert!(!wx.join("a").exists() && !wx.join("b").exists());
}

#[test]
fn exec_of_a_binary_copied_into_a_writable_dir_is_denied_eacces() {
    let x = dirs();
    let copy = x.w.join("copy");
    std::fs::copy(ATTACK, &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = daemon(&[("t", x.grants())]);

    let (_, r) = attack(&d, "t", &["exec", s(&copy), "ids"]);
    assert_errno(&r, libc::EACCES);
    // The very same bytes run from the exec root.
    let (_, r) = attack(&d, "t", &["exec", ATTACK, "ids"]);
    assert_eq!(r["attack"], "ids", "{r}");
    assert_ok(&r);
}

/// A memfd lives on the kernel's internal shmem mount, which landlock leaves alone
/// (`SB_NOUSER`), so execveat(memfd) would not be checked against the exec roots: seccomp only
/// lets memfd_create through with MFD_NOEXEC_SEAL.
#[test]
fn exec_of_a_memfd_copy_is_denied_eperm() {
    let d = daemon(&[("t", String::new())]);
    let (_, r) = attack(&d, "t", &["memfd-exec", "ids"]);
    assert_ne!(r["attack"], "ids", "the memfd copy ran: {r}");
    assert_eq!(r["step"], "memfd_create", "{r}");
    assert_errno(&r, libc::EPERM);
}

/// Landlock's execute right is checked by execve(2) only: the dynamic loader (readable and
/// executable in /lib) maps a copied binary from a write root with PROT_EXEC and runs it.
#[test]
#[ignore = "LIMITATION (documented in the README): landlock checks execve only, not mmap(PROT_EXEC) by the dynamic loader"]
fn exec_of_a_copied_binary_through_the_dynamic_loader_is_denied() {
    let x = dirs();
    let copy = x.w.join("copy");
    std::fs::copy(ATTACK, &copy).unwrap();
    let d = daemon(&[("t", x.grants())]);
    let loader = ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("no dynamic loader");
    let (_, r) = attack(&d, "t", &["exec", loader, s(&copy), "ids"]);
    assert_ne!(r["attack"], "ids", "the copied binary ran through the loader: {r}");
}

// ---------------------------------------------------------------------------------------------
// Network

/// Two listeners on 127.0.0.1: the policy allows connecting to the first only.
fn listeners() -> (std::net::TcpListener, u16, std::net::TcpListener, u16) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (pa, pb) = (a.local_addr().unwrap().port(), b.local_addr().unwrap().port());
    (a, pa, b, pb)
}

#[test]
fn tcp_connect_to_a_port_not_allowed_is_denied_eacces_and_the_allowed_port_connects() {
    let (_a, allowed, _b, other) = listeners();
    let d = daemon(&[("t", format!("network = {{ connect_tcp = [{allowed}] }}"))]);

    let (_, r) = attack(&d, "t", &["tcp-connect", &allowed.to_string()]);
    assert_eq!(r["step"], "connect");
    assert_ok(&r);
    // The other port is listening too: only landlock stands in the way.
    let (_, r) = attack(&d, "t", &["tcp-connect", &other.to_string()]);
    assert_eq!(r["step"], "connect", "{r}");
    assert_errno(&r, libc::EACCES);
    // No bind_tcp: binding is denied as well.
    let (_, r) = attack(&d, "t", &["tcp-bind", "0"]);
    assert_eq!(r["step"], "bind", "{r}");
    assert_errno(&r, libc::EACCES);
}

#[test]
fn tcp_socket_without_network_is_refused_eperm() {
    let (_a, port, _b, _) = listeners();
    let d = daemon(&[("t", "network = \"none\"".into())]);
    let (_, r) = attack(&d, "t", &["tcp-connect", &port.to_string()]);
    assert_eq!(r["step"], "socket", "{r}");
    assert_errno(&r, libc::EPERM);
    for kind in ["tcp", "tcp6"] {
        let (_, r) = attack(&d, "t", &["socket", kind]);
        assert_errno(&r, libc::EPERM);
    }
}

#[test]
fn udp_socket_and_sendto_are_refused_eperm() {
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = udp.local_addr().unwrap().port();
    let d = daemon(&[("none", String::new()), ("tcp", format!("network = {{ connect_tcp = [{port}] }}"))]);
    for tool in ["none", "tcp"] {
        // sendto is never reached: there is no UDP socket to send from.
        let (_, r) = attack(&d, tool, &["udp-send", &port.to_string()]);
        assert_eq!(r["step"], "socket", "{tool}: {r}");
        assert_errno(&r, libc::EPERM);
        for kind in ["udp", "udp6", "ping"] {
            let (_, r) = attack(&d, tool, &["socket", kind]);
            assert_errno(&r, libc::EPERM);
        }
    }
    udp.set_nonblocking(true).unwrap();
    assert!(udp.recv(&mut [0u8; 64]).is_err(), "a datagram arrived");
}

/// Run with TCP allowed, so that the refusals come from the family/type/protocol checks and not
/// from a blanket socket() denial.
#[test]
fn raw_packet_netlink_vsock_mptcp_and_sctp_sockets_are_refused_eperm() {
    let (_a, port, _b, _) = listeners();
    let d = daemon(&[("t", format!("network = {{ connect_tcp = [{port}] }}"))]);
    let (_, r) = attack(&d, "t", &["socket", "tcp"]);
    assert_ok(&r);
    for kind in ["raw", "packet", "netlink", "vsock", "mptcp", "sctp", "unix"] {
        let (_, r) = attack(&d, "t", &["socket", kind]);
        assert_errno(&r, libc::EPERM);
    }
}

#[test]
fn unix_socket_connect_to_the_daemon_and_elsewhere_is_refused_eperm() {
    let tmp = tempdir();
    let path = tmp.path().join("app.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let d = daemon(&[("t", String::new())]);
    for target in [d.socket.clone(), path] {
        let (_, r) = attack(&d, "t", &["unix-connect", s(&target)]);
        assert_eq!(r["step"], "socket", "{r}");
        assert_errno(&r, libc::EPERM);
    }
}

/// A tool that lists one Unix socket should reach that one only. With landlock below ABI 9
/// nothing governs connect() on a named socket, and `unix_sockets` only lifts the seccomp ban
/// on socket(AF_UNIX): the tool can connect to cordond's socket. cordond refuses every request
/// from a peer inside one of its invocation cgroups, so the real `cordon` run as the tool gets
/// PERMISSION_DENIED.
#[test]
fn a_tool_with_unix_sockets_cannot_drive_cordond() {
    require_root!("peers are recognised by their invocation cgroup");
    let tmp = tempdir();
    let listed = tmp.path().join("app.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&listed).unwrap();
    let d = daemon(&[("t", format!("unix_sockets = [{}]", q(&listed)))]);
    let (_, r) = attack(&d, "t", &["unix-connect", s(&listed)]);
    assert_ok(&r);
    let cordon = cordon_tests::bin("cordon");
    let policy = format!(
        "version = 1\n[tools.drive]\ndescription = \"d\"\nreason = \"t\"\ncommand = [{}, \"--socket\", {}, \"status\"]\nexec = [{}]\nunix_sockets = [{}]\n",
        q(&cordon),
        q(&d.socket),
        q(cordon.parent().unwrap()),
        q(&d.socket)
    );
    d.write_policy("drive.toml", &policy);
    d.cordon(&["reload"]).assert_code(0);
    let (out, j) = d.run_json("drive", &serde_json::json!({}));
    assert_eq!(j["exit_code"], 77, "{out:?}");
    assert!(j["stderr"].as_str().unwrap().contains("requests from inside a cordon invocation are refused"), "{j}");
}

/// TCP Fast Open connects from sendto(MSG_FASTOPEN) without calling connect(2), and landlock
/// (ABI 7, kernel 6.18) only checks connect(2): seccomp refuses the flag.
#[test]
fn tcp_fast_open_to_a_port_not_allowed_is_denied_eperm() {
    let (_a, allowed, b, other) = listeners();
    let d = daemon(&[("t", format!("network = {{ connect_tcp = [{allowed}] }}"))]);
    let (_, r) = attack(&d, "t", &["tcp-fastopen", &other.to_string()]);
    b.set_nonblocking(true).unwrap();
    let reached = b.accept().is_ok();
    assert!(!reached, "the tool connected to port {other} through TCP Fast Open: {r}");
    assert_eq!(r["step"], "sendto", "{r}");
    assert_errno(&r, libc::EPERM);
}

/// listen(2) on an unbound socket binds an ephemeral port without bind(2), which is the only
/// call landlock's BIND_TCP right governs: seccomp refuses listen to tools without bind_tcp.
#[test]
fn listening_without_bind_tcp_is_denied() {
    let (_a, allowed, _b, _) = listeners();
    let d = daemon(&[("t", format!("network = {{ connect_tcp = [{allowed}] }}"))]);
    let (_, r) = attack(&d, "t", &["tcp-listen"]);
    assert_eq!(r["ok"], false, "the tool listens on port {} without bind_tcp: {r}", r["port"]);
}

/// With unix_sockets opted in, landlock's abstract-socket scope (ABI 6) still keeps the tool
/// away from abstract sockets outside its sandbox.
#[test]
fn connect_to_an_abstract_unix_socket_outside_the_sandbox_is_denied_eperm() {
    use std::os::linux::net::SocketAddrExt as _;
    let tmp = tempdir();
    let listed = tmp.path().join("app.sock");
    let _listed = std::os::unix::net::UnixListener::bind(&listed).unwrap();
    let name = format!("cordon-attack-{}-{}", std::process::id(), tmp.path().display());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _abstract = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let d = daemon(&[("t", format!("unix_sockets = [{}]", q(&listed)))]);
    let (_, r) = attack(&d, "t", &["unix-connect", &format!("@{name}")]);
    assert_eq!(r["step"], "connect", "{r}");
    assert_errno(&r, libc::EPERM);
    // A name nobody listens on: the scope check comes first, so the answer is the same.
    let (_, r) = attack(&d, "t", &["unix-connect", "@cordon-attack-nobody-listens"]);
    assert_ne!(r["ok"], true, "{r}");
}

// ---------------------------------------------------------------------------------------------
// Other processes

#[test]
fn ptrace_attach_to_the_daemon_and_to_a_sibling_invocation_is_denied_eperm() {
    let tmp = tempdir();
    let w = mkdir(tmp.path(), "w");
    let (pidfile, stop) = (w.join("sibling.pid"), w.join("stop"));
    let d = daemon(&[("t", format!("write = [{}]\ntimeout = \"20s\"", q(&w)))]);

    let (_, r) = attack(&d, "t", &["ptrace", &d.pid().to_string()]);
    assert_errno(&r, libc::EPERM);

    let sibling = d.cordon_spawn(&[
        "run",
        "t",
        "--args-json",
        &attack_args(&["sleep-pid", s(&pidfile), s(&stop)]).to_string(),
        "--json",
    ]);
    assert!(
        eventually(Duration::from_secs(10), || std::fs::read_to_string(&pidfile).is_ok_and(|t| t.ends_with('\n'))),
        "the sibling never started"
    );
    let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    assert!(!process_gone(pid));
    let (_, r) = attack(&d, "t", &["ptrace", &pid.to_string()]);
    assert_errno(&r, libc::EPERM);
    let (_, r) = attack(&d, "t", &["vm-read", &pid.to_string()]);
    assert_errno(&r, libc::EPERM);
    assert!(!process_gone(pid), "the sibling died");
    std::fs::write(&stop, "").unwrap();
    let out = sibling.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[test]
fn process_vm_readv_on_the_daemon_is_denied_eperm() {
    let d = daemon(&[("t", String::new())]);
    let (_, r) = attack(&d, "t", &["vm-read", &d.pid().to_string()]);
    assert_errno(&r, libc::EPERM);
}

/// Landlock's signal scope (ABI 6): a sandboxed process signals nothing outside its sandbox.
#[test]
fn signalling_the_daemon_is_denied_eperm() {
    let d = daemon(&[("t", String::new())]);
    let (_, r) = attack(&d, "t", &["kill", &d.pid().to_string()]);
    assert_errno(&r, libc::EPERM);
}

/// prlimit(2) on another process needs only matching uids and gids: a tool running as the
/// daemon's uid (a root caller of a root daemon, or any caller of a non-root daemon) could
/// rewrite cordond's limits. Seccomp only allows prlimit64 on the calling process (pid 0).
#[test]
fn lowering_the_daemons_limits_with_prlimit_is_refused_eperm() {
    let d = daemon(&[("t", String::new())]);
    let before = std::fs::read_to_string(format!("/proc/{}/limits", d.pid())).unwrap();
    // Not through `attack`: once the limit bites, cordond may not even finish this invocation.
    let (out, _) = d.run_json("t", &attack_args(&["prlimit", &d.pid().to_string(), "8"]));
    let after = std::fs::read_to_string(format!("/proc/{}/limits", d.pid())).unwrap();
    assert_eq!(before, after, "the tool changed cordond's limits: {out:?}");
    let status = d.cordon(&["status"]);
    assert_eq!(status.code, Some(0), "cordond stopped answering: {status:?}");
}

/// setpriority and sched_setscheduler are allowed by the filter; what refuses them here is
/// the capability rule (`cap_safe_nice`: no changing a process that holds capabilities the
/// caller lacks). A non-root daemon holds none, so this only holds for a root daemon.
#[test]
fn renicing_the_daemon_is_denied_eperm() {
    require_root!("the refusal comes from the root daemon's capabilities");
    let d = daemon(&[("t", String::new())]);
    let (_, r) = attack(&d, "t", &["renice", &d.pid().to_string()]);
    assert_eq!(r["setpriority_errno"], libc::EPERM, "{r}");
    assert_eq!(r["sched_setscheduler_errno"], libc::EPERM, "{r}");
}

#[test]
fn reading_the_daemons_environ_is_denied_eacces() {
    let d = daemon(&[("t", String::new())]);
    let (_, r) = attack(&d, "t", &["environ", &d.pid().to_string()]);
    assert_errno(&r, libc::EACCES);
}

// ---------------------------------------------------------------------------------------------
// Kernel interfaces

#[test]
fn io_uring_setup_is_refused_eperm() {
    let d = daemon(&[("t", String::new())]);
    let (_, r) = attack(&d, "t", &["io-uring"]);
    assert_errno(&r, libc::EPERM);
}

#[test]
fn unshare_and_clone_into_a_user_namespace_are_refused_eperm() {
    let d = daemon(&[("t", String::new())]);
    let (_, r) = attack(&d, "t", &["unshare-user"]);
    assert_errno(&r, libc::EPERM);
    let (_, r) = attack(&d, "t", &["clone-newuser"]);
    assert_errno(&r, libc::EPERM);
}

#[test]
fn clone3_answers_enosys_while_fork_and_threads_still_work() {
    let d = daemon(&[("t", String::new())]);
    let (_, r) = attack(&d, "t", &["clone3"]);
    assert_errno(&r, libc::ENOSYS);
    assert_eq!(r["fork_child_exit"], 7, "fork failed: {r}");
    assert_eq!(r["thread_result"], 42, "thread creation failed: {r}");
}

/// The x32 ABI uses the x86_64 audit architecture with bit 30 set in the syscall number: no
/// such number is on the allow-list, so the filter's default action answers.
#[cfg(target_arch = "x86_64")]
#[test]
fn an_x32_syscall_number_is_refused_eperm() {
    let d = daemon(&[("t", String::new())]);
    let (_, r) = attack(&d, "t", &["x32"]);
    assert_errno(&r, libc::EPERM);
}

/// `int 0x80` enters through the i386 ABI: the filter's architecture check kills the process
/// (SECCOMP_RET_KILL_PROCESS: SIGSYS) before any i386 syscall runs.
#[cfg(target_arch = "x86_64")]
#[test]
fn an_ia32_syscall_kills_the_process_with_sigsys() {
    let d = daemon(&[("t", String::new())]);
    let (out, result) = d.run_json("t", &attack_args(&["ia32"]));
    assert_eq!(result["signal"], libc::SIGSYS, "{out:?}");
    assert_eq!(result["stdout"], "", "the i386 syscall returned: {result}");
}

// ---------------------------------------------------------------------------------------------
// Identity and privileges

#[test]
fn a_setuid_root_copy_stays_unprivileged_under_no_new_privs() {
    require_root!("a setuid-root binary and run_as = \"nobody\"");
    let tmp = tempdir();
    let suid_dir = mkdir(tmp.path(), "suid");
    let copy = suid_dir.join("cordon-attack");
    std::fs::copy(ATTACK, &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o4755)).unwrap();

    // Control: outside the sandbox the copy does make nobody root.
    let out = std::process::Command::new(&copy).arg("ids").uid(NOBODY).gid(NOBODY).output().unwrap();
    let control: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((control["uid"].as_u64(), control["euid"].as_u64()), (Some(NOBODY.into()), Some(0)), "{control}");

    let d = daemon(&[("t", format!("run_as = \"nobody\"\nexec = [{}]", q(&suid_dir)))]);
    let (_, r) = attack(&d, "t", &["exec", s(&copy), "ids"]);
    assert_eq!(r["attack"], "ids", "the setuid copy did not run: {r}");
    for key in ["uid", "euid", "suid", "gid", "egid", "sgid"] {
        assert_eq!(r[key], NOBODY, "{key}: {r}");
    }
    assert_eq!(r["NoNewPrivs"], "1");
    assert_eq!(r["CapEff"], "0000000000000000");
    assert_eq!(r["CapPrm"], "0000000000000000");
}

/// The child shares the daemon's memory until exec (a vfork-style clone): it must change its
/// identity with the kernel's own calls, never glibc's wrappers, which would walk the daemon's
/// thread list from the child and signal each thread (`tgkill`, then a wait on it).
#[test]
fn the_child_changes_identity_with_raw_system_calls_not_glibcs_thread_broadcast() {
    require_root!("run_as = \"nobody\"");
    if std::process::Command::new("strace").arg("-V").output().is_err() {
        cordon_tests::skip!(cordon_tests::Skip::MissingTool("strace"), "strace is not installed");
        return;
    }
    let dir = tempdir();
    let policies = mkdir(dir.path(), "policies");
    std::fs::write(policies.join("attacks.toml"), policy(&[("t", "run_as = \"nobody\"".into())])).unwrap();
    let traces = tempdir();
    let trace = traces.path().join("trace");
    let trace_arg = trace.to_str().unwrap().to_string();
    let wrapper = ["strace", "-f", "-qq", "-o", &trace_arg, "-e", "trace=setresuid,setresgid,setgroups,tgkill,tkill"];
    let mut d = Daemon::start_under(&wrapper, dir, policies, &[]);
    let (_, r) = attack(&d, "t", &["ids"]);
    assert_eq!((r["uid"].as_u64(), r["gid"].as_u64()), (Some(NOBODY.into()), Some(NOBODY.into())), "{r}");
    // cordond (strace's child) stops on SIGTERM; strace then ends and flushes its output.
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", d.pid())).unwrap();
    let cordond: i32 = children.split_whitespace().next().expect("cordond under strace").parse().unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(cordond), nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(d.wait_exit(Duration::from_secs(20)).is_some(), "strace did not end with cordond");
    let text = std::fs::read_to_string(&trace).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines.iter().any(|l| l.contains(&format!("setresuid({NOBODY}, {NOBODY}, {NOBODY})"))),
        "the child's setresuid was not traced:\n{text}"
    );
    let signals: Vec<&&str> = lines.iter().filter(|l| l.contains("tgkill(") || l.contains("tkill(")).collect();
    assert!(signals.is_empty(), "the child signalled threads while changing identity:\n{text}");
}

#[test]
fn proc_self_status_shows_no_new_privs_seccomp_and_no_capabilities() {
    let root = is_root();
    if !root {
        cordon_tests::skip!(cordon_tests::Skip::NotRoot, "the run_as tool, the bounding set and the groups");
    }
    let mut tools = vec![("caller", String::new())];
    if root {
        tools.push(("nobody", "run_as = \"nobody\"".into()));
    }
    let d = daemon(&tools);
    for (tool, _) in &tools {
        let (_, r) = attack(&d, tool, &["status"]);
        assert_ok(&r);
        assert_eq!(r["NoNewPrivs"], "1", "{tool}: {r}");
        assert_eq!(r["Seccomp"], "2", "{tool}: {r}");
        let mut sets = vec!["CapInh", "CapPrm", "CapEff", "CapAmb"];
        if root {
            // When cordond changes identity it also empties the bounding set and the
            // supplementary groups (a non-root daemon can do neither; its tools keep its groups).
            sets.push("CapBnd");
            assert_eq!(r["Groups"], "", "{tool}: supplementary groups kept: {r}");
        }
        for set in sets {
            assert_eq!(r[set], "0000000000000000", "{tool} {set}: {r}");
        }
    }
    if root {
        // The root caller's tool runs as uid 0 but holds no capability (checked above).
        let (_, r) = attack(&d, "caller", &["status"]);
        assert_eq!(r["Uid"], "0\t0\t0\t0", "{r}");
        let (_, r) = attack(&d, "nobody", &["status"]);
        assert_eq!(r["Uid"], format!("{NOBODY}\t{NOBODY}\t{NOBODY}\t{NOBODY}"), "{r}");
    }
}

#[test]
fn only_stdin_stdout_and_stderr_are_open() {
    let d = daemon(&[("t", String::new())]);
    let (_, r) = attack(&d, "t", &["fds"]);
    assert_ok(&r);
    assert_eq!(r["fds"], json!([0, 1, 2]), "{r}");
    assert_eq!(r["targets"]["0"], "/dev/null", "{r}");
    for fd in ["1", "2"] {
        assert!(r["targets"][fd].as_str().unwrap().starts_with("pipe:"), "{r}");
    }
}

#[test]
fn the_environment_holds_only_the_allowed_keys() {
    let d = daemon(&[("t", "env = { FOO = \"bar\" }".into())]);
    let (_, r) = attack(&d, "t", &["env"]);
    assert_eq!(r["keys"], json!(["FOO", "HOME", "LANG", "PATH", "TMPDIR", "TZ", "USER"]), "{r}");
    assert_eq!(r["vars"]["FOO"], "bar");
    // The private temp space: /tmp itself in a view (the tool relies on nothing beneath /tmp),
    // else a fresh directory in cordond's temp dir.
    let tmpdir = r["vars"]["TMPDIR"].as_str().unwrap();
    assert!(tmpdir == "/tmp" || tmpdir.contains("/cordon-"), "{r}");
}

// ---------------------------------------------------------------------------------------------
// Resources

#[test]
fn a_fork_bomb_is_contained_and_the_daemon_keeps_answering() {
    require_root!("the process limit is a pids cgroup");
    let tmp = tempdir();
    let w = mkdir(tmp.path(), "w");
    let marker = w.join("limit-reached");
    let d = daemon(&[("t", format!("write = [{}]\ntimeout = \"2s\"\nlimits = {{ processes = 32 }}", q(&w)))]);
    let bomb = d.cordon_spawn(&[
        "run",
        "t",
        "--args-json",
        &attack_args(&["fork-bomb", s(&marker), "30000"]).to_string(),
        "--json",
    ]);
    assert!(eventually(Duration::from_secs(10), || marker.exists()), "the bomb never hit a limit");
    // While the bomb holds all its processes, the daemon answers.
    let started = Instant::now();
    let status = d.cordon(&["status", "--json"]);
    status.assert_code(0);
    assert_eq!(status.json()["running_invocations"], 1, "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "status took {:?}", started.elapsed());

    let out = bomb.wait_with_output().unwrap();
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["timed_out"], true, "{result}");
    let report: Value = serde_json::from_str(result["stdout"].as_str().unwrap().lines().next().unwrap()).unwrap();
    assert_errno(&report, libc::EAGAIN);
    // pids.max = 32 counts the leader.
    let forked = report["forked"].as_u64().unwrap();
    eprintln!("fork bomb: {forked} forks, then {}", errno_name(libc::EAGAIN));
    assert!((1..=31).contains(&forked), "forked {forked} times: {report}");
    d.cordon(&["status"]).assert_code(0);
}

/// With a memory cgroup (v1 here, memory.limit_in_bytes = memsw = 64 MiB) the balloon is
/// OOM-killed (SIGKILL) as soon as it has touched about 64 MiB. RLIMIT_AS is only a backstop set
/// at 2 x 64 MiB + 256 MiB = 384 MiB, so touching in 16 MiB steps reaches the cgroup limit
/// first and no allocation fails: the kill, not ENOMEM, is what happens.
#[test]
fn a_memory_balloon_is_oom_killed_and_the_daemon_keeps_answering() {
    require_root!("the memory limit is a memory cgroup");
    let d = daemon(&[("t", "limits = { memory = \"64MiB\" }".into())]);
    let (out, result) = d.run_json("t", &attack_args(&["balloon", "512", "16"]));
    assert_eq!(result["signal"], libc::SIGKILL, "{out:?}");
    assert_eq!(result["timed_out"], false);
    assert_eq!(result["stdout"], "", "the balloon survived: {result}");
    let touched: u64 = result["stderr"]
        .as_str()
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("touched ")?.strip_suffix(" MiB")?.parse().ok())
        .max()
        .unwrap_or(0);
    eprintln!("memory balloon: SIGKILL after touching {touched} MiB");
    assert!(touched <= 64, "touched {touched} MiB under a 64 MiB limit");
    d.cordon(&["status"]).assert_code(0);
}

/// One mapping larger than RLIMIT_AS fails with ENOMEM (384 MiB as root with a memory cgroup,
/// 64 MiB without).
#[test]
fn a_single_huge_allocation_fails_enomem() {
    let d = daemon(&[("t", "limits = { memory = \"64MiB\" }".into())]);
    let (_, r) = attack(&d, "t", &["balloon", "512", "512"]);
    assert_errno(&r, libc::ENOMEM);
    assert_eq!(r["touched_mib"], 0);
}

#[test]
fn a_file_past_the_file_size_limit_gets_efbig() {
    let x = dirs();
    let d = daemon(&[("t", format!("{}\nlimits = {{ file_size = \"1MiB\" }}", x.grants()))]);
    let file = x.w.join("big");
    let (result, r) = attack(&d, "t", &["file-size", s(&file), &(2u64 << 20).to_string()]);
    assert_eq!(r["step"], "write", "{r}");
    assert_errno(&r, libc::EFBIG);
    assert_eq!(r["written"], 1u64 << 20);
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 1 << 20);
    assert_eq!(result["exit_code"], 0, "{result}");
}

// ---------------------------------------------------------------------------------------------
// Escaping supervision

fn read_pids(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
}

#[test]
fn a_stubborn_setsid_double_forked_process_is_dead_after_timeout_and_grace() {
    require_root!("only a cgroup reaches a process that left the session");
    let tmp = tempdir();
    let w = mkdir(tmp.path(), "w");
    let pidfile = w.join("pids");
    let d = daemon(&[("t", format!("write = [{}]\ntimeout = \"1s\"", q(&w)))]);
    let (out, result) = d.run_json("t", &attack_args(&["stubborn", s(&pidfile)]));
    out.assert_code(124);
    assert_eq!(result["timed_out"], true, "{result}");
    assert_eq!(result["signal"], libc::SIGKILL, "the leader ignores SIGTERM: {result}");
    let ms = result["duration_ms"].as_u64().unwrap();
    assert!(ms >= 3900, "SIGKILL came before timeout + grace: {ms} ms");
    let report: Value = serde_json::from_str(result["stdout"].as_str().unwrap().lines().next().unwrap()).unwrap();
    let pids = read_pids(&pidfile);
    assert_eq!(pids.len(), 3, "leader, middle, grandchild: {pids:?}");
    assert_eq!(report["pids"], json!(pids));
    let grandchild = pids[2];
    assert!(
        eventually(Duration::from_secs(3), || process_gone(grandchild)),
        "the setsid'd grandchild {grandchild} survived the invocation"
    );
}

#[test]
fn after_kill_9_of_the_daemon_no_sandboxed_process_survives() {
    require_root!("the reaper kills the invocation cgroups");
    let tmp = tempdir();
    let w = mkdir(tmp.path(), "w");
    let pidfile = w.join("pids");
    let mut d = daemon(&[("t", format!("write = [{}]\ntimeout = \"60s\"", q(&w)))]);
    let client =
        d.cordon_spawn(&["run", "t", "--args-json", &attack_args(&["stubborn", s(&pidfile)]).to_string(), "--json"]);
    assert!(eventually(Duration::from_secs(10), || read_pids(&pidfile).len() == 3), "the tool never forked");
    let pids = read_pids(&pidfile);
    // The middle process exits at once by design; the leader and the grandchild stay.
    assert!(!process_gone(pids[0]) && !process_gone(pids[2]), "{pids:?}");

    d.child.kill().unwrap(); // SIGKILL
    d.child.wait().unwrap();
    for pid in pids {
        assert!(
            eventually(Duration::from_secs(5), || process_gone(pid)),
            "sandboxed process {pid} outlived the daemon"
        );
    }
    let _ = client.wait_with_output();
}
