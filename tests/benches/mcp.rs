//! MCP round trips through `cordon mcp` and `cordond`, against a bare spawn in the same run:
//! - `tools/call` of a tool running `/bin/true` (p50 target: at most 3x a bare spawn);
//! - `tools/list` with 1,000 registered tools (target: at most 50 ms).
//!
//! Run with `cargo build --release --workspace && cargo bench -p cordon-tests --bench mcp`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::{ConfigureCommandExt as _, TokioChildProcess};

const CALLS: usize = 300;

fn percentile(samples: &mut [Duration], p: usize) -> Duration {
    samples.sort();
    samples[(samples.len() * p / 100).min(samples.len() - 1)]
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut policy = String::from("version = 1\n");
    for i in 0..1000 {
        let _ = write!(
            policy,
            "[tools.tool-{i}]\ndescription = \"tool number {i}\"\nreason = \"benchmark\"\ncommand = [\"/bin/echo\", \"{{{{text}}}}\"]\n\
             [tools.tool-{i}.params.text]\ntype = \"string\"\npattern = \"[a-z]*\"\n"
        );
    }
    policy
        .push_str("[tools.true]\ndescription = \"does nothing\"\nreason = \"benchmark\"\ncommand = [\"/bin/true\"]\n");
    let daemon = cordon_tests::Daemon::start(&[("bench.toml", &policy)]);
    let cordon = cordon_tests::bin("cordon");
    let socket = daemon.socket.clone();

    rt.block_on(async move {
        // Bare spawn, same run.
        let mut bare = Vec::with_capacity(CALLS);
        for _ in 0..CALLS {
            let t = Instant::now();
            tokio::process::Command::new("/bin/true").status().await.unwrap();
            bare.push(t.elapsed());
        }
        let cmd = tokio::process::Command::new(&cordon).configure(|c| {
            c.arg("--socket").arg(&socket).arg("mcp");
        });
        let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
        for _ in 0..20 {
            client.call_tool(CallToolRequestParams::new("true")).await.unwrap();
        }
        let mut calls = Vec::with_capacity(CALLS);
        for _ in 0..CALLS {
            let t = Instant::now();
            let r = client.call_tool(CallToolRequestParams::new("true")).await.unwrap();
            calls.push(t.elapsed());
            assert_eq!(r.is_error, Some(false));
        }
        let mut lists = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            let tools = client.list_all_tools().await.unwrap();
            lists.push(t.elapsed());
            assert!(tools.len() >= 1001);
        }
        let (b50, c50, c99) = (percentile(&mut bare, 50), percentile(&mut calls, 50), percentile(&mut calls, 99));
        println!("bare spawn of /bin/true       p50 {:>7.2} ms", b50.as_secs_f64() * 1e3);
        println!(
            "MCP tools/call (/bin/true)    p50 {:>7.2} ms  p99 {:>7.2} ms  = {:.2}x bare (target <= 3x)",
            c50.as_secs_f64() * 1e3,
            c99.as_secs_f64() * 1e3,
            c50.as_secs_f64() / b50.as_secs_f64()
        );
        println!(
            "MCP tools/list (1,001 tools)  p50 {:>7.2} ms  max {:>7.2} ms (target <= 50 ms)",
            percentile(&mut lists, 50).as_secs_f64() * 1e3,
            lists.iter().max().unwrap().as_secs_f64() * 1e3
        );
        client.cancel().await.unwrap();
    });
}
