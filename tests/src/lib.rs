//! Test harness: starts the real `cordond` on a temporary socket and drives the real `cordon`.
//!
//! # Layout
//! - [`bin`]: where the built binaries are.
//! - [`Daemon`]: a running daemon with its own temporary directory, killed on drop.
//! - [`Output`]: a finished `cordon` command.
//! - [`agent`]: the unprivileged user the suite attacks as, and `cordon` run as that user.
//! - [`attack_tool`], [`toml_str`]: policy text for tools that run the attack binary.
//! - [`otlp`]: a local OTLP logs receiver for the audit export.
//!
//! The binaries must be built first (`cargo build --workspace`); the README's test command does.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

pub mod otlp;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Path of a workspace binary (`cordond`, `cordon`) next to the test executable's directory.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/suite-HASH -> target/<profile>/NAME
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the binaries first with `cargo build --workspace` (the README's test command does)",
        path.display()
    );
    path
}

/// A running `cordond`.
#[derive(Debug)]
pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
    pub policies: PathBuf,
    pub dir: tempfile::TempDir,
    pub log: PathBuf,
    /// The audit log (`--audit`, inside `dir` unless the test chose another path).
    pub audit: PathBuf,
}

impl Daemon {
    /// Writes `policies` (file name, content) into a fresh directory and starts the daemon on it.
    pub fn start(policies: &[(&str, &str)]) -> Daemon {
        Daemon::start_with(policies, &[])
    }

    pub fn start_with(policies: &[(&str, &str)], extra_args: &[&str]) -> Daemon {
        let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().expect("tempdir");
        let policy_dir = dir.path().join("policies");
        std::fs::create_dir(&policy_dir).unwrap();
        for (name, content) in policies {
            std::fs::write(policy_dir.join(name), content).unwrap();
        }
        Daemon::start_in(dir, policy_dir, extra_args)
    }

    /// Starts the daemon on an existing policy directory.
    pub fn start_in(dir: tempfile::TempDir, policies: PathBuf, extra_args: &[&str]) -> Daemon {
        Daemon::start_under(&[], dir, policies, extra_args)
    }

    /// As [`Daemon::start_in`], with cordond run through `wrapper` (a command and its arguments
    /// that end by running the rest, e.g. `setpriv --reuid USER ... --` or `unshare --pid ...`).
    pub fn start_under(wrapper: &[&str], dir: tempfile::TempDir, policies: PathBuf, extra_args: &[&str]) -> Daemon {
        let socket = dir.path().join("run").join("cordon.sock");
        let log = dir.path().join("cordond.log");
        let chosen = extra_args.iter().position(|a| *a == "--audit").and_then(|i| extra_args.get(i + 1));
        let audit = chosen.map_or_else(|| dir.path().join("audit").join("audit.jsonl"), PathBuf::from);
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(bin("cordond"));
                c
            }
            None => Command::new(bin("cordond")),
        };
        command.arg("--policies").arg(&policies).arg("--socket").arg(&socket);
        if chosen.is_none() {
            command.arg("--audit").arg(&audit);
        }
        // Hermetic: a host's own `cordon` and `cordon-admin` groups (an installed package) do
        // not change a test daemon's socket mode or who its admins are, unless the test says so.
        for flag in ["--socket-group", "--admin-group"] {
            if !extra_args.contains(&flag) {
                command.arg(flag).arg("");
            }
        }
        let child = command
            .args(extra_args)
            .env("CORDON_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn cordond");
        let mut daemon = Daemon { child, socket, policies, dir, log, audit };
        daemon.wait_ready();
        daemon
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("cordond exited early with {status}:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("cordond did not listen on {} in time:\n{}", self.socket.display(), self.log_text());
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap()
    }

    /// Runs `cordon --socket SOCKET ARGS...` to completion.
    pub fn cordon(&self, args: &[&str]) -> Output {
        cordon_at(&self.socket, args)
    }

    /// Starts `cordon --socket SOCKET ARGS...` without waiting.
    pub fn cordon_spawn(&self, args: &[&str]) -> Child {
        Command::new(bin("cordon"))
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn cordon")
    }

    /// `cordon run TOOL --json` with `--args-json`, parsed.
    pub fn run_json(&self, tool: &str, args: &serde_json::Value) -> (Output, serde_json::Value) {
        let out = self.cordon(&["run", tool, "--args-json", &args.to_string(), "--json"]);
        let json = out.json();
        (out, json)
    }

    /// Writes (or replaces) a policy file in the daemon's directory.
    pub fn write_policy(&self, name: &str, content: &str) {
        std::fs::write(self.policies.join(name), content).unwrap();
    }

    /// Sends a signal to the daemon.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), signal).unwrap();
    }

    /// Waits for the daemon to exit.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Every record of the audit log (the active file), parsed.
    pub fn audit_records(&self) -> Vec<serde_json::Value> {
        audit_records(&self.audit)
    }

    /// Peak resident set size of the daemon (VmHWM), in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        proc_status_field(self.pid(), "VmHWM").expect("VmHWM")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every record of an audit file, parsed (a missing file has none).
pub fn audit_records(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad audit line ({e}): {l}"))).collect()
}

/// Runs `cordon --socket SOCKET ARGS...` to completion.
pub fn cordon_at(socket: &Path, args: &[&str]) -> Output {
    let out = Command::new(bin("cordon"))
        .arg("--socket")
        .arg(socket)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run cordon");
    Output {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A finished command.
#[derive(Debug, Clone)]
pub struct Output {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl From<std::process::Output> for Output {
    fn from(out: std::process::Output) -> Output {
        Output {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Output {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }

    #[track_caller]
    pub fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(self.code, Some(code), "unexpected exit code: {self:#?}");
        self
    }
}

/// A numeric field (in kB) of `/proc/PID/status`.
pub fn proc_status_field(pid: i32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':')?.split_whitespace().next()?.parse().ok())
}

/// Whether `pid` is gone (no such process, or a zombie nobody reaped yet).
pub fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the parenthesized command name.
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Polls `cond` until it holds or `limit` passes.
pub fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Whether the tests run as root (some tests need it and skip otherwise).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The unprivileged user (`cordon-t-agent`, in the group `cordon-t-sock`) that attacks and
/// authorization tests run as. Creating it needs root; tests that use it skip when not root.
pub mod agent {
    use std::path::Path;
    use std::process::{Command, Stdio};
    use std::sync::Once;
    use std::time::Duration;

    use super::{Output, bin};

    /// The agent user's name.
    pub const AGENT: &str = "cordon-t-agent";
    /// A group the agent user is a member of (cordond's `--socket-group` in the tests).
    pub const SOCKET_GROUP: &str = "cordon-t-sock";

    /// Creates the user and the group once per test process (idempotent across runs). Several
    /// tests ask at once and `useradd` refuses while another holds the user database lock, so
    /// this retries until the user exists in the group.
    pub fn ensure() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            for _ in 0..50 {
                let _ = Command::new("groupadd").args(["-f", SOCKET_GROUP]).output();
                let _ = Command::new("useradd")
                    .args(["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", AGENT])
                    .output();
                let _ = Command::new("usermod").args(["-aG", SOCKET_GROUP, AGENT]).output();
                let ok = Command::new("id").arg("-nG").arg(AGENT).output().unwrap();
                if ok.status.success()
                    && String::from_utf8_lossy(&ok.stdout).split_whitespace().any(|g| g == SOCKET_GROUP)
                {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            panic!("could not create {AGENT} in {SOCKET_GROUP}");
        });
    }

    /// `id FLAG NAME` as a number (`-u` uid, `-g` primary gid).
    pub fn id(flag: &str, name: &str) -> u32 {
        let out = Command::new("id").arg(flag).arg(name).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    }

    /// `cordon` as the agent user, with its groups (the socket group among them).
    pub fn command() -> Command {
        let mut c = Command::new("setpriv");
        c.args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--"]).arg(bin("cordon"));
        c
    }

    /// Runs `cordon --socket SOCKET ARGS...` as the agent user.
    pub fn cordon(socket: &Path, args: &[&str]) -> Output {
        command().arg("--socket").arg(socket).args(args).stdin(Stdio::null()).output().unwrap().into()
    }
}

/// Silent TCP connections held by another local account: the attacker of the per-principal
/// budget tests (any local account, no token, no privilege).
pub mod silent {
    use std::io::{BufRead as _, BufReader};
    use std::process::{Child, Command, Stdio};

    const SCRIPT: &str = r#"
import socket, sys
port, per = int(sys.argv[1]), int(sys.argv[2])
held = []
for a in sys.argv[4:]:
    for _ in range(per):
        s = socket.socket()
        s.bind((a, 0))
        try:
            s.connect(("127.0.0.1", port))
            held.append(s)
        except OSError:
            pass
# Wait until the server answered (refused) `refused` of them: then it has seen them all.
import select, time
want, seen, deadline = int(sys.argv[3]), set(), time.monotonic() + 60
while len(seen) < want and time.monotonic() < deadline:
    ready, _, _ = select.select([s for s in held if s not in seen], [], [], 1)
    seen.update(ready)
print("ready", len(held), len(seen), flush=True)
sys.stdin.read()
"#;

    /// Connections that never say a word, open until dropped.
    #[derive(Debug)]
    pub struct Silent {
        child: Child,
        /// How many connected.
        pub opened: usize,
        /// How many the server answered or closed while the rest were held.
        pub refused: usize,
    }

    impl Drop for Silent {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// `per` connections to 127.0.0.1:`port` from each of `sources` (127.0.0.0/8 addresses),
    /// opened by `user` (`setpriv`; `None`: this process's uid), sending nothing. Returns once
    /// all connected and the server answered (or closed) `refused` of them, so that it has seen
    /// them all (or after a minute, whatever it saw).
    pub fn hold(user: Option<&str>, port: u16, per: usize, sources: &[String], refused: usize) -> Silent {
        let mut c = match user {
            Some(u) => {
                let mut c = Command::new("setpriv");
                c.args(["--reuid", u, "--regid", u, "--init-groups", "--", "/usr/bin/python3"]);
                c
            }
            None => Command::new("/usr/bin/python3"),
        };
        let mut child = c
            .arg("-c")
            .arg(SCRIPT)
            .arg(port.to_string())
            .arg(per.to_string())
            .arg(refused.to_string())
            .args(sources)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("a piped stdout");
        BufReader::new(stdout).read_line(&mut line).expect("the holder answers");
        let mut counts = line.split_whitespace().skip(1).map(|n| n.parse().unwrap_or(0));
        let (opened, refused) = (counts.next().unwrap_or(0), counts.next().unwrap_or(0));
        Silent { child, opened, refused }
    }
}

/// A TOML basic string (JSON string escapes are valid TOML).
pub fn toml_str(s: impl AsRef<Path>) -> String {
    serde_json::to_string(s.as_ref().to_str().expect("a UTF-8 path")).expect("a string serializes")
}

/// One `[tools.NAME]` table running `ATTACK {{attack}} {{a}} {{b}} {{c}}` (the attack binary, the
/// attack's name and up to three string arguments; an omitted one drops out of argv), with
/// `extra` keys added to the tool.
pub fn attack_tool(name: &str, attack: &Path, extra: &str) -> String {
    format!(
        r#"
[tools.{name}]
description = "sandbox attack"
reason = "sandbox tests"
command = [{attack}, "{{{{attack}}}}", "{{{{a}}}}", "{{{{b}}}}", "{{{{c}}}}"]
# The attack binary takes any argument on purpose (its first names the attack).
accept_warnings = ["leading-dash"]
{extra}

[tools.{name}.params.attack]
type = "string"
pattern = "[a-z0-9-]+"
required = true

[tools.{name}.params.a]
type = "string"
pattern = "[^\\x00]*"

[tools.{name}.params.b]
type = "string"
pattern = "[^\\x00]*"

[tools.{name}.params.c]
type = "string"
pattern = "[^\\x00]*"
"#,
        attack = toml_str(attack),
    )
}

/// Skips the calling test ([`Skip::NotRoot`], with what root is needed for) unless it runs as
/// root; as root, makes sure the agent user exists. `require_root!()` or `require_root!("what root
/// is needed for")`. The one definition: suites do not define their own.
#[macro_export]
macro_rules! require_root {
    () => {
        $crate::require_root!("to create a test user")
    };
    ($why:expr) => {
        if !$crate::is_root() {
            $crate::skip!($crate::Skip::NotRoot, "{}", $why);
            return;
        }
        $crate::agent::ensure();
    };
}

/// Waits until exactly one human approval is pending with a client waiting on it, and returns it
/// (as `cordon pending --json` lists it).
pub fn wait_pending(socket: &Path) -> serde_json::Value {
    let mut found = serde_json::Value::Null;
    let ok = eventually(Duration::from_secs(10), || {
        let p = cordon_at(socket, &["pending", "--json"]).json();
        let waiting = p["pending"].as_array().is_some_and(|l| l.len() == 1 && l[0]["waiting"] == true);
        if waiting {
            found = p["pending"][0].clone();
        }
        waiting
    });
    assert!(ok, "no pending approval appeared");
    found
}

/// Policy fixtures shared by the suites: `fixture!(NAME)` expands to a TOML string literal, so
/// that a suite composes its policy at compile time with `concat!`, e.g.
/// `const TOOLS: &str = concat!(fixture!(header "20s"), fixture!(echo), fixture!(missing));`.
/// A tool that only one suite needs stays in that suite.
#[macro_export]
macro_rules! fixture {
    // `version = 1` and defaults: the timeout given, and /tmp writable (test tools record pids
    // and files in their temporary directory).
    (header $timeout:literal) => {
        concat!("version = 1\n\n[defaults]\ntimeout = \"", $timeout, "\"\nwrite = [\"/tmp\"]\n")
    };
    // Prints its one argument (any string without NUL) between brackets.
    (echo) => {
        r#"
[tools.echo]
description = "print one argument between brackets"
reason = "tests"
command = ["/usr/bin/printf", "[%s]", "{{text}}"]

[tools.echo.params.text]
type = "string"
pattern = "[^\\x00]*"
required = true
"#
    };
    // Records its pids in `pidfile`, then sleeps in the foreground and the background past its
    // 1 s timeout.
    (sleeper) => {
        r#"
[tools.sleeper]
description = "record its pids, then sleep in the foreground and the background"
reason = "tests"
command = ["/bin/sh", "-c", "echo $$ > \"$1\"; /bin/sleep 1000 & echo $! >> \"$1\"; wait", "sh", "{{pidfile}}"]
timeout = "1s"

[tools.sleeper.params.pidfile]
type = "path"
required = true
"#
    };
    // A program that is not installed: unavailable.
    (missing) => {
        r#"
[tools.missing]
description = "a program that is not installed"
reason = "tests"
command = ["/nonexistent/cordon-test-program"]
"#
    };
    // A disabled tool.
    (off) => {
        r#"
[tools.off]
description = "a disabled tool"
reason = "tests"
command = ["/bin/true"]
disabled = true
"#
    };
    // Appends `text` to `file`, after an agent confirmation.
    (guarded) => {
        r#"
[tools.guarded]
description = "append a line to a file, after an agent confirmation"
reason = "tests"
command = ["/bin/sh", "-c", "echo \"$2\" >> \"$1\"; echo done", "sh", "{{file}}", "{{text}}"]
confirm = "agent"

[tools.guarded.params.file]
type = "path"
required = true

[tools.guarded.params.text]
type = "string"
pattern = "[a-z ]*"
required = true
"#
    };
    // Prints a lowercase word between brackets, after a human approval (danger high).
    (approved) => {
        r#"
[tools.approved]
description = "print a word, after a human approval"
reason = "tests"
command = ["/usr/bin/printf", "[%s]", "{{text}}"]
confirm = "human"
danger = "high"

[tools.approved.params.text]
type = "string"
pattern = "[a-z]*"
required = true
"#
    };
}

/// `cordon mcp` driven line by line (JSON-RPC over its stdin and stdout), for tests that look
/// at the exact messages.
pub mod mcp_lines {
    use std::io::{BufRead as _, BufReader, Write as _};
    use std::path::Path;
    use std::process::{Child, ChildStdin, Command, Stdio};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use serde_json::{Value, json};

    use super::bin;

    #[derive(Debug)]
    pub struct Session {
        child: Child,
        stdin: ChildStdin,
        lines: mpsc::Receiver<Value>,
        next: u64,
    }

    impl Session {
        /// `cordon --socket SOCKET mcp`, initialized (protocol 2025-11-25).
        pub fn start(socket: &Path) -> Session {
            Session::start_args(&["--socket".into(), socket.as_os_str().to_owned()])
        }

        /// `cordon ARGS... mcp` (e.g. `--remote URL --cert ..`), initialized.
        pub fn start_args(args: &[std::ffi::OsString]) -> Session {
            let mut child = Command::new(bin("cordon"))
                .args(args)
                .arg("mcp")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let stdout = child.stdout.take().unwrap();
            let stdin = child.stdin.take().unwrap();
            let (tx, lines) = mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { return };
                    let v: Value = serde_json::from_str(&line).expect("stdout is JSON-RPC");
                    if tx.send(v).is_err() {
                        return;
                    }
                }
            });
            let mut s = Session { child, stdin, lines, next: 0 };
            s.request(
                "initialize",
                json!({ "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } }),
            );
            s.notify("notifications/initialized");
            s
        }

        pub fn notify(&mut self, method: &str) {
            let line = json!({ "jsonrpc": "2.0", "method": method }).to_string();
            writeln!(self.stdin, "{line}").unwrap();
        }

        /// Sends a request and returns its `result` (notifications in between are skipped).
        pub fn request(&mut self, method: &str, params: Value) -> Value {
            self.next += 1;
            let id = self.next;
            let line = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string();
            writeln!(self.stdin, "{line}").unwrap();
            self.stdin.flush().unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let m = self.lines.recv_timeout(left).expect("an answer in time");
                if m.get("method").is_none() && m["id"] == json!(id) {
                    return m["result"].clone();
                }
            }
        }

        /// Writes `line` as it is and returns the next message that is not a notification.
        pub fn raw(&mut self, line: &str) -> Value {
            writeln!(self.stdin, "{line}").unwrap();
            self.stdin.flush().unwrap();
            loop {
                let m = self.lines.recv_timeout(Duration::from_secs(30)).expect("an answer in time");
                if m.get("method").is_none() {
                    return m;
                }
            }
        }

        /// `tools/call` of `tool` with `arguments`.
        pub fn call(&mut self, tool: &str, arguments: Value) -> Value {
            self.request("tools/call", json!({ "name": tool, "arguments": arguments }))
        }

        /// The `outputSchema` `tools/list` advertises for `tool`.
        pub fn output_schema(&mut self, tool: &str) -> Option<Value> {
            let list = self.request("tools/list", json!({}));
            let t = list["tools"].as_array().unwrap().iter().find(|t| t["name"] == tool).cloned().unwrap();
            t.get("outputSchema").cloned()
        }
    }

    impl Drop for Session {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// An HTTP/1.1 server on the host's 127.0.0.1 (for the egress proxy's tests) that answers every
/// request with `hello from upstream` and closes; its port.
pub fn hello_upstream() -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                }
                let body = "hello from upstream\n";
                let _ =
                    write!(s, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            });
        }
    });
    port
}

/// Why a test (or a part of one) cannot run here: a fixed list, so that a run says what it did
/// not check and CI can tell a missing setup from a fact of the host. A skip for a reason that CI
/// provides ([`Skip::ci_provides`]: root, mounts, the tools, corpus and registries `tests/run`
/// installs) fails under CI (`CORDON_CI` set, as `tests/run` sets it); a skip for a fact of the
/// host outside CI's control (the architecture, the kernel's landlock ABI or audit switch, cgroup
/// delegation, user namespaces, the file system) passes there too, with its reason printed.
/// Add a variant only for such a fact, with a doc comment saying when it is legitimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// The test needs root (the agent user, chown, mounts, namespaces, a root cordond). Legitimate
    /// on a developer's unprivileged run; CI runs as root.
    NotRoot,
    /// Mounting (a tmpfs, a bind mount) is refused here even as root. Legitimate in a restricted
    /// container; CI's machine allows it.
    CannotMount,
    /// A program the test drives (named) is not installed, or cannot be run by the agent user.
    /// Legitimate on a developer's machine; `tests/run` installs every one.
    MissingTool(&'static str),
    /// The corpus of real projects (`.ci/corpus-fetch`, docs/corpus.md) is not fetched here.
    /// Legitimate on a developer's machine; `tests/run` fetches it.
    NoCorpus,
    /// A package registry the test installs from is unreachable or turned off
    /// (`CORDON_TEST_NO_REGISTRY`). Legitimate offline; CI reaches the registries.
    NoRegistry,
    /// The real MCP servers of the MCP-servers proof are not installed under
    /// `/opt/cordon-mcp-servers`. Legitimate on a developer's machine; `tests/run` installs them.
    NoMcpServers,
    /// The test is about another architecture's output (named). A host fact.
    Arch(&'static str),
    /// The kernel's landlock ABI is below the one named, which the checked behaviour needs. A host fact.
    LandlockAbi(u32),
    /// The kernel does not let cordond read its audit log, or kernel audit is switched off
    /// (`auditctl -e 1` is host-wide, no test flips it). A host fact.
    NoKernelAudit,
    /// No cgroup v2 tree cordond may manage here (no delegation, no memory controller). A host fact
    /// (a container's or the init system's setup, outside `tests/run`).
    NoCgroupDelegation,
    /// The kernel refuses unprivileged user namespaces (a sysctl or an LSM). A host fact.
    NoUserNamespaces,
    /// The file system under the temporary directory has no user extended attributes. A host fact.
    NoUserXattrs,
    /// A numeric id the test needs to be free has an account on this host (the id named). A host fact.
    IdInUse(u32),
}

impl Skip {
    /// Whether CI provides what this reason lacks, so that a skip for it is a failure there.
    pub fn ci_provides(self) -> bool {
        match self {
            Skip::NotRoot
            | Skip::CannotMount
            | Skip::MissingTool(_)
            | Skip::NoCorpus
            | Skip::NoRegistry
            | Skip::NoMcpServers => true,
            Skip::Arch(_)
            | Skip::LandlockAbi(_)
            | Skip::NoKernelAudit
            | Skip::NoCgroupDelegation
            | Skip::NoUserNamespaces
            | Skip::NoUserXattrs
            | Skip::IdInUse(_) => false,
        }
    }
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::NotRoot => f.write_str("not root"),
            Skip::CannotMount => f.write_str("cannot mount"),
            Skip::MissingTool(t) => write!(f, "{t} missing"),
            Skip::NoCorpus => f.write_str("no corpus"),
            Skip::NoRegistry => f.write_str("no package registry"),
            Skip::NoMcpServers => f.write_str("no MCP servers installed"),
            Skip::Arch(a) => write!(f, "not {a}"),
            Skip::LandlockAbi(n) => write!(f, "landlock ABI below {n}"),
            Skip::NoKernelAudit => f.write_str("no kernel audit"),
            Skip::NoCgroupDelegation => f.write_str("no cgroup delegation"),
            Skip::NoUserNamespaces => f.write_str("no user namespaces"),
            Skip::NoUserXattrs => f.write_str("no user xattrs"),
            Skip::IdInUse(id) => write!(f, "id {id} in use"),
        }
    }
}

/// Says that the calling test (or a part of it) does not run here, for a [`Skip`] reason and with
/// what it would have checked: `skip!(Skip::NotRoot, "the agent user")`. The caller then returns
/// (or leaves the part out). The line goes to the terminal, past the test harness's capture; see
/// [`skipped`] for CI.
#[macro_export]
macro_rules! skip {
    ($reason:expr) => {
        $crate::skipped($reason, "")
    };
    ($reason:expr, $($arg:tt)*) => {
        $crate::skipped($reason, &format!($($arg)*))
    };
}

/// The body of [`skip!`]. Prints `SKIPPED <test> [<reason>] <detail>` straight to stderr (so a
/// plain `cargo test` shows it, numbered within the test binary), appends the same line to the
/// file `CORDON_SKIP_LOG` names if set (`tests/run` counts them by reason), and under CI
/// (`CORDON_CI`) panics for a reason CI provides.
pub fn skipped(reason: Skip, detail: &str) {
    use std::io::Write as _;
    use std::sync::atomic::{AtomicUsize, Ordering};
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    let line = format!("SKIPPED {test} [{reason}] {detail}");
    if let Some(log) = std::env::var_os("CORDON_SKIP_LOG")
        && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(log)
    {
        let _ = writeln!(f, "{line}");
    }
    assert!(
        !(reason.ci_provides() && std::env::var_os("CORDON_CI").is_some()),
        "{line}\n(CORDON_CI is set: CI provides this ({reason}), so the test must run; tests/run installs what it needs)"
    );
    let n = COUNT.fetch_add(1, Ordering::Relaxed) + 1;
    // On a line of its own: libtest has printed `test NAME ... ` and waits to end it with `ok`.
    let _ = writeln!(std::io::stderr(), "\n{line} (skip {n} in this test binary)");
}
