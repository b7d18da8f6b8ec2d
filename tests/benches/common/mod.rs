//! What the benches share (`mod common;` in each): a daemon of a given build on a temporary
//! socket with its audit log on a disk directory, one `Invoke` to its end, a loopback HTTP
//! server, the network tools' policy and a download through the sandbox, percentiles.
//!
//! Every call here fails loudly: a call that errors is not a fast call.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cordon_proto::v1;

/// Where the benchmarked daemons keep their audit logs (and sockets, policies): a disk
/// directory, not a tmpfs, so that the durable records cost what they cost on a real host.
pub(crate) const AUDIT_PARENT: &str = "/var/tmp";

pub(crate) const CURL: &str = "/usr/bin/curl";

/// A running `cordond`, stopped (SIGTERM, then waited for) on drop.
pub(crate) struct Running {
    pub(crate) child: std::process::Child,
    pub(crate) socket: PathBuf,
    pub(crate) dir: tempfile::TempDir,
}

impl Running {
    /// The daemon's audit log.
    pub(crate) fn audit(&self) -> PathBuf {
        self.dir.path().join("audit.jsonl")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), nix::sys::signal::SIGTERM);
        let _ = self.child.wait();
    }
}

/// Starts `cordond` (the binary at `cordond`) with `policy` as its one policy file (or the files
/// `policies` names: (file name, text)), its socket, policies and audit log in a new directory
/// under [`AUDIT_PARENT`], hermetic groups, and `extra` flags. Err: why it did not start (the
/// tail of its stderr), e.g. an older build refusing a policy key or a flag.
pub(crate) fn try_start(cordond: &Path, policies: &[(String, String)], extra: &[&str]) -> Result<Running, String> {
    try_start_with_env(cordond, policies, extra, &[])
}

/// [`try_start`] with `env` added to the daemon's environment (e.g. `CORDON_POOL=off`).
pub(crate) fn try_start_with_env(
    cordond: &Path,
    policies: &[(String, String)],
    extra: &[&str],
    env: &[(&str, &str)],
) -> Result<Running, String> {
    let dir = tempfile::Builder::new().prefix("cordon-bench-").tempdir_in(AUDIT_PARENT).unwrap();
    let dir_policies = dir.path().join("policies");
    std::fs::create_dir(&dir_policies).unwrap();
    for (name, text) in policies {
        std::fs::write(dir_policies.join(name), text).unwrap();
    }
    let socket = dir.path().join("cordon.sock");
    let log = dir.path().join("cordond.log");
    let mut command = Command::new(cordond);
    command.arg("--policies").arg(&dir_policies).arg("--socket").arg(&socket);
    command.arg("--audit").arg(dir.path().join("audit.jsonl"));
    // Hermetic: a host's own `cordon` groups do not change who may call.
    for flag in ["--socket-group", "--admin-group"] {
        if !extra.contains(&flag) {
            command.arg(flag).arg("");
        }
    }
    let mut child = command
        .args(extra)
        .envs(env.iter().copied())
        .env("CORDON_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        let exited = child.try_wait().unwrap();
        if exited.is_some() || Instant::now() > deadline {
            if exited.is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(2).collect();
            return Err(format!("{} did not start: {}", cordond.display(), tail.join(" / ")));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(Running { child, socket, dir })
}

/// [`try_start`] with one policy file; panics when the daemon does not start.
pub(crate) fn start(cordond: &Path, policy: &str, extra: &[&str]) -> Running {
    try_start(cordond, &[("bench.toml".into(), policy.into())], extra).unwrap_or_else(|e| panic!("{e}"))
}

/// One `Invoke` of `tool` with `args` (JSON, or empty) to its end. None when refused BUSY
/// (`RESOURCE_EXHAUSTED`); panics on any other error and unless the tool exits 0. Some: its
/// stdout.
pub(crate) async fn try_invoke(channel: tonic::transport::Channel, tool: &str, args: &str) -> Option<Vec<u8>> {
    let mut client = v1::cordon_client::CordonClient::new(channel);
    let request =
        v1::InvokeRequest { tool: tool.into(), arguments_json: args.into(), stream_output: false, learn: Vec::new() };
    let mut stream = match client.invoke(request).await {
        Ok(s) => s.into_inner(),
        Err(status) if status.code() == tonic::Code::ResourceExhausted => return None,
        Err(status) => panic!("invoke {tool}: {status}"),
    };
    let mut stdout = None;
    loop {
        match stream.message().await {
            Ok(Some(ev)) => {
                if let Some(v1::invoke_event::Event::Finished(f)) = ev.event {
                    assert_eq!(f.exit_code, Some(0), "{tool}: {}", String::from_utf8_lossy(&f.stderr));
                    stdout = Some(f.stdout);
                }
            }
            Ok(None) => break,
            Err(status) if status.code() == tonic::Code::ResourceExhausted => return None,
            Err(status) => panic!("invoke {tool}: {status}"),
        }
    }
    Some(stdout.unwrap_or_else(|| panic!("{tool}: no result")))
}

/// One `Invoke` to its end; panics unless it exits 0 (a BUSY refusal included). Its stdout.
pub(crate) async fn invoke(channel: tonic::transport::Channel, tool: &str, args: &str) -> Vec<u8> {
    try_invoke(channel, tool, args).await.unwrap_or_else(|| panic!("{tool}: refused BUSY"))
}

/// p50 and p99 of `samples`, in ms.
pub(crate) fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let at = |p: usize| samples[(samples.len() * p / 100).min(samples.len() - 1)].as_secs_f64() * 1e3;
    (at(50), at(99))
}

pub(crate) fn p50(samples: Vec<Duration>) -> f64 {
    percentiles(samples).0
}

/// A server on 127.0.0.1 answering `GET /big/N` with N bytes (`x`) and anything else with a
/// short body; one thread per connection. Its port.
pub(crate) fn upstream() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match conn.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                let n = path.strip_prefix("/big/").and_then(|n| n.parse::<usize>().ok()).unwrap_or(3);
                let _ = write!(conn, "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nConnection: close\r\n\r\n");
                let chunk = vec![b'x'; 256 * 1024];
                let mut left = n;
                while left > 0 {
                    let k = left.min(chunk.len());
                    if conn.write_all(&chunk[..k]).is_err() {
                        return;
                    }
                    left -= k;
                }
            });
        }
    });
    port
}

/// The network tools, against the server on 127.0.0.1:`port`: `plain` (`/bin/true`, no network),
/// `ports` (the same with `connect_tcp`), `hosts` (the same with `hosts`: its own network
/// namespace and the egress proxy), `curl-direct` and `curl-proxy` (curl downloading `{{url}}` to
/// /dev/null directly and through the proxy). A whole policy file, more tools may follow.
pub(crate) fn network_tools(port: u16) -> String {
    format!(
        r#"version = 1
[defaults]
timeout = "120s"
max_output = "1MiB"

[tools.plain]
description = "no network"
reason = "benchmark"
command = ["/bin/true"]

[tools.ports]
description = "landlock ports"
reason = "benchmark"
command = ["/bin/true"]
network = {{ connect_tcp = [{port}] }}

[tools.hosts]
description = "egress proxy"
reason = "benchmark"
command = ["/bin/true"]
network = {{ hosts = ["127.0.0.1:{port}"] }}

[tools.curl-direct]
description = "download directly"
reason = "benchmark"
command = ["{CURL}", "-sS", "-f", "-o", "/dev/null", "{{{{url}}}}"]
network = {{ connect_tcp = [{port}] }}
[tools.curl-direct.params.url]
type = "string"
required = true

[tools.curl-proxy]
description = "download through the egress proxy"
reason = "benchmark"
command = ["{CURL}", "-sS", "-f", "-o", "/dev/null", "{{{{url}}}}"]
network = {{ hosts = ["127.0.0.1:{port}"], max_bytes = "64GiB" }}
[tools.curl-proxy.params.url]
type = "string"
required = true
"#
    )
}

/// `curl` in the sandbox (`curl-direct` or `curl-proxy` of [`network_tools`]) downloading `mib`
/// MiB from the server on `port`: MiB/s.
pub(crate) async fn download(channel: tonic::transport::Channel, tool: &str, port: u16, mib: usize) -> f64 {
    let url = format!("{{\"url\": \"http://127.0.0.1:{port}/big/{}\"}}", mib << 20);
    let t = Instant::now();
    invoke(channel, tool, &url).await;
    mib as f64 / t.elapsed().as_secs_f64()
}
