//! Reliability of policy loading: hostile policy directories (FIFOs, device symlinks, symlink
//! loops, huge files, files and directories others can write or own) are refused with the exact
//! message at startup (exit 78), on reload and by `cordon policy check`, without ever hanging;
//! reload storms over alternately broken and valid directories leave the daemon serving, the
//! generation only growing, every reload audited and the last valid registry in force.
//! Needs root (to chown files and run as another user); skips otherwise.

use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use cordon_tests::agent::{self, AGENT};
use cordon_tests::require_root;
use cordon_tests::{Daemon, Output, bin, eventually};
use serde_json::Value;

fn valid(marker: &str) -> String {
    format!(
        r#"version = 1

[tools.ping]
description = "answer pong"
reason = "tests"
command = ["/bin/echo", "pong"]

[tools.{marker}]
description = "which version of the policies is in force"
reason = "tests"
command = ["/bin/true"]
"#
    )
}

/// A file with only a marker tool (to sit next to a valid file without duplicate names).
fn marker_only(marker: &str) -> String {
    format!(
        "version = 1\n\n[tools.{marker}]\ndescription = \"marker\"\nreason = \"tests\"\ncommand = [\"/bin/true\"]\n"
    )
}

const BROKEN: &str = "version = 1\n\n[tools.bad]\ndescription = \"no command\"\nreason = \"tests\"\n";

fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(uid.into()).unwrap().map_or_else(|| format!("uid {uid}"), |u| u.name)
}

/// Runs a command to completion, failing the test (and killing it) if it takes longer than
/// `limit`: what these tests guard against is a hang.
fn run_bounded(command: &mut Command, limit: Duration) -> Output {
    let child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => {
            let out = out.unwrap();
            Output {
                code: out.status.code(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            }
        }
        Err(_) => {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            panic!("{command:?} hung for more than {limit:?}");
        }
    }
}

fn cordon(d: &Daemon, args: &[&str]) -> Output {
    run_bounded(Command::new(bin("cordon")).arg("--socket").arg(&d.socket).args(args), Duration::from_secs(60))
}

fn policy_check(dir: &Path) -> Output {
    run_bounded(Command::new(bin("cordon")).args(["policy", "check"]).arg(dir), Duration::from_secs(60))
}

/// A fresh policy directory (root-owned, 0755, in a 0755 root-owned temp dir) with one valid file.
fn fresh() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::Builder::new().prefix("cordon-rel-").tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = tmp.path().join("policies");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.join("a.toml"), valid("v-start")).unwrap();
    (tmp, dir)
}

/// One hostile change to a policy directory, the exact diagnostic it must produce, and how to
/// undo it.
struct Case {
    name: &'static str,
    apply: fn(&Path),
    undo: fn(&Path),
    /// The expected `file:line:col: message` line.
    expect: fn(&Path) -> String,
}

fn d(p: &Path) -> String {
    p.display().to_string()
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "fifo",
            apply: |dir| {
                nix::unistd::mkfifo(&dir.join("f.toml"), nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap()
            },
            undo: |dir| std::fs::remove_file(dir.join("f.toml")).unwrap(),
            expect: |dir| {
                let f = dir.join("f.toml");
                format!(
                    "{}:1:1: policy file {} is a FIFO (named pipe), not a regular file; cordond reads only regular files: \
                     remove it or replace it with one",
                    d(&f),
                    d(&f)
                )
            },
        },
        Case {
            name: "symlink to /dev/zero",
            apply: |dir| symlink("/dev/zero", dir.join("z.toml")).unwrap(),
            undo: |dir| std::fs::remove_file(dir.join("z.toml")).unwrap(),
            expect: |dir| {
                format!(
                    "{}:1:1: policy file /dev/zero is a character device, not a regular file; cordond reads only regular \
                     files: remove it or replace it with one",
                    d(&dir.join("z.toml"))
                )
            },
        },
        Case {
            name: "symlink loop",
            apply: |dir| {
                symlink("l2.toml", dir.join("l1.toml")).unwrap();
                symlink("l1.toml", dir.join("l2.toml")).unwrap();
            },
            undo: |dir| {
                std::fs::remove_file(dir.join("l1.toml")).unwrap();
                std::fs::remove_file(dir.join("l2.toml")).unwrap();
            },
            expect: |dir| {
                let f = dir.join("l1.toml");
                format!(
                    "{}:1:1: policy file {}: more than 40 symlinks to follow (a symlink loop?); point it at a file directly",
                    d(&f),
                    d(&f)
                )
            },
        },
        Case {
            name: "10 GiB file",
            apply: |dir| std::fs::File::create(dir.join("huge.toml")).unwrap().set_len(10 << 30).unwrap(),
            undo: |dir| std::fs::remove_file(dir.join("huge.toml")).unwrap(),
            expect: |dir| {
                let f = dir.join("huge.toml");
                format!(
                    "{}:1:1: policy file {} is 10737418240 bytes; a policy file may be at most 4194304 bytes: split it",
                    d(&f),
                    d(&f)
                )
            },
        },
        Case {
            name: "file mode 0666",
            apply: |dir| {
                let f = dir.join("w.toml");
                std::fs::write(&f, valid("v-writable")).unwrap();
                std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
            },
            undo: |dir| std::fs::remove_file(dir.join("w.toml")).unwrap(),
            expect: |dir| {
                let f = dir.join("w.toml");
                format!(
                    "{}:1:1: policy file {} is writable by group and others (mode 0666, owner root:root); a root cordond \
                     only trusts files that only root can write: chmod 0644 {}",
                    d(&f),
                    d(&f),
                    d(&f)
                )
            },
        },
        Case {
            name: "file mode 0664",
            apply: |dir| {
                let f = dir.join("g.toml");
                std::fs::write(&f, valid("v-group")).unwrap();
                std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o664)).unwrap();
            },
            undo: |dir| std::fs::remove_file(dir.join("g.toml")).unwrap(),
            expect: |dir| {
                let f = dir.join("g.toml");
                format!(
                    "{}:1:1: policy file {} is writable by group (mode 0664, owner root:root); a root cordond only trusts \
                     files that only root can write: chmod 0644 {}",
                    d(&f),
                    d(&f),
                    d(&f)
                )
            },
        },
        Case {
            name: "directory mode 0777",
            apply: |dir| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap(),
            undo: |dir| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap(),
            expect: |dir| {
                format!(
                    "{}:1:1: cannot read policy directory: policy directory {} is writable by group and others (mode 0777, \
                     owner root:root); a root cordond only trusts directories that only root can write: chmod 0755 {}",
                    d(dir),
                    d(dir),
                    d(dir)
                )
            },
        },
        Case {
            name: "sticky directory mode 1777",
            apply: |dir| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777)).unwrap(),
            undo: |dir| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap(),
            expect: |dir| {
                format!(
                    "{}:1:1: cannot read policy directory: policy directory {} is writable by group and others (mode 1777, \
                     owner root:root); a root cordond only trusts directories that only root can write: chmod 1755 {}",
                    d(dir),
                    d(dir),
                    d(dir)
                )
            },
        },
        Case {
            name: "writable directory above",
            apply: |dir| {
                std::fs::set_permissions(dir.parent().unwrap(), std::fs::Permissions::from_mode(0o775)).unwrap()
            },
            undo: |dir| {
                std::fs::set_permissions(dir.parent().unwrap(), std::fs::Permissions::from_mode(0o755)).unwrap()
            },
            expect: |dir| {
                let up = dir.parent().unwrap();
                format!(
                    "{}:1:1: cannot read policy directory: directory {} (above the policy directory {}) is writable by group \
                     (mode 0775, owner root:root); a root cordond only trusts directories that only root can write: \
                     chmod 0755 {}",
                    d(dir),
                    d(up),
                    d(dir),
                    d(up)
                )
            },
        },
        Case {
            name: "file owned by another user",
            apply: |dir| {
                let f = dir.join("o.toml");
                std::fs::write(&f, valid("v-owned")).unwrap();
                nix::unistd::chown(&f, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
            },
            undo: |dir| std::fs::remove_file(dir.join("o.toml")).unwrap(),
            expect: |dir| {
                let f = dir.join("o.toml");
                format!(
                    "{}:1:1: policy file {} is owned by {} (mode 0644, owner {}:root); a root cordond only trusts files \
                     that only root can write: chown root {}",
                    d(&f),
                    d(&f),
                    user_name(65534),
                    user_name(65534),
                    d(&f)
                )
            },
        },
        Case {
            name: "symlink to a file in a directory others can write",
            apply: |dir| {
                let shared = dir.parent().unwrap().join("shared");
                std::fs::create_dir(&shared).unwrap();
                std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
                std::fs::write(shared.join("x.toml"), valid("v-shared")).unwrap();
                symlink("../shared/x.toml", dir.join("s.toml")).unwrap();
            },
            undo: |dir| {
                std::fs::remove_file(dir.join("s.toml")).unwrap();
                std::fs::remove_dir_all(dir.parent().unwrap().join("shared")).unwrap();
            },
            expect: |dir| {
                let s = dir.join("s.toml");
                let shared = dir.parent().unwrap().join("shared");
                format!(
                    "{}:1:1: directory {} (above the policy file {}) is writable by group and others (mode 0777, owner \
                     root:root); a root cordond only trusts directories that only root can write: chmod 0755 {}",
                    d(&s),
                    d(&shared),
                    d(&s),
                    d(&shared)
                )
            },
        },
    ]
}

/// Starts cordond on `dir` and expects it to refuse to start: exit 78, the message on stderr.
fn expect_startup_refused(dir: &Path, expected: &str) {
    let run = tempfile::tempdir().unwrap();
    let out = run_bounded(
        Command::new(bin("cordond"))
            .arg("--policies")
            .arg(dir)
            .arg("--socket")
            .arg(run.path().join("s").join("cordon.sock"))
            .arg("--audit")
            .arg(run.path().join("a").join("audit.jsonl")),
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(78), "cordond must refuse to start (exit 78): {out:#?}");
    assert!(out.stderr.lines().any(|l| l == expected), "expected line\n{expected}\nin\n{}", out.stderr);
}

#[test]
fn hostile_policy_directories_stop_startup_with_exit_78_and_the_exact_message() {
    require_root!("to chown files and run as another user");
    for case in cases() {
        let (_tmp, dir) = fresh();
        (case.apply)(&dir);
        eprintln!("case: {}", case.name);
        expect_startup_refused(&dir, &(case.expect)(&dir));
        (case.undo)(&dir);
    }
}

#[test]
fn hostile_policy_directories_are_refused_by_policy_check() {
    require_root!("to chown files and run as another user");
    for case in cases() {
        let (_tmp, dir) = fresh();
        (case.apply)(&dir);
        let expected = (case.expect)(&dir);
        let out = policy_check(&dir);
        assert_eq!(out.code, Some(65), "{}: {out:#?}", case.name);
        assert!(out.stderr.lines().any(|l| l == expected), "{}: expected\n{expected}\nin\n{}", case.name, out.stderr);
        assert!(out.stdout.contains("policy rejected"), "{}: {out:#?}", case.name);
        (case.undo)(&dir);
        policy_check(&dir).assert_code(0);
    }
}

#[test]
fn hostile_policy_directories_are_refused_by_reload_and_the_daemon_keeps_serving() {
    require_root!("to chown files and run as another user");
    let (tmp, dir) = fresh();
    let d = Daemon::start_in(tmp, dir.clone(), &[]);
    d.cordon(&["status"]).assert_code(0);
    for (generation, case) in (1_u64..).zip(cases()) {
        (case.apply)(&dir);
        let expected = (case.expect)(&dir);
        let out = cordon(&d, &["reload", "--json"]);
        assert_eq!(out.code, Some(65), "{}: {out:#?}", case.name);
        let report = out.json();
        assert_eq!(report["ok"], false, "{}", case.name);
        assert_eq!(report["generation"], generation, "{}: a rejected reload keeps the generation", case.name);
        let lines: Vec<String> = report["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| {
                format!(
                    "{}:{}:{}: {}",
                    x["file"].as_str().unwrap(),
                    x["line"],
                    x["column"],
                    x["message"].as_str().unwrap()
                )
            })
            .collect();
        assert!(lines.contains(&expected), "{}: expected\n{expected}\nin\n{lines:#?}", case.name);
        // SIGHUP takes the same path: audited as rejected, with the message.
        let before = d.audit_records().len();
        d.signal(nix::sys::signal::Signal::SIGHUP);
        assert!(
            eventually(Duration::from_secs(20), || d.audit_records()[before..]
                .iter()
                .any(|r| r["decision"] == "reload_rejected"
                    && r["by"] == "SIGHUP"
                    && audit_message(r).contains(expected.split_once(": ").unwrap().1.split(';').next().unwrap()))),
            "{}: SIGHUP reload not audited as rejected:\n{:#?}",
            case.name,
            &d.audit_records()[before..]
        );
        // Still serving the last valid policies.
        let (run, result) = d.run_json("ping", &serde_json::json!({}));
        run.assert_code(0);
        assert_eq!(result["stdout"], "pong\n");
        (case.undo)(&dir);
        cordon(&d, &["reload"]).assert_code(0);
    }
}

fn audit_message(record: &Value) -> String {
    match &record["message"] {
        Value::String(s) => s.clone(),
        other => other["prefix"].as_str().unwrap_or_default().to_string(),
    }
}

#[test]
fn entries_that_are_not_policies_are_named_in_warnings() {
    require_root!("to chown files and run as another user");
    let (tmp, dir) = fresh();
    std::fs::write(dir.join("extra.json"), "{}").unwrap();
    std::fs::write(dir.join("a.toml.bak"), "junk").unwrap();
    std::fs::write(dir.join(".hidden.toml"), "junk").unwrap();
    let out = policy_check(&dir);
    out.assert_code(0);
    let json_warning = format!(
        "{}:1:1: warning: ignored: {} does not end in .toml; only *.toml files are read (rename it to load it)",
        d(&dir.join("extra.json")),
        d(&dir.join("extra.json"))
    );
    assert!(out.stderr.lines().any(|l| l == json_warning), "{out:#?}");
    assert!(out.stderr.contains(&format!("ignored: {} does not end in .toml", d(&dir.join("a.toml.bak")))), "{out:#?}");
    std::fs::create_dir(dir.join("sub")).unwrap();
    let out = policy_check(&dir);
    out.assert_code(0);
    assert!(out.stderr.contains(&format!("ignored: {} is a directory", d(&dir.join("sub")))), "{out:#?}");
    assert!(!out.stderr.contains(".hidden.toml"), "dot files are skipped silently: {out:#?}");
    let d = Daemon::start_in(tmp, dir.clone(), &[]);
    assert!(d.log_text().contains("extra.json does not end in .toml"), "{}", d.log_text());
    let report = cordon(&d, &["reload", "--json"]).json();
    assert_eq!(report["ok"], true);
    assert!(report["diagnostics"].to_string().contains("extra.json does not end in .toml"), "{report}");
}

#[test]
fn a_directory_named_like_a_policy_is_refused() {
    require_root!("to chown files and run as another user");
    let (_tmp, dir) = fresh();
    std::fs::create_dir(dir.join("sub.toml")).unwrap();
    let f = dir.join("sub.toml");
    let expected = format!(
        "{}:1:1: policy file {} is a directory, not a regular file; cordond reads only regular files: remove it or \
         replace it with one",
        d(&f),
        d(&f)
    );
    let out = policy_check(&dir);
    out.assert_code(65);
    assert!(out.stderr.lines().any(|l| l == expected), "{out:#?}");
    expect_startup_refused(&dir, &expected);
}

#[test]
fn trusted_symlinks_and_sticky_root_owned_ancestors_are_accepted() {
    require_root!("to chown files and run as another user");
    let (tmp, dir) = fresh();
    // A symlink to a root-owned file in a root-owned directory is followed.
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::write(real.join("x.toml"), valid("v-linked").replace("[tools.ping]", "[tools.ping-linked]")).unwrap();
    symlink(real.join("x.toml"), dir.join("linked.toml")).unwrap();
    // The policy directory reached through a symlinked directory.
    let alias = tmp.path().join("alias");
    symlink(&dir, &alias).unwrap();
    // A sticky, root-owned directory above (like /tmp) is fine...
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let out = policy_check(&alias);
    out.assert_code(0);
    assert!(out.stdout.contains("ok: 4 tool(s) in 2 file(s)"), "{out:#?}");
    // ... but not one owned by someone else, who could rename the policy directory away.
    nix::unistd::chown(tmp.path(), Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    let out = policy_check(&dir);
    out.assert_code(65);
    let expected = format!(
        "{}:1:1: cannot read policy directory: directory {} (above the policy directory {}) is owned by {} (mode 1777, \
         owner {}:root); a root cordond only trusts directories that only root can write: chown root {}",
        d(&dir),
        d(tmp.path()),
        d(&dir),
        user_name(65534),
        user_name(65534),
        d(tmp.path())
    );
    assert!(out.stderr.lines().any(|l| l == expected), "expected\n{expected}\n{out:#?}");
    nix::unistd::chown(tmp.path(), Some(nix::unistd::Uid::from_raw(0)), None).unwrap();
}

/// Runs `cordon policy check DIR` as the unprivileged test user.
fn check_as_agent(dir: &Path) -> Output {
    run_bounded(
        Command::new("setpriv")
            .args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--"])
            .arg(bin("cordon"))
            .args(["policy", "check"])
            .arg(dir),
        Duration::from_secs(60),
    )
}

#[test]
fn policy_check_by_an_unprivileged_user_applies_its_own_daemon_rules_and_warns_about_a_root_daemons() {
    require_root!("to chown files and run as another user");
    agent::ensure();
    let (_tmp, dir) = fresh();
    let agent = nix::unistd::User::from_name(AGENT).unwrap().unwrap();
    // A file the user owns: a cordond running as the user would load it (no error); a root
    // cordond would not (a warning says so).
    let own = dir.join("own.toml");
    std::fs::write(&own, marker_only("v-own")).unwrap();
    nix::unistd::chown(&own, Some(agent.uid), None).unwrap();
    let out = check_as_agent(&dir);
    out.assert_code(0);
    // A note, not a warning: installing the file as root into the policy directory is the way it
    // reaches a root cordond, and makes the copy root's (`--deny-warnings` passes on it).
    let warning = format!(
        "{}:1:1: note: a root cordond would refuse this file where it is: policy file {} is owned by {AGENT} (mode \
         0644, owner {AGENT}:root); a root cordond only trusts files that only root can write: chown root {}; to load \
         it there, install it as root into the policy directory (sudo install -m 0644 FILE \
         /etc/cordon/policies.d/), which makes the copy root's",
        d(&own),
        d(&own),
        d(&own)
    );
    assert!(out.stderr.lines().any(|l| l == warning), "expected\n{warning}\n{out:#?}");
    // A file someone else (not root) owns: refused for the user's own daemon too.
    nix::unistd::chown(&own, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    let out = check_as_agent(&dir);
    out.assert_code(65);
    let error = format!(
        "{}:1:1: policy file {} is owned by {} (mode 0644, owner {}:root); a cordond running as {AGENT} only trusts \
         files that only {AGENT} or root can write: chown {AGENT} {}",
        d(&own),
        d(&own),
        user_name(65534),
        user_name(65534),
        d(&own)
    );
    assert!(out.stderr.lines().any(|l| l == error), "expected\n{error}\n{out:#?}");
    std::fs::remove_file(&own).unwrap();
    // A file the user cannot read.
    let secret = dir.join("secret.toml");
    std::fs::write(&secret, marker_only("v-secret")).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = check_as_agent(&dir);
    out.assert_code(65);
    let error = format!("{}:1:1: cannot open policy file {}: EACCES: Permission denied", d(&secret), d(&secret));
    assert!(out.stderr.lines().any(|l| l == error), "expected\n{error}\n{out:#?}");
}

/// Which `v-*` marker tool is in force, and the generation.
fn in_force(d: &Daemon) -> (u64, Vec<String>) {
    let out = cordon(d, &["tools", "--json"]);
    out.assert_code(0);
    let json = out.json();
    let names = json["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .filter(|n| n.starts_with("v-"))
        .map(str::to_string)
        .collect();
    (json["generation"].as_u64().unwrap(), names)
}

/// Replaces the directory's content by renaming a fully written file into place (what an admin's
/// deploy tool does), so a reload sees either the old or the new file.
fn publish(dir: &Path, content: &str, step: usize) {
    let staging = dir.parent().unwrap().join(format!("staging-{step}"));
    std::fs::write(&staging, content).unwrap();
    std::fs::rename(&staging, dir.join("a.toml")).unwrap();
}

#[test]
fn reload_storms_over_broken_and_valid_policies_keep_the_daemon_serving() {
    require_root!("to chown files and run as another user");
    let (tmp, dir) = fresh();
    let d = Daemon::start_in(tmp, dir.clone(), &[]);
    // Once an RPC is answered, the signal handlers are in place.
    d.cordon(&["status"]).assert_code(0);
    let stop = AtomicBool::new(false);
    let rpc_reloads = AtomicUsize::new(0);
    let sighups = AtomicUsize::new(0);
    let served = AtomicUsize::new(0);
    std::thread::scope(|s| {
        // The deploy side: valid versions alternating with broken ones (a syntax error, a missing
        // command, a FIFO next to a valid file).
        let writer = s.spawn(|| {
            let mut step = 0;
            while !stop.load(Ordering::SeqCst) {
                match step % 4 {
                    0 => publish(&dir, &valid(&format!("v-{step}")), step),
                    1 => publish(&dir, BROKEN, step),
                    2 => {
                        publish(&dir, &valid(&format!("v-{step}")), step);
                        let fifo = dir.join("fifo.toml");
                        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
                        std::thread::sleep(Duration::from_millis(15));
                        std::fs::remove_file(&fifo).unwrap();
                    }
                    _ => publish(&dir, "version = [", step),
                }
                step += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let reloaders: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let mut last = 0;
                    for _ in 0..15 {
                        let out = cordon(&d, &["reload", "--json"]);
                        assert!(matches!(out.code, Some(0 | 65)), "{out:#?}");
                        let generation = out.json()["generation"].as_u64().unwrap();
                        assert!(generation >= last, "generation went back from {last} to {generation}");
                        last = generation;
                        rpc_reloads.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        let hangups = s.spawn(|| {
            for _ in 0..40 {
                d.signal(nix::sys::signal::Signal::SIGHUP);
                sighups.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let server = s.spawn(|| {
            let mut last = 0;
            while !stop.load(Ordering::SeqCst) {
                let (generation, markers) = in_force(&d);
                assert!(generation >= last, "generation went back from {last} to {generation}");
                assert_eq!(markers.len(), 1, "exactly one valid version is in force: {markers:?}");
                last = generation;
                let (run, result) = d.run_json("ping", &serde_json::json!({}));
                run.assert_code(0);
                assert_eq!(result["stdout"], "pong\n");
                served.fetch_add(1, Ordering::SeqCst);
            }
        });
        for r in reloaders {
            r.join().unwrap();
        }
        hangups.join().unwrap();
        stop.store(true, Ordering::SeqCst);
        writer.join().unwrap();
        server.join().unwrap();
    });
    assert!(served.load(Ordering::SeqCst) > 0);
    // The last valid version is the one in force, and a broken one after it changes nothing.
    let _ = std::fs::remove_file(dir.join("fifo.toml"));
    publish(&dir, &valid("v-final"), 1_000_000);
    let out = cordon(&d, &["reload", "--json"]);
    out.assert_code(0);
    let generation = out.json()["generation"].as_u64().unwrap();
    assert_eq!(in_force(&d), (generation, vec!["v-final".to_string()]));
    publish(&dir, BROKEN, 1_000_001);
    cordon(&d, &["reload"]).assert_code(65);
    let before = d.audit_records().len();
    d.signal(nix::sys::signal::Signal::SIGHUP);
    assert!(eventually(Duration::from_secs(20), || d.audit_records()[before..]
        .iter()
        .any(|r| r["decision"] == "reload_rejected" && r["by"] == "SIGHUP")));
    assert_eq!(in_force(&d), (generation, vec!["v-final".to_string()]));
    // Every reload was audited: one record per RPC, at least one per burst of SIGHUPs, and each
    // generation from 2 to the last exactly once.
    let rpcs = rpc_reloads.load(Ordering::SeqCst) + 2;
    let records = d.audit_records();
    let reloads: Vec<&Value> =
        records.iter().filter(|r| r["decision"] == "reload" || r["decision"] == "reload_rejected").collect();
    let by_rpc = reloads.iter().filter(|r| r["by"].is_object()).count();
    let by_signal = reloads.iter().filter(|r| r["by"] == "SIGHUP").count();
    assert_eq!(by_rpc, rpcs, "one audit record per reload RPC");
    assert!(by_signal >= 2 && by_signal <= sighups.load(Ordering::SeqCst) + 1, "{by_signal} SIGHUP reloads audited");
    let mut generations: Vec<u64> =
        reloads.iter().filter(|r| r["decision"] == "reload").map(|r| r["generation"].as_u64().unwrap()).collect();
    generations.sort_unstable();
    assert_eq!(generations, (2..=generation).collect::<Vec<_>>(), "every generation audited exactly once");
    assert!(d.log_text().contains("reload rejected"), "rejections are logged");
}

/// Starts cordond on a valid policy directory with the given audit log and socket; returns how it
/// ended (it must not start).
fn start_refused(audit: &Path, socket: &Path) -> Output {
    let (_tmp, dir) = fresh();
    run_bounded(
        Command::new(bin("cordond")).arg("--policies").arg(&dir).arg("--socket").arg(socket).arg("--audit").arg(audit),
        Duration::from_secs(30),
    )
}

#[test]
fn the_audit_and_socket_directories_must_be_writable_by_root_only_too() {
    require_root!("to chown files and run as another user");
    let tmp = tempfile::Builder::new().prefix("cordon-rel-").tempdir().unwrap();
    let nobody = nix::unistd::Uid::from_raw(65534);
    let good = tmp.path().join("good");
    std::fs::create_dir(&good).unwrap();
    // An audit directory someone else owns (mode 0700: the old check looked at the mode only).
    let audit_dir = tmp.path().join("audit");
    std::fs::create_dir(&audit_dir).unwrap();
    std::fs::set_permissions(&audit_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    nix::unistd::chown(&audit_dir, Some(nobody), None).unwrap();
    let out = start_refused(&audit_dir.join("audit.jsonl"), &good.join("cordon.sock"));
    assert_eq!(out.code, Some(1), "{out:#?}");
    let expected = format!(
        "cordond: audit directory {} is owned by {} (mode 0700, owner {}:root); a root cordond only trusts directories \
         that only root can write: chown root {}",
        d(&audit_dir),
        user_name(65534),
        user_name(65534),
        d(&audit_dir)
    );
    assert!(out.stderr.lines().any(|l| l == expected), "expected\n{expected}\n{out:#?}");
    // A socket directory (to be created) beneath a directory someone else owns: they could
    // swap the socket for a symlink between bind and chmod.
    let theirs = tmp.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    nix::unistd::chown(&theirs, Some(nobody), None).unwrap();
    let socket_dir = theirs.join("run");
    let out = start_refused(&good.join("audit.jsonl"), &socket_dir.join("cordon.sock"));
    assert_eq!(out.code, Some(1), "{out:#?}");
    let expected = format!(
        "cordond: directory {} (above the socket directory {}) is owned by {} (mode 0755, owner {}:root); a root cordond \
         only trusts directories that only root can write: chown root {}",
        d(&theirs),
        d(&socket_dir),
        user_name(65534),
        user_name(65534),
        d(&theirs)
    );
    assert!(out.stderr.lines().any(|l| l == expected), "expected\n{expected}\n{out:#?}");
    assert!(!socket_dir.exists(), "nothing was created beneath it");
}

/// A cordond run by the unprivileged test user on `policies`, with its socket and audit log in a
/// directory the user owns; returns how it ended if it stopped within a few seconds, or None
/// (killed) if it was still running, i.e. it started.
fn run_as_agent_daemon(tmp: &Path, policies: &Path) -> Option<Output> {
    let home = tmp.join("agent-home");
    if !home.exists() {
        std::fs::create_dir(&home).unwrap();
        let agent = nix::unistd::User::from_name(AGENT).unwrap().unwrap();
        nix::unistd::chown(&home, Some(agent.uid), Some(agent.gid)).unwrap();
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let mut child = Command::new("setpriv")
        .args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--"])
        .arg(bin("cordond"))
        .arg("--policies")
        .arg(policies)
        .arg("--socket")
        .arg(home.join("run").join("cordon.sock"))
        .arg("--audit")
        .arg(home.join("audit").join("audit.jsonl"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let socket = home.join("run").join("cordon.sock");
    let started = eventually(Duration::from_secs(20), || {
        std::os::unix::net::UnixStream::connect(&socket).is_ok() || child.try_wait().unwrap().is_some()
    });
    assert!(started, "cordond neither started nor stopped");
    if child.try_wait().unwrap().is_none() {
        child.kill().unwrap();
        child.wait().unwrap();
        let _ = std::fs::remove_file(&socket);
        return None;
    }
    let out = child.wait_with_output().unwrap();
    Some(Output {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

#[test]
fn a_daemon_run_by_a_user_trusts_files_of_that_user_and_root_only() {
    require_root!("to chown files and run as another user");
    agent::ensure();
    let (tmp, dir) = fresh();
    let agent = nix::unistd::User::from_name(AGENT).unwrap().unwrap();
    // Root's files and the user's own files load.
    let own = dir.join("own.toml");
    std::fs::write(&own, marker_only("v-own")).unwrap();
    nix::unistd::chown(&own, Some(agent.uid), Some(agent.gid)).unwrap();
    assert!(run_as_agent_daemon(tmp.path(), &dir).is_none(), "a user's daemon loads root's and its own files");
    // Group write for the user's private group (umask 002 systems) is fine for the user's daemon...
    let private_group = nix::unistd::Group::from_gid(agent.gid).unwrap().unwrap();
    if private_group.name == AGENT && private_group.mem.iter().all(|m| m == AGENT) {
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o664)).unwrap();
        assert!(run_as_agent_daemon(tmp.path(), &dir).is_none(), "group write for the user's private group");
    }
    // ... but not for any other group,
    nix::unistd::chown(&own, None, Some(nix::unistd::Gid::from_raw(0))).unwrap();
    let out = run_as_agent_daemon(tmp.path(), &dir).expect("refused");
    assert_eq!(out.code, Some(78), "{out:#?}");
    let expected = format!(
        "{}:1:1: policy file {} is writable by group (mode 0664, owner {AGENT}:root); a cordond running as {AGENT} only \
         trusts files that only {AGENT} or root can write: chmod 0644 {}",
        d(&own),
        d(&own),
        d(&own)
    );
    assert!(out.stderr.lines().any(|l| l == expected), "expected\n{expected}\n{out:#?}");
    // ... and a file of another user is refused.
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o644)).unwrap();
    nix::unistd::chown(&own, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    let out = run_as_agent_daemon(tmp.path(), &dir).expect("refused");
    assert_eq!(out.code, Some(78), "{out:#?}");
    assert!(
        out.stderr.contains(&format!(
            "policy file {} is owned by {} (mode 0644, owner {}:root); a cordond running as {AGENT} only trusts files \
             that only {AGENT} or root can write: chown {AGENT} {}",
            d(&own),
            user_name(65534),
            user_name(65534),
            d(&own)
        )),
        "{out:#?}"
    );
}

#[test]
fn policy_check_of_a_fifo_or_device_named_directly_answers_at_once() {
    require_root!("to chown files and run as another user");
    let (_tmp, dir) = fresh();
    let fifo = dir.join("f.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let out = policy_check(&fifo);
    out.assert_code(65);
    let expected = format!(
        "{}:1:1: policy file {} is a FIFO (named pipe), not a regular file; cordond reads only regular files: remove it \
         or replace it with one",
        d(&fifo),
        d(&fifo)
    );
    assert!(out.stderr.lines().any(|l| l == expected), "expected\n{expected}\n{out:#?}");
    let out = policy_check(Path::new("/dev/zero"));
    out.assert_code(65);
    assert!(out.stderr.contains("policy file /dev/zero is a character device, not a regular file"), "{out:#?}");
}
