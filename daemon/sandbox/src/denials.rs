//! Denials from the kernel's audit log: which path landlock refused, which system call seccomp
//! refused, for one invocation.
//!
//! cordond reads the kernel's audit records as a listener of the audit netlink multicast group
//! (`NETLINK_AUDIT`, group `AUDIT_NLGRP_READLOG`; needs `CAP_AUDIT_READ` in the initial
//! namespaces), beside auditd or without one; it never changes the audit configuration. What
//! the kernel sends there (measured on 6.18):
//! - seccomp's `AUDIT_SECCOMP` for each refusal of a filter installed with
//!   `SECCOMP_FILTER_FLAG_LOG`, whether or not audit is enabled (`auditctl -e`): the syscall
//!   number, the pid and the audit session (`ses`);
//! - landlock's `AUDIT_LANDLOCK_ACCESS` (domain id, blockers such as `fs.write_file`, the path)
//!   and `AUDIT_LANDLOCK_DOMAIN` (the domain's creator pid), for a domain enforced with
//!   `LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON` (ABI 7), only while audit is enabled.
//!
//! Correlation: each invocation's child sets its audit login uid before it execs (a fresh
//! session id, inherited by everything the tool starts and not changeable without
//! `CAP_AUDIT_CONTROL`), so seccomp records are matched by session, or else by the leader's pid;
//! landlock records by their domain, whose creator is the leader (its pid cannot be reused
//! before the invocation reaps it). Records that arrive before their invocation registers wait
//! in a small ring. After a failed run the invocation waits until the kernel's audit queue is
//! empty (bounded), so the records of its denials have been read.
//!
//! Bounded everywhere: [`MAX_DENIALS`] distinct denials per invocation (deduplicated, counted;
//! the first half and the latest),
//! [`STRAYS`] unclaimed records. Fail soft: a socket that cannot be opened means no denial
//! information, never a refused invocation; the tool is never waited on.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, send, socket,
};

use cordon_core::denial::{Denial, Denied, Logged, MAX_DENIALS};

const AUDIT_GET: u16 = 1000;
const AUDIT_SECCOMP: u16 = 1326;
const AUDIT_LANDLOCK_ACCESS: u16 = 1423;
const AUDIT_LANDLOCK_DOMAIN: u16 = 1424;
/// Bit of the multicast group `AUDIT_NLGRP_READLOG` (group 1).
const READLOG_GROUPS: u32 = 1;
const NLM_F_REQUEST: u16 = 1;
/// Records no running invocation has claimed yet (they may be for one that is registering).
const STRAYS: usize = 256;
/// The kernel stamps records with a coarse clock (a tick, a few ms): a record this much older
/// than its invocation's start still counts as its own.
const CLOCK_SLACK_MS: u64 = 100;
/// How long a failed run waits at most for the kernel's audit queue to empty.
const SETTLE: Duration = Duration::from_millis(200);
/// `AUDIT_ARCH_*` of this build's architecture.
#[cfg(target_arch = "x86_64")]
const NATIVE_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const NATIVE_ARCH: u32 = 0xc000_00b7;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const NATIVE_ARCH: u32 = 0;

/// The reader of the kernel's audit records, one per daemon.
pub struct DenialLog {
    shared: Arc<Shared>,
    /// [`DenialLog::logging_allowed`]'s last answer, and when it was asked (ms since `epoch`).
    allowed: std::sync::atomic::AtomicBool,
    asked_ms: std::sync::atomic::AtomicU64,
    epoch: std::time::Instant,
}

impl std::fmt::Debug for DenialLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DenialLog")
    }
}

#[derive(Debug)]
struct Shared {
    /// The multicast listener (non-blocking).
    sock: OwnedFd,
    /// For `AUDIT_GET` (the queue length and whether audit is enabled); `None` without
    /// `CAP_AUDIT_CONTROL`.
    control: Mutex<Option<OwnedFd>>,
    state: Mutex<State>,
}

/// A record cordon reads.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Rec {
    Seccomp { pid: u32, ses: Option<u32>, denied: Denied },
    Access { domain: u64, denied: Denied },
    Allocated { domain: u64, pid: u32 },
    Deallocated { domain: u64 },
}

#[derive(Debug, Default)]
struct State {
    /// By the invocation's leader pid.
    slots: HashMap<u32, Slot>,
    /// Audit session -> leader pid.
    sessions: HashMap<u32, u32>,
    /// Landlock domain -> leader pid.
    domains: HashMap<u64, u32>,
    /// (the record's time in ms since the epoch, the record).
    strays: VecDeque<(u64, Rec)>,
}

#[derive(Debug, Default)]
struct Slot {
    denials: Vec<Denial>,
    /// The invocation's audit session: records are matched by it alone when it is known (by
    /// the pid only when it is not).
    ses: Option<u32>,
    /// When the invocation started (ms since the epoch): an older record is someone else's,
    /// whose pid the leader's may have recycled.
    since_ms: u64,
}

impl Slot {
    /// Keeps the first half of [`MAX_DENIALS`] distinct denials and a window of the latest: the
    /// one that stopped the tool is usually among the last (after any number of probes it went
    /// on from), and the ranking needs it.
    fn add(&mut self, denied: Denied) {
        if let Some(d) = self.denials.iter_mut().find(|d| d.denied == denied) {
            d.count = d.count.saturating_add(1);
            return;
        }
        if self.denials.len() >= MAX_DENIALS {
            self.denials.remove(MAX_DENIALS / 2);
        }
        self.denials.push(Denial { denied, count: 1 });
    }
}

impl State {
    /// Gives `rec` (logged at `at`, ms since the epoch) to its invocation; `false` when none
    /// claims it (yet).
    fn route(&mut self, at: u64, rec: &Rec) -> bool {
        let current = |slot: &Slot| at.saturating_add(CLOCK_SLACK_MS) >= slot.since_ms;
        match rec {
            Rec::Seccomp { pid, ses, denied } => {
                let leader = ses
                    .and_then(|s| self.sessions.get(&s).copied())
                    .or_else(|| self.slots.get(pid).filter(|slot| slot.ses.is_none()).map(|_| *pid));
                match leader.and_then(|p| self.slots.get_mut(&p)).filter(|slot| current(slot)) {
                    Some(slot) => {
                        slot.add(denied.clone());
                        true
                    }
                    None => false,
                }
            }
            Rec::Access { domain, denied } => match self.domains.get(domain).and_then(|p| self.slots.get_mut(p)) {
                Some(slot) => {
                    slot.add(denied.clone());
                    true
                }
                None => false,
            },
            Rec::Allocated { domain, pid } => {
                if !self.slots.get(pid).is_some_and(current) {
                    return false;
                }
                self.domains.insert(*domain, *pid);
                self.reroute();
                true
            }
            Rec::Deallocated { domain } => {
                self.domains.remove(domain);
                true
            }
        }
    }

    /// Registers the invocation led by `pid` with its audit session `ses`; answers the session
    /// its records are matched by: `None` (the pid only) when another live invocation has the
    /// same session, which then loses it too (records of a shared session belong to no one).
    fn register(&mut self, pid: u32, ses: Option<u32>, since_ms: u64) -> Option<u32> {
        let ses = match ses {
            Some(s) if let Some(other) = self.sessions.remove(&s) => {
                if let Some(slot) = self.slots.get_mut(&other) {
                    slot.ses = None;
                }
                None
            }
            ses => ses,
        };
        self.slots.insert(pid, Slot { denials: Vec::new(), ses, since_ms });
        if let Some(s) = ses {
            self.sessions.insert(s, pid);
        }
        ses
    }

    /// Offers every stray record again (an invocation or a domain just appeared).
    fn reroute(&mut self) {
        let strays = std::mem::take(&mut self.strays);
        for (at, rec) in strays {
            if !self.route(at, &rec) {
                self.strays.push_back((at, rec));
            }
        }
    }

    fn take(&mut self, at: u64, rec: Rec) {
        if !self.route(at, &rec) {
            if self.strays.len() == STRAYS {
                self.strays.pop_front();
            }
            self.strays.push_back((at, rec));
        }
    }
}

impl DenialLog {
    /// Joins the audit multicast group; an error says why not (no `CAP_AUDIT_READ`, not the
    /// initial network namespace, no audit in the kernel).
    pub fn open() -> Result<DenialLog, String> {
        let sock = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            SockProtocol::NetlinkAudit,
        )
        .map_err(|e| format!("cannot open an audit netlink socket: {e}"))?;
        bind(sock.as_raw_fd(), &NetlinkAddr::new(0, READLOG_GROUPS))
            .map_err(|e| format!("cannot join the kernel audit log's multicast group (needs CAP_AUDIT_READ): {e}"))?;
        let control = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            SockProtocol::NetlinkAudit,
        )
        .ok();
        let shared = Arc::new(Shared { sock, control: Mutex::new(control), state: Mutex::new(State::default()) });
        if let Some(why) = shared.status().and_then(|s| unsafe_to_log(s.failure)) {
            return Err(why);
        }
        let reader = shared.clone();
        std::thread::Builder::new()
            .name("cordon-audit-log".into())
            .spawn(move || reader.listen())
            .map_err(|e| format!("cannot start the audit log reader: {e}"))?;
        let allowed = shared.status().is_some_and(|s| s.may_log());
        Ok(DenialLog {
            shared,
            allowed: std::sync::atomic::AtomicBool::new(allowed),
            asked_ms: std::sync::atomic::AtomicU64::new(0),
            epoch: std::time::Instant::now(),
        })
    }

    /// Whether tools may have the kernel log their denials now: asked of the kernel at most
    /// once a second (auditd may start or change the settings while cordond runs). See
    /// [`Status::may_log`]; `false` when the kernel cannot be asked.
    pub fn logging_allowed(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let asked = self.asked_ms.load(Relaxed);
        if now.saturating_sub(asked) >= 1000
            && self.asked_ms.compare_exchange(asked, now.max(1), Relaxed, Relaxed).is_ok()
        {
            self.allowed.store(self.shared.status().is_some_and(|s| s.may_log()), Relaxed);
        }
        self.allowed.load(Relaxed)
    }

    /// Starts collecting the denials of the invocation whose leader is `pid` (it has exec'd:
    /// its audit session is set, see `child.rs`), started at `since` (taken before the clone).
    pub fn watch(&self, pid: u32, since: std::time::SystemTime, landlock_logs: bool) -> Watch {
        let since_ms = since.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        // The invocation's own session, when its child could set one: not unset, not cordond's
        // own (the login uid write failed: every invocation would share it), and no other live
        // invocation's. Otherwise records are matched by the leader's pid only.
        static OWN: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
        let own = *OWN.get_or_init(|| session_of("/proc/self/sessionid"));
        let ses = session_of(&format!("/proc/{pid}/sessionid")).filter(|s| Some(*s) != own);
        let mut state = self.shared.lock();
        let ses = state.register(pid, ses, since_ms);
        state.reroute();
        drop(state);
        Watch { shared: self.shared.clone(), pid, ses, landlock_logs }
    }
}

/// The audit session id in a `sessionid` file of /proc; `None` when unset or unreadable.
fn session_of(path: &str) -> Option<u32> {
    std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse::<u32>().ok()).filter(|s| *s != u32::MAX)
}

/// What [`probe`] found: whether the audit log can be read, and whether audit is enabled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// `Err`: why the log cannot be read.
    pub readable: Result<(), String>,
    /// Kernel audit is enabled (`auditctl -e 1`); `None`: cannot ask.
    pub audit_enabled: Option<bool>,
}

/// Whether this process could read the audit log (for `cordond --probe`; starts no thread).
pub fn probe() -> Probe {
    let open = || {
        socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            SockProtocol::NetlinkAudit,
        )
    };
    let readable = match open() {
        Err(e) => Err(format!("no audit netlink socket: {e}")),
        Ok(sock) => bind(sock.as_raw_fd(), &NetlinkAddr::new(0, READLOG_GROUPS))
            .map_err(|e| format!("cannot join the audit log's multicast group (needs CAP_AUDIT_READ): {e}")),
    };
    let status = open().ok().and_then(|control| {
        let shared =
            Shared { sock: open().ok()?, control: Mutex::new(Some(control)), state: Mutex::new(State::default()) };
        shared.status()
    });
    let readable = match &status {
        _ if readable.is_err() => readable,
        None => Err("cannot ask the kernel's audit settings (needs CAP_AUDIT_CONTROL), so denials are not logged".into()),
        Some(s) => match unsafe_to_log(s.failure) {
            Some(why) => Err(why),
            None if !s.may_log() => Err(
                "kernel audit is enabled with no rate limit: a tool's flood of denied calls would fill auditd's log, so \
                 cordond does not have the kernel log denials; set one (`auditctl -r 1000`) to have them named exactly"
                    .into(),
            ),
            None => readable,
        },
    };
    Probe { readable, audit_enabled: status.map(|s| s.enabled) }
}

/// One invocation's collection; unregisters when dropped.
#[derive(Debug)]
pub struct Watch {
    shared: Arc<Shared>,
    pid: u32,
    ses: Option<u32>,
    /// The domain was enforced with landlock's logging flags (ABI 7+).
    landlock_logs: bool,
}

impl Watch {
    /// The invocation's denials. `settle`: the run failed, so first wait (at most [`SETTLE`])
    /// until the kernel has sent every queued record, then read them.
    pub async fn finish(self, settle: bool) -> (Vec<Denial>, Logged) {
        let mut enabled = false;
        if settle {
            let deadline = tokio::time::Instant::now() + SETTLE;
            while let Some(s) = self.shared.status() {
                enabled = s.enabled;
                if s.backlog == 0 || tokio::time::Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        self.shared.drain();
        let mut state = self.shared.lock();
        let denials = state.slots.get_mut(&self.pid).map(|s| std::mem::take(&mut s.denials)).unwrap_or_default();
        drop(state);
        (denials, Logged { landlock: self.landlock_logs && enabled, seccomp: true })
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.slots.remove(&self.pid);
        if let Some(s) = self.ses
            && state.sessions.get(&s) == Some(&self.pid)
        {
            state.sessions.remove(&s);
        }
        let pid = self.pid;
        state.domains.retain(|_, p| *p != pid);
    }
}

/// What `AUDIT_GET` says.
struct Status {
    enabled: bool,
    /// What the kernel does when it loses records: 0 silent, 1 printk, 2 panic.
    failure: u32,
    /// Records per second the kernel sends at most (0: no limit).
    rate_limit: u32,
    backlog: u32,
}

impl Status {
    /// Whether tools may have their refusals logged. A tool decides how many records its
    /// denials make (a loop of refused calls: thousands a second). With audit disabled they go
    /// to listeners like cordond and to the kernel log, which rate-limits them. With audit
    /// enabled they go to auditd's log, whose disk-full action may halt the host or whose
    /// rotation may push out other evidence: only where the kernel bounds them (`auditctl -r
    /// N`). Never where a lost record halts the host (`auditctl -f 2`).
    fn may_log(&self) -> bool {
        unsafe_to_log(self.failure).is_none() && (!self.enabled || self.rate_limit > 0)
    }
}

/// `AUDIT_FAIL_PANIC`: the kernel halts when it loses an audit record.
const AUDIT_FAIL_PANIC: u32 = 2;

/// Why denials must not be logged on a kernel whose audit failure mode is `failure`. Logged
/// refusals are records a tool produces at will (a loop of denied system calls); where losing
/// one (a full backlog) halts the host, that would hand every tool a way to stop the machine.
fn unsafe_to_log(failure: u32) -> Option<String> {
    (failure == AUDIT_FAIL_PANIC).then(|| {
        "the kernel's audit failure mode is panic (auditctl -f 2): a tool flooding denied system calls could \
         overflow the audit backlog and halt the host, so cordond does not have the kernel log denials (they are \
         inferred from the tool's errors instead)"
            .to_string()
    })
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The reader thread: waits for records and routes them.
    fn listen(&self) {
        loop {
            let mut fds = [PollFd::new(self.sock.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(_) => std::thread::sleep(Duration::from_secs(1)),
            }
            self.drain();
        }
    }

    /// Reads every record waiting on the socket (never blocks).
    fn drain(&self) {
        let mut buf = vec![0u8; 64 * 1024];
        let mut state = self.lock();
        loop {
            match recv(self.sock.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
                Ok(0) => break,
                Ok(n) => {
                    for (kind, text) in messages(&buf[..n]) {
                        if let Some((at, rec)) = parse(kind, text) {
                            state.take(at, rec);
                        }
                    }
                }
                // The kernel dropped records for us (a burst): what is lost is lost.
                Err(Errno::ENOBUFS | Errno::EINTR) => {}
                Err(_) => break,
            }
        }
    }

    /// `AUDIT_GET`, answered at once by the kernel (needs `CAP_AUDIT_CONTROL`).
    fn status(&self) -> Option<Status> {
        let control = self.control.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let fd = control.as_ref()?;
        // Anything left over from an earlier, timed-out request.
        let mut buf = [0u8; 512];
        while recv(fd.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT).is_ok() {}
        let mut req = [0u8; 16];
        req[0..4].copy_from_slice(&16u32.to_ne_bytes());
        req[4..6].copy_from_slice(&AUDIT_GET.to_ne_bytes());
        req[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
        send(fd.as_raw_fd(), &req, MsgFlags::empty()).ok()?;
        let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::from(100u16)).ok()?;
        let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT).ok()?;
        let (kind, body) = messages(&buf[..n]).next()?;
        // struct audit_status: mask, enabled, failure, pid, rate_limit, backlog_limit, lost, backlog.
        let word = |i: usize| body.get(4 * i..4 * i + 4).map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
        (kind == AUDIT_GET).then_some(())?;
        Some(Status { enabled: word(1)? != 0, failure: word(2)?, rate_limit: word(4)?, backlog: word(7)? })
    }
}

/// The netlink messages in one datagram: (type, payload).
fn messages(buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut off = 0usize;
    std::iter::from_fn(move || {
        let head = buf.get(off..off + 16)?;
        let len = u32::from_ne_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let kind = u16::from_ne_bytes([head[4], head[5]]);
        if len < 16 {
            return None;
        }
        let body = buf.get(off + 16..(off + len).min(buf.len()))?;
        off += (len + 3) & !3;
        Some((kind, body))
    })
}

/// The fields of a record's text (`audit(T:S): key=value key="value" ...`): a quoted value as
/// is, an unquoted one as written (hex-encoded strings are decoded by the caller).
fn fields(text: &str) -> Vec<(&str, &str, bool)> {
    let text = text.find("): ").map_or(text, |i| &text[i + 3..]);
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq].trim();
        let after = &rest[eq + 1..];
        let (value, quoted, next) = if let Some(q) = after.strip_prefix('"') {
            match q.find('"') {
                Some(end) => (&q[..end], true, &q[end + 1..]),
                None => (q, true, ""),
            }
        } else {
            let end = after.find(' ').unwrap_or(after.len());
            (&after[..end], false, &after[end..])
        };
        out.push((key, value, quoted));
        rest = next.trim_start();
    }
    out
}

/// An unquoted audit string is hex-encoded (it had a space, quote or control character).
fn untrusted(value: &str, quoted: bool) -> String {
    if quoted || !value.len().is_multiple_of(2) || !value.bytes().all(|b| b.is_ascii_hexdigit()) {
        return value.to_string();
    }
    let bytes: Vec<u8> =
        (0..value.len()).step_by(2).filter_map(|i| u8::from_str_radix(&value[i..i + 2], 16).ok()).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The time of a record (`audit(SECONDS.MILLIS:SERIAL): ...`), in ms since the epoch.
fn stamp(text: &str) -> Option<u64> {
    let inner = text.strip_prefix("audit(")?;
    let (secs, rest) = inner.split_once('.')?;
    let millis = rest.get(..3)?;
    secs.parse::<u64>().ok()?.checked_mul(1000)?.checked_add(millis.parse().ok()?)
}

fn parse(kind: u16, payload: &[u8]) -> Option<(u64, Rec)> {
    if !matches!(kind, AUDIT_SECCOMP | AUDIT_LANDLOCK_ACCESS | AUDIT_LANDLOCK_DOMAIN) {
        return None;
    }
    let text = std::str::from_utf8(payload).ok()?.trim_end_matches('\0');
    Some((stamp(text)?, record(kind, text)?))
}

fn record(kind: u16, text: &str) -> Option<Rec> {
    let f = fields(text);
    let get = |k: &str| f.iter().find(|(key, _, _)| *key == k).map(|(_, v, q)| (*v, *q));
    let num = |k: &str| get(k).and_then(|(v, _)| v.parse::<u64>().ok());
    let hex = |k: &str| get(k).and_then(|(v, _)| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok());
    match kind {
        AUDIT_SECCOMP => {
            let code = hex("code")? as u32;
            let action = code & 0xffff_0000;
            let killed = action == super::seccomp::RET_KILL_PROCESS || action == 0;
            if action != super::seccomp::RET_ERRNO && !killed {
                return None;
            }
            // The record carries the action without its errno; cordon's ENOSYS and EOPNOTSUPP
            // answers come from the unlogged companion filter, so a logged errno is an EPERM.
            let nr = num("syscall")? as u32;
            let native = hex("arch") == Some(u64::from(NATIVE_ARCH));
            let name = native.then(|| super::syscalls::name(i64::from(nr))).flatten().map(str::to_string);
            let pid = num("pid")? as u32;
            let ses = num("ses").map(|s| s as u32).filter(|s| *s != u32::MAX);
            Some(Rec::Seccomp { pid, ses, denied: Denied::Syscall { nr, name, killed } })
        }
        AUDIT_LANDLOCK_DOMAIN => {
            let domain = hex("domain")?;
            match get("status")?.0 {
                "allocated" => Some(Rec::Allocated { domain, pid: num("pid")? as u32 }),
                "deallocated" => Some(Rec::Deallocated { domain }),
                _ => None,
            }
        }
        _ => {
            let domain = hex("domain")?;
            let blockers: Vec<&str> = get("blockers")?.0.split(',').collect();
            let first = blockers.first()?;
            let denied = if let Some(net) = first.strip_prefix("net.") {
                let port = ["dest", "src", "lport", "fport", "dport", "sport"]
                    .iter()
                    .find_map(|k| num(k))
                    .and_then(|p| u16::try_from(p).ok())
                    .unwrap_or(0);
                Denied::Net { access: net.to_string(), port }
            } else if let Some(scope) = first.strip_prefix("scope.") {
                Denied::Scope { what: scope.to_string() }
            } else {
                let access = blockers.iter().map(|b| b.trim_start_matches("fs.").to_string()).collect();
                let path = get("path").map(|(v, q)| untrusted(v, q)).unwrap_or_default();
                Denied::Fs { access, path }
            };
            Some(Rec::Access { domain, denied })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Records as the 6.18 kernel sent them to the multicast group (measured).
    const ACCESS: &str =
        r#"audit(1795636370.615:28): domain=14bba5be6 blockers=fs.make_reg path="/tmp/den" dev="vda" ino=10248422"#;
    const DOMAIN: &str = r#"audit(1795636370.615:28): domain=14bba5be6 status=allocated mode=enforcing pid=24057 uid=0 exe="/tmp/den/ll" comm="ll""#;
    const SECCOMP: &str = r#"audit(1795636370.623:30): auid=4294967295 uid=0 gid=0 ses=4294967295 pid=24058 comm="mkdir" exe="/usr/bin/mkdir" sig=0 arch=c000003e syscall=83 compat=0 ip=0x7f4493a50f37 code=0x50000"#;

    #[test]
    fn a_kernel_that_panics_on_lost_records_gets_no_logged_denials() {
        assert!(unsafe_to_log(AUDIT_FAIL_PANIC).unwrap().contains("auditctl -f 2"));
        assert_eq!(unsafe_to_log(0), None);
        assert_eq!(unsafe_to_log(1), None);
    }

    #[test]
    fn denials_are_logged_only_where_a_flood_of_them_is_bounded() {
        let status = |enabled, failure, rate_limit| Status { enabled, failure, rate_limit, backlog: 0 };
        assert!(status(false, 1, 0).may_log(), "audit off: listeners and the rate-limited kernel log");
        assert!(!status(true, 1, 0).may_log(), "auditd with no rate limit: a tool could fill its disk");
        assert!(status(true, 1, 500).may_log(), "auditd with a rate limit");
        assert!(!status(true, AUDIT_FAIL_PANIC, 500).may_log());
        assert!(!status(false, AUDIT_FAIL_PANIC, 0).may_log());
    }

    #[test]
    fn records_parse() {
        assert_eq!(
            parse(AUDIT_LANDLOCK_ACCESS, ACCESS.as_bytes()).map(|r| r.1),
            Some(Rec::Access {
                domain: 0x14bba5be6,
                denied: Denied::Fs { access: vec!["make_reg".into()], path: "/tmp/den".into() }
            })
        );
        assert_eq!(
            parse(AUDIT_LANDLOCK_DOMAIN, DOMAIN.as_bytes()).map(|r| r.1),
            Some(Rec::Allocated { domain: 0x14bba5be6, pid: 24057 })
        );
        let Some((
            1_795_636_370_623,
            Rec::Seccomp { pid: 24058, ses: None, denied: Denied::Syscall { nr: 83, name, killed: false } },
        )) = parse(AUDIT_SECCOMP, SECCOMP.as_bytes())
        else {
            panic!("seccomp record not parsed");
        };
        #[cfg(target_arch = "x86_64")]
        assert_eq!(name.as_deref(), Some("mkdir"));
        let _ = name;
        // SECCOMP_RET_ALLOW / LOG actions are not denials.
        assert_eq!(parse(AUDIT_SECCOMP, SECCOMP.replace("0x50000", "0x7ffc0000").as_bytes()), None);
        let hexed = ACCESS.replace(r#"path="/tmp/den""#, "path=2F746D702F6120622");
        assert!(matches!(parse(AUDIT_LANDLOCK_ACCESS, hexed.as_bytes()), Some((_, Rec::Access { .. }))));
        let hexed = ACCESS.replace(r#"path="/tmp/den""#, "path=2F746D702F612062");
        let Some((_, Rec::Access { denied: Denied::Fs { path, .. }, .. })) =
            parse(AUDIT_LANDLOCK_ACCESS, hexed.as_bytes())
        else {
            panic!()
        };
        assert_eq!(path, "/tmp/a b");
    }

    #[test]
    fn a_session_two_invocations_share_is_no_ones_and_records_go_by_pid() {
        let mut s = State::default();
        let denied = |name: &str| Denied::Syscall { name: Some(name.into()), nr: 0, killed: false };
        assert_eq!(s.register(100, Some(7), 0), Some(7));
        // A second invocation with the same session (its login uid could not be set): neither
        // keeps it, so a record of session 7 is nobody's; each is matched by its leader's pid.
        assert_eq!(s.register(200, Some(7), 0), None);
        assert_eq!(s.slots[&100].ses, None);
        s.take(10, Rec::Seccomp { pid: 300, ses: Some(7), denied: denied("ptrace") });
        assert!(s.slots.values().all(|slot| slot.denials.is_empty()), "a shared session's record is no one's");
        s.take(10, Rec::Seccomp { pid: 200, ses: Some(7), denied: denied("unshare") });
        assert_eq!(s.slots[&200].denials.len(), 1);
        assert!(s.slots[&100].denials.is_empty());
    }

    #[test]
    fn routing_claims_strays_and_bounds_each_invocation() {
        let mut s = State::default();
        // The access record comes before the domain's, and both before the invocation registers.
        let (at, access) = parse(AUDIT_LANDLOCK_ACCESS, ACCESS.as_bytes()).unwrap();
        s.take(at, access);
        let (at, domain) = parse(AUDIT_LANDLOCK_DOMAIN, DOMAIN.as_bytes()).unwrap();
        s.take(at, domain);
        assert_eq!(s.strays.len(), 2);
        // An invocation whose leader got the same pid later (recycled) does not claim them.
        s.slots.insert(24057, Slot { since_ms: at + 5_000, ..Slot::default() });
        s.reroute();
        assert_eq!(s.strays.len(), 2);
        s.slots.insert(24057, Slot { since_ms: at - 2, ..Slot::default() });
        s.reroute();
        assert!(s.strays.is_empty());
        assert_eq!(s.slots[&24057].denials.len(), 1);
        // Deduplicated and bounded.
        for i in 0..(MAX_DENIALS as u32 + 10) {
            for _ in 0..2 {
                s.take(
                    at,
                    Rec::Access {
                        domain: 0x14bba5be6,
                        denied: Denied::Fs { access: vec!["read_file".into()], path: format!("/x/{i}") },
                    },
                );
            }
        }
        let slot = &s.slots[&24057];
        assert_eq!(slot.denials.len(), MAX_DENIALS);
        assert_eq!(slot.denials[1].count, 2);
        // The latest is kept (the one that stopped the tool comes last).
        let last = format!("/x/{}", MAX_DENIALS as u32 + 9);
        assert!(matches!(&slot.denials[MAX_DENIALS - 1].denied, Denied::Fs { path, .. } if *path == last));
        // Someone else's records stay strays, and the ring is bounded.
        for pid in 0..(STRAYS as u32 + 5) {
            s.take(at, Rec::Seccomp { pid: 1_000_000 + pid, ses: None, denied: Denied::Scope { what: "x".into() } });
        }
        assert_eq!(s.strays.len(), STRAYS);
        // A known session is matched by session only: the same pid in another session is not it.
        s.slots.insert(7, Slot { ses: Some(42), ..Slot::default() });
        s.sessions.insert(42, 7);
        let sys = |ses| Rec::Seccomp { pid: 7, ses, denied: Denied::Syscall { nr: 1, name: None, killed: false } };
        assert!(!s.route(at, &sys(Some(9))));
        assert!(!s.route(at, &sys(None)));
        assert!(s.route(at, &sys(Some(42))));
        // Without a session (the login uid could not be set), by the leader's pid.
        s.slots.insert(8, Slot::default());
        assert!(s.route(at, &Rec::Seccomp { pid: 8, ses: Some(3), denied: Denied::Scope { what: "y".into() } }));
    }
}
