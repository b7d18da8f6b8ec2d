//! The private temp space of each invocation (policy key `temp`), through the real daemon: a
//! fresh directory named by `TMPDIR`, granted read, write and exec; under a read-only view (a
//! root daemon here) size-bounded tmpfs in the tool's own mount namespace with a private `/tmp`
//! and `/dev/shm`, unless the tool's own paths lie beneath them; gone when the invocation ends.

use std::path::{Path, PathBuf};

use cordon_tests::{Daemon, eventually, require_root, toml_str};
use serde_json::{Value, json};

/// A policy with one `/bin/sh -c {{script}}` tool per `(name, extra keys)`.
fn policy(tools: &[(&str, String)]) -> String {
    let mut text = String::from("version = 1\n");
    for (name, extra) in tools {
        text.push_str(&format!(
            r#"
[tools.{name}]
description = "a shell script"
reason = "temp space tests"
command = ["/bin/sh", "-c", "{{{{script}}}}"]
accept_warnings = ["interpreter-code", "leading-dash"]
{timeout}{extra}

[tools.{name}.params.script]
type = "string"
pattern = "[^\\x00]*"
required = true
"#,
            timeout = if extra.contains("timeout") { "" } else { "timeout = \"20s\"\n" },
        ));
    }
    text
}

/// A directory under the host's /tmp (as test directories are) for a tool to be granted.
fn work_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("cordon-temp-test-").tempdir_in("/tmp").expect("tempdir");
    // Tools may run as another user (run_as) and must reach it.
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).expect("chmod");
    dir
}

/// Runs `script` with tool `tool`; returns the result (a rejected call fails the test).
#[track_caller]
fn sh(d: &Daemon, tool: &str, script: &str) -> Value {
    let (out, j) = d.run_json(tool, &json!({ "script": script }));
    assert!(j.get("error").is_none(), "{tool} was not run: {out:?}\n{}", d.log_text());
    j
}

fn stdout(j: &Value) -> &str {
    j["stdout"].as_str().unwrap_or_default()
}

/// A script that writes a program into $TMPDIR, runs it, and says where TMPDIR is.
const WRITE_AND_RUN: &str = r#"set -e
echo "tmpdir=$TMPDIR"
printf '#!/bin/sh\necho ran-from-temp\n' > "$TMPDIR/prog.sh"
chmod 700 "$TMPDIR/prog.sh"
"$TMPDIR/prog.sh"
mkdir "$TMPDIR/sub" && echo data > "$TMPDIR/sub/f" && mv "$TMPDIR/sub/f" "$TMPDIR/g" && rm -r "$TMPDIR/sub"
id -u"#;

#[test]
fn tmpdir_is_set_writable_and_executable_in_every_mode() {
    require_root!("a daemon that can make mount namespaces");
    cordon_tests::agent::ensure();
    let w = work_dir();
    let d = Daemon::start(&[(
        "t.toml",
        &policy(&[
            ("private", String::new()),
            ("granted", format!("working_dir = {}", toml_str(w.path()))),
            ("nobody", "run_as = \"nobody\"".into()),
            ("nobody-granted", format!("run_as = \"nobody\"\nworking_dir = {}", toml_str(w.path()))),
        ]),
    )]);
    for (tool, uid) in [("private", "0"), ("granted", "0"), ("nobody", "65534"), ("nobody-granted", "65534")] {
        let j = sh(&d, tool, WRITE_AND_RUN);
        assert_eq!(j["exit_code"], 0, "{tool}: {j}");
        let out = stdout(&j);
        assert!(out.contains("ran-from-temp"), "{tool}: {j}");
        assert!(out.trim_end().ends_with(uid), "{tool} ran as the wrong user: {j}");
        let tmpdir = out.lines().next().and_then(|l| l.strip_prefix("tmpdir=")).expect("tmpdir line").to_string();
        if tool.ends_with("granted") {
            // The tool relies on a path beneath /tmp: no private /tmp, a fresh directory instead,
            // gone once the invocation has ended.
            assert!(tmpdir.starts_with("/tmp/cordon-"), "{tool}: {tmpdir}");
            assert!(!Path::new(&tmpdir).exists(), "{tool}: {tmpdir} outlived its invocation");
        } else {
            assert_eq!(tmpdir, "/tmp", "{tool}: a private /tmp is TMPDIR");
        }
    }
    // The audit record says which temp space the tool had.
    let temps: Vec<String> = d
        .audit_records()
        .iter()
        .filter(|r| r["decision"] == "finished")
        .map(|r| r["sandbox"]["temp"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(temps, ["private-tmp", "private-dir", "private-tmp", "private-dir"]);
}

#[test]
fn a_policy_tmpdir_wins_and_temp_false_gives_none() {
    require_root!("a daemon that can make mount namespaces");
    let w = work_dir();
    let d = Daemon::start(&[(
        "t.toml",
        &policy(&[
            ("own", format!("env = {{ TMPDIR = {} }}\nwrite = [{}]", toml_str(w.path()), toml_str(w.path()))),
            ("off", "temp = false".into()),
        ]),
    )]);
    let j = sh(&d, "own", "echo \"$TMPDIR\"; touch \"$TMPDIR/mine\"");
    assert_eq!(j["exit_code"], 0, "{j}");
    assert_eq!(stdout(&j).trim(), w.path().to_str().unwrap());
    assert!(w.path().join("mine").exists());
    // temp = false: no TMPDIR, and /tmp is the host's (read-only in the view, and landlock
    // grants nothing there).
    let j = sh(&d, "off", "echo \"[${TMPDIR-unset}]\"; touch /tmp/cordon-temp-off-probe; echo rc=$?");
    assert_eq!(stdout(&j), "[unset]\nrc=1\n", "{j}");
    assert!(j["stderr"].as_str().unwrap().contains("Read-only file system"), "{j}");
    assert!(!Path::new("/tmp/cordon-temp-off-probe").exists());
}

#[test]
fn concurrent_invocations_do_not_see_each_others_temp_files() {
    require_root!("a daemon that can make mount namespaces");
    let w = work_dir();
    let d = Daemon::start(&[(
        "t.toml",
        &policy(&[("granted", format!("working_dir = {}\nwrite = [{}]", toml_str(w.path()), toml_str(w.path())))]),
    )]);
    let ready = w.path().join("ready");
    let go = w.path().join("go");
    // The first holds a file in its temp space (and in /dev/shm) until told to go on.
    let first_script = format!(
        "echo first > \"$TMPDIR/mine\"; echo first > /dev/shm/cordon-temp-test-shm; echo \"$TMPDIR\" > {ready}.tmp; \
         mv {ready}.tmp {ready}; while [ ! -e {go} ]; do sleep 0.05; done; cat \"$TMPDIR/mine\"; ls -A \"$TMPDIR\"",
        ready = ready.display(),
        go = go.display()
    );
    let first =
        d.cordon_spawn(&["run", "granted", "--args-json", &json!({ "script": first_script }).to_string(), "--json"]);
    assert!(eventually(std::time::Duration::from_secs(20), || ready.exists()), "the first never got ready");
    let first_tmpdir = PathBuf::from(std::fs::read_to_string(&ready).unwrap().trim());
    // On the host its directory is only an empty mount point: the files are in its own tmpfs.
    assert_eq!(std::fs::read_dir(&first_tmpdir).unwrap().count(), 0, "the host sees the tool's temp files");
    assert!(!Path::new("/dev/shm/cordon-temp-test-shm").exists(), "the host sees the tool's /dev/shm");
    let j = sh(
        &d,
        "granted",
        &format!(
            "echo \"tmpdir=$TMPDIR\"; ls -A \"$TMPDIR\"; cat /dev/shm/cordon-temp-test-shm; ls {} 2>&1; \
             echo second > \"$TMPDIR/mine\"",
            first_tmpdir.display()
        ),
    );
    let out = stdout(&j);
    assert!(!out.contains("first"), "the second saw the first's files: {j}");
    assert!(!out.contains(&format!("tmpdir={}", first_tmpdir.display())), "{j}");
    assert!(j["stderr"].as_str().unwrap().contains("No such file"), "{j}");
    std::fs::write(&go, "").unwrap();
    let out = first.wait_with_output().unwrap();
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stdout(&j), "first\nmine\n", "the first's temp space changed under it: {j}");
    assert!(!first_tmpdir.exists(), "{} outlived its invocation", first_tmpdir.display());
}

#[test]
fn the_temp_dir_goes_after_a_timeout() {
    require_root!("a daemon that can make mount namespaces");
    let w = work_dir();
    let d = Daemon::start(&[(
        "t.toml",
        &policy(&[(
            "slow",
            format!("working_dir = {}\nwrite = [{}]\ntimeout = \"1s\"", toml_str(w.path()), toml_str(w.path())),
        )]),
    )]);
    let path_file = w.path().join("path");
    let j = sh(
        &d,
        "slow",
        &format!("echo \"$TMPDIR\" > {}; mkdir \"$TMPDIR/d\"; touch \"$TMPDIR/d/f\"; sleep 30", path_file.display()),
    );
    assert_eq!(j["timed_out"], true, "{j}");
    let tmpdir = std::fs::read_to_string(&path_file).unwrap();
    let tmpdir = Path::new(tmpdir.trim());
    assert!(tmpdir.starts_with("/tmp"), "{}", tmpdir.display());
    assert!(!tmpdir.exists(), "{} outlived its timed-out invocation", tmpdir.display());
}

#[test]
fn planted_symlinks_make_the_daemon_neither_follow_nor_delete() {
    require_root!("a daemon that can make mount namespaces");
    let w = work_dir();
    let victim_dir = tempfile::Builder::new().prefix("cordon-temp-victim-").tempdir_in("/tmp").unwrap();
    let victim = victim_dir.path().join("precious");
    std::fs::write(&victim, "keep me").unwrap();
    std::fs::write(victim_dir.path().join("other"), "keep me too").unwrap();
    let d = Daemon::start(&[(
        "t.toml",
        &policy(&[
            ("private", String::new()),
            ("granted", format!("working_dir = {}\nwrite = [{}]", toml_str(w.path()), toml_str(w.path()))),
        ]),
    )]);
    let plant = format!(
        "ln -s {v} \"$TMPDIR/file-link\"; ln -s {vd} \"$TMPDIR/dir-link\"; mkdir -p \"$TMPDIR/a/b\"; \
         ln -s {vd} \"$TMPDIR/a/b/deep-link\"; chmod 0 \"$TMPDIR/a\"; echo \"$TMPDIR\"",
        v = victim.display(),
        vd = victim_dir.path().display()
    );
    for tool in ["private", "granted"] {
        let j = sh(&d, tool, &plant);
        assert_eq!(j["exit_code"], 0, "{tool}: {j}");
        let tmpdir = stdout(&j).trim().to_string();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me", "{tool}");
        assert_eq!(std::fs::read_to_string(victim_dir.path().join("other")).unwrap(), "keep me too", "{tool}");
        if tool == "granted" {
            assert!(!Path::new(&tmpdir).exists(), "{tmpdir} outlived its invocation");
        }
    }
}

#[test]
fn tmp_and_dev_shm_are_private_for_a_tool_without_paths_beneath_them() {
    require_root!("a daemon that can make mount namespaces");
    let marker = tempfile::Builder::new().prefix("cordon-host-marker-").tempfile_in("/tmp").unwrap();
    let name = marker.path().file_name().unwrap().to_str().unwrap().to_string();
    let shm_name = format!("cordon-temp-test-{}", std::process::id());
    let d = Daemon::start(&[("t.toml", &policy(&[("private", String::new())]))]);
    let j = sh(
        &d,
        "private",
        &format!(
            "ls -A /tmp; test -e /tmp/{name} && echo host-file-visible; echo x > /dev/shm/{shm_name} && echo shm-written; \
             ls -A /dev/shm"
        ),
    );
    assert_eq!(j["exit_code"], 0, "{j}");
    let out = stdout(&j);
    assert!(!out.contains("host-file-visible") && !out.contains(&name), "the host's /tmp is visible: {j}");
    assert!(out.contains("shm-written") && out.contains(&shm_name), "{j}");
    assert!(!Path::new("/dev/shm").join(&shm_name).exists(), "a file the tool made in /dev/shm is on the host");
    // The private mounts are tmpfs, bounded by the default size (512MiB: 131072 blocks of 4KiB).
    let j = sh(&d, "private", "stat -f -c '%T %b %S' /tmp /dev/shm");
    assert_eq!(stdout(&j), "tmpfs 131072 4096\ntmpfs 131072 4096\n", "{j}");
}

#[test]
fn the_size_bound_gives_enospc() {
    require_root!("a daemon that can make mount namespaces");
    let w = work_dir();
    let d = Daemon::start(&[(
        "t.toml",
        &policy(&[
            ("small", "temp = { size = \"1MiB\" }".into()),
            ("small-granted", format!("temp = {{ size = \"1MiB\" }}\nworking_dir = {}", toml_str(w.path()))),
        ]),
    )]);
    for tool in ["small", "small-granted"] {
        for place in ["$TMPDIR", "/dev/shm"] {
            let j = sh(&d, tool, &format!("head -c 2097152 /dev/zero > {place}/big; echo rc=$?"));
            assert!(stdout(&j).contains("rc=1"), "{tool} {place}: {j}");
            assert!(j["stderr"].as_str().unwrap().contains("No space left on device"), "{tool} {place}: {j}");
        }
    }
}

#[test]
fn a_daemon_that_stops_cleanly_leaves_no_directory_of_its_own() {
    require_root!("a daemon that can make mount namespaces");
    // cordond's own temp dir (TMPDIR here) gets its `cordon-tmp.XXXXXX` when a tool's TMPDIR is
    // a fresh directory (its working dir lies beneath /tmp); a clean stop removes it.
    let tmp = work_dir();
    let w = work_dir();
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), policy(&[("here", format!("working_dir = {}", toml_str(w.path())))]))
        .unwrap();
    let tmpdir = format!("TMPDIR={}", tmp.path().display());
    let d = Daemon::start_under(&["/usr/bin/env", &tmpdir], dir, policies, &[]);
    let j = sh(&d, "here", "echo $TMPDIR");
    assert!(stdout(&j).starts_with(&format!("{}/cordon-tmp.", tmp.path().display())), "{j}");
    let ours = || {
        std::fs::read_dir(tmp.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("cordon-tmp"))
            .count()
    };
    assert_eq!(ours(), 1);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(d.pid()), nix::sys::signal::Signal::SIGTERM).unwrap();
    let stopped = cordon_tests::eventually(std::time::Duration::from_secs(20), || {
        std::fs::read_to_string(format!("/proc/{}/stat", d.pid())).map_or(true, |s| s.contains(") Z "))
    });
    assert!(stopped, "cordond did not stop on SIGTERM");
    assert_eq!(ours(), 0, "the stopped daemon's directory is gone");
}

#[test]
fn the_number_of_files_is_bounded_too() {
    require_root!("a daemon that can make mount namespaces");
    // Empty files cost no pages but kernel memory no cgroup may count: the tmpfs bounds its
    // inodes with its size (1 per 16 KiB, at least 1,024; 1MiB gives 1,024).
    let d = Daemon::start(&[("t.toml", &policy(&[("small", "temp = { size = \"1MiB\" }".into())]))]);
    for place in ["$TMPDIR", "/dev/shm"] {
        let j = sh(
            &d,
            "small",
            &format!("n=0; while [ $n -lt 2000 ]; do touch {place}/f$n || break; n=$((n+1)); done; echo made=$n"),
        );
        let made: u32 = stdout(&j).trim().trim_start_matches("made=").parse().unwrap_or_else(|_| panic!("{j}"));
        assert!((1000..1024).contains(&made), "{place}: {made} files in a 1,024-inode tmpfs: {j}");
        assert!(j["stderr"].as_str().unwrap().contains("No space left on device"), "{place}: {j}");
    }
}

#[test]
fn tmpfs_pages_count_against_the_memory_limit() {
    require_root!("a daemon that can make mount namespaces");
    // A temp space larger than the memory limit: what the tool keeps in tmpfs is charged to its
    // memory cgroup, so filling it ends the tool (the cgroup's OOM kill) well before the tmpfs is
    // full.
    let d = Daemon::start(&[(
        "t.toml",
        &policy(&[("bounded", "temp = { size = \"512MiB\" }\nlimits = { memory = \"48MiB\" }".into())]),
    )]);
    let j = sh(&d, "bounded", "head -c 268435456 /dev/zero > $TMPDIR/big; echo rc=$?; du -k $TMPDIR/big");
    let records = d.audit_records();
    let finished = records.iter().rfind(|r| r["decision"] == "finished").expect("a finished record");
    if finished["sandbox"]["cgroup"] != true {
        cordon_tests::skip!(cordon_tests::Skip::NoCgroupDelegation, "no memory cgroup on this host");
        return;
    }
    // The memory cgroup's OOM kill, not a timeout and not a full tmpfs. Where the kernel kills
    // the whole group on OOM (cgroup v2's memory.oom.group) the tool ends by SIGKILL; under
    // cgroup v1 (hybrid hosts) the OOM killer picks the biggest process, `head`, and the shell
    // reports it (rc=137).
    let killed = j["signal"] == 9 || stdout(&j).contains("rc=137");
    assert!(killed, "256MiB of tmpfs under a 48MiB memory limit: {j}");
    assert_eq!(j["timed_out"], false, "{j}");
    assert!(!j["stderr"].as_str().unwrap().contains("No space left"), "{j}");
}

#[test]
fn grants_beneath_tmp_stay_visible() {
    require_root!("a daemon that can make mount namespaces");
    let w = work_dir();
    std::fs::write(w.path().join("input"), "granted content").unwrap();
    let d = Daemon::start(&[("t.toml", &policy(&[("reader", format!("read = [{}]", toml_str(w.path())))]))]);
    let j = sh(&d, "reader", &format!("cat {}/input; echo; echo \"$TMPDIR\"", w.path().display()));
    assert_eq!(j["exit_code"], 0, "{j}");
    let out = stdout(&j);
    assert!(out.starts_with("granted content\n/tmp/cordon-"), "{j}");
    // `cordon tool` says which temp space the tool gets.
    let shown = d.cordon(&["tool", "reader"]);
    assert!(shown.stdout.contains("temp") && shown.stdout.contains("beneath /tmp"), "{}", shown.stdout);
}

#[test]
fn python_multiprocessing_works_with_only_the_defaults() {
    require_root!("a daemon that can make mount namespaces");
    if !Path::new("/usr/bin/python3").exists() {
        cordon_tests::skip!(cordon_tests::Skip::MissingTool("/usr/bin/python3"), "no /usr/bin/python3");
        return;
    }
    let d = Daemon::start(&[(
        "t.toml",
        r#"version = 1
[tools.pool]
description = "a multiprocessing pool"
reason = "temp space tests"
command = ["/usr/bin/python3", "-c", "import multiprocessing as m; print(m.Pool(2).map(abs,[-1,-2]))"]
accept_warnings = ["interpreter-code"]
timeout = "30s"
"#,
    )]);
    let (out, j) = d.run_json("pool", &json!({}));
    assert_eq!(j["exit_code"], 0, "{out:?}");
    assert_eq!(stdout(&j), "[1, 2]\n", "{j}");
}

#[test]
fn policy_check_validates_temp() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("temp = \"big\"", "temp"),
        ("temp = { size = \"10KiB\" }", "temp.size must be at least 1MiB"),
        ("temp = { sise = \"10MiB\" }", "sise"),
        ("temp = { size = 5 }", "temp.size"),
    ];
    for (line, expect) in cases {
        let file = dir.path().join("p.toml");
        std::fs::write(&file, policy(&[("t", line.to_string())])).unwrap();
        let out = cordon_tests::cordon_at(Path::new("/nonexistent.sock"), &["policy", "check", file.to_str().unwrap()]);
        assert_ne!(out.code, Some(0), "{line} was accepted: {out:?}");
        assert!(out.stderr.contains(expect) || out.stdout.contains(expect), "{line}: {out:?}");
    }
    for line in ["temp = true", "temp = false", "temp = { size = \"64MiB\" }", "temp = {}"] {
        let file = dir.path().join("p.toml");
        std::fs::write(&file, policy(&[("t", line.to_string())])).unwrap();
        let out = cordon_tests::cordon_at(Path::new("/nonexistent.sock"), &["policy", "check", file.to_str().unwrap()]);
        assert_eq!(out.code, Some(0), "{line} was refused: {out:?}");
    }
}

/// A daemon that is not root, where the kernel allows unprivileged user namespaces: the tool's
/// temp space is the same private tmpfs, in the user namespace that carries its view.
#[test]
fn a_daemon_that_is_not_root_gives_private_temp_too() {
    cordon_tests::require_root!("to start the daemon as the test user");
    use cordon_tests::agent::AGENT;
    let userns = std::process::Command::new("setpriv")
        .args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--"])
        .args(["unshare", "--user", "--mount", "--map-current-user", "/bin/true"])
        .status()
        .is_ok_and(|s| s.success());
    if !userns {
        cordon_tests::skip!(
            cordon_tests::Skip::NoUserNamespaces,
            "this kernel refuses unprivileged user namespaces (the tool then gets a plain directory)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let uid = cordon_tests::agent::id("-u", AGENT);
    let gid = cordon_tests::agent::id("-g", AGENT);
    std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), policy(&[("private", String::new())])).unwrap();
    let d = Daemon::start_under(
        &["setpriv", "--reuid", AGENT, "--regid", AGENT, "--init-groups", "--"],
        dir,
        policies,
        &[],
    );
    let out = std::process::Command::new("setpriv")
        .args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--"])
        .arg(cordon_tests::bin("cordon"))
        .arg("--socket")
        .arg(&d.socket)
        .args(["run", "private", "--args-json", &json!({ "script": WRITE_AND_RUN }).to_string(), "--json"])
        .output()
        .unwrap();
    let j: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(j["exit_code"], 0, "{j}");
    assert!(stdout(&j).starts_with("tmpdir=/tmp\nran-from-temp\n"), "{j}");
    assert!(stdout(&j).trim_end().ends_with(&uid.to_string()), "{j}");
}

/// Issue 26, class 7: cordond's own TMPDIR that a tool's account cannot traverse. The startup log
/// says so; a call whose temp space must lie there (the tool relies on a path under /tmp, so it
/// gets no private /tmp) is refused for the agent user, naming the directory and the fix; root's
/// call (the directory's owner) runs.
#[test]
fn a_tmpdir_the_tools_account_cannot_traverse_is_refused_with_the_fix() {
    require_root!("a daemon that can make mount namespaces");
    cordon_tests::agent::ensure();
    let work = work_dir();
    let closed = work.path().join("closed");
    std::fs::create_dir(&closed).unwrap();
    std::fs::set_permissions(&closed, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let tmpdir = closed.join("tmp");
    std::fs::create_dir(&tmpdir).unwrap();
    let text = policy(&[(
        "under-tmp",
        format!("read = [{}]\nallow = {{ users = [\"{}\"] }}", toml_str(work.path()), cordon_tests::agent::AGENT),
    )]);
    let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), text).unwrap();
    let tmp_env = format!("TMPDIR={}", tmpdir.display());
    let d =
        Daemon::start_under(&["env", &tmp_env], dir, policies, &["--socket-group", cordon_tests::agent::SOCKET_GROUP]);
    assert!(
        eventually(std::time::Duration::from_secs(5), || d.log_text().contains(&format!(
            "cordond's TMPDIR {} cannot be traversed by other accounts ({} is mode 700)",
            tmpdir.display(),
            closed.display()
        ))),
        "{}",
        d.log_text()
    );
    let args = json!({ "script": "echo x > \"$TMPDIR/f\" && cat \"$TMPDIR/f\"" }).to_string();
    let out = cordon_tests::agent::cordon(&d.socket, &["run", "under-tmp", "--args-json", &args, "--json"]);
    let j = out.json();
    assert_eq!(j["error"]["code"], "SPAWN_FAILED", "{out:?}");
    let message = j["error"]["message"].as_str().unwrap_or_default();
    let uid = cordon_tests::agent::id("-u", cordon_tests::agent::AGENT);
    assert!(
        message.contains(&format!("uid {uid} cannot traverse {} (mode 700", closed.display()))
            && message.contains(&format!("cordond's temp dir {}", tmpdir.display()))
            && message.contains("start cordond with TMPDIR set to a directory"),
        "{message}"
    );
    let j = sh(&d, "under-tmp", "echo x > \"$TMPDIR/f\" && cat \"$TMPDIR/f\"");
    assert_eq!((j["ok"].clone(), stdout(&j)), (json!(true), "x\n"), "root owns the directory: {j}");
    // `cordon status` and `cordon doctor` say so too, for the agent who runs them, and stop
    // saying so once the directory is fixed (read when asked; no restart).
    let said = format!("cordond's TMPDIR {} cannot be traversed by other accounts", tmpdir.display());
    let status = cordon_tests::agent::cordon(&d.socket, &["status", "--json"]).json();
    assert!(status["setup_warnings"][0].as_str().unwrap_or_default().contains(&said), "{status:#}");
    let doctor = cordon_tests::agent::cordon(&d.socket, &["doctor", "--json"]).json();
    let setup: Vec<&serde_json::Value> =
        doctor["checks"].as_array().unwrap().iter().filter(|c| c["name"] == "setup").collect();
    assert!(setup.len() == 1 && setup[0]["level"] == "warn", "{doctor:#}");
    assert!(setup[0]["found"].as_str().unwrap_or_default().contains(&said), "{doctor:#}");
    let text = cordon_tests::agent::cordon(&d.socket, &["status"]);
    assert!(text.stdout.contains("set-up:") && text.stdout.contains(&said), "{text:?}");
    std::fs::set_permissions(&closed, std::os::unix::fs::PermissionsExt::from_mode(0o711)).unwrap();
    let status = d.cordon(&["status", "--json"]).json();
    assert!(status.get("setup_warnings").is_none(), "fixed, nothing to say: {status:#}");
}
