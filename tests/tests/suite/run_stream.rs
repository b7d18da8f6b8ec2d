//! `cordon run` talks while the tool works: stdout and stderr arrive live, each on its own
//! stream, in the order the tool wrote them; losslessly for a reader that falls behind (the
//! tool waits, and the result fills in what the live view did not carry); within the tool's
//! output cap exactly as the result; Ctrl-C cancels the invocation. `--json` stays one object.
//! The daemon side is checked on the wire too: chunks carry their offset, start at 0, follow
//! each other, never pass the head of the cap, and a client that does not read holds the tool.

use std::io::{BufReader, Read as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cordon_proto::v1;
use cordon_tests::agent::{self, SOCKET_GROUP};
use cordon_tests::{Daemon, bin, eventually, process_gone, require_root, wait_pending};
use serde_json::json;

const TOOLS: &str = r#"
version = 1

[defaults]
timeout = "60s"
write = ["/tmp"]
allow = { users = ["cordon-t-agent"] }

# Writes a line to one stream, then waits for DIR/goN before the next: the test answers only
# once it has read the line, so the order is the tool's, whatever the timing.
[tools.handshake]
description = "alternate stdout and stderr, one step per file the caller creates"
reason = "tests"
command = ["/bin/sh", "-c", """
d=$1
w() { while [ ! -e "$d/go$1" ]; do /bin/sleep 0.02; done; }
echo out1; w 1; echo err1 >&2; w 2; echo out2; w 3; echo err2 >&2; w 4; printf 'out3, no newline'
""", "sh", "{{dir}}"]

[tools.handshake.params.dir]
type = "path"
required = true

# About 4.8 MB, inside the head of its cap (5 MiB): all of it may go live.
[tools.big]
description = "print the numbers 1 to 700000, recording its pid first"
reason = "tests"
command = ["/bin/sh", "-c", "echo $$ > \"$1/pid\"; exec /usr/bin/seq 1 700000", "sh", "{{dir}}"]
max_output = "10MiB"

[tools.big.params.dir]
type = "path"
required = true

[tools.capped]
description = "print far more than its cap"
reason = "tests"
command = ["/usr/bin/seq", "1", "100000"]
max_output = "1KiB"

# Between half its cap and its cap: the first half goes live, the rest comes with the result.
[tools.mid]
description = "print a little more than half its cap"
reason = "tests"
command = ["/usr/bin/seq", "1", "100000"]
max_output = "1MiB"

[tools.hang]
description = "record its pids, say so, and sleep in the foreground and the background"
reason = "tests"
command = ["/bin/sh", "-c", "echo $$ > \"$1/pids\"; /bin/sleep 1000 & echo $! >> \"$1/pids\"; echo started; wait", "sh", "{{dir}}"]

[tools.hang.params.dir]
type = "path"
required = true

[tools.pause]
description = "print, wait for DIR/go1, print"
reason = "tests"
command = ["/bin/sh", "-c", "echo begin; while [ ! -e \"$1/go1\" ]; do /bin/sleep 0.02; done; echo end", "sh", "{{dir}}"]

[tools.pause.params.dir]
type = "path"
required = true

[tools.careful]
description = "as pause, after an agent confirmation"
reason = "tests"
command = ["/bin/sh", "-c", "echo begin; while [ ! -e \"$1/go1\" ]; do /bin/sleep 0.02; done; echo end", "sh", "{{dir}}"]
confirm = "agent"

[tools.careful.params.dir]
type = "path"
required = true

[tools.approved]
description = "as pause, after a human approval"
reason = "tests"
command = ["/bin/sh", "-c", "echo begin; while [ ! -e \"$1/go1\" ]; do /bin/sleep 0.02; done; echo end", "sh", "{{dir}}"]
confirm = "human"
danger = "high"

[tools.approved.params.dir]
type = "path"
required = true

[tools.flood]
description = "write y lines until killed"
reason = "tests"
command = ["/usr/bin/yes"]
max_output = "1MiB"
timeout = "2s"

[tools.nap]
description = "print, sleep 3 s, print"
reason = "tests"
command = ["/bin/sh", "-c", "echo begin; /bin/sleep 3; echo end"]

[tools.both]
description = "two lines out, one err, exit 3"
reason = "tests"
command = ["/bin/sh", "-c", "printf 'a\\nb\\n'; printf 'e\\n' >&2; exit 3"]
"#;

fn start() -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), TOOLS).unwrap();
    Daemon::start_in(dir, policies, &["--socket-group", SOCKET_GROUP])
}

/// A directory the tool (root or the agent) can write into and the test can read.
fn shared_dir(d: &Daemon, name: &str) -> PathBuf {
    let p = d.dir.path().join(name);
    std::fs::create_dir(&p).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
    p
}

fn dir_arg(dir: &Path) -> String {
    json!({ "dir": dir }).to_string()
}

/// `cordon run TOOL ARGS...`, as root or as the agent user, with stdout and stderr piped.
fn spawn_run(d: &Daemon, as_agent: bool, args: &[&str]) -> Child {
    let mut c = if as_agent { agent::command() } else { Command::new(bin("cordon")) };
    c.arg("--socket").arg(&d.socket).arg("run").args(args);
    c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

fn read_line(r: &mut impl std::io::BufRead) -> String {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    line
}

fn go(dir: &Path, n: u32) {
    std::fs::write(dir.join(format!("go{n}")), "").unwrap();
}

/// The tool waits for `go1` after its first line: it can only exit 0 if that line reached the
/// reader of `cordon run`'s stdout while the tool was still running (else the timeout ends it).
#[test]
fn live_output_reaches_the_reader_while_the_tool_still_runs() {
    require_root!();
    let d = start();
    let dir = shared_dir(&d, "hs");
    let mut run = spawn_run(&d, false, &["handshake", "--args-json", &dir_arg(&dir)]);
    let mut out = BufReader::new(run.stdout.take().unwrap());
    let mut err = BufReader::new(run.stderr.take().unwrap());
    assert_eq!(read_line(&mut out), "out1\n");
    go(&dir, 1);
    assert_eq!(read_line(&mut err), "err1\n", "stderr goes to stderr, live");
    go(&dir, 2);
    assert_eq!(read_line(&mut out), "out2\n");
    go(&dir, 3);
    assert_eq!(read_line(&mut err), "err2\n");
    go(&dir, 4);
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "out3, no newline", "a last partial line, once");
    let mut err_rest = String::new();
    err.read_to_string(&mut err_rest).unwrap();
    assert_eq!(err_rest, "", "nothing printed twice, no summary for a clean exit");
    assert_eq!(run.wait().unwrap().code(), Some(0));
}

/// `cordon run ... 2>&1`: one pipe shows the tool's writes to both streams in its order.
#[test]
fn stdout_and_stderr_interleave_on_one_pipe_in_the_order_the_tool_wrote_them() {
    require_root!();
    let d = start();
    let dir = shared_dir(&d, "hs");
    let (reader, writer) = std::io::pipe().unwrap();
    let mut run = Command::new(bin("cordon"))
        .arg("--socket")
        .arg(&d.socket)
        .args(["run", "handshake", "--args-json", &dir_arg(&dir)])
        .stdin(Stdio::null())
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .spawn()
        .unwrap();
    let mut both = BufReader::new(reader);
    let mut seen = Vec::new();
    for n in 1..=4 {
        seen.push(read_line(&mut both));
        go(&dir, n);
    }
    let status = run.wait().unwrap();
    let mut rest = String::new();
    both.read_to_string(&mut rest).unwrap();
    seen.push(rest);
    assert_eq!(seen, ["out1\n", "err1\n", "out2\n", "err2\n", "out3, no newline"]);
    assert_eq!(status.code(), Some(0));
}

/// Whether a thread of `pid` sleeps writing into a full pipe.
fn writing_into_full_pipe(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().any(|t| std::fs::read_to_string(t.path().join("wchan")).is_ok_and(|w| w.contains("pipe_write")))
}

fn numbers(n: u32) -> Vec<u8> {
    (1..=n).map(|i| format!("{i}\n")).collect::<String>().into_bytes()
}

/// The test does not read `cordon run`'s stdout until cordon itself is stuck writing to it
/// (the pipe is full, so everything behind it waits), then reads it all: every byte is there.
fn slow_reader(as_agent: bool) {
    let d = start();
    let dir = shared_dir(&d, "big");
    let mut run = spawn_run(&d, as_agent, &["big", "--args-json", &dir_arg(&dir)]);
    let pid = run.id();
    assert!(
        eventually(Duration::from_secs(30), || writing_into_full_pipe(pid)),
        "cordon run never waited on its stdout"
    );
    let mut err = run.stderr.take().unwrap();
    let mut stdout = Vec::new();
    run.stdout.take().unwrap().read_to_end(&mut stdout).unwrap();
    let mut stderr = String::new();
    err.read_to_string(&mut stderr).unwrap();
    assert_eq!(run.wait().unwrap().code(), Some(0), "{stderr}");
    let expected = numbers(700_000);
    assert_eq!(stdout.len(), expected.len(), "{stderr}");
    assert!(stdout == expected, "the bytes differ from the tool's output");
    assert_eq!(stderr, "");
}

#[test]
fn a_slow_reader_gets_every_byte_as_root() {
    require_root!();
    slow_reader(false);
}

#[test]
fn a_slow_reader_gets_every_byte_as_the_agent_user() {
    require_root!();
    slow_reader(true);
}

/// Over the cap: what `cordon run` prints is exactly the result's bytes (head, the notice, the
/// tail), as `--json` carries them; the live part never passed the head (see the wire test).
#[test]
fn output_over_the_cap_prints_exactly_the_capped_result() {
    require_root!();
    let d = start();
    let live = d.cordon(&["run", "capped"]);
    live.assert_code(0);
    let (json_out, j) = d.run_json("capped", &json!({}));
    json_out.assert_code(0);
    assert_eq!(j["stdout_truncated"], true);
    assert_eq!(live.stdout, j["stdout"].as_str().unwrap());
    let total = numbers(100_000).len();
    let omitted = total - 1024;
    assert!(live.stdout.starts_with("1\n2\n3\n"), "{}", live.stdout);
    assert!(live.stdout.contains(&format!("\n[... cordon: {omitted} bytes omitted ...]\n")), "{}", live.stdout);
    assert!(live.stdout.ends_with("99999\n100000\n"), "{}", live.stdout);
    assert_eq!(
        live.stderr,
        format!("cordon: stdout truncated: the tool wrote {total} bytes and the middle was cut\n"),
        "the notice once, nothing else"
    );
}

/// Output past the live head but within the cap: the live part and the rest from the result
/// join without a gap or a repeat.
#[test]
fn output_past_the_live_head_is_completed_from_the_result() {
    require_root!();
    let d = start();
    let out = d.cordon(&["run", "mid"]);
    out.assert_code(0);
    assert!(out.stdout.as_bytes() == numbers(100_000), "{} bytes", out.stdout.len());
    assert_eq!(out.stderr, "");
}

/// Ctrl-C: cordond cancels the invocation (its whole process group dies), the audit says so,
/// and `cordon run` exits 130 (docs/exit-codes.md: cancelled).
fn ctrl_c(as_agent: bool) {
    let d = start();
    let dir = shared_dir(&d, "hang");
    let mut run = spawn_run(&d, as_agent, &["hang", "--args-json", &dir_arg(&dir)]);
    let mut out = BufReader::new(run.stdout.take().unwrap());
    assert_eq!(read_line(&mut out), "started\n");
    let pids: Vec<i32> =
        std::fs::read_to_string(dir.join("pids")).unwrap().lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|p| !process_gone(*p)));
    // As the agent, `cordon` runs under setpriv, which execs it: the same pid.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(i32::try_from(run.id()).unwrap()), nix::sys::signal::SIGINT)
        .unwrap();
    let mut stderr = String::new();
    run.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert_eq!(run.wait().unwrap().code(), Some(130), "{stderr}");
    assert!(stderr.contains("cordon: cancelling hang"), "{stderr}");
    assert!(stderr.contains("cordon: hang was cancelled"), "{stderr}");
    for p in &pids {
        assert!(eventually(Duration::from_secs(10), || process_gone(*p)), "tool pid {p} survived Ctrl-C");
    }
    let uid = if as_agent { agent::id("-u", agent::AGENT) } else { 0 };
    let records = d.audit_records();
    let cancelled: Vec<_> = records.iter().filter(|r| r["decision"] == "cancelled").collect();
    assert_eq!(cancelled.len(), 1, "{records:#?}");
    assert_eq!(cancelled[0]["tool"], "hang");
    assert_eq!(cancelled[0]["cancelled_by"]["by"], "caller");
    assert_eq!(cancelled[0]["cancelled_by"]["caller"]["uid"], uid);
}

#[test]
fn ctrl_c_cancels_the_invocation_and_kills_its_group_as_root() {
    require_root!();
    ctrl_c(false);
}

#[test]
fn ctrl_c_cancels_the_invocation_and_kills_its_group_as_the_agent_user() {
    require_root!();
    ctrl_c(true);
}

/// `--json` is one object at the end with both streams in it, nothing live; without it, the
/// same bytes on the two streams and the same exit code.
#[test]
fn json_output_stays_one_result_object() {
    require_root!();
    let d = start();
    let out = d.cordon(&["run", "both", "--json"]);
    out.assert_code(3);
    assert_eq!(out.stderr, "");
    let j: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        (j["stdout"].as_str(), j["stderr"].as_str(), j["exit_code"].as_i64()),
        (Some("a\nb\n"), Some("e\n"), Some(3))
    );
    let plain = d.cordon(&["run", "both"]);
    plain.assert_code(3);
    assert_eq!((plain.stdout.as_str(), plain.stderr.as_str()), ("a\nb\n", "e\n"));
}

/// A gRPC client whose HTTP/2 windows are the protocol's minimum, so that what it does not
/// read stays in cordond.
async fn small_window_client(socket: &Path) -> v1::cordon_client::CordonClient<tonic::transport::Channel> {
    let socket = socket.to_path_buf();
    let channel = tonic::transport::Endpoint::from_static("http://cordon.invalid")
        .initial_stream_window_size(65_535)
        .initial_connection_window_size(65_535)
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move { cordon_proto::connect_trusted(&socket).await.map(hyper_util::rt::TokioIo::new) }
        }))
        .await
        .unwrap();
    // The result of `big` is larger than tonic's default limit of 4 MiB a message.
    v1::cordon_client::CordonClient::new(channel).max_decoding_message_size(64 << 20)
}

/// Every chunk of a finished invocation, and its `finished`.
async fn rest_of(events: &mut tonic::Streaming<v1::InvokeEvent>, chunks: &mut Vec<v1::OutputChunk>) -> v1::Finished {
    while let Some(e) = events.message().await.unwrap() {
        match e.event {
            Some(v1::invoke_event::Event::Output(c)) => chunks.push(c),
            Some(v1::invoke_event::Event::Finished(f)) => return f,
            _ => {}
        }
    }
    panic!("no finished event");
}

/// The chunks of one stream, checked to start at 0 and follow each other; their bytes.
fn contiguous(chunks: &[v1::OutputChunk], stream: v1::output_chunk::Stream) -> Vec<u8> {
    let mut bytes = Vec::new();
    for c in chunks.iter().filter(|c| c.stream() == stream) {
        assert_eq!(c.offset, bytes.len() as u64, "a chunk out of place");
        bytes.extend_from_slice(&c.data);
    }
    bytes
}

#[test]
fn live_chunks_follow_each_other_and_stop_at_the_head_of_the_cap() {
    require_root!();
    let d = start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut client = small_window_client(&d.socket).await;
        let request = v1::InvokeRequest {
            tool: "capped".into(),
            arguments_json: "{}".into(),
            stream_output: true,
            learn: Vec::new(),
        };
        let mut events = client.invoke(request).await.unwrap().into_inner();
        let mut chunks = Vec::new();
        let finished = rest_of(&mut events, &mut chunks).await;
        let live = contiguous(&chunks, v1::output_chunk::Stream::Stdout);
        assert!(finished.stdout_truncated);
        // 1 KiB cap: the head is its first 512 bytes, and that is what went live.
        assert_eq!(live.len(), 512);
        assert_eq!(live[..], finished.stdout[..512]);
        assert!(contiguous(&chunks, v1::output_chunk::Stream::Stderr).is_empty());
    });
}

/// A client that does not read: the tool is held in `write` (it never gets ahead of the
/// client by more than the buffers on the way); once the client reads, the output arrives live,
/// all of it but at most what the tool left in its pipe at exit, and the result holds it all.
#[test]
fn a_client_that_does_not_read_holds_the_tool_and_loses_nothing() {
    require_root!();
    let d = start();
    let dir = shared_dir(&d, "big");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut client = small_window_client(&d.socket).await;
        let request = v1::InvokeRequest {
            tool: "big".into(),
            arguments_json: dir_arg(&dir),
            stream_output: true,
            learn: Vec::new(),
        };
        let mut events = client.invoke(request).await.unwrap().into_inner();
        let pid_file = dir.join("pid");
        assert!(
            eventually(Duration::from_secs(30), || std::fs::read_to_string(&pid_file).is_ok_and(|p| p.ends_with('\n')))
        );
        let pid: u32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        assert!(
            eventually(Duration::from_secs(30), || writing_into_full_pipe(pid)),
            "the tool was never held in write"
        );
        assert!(!process_gone(i32::try_from(pid).unwrap()), "the tool ran to its end without a reader");
        let mut chunks = Vec::new();
        let finished = rest_of(&mut events, &mut chunks).await;
        let expected = numbers(700_000);
        assert_eq!(finished.stdout.len(), expected.len());
        let live = contiguous(&chunks, v1::output_chunk::Stream::Stdout);
        assert!(finished.stdout == expected, "the result holds every byte");
        assert!(expected.starts_with(&live), "what went live is the output's beginning, in order");
        // While the tool runs, cordond waits for the client: nothing is dropped. What the tool
        // left in its pipe when it exited is sent without waiting (the end of a call never
        // depends on the client), so at most that tail (a pipe and a read buffer) may be left
        // to the result; without the wait, megabytes would be.
        assert!(
            expected.len() - live.len() <= 1 << 20,
            "{} of {} bytes went live: the client was not waited for",
            live.len(),
            expected.len()
        );
    });
}

/// `cordon ARGS...` on a terminal (a pty from util-linux's `script`), with colour allowed unless
/// `env` says otherwise; what the terminal showed.
fn on_terminal(d: &Daemon, args: &str, env: &[(&str, &str)]) -> Child {
    let cmd = format!("{} --socket {} {args}", bin("cordon").display(), d.socket.display());
    let mut c = Command::new("script");
    c.args(["-qec", &cmd, "/dev/null"]);
    for v in ["NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE"] {
        c.env_remove(v);
    }
    c.env("TERM", "xterm");
    c.envs(env.iter().copied());
    c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("script (util-linux) runs")
}

/// On a terminal, a quiet run shows `running TOOL… Ns` on one line, rewritten in place and
/// erased before the next output.
#[test]
fn a_quiet_run_on_a_terminal_shows_the_elapsed_time_then_erases_it() {
    require_root!();
    let d = start();
    let dir = shared_dir(&d, "pause");
    let mut term = on_terminal(&d, &format!("run pause --args-json '{}'", dir_arg(&dir)), &[]);
    let mut out = term.stdout.take().unwrap();
    let mut shown = Vec::new();
    let mut buf = [0u8; 4096];
    let needle = "running pause\u{2026} ".as_bytes();
    while !shown.windows(needle.len()).any(|w| w == needle) {
        let n = out.read(&mut buf).unwrap();
        assert!(n > 0, "no elapsed time on the terminal: {:?}", String::from_utf8_lossy(&shown));
        shown.extend_from_slice(&buf[..n]);
    }
    go(&dir, 1);
    out.read_to_end(&mut shown).unwrap();
    assert_eq!(term.wait().unwrap().code(), Some(0));
    let text = String::from_utf8_lossy(&shown);
    assert!(text.starts_with("begin\r\n\r\x1b[2Krunning pause\u{2026} "), "{text:?}");
    assert!(text.ends_with("s\r\x1b[2Kend\r\n"), "erased before the next output: {text:?}");
}

/// `NO_COLOR` (plain output) and a pipe: no elapsed-time line, however quiet the run.
#[test]
fn plain_output_never_shows_the_elapsed_time() {
    require_root!();
    let d = start();
    let term = on_terminal(&d, "run nap", &[("NO_COLOR", "1")]);
    let out = term.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "begin\r\nend\r\n");
    let piped = d.cordon(&["run", "nap"]);
    piped.assert_code(0);
    assert_eq!((piped.stdout.as_str(), piped.stderr.as_str()), ("begin\nend\n", ""));
}

/// `begin` arrives while the tool waits for `go1`; then `end`; exit 0.
fn expect_live_pause(mut run: Child, dir: &Path) {
    let mut out = BufReader::new(run.stdout.take().unwrap());
    assert_eq!(read_line(&mut out), "begin\n");
    go(dir, 1);
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "end\n");
    let mut err = String::new();
    run.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(run.wait().unwrap().code(), Some(0), "{err}");
}

/// `cordon confirm TOKEN` prints live like `run`.
#[test]
fn a_confirmed_call_streams_live_too() {
    require_root!();
    let d = start();
    let dir = shared_dir(&d, "confirm");
    let (out, j) = d.run_json("careful", &json!({ "dir": dir }));
    out.assert_code(3);
    let token = j["confirmation_required"]["token"].as_str().unwrap().to_string();
    let run = spawn_confirm(&d, &token);
    expect_live_pause(run, &dir);
}

fn spawn_confirm(d: &Daemon, token: &str) -> Child {
    Command::new(bin("cordon"))
        .arg("--socket")
        .arg(&d.socket)
        .args(["confirm", token])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `cordon run` of a tool that needs a human approval waits for it, then prints live.
#[test]
fn a_call_that_waited_for_a_human_approval_streams_live() {
    require_root!();
    let d = start();
    let dir = shared_dir(&d, "approve");
    let run = spawn_run(&d, false, &["approved", "--args-json", &dir_arg(&dir)]);
    let id = wait_pending(&d.socket)["approval_id"].as_str().unwrap().to_string();
    d.cordon(&["approve", &id]).assert_code(0);
    expect_live_pause(run, &dir);
}

/// Ctrl-C while the call waits for a human approval: cordon stops waiting (exit 130) and the
/// approval is withdrawn; nothing ran.
#[test]
fn ctrl_c_while_waiting_for_an_approval_withdraws_it() {
    require_root!();
    let d = start();
    let dir = shared_dir(&d, "withdraw");
    let mut run = spawn_run(&d, false, &["approved", "--args-json", &dir_arg(&dir)]);
    wait_pending(&d.socket);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(i32::try_from(run.id()).unwrap()), nix::sys::signal::SIGINT)
        .unwrap();
    let mut err = String::new();
    run.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(run.wait().unwrap().code(), Some(130), "{err}");
    assert!(err.contains("cordon: interrupted; stopped waiting for approved"), "{err}");
    assert!(eventually(Duration::from_secs(10), || d.cordon(&["pending", "--json"]).json()["pending"] == json!([])));
    assert!(!d.audit_records().iter().any(|r| r["decision"] == "started"), "nothing may have run");
}

/// A reader that never catches up holds the tool only until its timeout: cordond kills it as
/// ever (the audit says timed out while nobody reads), then the reader gets the capped result.
#[test]
fn a_stalled_reader_does_not_outlast_the_tools_timeout() {
    require_root!();
    let d = start();
    let mut run = spawn_run(&d, false, &["flood"]);
    assert!(
        eventually(Duration::from_secs(60), || d.audit_records().iter().any(|r| r["decision"] == "timed_out")),
        "the tool outlived its timeout while its reader stalled"
    );
    let mut stdout = Vec::new();
    run.stdout.take().unwrap().read_to_end(&mut stdout).unwrap();
    let mut stderr = String::new();
    run.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert_eq!(run.wait().unwrap().code(), Some(124), "{stderr}");
    assert!(stderr.contains("cordon: flood timed out and was killed"), "{stderr}");
    let text = String::from_utf8(stdout).unwrap();
    let (head, tail) = text.split_once("\n[... cordon: ").expect("the truncation notice");
    assert_eq!(head.len(), 512 * 1024, "the head of a 1 MiB cap");
    assert!(head.bytes().eq(b"y\n".iter().copied().cycle().take(head.len())));
    let tail = tail.split_once(" bytes omitted ...]\n").unwrap().1;
    assert_eq!(tail.len(), 512 * 1024);
    assert!(tail.bytes().all(|b| b == b'y' || b == b'\n'));
}
