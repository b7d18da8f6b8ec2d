//! The daemon's connections and socket, against the real `cordond`: silent peers are cut, live
//! streams are not, one uid cannot hold every connection, and the socket is locked down whatever
//! the umask.

use std::io::Read as _;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use cordon_tests::{Daemon, bin, cordon_at, eventually, is_root};
use nix::sys::signal::Signal;
use serde_json::json;

const TOOLS: &str = r#"
version = 1

[tools.quiet]
description = "print nothing for a while, then one line"
reason = "tests"
command = ["/bin/sh", "-c", "/bin/sleep \"$1\"; echo done", "sh", "{{seconds}}"]
timeout = "2m"

[tools.quiet.params.seconds]
type = "integer"
min = 1
max = 100
required = true
"#;

/// The daemon's per-uid connection limit (`server::conn::MAX_CONNECTIONS_PER_UID`).
const MAX_CONNECTIONS_PER_UID: usize = 256;

/// Reads until the daemon closes `stream` (true) or nothing happens for a long while (false).
/// The daemon's HTTP/2 SETTINGS frame, sent first, is skipped.
fn closed_by_daemon(stream: &mut UnixStream) -> bool {
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return false;
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn a_peer_that_never_speaks_http2_is_closed_after_the_handshake_deadline() {
    let d = Daemon::start(&[("t.toml", TOOLS)]);
    let mut silent = UnixStream::connect(&d.socket).unwrap();
    // Everyone else is served meanwhile.
    d.cordon(&["status"]).assert_code(0);
    assert!(closed_by_daemon(&mut silent), "a silent connection stayed open:\n{}", d.log_text());
    assert!(
        eventually(Duration::from_secs(5), || d.log_text().contains("closing connection: no HTTP/2 handshake")),
        "{}",
        d.log_text()
    );
    d.cordon(&["status"]).assert_code(0);
}

#[test]
fn a_silent_peer_does_not_hold_up_shutdown() {
    let mut d = Daemon::start_with(&[("t.toml", TOOLS)], &["--shutdown-grace", "1s"]);
    let _silent = UnixStream::connect(&d.socket).unwrap();
    // Connections are accepted in order: once this is answered, the silent one is being served.
    d.cordon(&["status"]).assert_code(0);
    d.signal(Signal::SIGTERM);
    let status = d.wait_exit(Duration::from_secs(60)).expect("a silent connection kept cordond from stopping");
    assert!(status.success(), "{status}: {}", d.log_text());
}

#[test]
fn a_quiet_invocation_runs_to_completion() {
    let d = Daemon::start(&[("t.toml", TOOLS)]);
    let (out, j) = d.run_json("quiet", &json!({ "seconds": 5 }));
    out.assert_code(0);
    assert_eq!(j["stdout"], "done\n", "{j}");
    assert_eq!(j["timed_out"], false);
    assert!(!d.log_text().contains("closing connection"), "{}", d.log_text());
}

/// Hours-long streams (`cordon mcp` watching the registry, a client waiting on a long tool) rely
/// on the keepalive PINGs; this waits past the daemon's 60 s silence limit to show them working.
#[test]
#[ignore = "slow (80 s): waits past the daemon's idle limit; run with --ignored"]
fn streams_and_idle_connections_outlive_the_silence_limit() {
    use cordon_proto::v1;
    use cordon_proto::v1::cordon_client::CordonClient;

    let d = Daemon::start(&[("t.toml", TOOLS)]);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        // A stream that sees nothing until the reload below.
        let mut watcher = CordonClient::new(cordon_proto::connect(&d.socket).await.unwrap());
        let mut watch = watcher.watch_registry(v1::WatchRegistryRequest::default()).await.unwrap().into_inner();
        let first = watch.message().await.unwrap().expect("the current generation");
        // An invocation that prints nothing for 70 s.
        let mut invoker = CordonClient::new(cordon_proto::connect(&d.socket).await.unwrap());
        let request = v1::InvokeRequest {
            tool: "quiet".into(),
            arguments_json: json!({ "seconds": 70 }).to_string(),
            ..Default::default()
        };
        let invocation = tokio::spawn(async move {
            let mut events = invoker.invoke(request).await.unwrap().into_inner();
            let mut finished = None;
            while let Some(event) = events.message().await.unwrap() {
                if let Some(v1::invoke_event::Event::Finished(f)) = event.event {
                    finished = Some(f);
                }
            }
            finished.expect("a finished event")
        });
        // A connection with no stream at all.
        let mut idle = CordonClient::new(cordon_proto::connect(&d.socket).await.unwrap());
        idle.status(v1::StatusRequest::default()).await.unwrap();

        tokio::time::sleep(Duration::from_secs(80)).await;

        let finished = invocation.await.unwrap();
        assert_eq!(finished.exit_code, Some(0), "{finished:?}");
        assert_eq!(finished.stdout, b"done\n");
        idle.status(v1::StatusRequest::default()).await.unwrap();
        // The watch stream's connection is still the same one (a stream cannot silently reconnect).
        d.write_policy("t.toml", &format!("{TOOLS}\n# changed\n"));
        let socket = d.socket.clone();
        tokio::task::spawn_blocking(move || cordon_at(&socket, &["reload"]).assert_code(0).clone()).await.unwrap();
        let next = watch.message().await.unwrap().expect("a new generation");
        assert!(next.generation > first.generation, "{first:?} -> {next:?}");
    });
    // Without PINGs the connections without a stream would have hit the silence limit.
    assert!(!d.log_text().contains("closing connection"), "{}", d.log_text());
}

#[test]
fn one_uid_cannot_hold_every_connection() {
    let d = Daemon::start(&[("t.toml", TOOLS)]);
    let mut held = Vec::new();
    for _ in 0..MAX_CONNECTIONS_PER_UID {
        let mut stream = UnixStream::connect(&d.socket).unwrap();
        // Accepted and served: the daemon speaks first (its SETTINGS frame).
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let n = stream.read(&mut [0u8; 64]).unwrap();
        assert!(n > 0, "connection {} was not served:\n{}", held.len(), d.log_text());
        held.push(stream);
    }
    let mut over = UnixStream::connect(&d.socket).unwrap();
    over.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let refused = match over.read(&mut [0u8; 64]) {
        Ok(n) => n == 0,
        Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
    };
    assert!(refused, "a connection over the limit was served");
    assert!(d.log_text().contains("connection limit reached for this uid"), "{}", d.log_text());
    // One closes: the uid may connect again.
    held.truncate(MAX_CONNECTIONS_PER_UID - 1);
    assert!(eventually(Duration::from_secs(10), || d.cordon(&["status"]).code == Some(0)), "{}", d.log_text());
}

/// `--audit PATH` when this cordond has the flag, so that no test writes the default audit log.
fn audit_args(dir: &Path) -> Vec<std::ffi::OsString> {
    static HAS_AUDIT: OnceLock<bool> = OnceLock::new();
    let has = *HAS_AUDIT.get_or_init(|| {
        let out = Command::new(bin("cordond")).arg("--help").output().unwrap();
        String::from_utf8_lossy(&out.stdout).contains("--audit")
    });
    if has { vec!["--audit".into(), dir.join("audit.jsonl").into_os_string()] } else { Vec::new() }
}

/// `cordond` started under `umask 000`, stderr in `dir/cordond.log`; killed on drop.
struct Umask000 {
    child: Child,
    log: PathBuf,
}

impl Umask000 {
    fn start(dir: &Path, socket: &Path, extra: &[&str]) -> Umask000 {
        let policies = dir.join("policies");
        std::fs::create_dir_all(&policies).unwrap();
        std::fs::write(policies.join("t.toml"), TOOLS).unwrap();
        let log = dir.join("cordond.log");
        let child = Command::new("/bin/sh")
            .args(["-c", "umask 000; exec \"$@\"", "sh"])
            .arg(bin("cordond"))
            .arg("--policies")
            .arg(&policies)
            .arg("--socket")
            .arg(socket)
            .args(audit_args(dir))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Umask000 { child, log }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the daemon answers on `socket`.
    fn wait_ready(&mut self, socket: &Path) {
        let ready = eventually(Duration::from_secs(20), || {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("cordond exited with {status}:\n{}", self.log_text());
            }
            cordon_at(socket, &["status"]).code == Some(0)
        });
        assert!(ready, "cordond did not answer on {}:\n{}", socket.display(), self.log_text());
    }

    /// Waits for the daemon to exit; its status and stderr.
    fn wait_exit(&mut self) -> (std::process::ExitStatus, String) {
        let mut status = None;
        let exited = eventually(Duration::from_secs(20), || {
            status = self.child.try_wait().unwrap();
            status.is_some()
        });
        assert!(exited, "cordond kept running:\n{}", self.log_text());
        (status.unwrap(), self.log_text())
    }
}

impl Drop for Umask000 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The gid of `group`, if it exists.
fn group_id(group: &str) -> Option<u32> {
    let out = Command::new("getent").args(["group", group]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).split(':').nth(2).and_then(|gid| gid.trim().parse().ok())
}

/// The socket and the directory the daemon created for it, checked under a hostile umask.
#[track_caller]
fn assert_locked_down(socket: &Path, mode: u32, gid: u32) {
    let euid = nix::unistd::geteuid().as_raw();
    let meta = std::fs::symlink_metadata(socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.mode() & 0o7777, mode, "socket mode {:o}", meta.mode() & 0o7777);
    assert_eq!(meta.uid(), euid);
    assert_eq!(meta.gid(), gid);
    let dir = std::fs::symlink_metadata(socket.parent().unwrap()).unwrap();
    assert!(dir.is_dir());
    assert_eq!(dir.uid(), euid);
    assert_eq!(dir.mode() & 0o022, 0, "socket directory mode {:o} is writable by others", dir.mode() & 0o7777);
    assert_eq!(dir.mode() & 0o7777, if euid == 0 { 0o755 } else { 0o700 });
}

#[test]
fn the_socket_is_locked_down_under_umask_000() {
    let dir = tempfile::tempdir().unwrap();
    let egid = nix::unistd::getegid().as_raw();

    // Without --socket-group: a root daemon opens the socket to the `cordon` group if it exists;
    // otherwise (and always for a user daemon) only the owner may connect.
    let socket = dir.path().join("default").join("run").join("cordon.sock");
    let mut d = Umask000::start(&dir.path().join("default"), &socket, &[]);
    d.wait_ready(&socket);
    let root = is_root();
    if !root {
        cordon_tests::skip!(
            cordon_tests::Skip::NotRoot,
            "a root daemon's socket group (the default, and one made with groupadd)"
        );
    }
    match group_id("cordon").filter(|_| root) {
        Some(gid) => assert_locked_down(&socket, 0o660, gid),
        None => assert_locked_down(&socket, 0o600, egid),
    }
    drop(d);

    // `--socket-group ""`: no group, whatever the host has (only the owner may connect).
    let socket = dir.path().join("none").join("run").join("cordon.sock");
    let mut d = Umask000::start(&dir.path().join("none"), &socket, &["--socket-group", ""]);
    d.wait_ready(&socket);
    assert_locked_down(&socket, 0o600, egid);
    drop(d);

    if root {
        const GROUP: &str = "cordon-t-wire";
        let _ = Command::new("groupadd").args(["-f", GROUP]).output();
        let gid = group_id(GROUP).expect("groupadd");
        let socket = dir.path().join("group").join("run").join("cordon.sock");
        let mut d = Umask000::start(&dir.path().join("group"), &socket, &["--socket-group", GROUP]);
        d.wait_ready(&socket);
        assert_locked_down(&socket, 0o660, gid);
    }
}

/// Complements e2e's `the_socket_path_is_never_a_symlink_nor_someone_elses_file`: the refusal
/// names the path, nothing is created or changed at the link's target (existing or not), and a
/// symlinked socket directory is refused as well.
#[test]
fn a_symlink_at_the_socket_path_stops_startup_and_its_target_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();

    let target = dir.path().join("precious");
    std::fs::write(&target, "precious").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
    let link = run.join("cordon.sock");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let (status, stderr) = Umask000::start(&dir.path().join("a"), &link, &[]).wait_exit();
    assert!(!status.success(), "{status}");
    assert!(stderr.contains(&format!("socket path {} is a symlink", link.display())), "{stderr}");
    let meta = std::fs::symlink_metadata(&target).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.mode() & 0o7777, 0o644);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
    assert_eq!(std::fs::read_link(&link).unwrap(), target);

    // A dangling link: nothing appears where it points.
    let nowhere = dir.path().join("nowhere.sock");
    let dangling = run.join("dangling.sock");
    std::os::unix::fs::symlink(&nowhere, &dangling).unwrap();
    let (status, stderr) = Umask000::start(&dir.path().join("b"), &dangling, &[]).wait_exit();
    assert!(!status.success(), "{status}");
    assert!(stderr.contains(&format!("socket path {} is a symlink", dangling.display())), "{stderr}");
    assert!(std::fs::symlink_metadata(&nowhere).is_err(), "cordond created the link's target");

    // A symlinked directory.
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
    let linked = dir.path().join("linked");
    std::os::unix::fs::symlink(&real, &linked).unwrap();
    let (status, stderr) = Umask000::start(&dir.path().join("c"), &linked.join("cordon.sock"), &[]).wait_exit();
    assert!(!status.success(), "{status}");
    assert!(stderr.contains(&format!("socket directory {} is a symlink", linked.display())), "{stderr}");
    assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0, "cordond wrote into the linked directory");
}

/// A caller-chosen string echoed in an error must not make the answer undeliverable: a 30 KB
/// tool name once came back inside `grpc-message`, past what clients accept in headers, and the
/// whole connection (with every call on it) was dropped. The message is clipped; the call is
/// audited like any refusal, with a bounded record (`cordon run` goes straight to `Invoke`).
#[test]
fn a_huge_unknown_tool_name_gets_a_clean_bounded_refusal() {
    let d = Daemon::start(&[("t.toml", "version = 1\n")]);
    let name = "x".repeat(30_000);
    let out = d.cordon(&["run", &name, "--json"]);
    out.assert_code(66);
    let e = out.json();
    assert_eq!(e["error"]["code"], "UNKNOWN_TOOL", "{out:?}");
    assert!(e["error"]["message"].as_str().unwrap().len() < 4096, "{out:?}");
    let mut found = None;
    assert!(cordon_tests::eventually(Duration::from_secs(10), || {
        found = d
            .audit_records()
            .into_iter()
            .find(|r| r["decision"] == "invalid" && r["code"] == "UNKNOWN_TOOL" && r["tool"].as_str().is_some());
        found.is_some()
    }));
    let line = serde_json::to_string(&found.unwrap()).unwrap();
    assert!(line.len() < 16 * 1024, "audit record of {} bytes", line.len());
}
