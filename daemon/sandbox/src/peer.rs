//! Who is on the other end of an accepted Unix socket: the exact process, pinned by a pidfd, and
//! whether it lives inside one of this daemon's invocation cgroups.
//!
//! The server decides once per connection, at accept, whether a peer may use the API. Everything
//! here fails closed: a peer that already exited, one in a pid namespace this daemon cannot see,
//! a cgroup file that cannot be read or parsed, a missing pidfd — each is an error, and the server
//! refuses the connection's requests.
//!
//! Why a pidfd: `SO_PEERCRED` reports the pid of the process that called `connect(2)`. A tool can
//! connect from a child that then exits and keep using the descriptor it inherited; by the time
//! anyone reads `/proc/PID` the pid is gone (or, after a wrap, someone else's). `SO_PEERPIDFD`
//! (Linux 6.5) hands over a pidfd for exactly the connecting process. The pid is read through
//! that pidfd (its `fdinfo`), `/proc/PID` is read, and then the pidfd must still name a live
//! process: a pid is only reused after its process has been reaped, and a reaped process fails
//! `pidfd_send_signal(0)`, so what was read belongs to the peer. Kernels without `SO_PEERPIDFD`
//! fall back to `pidfd_open(SO_PEERCRED pid)`, which pins the process from then on (a peer that
//! exited and whose pid was reused before accept is the one case the fallback cannot see).
//!
//! Without invocation cgroups (a daemon that is not root, or a host where cordond could not
//! create them) nothing marks a tool's processes, so no check can tell them apart from other
//! clients of the same uid: [`unix_sockets_unavailable`] then makes every tool with
//! `unix_sockets` unavailable, so no tool can even create a Unix socket.

use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::cgroup::Cgroups;

/// `SO_PEERPIDFD` (include/uapi/asm-generic/socket.h), not in the libc crate yet.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "riscv64", target_arch = "x86"))]
const SO_PEERPIDFD: libc::c_int = 77;

/// Why the peer process could not be identified.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("the peer process has already exited; connect from the process that makes the requests")]
    Exited,
    #[error("the peer process is in a pid namespace cordond cannot see; run the client in cordond's pid namespace")]
    OtherNamespace,
    #[error("cannot get a pidfd for the peer process: {0}")]
    Pidfd(#[source] io::Error),
    #[error("cannot read {what} of peer pid {pid}: {source}")]
    Unreadable {
        what: &'static str,
        pid: i32,
        #[source]
        source: io::Error,
    },
    #[error("cannot parse {what} of peer pid {pid}: {detail}")]
    Unparsable { what: &'static str, pid: i32, detail: String },
}

/// The connecting process, as read while its pidfd proved it was alive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerProcess {
    /// Its pid in this daemon's pid namespace.
    pub pid: i32,
    /// Its `/proc/PID/cgroup`.
    pub cgroup: String,
}

/// Identifies the process at the other end of the connected Unix socket `sock`.
pub fn inspect(sock: BorrowedFd<'_>) -> Result<PeerProcess, PeerError> {
    let pidfd = peer_pidfd(sock)?;
    let pid = pidfd_pid(&pidfd)?;
    let read = |what: &'static str| {
        fs::read_to_string(format!("/proc/{pid}/{what}")).map_err(|source| match source.raw_os_error() {
            Some(libc::ESRCH) | Some(libc::ENOENT) => PeerError::Exited,
            _ => PeerError::Unreadable { what, pid, source },
        })
    };
    let cgroup = read("cgroup")?;
    let stat = read("stat")?;
    // The state follows the command name, which is in parentheses and may itself hold any byte.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        .ok_or_else(|| PeerError::Unparsable { what: "stat", pid, detail: "no state field".into() })?;
    if matches!(state, "Z" | "X" | "x") {
        return Err(PeerError::Exited);
    }
    // Still the same process: what was read above was not a recycled pid's.
    if !alive(&pidfd)? {
        return Err(PeerError::Exited);
    }
    Ok(PeerProcess { pid, cgroup })
}

/// A pidfd for the peer of `sock`: `SO_PEERPIDFD`, or `pidfd_open` of the `SO_PEERCRED` pid on
/// kernels older than 6.5.
fn peer_pidfd(sock: BorrowedFd<'_>) -> Result<OwnedFd, PeerError> {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "riscv64", target_arch = "x86"))]
    {
        let mut fd: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `sock` is a valid open descriptor for the duration of the call; `fd` and `len`
        // are live locals of the sizes the kernel writes (an int and its length).
        let rc = unsafe {
            libc::getsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_PEERPIDFD,
                (&raw mut fd).cast::<libc::c_void>(),
                &raw mut len,
            )
        };
        if rc == 0 && fd >= 0 {
            // SAFETY: the kernel just created `fd` for us (O_CLOEXEC); nothing else owns it.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // Older kernel: fall back below.
            Some(libc::ENOPROTOOPT) => {}
            // The peer was reaped before accept (kernels before 6.16 report it so).
            Some(libc::ESRCH) | Some(libc::EINVAL) => return Err(PeerError::Exited),
            _ => return Err(PeerError::Pidfd(e)),
        }
    }
    let cred = nix::sys::socket::getsockopt(&sock, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(|e| PeerError::Pidfd(e.into()))?;
    if cred.pid() <= 0 {
        return Err(PeerError::OtherNamespace);
    }
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; no memory is
    // passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, cred.pid(), 0u32) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(if e.raw_os_error() == Some(libc::ESRCH) { PeerError::Exited } else { PeerError::Pidfd(e) });
    }
    let fd = libc::c_int::try_from(fd).map_err(|_| PeerError::Pidfd(io::Error::other("descriptor out of range")))?;
    // SAFETY: the kernel just created `fd` (pidfds are close-on-exec); nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The pid behind `pidfd` as this daemon's `/proc` numbers it (its `fdinfo`): -1 once the process
/// was reaped, 0 when it is outside the pid namespace of `/proc`.
fn pidfd_pid(pidfd: &OwnedFd) -> Result<i32, PeerError> {
    let path = format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd());
    let text =
        fs::read_to_string(&path).map_err(|source| PeerError::Unreadable { what: "pidfd fdinfo", pid: 0, source })?;
    let pid = text
        .lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|v| v.trim().parse::<i32>().ok())
        .ok_or_else(|| PeerError::Unparsable { what: "pidfd fdinfo", pid: 0, detail: "no Pid: line".into() })?;
    match pid {
        -1 => Err(PeerError::Exited),
        0 => Err(PeerError::OtherNamespace),
        p if p > 0 => Ok(p),
        p => Err(PeerError::Unparsable { what: "pidfd fdinfo", pid: p, detail: "negative pid".into() }),
    }
}

/// Whether the process behind `pidfd` still exists (signal 0 checks without sending anything).
fn alive(pidfd: &OwnedFd) -> Result<bool, PeerError> {
    // SAFETY: pidfd_send_signal with signal 0 and a null siginfo only checks that the target
    // exists and may be signalled; `pidfd` is open for the duration of the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_fd().as_raw_fd(),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ESRCH) => Ok(false),
        // Exists, but belongs to someone a non-root daemon may not signal.
        Some(libc::EPERM) => Ok(true),
        _ => Err(PeerError::Pidfd(e)),
    }
}

/// Whether a `/proc/PID/cgroup` text places the process inside `marker` (this daemon's
/// invocation directory, `/cordon/<daemon pid>`), or inside any cordond's invocation cgroup
/// (`.../cordon/<pid>/<id>`: a tool of another cordond on this host may no more drive this one
/// than its own tools may; say a root cordond's tool run as alice, and alice's own cordond), in
/// any hierarchy. A line that does not have
/// the `ID:CONTROLLERS:PATH` shape, a file without lines or with two lines for the same
/// hierarchy, is an error: the caller refuses what it cannot read unambiguously.
pub(crate) fn in_cgroup(cgroup: &str, marker: &str) -> Result<bool, String> {
    let mut seen: Vec<(&str, &str)> = Vec::new();
    let mut inside = false;
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!("line {line:?} is not ID:CONTROLLERS:PATH"));
        };
        if id.parse::<u32>().is_err() || !path.starts_with('/') {
            return Err(format!("line {line:?} is not ID:CONTROLLERS:PATH"));
        }
        if seen.contains(&(id, controllers)) {
            return Err(format!("hierarchy {id}:{controllers} appears twice"));
        }
        seen.push((id, controllers));
        if path == marker || path.strip_prefix(marker).is_some_and(|rest| rest.starts_with('/')) || any_invocation(path)
        {
            inside = true;
        }
    }
    if seen.is_empty() {
        return Err("no cgroup lines".into());
    }
    Ok(inside)
}

/// Whether `path` lies in some cordond's invocation cgroup: a `cordon` component, then a
/// daemon instance's directory (see `cgroup::is_instance_name`: `<pid ns>-<pid>-<start>`, or an
/// older cordond's bare pid), then an invocation below it.
fn any_invocation(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    parts.windows(3).any(|w| w[0] == "cordon" && super::cgroup::is_instance_name(w[1]) && !w[2].is_empty())
}

/// This daemon's invocation directory as a cgroup path (`/cordon/<instance>`).
pub(crate) fn invocation_marker() -> String {
    format!("/cordon/{}", super::cgroup::instance_name())
}

/// Whether `process` is inside an invocation cgroup of this or any other cordond
/// ([`in_cgroup`] with this daemon's [`invocation_marker`]).
pub fn in_invocation(process: &PeerProcess) -> Result<bool, String> {
    in_cgroup(&process.cgroup, &invocation_marker())
}

/// Whether every invocation is placed in a cgroup under [`invocation_marker`]: the v2 hierarchy
/// (pure v2 or hybrid, always used for `cgroup.kill`) or a pids controller (always used for
/// `pids.max`). A v1 memory controller alone is not enough: it is used only for tools with a
/// memory limit.
pub(crate) fn tools_identifiable(cgroups: &Cgroups) -> Result<(), String> {
    if matches!(cgroups.mode, "v2" | "hybrid") || cgroups.has_pids() {
        return Ok(());
    }
    let why = cgroups.reason.clone().unwrap_or_else(|| format!("cgroups are {}", cgroups.mode));
    Err(format!(
        "unix_sockets needs invocation cgroups, which let cordond refuse its own tools on its socket \
         ({why}); run cordond as root on a host with cgroup v2 or a pids controller"
    ))
}

#[cfg(test)]
mod cross_daemon_tests {
    use super::in_cgroup;

    #[test]
    fn a_tool_of_another_cordond_is_inside_an_invocation_too() {
        let own = "/cordon/100";
        let other = "0::/cordon/4242/0123abcd\n";
        assert_eq!(in_cgroup(other, own), Ok(true));
        let nested = "0::/system.slice/cordon.service/cordon/7/ff\n";
        assert_eq!(in_cgroup(nested, own), Ok(true));
        // Daemon directories named by pid namespace, pid and start time (and older ones by pid).
        assert_eq!(in_cgroup("0::/cordon/4026531836-4242-118039/l0\n", own), Ok(true));
        assert_eq!(in_cgroup("4:pids:/x.service/cordon/4026531836-7-1/ab\n0::/\n", own), Ok(true));
        // The daemon's own directory, not an invocation, and ordinary sessions are outside.
        for outside in [
            "0::/cordon/4242\n",
            "0::/cordon/4026531836-4242-118039\n",
            "0::/user.slice/user-1000.slice/session-2.scope\n",
            "0::/cordon/x/y\n",
            "0::/cordon/1-2/y\n",
            "0::/cordon/1-2-3-4/y\n",
            "0::/cordon/-1-2/y\n",
        ] {
            assert_eq!(in_cgroup(outside, own), Ok(false), "{outside}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;

    use super::*;

    #[test]
    fn a_live_peer_is_identified_with_its_cgroup() {
        let (a, _b) = UnixStream::pair().unwrap();
        let peer = inspect(a.as_fd()).unwrap();
        assert_eq!(peer.pid, i32::try_from(std::process::id()).unwrap());
        assert_eq!(peer.cgroup, fs::read_to_string("/proc/self/cgroup").unwrap());
    }

    #[test]
    fn a_peer_that_exited_is_refused_zombie_or_reaped() {
        use std::os::unix::net::UnixListener;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let listener = UnixListener::bind(&path).unwrap();
        for reap in [false, true] {
            // A child connects and exits; the parent holds the connection's other end.
            let mut child = std::process::Command::new("python3")
                .args(["-c", "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])"])
                .arg(&path)
                .spawn()
                .unwrap();
            let (conn, _) = listener.accept().unwrap();
            if reap {
                child.wait().unwrap();
            } else {
                // Wait until it is a zombie, without reaping it.
                let pid = child.id();
                while !fs::read_to_string(format!("/proc/{pid}/stat")).unwrap().contains(") Z") {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
            let got = inspect(conn.as_fd());
            assert!(matches!(got, Err(PeerError::Exited)), "reaped={reap}: {got:?}");
            let _ = child.wait();
        }
    }

    #[test]
    fn cgroup_lines_are_matched_exactly_and_ambiguity_is_an_error() {
        let m = "/cordon/42";
        assert_eq!(in_cgroup("0::/cordon/42/abc\n", m), Ok(true));
        assert_eq!(in_cgroup("4:pids:/cordon/42/abc\n0::/\n", m), Ok(true));
        assert_eq!(in_cgroup("0::/cordon/42\n", m), Ok(true));
        // Another cordond's invocations (another pid, or a daemon whose directory is elsewhere)
        // are refused too.
        assert_eq!(in_cgroup("0::/cordon/421/abc\n", m), Ok(true));
        assert_eq!(in_cgroup("0::/user.slice/cordon/42/abc\n", m), Ok(true));
        assert_eq!(in_cgroup("0::/cordon421/abc\n", m), Ok(false));
        assert_eq!(in_cgroup("0::/\n1:name=systemd:/x\n", m), Ok(false));
        assert!(in_cgroup("", m).is_err());
        assert!(in_cgroup("garbage\n", m).is_err());
        assert!(in_cgroup("0::relative\n", m).is_err());
        assert!(in_cgroup("0::/\n0::/cordon/1\n", m).is_err());
    }

    #[test]
    fn without_invocation_cgroups_tools_cannot_be_told_apart() {
        let reason = tools_identifiable(&Cgroups::detect(false)).unwrap_err();
        assert!(reason.contains("not root"), "{reason}");
    }
}
