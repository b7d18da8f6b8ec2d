//! Namespaces prepared ahead of calls, in small bounded pools, so that a call's child enters one
//! with `setns` instead of making it (see docs/performance.md, "Pools").
//!
//! - Mount namespaces for the private temp space ([`super::temp`]): a copy of a read-only view
//!   with a fresh tmpfs on `/tmp` (mode 1777) and, per shape, on `/dev/shm` (1777, noexec), of
//!   the call's size bound. A shape is (view, size, inode bound, `/dev/shm` or not): the owner
//!   identity does not enter it, because these mounts have none (the 0700 `TMPDIR` directory of
//!   a tool with grants beneath `/tmp` is made per call, as before).
//! - Network namespaces for a tool with `network.hosts` ([`super::netns`]): loopback up, and the
//!   egress proxy's listener bound to `127.0.0.1:PROXY_PORT` and listening, held by cordond.
//!
//! Rules, all kept here: each namespace is handed to exactly one call ([`take_mnt`],
//! [`take_net`] remove it) and never comes back: the call's [`Retire`] closes it when the call
//! ends, on the pool's reaper thread, so the mount namespace's teardown (which waits for RCU
//! grace periods) runs neither in the tool's exit nor on the answer's path. No process was ever
//! in a pooled namespace before the call's child (the pool's thread makes them from outside and
//! leaves), so nothing of another call or identity can be in it. Each shape holds at most
//! [`PER_SHAPE`], at most [`MAX_SHAPES`] shapes are kept (the oldest goes), and at most [`NETS`]
//! network namespaces: refilled by one background thread after each take, and an empty pool
//! means the call makes its own as before (nothing waits for the pool). A shape whose view is
//! gone (a reload, a re-pinned write root) is discarded with its namespaces. Namespaces are held
//! only by descriptors in cordond: nothing is named or mounted on the host, and a killed daemon
//! leaves nothing behind.
//!
//! Only a root daemon pools (its children enter views without a user namespace); a daemon that
//! is not root keeps today's path. `CORDON_POOL=off` in cordond's environment turns the pools off
//! (for the benches' same-build comparison).

use std::ffi::CString;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak, mpsc};

use super::mntns::View;

/// Most mount namespaces kept ready per shape.
pub(crate) const PER_SHAPE: usize = 4;
/// Most shapes kept (each with up to [`PER_SHAPE`]).
pub(crate) const MAX_SHAPES: usize = 8;
/// Most network namespaces kept ready.
pub(crate) const NETS: usize = 4;

/// What a pooled mount namespace holds: see the module doc.
#[derive(Debug, Clone)]
pub(crate) struct MntShape {
    view: Weak<View>,
    size: CString,
    inodes: CString,
    shm: bool,
}

impl MntShape {
    pub(crate) fn new(view: &Arc<View>, size: CString, inodes: CString, shm: bool) -> MntShape {
        MntShape { view: Arc::downgrade(view), size, inodes, shm }
    }

    fn same(&self, other: &MntShape) -> bool {
        Weak::ptr_eq(&self.view, &other.view)
            && self.size == other.size
            && self.inodes == other.inodes
            && self.shm == other.shm
    }
}

/// A pooled namespace handed to one call, held until the call ends; dropping it closes the
/// descriptor on the reaper thread (inline where there is none).
#[derive(Debug)]
pub(crate) struct Retire(Option<OwnedFd>);

impl Retire {
    /// The namespace's descriptor, for the child's `setns`.
    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }
}

impl Drop for Retire {
    fn drop(&mut self) {
        if let Some(fd) = self.0.take() {
            retire(fd);
        }
    }
}

/// A network namespace made ahead, and the proxy's listener in it.
#[derive(Debug)]
pub(crate) struct PooledNet {
    pub ns: OwnedFd,
    pub listener: TcpListener,
}

#[derive(Debug)]
struct Shape {
    shape: MntShape,
    ready: Vec<OwnedFd>,
    /// Making one failed: never tried again (calls of this shape take today's path).
    broken: bool,
}

#[derive(Debug, Default)]
struct State {
    /// Oldest first.
    shapes: Vec<Shape>,
    nets: Vec<PooledNet>,
    /// A call with hosts has asked: keep [`NETS`] ready from now on.
    want_net: bool,
    net_broken: bool,
}

#[derive(Debug)]
struct Pools {
    state: Mutex<State>,
    wake: Condvar,
    reap: Mutex<mpsc::Sender<OwnedFd>>,
}

/// The pools, with their two threads started on first use; `None` when pooling is off here.
fn pools() -> Option<&'static Pools> {
    static POOLS: OnceLock<Option<Pools>> = OnceLock::new();
    POOLS
        .get_or_init(|| {
            // SAFETY: geteuid(2) has no preconditions.
            let root = unsafe { libc::geteuid() } == 0;
            let off = std::env::var_os("CORDON_POOL").is_some_and(|v| v == "off");
            if !root || off {
                return None;
            }
            let (tx, rx) = mpsc::channel::<OwnedFd>();
            std::thread::Builder::new().name("cordon-reap".into()).spawn(move || rx.into_iter().for_each(drop)).ok()?;
            std::thread::Builder::new().name("cordon-pool".into()).spawn(fill).ok()?;
            Some(Pools { state: Mutex::new(State::default()), wake: Condvar::new(), reap: Mutex::new(tx) })
        })
        .as_ref()
}

/// Closes a pooled namespace off the caller's path (see [`Retire`]).
fn retire(fd: OwnedFd) {
    match pools() {
        Some(p) => {
            let tx = p.reap.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(mpsc::SendError(fd)) = tx.send(fd) {
                drop(fd);
            }
        }
        None => drop(fd),
    }
}

impl State {
    /// Drops the shapes whose view is gone (their namespaces to the reaper).
    fn purge(&mut self, reap: &Mutex<mpsc::Sender<OwnedFd>>) {
        let (live, dead): (Vec<Shape>, Vec<Shape>) =
            std::mem::take(&mut self.shapes).into_iter().partition(|s| s.shape.view.strong_count() > 0);
        self.shapes = live;
        if !dead.is_empty() {
            let tx = reap.lock().unwrap_or_else(|e| e.into_inner());
            for fd in dead.into_iter().flat_map(|s| s.ready) {
                let _ = tx.send(fd);
            }
        }
    }
}

/// A mount namespace of exactly `shape`, if one is ready; either way the pool is refilled (a
/// shape seen for the first time is added, the oldest beyond [`MAX_SHAPES`] dropped).
pub(crate) fn take_mnt(shape: MntShape) -> Option<Retire> {
    let p = pools()?;
    let mut st = p.state.lock().unwrap_or_else(|e| e.into_inner());
    st.purge(&p.reap);
    let taken = match st.shapes.iter_mut().position(|s| s.shape.same(&shape)) {
        Some(i) => st.shapes[i].ready.pop(),
        None => {
            if st.shapes.len() >= MAX_SHAPES {
                let oldest = st.shapes.remove(0);
                let tx = p.reap.lock().unwrap_or_else(|e| e.into_inner());
                for fd in oldest.ready {
                    let _ = tx.send(fd);
                }
            }
            st.shapes.push(Shape { shape, ready: Vec::with_capacity(PER_SHAPE), broken: false });
            None
        }
    };
    drop(st);
    p.wake.notify_one();
    taken.map(|fd| Retire(Some(fd)))
}

/// A network namespace with the proxy's listener, if one is ready; the pool is refilled.
pub(crate) fn take_net() -> Option<PooledNet> {
    let p = pools()?;
    let mut st = p.state.lock().unwrap_or_else(|e| e.into_inner());
    st.want_net = true;
    let taken = st.nets.pop();
    drop(st);
    p.wake.notify_one();
    taken
}

/// How many namespaces the pools hold ready now (mount, network): for tests and status.
pub fn ready_counts() -> (usize, usize) {
    match pools() {
        Some(p) => {
            let st = p.state.lock().unwrap_or_else(|e| e.into_inner());
            (st.shapes.iter().map(|s| s.ready.len()).sum(), st.nets.len())
        }
        None => (0, 0),
    }
}

enum Job {
    Mnt(MntShape, Arc<View>),
    Net,
}

/// The next thing to make, waiting until there is one.
fn next_job(p: &Pools) -> Job {
    let mut st = p.state.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        st.purge(&p.reap);
        let mnt = st
            .shapes
            .iter()
            .filter(|s| !s.broken && s.ready.len() < PER_SHAPE)
            .find_map(|s| s.shape.view.upgrade().map(|v| (s.shape.clone(), v)));
        if let Some((shape, view)) = mnt {
            return Job::Mnt(shape, view);
        }
        if st.want_net && !st.net_broken && st.nets.len() < NETS {
            return Job::Net;
        }
        st = p.wake.wait(st).unwrap_or_else(|e| e.into_inner());
    }
}

/// The pool's thread: makes what [`next_job`] says, one at a time, and files it.
fn fill() {
    // Work ahead runs only on a CPU that nothing else wants (SCHED_IDLE): making a namespace
    // costs as much CPU as a call saves, and on a busy host it must never slow the calls
    // themselves. Starved, the pools run dry and calls make their own, as without a pool.
    let idle = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler(2) on the calling thread (0) with a valid parameter.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &idle) } != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "the pool's thread keeps the default scheduling");
    }
    // The thread's own filesystem context (root, cwd), which setns into a mount namespace needs;
    // its home namespaces, to return to after making each one; /proc, to name the new ones.
    // SAFETY: unshare(2) of this thread's fs_struct only.
    let own_fs = unsafe { libc::unshare(libc::CLONE_FS) } == 0;
    let open = |path: &std::ffi::CStr| {
        // SAFETY: open(2) of a NUL-terminated path; the result is a new descriptor we own.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        // SAFETY: as above: a fresh descriptor, owned here only.
        (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
    };
    let home_mnt = open(c"/proc/thread-self/ns/mnt");
    let home_net = open(c"/proc/thread-self/ns/net");
    let proc = open(c"/proc");
    let Some(p) = pools_when_ready() else { return };
    loop {
        match next_job(p) {
            Job::Mnt(shape, view) => {
                let made = match (&home_mnt, &proc) {
                    (Some(home), Some(proc)) if own_fs => make_mnt(&view, &shape, home, proc),
                    _ => Err(std::io::Error::from_raw_os_error(libc::ENOTSUP)),
                };
                drop(view);
                let mut st = p.state.lock().unwrap_or_else(|e| e.into_inner());
                let slot = st.shapes.iter_mut().find(|s| s.shape.same(&shape));
                match (made, slot) {
                    (Ok(fd), Some(s)) if s.ready.len() < PER_SHAPE => s.ready.push(fd),
                    (Ok(fd), _) => retire_locked(p, fd),
                    (Err(e), slot) => {
                        tracing::warn!(error = %e, "cannot make a temp space's mount namespace ahead; calls make their own");
                        if let Some(s) = slot {
                            s.broken = true;
                        }
                    }
                }
            }
            Job::Net => {
                let made = match (&home_net, &proc) {
                    (Some(home), Some(proc)) => make_net(home, proc),
                    _ => Err(std::io::Error::from_raw_os_error(libc::ENOTSUP)),
                };
                let mut st = p.state.lock().unwrap_or_else(|e| e.into_inner());
                match made {
                    Ok(n) if st.nets.len() < NETS => st.nets.push(n),
                    Ok(n) => drop(n),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot make a network namespace ahead; calls make their own");
                        st.net_broken = true;
                    }
                }
            }
        }
    }
}

/// The pools, once [`pools`] has finished making them (the filler starts inside it).
fn pools_when_ready() -> Option<&'static Pools> {
    pools()
}

fn retire_locked(p: &Pools, fd: OwnedFd) {
    let tx = p.reap.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(mpsc::SendError(fd)) = tx.send(fd) {
        drop(fd);
    }
}

fn last_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Makes one mount namespace of `shape` (on the pool's thread): enters the view, leaves it for a
/// copy of its own, mounts the tmpfs there, takes the namespace's descriptor and goes home.
fn make_mnt(view: &View, shape: &MntShape, home: &OwnedFd, proc: &OwnedFd) -> std::io::Result<OwnedFd> {
    // SAFETY: setns/unshare of this thread's own namespaces (it has its own fs_struct), opens of
    // NUL-terminated paths, and the tmpfs mount on a descriptor opened here and closed after.
    let made = unsafe {
        (|| {
            if libc::setns(view.mnt.as_raw_fd(), libc::CLONE_NEWNS) < 0 || libc::unshare(libc::CLONE_NEWNS) < 0 {
                return Err(last_error());
            }
            let mounts: &[(&std::ffi::CStr, bool)] =
                if shape.shm { &[(c"/tmp", false), (c"/dev/shm", true)] } else { &[(c"/tmp", false)] };
            for (target, noexec) in mounts {
                let t =
                    libc::open(target.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC);
                if t < 0 {
                    return Err(last_error());
                }
                let mnt = super::temp::mount_tmpfs(t, &shape.size, &shape.inodes, c"1777", None, *noexec);
                let e = last_error();
                libc::close(t);
                if mnt < 0 {
                    return Err(e);
                }
                libc::close(mnt);
            }
            let ns = libc::openat(proc.as_raw_fd(), c"thread-self/ns/mnt".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if ns < 0 {
                return Err(last_error());
            }
            Ok(OwnedFd::from_raw_fd(ns))
        })()
    };
    go_home(home, libc::CLONE_NEWNS)?;
    made
}

/// Makes one network namespace with loopback up and the proxy's listener (on the pool's thread),
/// then goes home.
fn make_net(home: &OwnedFd, proc: &OwnedFd) -> std::io::Result<PooledNet> {
    // SAFETY: unshare of this thread's network namespace, a socket made and configured by raw
    // system calls on stack values, opens of NUL-terminated paths; every descriptor is owned
    // by an OwnedFd as soon as it exists.
    let made = unsafe {
        (|| {
            if libc::unshare(libc::CLONE_NEWNET) < 0 {
                return Err(last_error());
            }
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            if fd < 0 {
                return Err(last_error());
            }
            let sock = OwnedFd::from_raw_fd(fd);
            if !super::netns::loopback_up(fd) || !super::netns::listen(fd) {
                return Err(last_error());
            }
            let ns = libc::openat(proc.as_raw_fd(), c"thread-self/ns/net".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if ns < 0 {
                return Err(last_error());
            }
            Ok(PooledNet { ns: OwnedFd::from_raw_fd(ns), listener: TcpListener::from(sock) })
        })()
    };
    go_home(home, libc::CLONE_NEWNET)?;
    made
}

/// Back to the namespace the thread started in; where that fails the thread cannot be trusted to
/// make more: it stops (the pools then stay empty, and calls make their own).
fn go_home(home: &OwnedFd, kind: libc::c_int) -> std::io::Result<()> {
    // SAFETY: setns(2) of this thread into a namespace descriptor we hold.
    if unsafe { libc::setns(home.as_raw_fd(), kind) } < 0 {
        let e = last_error();
        tracing::error!(error = %e, "the namespace pool's thread cannot return home; it stops");
        // Parks forever: this thread never makes another namespace.
        loop {
            std::thread::park();
        }
    }
    Ok(())
}
