//! `cordon-attack [--fail] ATTACK [ARGS...]`: performs exactly one attack on the sandbox it runs in and
//! prints one JSON line, `{"attack": NAME, "ok": BOOL, "errno": N|null, ...}`: `ok` says whether
//! the operation succeeded, `errno` is the error of the failing system call. The sandbox suite
//! (`tests/tests/suite/sandbox.rs`) runs it as a tool through the real daemon.
//!
//! Raw system calls are used wherever libc or std could hide the errno or fall back silently.
//! SIGXFSZ is ignored so that a write past RLIMIT_FSIZE fails with EFBIG instead of killing us.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::ffi::{CString, c_void};
use std::io;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

fn main() {
    // SAFETY: installing SIG_IGN for SIGXFSZ touches no memory of ours.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    // `--fail`: exit 1 when the attack did not succeed (a failed run, for the denial tests).
    let fail = args.first().is_some_and(|a| a == "--fail");
    if fail {
        args.remove(0);
    }
    let Some(name) = args.first() else {
        eprintln!("usage: cordon-attack ATTACK [ARGS...]");
        std::process::exit(2);
    };
    let rest: Vec<&str> = args[1..].iter().map(String::as_str).collect();
    let extra = match run(name, &rest) {
        Ok(extra) => extra,
        Err(usage) => {
            eprintln!("cordon-attack {name}: {usage}");
            std::process::exit(2);
        }
    };
    let succeeded = extra.get("ok") == Some(&json!(true));
    emit(name, extra);
    if fail && !succeeded {
        std::process::exit(1);
    }
}

/// Prints the one result line.
fn emit(name: &str, extra: Map<String, Value>) {
    let mut out = Map::new();
    out.insert("attack".into(), json!(name));
    out.insert("ok".into(), json!(false));
    out.insert("errno".into(), Value::Null);
    out.extend(extra);
    println!("{}", Value::Object(out));
}

/// The result of one system call: its return value, or its errno.
type Sys = Result<i64, i32>;

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn sys(ret: i64) -> Sys {
    if ret < 0 { Err(errno()) } else { Ok(ret) }
}

/// `{"ok": .., "errno": ..}` of one system call's result.
fn outcome(r: Sys) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("ok".into(), json!(r.is_ok()));
    m.insert("errno".into(), r.err().map_or(Value::Null, |e| json!(e)));
    m
}

fn with(mut m: Map<String, Value>, key: &str, value: Value) -> Map<String, Value> {
    m.insert(key.into(), value);
    m
}

fn cstr(s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{s:?} contains NUL"))
}

fn arg<'a>(args: &[&'a str], i: usize, what: &str) -> Result<&'a str, String> {
    args.get(i).copied().ok_or_else(|| format!("missing argument {}: {what}", i + 1))
}

fn num<T: std::str::FromStr>(args: &[&str], i: usize, what: &str) -> Result<T, String> {
    arg(args, i, what)?.parse().map_err(|_| format!("argument {} ({what}) is not a number", i + 1))
}

fn run(name: &str, args: &[&str]) -> Result<Map<String, Value>, String> {
    Ok(match name {
        "write" => outcome(write_file(&cstr(arg(args, 0, "path")?)?)),
        "read" => read_file(&cstr(arg(args, 0, "path")?)?),
        "symlink-write" => symlink_write(arg(args, 0, "link")?, arg(args, 1, "target")?)?,
        "link" => link_or_rename(arg(args, 0, "source")?, arg(args, 1, "destination")?, false)?,
        "rename" => link_or_rename(arg(args, 0, "source")?, arg(args, 1, "destination")?, true)?,
        "exec" => exec(arg(args, 0, "program")?, &args[1..])?,
        "memfd-exec" => memfd_exec(&args[0..])?,
        "tcp-connect" => tcp_connect(num(args, 0, "port")?),
        "tcp-connect-to" => tcp_connect_to(arg(args, 0, "address")?, num(args, 1, "port")?)?,
        "net-view" => net_view(),
        "resolve" => resolve(arg(args, 0, "name")?),
        "http-connect" => http_connect(arg(args, 0, "host:port")?, arg(args, 1, "path")?)?,
        "proxy-flood" => proxy_flood(num(args, 0, "connections")?, arg(args, 1, "host:port")?)?,
        "proxy-hold" => proxy_hold(arg(args, 0, "host:port")?, arg(args, 1, "pid file")?)?,
        "tcp-bind" => tcp_bind(num(args, 0, "port")?),
        "tcp-fastopen" => tcp_fastopen(num(args, 0, "port")?),
        "tcp-listen" => tcp_listen(),
        "udp-send" => udp_send(num(args, 0, "port")?),
        "socket" => socket(arg(args, 0, "kind")?)?,
        "unix-connect" => unix_connect(arg(args, 0, "path")?)?,
        "ptrace" => ptrace_attach(num(args, 0, "pid")?),
        "vm-read" => vm_read(num(args, 0, "pid")?),
        "prlimit" => prlimit_nofile(num(args, 0, "pid")?, num(args, 1, "limit")?),
        "renice" => renice(num(args, 0, "pid")?),
        "kill" => outcome(
            // SAFETY: kill(2) with signal 0 only checks permission; no memory is passed.
            sys(i64::from(unsafe { libc::kill(num(args, 0, "pid")?, 0) })),
        ),
        "io-uring" => io_uring(),
        "unshare-user" => outcome(
            // SAFETY: unshare(2) takes flags only.
            sys(i64::from(unsafe { libc::unshare(libc::CLONE_NEWUSER) })),
        ),
        "clone-newuser" => clone_newuser(),
        "clone3" => clone3_then_fork(),
        "x32" => {
            // SAFETY: the x32 number of getpid(2) takes no arguments.
            outcome(sys(unsafe { libc::syscall(0x4000_0000 | libc::SYS_getpid) }))
        }
        "ia32" => ia32_getpid(),
        "ids" => ids(),
        "status" => proc_status(),
        "fds" => fds()?,
        "environ" => environ(num(args, 0, "pid")?)?,
        "env" => env(),
        "fork-bomb" => fork_bomb(&cstr(arg(args, 0, "marker file")?)?, num(args, 1, "hold ms")?),
        "balloon" => balloon(num(args, 0, "total MiB")?, num(args, 1, "chunk MiB")?),
        "file-size" => file_size(&cstr(arg(args, 0, "path")?)?, num(args, 1, "bytes")?),
        "stubborn" => stubborn(&cstr(arg(args, 0, "pid file")?)?),
        "sleep-pid" => sleep_pid(&cstr(arg(args, 0, "pid file")?)?, arg(args, 1, "stop file")?),
        "setid" => setid(arg(args, 0, "how")?, &cstr(arg(args, 1, "path")?)?)?,
        "setxattr-cap" => setxattr_cap(&cstr(arg(args, 0, "path")?)?),
        "sysv" => sysv(num(args, 0, "key")?, num(args, 1, "shm id")?),
        "mq-open" => mq_open(&cstr(arg(args, 0, "name")?)?),
        "keyring" => keyring(),
        "inotify" => inotify(&cstr(arg(args, 0, "path")?)?),
        "setpriority" => set_priority(arg(args, 0, "which")?, num(args, 1, "who")?)?,
        "kill-sig" => kill_sig(num(args, 0, "pid")?, num(args, 1, "signal")?),
        "sigio-owner" => sigio_owner(num(args, 0, "pid")?),
        "prctl" => prctl(arg(args, 0, "option")?)?,
        "lease" => lease(&cstr(arg(args, 0, "path")?)?),
        "clone-parent" => clone_parent(),
        "personality" => outcome(
            // SAFETY: personality(2) takes an integer; ADDR_NO_RANDOMIZE only affects later execs.
            sys(i64::from(unsafe { libc::personality(libc::ADDR_NO_RANDOMIZE as libc::c_ulong) })),
        ),
        "swap-symlink" => swap_symlink(arg(args, 0, "path")?, arg(args, 1, "target")?),
        "meta" => meta(arg(args, 0, "operation")?, &cstr(arg(args, 1, "path")?)?)?,
        "mv" | "hardlink" | "mkdir" | "rmdir" | "unlink" | "bind" | "umount" | "open-tree" | "unshare-mnt"
        | "move-mount" | "fsopen" | "fsmount" | "fsconfig" | "fspick" | "mount-setattr" | "pivot-root" => {
            path_call(name, args)?
        }
        "opendir" => outcome(open(&cstr(arg(args, 0, "path")?)?, libc::O_RDONLY | libc::O_DIRECTORY).map(|fd| {
            close(fd);
            0
        })),
        "openat-write" => openat_write(arg(args, 0, "directory")?, arg(args, 1, "relative path")?, false)?,
        "fd-path-write" => openat_write(arg(args, 0, "directory")?, arg(args, 1, "relative path")?, true)?,
        other => return Err(format!("unknown attack {other:?}")),
    })
}

// ---------------------------------------------------------------------------------------------
// Files

/// One system call on the path arguments (`mv A B`, `hardlink A B`, `mkdir A`, `rmdir A`,
/// `unlink A`, `bind A B` (recursive), `umount A` (detach), `open-tree A` (clone), `unshare-mnt`,
/// and the other mount calls: `move-mount A B`, `fsopen`, `fsmount`, `fsconfig`, `fspick A`,
/// `mount-setattr A` (clears read-only), `pivot-root A B`).
fn path_call(name: &str, args: &[&str]) -> Result<Map<String, Value>, String> {
    let (a, b) = (cstr(args.first().copied().unwrap_or(""))?, cstr(args.get(1).copied().unwrap_or(""))?);
    let (a, b) = (a.as_ptr(), b.as_ptr());
    // SAFETY: each arm is one raw system call on two valid C strings that outlive it.
    let r: i64 = unsafe {
        match name {
            "mv" => i64::from(libc::rename(a, b)),
            "hardlink" => i64::from(libc::link(a, b)),
            "mkdir" => i64::from(libc::mkdir(a, 0o755)),
            "rmdir" => i64::from(libc::rmdir(a)),
            "unlink" => i64::from(libc::unlink(a)),
            "bind" => i64::from(libc::mount(a, b, std::ptr::null(), libc::MS_BIND | libc::MS_REC, std::ptr::null())),
            "umount" => i64::from(libc::umount2(a, libc::MNT_DETACH)),
            "open-tree" => libc::syscall(
                libc::SYS_open_tree,
                libc::AT_FDCWD,
                a,
                (libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC) as libc::c_uint,
            ),
            "unshare-mnt" => i64::from(libc::unshare(libc::CLONE_NEWNS)),
            "move-mount" => libc::syscall(libc::SYS_move_mount, libc::AT_FDCWD, a, libc::AT_FDCWD, b, 0),
            "fsopen" => libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), 0),
            // On descriptor -1: the filter answers before the kernel would say EBADF.
            "fsmount" => libc::syscall(libc::SYS_fsmount, -1, 0, 0),
            "fsconfig" => libc::syscall(libc::SYS_fsconfig, -1, 6 /* FSCONFIG_CMD_CREATE */, 0, 0, 0),
            "fspick" => libc::syscall(libc::SYS_fspick, libc::AT_FDCWD, a, 0),
            "mount-setattr" => {
                // Clear MOUNT_ATTR_RDONLY on A's mount.
                let attr: [u64; 4] = [0, libc::MOUNT_ATTR_RDONLY, 0, 0];
                libc::syscall(libc::SYS_mount_setattr, libc::AT_FDCWD, a, 0, attr.as_ptr(), 32)
            }
            "pivot-root" => libc::syscall(libc::SYS_pivot_root, a, b),
            other => return Err(format!("unknown path call {other:?}")),
        }
    };
    Ok(outcome(sys(r)))
}

/// Opens `dir`, then creates and writes `rel` relative to its descriptor: with `openat`, or by
/// the magic link `/proc/self/fd/N/REL`.
fn openat_write(dir: &str, rel: &str, proc_path: bool) -> Result<Map<String, Value>, String> {
    let d = match open(&cstr(dir)?, libc::O_RDONLY | libc::O_DIRECTORY) {
        Ok(fd) => fd,
        Err(e) => return Ok(with(outcome(Err(e)), "step", json!("open directory"))),
    };
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC;
    let r = if proc_path {
        open(&cstr(&format!("/proc/self/fd/{d}/{rel}"))?, flags)
    } else {
        let r = cstr(rel)?;
        // SAFETY: a descriptor we opened and a valid C string.
        sys(i64::from(unsafe { libc::openat(d as i32, r.as_ptr(), flags, 0o644) }))
    };
    let r = r.and_then(|fd| {
        let w = write_all(fd, b"written by cordon-attack\n");
        close(fd);
        w
    });
    close(d);
    Ok(outcome(r))
}

fn open(path: &CString, flags: i32) -> Sys {
    // SAFETY: `path` is a valid C string; the mode is read only with O_CREAT.
    sys(i64::from(unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC, 0o644) }))
}

fn close(fd: i64) {
    // SAFETY: closes a descriptor this program opened and no longer uses.
    unsafe { libc::close(fd as i32) };
}

fn write_all(fd: i64, data: &[u8]) -> Sys {
    // SAFETY: writes from a live slice of the given length.
    sys(unsafe { libc::write(fd as i32, data.as_ptr().cast(), data.len()) } as i64)
}

/// Creates (or truncates) `path` and writes a line to it.
fn write_file(path: &CString) -> Sys {
    let fd = open(path, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC)?;
    let r = write_all(fd, b"written by cordon-attack\n");
    close(fd);
    r
}

fn read_file(path: &CString) -> Map<String, Value> {
    let r = open(path, libc::O_RDONLY).and_then(|fd| {
        let mut buf = [0u8; 4096];
        // SAFETY: reads into a live stack buffer of the given length.
        let n = sys(unsafe { libc::read(fd as i32, buf.as_mut_ptr().cast(), buf.len()) } as i64);
        close(fd);
        n
    });
    let bytes = r.ok();
    with(outcome(r), "bytes", json!(bytes))
}

/// Plants `link -> target` and writes through it.
fn symlink_write(link: &str, target: &str) -> Result<Map<String, Value>, String> {
    let (l, t) = (cstr(link)?, cstr(target)?);
    // SAFETY: two valid C strings.
    let planted = sys(i64::from(unsafe { libc::symlink(t.as_ptr(), l.as_ptr()) }));
    let m = outcome(write_file(&l));
    Ok(with(m, "planted", json!(planted.is_ok())))
}

/// Creates `source` (in a writable directory), then hard-links or renames it to `destination`.
fn link_or_rename(source: &str, destination: &str, rename: bool) -> Result<Map<String, Value>, String> {
    let (s, d) = (cstr(source)?, cstr(destination)?);
    let created = write_file(&s);
    let r = if rename {
        // SAFETY: two valid C strings.
        sys(i64::from(unsafe { libc::rename(s.as_ptr(), d.as_ptr()) }))
    } else {
        // SAFETY: two valid C strings.
        sys(i64::from(unsafe { libc::link(s.as_ptr(), d.as_ptr()) }))
    };
    Ok(with(outcome(r), "created", json!(created.is_ok())))
}

// ---------------------------------------------------------------------------------------------
// Exec

/// Replaces this process with `program ARGS...`; prints only if execve fails.
fn exec(program: &str, args: &[&str]) -> Result<Map<String, Value>, String> {
    let prog = cstr(program)?;
    let mut argv = vec![prog.clone()];
    for a in args {
        argv.push(cstr(a)?);
    }
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // SAFETY: a NULL-terminated array of valid C strings that outlive the call; the environment
    // is ours (`environ`).
    let r = sys(i64::from(unsafe { libc::execv(prog.as_ptr(), ptrs.as_ptr()) }));
    Ok(outcome(r))
}

/// Copies our own executable into a memfd and executes that (`execveat(fd, "", AT_EMPTY_PATH)`).
fn memfd_exec(args: &[&str]) -> Result<Map<String, Value>, String> {
    let image = std::fs::read("/proc/self/exe").map_err(|e| format!("cannot read /proc/self/exe: {e}"))?;
    // SAFETY: a static C string and flags.
    let fd = match sys(unsafe { libc::syscall(libc::SYS_memfd_create, c"payload".as_ptr(), 0u32) }) {
        Ok(fd) => fd,
        Err(e) => return Ok(with(outcome(Err(e)), "step", json!("memfd_create"))),
    };
    let mut off = 0;
    while off < image.len() {
        match write_all(fd, &image[off..]) {
            Ok(n) => off += n as usize,
            Err(e) => return Ok(with(outcome(Err(e)), "step", json!("write"))),
        }
    }
    let mut argv = vec![c"payload".to_owned()];
    for a in args {
        argv.push(cstr(a)?);
    }
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let envp = [std::ptr::null::<libc::c_char>()];
    // SAFETY: an open descriptor, an empty C string, NULL-terminated arrays that outlive the call.
    let r = sys(unsafe {
        libc::syscall(libc::SYS_execveat, fd, c"".as_ptr(), ptrs.as_ptr(), envp.as_ptr(), libc::AT_EMPTY_PATH)
    });
    Ok(with(outcome(r), "step", json!("execveat")))
}

// ---------------------------------------------------------------------------------------------
// Network

fn sockaddr_in(port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be() },
        sin_zero: [0; 8],
    }
}

fn new_socket(domain: i32, ty: i32, protocol: i32) -> Sys {
    // SAFETY: socket(2) takes integers only.
    sys(i64::from(unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, protocol) }))
}

/// `{"step": "socket"|"connect"|..., "ok", "errno"}` of a sequence of socket calls.
fn stepped(step: &str, r: Sys) -> Map<String, Value> {
    with(outcome(r), "step", json!(step))
}

fn tcp_connect(port: u16) -> Map<String, Value> {
    let fd = match new_socket(libc::AF_INET, libc::SOCK_STREAM, 0) {
        Ok(fd) => fd,
        Err(e) => return stepped("socket", Err(e)),
    };
    let addr = sockaddr_in(port);
    // SAFETY: a live sockaddr_in and its size.
    let r = sys(i64::from(unsafe {
        libc::connect(fd as i32, (&raw const addr).cast(), size_of::<libc::sockaddr_in>() as libc::socklen_t)
    }));
    close(fd);
    stepped("connect", r)
}

/// connect(2) to any address (IPv4 or IPv6), with a short timeout.
fn tcp_connect_to(addr: &str, port: u16) -> Result<Map<String, Value>, String> {
    let ip: std::net::IpAddr = addr.parse().map_err(|e| format!("address {addr:?}: {e}"))?;
    let r = std::net::TcpStream::connect_timeout(&(ip, port).into(), std::time::Duration::from_secs(2));
    Ok(stepped("connect", r.map(|_| 0).map_err(|e| e.raw_os_error().unwrap_or(-1))))
}

/// The network namespace the attack runs in (its inode) and the interfaces it sees.
fn net_view() -> Map<String, Value> {
    let netns = std::fs::read_link("/proc/self/ns/net").map(|p| p.to_string_lossy().into_owned());
    let dev = std::fs::read_to_string("/proc/self/net/dev").unwrap_or_default();
    // Lines after the two header lines: "  lo: 123 ...".
    let interfaces: Vec<&str> = dev.lines().skip(2).filter_map(|l| l.split(':').next()).map(str::trim).collect();
    let mut m = outcome(Ok(0));
    m.insert("netns".into(), json!(netns.ok()));
    m.insert("interfaces".into(), json!(interfaces));
    m
}

/// Resolves a name with the C library's resolver (getaddrinfo).
fn resolve(name: &str) -> Map<String, Value> {
    use std::net::ToSocketAddrs;
    match (name, 80).to_socket_addrs() {
        Ok(addrs) => {
            let mut m = outcome(Ok(0));
            m.insert("addresses".into(), json!(addrs.map(|a| a.ip().to_string()).collect::<Vec<_>>()));
            m
        }
        Err(e) => with(outcome(Err(e.raw_os_error().unwrap_or(-1))), "error", json!(e.to_string())),
    }
}

/// The egress proxy inside a tool's network namespace (`network.hosts`).
const PROXY: (std::net::Ipv4Addr, u16) = (std::net::Ipv4Addr::LOCALHOST, 3128);

/// Sends `CONNECT target` to the egress proxy and reads its answer's head: the stream, the status
/// code and the head's text.
fn connect_through_proxy(target: &str) -> Result<(std::net::TcpStream, u16, String), String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(PROXY).map_err(|e| format!("connect to the proxy: {e}"))?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).map_err(|e| e.to_string())?;
    write!(s, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            Ok(_) => break,
            Err(e) => return Err(format!("reading the proxy's answer: {e}")),
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((s, status, head))
}

/// A program that speaks HTTP CONNECT itself: tunnels to `target`, then GETs `path` through it.
fn http_connect(target: &str, path: &str) -> Result<Map<String, Value>, String> {
    use std::io::{Read, Write};
    let (mut s, status, head) = connect_through_proxy(target)?;
    let mut rest = Vec::new();
    if status != 200 {
        let _ = s.read_to_end(&mut rest);
        let mut m = outcome(Err(0));
        m.insert("connect_status".into(), json!(status));
        m.insert("head".into(), json!(head));
        m.insert("body".into(), json!(String::from_utf8_lossy(&rest)));
        return Ok(m);
    }
    let host = target.rsplit_once(':').map_or(target, |(h, _)| h);
    write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").map_err(|e| e.to_string())?;
    s.read_to_end(&mut rest).map_err(|e| format!("reading through the tunnel: {e}"))?;
    let text = String::from_utf8_lossy(&rest);
    let mut m = outcome(Ok(0));
    m.insert("connect_status".into(), json!(status));
    m.insert("response".into(), json!(text.lines().next().unwrap_or_default()));
    m.insert("body".into(), json!(text.split("\r\n\r\n").nth(1).unwrap_or_default()));
    Ok(m)
}

/// Opens `n` tunnels to `target` at once and keeps them open: how many the proxy accepted.
fn proxy_flood(n: usize, target: &str) -> Result<Map<String, Value>, String> {
    let mut open = Vec::new();
    let mut statuses: std::collections::BTreeMap<String, u32> = Default::default();
    for _ in 0..n {
        match connect_through_proxy(target) {
            Ok((s, status, _)) => {
                *statuses.entry(status.to_string()).or_default() += 1;
                open.push(s);
            }
            Err(e) => *statuses.entry(e).or_default() += 1,
        }
    }
    let mut m = outcome(Ok(0));
    m.insert("statuses".into(), json!(statuses));
    Ok(m)
}

/// Tunnels to `target`, writes "PID NETNS" to `pid_file`, then reads until the tunnel closes.
fn proxy_hold(target: &str, pid_file: &str) -> Result<Map<String, Value>, String> {
    use std::io::Read;
    let (mut s, status, _) = connect_through_proxy(target)?;
    if status != 200 {
        return Ok(with(outcome(Err(0)), "connect_status", json!(status)));
    }
    let netns = std::fs::read_link("/proc/self/ns/net").map_err(|e| e.to_string())?;
    std::fs::write(pid_file, format!("{} {}", std::process::id(), netns.display())).map_err(|e| e.to_string())?;
    s.set_read_timeout(None).map_err(|e| e.to_string())?;
    let mut total = 0u64;
    let mut buf = [0u8; 8192];
    while let Ok(n @ 1..) = s.read(&mut buf) {
        total += n as u64;
    }
    Ok(with(outcome(Ok(0)), "bytes", json!(total)))
}

fn tcp_bind(port: u16) -> Map<String, Value> {
    let fd = match new_socket(libc::AF_INET, libc::SOCK_STREAM, 0) {
        Ok(fd) => fd,
        Err(e) => return stepped("socket", Err(e)),
    };
    let addr = sockaddr_in(port);
    // SAFETY: a live sockaddr_in and its size.
    let r = sys(i64::from(unsafe {
        libc::bind(fd as i32, (&raw const addr).cast(), size_of::<libc::sockaddr_in>() as libc::socklen_t)
    }));
    close(fd);
    stepped("bind", r)
}

/// listen(2) on a socket that was never bound: the kernel binds an ephemeral port itself.
fn tcp_listen() -> Map<String, Value> {
    let fd = match new_socket(libc::AF_INET, libc::SOCK_STREAM, 0) {
        Ok(fd) => fd,
        Err(e) => return stepped("socket", Err(e)),
    };
    // SAFETY: integer arguments only.
    let r = sys(i64::from(unsafe { libc::listen(fd as i32, 1) }));
    // SAFETY: sockaddr_in is plain data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a live sockaddr_in and its length.
    unsafe { libc::getsockname(fd as i32, (&raw mut addr).cast(), &mut len) };
    close(fd);
    with(stepped("listen", r), "port", json!(u16::from_be(addr.sin_port)))
}

/// TCP Fast Open: sendto(MSG_FASTOPEN) connects without calling connect(2).
fn tcp_fastopen(port: u16) -> Map<String, Value> {
    let fd = match new_socket(libc::AF_INET, libc::SOCK_STREAM, 0) {
        Ok(fd) => fd,
        Err(e) => return stepped("socket", Err(e)),
    };
    let addr = sockaddr_in(port);
    let msg = b"cordon-attack fastopen";
    // SAFETY: a live buffer, a live sockaddr_in and their sizes.
    let r = sys(unsafe {
        libc::sendto(
            fd as i32,
            msg.as_ptr().cast(),
            msg.len(),
            libc::MSG_FASTOPEN,
            (&raw const addr).cast(),
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    } as i64);
    close(fd);
    stepped("sendto", r)
}

fn udp_send(port: u16) -> Map<String, Value> {
    let fd = match new_socket(libc::AF_INET, libc::SOCK_DGRAM, 0) {
        Ok(fd) => fd,
        Err(e) => return stepped("socket", Err(e)),
    };
    let addr = sockaddr_in(port);
    let msg = b"cordon-attack";
    // SAFETY: a live buffer, a live sockaddr_in and their sizes.
    let r = sys(unsafe {
        libc::sendto(
            fd as i32,
            msg.as_ptr().cast(),
            msg.len(),
            0,
            (&raw const addr).cast(),
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    } as i64);
    close(fd);
    stepped("sendto", r)
}

/// Creates one socket of a kind landlock cannot govern (or TCP, as a control).
fn socket(kind: &str) -> Result<Map<String, Value>, String> {
    const IPPROTO_MPTCP: i32 = 262;
    const ETH_P_ALL: u16 = 0x0003;
    let (domain, ty, protocol) = match kind {
        "tcp" => (libc::AF_INET, libc::SOCK_STREAM, 0),
        "tcp6" => (libc::AF_INET6, libc::SOCK_STREAM, libc::IPPROTO_TCP),
        "udp" => (libc::AF_INET, libc::SOCK_DGRAM, 0),
        "udp6" => (libc::AF_INET6, libc::SOCK_DGRAM, 0),
        "ping" => (libc::AF_INET, libc::SOCK_DGRAM, libc::IPPROTO_ICMP),
        "raw" => (libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP),
        "packet" => (libc::AF_PACKET, libc::SOCK_RAW, i32::from(ETH_P_ALL.to_be())),
        "netlink" => (libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE),
        "vsock" => (libc::AF_VSOCK, libc::SOCK_STREAM, 0),
        "mptcp" => (libc::AF_INET, libc::SOCK_STREAM, IPPROTO_MPTCP),
        "sctp" => (libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_SCTP),
        "unix" => (libc::AF_UNIX, libc::SOCK_STREAM, 0),
        other => return Err(format!("unknown socket kind {other:?}")),
    };
    let r = new_socket(domain, ty, protocol);
    if let Ok(fd) = r {
        close(fd);
    }
    Ok(with(outcome(r), "kind", json!(kind)))
}

fn unix_connect(path: &str) -> Result<Map<String, Value>, String> {
    let fd = match new_socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) {
        Ok(fd) => fd,
        Err(e) => return Ok(stepped("socket", Err(e))),
    };
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    if path.len() >= addr.sun_path.len() {
        return Err(format!("socket path too long: {path}"));
    }
    // "@name" is the abstract socket "\0name" (its address length counts exactly its bytes).
    let (bytes, len) = match path.strip_prefix('@') {
        Some(name) => {
            let mut b = vec![0u8];
            b.extend_from_slice(name.as_bytes());
            let len = b.len();
            (b, std::mem::offset_of!(libc::sockaddr_un, sun_path) + len)
        }
        None => (path.as_bytes().to_vec(), size_of::<libc::sockaddr_un>()),
    };
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    // SAFETY: a live sockaddr_un and a length within it.
    let r = sys(i64::from(unsafe { libc::connect(fd as i32, (&raw const addr).cast(), len as libc::socklen_t) }));
    close(fd);
    Ok(stepped("connect", r))
}

// ---------------------------------------------------------------------------------------------
// Other processes

fn ptrace_attach(pid: i32) -> Map<String, Value> {
    // SAFETY: PTRACE_ATTACH takes a pid; addr and data are ignored.
    let r = sys(unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, 0usize, 0usize) });
    if r.is_ok() {
        // SAFETY: as above; detach what we attached.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, 0usize, 0usize) };
    }
    outcome(r)
}

fn vm_read(pid: i32) -> Map<String, Value> {
    let mut buf = [0u8; 64];
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // Any address will do: the call must be refused before the remote address matters.
    let remote = libc::iovec { iov_base: 0x40_0000 as *mut c_void, iov_len: buf.len() };
    // SAFETY: the local iovec points to a live buffer; the remote one is only read by the kernel.
    let r = sys(unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) } as i64);
    outcome(r)
}

/// Lowers another process's RLIMIT_NOFILE (soft and hard) to `limit`.
fn prlimit_nofile(pid: i32, limit: u64) -> Map<String, Value> {
    let new = libc::rlimit64 { rlim_cur: limit, rlim_max: limit };
    let mut old = libc::rlimit64 { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: live rlimit structures.
    let r = sys(i64::from(unsafe { libc::prlimit64(pid, libc::RLIMIT_NOFILE, &new, &mut old) }));
    with(outcome(r), "old", json!([old.rlim_cur, old.rlim_max]))
}

/// Lowers another process's priority: nice 19, then SCHED_IDLE.
fn renice(pid: i32) -> Map<String, Value> {
    // SAFETY: integer arguments only.
    let nice = sys(i64::from(unsafe { libc::setpriority(libc::PRIO_PROCESS, pid as libc::id_t, 19) }));
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: a live sched_param.
    let idle = sys(i64::from(unsafe { libc::sched_setscheduler(pid, libc::SCHED_IDLE, &param) }));
    let mut m = outcome(nice.and(idle));
    m.insert("setpriority_errno".into(), json!(nice.err()));
    m.insert("sched_setscheduler_errno".into(), json!(idle.err()));
    m
}

fn environ(pid: i32) -> Result<Map<String, Value>, String> {
    Ok(read_file(&cstr(&format!("/proc/{pid}/environ"))?))
}

// ---------------------------------------------------------------------------------------------
// Kernel interfaces that bypass filters or add privileges

fn io_uring() -> Map<String, Value> {
    // struct io_uring_params is 120 bytes.
    let mut params = [0u8; 120];
    // SAFETY: a live, zeroed buffer of the size of struct io_uring_params.
    let r = sys(unsafe { libc::syscall(libc::SYS_io_uring_setup, 8u32, params.as_mut_ptr()) });
    if let Ok(fd) = r {
        close(fd);
    }
    outcome(r)
}

/// Waits for `pid` and returns its exit code (or 128 + signal).
fn wait_exit(pid: i32) -> i32 {
    let mut status = 0;
    // SAFETY: waits for our own child into a live integer.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) }
}

fn clone_newuser() -> Map<String, Value> {
    // SAFETY: a raw clone without CLONE_VM behaves like fork: the child gets a copy of memory and
    // only calls _exit.
    let r = sys(unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    });
    match r {
        Ok(0) => {
            // SAFETY: the child leaves at once.
            unsafe { libc::_exit(0) }
        }
        Ok(pid) => {
            wait_exit(pid as i32);
        }
        Err(_) => {}
    }
    outcome(r)
}

/// clone3 (must be ENOSYS), then fork and a thread (must still work through the fallback).
fn clone3_then_fork() -> Map<String, Value> {
    // struct clone_args (v2, 88 bytes): flags, pidfd, child_tid, parent_tid, exit_signal, ...
    let mut args = [0u64; 11];
    args[4] = libc::SIGCHLD as u64;
    // SAFETY: a live clone_args and its size; without CLONE_VM the child is a copy that only
    // calls _exit.
    let r = sys(unsafe { libc::syscall(libc::SYS_clone3, args.as_mut_ptr(), size_of_val(&args)) });
    match r {
        Ok(0) => {
            // SAFETY: the child leaves at once.
            unsafe { libc::_exit(0) }
        }
        Ok(pid) => {
            wait_exit(pid as i32);
        }
        Err(_) => {}
    }
    // SAFETY: fork in a single-threaded program; the child only calls _exit.
    let fork = match unsafe { libc::fork() } {
        0 => {
            // SAFETY: the child leaves at once.
            unsafe { libc::_exit(7) }
        }
        pid if pid > 0 => Ok(wait_exit(pid)),
        _ => Err(errno()),
    };
    let thread = std::thread::Builder::new().spawn(|| 6 * 7).map(|h| h.join().ok());
    let mut m = outcome(r);
    m.insert("fork_errno".into(), json!(fork.err()));
    m.insert("fork_child_exit".into(), json!(fork.ok()));
    m.insert("thread_result".into(), json!(thread.ok().flatten()));
    m
}

/// i386 getpid through `int 0x80`: a foreign architecture for the filter.
fn ia32_getpid() -> Map<String, Value> {
    #[cfg(target_arch = "x86_64")]
    {
        let ret: i64;
        // SAFETY: `int 0x80` with eax = 20 is getpid(2) of the i386 ABI: no arguments, no memory.
        // The compat entry may clear r8-r11, so they are marked clobbered.
        unsafe {
            std::arch::asm!(
                "int 0x80",
                inlateout("rax") 20i64 => ret,
                out("r8") _, out("r9") _, out("r10") _, out("r11") _,
                options(nostack),
            );
        }
        let r = if ret < 0 { Err(-ret as i32) } else { Ok(ret) };
        with(outcome(r), "ret", json!(ret))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        with(outcome(Err(libc::ENOSYS)), "skipped", json!("not x86_64"))
    }
}

// ---------------------------------------------------------------------------------------------
// What the process is

fn ids() -> Map<String, Value> {
    let (mut ruid, mut euid, mut suid) = (0, 0, 0);
    let (mut rgid, mut egid, mut sgid) = (0, 0, 0);
    // SAFETY: six live integers.
    unsafe {
        libc::getresuid(&mut ruid, &mut euid, &mut suid);
        libc::getresgid(&mut rgid, &mut egid, &mut sgid);
    }
    let mut m = outcome(Ok(0));
    m.insert("uid".into(), json!(ruid));
    m.insert("euid".into(), json!(euid));
    m.insert("suid".into(), json!(suid));
    m.insert("gid".into(), json!(rgid));
    m.insert("egid".into(), json!(egid));
    m.insert("sgid".into(), json!(sgid));
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for key in ["NoNewPrivs", "CapEff", "CapPrm"] {
        m.insert(key.into(), json!(status_field(&status, key)));
    }
    m
}

fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':').map(str::trim))
}

fn proc_status() -> Map<String, Value> {
    match std::fs::read_to_string("/proc/self/status") {
        Ok(status) => {
            let mut m = outcome(Ok(0));
            for key in
                ["Uid", "Gid", "Groups", "NoNewPrivs", "Seccomp", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]
            {
                m.insert(key.into(), json!(status_field(&status, key)));
            }
            m
        }
        Err(e) => outcome(Err(e.raw_os_error().unwrap_or(0))),
    }
}

/// Open descriptors, from /proc/self/fd, without the one used to list them.
fn fds() -> Result<Map<String, Value>, String> {
    let path = cstr("/proc/self/fd")?;
    // SAFETY: a valid C string.
    let dir = unsafe { libc::opendir(path.as_ptr()) };
    if dir.is_null() {
        return Ok(outcome(Err(errno())));
    }
    // SAFETY: `dir` is an open directory stream.
    let own = unsafe { libc::dirfd(dir) };
    let mut fds = Vec::new();
    let mut targets = Map::new();
    loop {
        // SAFETY: `dir` is open; the entry stays valid until the next readdir.
        let entry = unsafe { libc::readdir(dir) };
        if entry.is_null() {
            break;
        }
        // SAFETY: d_name of a live entry is a NUL-terminated string.
        let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) }.to_string_lossy().into_owned();
        let Ok(fd) = name.parse::<i32>() else { continue };
        if fd == own {
            continue;
        }
        fds.push(fd);
        let target = std::fs::read_link(format!("/proc/self/fd/{fd}")).map(|t| t.display().to_string());
        targets.insert(fd.to_string(), json!(target.ok()));
    }
    // SAFETY: closes the stream opened above.
    unsafe { libc::closedir(dir) };
    fds.sort_unstable();
    let mut m = outcome(Ok(0));
    m.insert("fds".into(), json!(fds));
    m.insert("targets".into(), Value::Object(targets));
    Ok(m)
}

fn env() -> Map<String, Value> {
    let mut keys: Vec<String> = std::env::vars_os().map(|(k, _)| k.to_string_lossy().into_owned()).collect();
    keys.sort();
    let vars: Map<String, Value> =
        std::env::vars_os().map(|(k, v)| (k.to_string_lossy().into_owned(), json!(v.to_string_lossy()))).collect();
    with(with(outcome(Ok(0)), "keys", json!(keys)), "vars", Value::Object(vars))
}

// ---------------------------------------------------------------------------------------------
// Resources

/// Forks until the kernel refuses; children wait to be killed. Then writes `marker`, prints, and
/// holds the whole tree for `hold_ms` before exiting.
fn fork_bomb(marker: &CString, hold_ms: u64) -> ! {
    let mut forked = 0u32;
    let mut failure = None;
    while forked < 100_000 {
        // SAFETY: fork in a single-threaded program; the child only calls pause and _exit.
        match unsafe { libc::fork() } {
            0 => loop {
                // SAFETY: waits for a signal; async-signal-safe.
                unsafe { libc::pause() };
            },
            pid if pid > 0 => forked += 1,
            _ => {
                failure = Some(errno());
                break;
            }
        }
    }
    let _ = write_file(marker);
    let mut m = outcome(failure.map_or(Ok(0), Err));
    m.insert("forked".into(), json!(forked));
    emit("fork-bomb", m);
    std::thread::sleep(Duration::from_millis(hold_ms));
    std::process::exit(0)
}

/// Maps and touches `total` MiB in `chunk` MiB steps, reporting progress on stderr.
fn balloon(total_mib: usize, chunk_mib: usize) -> Map<String, Value> {
    let chunk = chunk_mib.max(1) << 20;
    let mut touched = 0usize;
    while touched < total_mib << 20 {
        // SAFETY: an anonymous private mapping; no file, no fixed address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                chunk,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let m = outcome(Err(errno()));
            return with(m, "touched_mib", json!(touched >> 20));
        }
        let base = p.cast::<u8>();
        for off in (0..chunk).step_by(4096) {
            // SAFETY: `off` is within the mapping just created.
            unsafe { base.add(off).write_volatile(1) };
        }
        touched += chunk;
        eprintln!("touched {} MiB", touched >> 20);
    }
    with(outcome(Ok(0)), "touched_mib", json!(touched >> 20))
}

/// Writes `bytes` to `path` in 64 KiB blocks; stops at the first error.
fn file_size(path: &CString, bytes: u64) -> Map<String, Value> {
    let fd = match open(path, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC) {
        Ok(fd) => fd,
        Err(e) => return with(outcome(Err(e)), "step", json!("open")),
    };
    let block = [b'x'; 64 * 1024];
    let mut written = 0u64;
    let mut r = Ok(0);
    while written < bytes {
        let n = (bytes - written).min(block.len() as u64) as usize;
        match write_all(fd, &block[..n]) {
            Ok(k) => written += k as u64,
            Err(e) => {
                r = Err(e);
                break;
            }
        }
    }
    close(fd);
    with(with(outcome(r), "written", json!(written)), "step", json!("write"))
}

// ---------------------------------------------------------------------------------------------
// Escaping supervision

fn append_pid(file: &CString, pid: i32) {
    // SAFETY: a valid C string.
    let fd = unsafe { libc::open(file.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND, 0o644) };
    if fd >= 0 {
        let line = format!("{pid}\n");
        let _ = write_all(i64::from(fd), line.as_bytes());
        close(i64::from(fd));
    }
}

/// Ignores SIGTERM, then double-forks a grandchild in a new session that ignores SIGTERM too.
/// Records the pids (leader, middle, grandchild) in `pidfile`, prints, and never exits.
fn stubborn(pidfile: &CString) -> ! {
    // SAFETY: installs SIG_IGN; inherited by the children.
    unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
    // SAFETY: getpid has no arguments.
    append_pid(pidfile, unsafe { libc::getpid() });
    // SAFETY: fork in a single-threaded program; the children below only make system calls.
    let middle = unsafe { libc::fork() };
    if middle == 0 {
        // SAFETY: plain system calls in the forked child, on integers and a valid C string.
        unsafe {
            libc::setsid();
            let grandchild = libc::fork();
            if grandchild == 0 {
                loop {
                    libc::sleep(1);
                }
            }
            append_pid(pidfile, libc::getpid());
            append_pid(pidfile, grandchild);
            libc::_exit(0);
        }
    }
    if middle < 0 {
        emit("stubborn", outcome(Err(errno())));
        std::process::exit(1);
    }
    wait_exit(middle);
    let pids = std::fs::read_to_string(pidfile.to_string_lossy().as_ref()).unwrap_or_default();
    let pids: Vec<i32> = pids.lines().filter_map(|l| l.parse().ok()).collect();
    emit("stubborn", with(outcome(Ok(0)), "pids", json!(pids)));
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Records our pid, then waits (at most 20 s) until `stop` exists.
fn sleep_pid(pidfile: &CString, stop: &str) -> Map<String, Value> {
    // SAFETY: getpid has no arguments.
    append_pid(pidfile, unsafe { libc::getpid() });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::path::Path::new(stop).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    outcome(Ok(0))
}

// ---------------------------------------------------------------------------------------------
// Set-id files, file capabilities

/// linux/capability.h and fcntl.h values the libc crate does not export.
const CAP_SETUID: u32 = 7;
const F_SETSIG: i32 = 10;

/// The permission bits of `path` (with the set-id and sticky bits), when it exists.
fn mode_of(path: &CString) -> Option<u32> {
    // SAFETY: stat is plain data; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a live stat buffer.
    (unsafe { libc::lstat(path.as_ptr(), &mut st) } == 0).then_some(st.st_mode & 0o7777)
}

/// Creates `path` with mode 0644 (no set-id bit), for the calls that change an existing file.
fn plain_file(path: &CString) -> Sys {
    // SAFETY: a valid C string; flags and mode are integers.
    let fd = sys(unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC,
            0o644,
        )
    })?;
    close(fd);
    Ok(0)
}

/// A raw system call with four arguments (pointers passed as integers).
///
/// # Safety
/// Every pointer argument must point to live memory of the kind the call expects.
unsafe fn raw4(nr: i64, a: u64, b: u64, c: u64, d: u64) -> Sys {
    // SAFETY: the caller guarantees the pointer arguments; the rest are integers.
    sys(unsafe { libc::syscall(nr, a, b, c, d) })
}

/// Tries to make `path` a set-user-id or set-group-id file in one way (`how`), with raw system
/// calls; reports the call's outcome and the file's mode afterwards.
fn setid(how: &str, path: &CString) -> Result<Map<String, Value>, String> {
    const SETID: u32 = libc::S_ISUID | libc::S_ISGID;
    let p = path.as_ptr() as u64;
    let at = libc::AT_FDCWD as u64;
    let create = (libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC) as u64;
    let reg = u64::from(libc::S_IFREG);
    // The file exists first, for the calls that change a mode.
    let existing = |nr: i64, args: [u64; 4]| {
        plain_file(path)?;
        // SAFETY: `p` points to `path`, alive for the call; the other arguments are integers.
        unsafe { raw4(nr, args[0], args[1], args[2], args[3]) }
    };
    // SAFETY (the calls below): as above; `how_buf` is a live struct open_how.
    let r: Sys = match how {
        "chmod-plain" => existing(libc::SYS_fchmodat, [at, p, 0o755, 0]),
        #[cfg(target_arch = "x86_64")]
        "chmod" => existing(libc::SYS_chmod, [p, 0o4755, 0, 0]),
        "fchmod" => plain_file(path).and_then(|_| {
            let fd = open(path, libc::O_RDONLY)?;
            // SAFETY: integer arguments only.
            let r = unsafe { raw4(libc::SYS_fchmod, fd as u64, 0o2755, 0, 0) };
            close(fd);
            r
        }),
        "fchmodat" => existing(libc::SYS_fchmodat, [at, p, 0o6755, 0]),
        // The kernel reads a umode_t: the high half of the register neither hides nor adds a bit.
        "fchmodat-wide" => existing(libc::SYS_fchmodat, [at, p, (1 << 32) | 0o4755, 0]),
        "fchmodat2" => existing(452 /* fchmodat2 */, [at, p, 0o4755, 0]),
        // SAFETY: see above.
        #[cfg(target_arch = "x86_64")]
        "open" => unsafe { raw4(libc::SYS_open, p, create, 0o4755, 0) },
        // SAFETY: see above.
        "openat" => unsafe { raw4(libc::SYS_openat, at, p, create, 0o2755) },
        // SAFETY: see above.
        #[cfg(target_arch = "x86_64")]
        "creat" => unsafe { raw4(libc::SYS_creat, p, 0o4755, 0, 0) },
        // O_TMPFILE in the directory `path` names.
        // SAFETY: see above.
        "tmpfile" => unsafe { raw4(libc::SYS_openat, at, p, (libc::O_TMPFILE | libc::O_WRONLY) as u64, 0o4755) },
        "openat2" => {
            // struct open_how { u64 flags; u64 mode; u64 resolve; }
            let how_buf = [create, 0o4755u64, 0];
            // SAFETY: see above.
            unsafe { raw4(libc::SYS_openat2, at, p, how_buf.as_ptr() as u64, size_of_val(&how_buf) as u64) }
        }
        // SAFETY: see above.
        #[cfg(target_arch = "x86_64")]
        "mknod" => unsafe { raw4(libc::SYS_mknod, p, reg | 0o4755, 0, 0) },
        // SAFETY: see above.
        "mknodat" => unsafe { raw4(libc::SYS_mknodat, at, p, reg | 0o6755, 0) },
        // SAFETY: see above.
        "mkdir" => unsafe { raw4(libc::SYS_mkdirat, at, p, 0o7777, 0) },
        other => return Err(format!("unknown way {other:?}")),
    };
    if let Ok(fd) = r
        && matches!(how, "open" | "openat" | "creat" | "tmpfile" | "openat2")
    {
        close(fd);
    }
    let mode = mode_of(path);
    let m = with(outcome(r), "mode", json!(mode.map(|m| format!("{m:o}"))));
    Ok(with(m, "setid", json!(mode.is_some_and(|m| m & SETID != 0))))
}

/// Gives `path` a file capability (CAP_SETUID, effective): needs CAP_SETFCAP.
fn setxattr_cap(path: &CString) -> Map<String, Value> {
    let created = plain_file(path);
    // struct vfs_cap_data, revision 2: magic_etc, then (permitted, inheritable) for two words.
    const VFS_CAP_REVISION_2: u32 = 0x0200_0000;
    const VFS_CAP_FLAGS_EFFECTIVE: u32 = 0x1;
    let data: [u32; 5] = [VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE, 1 << CAP_SETUID, 0, 0, 0];
    // SAFETY: a valid C string for the path and the name, a live buffer and its size.
    let r = sys(i64::from(unsafe {
        libc::setxattr(path.as_ptr(), c"security.capability".as_ptr(), data.as_ptr().cast(), size_of_val(&data), 0)
    }));
    with(outcome(r), "created", json!(created.is_ok()))
}

// ---------------------------------------------------------------------------------------------
// Kernel objects named by keys and ids

/// System V IPC: look up `key` as a segment, queue and semaphore set, attach and read segment
/// `shm_id`. `ok` is true when any of them worked.
fn sysv(key: i32, shm_id: i32) -> Map<String, Value> {
    // SAFETY: integer arguments only (as for the two calls below).
    let shmget = sys(i64::from(unsafe { libc::shmget(key, 0, 0) }));
    // SAFETY: as above.
    let msgget = sys(i64::from(unsafe { libc::msgget(key, 0) }));
    // SAFETY: as above.
    let semget = sys(i64::from(unsafe { libc::semget(key, 0, 0) }));
    // SAFETY: as above; a NULL address lets the kernel choose.
    let addr = unsafe { libc::shmat(shm_id, std::ptr::null(), 0) };
    let (shmat, byte) = if addr as isize == -1 {
        (Err(errno()), None)
    } else {
        // SAFETY: the segment is mapped at `addr` and is non-empty.
        let b = unsafe { *(addr as *const u8) };
        // SAFETY: detaches what was attached.
        unsafe { libc::shmdt(addr) };
        (Ok(0), Some(b))
    };
    // SAFETY: shmid_ds is plain data; all zeroes is valid; a live buffer.
    let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let shmctl = sys(i64::from(unsafe { libc::shmctl(shm_id, libc::IPC_STAT, &mut ds) }));
    let all = [shmget, msgget, semget, shmat, shmctl];
    let mut m = outcome(if all.iter().any(Result::is_ok) { Ok(0) } else { shmat });
    for (name, r) in ["shmget", "msgget", "semget", "shmat", "shmctl"].iter().zip(all) {
        m.insert(format!("{name}_errno"), json!(r.err()));
    }
    m.insert("byte".into(), json!(byte));
    m
}

fn mq_open(name: &CString) -> Map<String, Value> {
    // SAFETY: a valid C string; no attributes (NULL).
    let r = sys(unsafe {
        libc::syscall(libc::SYS_mq_open, name.as_ptr(), libc::O_RDONLY, 0, std::ptr::null::<libc::mq_attr>())
    });
    if let Ok(fd) = r {
        close(fd);
    }
    outcome(r)
}

/// The session and user keyrings: their ids, then a key added to the user keyring.
fn keyring() -> Map<String, Value> {
    const KEYCTL_GET_KEYRING_ID: i64 = 0;
    const KEY_SPEC_USER_KEYRING: i64 = -4;
    // SAFETY: integer arguments only.
    let get = sys(unsafe { libc::syscall(libc::SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 0) });
    let payload = b"cordon-attack";
    // SAFETY: valid C strings and a live payload buffer with its size.
    let add = sys(unsafe {
        libc::syscall(
            libc::SYS_add_key,
            c"user".as_ptr(),
            c"cordon-attack".as_ptr(),
            payload.as_ptr(),
            payload.len(),
            KEY_SPEC_USER_KEYRING,
        )
    });
    let mut m = outcome(get.and(add));
    m.insert("keyctl_errno".into(), json!(get.err()));
    m.insert("add_key_errno".into(), json!(add.err()));
    m
}

/// An inotify watch on `path` (which landlock would not check).
fn inotify(path: &CString) -> Map<String, Value> {
    // SAFETY: flags only.
    let fd = match sys(i64::from(unsafe { libc::inotify_init1(libc::IN_CLOEXEC) })) {
        Ok(fd) => fd,
        Err(e) => return stepped("inotify_init1", Err(e)),
    };
    // SAFETY: an inotify descriptor and a valid C string.
    let r = sys(i64::from(unsafe { libc::inotify_add_watch(fd as i32, path.as_ptr(), libc::IN_ALL_EVENTS) }));
    close(fd);
    stepped("inotify_add_watch", r)
}

// ---------------------------------------------------------------------------------------------
// Calls whose target widens through another argument

/// setpriority(which, who, 19), raw.
fn set_priority(which: &str, who: u32) -> Result<Map<String, Value>, String> {
    let which = match which {
        "process" => libc::PRIO_PROCESS,
        "pgrp" => libc::PRIO_PGRP,
        "user" => libc::PRIO_USER,
        other => return Err(format!("unknown which {other:?}: process, pgrp or user")),
    };
    // SAFETY: integer arguments only.
    Ok(outcome(sys(unsafe { libc::syscall(libc::SYS_setpriority, which, who, 19) })))
}

/// kill(pid, signal) with a real signal; `pid` may be -1 or a negative group.
fn kill_sig(pid: i32, signal: i32) -> Map<String, Value> {
    // SAFETY: integer arguments only.
    outcome(sys(unsafe { libc::syscall(libc::SYS_kill, pid, signal) }))
}

/// Makes `pid` the owner of a pipe's SIGIO, by fcntl(F_SETOWN) and ioctl(FIOSETOWN), then
/// triggers it with SIGKILL as the signal (F_SETSIG) if the owner was set.
fn sigio_owner(pid: i32) -> Map<String, Value> {
    let mut fds = [0i32; 2];
    // SAFETY: a live two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return stepped("pipe2", Err(errno()));
    }
    // SAFETY: descriptors we hold and integer arguments; FIOSETOWN reads a live int.
    let (setown, ioctl) = unsafe {
        let setown = sys(i64::from(libc::fcntl(fds[0], libc::F_SETOWN, pid)));
        let ioctl = sys(i64::from(libc::ioctl(fds[0], 0x8901, &pid)));
        (setown, ioctl)
    };
    if setown.is_ok() || ioctl.is_ok() {
        // SAFETY: as above; the write makes the read end readable, which raises the signal.
        unsafe {
            libc::fcntl(fds[0], F_SETSIG, libc::SIGKILL);
            libc::fcntl(fds[0], libc::F_SETFL, libc::O_ASYNC);
            libc::write(fds[1], b"x".as_ptr().cast(), 1);
        }
    }
    close(i64::from(fds[0]));
    close(i64::from(fds[1]));
    let mut m = outcome(setown.and(ioctl));
    m.insert("fcntl_errno".into(), json!(setown.err()));
    m.insert("ioctl_errno".into(), json!(ioctl.err()));
    m
}

/// One prctl option, with arguments that would work if the option were allowed and the process
/// privileged enough.
fn prctl(option: &str) -> Result<Map<String, Value>, String> {
    const PR_SET_IO_FLUSHER: i32 = 57;
    let name = c"cordon-attack";
    let (op, a2, a3): (i32, u64, u64) = match option {
        "set-name" => (libc::PR_SET_NAME, name.as_ptr() as u64, 0),
        "set-child-subreaper" => (libc::PR_SET_CHILD_SUBREAPER, 1, 0),
        "set-mm" => (libc::PR_SET_MM, libc::PR_SET_MM_ARG_START as u64, 0x1000),
        "set-ptracer" => (libc::PR_SET_PTRACER, u64::MAX, 0), // PR_SET_PTRACER_ANY
        "set-securebits" => (libc::PR_SET_SECUREBITS, 0, 0),
        "cap-ambient-raise" => (libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_RAISE as u64, CAP_SETUID as u64),
        "capbset-drop" => (libc::PR_CAPBSET_DROP, CAP_SETUID as u64, 0),
        "sched-core" => (libc::PR_SCHED_CORE, libc::PR_SCHED_CORE_GET as u64, 1),
        "set-io-flusher" => (PR_SET_IO_FLUSHER, 1, 0),
        other => return Err(format!("unknown prctl option {other:?}")),
    };
    // SAFETY: prctl with integer arguments (PR_SET_NAME reads a static C string; PR_SCHED_CORE_GET
    // is given pid 1 and would write nothing before its checks).
    Ok(outcome(sys(unsafe { libc::syscall(libc::SYS_prctl, op, a2, a3, 0u64, 0u64) })))
}

/// clone(CLONE_PARENT): the child would be cordond's, not ours.
fn clone_parent() -> Map<String, Value> {
    // SAFETY: a raw clone without CLONE_VM behaves like fork: the child only calls _exit.
    let r = sys(unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_PARENT | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    });
    if r == Ok(0) {
        // SAFETY: the child leaves at once.
        unsafe { libc::_exit(0) }
    }
    outcome(r)
}

/// A read lease on `path` (opened read-only): writers elsewhere would wait for its break.
fn lease(path: &CString) -> Map<String, Value> {
    let fd = match open(path, libc::O_RDONLY) {
        Ok(fd) => fd,
        Err(e) => return stepped("open", Err(e)),
    };
    // SAFETY: a descriptor we hold and integer arguments.
    let r = sys(i64::from(unsafe { libc::fcntl(fd as i32, libc::F_SETLEASE, libc::F_RDLCK) }));
    close(fd);
    stepped("fcntl", r)
}

/// Moves `path` aside (to `path.old`) and puts a symlink to `target` in its place: what a tool
/// with a write root above another tool's grant can do to move that grant.
fn swap_symlink(path: &str, target: &str) -> Map<String, Value> {
    let aside = format!("{path}.old");
    let moved = std::fs::rename(path, &aside);
    let planted = std::os::unix::fs::symlink(target, path);
    let errno = moved.as_ref().err().or(planted.as_ref().err()).and_then(io::Error::raw_os_error);
    let mut m = outcome(errno.map_or(Ok(0), Err));
    m.insert("moved".into(), json!(moved.is_ok()));
    m.insert("planted".into(), json!(planted.is_ok()));
    m
}

// ---------------------------------------------------------------------------------------------
// Metadata (landlock does not restrict these: the read-only view must)

/// A POSIX ACL (`system.posix_acl_access`, version 2) that lets `nobody` and everyone read:
/// user::rw-, user:65534:r--, group::---, mask::r--, other::r--.
fn acl_granting_read() -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in
        [(0x01u16, 6u16, u32::MAX), (0x02, 4, 65534), (0x04, 0, u32::MAX), (0x10, 4, u32::MAX), (0x20, 4, u32::MAX)]
    {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// `meta OP PATH`: one metadata change on PATH. OP: `chmod` (0666), `fchmod` (0666, on a
/// read-only descriptor), `fchmodat-empty` (fchmodat2 AT_EMPTY_PATH on an O_PATH descriptor),
/// `fchownat-empty` (same, owner unchanged), `chown` (owner unchanged), `setxattr` (user.cordon),
/// `fsetxattr` (same, on a read-only descriptor), `removexattr` (user.cordon), `acl`
/// (system.posix_acl_access), `utime` (times set to the epoch), `futimens` (same, on a
/// read-only descriptor), `setflags` (chattr +d on a read-only descriptor). Prints the outcome
/// and the file's mode afterwards.
fn meta(op: &str, path: &CString) -> Result<Map<String, Value>, String> {
    // SAFETY: stat is plain data; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a C string; `st` is a live stat buffer.
    let (uid, gid) = if unsafe { libc::stat(path.as_ptr(), &mut st) } == 0 { (st.st_uid, st.st_gid) } else { (0, 0) };
    let epoch = [libc::timespec { tv_sec: 0, tv_nsec: 0 }; 2];
    let acl = acl_granting_read();
    let with_fd = |flags: i32, f: &dyn Fn(i32) -> i64| -> Sys {
        let fd = open(path, flags)?;
        let r = sys(f(fd as i32));
        close(fd);
        r
    };
    // SAFETY: every call below is a raw system call on a valid C string, descriptors this
    // program opened, and live buffers of the given lengths.
    let r = unsafe {
        match op {
            "chmod" => sys(i64::from(libc::chmod(path.as_ptr(), 0o666))),
            "fchmod" => with_fd(libc::O_RDONLY, &|fd| i64::from(libc::fchmod(fd, 0o666))),
            "fchmodat-empty" => with_fd(libc::O_PATH, &|fd| {
                libc::syscall(452 /* fchmodat2 */, fd, c"".as_ptr(), 0o666, libc::AT_EMPTY_PATH)
            }),
            "fchownat-empty" => with_fd(libc::O_PATH, &|fd| {
                libc::syscall(libc::SYS_fchownat, fd, c"".as_ptr(), uid, gid, libc::AT_EMPTY_PATH)
            }),
            "chown" => sys(i64::from(libc::chown(path.as_ptr(), uid, gid))),
            "setxattr" => {
                sys(i64::from(libc::setxattr(path.as_ptr(), c"user.cordon".as_ptr(), b"x".as_ptr().cast(), 1, 0)))
            }
            "fsetxattr" => with_fd(libc::O_RDONLY, &|fd| {
                i64::from(libc::fsetxattr(fd, c"user.cordon".as_ptr(), b"x".as_ptr().cast(), 1, 0))
            }),
            "removexattr" => sys(i64::from(libc::removexattr(path.as_ptr(), c"user.cordon".as_ptr()))),
            "acl" => sys(i64::from(libc::setxattr(
                path.as_ptr(),
                c"system.posix_acl_access".as_ptr(),
                acl.as_ptr().cast(),
                acl.len(),
                0,
            ))),
            "utime" => sys(i64::from(libc::utimensat(libc::AT_FDCWD, path.as_ptr(), epoch.as_ptr(), 0))),
            "futimens" => with_fd(libc::O_RDONLY, &|fd| i64::from(libc::futimens(fd, epoch.as_ptr()))),
            "setflags" => with_fd(libc::O_RDONLY, &|fd| {
                // chattr +d (nodump) through FS_IOC_GETFLAGS / FS_IOC_SETFLAGS on a read-only fd.
                let mut flags: libc::c_long = 0;
                if libc::ioctl(fd, 0x8008_6601, &mut flags) < 0 {
                    return -1;
                }
                flags |= 0x40;
                i64::from(libc::ioctl(fd, 0x4008_6602, &flags))
            }),
            other => return Err(format!("unknown metadata operation {other:?}")),
        }
    };
    // SAFETY: as above.
    let mode = if unsafe { libc::stat(path.as_ptr(), &mut st) } == 0 { Some(st.st_mode & 0o7777) } else { None };
    Ok(with(outcome(r), "mode", json!(mode)))
}
