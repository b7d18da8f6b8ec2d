//! The real `cordond` on a temporary socket, driven by the real `cordon`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use cordon_tests::fixture;
use cordon_tests::{Daemon, bin, cordon_at, eventually, process_gone, wait_pending};
use nix::sys::signal::Signal;
use serde_json::json;

/// Tools the tests run. Absolute paths keep them independent of the daemon's PATH lookup.
const TOOLS: &str = concat!(
    fixture!(header "20s"),
    fixture!(echo),
    r#"
[tools.exit-with]
description = "exit with a code"
reason = "tests"
command = ["/bin/sh", "-c", "echo out; echo err >&2; exit \"$1\"", "sh", "{{code}}"]

[tools.exit-with.params.code]
type = "integer"
min = 0
max = 255
required = true
"#,
    fixture!(sleeper),
    r#"
[tools.stubborn]
description = "ignore SIGTERM"
reason = "tests"
command = ["/bin/sh", "-c", "trap '' TERM; echo $$ > \"$1\"; while :; do /bin/sleep 0.1; done", "sh", "{{pidfile}}"]
timeout = "1s"

[tools.stubborn.params.pidfile]
type = "path"
required = true

[tools.slow]
description = "sleep for a while"
reason = "tests"
command = ["/bin/sleep", "{{seconds}}"]

[tools.slow.params.seconds]
type = "integer"
min = 1
max = 60
default = 15

[tools.flood]
description = "write 1 GiB to stdout"
reason = "tests"
command = ["/usr/bin/head", "-c", "1073741824", "/dev/zero"]
max_output = "1MiB"
timeout = "5m"

[tools.env]
description = "print the environment"
reason = "tests"
command = ["/usr/bin/env"]
env = { FOO = "bar baz", LANG = "C" }
args_env_prefix = "ARG_"

[tools.env.params.count]
type = "integer"

[tools.env.params.name]
type = "string"

[tools.session]
description = "print stdin's target and the shell's /proc stat line"
reason = "tests"
command = ["/bin/sh", "-c", "readlink /proc/$$/fd/0; cat; cat /proc/$$/stat"]

[tools.signals]
description = "print the signal dispositions and mask the tool starts with"
reason = "tests"
command = ["/bin/grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"]
"#,
    fixture!(missing),
    fixture!(off),
);

fn daemon() -> Daemon {
    Daemon::start(&[("tools.toml", TOOLS)])
}

#[test]
fn run_prints_output_and_passes_the_exit_code_through() {
    let d = daemon();
    let out = d.cordon(&["run", "echo", "--arg", "text=hello world"]);
    out.assert_code(0);
    assert_eq!(out.stdout, "[hello world]");

    let out = d.cordon(&["run", "exit-with", "--arg", "code=7"]);
    out.assert_code(7);
    assert_eq!(out.stdout, "out\n");
    assert_eq!(out.stderr, "err\n");

    let (out, j) = d.run_json("exit-with", &json!({ "code": 3 }));
    out.assert_code(3);
    assert_eq!(j["exit_code"], 3);
    assert_eq!(j["signal"], json!(null));
    assert_eq!(j["timed_out"], false);
    assert_eq!(j["stdout"], "out\n");
    assert_eq!(j["stderr"], "err\n");
    assert_eq!(j["stdout_truncated"], false);
    assert_eq!(j["stderr_truncated"], false);
    assert!(j["duration_ms"].is_u64());
}

#[test]
fn shell_metacharacters_arrive_as_one_argument_byte_for_byte() {
    let d = daemon();
    for value in ["; $(id) | && > *", "`id`\n$HOME 'q' \"dq\" \\", "{{text}}", "a\tb  c"] {
        let (out, j) = d.run_json("echo", &json!({ "text": value }));
        out.assert_code(0);
        assert_eq!(j["stdout"], format!("[{value}]"), "value {value:?}");
        assert_eq!(j["argv"], json!(["/usr/bin/printf", "[%s]", value]));
    }
}

#[test]
fn rejected_calls_say_why_with_stable_codes() {
    let d = daemon();
    let (out, j) = d.run_json("ech", &json!({}));
    out.assert_code(66);
    assert_eq!(j["error"]["code"], "UNKNOWN_TOOL");
    assert!(j["error"]["message"].as_str().unwrap().contains("did you mean \"echo\""), "{j}");

    let (out, j) = d.run_json("exit-with", &json!({ "code": 256 }));
    out.assert_code(65);
    assert_eq!(j["error"]["code"], "INVALID_FIELD_VALUE");
    assert_eq!(j["error"]["field"], "code");
    assert_eq!(j["error"]["message"], "field \"code\": 256 is above the maximum 255");

    let (_, j) = d.run_json("exit-with", &json!({ "code": "1" }));
    assert_eq!(j["error"]["code"], "INVALID_FIELD_TYPE");
    let (_, j) = d.run_json("exit-with", &json!({ "code": null }));
    assert_eq!(j["error"]["code"], "INVALID_FIELD_TYPE");
    let (_, j) = d.run_json("exit-with", &json!({}));
    assert_eq!(j["error"]["code"], "MISSING_REQUIRED_FIELD");
    let (_, j) = d.run_json("exit-with", &json!({ "code": 1, "cod": 2 }));
    assert_eq!(j["error"]["code"], "UNKNOWN_FIELDS");
    assert!(j["error"]["message"].as_str().unwrap().contains("\"cod\""), "{j}");

    // Disabled tools are never exposed; unavailable ones say why.
    let (_, j) = d.run_json("off", &json!({}));
    assert_eq!(j["error"]["code"], "UNKNOWN_TOOL");
    let (out, j) = d.run_json("missing", &json!({}));
    out.assert_code(69);
    assert_eq!(j["error"]["code"], "TOOL_UNAVAILABLE");
    assert!(j["error"]["message"].as_str().unwrap().contains("does not exist"), "{j}");

    // Human-readable form, on stderr.
    let out = d.cordon(&["run", "exit-with", "--arg", "code"]);
    out.assert_code(2);
    assert!(out.stderr.contains("expected KEY=VALUE"), "{out:?}");
    let out = d.cordon(&["run", "exit-with", "--arg", "code=x"]);
    out.assert_code(65);
    assert!(out.stderr.contains("INVALID_FIELD_TYPE: field \"code\" must be an integer"), "{out:?}");
}

#[test]
fn timeout_kills_the_whole_process_group() {
    let d = daemon();
    let pidfile = d.dir.path().join("sleeper.pids");
    let started = Instant::now();
    let (out, j) = d.run_json("sleeper", &json!({ "pidfile": pidfile }));
    out.assert_code(124);
    assert_eq!(j["timed_out"], true, "{j}");
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    let pids = read_pids(&pidfile);
    assert_eq!(pids.len(), 2, "shell and background sleep: {pids:?}");
    for pid in pids {
        assert!(eventually(Duration::from_secs(5), || process_gone(pid)), "process {pid} survived the timeout");
    }
}

#[test]
fn a_process_ignoring_sigterm_is_killed_after_the_grace_period() {
    let d = daemon();
    let pidfile = d.dir.path().join("stubborn.pids");
    let (out, j) = d.run_json("stubborn", &json!({ "pidfile": pidfile }));
    out.assert_code(124);
    assert_eq!(j["timed_out"], true);
    assert_eq!(j["signal"], Signal::SIGKILL as i32, "{j}");
    let ms = j["duration_ms"].as_u64().unwrap();
    assert!(ms >= 3900, "SIGKILL came before timeout + grace: {ms} ms");
    for pid in read_pids(&pidfile) {
        assert!(eventually(Duration::from_secs(5), || process_gone(pid)), "process {pid} survived");
    }
}

#[test]
fn a_1gib_flood_is_capped_and_the_daemon_stays_small() {
    let d = daemon();
    let (out, j) = d.run_json("flood", &json!({}));
    out.assert_code(0);
    assert_eq!(j["stdout_truncated"], true);
    assert_eq!(j["stdout_total_bytes"], 1u64 << 30);
    let stdout = j["stdout"].as_str().unwrap();
    assert!(stdout.contains("[... cordon: 1072693248 bytes omitted ...]"), "marker missing");
    assert_eq!(stdout.len(), (1 << 20) + "\n[... cordon: 1072693248 bytes omitted ...]\n".len());
    let peak = d.peak_rss_kib();
    eprintln!("cordond peak RSS after a 1 GiB flood: {peak} KiB");
    assert!(peak < 64 * 1024, "cordond peak RSS grew to {peak} KiB");
}

#[test]
fn the_environment_is_clean() {
    let d = daemon();
    let (out, j) = d.run_json("env", &json!({ "count": 5, "name": "x y" }));
    out.assert_code(0);
    let mut keys: Vec<&str> =
        j["stdout"].as_str().unwrap().lines().filter_map(|l| l.split_once('=')).map(|(k, _)| k).collect();
    keys.sort_unstable();
    // TMPDIR names the invocation's private temp space.
    assert_eq!(keys, ["ARG_COUNT", "ARG_NAME", "FOO", "HOME", "LANG", "PATH", "TMPDIR", "TZ", "USER"]);
    let stdout = j["stdout"].as_str().unwrap();
    for line in [
        "FOO=bar baz",
        "LANG=C",
        "ARG_COUNT=5",
        "ARG_NAME=x y",
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ] {
        assert!(stdout.lines().any(|l| l == line), "missing {line:?} in {stdout}");
    }
}

/// A tool starts as from a fresh login: no signal ignored (cordond itself ignores SIGPIPE, as
/// every Rust program does, and an ignored signal survives exec), none blocked. (Handlers never
/// survive exec; grep installs its own SIGSEGV one, so SigCgt says nothing here.)
#[test]
fn tools_start_with_default_signal_dispositions() {
    let d = daemon();
    let (out, j) = d.run_json("signals", &json!({}));
    out.assert_code(0);
    let stdout = j["stdout"].as_str().unwrap();
    for field in ["SigIgn", "SigBlk"] {
        let line = stdout.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field}: {stdout}"));
        assert_eq!(line.split_whitespace().nth(1), Some("0000000000000000"), "{line}");
    }
}

#[test]
fn stdin_is_dev_null_and_the_child_leads_its_own_session() {
    let d = daemon();
    let (out, j) = d.run_json("session", &json!({}));
    out.assert_code(0);
    let stdout = j["stdout"].as_str().unwrap();
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("/dev/null"));
    let stat = lines.next().unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let pid = stat.split_whitespace().next().unwrap();
    // After the command name: state, ppid, pgrp, session.
    assert_eq!(fields[2], pid, "process group: {stat}");
    assert_eq!(fields[3], pid, "session: {stat}");
    assert_eq!(fields[1], d.pid().to_string().as_str(), "the shell is cordond's direct child: {stat}");
}

#[test]
fn a_broken_reload_keeps_the_previous_registry() {
    let d = daemon();
    let status = d.cordon(&["status", "--json"]).json();
    assert_eq!(status["generation"], 1);

    d.write_policy("broken.toml", "version = 1\n[tools.x]\ndescription = \"x\"\ncommand = []\n");
    let out = d.cordon(&["reload"]);
    out.assert_code(65);
    assert!(out.stderr.contains("broken.toml:4:11: `command` is empty"), "{out:?}");
    assert!(out.stdout.contains("generation 1"), "{out:?}");
    // The old tools still run.
    d.cordon(&["run", "echo", "--arg", "text=still here"]).assert_code(0);
    assert_eq!(d.cordon(&["status", "--json"]).json()["generation"], 1);

    // A good reload swaps in a new generation.
    d.write_policy(
        "broken.toml",
        "version = 1\n[tools.x]\ndescription = \"x\"\nreason = \"t\"\ncommand = [\"/bin/true\"]\n",
    );
    let out = d.cordon(&["reload", "--json"]);
    out.assert_code(0);
    assert_eq!(out.json()["generation"], 2);
    d.cordon(&["run", "x"]).assert_code(0);

    // SIGHUP reloads too.
    std::fs::remove_file(d.policies.join("broken.toml")).unwrap();
    d.signal(Signal::SIGHUP);
    assert!(
        eventually(Duration::from_secs(5), || d.cordon(&["status", "--json"]).json()["generation"] == 3),
        "SIGHUP did not reload"
    );
    assert_eq!(d.run_json("x", &json!({})).1["error"]["code"], "UNKNOWN_TOOL");
}

#[test]
fn without_a_queue_the_concurrency_limit_answers_busy_at_once() {
    // A full house queues calls (see the admission suite); with no queue, it answers at once.
    let d = Daemon::start_with(&[("tools.toml", TOOLS)], &["--max-concurrent", "1", "--queue-max", "0"]);
    let first = d.cordon_spawn(&["run", "slow", "--json"]);
    assert!(
        eventually(Duration::from_secs(10), || d.cordon(&["status", "--json"]).json()["running_invocations"] == 1),
        "first invocation never ran"
    );
    let started = Instant::now();
    let (out, j) = d.run_json("echo", &json!({ "text": "x" }));
    out.assert_code(75);
    assert_eq!(j["error"]["code"], "BUSY");
    assert!(j["error"]["message"].as_str().unwrap().contains("and 0 calls already wait"), "{j}");
    assert!(started.elapsed() < Duration::from_secs(5), "the refusal waited");

    let status = d.cordon(&["status", "--json"]).json();
    let id = status["running"][0]["invocation_id"].as_str().unwrap().to_string();
    assert_eq!(status["running"][0]["caller_uid"], nix::unistd::geteuid().as_raw());
    d.cordon(&["cancel", &id]).assert_code(0);
    let out = first.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["cancelled"], true);
    assert_eq!(j["signal"], Signal::SIGTERM as i32);
    // The slot is free again.
    d.cordon(&["run", "echo", "--arg", "text=x"]).assert_code(0);
    d.cordon(&["cancel", &id]).assert_code(66);
}

#[test]
fn a_client_that_goes_away_cancels_its_invocation() {
    let d = daemon();
    let mut client = d.cordon_spawn(&["run", "slow", "--json"]);
    assert!(eventually(Duration::from_secs(10), || d.cordon(&["status", "--json"]).json()["running_invocations"] == 1));
    client.kill().unwrap();
    client.wait().unwrap();
    assert!(
        eventually(Duration::from_secs(10), || d.cordon(&["status", "--json"]).json()["running_invocations"] == 0),
        "the invocation outlived its client"
    );
}

#[test]
fn sigterm_stops_the_daemon_cancels_stragglers_and_removes_the_socket() {
    let mut d = Daemon::start_with(&[("tools.toml", TOOLS)], &["--shutdown-grace", "1s"]);
    let client = d.cordon_spawn(&["run", "slow", "--json"]);
    assert!(eventually(Duration::from_secs(10), || d.cordon(&["status", "--json"]).json()["running_invocations"] == 1));
    d.signal(Signal::SIGTERM);
    let status = d.wait_exit(Duration::from_secs(15)).expect("cordond did not stop");
    assert!(status.success(), "{status}: {}", d.log_text());
    assert!(!d.socket.exists(), "socket left behind");
    let out = client.wait_with_output().unwrap();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["cancelled"], true, "{j}");
}

#[test]
fn the_socket_path_is_never_a_symlink_nor_someone_elses_file() {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("p");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), TOOLS).unwrap();
    let run = |socket: &Path| {
        std::process::Command::new(cordon_tests::bin("cordond"))
            .arg("--policies")
            .arg(&policies)
            .arg("--socket")
            .arg(socket)
            .arg("--audit")
            .arg(dir.path().join("audit.jsonl"))
            .output()
            .unwrap()
    };
    let link = dir.path().join("link.sock");
    std::os::unix::fs::symlink(dir.path().join("elsewhere"), &link).unwrap();
    let out = run(&link);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a symlink"), "{out:?}");

    let file = dir.path().join("file.sock");
    std::fs::write(&file, "precious").unwrap();
    let out = run(&file);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a socket"), "{out:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious");

    // A live daemon's socket is not taken over; a stale one is replaced.
    let d = daemon();
    let out = run(&d.socket);
    assert!(String::from_utf8_lossy(&out.stderr).contains("already listening"), "{out:?}");
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let mut child = std::process::Command::new(cordon_tests::bin("cordond"))
        .arg("--policies")
        .arg(&policies)
        .arg("--socket")
        .arg(&stale)
        .arg("--audit")
        .arg(dir.path().join("audit.jsonl"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ok = eventually(Duration::from_secs(10), || cordon_at(&stale, &["status"]).code == Some(0));
    let _ = child.kill();
    let _ = child.wait();
    assert!(ok, "cordond did not replace a stale socket");
}

#[test]
fn the_socket_is_private_to_the_daemons_user() {
    use std::os::unix::fs::PermissionsExt;
    let d = daemon();
    let mode = std::fs::metadata(&d.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn clients_say_how_to_start_a_daemon_that_is_not_running() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("none.sock");
    let out = cordon_at(&socket, &["status"]);
    out.assert_code(69);
    assert!(out.stderr.contains("cordond is not running at"), "{out:?}");
    assert!(out.stderr.contains("cordond --policies DIR --socket"), "{out:?}");
    let out = cordon_at(&socket, &["run", "x", "--json"]);
    out.assert_code(69);
    assert_eq!(out.json()["error"]["code"], "DAEMON_NOT_RUNNING");
}

#[test]
fn a_broken_policy_stops_startup_with_every_diagnostic() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.toml"),
        "version = 1\n[tools.Bad]\ndescription = \"x\"\ncommand = [\"{{a}}\"]\ntimeout = 5\n",
    )
    .unwrap();
    let out = std::process::Command::new(cordon_tests::bin("cordond"))
        .arg("--policies")
        .arg(dir.path())
        .arg("--socket")
        .arg(dir.path().join("s.sock"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad.toml:2:8: invalid tool name \"Bad\""), "{stderr}");
    assert!(stderr.contains("bad.toml:5:11: `timeout` must be a duration string"), "{stderr}");
    assert!(stderr.contains("bad.toml:4:12: placeholder {{a}} in command[0] has no param"), "{stderr}");
    assert!(!dir.path().join("s.sock").exists());
}

#[test]
fn tools_and_tool_describe_the_registry() {
    let d = daemon();
    let out = d.cordon(&["tools"]);
    out.assert_code(0);
    assert!(out.stdout.lines().next().unwrap().starts_with("NAME"));
    assert!(out.stdout.contains("echo") && out.stdout.contains("text:string"), "{out:?}");
    assert!(!out.stdout.contains("missing"), "unavailable tools are hidden by default");
    let all = d.cordon(&["tools", "--all"]);
    assert!(all.stdout.contains("unavailable") && all.stdout.contains("disabled"), "{all:?}");

    let j = d.cordon(&["tools", "--json"]).json();
    let names: Vec<&str> = j["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"echo") && !names.contains(&"off"));

    let j = d.cordon(&["tool", "exit-with", "--json"]).json();
    assert_eq!(j["input_schema"]["$schema"], "https://json-schema.org/draft/2020-12/schema");
    assert_eq!(j["input_schema"]["properties"]["code"]["maximum"], 255);
    assert_eq!(j["input_schema"]["required"], json!(["code"]));
    assert_eq!(j["input_schema"]["additionalProperties"], false);
    let out = d.cordon(&["tool", "ech"]);
    out.assert_code(66);
    assert!(out.stderr.contains("did you mean \"echo\""), "{out:?}");
}

#[test]
fn policy_check_runs_offline_with_the_daemons_rules() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/examples");
    let out = cordon_at(Path::new("/nonexistent.sock"), &["policy", "check", examples.to_str().unwrap()]);
    out.assert_code(0);
    assert!(out.stdout.starts_with("ok: "), "{out:?}");

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "version = 1\n[tools.a]\ndescription = \"a\"\ncomand = [\"ls\"]\n").unwrap();
    let out = cordon_at(Path::new("/nonexistent.sock"), &["policy", "check", bad.to_str().unwrap()]);
    out.assert_code(65);
    let expected = format!("{}:4:1: unknown key \"comand\" in [tools.a]; did you mean \"command\"?", bad.display());
    assert!(out.stderr.contains(&expected), "{out:?}");
}

fn read_pids(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| l.trim().parse().unwrap()).collect()
}

#[test]
fn health_and_reflection_answer_on_the_socket() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let d = daemon();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let channel = cordon_proto::connect(&d.socket).await.unwrap();
        let health = HealthClient::new(channel.clone())
            .check(HealthCheckRequest { service: "cordon.v1.Cordon".into() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(health.status(), ServingStatus::Serving);

        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut stream = ServerReflectionClient::new(channel)
            .server_reflection_info(tokio_stream::iter([request]))
            .await
            .unwrap()
            .into_inner();
        let response = stream.message().await.unwrap().unwrap();
        let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
            panic!("unexpected reflection answer: {response:?}");
        };
        let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
        assert!(names.contains(&"cordon.v1.Cordon".to_string()), "{names:?}");
        assert!(names.contains(&"grpc.health.v1.Health".to_string()), "{names:?}");
    });
}

const CONFIRM_TOOLS: &str = concat!(fixture!(header "20s"), fixture!(guarded), fixture!(approved),);

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map(|s| s.lines().count()).unwrap_or(0)
}

#[test]
fn an_agent_confirmation_token_runs_the_exact_invocation_once() {
    let d = Daemon::start(&[("c.toml", CONFIRM_TOOLS)]);
    let file = d.dir.path().join("log.txt");
    let (out, j) = d.run_json("guarded", &json!({ "file": file, "text": "hello there" }));
    out.assert_code(3);
    let c = &j["confirmation_required"];
    assert_eq!(c["mode"], "agent");
    let description = c["description"].as_str().unwrap();
    assert!(description.contains("'hello there'") && description.contains(file.to_str().unwrap()), "{description}");
    assert_eq!(lines(&file), 0, "nothing may run before the confirmation");
    let token = c["token"].as_str().unwrap().to_string();
    assert_eq!(token.len(), 64, "32 random bytes, hex");

    // An altered token is refused, and does not use up the real one.
    let mut altered = token.clone();
    altered.replace_range(0..1, if token.starts_with('0') { "1" } else { "0" });
    let out = d.cordon(&["confirm", &altered, "--json"]);
    assert_eq!(out.json()["error"]["code"], "CONFIRMATION_INVALID");

    let out = d.cordon(&["confirm", &token, "--json"]);
    out.assert_code(0);
    assert_eq!(out.json()["stdout"], "done\n");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hello there\n");

    // Replay.
    let out = d.cordon(&["confirm", &token, "--json"]);
    assert_eq!(out.json()["error"]["code"], "CONFIRMATION_INVALID");
    assert_eq!(lines(&file), 1);
}

#[test]
fn a_concurrent_double_redeem_runs_once() {
    let d = Daemon::start(&[("c.toml", CONFIRM_TOOLS)]);
    let file = d.dir.path().join("log.txt");
    for _ in 0..5 {
        let (_, j) = d.run_json("guarded", &json!({ "file": file, "text": "x" }));
        let token = j["confirmation_required"]["token"].as_str().unwrap().to_string();
        let racers: Vec<_> = (0..4).map(|_| d.cordon_spawn(&["confirm", &token, "--json"])).collect();
        let codes: Vec<Option<i32>> = racers.into_iter().map(|c| c.wait_with_output().unwrap().status.code()).collect();
        assert_eq!(codes.iter().filter(|c| **c == Some(0)).count(), 1, "{codes:?}");
    }
    assert_eq!(lines(&file), 5);
}

#[test]
fn expired_and_stale_confirmations_are_refused() {
    let d = Daemon::start_with(&[("c.toml", CONFIRM_TOOLS)], &["--confirm-ttl", "1s"]);
    let file = d.dir.path().join("log.txt");
    let (_, j) = d.run_json("guarded", &json!({ "file": file, "text": "x" }));
    let token = j["confirmation_required"]["token"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_millis(1300));
    assert_eq!(d.cordon(&["confirm", &token, "--json"]).json()["error"]["code"], "CONFIRMATION_EXPIRED");

    // A reload between the request and the confirmation invalidates it.
    let (_, j) = d.run_json("guarded", &json!({ "file": file, "text": "x" }));
    let token = j["confirmation_required"]["token"].as_str().unwrap().to_string();
    d.cordon(&["reload"]).assert_code(0);
    assert_eq!(d.cordon(&["confirm", &token, "--json"]).json()["error"]["code"], "POLICY_CHANGED");
    assert_eq!(lines(&file), 0);
}

#[test]
fn a_human_approval_lets_the_invocation_run() {
    let d = Daemon::start(&[("c.toml", CONFIRM_TOOLS)]);
    let run = d.cordon_spawn(&["run", "approved", "--arg", "text=yes", "--json"]);
    let p = wait_pending(&d.socket);
    assert_eq!(p["tool"], "approved");
    assert_eq!(p["argv"], json!(["/usr/bin/printf", "[%s]", "yes"]));
    assert_eq!(p["caller_uid"], nix::unistd::geteuid().as_raw());
    let id = p["approval_id"].as_str().unwrap().to_string();
    d.cordon(&["approve", &id]).assert_code(0);
    let out = run.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["stdout"], "[yes]");
    assert_eq!(d.cordon(&["pending", "--json"]).json()["pending"], json!([]));
    // Approving twice, or an unknown id, says so.
    let out = d.cordon(&["approve", &id]);
    assert_eq!(out.code, Some(66), "{out:?}");
    assert!(out.stderr.contains("UNKNOWN_APPROVAL"), "{out:?}");
}

#[test]
fn a_denied_or_expired_approval_never_runs() {
    let d = Daemon::start_with(&[("c.toml", CONFIRM_TOOLS)], &["--approval-timeout", "3s"]);
    let run = d.cordon_spawn(&["run", "approved", "--arg", "text=no", "--json"]);
    let id = wait_pending(&d.socket)["approval_id"].as_str().unwrap().to_string();
    d.cordon(&["deny", &id]).assert_code(0);
    let out = run.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["error"]["code"], "APPROVAL_DENIED");

    let started = Instant::now();
    let out = d.cordon(&["run", "approved", "--arg", "text=late", "--json"]);
    assert_eq!(out.code, Some(124), "{out:?}");
    assert_eq!(out.json()["error"]["code"], "APPROVAL_TIMEOUT");
    assert!(started.elapsed() >= Duration::from_secs(3));
}

#[test]
fn closing_stdin_of_cordon_mcp_cancels_its_running_calls_at_once() {
    use std::io::{BufRead as _, Write as _};
    let d = daemon();
    let mut mcp = std::process::Command::new(cordon_tests::bin("cordon"))
        .arg("--socket")
        .arg(&d.socket)
        .arg("mcp")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = mcp.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(mcp.stdout.take().unwrap());
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "0" } } });
    writeln!(stdin, "{init}").unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    writeln!(stdin, "{}", json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })).unwrap();
    let call = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": { "name": "slow", "arguments": { "seconds": 30 } } });
    writeln!(stdin, "{call}").unwrap();
    let running = || d.cordon(&["status", "--json"]).json()["running_invocations"].as_u64().unwrap();
    assert!(eventually(Duration::from_secs(10), || running() == 1), "the call never started");
    drop(stdin);
    let closed = Instant::now();
    assert!(eventually(Duration::from_secs(5), || running() == 0), "the invocation outlived the closed session");
    assert!(closed.elapsed() < Duration::from_secs(2), "cancelling took {:?}", closed.elapsed());
    assert!(mcp.wait().unwrap().success());
}

#[test]
fn one_caller_cannot_take_every_slot_and_oversized_requests_are_refused_unread() {
    // Over its limit, a caller's calls queue, up to its share of the queue (none here).
    let d = Daemon::start_with(&[("tools.toml", TOOLS)], &["--max-per-caller", "1", "--queue-max-per-caller", "0"]);
    let first = d.cordon_spawn(&["run", "slow", "--json"]);
    assert!(eventually(Duration::from_secs(10), || d.cordon(&["status", "--json"]).json()["running_invocations"] == 1));
    let (out, j) = d.run_json("echo", &json!({ "text": "x" }));
    out.assert_code(75);
    assert_eq!(j["error"]["code"], "BUSY");
    assert!(j["error"]["message"].as_str().unwrap().contains("as many as one caller may queue (it may run 1"), "{j}");
    let id = d.cordon(&["status", "--json"]).json()["running"][0]["invocation_id"].as_str().unwrap().to_string();
    d.cordon(&["cancel", &id]).assert_code(0);
    first.wait_with_output().unwrap();

    // A 10 MiB argument never reaches validation.
    let started = || d.audit_records().iter().filter(|r| r["decision"] == "started").count();
    let before = started();
    let huge = json!({ "text": "a".repeat(10 * 1024 * 1024) }).to_string();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let status = rt.block_on(async {
        let channel = cordon_proto::connect(&d.socket).await.unwrap();
        let mut client = cordon_proto::v1::cordon_client::CordonClient::new(channel);
        let request = cordon_proto::v1::InvokeRequest {
            tool: "echo".into(),
            arguments_json: huge,
            stream_output: false,
            learn: Vec::new(),
        };
        client.invoke(request).await.map(drop).unwrap_err()
    });
    assert!(status.message().contains("too large"), "{status:?}");
    assert_eq!(started(), before, "an oversized call must not run");
}

/// `--version` names the binary and the commit it was built from: the same text as this test's
/// own build of cordon-proto (one `cargo build` builds both), and, in a git checkout, a commit
/// that exists in it.
#[test]
fn version_names_the_binary_and_the_commit() {
    let commit = cordon_proto::VERSION
        .strip_prefix(&format!("{} (commit ", env!("CARGO_PKG_VERSION")))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("unexpected version text {:?}", cordon_proto::VERSION));
    // A clone has a .git directory, a linked worktree a .git file: both name the commit.
    let in_git = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.git")).exists();
    if in_git {
        assert!(commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit()), "{commit:?}");
        let known = Command::new("git")
            .args(["-C", env!("CARGO_MANIFEST_DIR"), "cat-file", "-e", &format!("{commit}^{{commit}}")])
            .status();
        if let Ok(known) = known {
            assert!(known.success(), "{commit} is not a commit of this checkout");
        }
    }
    for name in ["cordond", "cordon"] {
        let out = Command::new(bin(name)).arg("--version").output().unwrap();
        assert!(out.status.success());
        let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert_eq!(line, format!("{name} {}", cordon_proto::VERSION), "rebuild the binaries: cargo build --workspace");
    }
}

/// `cordon` installed without `cordond` beside it or on PATH: `policy check` still checks the
/// files and says availability was not checked (exit 0 on a good file); `doctor` fails its host
/// check and says what to install.
#[test]
fn a_cordon_without_cordond_says_what_it_could_not_check() {
    let dir = tempfile::tempdir().unwrap();
    let alone = dir.path().join("cordon");
    std::fs::copy(bin("cordon"), &alone).unwrap();
    let policy = dir.path().join("tools.toml");
    std::fs::write(&policy, concat!(fixture!(header "20s"), fixture!(echo))).unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(&alone).args(args).env("PATH", "/nonexistent").output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, stdout, stderr) = run(&["policy", "check", policy.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let all = format!("{stdout}{stderr}");
    assert!(all.contains("availability was not checked against this host: cordond was not found"), "{all}");
    let (code, stdout, _) = run(&["--socket", "/nonexistent.sock", "doctor", "--json"]);
    assert_eq!(code, Some(1));
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let host = json["checks"].as_array().unwrap().iter().find(|c| c["name"] == "host").cloned().unwrap();
    assert_eq!(host["level"], "fail", "{json:#}");
    assert!(host["found"].as_str().unwrap().contains("install both binaries together"), "{json:#}");
}
