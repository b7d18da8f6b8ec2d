//! Starting, supervising and reaping one invocation.
//!
//! The child leads a new session (so it has no controlling terminal and its process group id is
//! its pid). The daemon holds a pidfd for it and learns of its exit *without reaping it*
//! (`waitid(WNOWAIT)`): while the leader is a zombie its pid, and so the group id, cannot be
//! reused, which makes the final `killpg` of leftover group members safe. Only then is it reaped.

use std::io;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;

use super::output::{Capture, Captured};
use crate::argv::Plan;

/// How long to keep reading output after the process group is gone, for data still in pipes.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// What to run and under which limits.
#[derive(Debug, Clone, Copy)]
pub struct RunSpec<'a> {
    pub plan: &'a Plan,
    pub timeout: Duration,
    pub max_output: u64,
    /// Time between SIGTERM and SIGKILL.
    pub grace: Duration,
}

/// How an invocation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub pid: u32,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub cancelled: bool,
    pub stdout: Captured,
    pub stderr: Captured,
    pub duration: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("cannot start {program}: {source}")]
    Start {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot supervise process {pid}: {source}")]
    Supervise {
        pid: u32,
        #[source]
        source: io::Error,
    },
}

/// Runs the plan to completion, timeout or cancellation.
pub async fn run(spec: RunSpec<'_>, cancel: &CancellationToken) -> Result<Outcome, SpawnError> {
    let plan = spec.plan;
    let started = Instant::now();
    let mut cmd = Command::new(&plan.executable);
    cmd.arg0(&plan.argv[0])
        .args(&plan.argv[1..])
        .env_clear()
        .envs(plan.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&plan.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the closure runs in the child between fork and exec. It calls only setsid(2), which
    // is async-signal-safe, allocates nothing and touches no state shared with the parent.
    unsafe {
        cmd.pre_exec(|| nix::unistd::setsid().map(drop).map_err(io::Error::from));
    }
    let start_err = |source| SpawnError::Start { program: plan.argv[0].clone(), source };
    let mut child = cmd.spawn().map_err(start_err)?;
    let pid = child.id();
    // From here on the group is killed if this future is dropped before the child is reaped.
    let mut group = Group { pid, reaped: false };
    let supervise = |source| SpawnError::Supervise { pid, source };
    let pidfd = pidfd_open(pid).map_err(supervise)?;
    // SAFETY: `pidfd` is an open descriptor owned by the OwnedFd moved into the AsyncFd, which
    // keeps it open and unchanged until the AsyncFd is dropped.
    let pidfd = unsafe { AsyncFd::register(pidfd) }.map_err(|e| supervise(e.into()))?;
    let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(supervise(io::Error::other("child pipes missing")));
    };
    // The std Child is only a handle; dropping it neither kills nor reaps.
    drop(child);
    let out = tokio::process::ChildStdout::from_std(out).map_err(supervise)?;
    let err = tokio::process::ChildStderr::from_std(err).map_err(supervise)?;
    let stop_reading = CancellationToken::new();
    let out_task = tokio::spawn(capture(out, spec.max_output, stop_reading.clone()));
    let err_task = tokio::spawn(capture(err, spec.max_output, stop_reading.clone()));

    let (mut timed_out, mut cancelled) = (false, false);
    tokio::select! {
        r = exited(&pidfd) => r.map_err(supervise)?,
        () = tokio::time::sleep(spec.timeout) => timed_out = true,
        () = cancel.cancelled() => cancelled = true,
    }
    if timed_out || cancelled {
        group.signal(Signal::SIGTERM);
        if tokio::time::timeout(spec.grace, exited(&pidfd)).await.is_err() {
            group.signal(Signal::SIGKILL);
            exited(&pidfd).await.map_err(supervise)?;
        }
    }
    // The leader is a zombie: the group id is still ours. Nothing it started may outlive it.
    group.signal(Signal::SIGKILL);
    let status =
        waitid(Id::PIDFd(pidfd.get_ref().as_fd()), WaitPidFlag::WEXITED).map_err(|e| supervise(io::Error::from(e)))?;
    group.reaped = true;

    let drain = tokio::spawn({
        let stop = stop_reading.clone();
        async move {
            tokio::time::sleep(DRAIN_LIMIT).await;
            stop.cancel();
        }
    });
    let stdout = out_task.await.unwrap_or_default();
    let stderr = err_task.await.unwrap_or_default();
    drain.abort();

    let (exit_code, signal) = match status {
        WaitStatus::Exited(_, code) => (Some(code), None),
        WaitStatus::Signaled(_, sig, _) => (None, Some(sig as i32)),
        _ => (None, None),
    };
    Ok(Outcome { pid, exit_code, signal, timed_out, cancelled, stdout, stderr, duration: started.elapsed() })
}

/// Kills the group if the supervising future is dropped before the leader is reaped.
struct Group {
    pid: u32,
    reaped: bool,
}

impl Group {
    fn signal(&self, signal: Signal) {
        // ESRCH (the group is already empty) is the expected outcome of a clean exit.
        let _ = killpg(Pid::from_raw(self.pid as i32), signal);
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.reaped {
            self.signal(Signal::SIGKILL);
            let pid = Pid::from_raw(self.pid as i32);
            // Reap off the async runtime: the SIGKILL makes this return promptly.
            std::thread::spawn(move || nix::sys::wait::waitpid(pid, None));
        }
    }
}

/// Waits until the process behind `pidfd` has exited, without reaping it.
async fn exited(pidfd: &AsyncFd<OwnedFd>) -> io::Result<()> {
    loop {
        let mut guard = pidfd.readable().await?;
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
        match waitid(Id::PIDFd(pidfd.get_ref().as_fd()), flags) {
            Ok(WaitStatus::StillAlive) => guard.clear_ready(),
            Ok(_) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}

fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::other("pid out of range"))?;
    // SAFETY: pidfd_open(2) takes a pid and flags by value and touches no memory of ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("fd out of range"))?;
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

async fn capture(mut reader: impl AsyncRead + Unpin, cap: u64, stop: CancellationToken) -> Captured {
    let mut capture = Capture::new(cap);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            n = reader.read(&mut buf) => match n {
                Ok(0) | Err(_) => break,
                Ok(n) => capture.push(&buf[..n]),
            },
        }
    }
    capture.finish()
}
