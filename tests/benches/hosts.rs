//! What `network.hosts` costs, as ratios against baselines measured in the same run:
//!
//! - spawn: gRPC `Invoke` of `/bin/true` with `hosts` (its own network namespace, the proxy's
//!   listener made and handed over, the proxy task started and stopped) against the same tool
//!   with `connect_tcp` (landlock ports only, the host's namespace), and without network;
//! - throughput: `curl` in the sandbox downloading from a server on 127.0.0.1, through the egress
//!   proxy (hosts) against directly (connect_tcp), both run by cordond, same size;
//! - connection rate: one invocation making many short CONNECT tunnels through the proxy.
//!
//! Rounds are interleaved; each figure is the best round's. `CORDON_BENCH_N` calls per spawn
//! figure (default 300), `CORDON_BENCH_MIB` MiB per download (default 256).
//!
//! `cargo build --release --workspace && cargo bench -p cordon-tests --bench hosts`
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Instant;

use common::{CURL, invoke, p50, upstream};

/// The network tools of [`common::network_tools`] and one making many CONNECT tunnels.
fn policy(port: u16, attack: &Path) -> String {
    let bins = attack.parent().unwrap();
    format!(
        r#"{}
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
"#,
        common::network_tools(port)
    )
}

fn main() {
    let n: usize = std::env::var("CORDON_BENCH_N").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let mib: usize = std::env::var("CORDON_BENCH_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let attack = cordon_tests::bin("cordon-attack");
    let port = upstream();
    let d = common::start(&cordon_tests::bin("cordond"), &policy(port, &attack), &[]);
    let curl = Path::new(CURL).exists();
    println!("{n} calls per spawn figure, {mib} MiB per download, best of 3 interleaved rounds");
    let mut spawn: Vec<(&str, f64)> = Vec::new();
    let mut download: Vec<(&str, f64)> = Vec::new();
    let mut tunnels_per_sec = 0f64;
    rt.block_on(async {
        let channel = cordon_proto::connect(&d.socket).await.unwrap();
        for tool in ["plain", "ports", "hosts"] {
            for _ in 0..20 {
                invoke(channel.clone(), tool, "").await;
            }
        }
        for round in 0..3 {
            eprintln!("round {}", round + 1);
            for tool in ["plain", "ports", "hosts"] {
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
                for tool in ["curl-direct", "curl-proxy"] {
                    let rate = common::download(channel.clone(), tool, port, mib).await;
                    match download.iter_mut().find(|(name, _)| *name == tool) {
                        Some((_, best)) => *best = best.max(rate),
                        None => download.push((tool, rate)),
                    }
                }
            }
            let count = 1000;
            let t = Instant::now();
            let out = invoke(channel.clone(), "tunnels", &format!("{{\"n\": \"{count}\"}}")).await;
            let report: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(report["statuses"]["200"], count, "{report}");
            tunnels_per_sec = tunnels_per_sec.max(f64::from(count) / t.elapsed().as_secs_f64());
        }
    });
    let plain = spawn[0].1;
    println!("{:<58} {:>9} {:>12}", "spawn: gRPC Invoke of /bin/true", "p50 ms", "vs no network");
    for (tool, v) in &spawn {
        let what = match *tool {
            "plain" => "no network",
            "ports" => "connect_tcp (landlock ports, host namespace)",
            _ => "hosts (own namespace + egress proxy)",
        };
        println!("  {what:<56} {v:>9.3} {:>11.2}x", v / plain);
    }
    if curl {
        let direct = download[0].1;
        println!("{:<58} {:>9} {:>12}", "throughput: curl in the sandbox from 127.0.0.1", "MiB/s", "vs direct");
        for (tool, v) in &download {
            let what =
                if *tool == "curl-direct" { "directly (connect_tcp)" } else { "through the egress proxy (hosts)" };
            println!("  {what:<56} {v:>9.0} {:>11.2}x", v / direct);
        }
    } else {
        println!("(curl is not installed: no throughput figures)");
    }
    println!("tunnels: CONNECT round trips through the proxy in one invocation: {tunnels_per_sec:.0}/s");
}
