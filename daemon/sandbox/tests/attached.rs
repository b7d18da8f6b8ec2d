//! The attached-stdio mode of [`cordon_sandbox::run`]: the child's 0, 1 and 2 are the caller's
//! pipes (a long-lived MCP server cordond talks to), under the same confinement as a tool.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use cordon_core::argv::Plan;
use cordon_core::policy::SandboxPolicy;
use cordon_sandbox::{Confinement, HostSandbox, Profile, RunSpec, Stdio, compile_seccomp, run};
use tokio_util::sync::CancellationToken;

fn plan(argv: &[&str]) -> Plan {
    Plan {
        executable: argv[0].into(),
        argv: argv.iter().map(|s| s.to_string()).collect(),
        display_argv: argv.iter().map(|s| s.to_string()).collect(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cwd: "/".into(),
    }
}

fn pipe() -> (OwnedFd, OwnedFd) {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap()
}

/// The pipes: (child's stdin, stdout, stderr) and (our writer, stdout reader, stderr reader).
fn attached() -> (Stdio, (std::fs::File, std::fs::File, std::fs::File)) {
    let (in_r, in_w) = pipe();
    let (out_r, out_w) = pipe();
    let (err_r, err_w) = pipe();
    (Stdio::Attached { stdin: in_r, stdout: out_w, stderr: err_w }, (in_w.into(), out_r.into(), err_r.into()))
}

/// One per test process: each probe numbers its pooled cgroup leaves from 0.
fn host() -> &'static HostSandbox {
    static HOST: OnceLock<HostSandbox> = OnceLock::new();
    HOST.get_or_init(HostSandbox::probe)
}

fn gone(pid: u32) -> bool {
    // ESRCH once the process is reaped; a zombie still answers, so this waits for the reap.
    for _ in 0..500 {
        if nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None) == Err(nix::errno::Errno::ESRCH) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

async fn with_confinement<F, T>(f: F) -> T
where
    F: AsyncFnOnce(&Confinement<'_>) -> T,
{
    let host = host();
    let programs = Arc::new(compile_seccomp(Profile { tcp: false, bind: false, unix: false }).unwrap());
    let policy = SandboxPolicy::default();
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let id = format!("attached-{}-{n}", std::process::id());
    let confine = Confinement {
        id: &id,
        policy: &policy,
        landlock_abi: host.landlock_abi,
        seccomp: programs,
        identity: None,
        dedicated_uid: false,
        cgroups: &host.cgroups,
        views: &host.views,
        generation: 1,
        cgroup_dirs: None,
        denials: None,
    };
    f(&confine).await
}

fn spec<'a>(plan: &'a Plan, stdio: Stdio, pid: Option<Arc<OnceLock<u32>>>) -> RunSpec<'a> {
    RunSpec {
        plan,
        timeout: Duration::from_secs(600),
        max_output: 1024,
        grace: Duration::from_secs(1),
        output: None,
        proxy: None,
        temp_files: Vec::new(),
        stdio,
        pid,
        learn: Vec::new(),
    }
}

/// A line written to the child's stdin comes back on our end of its stdout (`cat` under the
/// sandbox); closing stdin ends it; nothing is captured.
#[tokio::test]
async fn attached_stdio_echoes_a_line_through_cat() {
    if host().landlock_abi == 0 {
        // not a skip: the sandbox refuses to run anything without landlock; CI hosts have it.
        assert!(std::env::var_os("CORDON_CI").is_none(), "SKIPPED: no landlock on a CI host");
        return;
    }
    let (stdio, (mut input, output, _err)) = attached();
    let p = plan(&["/bin/cat"]);
    let outcome = with_confinement(async |c: &Confinement<'_>| {
        let io = tokio::task::spawn_blocking(move || {
            input.write_all(b"hello through the sandbox\n").unwrap();
            let mut line = String::new();
            BufReader::new(output).read_line(&mut line).unwrap();
            drop(input); // EOF: cat exits
            line
        });
        let never = CancellationToken::new();
        let (outcome, line) = tokio::join!(run(spec(&p, stdio, None), c, &never), io);
        (outcome.unwrap(), line.unwrap())
    })
    .await;
    let (outcome, line) = outcome;
    assert_eq!(line, "hello through the sandbox\n", "{outcome:?}");
    assert_eq!(outcome.exit_code, Some(0), "{outcome:?}");
    assert_eq!(outcome.stdout.total, 0, "attached output is not captured");
    assert!(outcome.stdout.bytes.is_empty() && outcome.stderr.bytes.is_empty());
}

/// Dropping the running future kills the whole group: the child (and what it started) is gone,
/// and its stdout reaches EOF; cancelling ends it too, with `cancelled` in the outcome.
#[tokio::test]
async fn dropping_or_cancelling_an_attached_run_kills_the_group() {
    if host().landlock_abi == 0 {
        // not a skip: the sandbox refuses to run anything without landlock; CI hosts have it.
        assert!(std::env::var_os("CORDON_CI").is_none(), "SKIPPED: no landlock on a CI host");
        return;
    }
    // The shell prints the pid of a background sleep (a second member of the group), then waits.
    let p = plan(&["/bin/sh", "-c", "sleep 300 & echo $!; exec cat"]);
    for cancel_it in [false, true] {
        let (stdio, (input, output, _err)) = attached();
        let slot = Arc::new(OnceLock::new());
        let cancel = CancellationToken::new();
        let (leader, member, outcome) = with_confinement(async |c: &Confinement<'_>| {
            let mut reader = BufReader::new(output);
            let mut running = Box::pin(run(spec(&p, stdio, Some(slot.clone())), c, &cancel));
            let read = tokio::task::spawn_blocking(move || {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                (line, reader)
            });
            let (line, reader) = tokio::select! {
                r = read => r.unwrap(),
                o = &mut running => panic!("ended early: {o:?}"),
            };
            let member: u32 = line.trim().parse().unwrap();
            let leader = *slot.get().unwrap();
            let outcome = if cancel_it {
                cancel.cancel();
                Some(running.await.unwrap())
            } else {
                drop(running);
                None
            };
            // Every writer of the pipe is dead: EOF.
            let rest = tokio::task::spawn_blocking(move || {
                let mut reader = reader;
                let mut rest = String::new();
                reader.read_line(&mut rest).map(|_| rest)
            })
            .await
            .unwrap()
            .unwrap();
            assert_eq!(rest, "");
            (leader, member, outcome)
        })
        .await;
        drop(input);
        assert!(gone(leader), "the leader {leader} outlived the run (cancel: {cancel_it})");
        assert!(gone(member), "the group member {member} outlived the run (cancel: {cancel_it})");
        if let Some(o) = outcome {
            assert!(o.cancelled, "{o:?}");
            assert_eq!(o.pid, leader);
        }
    }
}
