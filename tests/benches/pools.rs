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

use std::time::Instant;

mod common;
use common::p50;

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

/// A daemon with the pools on, or off (`CORDON_POOL=off`).
fn start(pool: bool) -> common::Running {
    let env: &[(&str, &str)] = if pool { &[] } else { &[("CORDON_POOL", "off")] };
    common::try_start_with_env(&cordon_tests::bin("cordond"), &[("bench.toml".into(), POLICY.into())], &[], env)
        .unwrap_or_else(|e| panic!("{e}"))
}

async fn invoke(channel: tonic::transport::Channel, tool: &str) {
    common::invoke(channel, tool, "{}").await;
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
