//! The admin CLI as a whole: one table of exit codes, `--json` on every subcommand with one
//! error shape, colour only on a terminal, `cordon tool` grants for admins, `pending --watch`.

use std::path::Path;

use cordon_tests::{Daemon, cordon_at, fixture};
use serde_json::json;

const TOOLS: &str = concat!(fixture!(header "20s"), fixture!(echo), fixture!(guarded));

/// The error shape every subcommand prints with `--json`: `{"error": {"code", "message"}}` on
/// stdout, and the exit code of the table for that code.
#[track_caller]
fn assert_json_error(out: &cordon_tests::Output, exit: i32, code: &str) {
    out.assert_code(exit);
    let j = out.json();
    assert_eq!(j["error"]["code"], code, "{out:#?}");
    assert!(j["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{out:#?}");
}

/// The same failure has the same exit code whatever the subcommand: a name that does not exist
/// is 66 (tool, approval, invocation, token), and `--json` prints the one error shape.
#[test]
fn one_exit_code_table_and_one_json_error_shape() {
    let d = Daemon::start(&[("tools.toml", TOOLS)]);
    assert_json_error(&d.cordon(&["run", "nope", "--json"]), 66, "UNKNOWN_TOOL");
    assert_json_error(&d.cordon(&["tool", "nope", "--json"]), 66, "UNKNOWN_TOOL");
    assert_json_error(&d.cordon(&["approve", "nope", "--json"]), 66, "UNKNOWN_APPROVAL");
    assert_json_error(&d.cordon(&["deny", "nope", "--json"]), 66, "UNKNOWN_APPROVAL");
    assert_json_error(&d.cordon(&["cancel", "bogus", "--json"]), 66, "UNKNOWN_INVOCATION");
    assert_json_error(&d.cordon(&["confirm", &"0".repeat(64), "--json"]), 66, "CONFIRMATION_INVALID");
    // The global flag works before the subcommand too.
    assert_json_error(&d.cordon(&["--json", "cancel", "bogus"]), 66, "UNKNOWN_INVOCATION");
    // Without --json: the message on stderr, nothing on stdout.
    let out = d.cordon(&["cancel", "bogus"]);
    out.assert_code(66);
    assert!(out.stdout.is_empty() && out.stderr.contains("no running invocation \"bogus\""), "{out:#?}");

    // A used confirmation token is "not found" (66), not "daemon not running" (69).
    let file = d.dir.path().join("log.txt");
    let (_, j) = d.run_json("guarded", &json!({ "file": file, "text": "x" }));
    let token = j["confirmation_required"]["token"].as_str().unwrap().to_string();
    d.cordon(&["confirm", &token]).assert_code(0);
    assert_json_error(&d.cordon(&["confirm", &token, "--json"]), 66, "CONFIRMATION_INVALID");

    // Invalid arguments are data errors (65), whatever the subcommand.
    let (out, _) = d.run_json("echo", &json!({}));
    assert_json_error(&out, 65, "MISSING_REQUIRED_FIELD");

    // Daemon down: 69 everywhere, with the same JSON code.
    let none = d.dir.path().join("none.sock");
    for args in [&["status", "--json"][..], &["approve", "x", "--json"], &["audit", "resume", "--json"]] {
        assert_json_error(&cordon_at(&none, args), 69, "DAEMON_NOT_RUNNING");
    }
}

/// `--json` on every subcommand that had none: approve, deny, cancel, audit resume, policy
/// reference.
#[test]
fn every_subcommand_answers_in_json() {
    let d = Daemon::start(&[("tools.toml", TOOLS)]);
    let reference = d.cordon(&["policy", "reference", "--json"]);
    reference.assert_code(0);
    let r = reference.json();
    assert!(r["keys"]["tool"].as_array().unwrap().iter().any(|k| k["key"] == "command"), "{r:#}");
    assert!(r["error_codes"].as_array().unwrap().iter().any(|c| c["code"] == "UNKNOWN_TOOL"), "{r:#}");
    assert!(r["markdown"].as_str().unwrap().starts_with("# cordon policy authoring reference"));
    // The audit is working: resume says so, as JSON.
    let out = d.cordon(&["audit", "resume", "--json"]);
    out.assert_code(0);
    assert_eq!(out.json()["resumed"], true, "{out:#?}");
    // Every subcommand's --json output parses (stdout is exactly one JSON value).
    for args in [
        &["tools", "--json"][..],
        &["tool", "echo", "--json"],
        &["status", "--json"],
        &["pending", "--json"],
        &["reload", "--json"],
        &["doctor", "--json"],
    ] {
        let out = d.cordon(args);
        assert!(out.code.is_some(), "{out:#?}");
        let _ = out.json();
    }
    let policy = d.policies.join("tools.toml");
    let out = cordon_at(Path::new("/nonexistent.sock"), &["policy", "check", policy.to_str().unwrap(), "--json"]);
    out.assert_code(0);
    assert_eq!(out.json()["ok"], true);
}

/// `cordon --help` prints the exit-code table the code uses.
#[test]
fn help_prints_the_exit_code_table() {
    let out = cordon_at(Path::new("/nonexistent.sock"), &["--help"]);
    out.assert_code(0);
    for row in ["   66  not found", "   69  unavailable", "  124  timed out", "the tool's own exit code"] {
        assert!(out.stdout.contains(row), "{row:?} missing:\n{}", out.stdout);
    }
}

const GRANTS: &str = r#"
version = 1

[tools.fetch]
description = "a tool with every kind of grant"
reason = "tests"
command = ["/bin/true", "{{dir}}"]
read = ["/etc/hostname"]
write = ["/tmp"]
exec = ["/opt"]
network = { connect_tcp = [443], bind_tcp = [8080] }
env = { SECRET_TOKEN = "hunter2", LANG = "C" }
limits = { memory = "64MiB", processes = 16 }
timeout = "7s"
run_as = "nobody"
confirm = "agent"
allow = { users = ["cordon-t-agent"], groups = ["cordon-t-sock"] }

[tools.fetch.params.dir]
type = "path"

[tools.admins-only]
description = "no allow"
reason = "tests"
command = ["/bin/true"]
"#;

/// Starts a daemon the agent user can reach (socket group, a traversable directory).
fn start_for_agent(policy: &str) -> Daemon {
    use std::os::unix::fs::PermissionsExt as _;
    cordon_tests::agent::ensure();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), policy).unwrap();
    Daemon::start_in(dir, policies, &["--socket-group", cordon_tests::agent::SOCKET_GROUP])
}

/// `cordon tool NAME` shows an admin what the tool may touch and who may call it; an agent user
/// is never sent the grants (nor the env values, to anyone).
#[test]
fn tool_shows_grants_to_admins_only() {
    cordon_tests::require_root!();
    let d = start_for_agent(GRANTS);
    let out = d.cordon(&["tool", "fetch", "--json"]);
    out.assert_code(0);
    let g = out.json()["grants"].clone();
    assert_eq!(g["read"], json!(["/etc/hostname"]), "{g:#}");
    assert_eq!(g["write"], json!(["/tmp"]));
    assert_eq!(g["exec"], json!(["/opt"]));
    assert_eq!(g["connect_tcp"], json!([443]));
    assert_eq!(g["bind_tcp"], json!([8080]));
    assert_eq!(g["limits"]["memory_bytes"], 64 << 20);
    assert_eq!(g["limits"]["processes"], 16);
    assert_eq!(g["env_keys"], json!(["LANG", "SECRET_TOKEN"]));
    assert_eq!(g["allow"], json!({ "users": ["cordon-t-agent"], "groups": ["cordon-t-sock"] }));
    assert_eq!(g["run_as"], "nobody");
    assert!(!out.stdout.contains("hunter2"), "env values are never shown: {}", out.stdout);

    let out = d.cordon(&["tool", "fetch"]);
    out.assert_code(0);
    for line in ["    read        /etc/hostname", "    tcp connect 443", "  run as       nobody", "memory 64MiB"] {
        assert!(out.stdout.contains(line), "{line:?} missing:\n{}", out.stdout);
    }
    assert!(out.stdout.contains("user cordon-t-agent, group cordon-t-sock"), "{}", out.stdout);
    let out = d.cordon(&["tool", "admins-only"]);
    assert!(out.stdout.contains("admins only (no `allow`"), "{}", out.stdout);

    // The agent sees the tool, not its grants.
    let out = cordon_tests::agent::cordon(&d.socket, &["tool", "fetch", "--json"]);
    out.assert_code(0);
    assert!(out.json().get("grants").is_none(), "{out:#?}");
    let out = cordon_tests::agent::cordon(&d.socket, &["tool", "fetch"]);
    out.assert_code(0);
    assert!(!out.stdout.contains("may touch") && !out.stdout.contains("/etc/hostname"), "{out:#?}");
}

/// The README's first `run`: a path outside the tool's grants fails with a bare "Permission
/// denied" from the tool; cordon adds which path, which grants, and that the sandbox refused it.
/// Inside the grants, a mode the run-as uid cannot read is named as the file mode's refusal.
#[test]
fn a_failed_run_says_whether_the_sandbox_or_the_file_mode_refused_a_path() {
    use std::os::unix::fs::PermissionsExt as _;
    cordon_tests::require_root!();
    let d = start_for_agent("version = 1\n");
    let granted = d.dir.path().join("granted");
    let secret = granted.join("secret");
    let outside = d.dir.path().join("outside");
    for dir in [&granted, &secret, &outside] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("f"), "x").unwrap();
    }
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    d.write_policy(
        "t.toml",
        &format!(
            r#"version = 1
[tools.list-files]
description = "list files"
reason = "tests"
command = ["find", "{{{{path}}}}", "-type", "f"]
read = [{granted}]
allow = {{ users = ["cordon-t-agent"] }}

[tools.list-files.params.path]
type = "path"
required = true
"#,
            granted = cordon_tests::toml_str(&granted)
        ),
    );
    d.cordon(&["reload"]).assert_code(0);
    let arg = |p: &Path| format!("path={}", p.display());

    // Root, outside the grants: the sandbox refused it, and the admin is told the grants.
    let out = d.cordon(&["run", "list-files", "--arg", &arg(&outside)]);
    assert_ne!(out.code, Some(0), "{out:#?}");
    let hint = format!("cordon: hint: path={} is outside what the sandbox lets list-files read", outside.display());
    assert!(out.stderr.contains(&hint), "{out:#?}");
    assert!(out.stderr.contains(&format!("its grants: {}", granted.display())), "{out:#?}");
    assert!(out.stderr.contains("landlock refused it, not the file's mode"), "{out:#?}");
    // The same as JSON, for scripts.
    let (_, j) = d.run_json("list-files", &json!({ "path": outside }));
    assert!(j["hints"][0].as_str().unwrap().contains("outside what the sandbox lets"), "{j:#}");
    // Inside the grants, readable: no hint (the run succeeds).
    let out = d.cordon(&["run", "list-files", "--arg", &arg(&granted), "--json"]);
    out.assert_code(0);
    assert!(out.json().get("hints").is_none(), "{out:#?}");

    // The agent, inside the grants but in a directory only root may read: the file mode.
    let out = cordon_tests::agent::cordon(&d.socket, &["run", "list-files", "--arg", &arg(&secret)]);
    assert_ne!(out.code, Some(0), "{out:#?}");
    assert!(out.stderr.contains("is inside the tool's grants, but its mode is 0700"), "{out:#?}");
    assert!(out.stderr.contains("the file's mode refused it, not the sandbox"), "{out:#?}");
    // The agent, outside: told it was the sandbox, never shown the grants.
    let out = cordon_tests::agent::cordon(&d.socket, &["run", "list-files", "--arg", &arg(&outside)]);
    assert!(out.stderr.contains("landlock refused it, not the file's mode; ask an admin"), "{out:#?}");
    assert!(!out.stderr.contains(&granted.display().to_string()), "{out:#?}");
}

/// The hint is computed by a root daemon, which could stat anything: it must not become an
/// oracle for an agent. Behind a directory the agent may not search, and through a symlink to
/// one, an existing file and a missing one get the same answer (the agent's own `stat` could not
/// tell them apart either).
#[test]
fn the_hint_tells_an_agent_nothing_its_own_uid_could_not_see() {
    use std::os::unix::fs::PermissionsExt as _;
    cordon_tests::require_root!();
    let d = start_for_agent("version = 1\n");
    let granted = d.dir.path().join("granted");
    let private = granted.join("private");
    let hidden = d.dir.path().join("hidden");
    for dir in [&private, &hidden] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("present"), "x").unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    std::os::unix::fs::symlink(&hidden, granted.join("link")).unwrap();
    d.write_policy(
        "t.toml",
        &format!(
            r#"version = 1
[tools.show]
description = "show a file"
reason = "tests"
command = ["cat", "--", "{{{{file}}}}"]
read = [{granted}, {hidden}]
allow = {{ users = ["cordon-t-agent"] }}

[tools.show.params.file]
type = "path"
required = true
"#,
            granted = cordon_tests::toml_str(&granted),
            hidden = cordon_tests::toml_str(&hidden)
        ),
    );
    d.cordon(&["reload"]).assert_code(0);
    let hints = |file: &Path| {
        let out = cordon_tests::agent::cordon(
            &d.socket,
            &["run", "show", "--arg", &format!("file={}", file.display()), "--json"],
        );
        assert_ne!(out.code, Some(0), "{out:#?}");
        let j = out.json();
        let hints: Vec<String> = j["hints"].as_array().map_or_else(Vec::new, |a| {
            a.iter().map(|h| h.as_str().unwrap().replace(&file.display().to_string(), "FILE")).collect()
        });
        hints
    };
    // Behind an unsearchable directory: the directory is named, whether or not the file exists.
    let present = hints(&private.join("present"));
    assert_eq!(present, hints(&private.join("absent")), "an existence oracle behind {}", private.display());
    assert!(
        present[0].contains(&format!("directory {} (mode 0700, owner 0:0) cannot be searched", private.display())),
        "{present:?}"
    );
    // Through a symlink to such a directory: no mode hint at all, present or absent.
    let through = hints(&granted.join("link").join("present"));
    assert_eq!(through, hints(&granted.join("link").join("absent")), "an existence oracle through a symlink");
    assert!(through.is_empty(), "a mode hint followed a symlink as root: {through:?}");
}

/// An agent user whom no tool admits: `tools` names the real fix (an admin adds the user or a
/// group to a tool's `allow`, with the uid and groups cordond sees), not `--all`; `status` counts
/// the tools this caller may use, not the registry.
#[test]
fn an_agent_without_tools_is_told_the_real_fix_and_status_counts_its_own_tools() {
    cordon_tests::require_root!();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/examples");
    let policy = std::fs::read_to_string(examples.join("files.toml")).unwrap();
    let d = start_for_agent(&policy);
    let agent = |args: &[&str]| cordon_tests::agent::cordon(&d.socket, args);
    let uid = cordon_tests::agent::id("-u", cordon_tests::agent::AGENT);

    // The bundled read-only tools admit group `cordon`, which the test agent is not in.
    let out = agent(&["tools"]);
    out.assert_code(0);
    assert!(out.stdout.contains(&format!("no tool's `allow` admits uid {uid} (cordon-t-agent), groups ")), "{out:#?}");
    assert!(out.stdout.contains("(cordon-t-sock)"), "the groups cordond matched: {out:#?}");
    assert!(out.stdout.contains("to a tool's `allow`"), "{out:#?}");
    assert!(!out.stdout.contains("--all"), "not the wrong fix: {out:#?}");
    let s = agent(&["status", "--json"]).json();
    assert_eq!((s["tools_total"].as_u64(), s["tools_available"].as_u64()), (Some(0), Some(0)), "{s:#}");
    assert_eq!(s["caller"]["admin"], false);
    assert_eq!(s["caller"]["uid"], uid);
    let out = agent(&["status"]);
    assert!(out.stdout.contains("tools        0 you may use"), "{out:#?}");
    // The admin still counts every tool.
    let s = d.cordon(&["status", "--json"]).json();
    assert_eq!(s["caller"]["admin"], true);
    assert!(s["tools_total"].as_u64().unwrap() >= 4, "{s:#}");

    // Admitted through a group it is in: counted, and listed.
    d.write_policy("t.toml", &policy.replace("groups = [\"cordon\"]", "groups = [\"cordon-t-sock\"]"));
    d.cordon(&["reload"]).assert_code(0);
    let s = agent(&["status", "--json"]).json();
    let admitted = s["tools_total"].as_u64().unwrap();
    assert!(admitted >= 4, "{s:#}");
    assert_eq!(
        agent(&["tools", "--json"]).json()["tools"].as_array().unwrap().len() as u64,
        s["tools_available"].as_u64().unwrap()
    );
}

/// `pending --watch --json`: what is pending, then each arrival and how each one left (approved,
/// denied, withdrawn by a caller that went away, expired), as JSON lines, from a stream the
/// daemon feeds (no polling). Agents may not watch.
#[test]
fn pending_watch_streams_arrivals_and_decisions() {
    use std::io::BufRead as _;
    use std::time::Duration;
    let d = Daemon::start_with(
        &[("c.toml", concat!(fixture!(header "20s"), fixture!(approved)))],
        &["--approval-timeout", "3s"],
    );
    let mut watcher = d.cordon_spawn(&["pending", "--watch", "--json"]);
    let (tx, rx) = std::sync::mpsc::channel::<serde_json::Value>();
    let stdout = watcher.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")));
        }
    });
    let next = || rx.recv_timeout(Duration::from_secs(15)).expect("no event from pending --watch");
    let run = |text: &str| d.cordon_spawn(&["run", "approved", "--arg", &format!("text={text}"), "--json"]);

    let first = run("yes");
    let added = next();
    assert_eq!((added["event"].as_str(), added["tool"].as_str()), (Some("added"), Some("approved")), "{added}");
    let id = added["approval_id"].as_str().unwrap().to_string();
    d.cordon(&["approve", &id]).assert_code(0);
    assert_eq!(next(), json!({ "event": "approved", "approval_id": id, "tool": "approved" }));
    assert_eq!(first.wait_with_output().unwrap().status.code(), Some(0));

    let second = run("no");
    let id = next()["approval_id"].as_str().unwrap().to_string();
    d.cordon(&["deny", &id]).assert_code(0);
    assert_eq!(next(), json!({ "event": "denied", "approval_id": id, "tool": "approved" }));
    assert_eq!(second.wait_with_output().unwrap().status.code(), Some(77));

    let mut third = run("gone");
    let id = next()["approval_id"].as_str().unwrap().to_string();
    cordon_tests::wait_pending(&d.socket);
    third.kill().unwrap();
    let _ = third.wait();
    assert_eq!(next(), json!({ "event": "withdrawn", "approval_id": id, "tool": "approved" }));

    let fourth = run("late");
    let id = next()["approval_id"].as_str().unwrap().to_string();
    assert_eq!(next(), json!({ "event": "expired", "approval_id": id, "tool": "approved" }));
    assert_eq!(fourth.wait_with_output().unwrap().status.code(), Some(124));

    watcher.kill().unwrap();
    let _ = watcher.wait();
}

/// Only admins may watch approvals.
#[test]
fn agents_may_not_watch_pending_approvals() {
    cordon_tests::require_root!();
    let d = start_for_agent("version = 1\n");
    let out = cordon_tests::agent::cordon(&d.socket, &["pending", "--watch", "--json"]);
    assert_json_error(&out, 77, "PERMISSION_DENIED");
}

/// The level of `doctor`'s check `name` (its first one of that name).
fn doctor_level(out: &cordon_tests::Output, name: &str) -> Option<String> {
    let j = out.json();
    j["checks"].as_array().unwrap().iter().find(|c| c["name"] == name).map(|c| c["level"].as_str().unwrap().to_string())
}

/// `doctor` is a health check: a failed audit log makes it fail (exit 1) until it is resumed.
#[test]
fn doctor_fails_while_the_audit_log_is_failed() {
    use std::process::Command;
    let d = Daemon::start(&[("tools.toml", TOOLS)]);
    let healthy = d.cordon(&["doctor", "--json"]);
    assert_eq!(doctor_level(&healthy, "audit").as_deref(), Some("ok"), "{healthy:#?}");
    let baseline = healthy.code;
    let pid = d.pid().to_string();
    let fsize = |value: &str| {
        let out = Command::new("prlimit").args(["--pid", &pid, &format!("--fsize={value}:")]).output().unwrap();
        assert!(out.status.success(), "prlimit: {out:?}");
    };
    fsize(&(std::fs::metadata(&d.audit).unwrap().len() + 100).to_string());
    let failed = cordon_tests::eventually(std::time::Duration::from_secs(10), || {
        d.run_json("echo", &json!({ "text": "fill" })).0.code == Some(69)
    });
    assert!(failed, "the audit log never failed");
    let out = d.cordon(&["doctor", "--json"]);
    out.assert_code(1);
    assert_eq!(doctor_level(&out, "audit").as_deref(), Some("fail"), "{out:#?}");
    assert!(out.stdout.contains("cordon audit resume"), "{out:#?}");
    fsize("unlimited");
    d.cordon(&["audit", "resume"]).assert_code(0);
    let out = d.cordon(&["doctor", "--json"]);
    assert_eq!(out.code, baseline, "{out:#?}");
    assert_eq!(doctor_level(&out, "audit").as_deref(), Some("ok"), "{out:#?}");
}

/// A root cordond without cgroups (here: an empty /sys/fs/cgroup in its own mount namespace)
/// runs tools without memory or process limits: `doctor` fails and says how to fix it.
#[test]
fn doctor_fails_when_a_root_daemon_has_no_cgroups() {
    cordon_tests::require_root!();
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("tools.toml"), TOOLS).unwrap();
    let wrapper = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        "mount -t tmpfs tmpfs /sys/fs/cgroup && exec \"$0\" \"$@\"",
    ];
    let d = Daemon::start_under(&wrapper, dir, policies, &[]);
    assert_eq!(d.cordon(&["status", "--json"]).json()["cgroup_mode"], "none");
    let out = d.cordon(&["doctor", "--json"]);
    out.assert_code(1);
    assert_eq!(doctor_level(&out, "limits").as_deref(), Some("fail"), "{out:#?}");
    assert!(out.stdout.contains("Delegate=yes"), "{out:#?}");
    let out = d.cordon(&["doctor"]);
    assert!(
        out.stdout.lines().any(|l| l.starts_with("fail  limits    cordond runs as root without cgroups")),
        "{out:#?}"
    );
}

/// `cordon ARGS` against `d` with extra environment (colour decisions), output as text.
fn cordon_env(d: &Daemon, args: &[&str], env: &[(&str, &str)]) -> cordon_tests::Output {
    let mut c = std::process::Command::new(cordon_tests::bin("cordon"));
    c.arg("--socket").arg(&d.socket).args(args).stdin(std::process::Stdio::null());
    for var in ["NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "CI"] {
        c.env_remove(var);
    }
    c.env("TERM", "xterm-256color");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap().into()
}

/// The same, on a terminal: `script` gives cordon a pty; what it printed comes back on stdout.
fn cordon_on_a_pty(d: &Daemon, args: &str, env: &[(&str, &str)]) -> String {
    let mut c = std::process::Command::new("script");
    let command = format!("{} --socket {} {args}", cordon_tests::bin("cordon").display(), d.socket.display());
    c.args(["-qec", &command, "/dev/null"]).stdin(std::process::Stdio::null());
    for var in ["NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "CI"] {
        c.env_remove(var);
    }
    c.env("TERM", "xterm-256color");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Colour only on a terminal: piped output has no escape codes; on a pty the status words,
/// doctor levels and the error prefix are coloured; NO_COLOR removes it and CLICOLOR_FORCE
/// forces it into a pipe. The control-byte escaping of values is unchanged.
#[test]
fn colour_on_a_terminal_only() {
    let d = Daemon::start(&[("tools.toml", concat!(fixture!(header "20s"), fixture!(echo), fixture!(missing)))]);
    for args in [&["tools", "--all"][..], &["doctor"], &["tool", "echo"], &["status"], &["run", "nope"]] {
        let out = cordon_env(&d, args, &[]);
        assert!(!out.stdout.contains('\u{1b}') && !out.stderr.contains('\u{1b}'), "escape codes in a pipe: {out:#?}");
    }
    let green = "\u{1b}[32mavailable";
    let forced = cordon_env(&d, &["tools", "--all"], &[("CLICOLOR_FORCE", "1")]);
    assert!(forced.stdout.contains(green) && forced.stdout.contains("\u{1b}[33munavailable"), "{forced:#?}");
    let out = cordon_env(&d, &["tools", "--all"], &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]);
    assert!(!out.stdout.contains('\u{1b}'), "NO_COLOR wins: {out:#?}");

    let tty = cordon_on_a_pty(&d, "tools --all", &[]);
    assert!(tty.contains(green), "no colour on a terminal: {tty:?}");
    let tty = cordon_on_a_pty(&d, "doctor", &[]);
    assert!(tty.contains("\u{1b}[32mok"), "{tty:?}");
    let tty = cordon_on_a_pty(&d, "run nope", &[]);
    assert!(tty.contains("\u{1b}[1m\u{1b}[31mcordon:\u{1b}[0m UNKNOWN_TOOL"), "{tty:?}");
    let tty = cordon_on_a_pty(&d, "tools --all", &[("NO_COLOR", "1")]);
    assert!(!tty.contains('\u{1b}') && tty.contains("available"), "{tty:?}");
    // A value's control bytes are still shown escaped, with colour on.
    let tty = cordon_on_a_pty(&d, "run \"$(printf 'x\\033[2Jy')\"", &[]);
    assert!(tty.contains("x\\u{1b}[2Jy") && !tty.contains("x\u{1b}[2Jy"), "{tty:?}");
}
