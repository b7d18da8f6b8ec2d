//! MCP round trips through `cordon mcp` and `cordond`, against a bare spawn in the same run:
//! - `tools/call` of a tool running `/bin/true` (p50 target: at most 3x a bare spawn);
//! - `tools/list` with 1,000 registered tools (target: at most 50 ms).
//!
//! Run with `cargo build --release --workspace && cargo bench -p cordon-tests --bench mcp`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use rmcp::ServiceExt as _;
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
        // tools/call through a minimal JSON-RPC client on the server's stdio with blocking reads
        // on its own thread, so the figure is cordon's, not a client runtime's.
        let (cordon_path, socket_path) = (cordon.clone(), socket.clone());
        let mut calls = tokio::task::spawn_blocking(move || {
            use std::io::{BufRead as _, Write as _};
            let mut raw = std::process::Command::new(&cordon_path)
                .arg("--socket")
                .arg(&socket_path)
                .arg("mcp")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut stdin = raw.stdin.take().unwrap();
            let mut stdout = std::io::BufReader::new(raw.stdout.take().unwrap());
            let mut rpc = |id: u64, method: &str, params: serde_json::Value| -> serde_json::Value {
                let msg = serde_json::json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
                writeln!(stdin, "{msg}").unwrap();
                stdin.flush().unwrap();
                loop {
                    let mut line = String::new();
                    stdout.read_line(&mut line).unwrap();
                    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
                    if v.get("id") == Some(&serde_json::json!(id)) {
                        return v;
                    }
                }
            };
            let init = serde_json::json!({ "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "bench", "version": "0" } });
            rpc(0, "initialize", init);
            let mut calls = Vec::with_capacity(CALLS);
            for i in 0..(CALLS + 20) as u64 {
                let t = Instant::now();
                let r = rpc(i + 1, "tools/call", serde_json::json!({ "name": "true", "arguments": {} }));
                if i >= 20 {
                    calls.push(t.elapsed());
                }
                assert_eq!(r["result"]["isError"], false, "{r}");
            }
            drop(stdin);
            let _ = raw.wait();
            calls
        })
        .await
        .unwrap();

        let cmd = tokio::process::Command::new(&cordon).configure(|c| {
            c.arg("--socket").arg(&socket).arg("mcp");
        });
        let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
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
