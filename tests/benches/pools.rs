//! What the namespace pools (daemon/sandbox/src/pool.rs) save, against the same build with them
//! off (`CORDON_POOL=off`), both daemons measured in the same interleaved rounds:
//!
//! - a tool with private temp space (the default) against the same tool with `temp = false`;
//! - a tool with `network.hosts` against the same tool without network.
//!
//! gRPC `Invoke` of `/bin/true`, p50 of `CORDON_BENCH_N` calls per figure (default 300), best of
//! 3 rounds. Run as root (pools exist only for a root daemon).
//!
//! `cargo build --release -p cordon-daemon -p cordon-client && cargo bench -p cordon-tests --bench pools`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cordon_proto::v1;

const POLICY: &str = r#"version = 1
[defaults]
timeout = "60s"

[tools.temp]
description = "private temp space"
reason = "benchmark"
command = ["/bin/true"]

[tools.notemp]
description = "no temp space"
reason = "benchmark"
command = ["/bin/true"]
temp = false

[tools.hosts]
description = "egress proxy"
reason = "benchmark"
command = ["/bin/true"]
network = { hosts = ["127.0.0.1:9"] }
"#;

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

fn start(pool: bool) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("bench.toml"), POLICY).unwrap();
    let socket = dir.path().join("cordon.sock");
    let mut cmd = Command::new(cordon_tests::bin("cordond"));
    if !pool {
        cmd.env("CORDON_POOL", "off");
    }
    let child = cmd
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

async fn invoke(channel: tonic::transport::Channel, tool: &str) {
    let mut client = v1::cordon_client::CordonClient::new(channel);
    let request =
        v1::InvokeRequest { tool: tool.into(), arguments_json: "{}".into(), stream_output: false, learn: Vec::new() };
    let mut stream = client.invoke(request).await.unwrap().into_inner();
    while let Some(ev) = stream.message().await.unwrap() {
        if let Some(v1::invoke_event::Event::Finished(f)) = ev.event {
            assert_eq!(f.exit_code, Some(0), "{tool}: {}", String::from_utf8_lossy(&f.stderr));
            return;
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
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let daemons = [("pool", start(true)), ("no pool", start(false))];
    let tools = ["notemp", "temp", "hosts"];
    // best[daemon][tool]
    let mut best = [[f64::MAX; 3]; 2];
    rt.block_on(async {
        let mut channels = Vec::new();
        for (_, d) in &daemons {
            channels.push(cordon_proto::connect(&d.socket).await.unwrap());
        }
        for ch in &channels {
            for tool in tools {
                for _ in 0..20 {
                    invoke(ch.clone(), tool).await;
                }
            }
        }
        for round in 0..3 {
            eprintln!("round {}", round + 1);
            for (t, tool) in tools.iter().enumerate() {
                for (i, ch) in channels.iter().enumerate() {
                    let mut samples = Vec::with_capacity(n);
                    for _ in 0..n {
                        let t0 = Instant::now();
                        invoke(ch.clone(), tool).await;
                        samples.push(t0.elapsed());
                    }
                    best[i][t] = best[i][t].min(p50(samples));
                }
            }
        }
    });
    println!("{n} calls per figure, p50 (ms), best of 3 interleaved rounds");
    println!("{:<10} {:>8} {:>8} {:>8} {:>10} {:>10}", "daemon", "notemp", "temp", "hosts", "temp cost", "hosts cost");
    for (i, (name, _)) in daemons.iter().enumerate() {
        let [notemp, temp, hosts] = best[i];
        println!("{name:<10} {notemp:>8.3} {temp:>8.3} {hosts:>8.3} {:>+10.3} {:>+10.3}", temp - notemp, hosts - temp);
    }
}
