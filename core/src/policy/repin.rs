//! Re-pinning: a grant root that the identity a call runs as owns, deleted and recreated by
//! that identity (`cargo clean`, `rm -rf node_modules && npm ci`), is taken anew at the next
//! call instead of making the tool unavailable until an admin reloads. The exact rule is in
//! [`qualify`] and in docs/pins.md; everything else keeps the load-time rule of `probe` (any
//! pinned path that changed makes the tool unavailable).
//!
//! Race-free: the new node is checked through the descriptors of a walk from `/` (each
//! component opened `O_PATH | O_NOFOLLOW` from the one above it), and the very descriptor that
//! was checked becomes the pin the sandbox uses (landlock rules, `fchdir`), never the path again.
//! Shared: the re-pinned set goes into the tool's [`Repinned`](super::Repinned) slot under its
//! lock, so concurrent calls re-pin once and later calls of the same generation use it.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, fstat, mkdirat};

use super::model::{Pin, Pins, RunAs, Tool};
use super::probe::{ProbeError, mount_id, verify, verify_pin};
use crate::resolve::{Node, on_kernel_fs};

/// The identity a call runs as: its uid and primary gid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Runner {
    pub uid: u32,
    pub gid: u32,
}

/// One grant root a call re-pinned (for the `repinned` audit record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repin {
    /// The policy key: `read`, `write`, `exec` or `working_dir`.
    pub what: &'static str,
    pub path: PathBuf,
    /// `dev:ino` pinned before.
    pub was: String,
    /// `dev:ino` pinned now.
    pub now: String,
    /// The write root was missing and cordond created it, as the runner, mode 0700.
    pub created: bool,
    /// The identity it was re-pinned for.
    pub uid: u32,
}

/// The policy keys whose roots may be re-pinned. `command[0]` is not (a new program is a new
/// tool: its owner, mode and `#!` are judged at load), nor a `unix_sockets` directory (a
/// service's, not the developer's).
const REPINNABLE: [&str; 4] = ["working_dir", "read", "write", "exec"];

/// Mode of a write root cordond creates: the runner's alone.
const CREATED_MODE: u32 = 0o700;

impl Tool {
    /// The pins the tool's calls use now: the load-time ones, or those a re-pin put in force.
    pub fn current_pins(&self) -> Arc<Pins> {
        self.sandbox.repinned.get().unwrap_or_else(|| self.sandbox.pins.clone())
    }

    /// The pins a call that runs as `runner` uses: the current ones when every pinned path
    /// still names its node; else each changed grant root that [`qualify`] takes for the
    /// runner is re-pinned (a missing write root created) and the new set put in force for
    /// later calls. Any other change refuses the call with the reason, as before.
    pub fn pins_for_call(&self, runner: Runner) -> Result<(Arc<Pins>, Vec<Repin>), ProbeError> {
        let current = self.current_pins();
        if verify(&current).is_ok() {
            return Ok((current, Vec::new()));
        }
        // One re-pin at a time per tool: a second call waits, then finds the pins in force.
        let mut slot = self.sandbox.repinned.lock();
        let current = slot.clone().unwrap_or_else(|| self.sandbox.pins.clone());
        let (pins, repins) = repin_all(&current, |_, _| Some(runner), true)?;
        if repins.is_empty() {
            return Ok((current, repins));
        }
        let pins = Arc::new(pins);
        *slot = Some(pins.clone());
        Ok((pins, repins))
    }

    /// Whether the current pins hold, counting a changed grant root that the re-pin rule
    /// would take at the next call as holding (nothing is opened for good or created). The
    /// identity is the tool's own where the policy fixes it (`run_as`, the working_dir's owner,
    /// cordond's user when it is not root); for a tool that runs as its caller, the root's owner
    /// at load stands for it (the call decides for the real caller).
    pub(super) fn pins_hold_or_repinnable(&self) -> Result<(), ProbeError> {
        let current = self.current_pins();
        let Err(e) = verify(&current) else { return Ok(()) };
        let fixed = self.fixed_runner(&current);
        let changed = matches!(e, ProbeError::Changed { .. } | ProbeError::Pending { .. });
        if !changed {
            return Err(e);
        }
        let stand_in = |old: Option<&Pin>, path: &Path| match old {
            Some(old) => Some(Runner { uid: old.node.uid, gid: 0 }),
            None => parent_owner(path),
        };
        repin_all(&current, |old, path| fixed.or_else(|| stand_in(old, path)), false).map(|_| ())
    }

    /// Whether a `write` root missing at load (`path`) may load pending, to be created by the
    /// first call: the re-pin rule would create it for the identity the tool runs as (its
    /// `run_as`, the working_dir's owner, cordond's user when it is not root); for a tool that
    /// runs as its caller, the owner of the directory that would hold it stands in, and the call
    /// decides for the real caller. The reason when it may not.
    pub(super) fn judge_missing(&self, pins: &Pins, path: &Path) -> Result<(), String> {
        let runner = match (self.fixed_runner(pins), &self.sandbox.run_as) {
            (Some(r), _) => r,
            (None, Some(_)) => return Err("the identity the tool runs as is not known".into()),
            (None, None) => match parent_owner(path) {
                None => return Err("the directory that would hold it cannot be read".into()),
                Some(r) if r.uid == 0 => {
                    return Err(
                        "the directory that would hold it is root's, and only an admin creates roots there".into()
                    );
                }
                Some(r) => r,
            },
        };
        qualify("write", path, None, runner, false).map(|_| ())
    }

    /// What the next call does first, for listings: the write roots missing at load that it
    /// creates (named for admins; agents, who are not shown the grants, get the sentence alone).
    /// `None`: nothing.
    pub fn pending_note(&self, with_paths: bool) -> Option<String> {
        let pins = self.current_pins();
        let paths: Vec<String> = pins.pending_write.iter().map(|p| p.path.display().to_string()).collect();
        let what = if with_paths { format!("write root {}", paths.join(", ")) } else { "a write root".to_string() };
        (!paths.is_empty()).then(|| {
            format!(
                "{what} missing since the registry loaded: the next call creates it (mode 0700, as the account \
                 the call runs as; {})",
                crate::docs::doc_ref("pins.md")
            )
        })
    }

    /// The identity the tool runs as whoever calls, when the policy alone fixes it.
    fn fixed_runner(&self, pins: &Pins) -> Option<Runner> {
        let euid = nix::unistd::geteuid().as_raw();
        match &self.sandbox.run_as {
            _ if euid != 0 => Some(Runner { uid: euid, gid: nix::unistd::getegid().as_raw() }),
            Some(r @ RunAs::Account { .. }) => {
                super::probe::resolve_run_as(r).ok().map(|(uid, gid)| Runner { uid, gid })
            }
            Some(RunAs::OwnerOfWorkingDir) => {
                let node = Node::of(&*pins.working_dir.as_ref()?.fd).ok()?;
                Some(Runner { uid: node.uid, gid: 0 })
            }
            None => None,
        }
    }
}

/// `pins` with every changed pin re-pinned under [`qualify`] for the runner `runner_of` gives
/// it (by its old pin), and what was re-pinned; the first pin that changed and does not
/// qualify refuses, naming why. `act`: open the new nodes for good (and create a missing write
/// root); otherwise only judge.
fn repin_all(
    pins: &Pins,
    runner_of: impl Fn(Option<&Pin>, &Path) -> Option<Runner>,
    act: bool,
) -> Result<(Pins, Vec<Repin>), ProbeError> {
    verify_executable_name(pins)?;
    let mut out = pins.clone();
    let mut repins = Vec::new();
    // A path named by several keys (read and write) is re-pinned once, to one descriptor.
    let mut taken: HashMap<PathBuf, Pin> = HashMap::new();
    for (what, pin) in pins_mut(&mut out) {
        let Err(err) = verify_pin(what, pin) else { continue };
        // Checked first: a socket directory that is also a write root is not re-pinned with it.
        if !REPINNABLE.contains(&what) {
            return Err(err);
        }
        if let Some(new) = taken.get(&pin.path) {
            *pin = new.clone();
            continue;
        }
        let why_not = match runner_of(Some(pin), &pin.path) {
            None => Err("the identity of the call is not known".to_string()),
            Some(runner) => qualify(what, &pin.path, Some(pin), runner, act),
        };
        match why_not {
            Ok(Some((new, created))) => {
                let uid = new.node.uid;
                repins.push(Repin {
                    what,
                    path: pin.path.clone(),
                    was: pin.node.id(),
                    now: new.node.id(),
                    created,
                    uid,
                });
                taken.insert(pin.path.clone(), new.clone());
                *pin = new;
            }
            Ok(None) => {}
            Err(why) => return Err(err.not_repinned(why)),
        }
    }
    // Write roots missing at load: created now (or taken, if their owner made them meanwhile),
    // each put back at its place in the write list.
    for p in std::mem::take(&mut out.pending_write) {
        let why_not = match runner_of(None, &p.path) {
            None => Err("the identity of the call is not known".to_string()),
            Some(runner) => qualify("write", &p.path, None, runner, act),
        };
        match why_not {
            Ok(Some((new, created))) => {
                repins.push(Repin {
                    what: "write",
                    path: p.path.clone(),
                    was: "missing".into(),
                    now: new.node.id(),
                    created,
                    uid: new.node.uid,
                });
                out.write.insert(p.index.min(out.write.len()), new);
            }
            Ok(None) => {}
            Err(why) => return Err(super::probe::pending(&p).not_repinned(why)),
        }
    }
    Ok((out, repins))
}

/// The owner of the directory that holds `path` (read without following a symlink), as the
/// identity that stands in for a caller not known yet; `None` when it cannot be read.
fn parent_owner(path: &Path) -> Option<Runner> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path.parent()?).ok()?;
    Some(Runner { uid: m.uid(), gid: m.gid() })
}

/// `command[0]` as named must still lead to its pinned file (never re-pinned).
fn verify_executable_name(pins: &Pins) -> Result<(), ProbeError> {
    let only = Pins { executable: pins.executable.clone(), ..Pins::default() };
    verify(&only)
}

/// Every pin that names a node, mutably, with its policy key (the order of [`Pins::all`]).
fn pins_mut(p: &mut Pins) -> impl Iterator<Item = (&'static str, &mut Pin)> {
    p.executable
        .iter_mut()
        .map(|e| ("command[0]", &mut e.pin))
        .chain(p.working_dir.iter_mut().map(|p| ("working_dir", p)))
        .chain(p.read.iter_mut().map(|p| ("read", p)))
        .chain(p.write.iter_mut().map(|p| ("write", p)))
        .chain(p.exec.iter_mut().map(|p| ("exec", p)))
        .chain(p.socket_dirs.iter_mut().map(|p| ("unix_sockets directory", p)))
        .chain(p.trust_bundle.iter_mut().map(|p| ("trust bundle", p)))
}

/// The re-pin rule. The changed grant root `old` (key `what`) is taken anew for a call that
/// runs as `runner` exactly when:
///
/// 1. the runner is not root (root's paths are the admin's to accept, by a reload);
/// 2. when the registry loaded, the root was a directory owned by the runner, and not a mount
///    point (on the mount of the directory that holds it now);
/// 3. walking from `/` without following any symlink, every directory above it is owned by
///    root or the runner and writable by no one else (a group- or other-writable one only if
///    it is root's and sticky, like `/tmp`, and the entry in it is root's or the runner's);
/// 4. the path now names a directory (not a symlink, not a file), owned by the runner, not
///    group- or other-writable, on the same mount as the directory holding it (not a mount
///    point) and not on procfs, sysfs or a cgroup filesystem;
/// 5. or, for a `write` root only, nothing is there: it is created as the runner (its fsuid and
///    fsgid), mode 0700, then judged by 4.
///
/// So what the grant reaches moves only to a directory the runner made, in a place only root
/// and the runner control: nothing the runner could not already put beneath the old root. The
/// descriptor the walk checked is the new pin. `Ok(None)`: it qualifies (judging only).
///
/// `old` is the root's pin at load; `None` for a `write` root that was missing at load, for
/// which 2 does not apply (there was nothing to own) and 3 with 5 (or 4, when its owner made it
/// meanwhile) decide. "Writable by no one else" admits group-write by the runner's user private
/// group ([`private_group`]).
fn qualify(
    what: &'static str,
    path: &Path,
    old: Option<&Pin>,
    runner: Runner,
    act: bool,
) -> Result<Option<(Pin, bool)>, String> {
    let uid = runner.uid;
    if uid == 0 {
        return Err("the call runs as root, and only an admin re-accepts root's paths".into());
    }
    if let Some(old) = old {
        if !old.node.is_dir() {
            return Err("it was not a directory when the registry loaded".into());
        }
        if old.node.uid != uid {
            return Err(format!("it was owned by uid {}, not by uid {uid} the call runs as", old.node.uid));
        }
    }
    let names: Vec<&OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let Some((name, above)) = names.split_last() else {
        return Err("it is /".into());
    };
    let flags = OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW;
    let io = |p: &Path, e: Errno| format!("{}: {}", p.display(), e.desc());
    let mut dir =
        openat(AT_FDCWD, "/", flags | OFlag::O_DIRECTORY, Mode::empty()).map_err(|e| io(Path::new("/"), e))?;
    let mut dir_path = PathBuf::from("/");
    for n in above {
        let next = dir_path.join(n);
        let fd = openat(&dir, *n, flags, Mode::empty()).map_err(|e| io(&next, e))?;
        let st = fstat(&fd).map_err(|e| io(&next, e))?;
        holder_ok(&dir, &dir_path, Some(st.st_uid), uid)?;
        if !Node::of(&fd).is_ok_and(|n| n.is_dir()) {
            return Err(format!("{} is not a directory (or is a symlink)", next.display()));
        }
        (dir, dir_path) = (fd, next);
    }
    let parent_mount = mount_id(&dir).ok_or_else(|| format!("the mount of {} cannot be read", dir_path.display()))?;
    if let Some(old) = old
        && mount_id(&old.fd) != Some(parent_mount)
    {
        return Err(format!(
            "it was a mount point (or {} was remounted) since the registry loaded",
            dir_path.display()
        ));
    }
    let (fd, created) = match openat(&dir, *name, flags, Mode::empty()) {
        Ok(fd) => (fd, false),
        Err(Errno::ENOENT) if what == "write" => {
            holder_ok(&dir, &dir_path, Some(uid), uid)?;
            if !act {
                return Ok(None);
            }
            create_as(&dir, name, runner).map_err(|e| format!("creating it as uid {uid}: {}", e.desc()))?;
            let fd = openat(&dir, *name, flags, Mode::empty()).map_err(|e| io(path, e))?;
            (fd, true)
        }
        Err(e) => return Err(io(path, e)),
    };
    let st = fstat(&fd).map_err(|e| io(path, e))?;
    holder_ok(&dir, &dir_path, Some(st.st_uid), uid)?;
    let node = Node::of(&fd).map_err(|e| e.to_string())?;
    if node.is_symlink() {
        return Err("it is now a symlink".into());
    }
    if !node.is_dir() {
        return Err("it is now not a directory".into());
    }
    if node.uid != uid {
        return Err(format!("it is now owned by uid {}, not by uid {uid} the call runs as", node.uid));
    }
    let mode = node.mode & 0o7777;
    if mode & 0o022 != 0 {
        let group = if mode & 0o002 == 0 { Some(private_group(st.st_gid, uid)) } else { None };
        match group {
            Some(Ok(())) => {}
            Some(Err(why)) => {
                return Err(format!("it is now group- or other-writable (mode {mode:o}; `chmod go-w` it): {why}"));
            }
            None => return Err(format!("it is now group- or other-writable (mode {mode:o}; `chmod go-w` it)")),
        }
    }
    if mount_id(&fd) != Some(parent_mount) {
        return Err("it is now a mount point".into());
    }
    if let Ok(Some(fs)) = on_kernel_fs(&fd) {
        return Err(format!("it is now on {fs}"));
    }
    if !act {
        return Ok(None);
    }
    Ok(Some((Pin { path: path.to_path_buf(), node, fd: Arc::new(fd) }, created)))
}

/// The directory `dir` (at `path`) that holds an entry owned by `entry_uid` lets no one but
/// root and `uid` replace that entry: owned by root or `uid`, and writable by no group or
/// other, unless it is root's and sticky and the entry is root's or `uid`'s.
fn holder_ok(dir: &OwnedFd, path: &Path, entry_uid: Option<u32>, uid: u32) -> Result<(), String> {
    let st: FileStat = fstat(dir).map_err(|e| format!("{}: {}", path.display(), e.desc()))?;
    let owner = st.st_uid;
    if owner != 0 && owner != uid {
        return Err(format!("{} above it is owned by uid {owner}, who could replace it", path.display()));
    }
    let mode = st.st_mode & 0o7777;
    if mode & 0o022 != 0 {
        let sticky_ok = owner == 0 && mode & 0o1000 != 0 && entry_uid.is_some_and(|e| e == 0 || e == uid);
        if sticky_ok {
            return Ok(());
        }
        if mode & 0o002 != 0 {
            return Err(format!(
                "{} above it (mode {mode:o}) is writable by everyone, who could replace it",
                path.display()
            ));
        }
        // Group-writable: only the identity's own user private group is no one else.
        if let Err(why) = private_group(st.st_gid, uid) {
            return Err(format!(
                "{} above it (mode {mode:o}) is writable by {why}, who could replace it",
                path.display()
            ));
        }
    }
    Ok(())
}

/// Whether group `gid` is a user private group of `uid` (Fedora/RHEL and Debian with umask 002
/// make a developer's directories 0775 with that group): `gid` is the primary group of `uid`'s
/// account, no other account has it as primary group, and it has no listed member other than
/// that account. Read from /etc/passwd and /etc/group; anything that cannot be told, or is
/// ambiguous, is not private (fail closed). `Err`: "group NAME (GID)" and why not.
pub(crate) fn private_group(gid: u32, uid: u32) -> Result<(), String> {
    let read = |f: &str| std::fs::read_to_string(f).map_err(|e| format!("group {gid} ({f} cannot be read: {e})"));
    private_group_in(&read("/etc/passwd")?, &read("/etc/group")?, gid, uid)
}

/// [`private_group`] on the text of /etc/passwd and /etc/group.
fn private_group_in(passwd: &str, group: &str, gid: u32, uid: u32) -> Result<(), String> {
    let entries = |text: &str| -> Vec<Vec<String>> {
        text.lines()
            .map(str::trim_end)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| l.split(':').map(str::to_string).collect())
            .collect()
    };
    let groups: Vec<Vec<String>> =
        entries(group).into_iter().filter(|f| f.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(gid)).collect();
    let name = match groups.as_slice() {
        [g] => format!("group {} ({gid})", g[0]),
        [] => return Err(format!("group {gid} (not in /etc/group, so it cannot be told private)")),
        _ => return Err(format!("group {gid} (named {} times in /etc/group)", groups.len())),
    };
    let mut mine = Vec::new();
    for f in entries(passwd) {
        let (Some(u), Some(g)) =
            (f.get(2).and_then(|v| v.parse::<u32>().ok()), f.get(3).and_then(|v| v.parse::<u32>().ok()))
        else {
            return Err(format!("{name} (/etc/passwd has an entry it cannot read)"));
        };
        if u == uid {
            mine.push((f[0].clone(), g));
        } else if g == gid {
            return Err(format!("{name}, also the primary group of {} (uid {u})", f[0]));
        }
    }
    if mine.is_empty() {
        return Err(format!("{name} (uid {uid} has no entry in /etc/passwd)"));
    }
    if !mine.iter().all(|(_, g)| *g == gid) {
        return Err(format!("{name}, not the primary group of uid {uid}"));
    }
    let members = groups[0].get(3).map(String::as_str).unwrap_or_default();
    let others: Vec<&str> =
        members.split(',').map(str::trim).filter(|m| !m.is_empty() && !mine.iter().any(|(n, _)| n == m)).collect();
    if !others.is_empty() {
        return Err(format!("{name}, shared with {}", others.join(", ")));
    }
    Ok(())
}

/// `mkdirat(dir, name, 0700)` as the runner: on a thread of its own whose filesystem uid and
/// gid are the runner's (so the kernel checks the runner's right to write `dir`, and the new
/// directory is the runner's from its first instant); the thread ends with it.
fn create_as(dir: &OwnedFd, name: &OsStr, runner: Runner) -> Result<(), Errno> {
    let mode = Mode::from_bits_truncate(CREATED_MODE);
    if !nix::unistd::geteuid().is_root() {
        return mkdirat(dir, name, mode);
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            use nix::unistd::{Gid, Uid, setfsgid, setfsuid};
            setfsgid(Gid::from_raw(runner.gid));
            setfsuid(Uid::from_raw(runner.uid));
            // setfsuid reports the previous id, not success: asking again says what is in force.
            if setfsuid(Uid::from_raw(runner.uid)).as_raw() != runner.uid
                || setfsgid(Gid::from_raw(runner.gid)).as_raw() != runner.gid
            {
                return Err(Errno::EPERM);
            }
            mkdirat(dir, name, mode)
        })
        .join()
        .unwrap_or(Err(Errno::EIO))
    })
}

#[cfg(test)]
mod tests {
    use super::private_group_in;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\ndev:x:1000:1000::/home/dev:/bin/bash\n\
                          ops:x:1001:1001::/home/ops:/bin/sh\n";

    #[test]
    fn a_user_private_group_is_private_and_a_shared_one_is_not() {
        let private = "root:x:0:\ndev:x:1000:\nops:x:1001:\n";
        assert_eq!(private_group_in(PASSWD, private, 1000, 1000), Ok(()));
        // Listing the owner itself as a member changes nothing.
        assert_eq!(private_group_in(PASSWD, "dev:x:1000:dev\n", 1000, 1000), Ok(()));
        let shared = "dev:x:1000:dev,ops\n";
        assert_eq!(private_group_in(PASSWD, shared, 1000, 1000), Err("group dev (1000), shared with ops".into()));
        // Another account's private group, the identity's secondary group: not the identity's.
        assert_eq!(
            private_group_in(PASSWD, private, 1001, 1000),
            Err("group ops (1001), also the primary group of ops (uid 1001)".into())
        );
        let second_primary = format!("{PASSWD}build:x:1002:1000::/:/bin/sh\n");
        assert!(
            private_group_in(&second_primary, private, 1000, 1000)
                .unwrap_err()
                .contains("also the primary group of build")
        );
        // Unknown or ambiguous: not private.
        assert!(private_group_in(PASSWD, "root:x:0:\n", 1000, 1000).is_err());
        assert!(private_group_in(PASSWD, "dev:x:1000:\nstaff:x:1000:\n", 1000, 1000).is_err());
        assert!(private_group_in(PASSWD, private, 1000, 1005).is_err());
        assert!(private_group_in("dev:x:oops\n", private, 1000, 1000).is_err());
    }
}
