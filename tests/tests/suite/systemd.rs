//! cordond under a service manager, without a running systemd: socket activation through
//! systemd's own `systemd-socket-activate` (cordond serves the socket it is passed in
//! `LISTEN_FDS` and leaves it in place at exit), and the `sd_notify` sequence read from a
//! `NOTIFY_SOCKET` the test owns (`READY=1`; `RELOADING=1` with `MONOTONIC_USEC` then `READY=1`
//! on SIGHUP; `STOPPING=1` on SIGTERM).

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use cordon_tests::{bin, cordon_at, eventually, fixture};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const SOCKET_ACTIVATE: &str = "/usr/bin/systemd-socket-activate";

const TOOLS: &str = concat!(fixture!(header "20s"), fixture!(echo));

/// The next notification, as its lines.
fn next(notify: &UnixDatagram) -> Vec<String> {
    let mut buf = [0u8; 4096];
    let n = notify.recv(&mut buf).expect("a notification from cordond within 20 s");
    String::from_utf8_lossy(&buf[..n]).lines().map(str::to_string).collect()
}

#[test]
fn an_activated_cordond_serves_the_passed_socket_and_notifies_ready_reloading_stopping() {
    if !Path::new(SOCKET_ACTIVATE).exists() {
        cordon_tests::skip!(
            cordon_tests::Skip::MissingTool(SOCKET_ACTIVATE),
            "{SOCKET_ACTIVATE} is not installed (package systemd)"
        );
        return;
    }
    let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("tools.toml"), TOOLS).unwrap();
    std::fs::create_dir(dir.path().join("run")).unwrap();
    let socket = dir.path().join("run").join("cordon.sock");
    let unused = dir.path().join("run").join("bound-by-hand.sock");
    let audit = dir.path().join("audit.jsonl");
    let notify_path = dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let log = std::fs::File::create(dir.path().join("cordond.log")).unwrap();
    let mut child = Command::new(SOCKET_ACTIVATE)
        .arg("-l")
        .arg(&socket)
        .arg(format!("--setenv=NOTIFY_SOCKET={}", notify_path.display()))
        .arg("--")
        .arg(bin("cordond"))
        .arg("--policies")
        .arg(&policies)
        .arg("--audit")
        .arg(&audit)
        .arg("--socket")
        .arg(&unused)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || socket.exists()), "systemd-socket-activate did not listen");

    // The first connection starts cordond on the passed socket; it answers on it.
    let out = cordon_at(&socket, &["run", "echo", "--arg", "text=activated"]);
    out.assert_code(0);
    assert_eq!(out.stdout, "[activated]");
    let ready = next(&notify);
    assert!(ready.contains(&"READY=1".to_string()), "{ready:?}");
    assert!(!unused.exists(), "an activated cordond bound --socket too");
    // cordond runs as the process systemd-socket-activate became (it execs, keeping its pid).
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());

    kill(pid, Signal::SIGHUP).unwrap();
    let reloading = next(&notify);
    assert!(reloading.contains(&"RELOADING=1".to_string()), "{reloading:?}");
    let usec = reloading.iter().find_map(|l| l.strip_prefix("MONOTONIC_USEC=")).expect("MONOTONIC_USEC");
    assert!(usec.parse::<u64>().unwrap() > 0, "{reloading:?}");
    let again = next(&notify);
    assert!(again.contains(&"READY=1".to_string()), "after the reload: {again:?}");
    cordon_at(&socket, &["run", "echo", "--arg", "text=reloaded"]).assert_code(0);

    kill(pid, Signal::SIGTERM).unwrap();
    let stopping = next(&notify);
    assert!(stopping.contains(&"STOPPING=1".to_string()), "{stopping:?}");
    let status = child.wait().unwrap();
    assert!(status.success(), "cordond exited with {status}");
    // The socket is systemd's: cordond leaves it in place.
    assert!(socket.exists(), "an activated cordond removed the socket it was passed");
    let records = std::fs::read_to_string(&audit).unwrap();
    let started = records.lines().find(|l| l.contains("\"daemon_started\"")).expect("daemon_started");
    assert!(started.contains(&format!("\"socket\":\"{}\"", socket.display())), "{started}");
}

/// The shipped units (daemon/systemd) pass `systemd-analyze verify` with cordond where
/// `ExecStart=` names it: no unknown directive, no bad value, no missing executable.
#[test]
fn the_units_pass_systemd_analyze_verify() {
    const ANALYZE: &str = "/usr/bin/systemd-analyze";
    if !Path::new(ANALYZE).exists() {
        cordon_tests::skip!(cordon_tests::Skip::MissingTool(ANALYZE), "{ANALYZE} is not installed (package systemd)");
        return;
    }
    let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("../daemon/systemd");
    let dir = tempfile::tempdir().unwrap();
    for name in ["cordond.service", "cordond.socket"] {
        let text = std::fs::read_to_string(units.join(name)).unwrap();
        let text = text.replace("ExecStart=/usr/bin/cordond ", &format!("ExecStart={} ", bin("cordond").display()));
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let service = std::fs::read_to_string(dir.path().join("cordond.service")).unwrap();
    assert!(service.contains(&format!("ExecStart={} --policies", bin("cordond").display())), "{service}");
    let out = Command::new(ANALYZE)
        .arg("verify")
        .arg(dir.path().join("cordond.socket"))
        .arg(dir.path().join("cordond.service"))
        .env("SYSTEMD_LOG_LEVEL", "warning")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let ours: Vec<&str> = stderr.lines().filter(|l| l.contains("cordond")).collect();
    assert!(ours.is_empty(), "systemd-analyze found problems in the units:\n{}", ours.join("\n"));
}

/// `cordon doctor` can serve as a health check: it exits 1 when cordond is not running at the
/// socket (the `daemon` check fails), and 0 on this host while a daemon serves there.
#[test]
fn doctor_fails_while_the_daemon_is_down() {
    let d = cordon_tests::Daemon::start(&[("tools.toml", TOOLS)]);
    let up = d.cordon(&["doctor", "--json"]);
    up.assert_code(0);
    let json = up.json();
    assert_eq!(json["ok"], true, "{json:#}");
    let socket = d.socket.clone();
    drop(d);
    let down = cordon_at(&socket, &["doctor", "--json"]);
    down.assert_code(1);
    let json = down.json();
    assert_eq!(json["ok"], false, "{json:#}");
    let daemon = json["checks"].as_array().unwrap().iter().find(|c| c["name"] == "daemon").cloned().unwrap();
    assert_eq!(daemon["level"], "fail", "{json:#}");
    assert_eq!(daemon["found"], "not reachable", "{json:#}");
}

/// cordond on `DIR/policies`, socket `DIR/cordon.sock`, its stderr the file `log` announced as
/// the journal stream (`JOURNAL_STREAM=DEV:INODE`, as systemd sets it).
fn cordond_on_a_journal_stream(dir: &Path, log: &Path) -> Command {
    use std::os::unix::fs::MetadataExt as _;
    let file = std::fs::File::create(log).unwrap();
    let meta = file.metadata().unwrap();
    let mut cmd = Command::new(bin("cordond"));
    cmd.arg("--policies")
        .arg(dir.join("policies"))
        .arg("--socket")
        .arg(dir.join("cordon.sock"))
        .arg("--audit")
        .arg(dir.join("audit.jsonl"))
        .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
        .env("CORDON_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file);
    cmd
}

/// Under systemd, stderr is a journal stream (`JOURNAL_STREAM=DEV:INODE` names it): every line
/// carries its syslog priority, so `journalctl -p warning` finds a rejected reload, and the
/// reload's multi-line reason stays in that one entry instead of becoming entries of priority
/// info (what a real systemd showed before; packaging/vm-test.sh).
#[test]
fn on_a_journal_stream_every_line_carries_its_priority_and_an_event_stays_one_line() {
    let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("tools.toml"), TOOLS).unwrap();
    let socket = dir.path().join("cordon.sock");
    let log_path = dir.path().join("journal.txt");
    let mut child = cordond_on_a_journal_stream(dir.path(), &log_path).spawn().unwrap();
    assert!(eventually(Duration::from_secs(10), || socket.exists()), "cordond did not start");
    // Two lines of TOML that fail: the reason spans lines (a caret under the bad spot).
    std::fs::write(policies.join("broken.toml"), "version = 1\n[tools.x\n").unwrap();
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
    kill(pid, Signal::SIGHUP).unwrap();
    assert!(
        eventually(Duration::from_secs(10), || std::fs::read_to_string(&log_path).unwrap().contains("broken.toml")),
        "no reload rejection logged"
    );
    kill(pid, Signal::SIGTERM).unwrap();
    child.wait().unwrap();
    let text = std::fs::read_to_string(&log_path).unwrap();
    for line in text.lines() {
        assert!(
            ["<3>", "<4>", "<6>", "<7>"].iter().any(|p| line.starts_with(p)),
            "a line without its priority: {line:?}\n{text}"
        );
    }
    let rejected = text.lines().find(|l| l.contains("broken.toml")).unwrap();
    assert!(rejected.starts_with("<4>") || rejected.starts_with("<3>"), "{rejected}");
    assert!(text.lines().any(|l| l.starts_with("<6>")), "no info line: {text}");
}

/// A unit that fails to start says why at priority error (`journalctl -p err`): a policy that
/// does not load, every line of the reason included.
#[test]
fn on_a_journal_stream_a_failed_start_is_an_error() {
    let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("broken.toml"), "version = 1\n[tools.x\n").unwrap();
    let log_path = dir.path().join("journal.txt");
    let status = cordond_on_a_journal_stream(dir.path(), &log_path).status().unwrap();
    assert_eq!(status.code(), Some(78), "a policy error is a configuration error");
    let text = std::fs::read_to_string(&log_path).unwrap();
    assert!(text.contains("broken.toml"), "{text}");
    assert!(text.contains("cordon policy check"), "{text}");
    for line in text.lines().filter(|l| !l.starts_with("<6>") && !l.starts_with("<7>")) {
        assert!(line.starts_with("<3>"), "a line of the failure not at priority error: {line:?}\n{text}");
    }
    assert!(text.lines().any(|l| l.starts_with("<3>") && l.contains("broken.toml")), "{text}");
}
