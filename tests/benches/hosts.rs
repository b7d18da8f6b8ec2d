//! What `network.hosts` costs, as ratios against baselines measured in the same run:
//!
//! - spawn: gRPC `Invoke` of `/bin/true` with `hosts` (its own network namespace, the proxy's
//!   listener made and handed over, the proxy task started and stopped) against the same tool
//!   with `connect_tcp` (landlock ports only, the host's namespace), and without network;
//! - throughput: `curl` in the sandbox downloading from a server on 127.0.0.1, through the egress
//!   proxy (hosts) against directly (connect_tcp), both run by cordond, same size;
//! - connection rate: one invocation making many short CONNECT tunnels through the proxy.
//!
//! Rounds are interleaved; each figure is the best round's (each round's download rates are
//! printed too). `CORDON_BENCH_N` calls per spawn figure (default 300; 0: none),
//! `CORDON_BENCH_MIB` MiB per download (default 256), `CORDON_BENCH_ROUNDS` (default 3),
//! `CORDON_BENCH_TUNNELS` tunnels per round (default 1000; 0: none). `CORDON_BENCH_BASELINE=DIR`:
//! another build's `DIR/cordond` runs beside this one, and the downloads through its proxy are
//! interleaved with this build's (issue 33: the proxy's splice against the buffered copy).
//!
//! `cargo build --release --workspace && cargo bench -p cordon-tests --bench hosts`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cordon_proto::v1;

const CURL: &str = "/usr/bin/curl";

/// A server on 127.0.0.1 answering `GET /big/N` with N bytes (`x`) and anything else with a
/// short body; one thread per connection.
fn upstream() -> u16 {
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

fn policy(port: u16, attack: &Path) -> String {
    let bins = attack.parent().unwrap();
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

[tools.tunnels]
description = "many tunnels"
reason = "benchmark"
command = [{attack:?}, "proxy-flood", "{{{{n}}}}", "127.0.0.1:{port}"]
exec = [{bins:?}]
network = {{ hosts = ["127.0.0.1:{port}"], max_connections = 4096 }}
limits = {{ open_files = 8192 }}
[tools.tunnels.params.n]
type = "string"
pattern = "[0-9]+"
required = true
"#
    )
}

struct Running {
    child: std::process::Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), nix::sys::signal::SIGTERM);
        let _ = self.child.wait();
    }
}

fn start(policy: &str) -> Running {
    start_bin(&cordon_tests::bin("cordond"), policy)
}

fn start_bin(cordond: &Path, policy: &str) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("bench.toml"), policy).unwrap();
    let socket = dir.path().join("cordon.sock");
    let child = Command::new(cordond)
        .arg("--policies")
        .arg(&policies)
        .arg("--socket")
        .arg(&socket)
        .arg("--audit")
        .arg(dir.path().join("audit.jsonl"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "cordond did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Running { child, socket, _dir: dir }
}

/// One `Invoke` to its end; panics unless it exits 0. Returns the tool's stdout.
async fn invoke(channel: tonic::transport::Channel, tool: &str, args: &str) -> Vec<u8> {
    let mut client = v1::cordon_client::CordonClient::new(channel);
    let request =
        v1::InvokeRequest { tool: tool.into(), arguments_json: args.into(), stream_output: false, learn: Vec::new() };
    let mut stream = client.invoke(request).await.unwrap().into_inner();
    while let Some(ev) = stream.message().await.unwrap() {
        if let Some(v1::invoke_event::Event::Finished(f)) = ev.event {
            assert_eq!(f.exit_code, Some(0), "{tool}: {}", String::from_utf8_lossy(&f.stderr));
            return f.stdout;
        }
    }
    panic!("{tool}: no result");
}

fn p50(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1e3
}

fn main() {
    let n: usize = std::env::var("CORDON_BENCH_N").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let mib: usize = std::env::var("CORDON_BENCH_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let attack = cordon_tests::bin("cordon-attack");
    let port = upstream();
    let rounds: usize = std::env::var("CORDON_BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let count: u32 = std::env::var("CORDON_BENCH_TUNNELS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let d = start(&policy(port, &attack));
    let baseline = std::env::var_os("CORDON_BENCH_BASELINE").map(|dir| {
        let cordond = PathBuf::from(dir).join("cordond");
        assert!(cordond.exists(), "{} is missing", cordond.display());
        start_bin(&cordond, &policy(port, &attack))
    });
    let curl = Path::new(CURL).exists();
    println!("{n} calls per spawn figure, {mib} MiB per download, best of {rounds} interleaved rounds");
    let mut spawn: Vec<(&str, f64)> = Vec::new();
    let mut download: Vec<(&str, f64)> = Vec::new();
    let mut tunnels_per_sec = 0f64;
    rt.block_on(async {
        let channel = cordon_proto::connect(&d.socket).await.unwrap();
        let base = match &baseline {
            Some(b) => Some(cordon_proto::connect(&b.socket).await.unwrap()),
            None => None,
        };
        for tool in ["plain", "ports", "hosts"] {
            for _ in 0..20.min(n) {
                invoke(channel.clone(), tool, "").await;
            }
        }
        for round in 0..rounds {
            eprintln!("round {}", round + 1);
            for tool in ["plain", "ports", "hosts"] {
                if n == 0 {
                    break;
                }
                let mut samples = Vec::with_capacity(n);
                for _ in 0..n {
                    let t = Instant::now();
                    invoke(channel.clone(), tool, "").await;
                    samples.push(t.elapsed());
                }
                let v = p50(samples);
                match spawn.iter_mut().find(|(name, _)| *name == tool) {
                    Some((_, best)) => *best = best.min(v),
                    None => spawn.push((tool, v)),
                }
            }
            if curl {
                let url = format!("{{\"url\": \"http://127.0.0.1:{port}/big/{}\"}}", mib << 20);
                let mut arms = vec![("curl-direct", &channel), ("curl-proxy", &channel)];
                if let Some(base) = &base {
                    arms.push(("curl-proxy-baseline", base));
                }
                // Each round in another order: no arm always first.
                let turn = round % arms.len();
                arms.rotate_left(turn);
                for (tool, on) in arms {
                    let t = Instant::now();
                    invoke(on.clone(), tool.trim_end_matches("-baseline"), &url).await;
                    let rate = mib as f64 / t.elapsed().as_secs_f64();
                    eprintln!("  {tool:<20} {rate:8.0} MiB/s");
                    match download.iter_mut().find(|(name, _)| *name == tool) {
                        Some((_, best)) => *best = best.max(rate),
                        None => download.push((tool, rate)),
                    }
                }
            }
            if count == 0 {
                continue;
            }
            let t = Instant::now();
            let out = invoke(channel.clone(), "tunnels", &format!("{{\"n\": \"{count}\"}}")).await;
            let report: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(report["statuses"]["200"], count, "{report}");
            tunnels_per_sec = tunnels_per_sec.max(f64::from(count) / t.elapsed().as_secs_f64());
        }
    });
    let plain = spawn.first().map_or(1.0, |s| s.1);
    if !spawn.is_empty() {
        println!("{:<58} {:>9} {:>12}", "spawn: gRPC Invoke of /bin/true", "p50 ms", "vs no network");
    }
    for (tool, v) in &spawn {
        let what = match *tool {
            "plain" => "no network",
            "ports" => "connect_tcp (landlock ports, host namespace)",
            _ => "hosts (own namespace + egress proxy)",
        };
        println!("  {what:<56} {v:>9.3} {:>11.2}x", v / plain);
    }
    if curl {
        let direct = download.iter().find(|(t, _)| *t == "curl-direct").map_or(1.0, |d| d.1);
        println!("{:<58} {:>9} {:>12}", "throughput: curl in the sandbox from 127.0.0.1", "MiB/s", "vs direct");
        for (tool, v) in &download {
            let what = match *tool {
                "curl-direct" => "directly (connect_tcp)",
                "curl-proxy" => "through the egress proxy (hosts)",
                _ => "through the baseline build's proxy (hosts)",
            };
            println!("  {what:<56} {v:>9.0} {:>11.2}x", v / direct);
        }
    } else {
        println!("(curl is not installed: no throughput figures)");
    }
    println!("tunnels: CONNECT round trips through the proxy in one invocation: {tunnels_per_sec:.0}/s");
}
