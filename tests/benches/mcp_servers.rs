//! Real MCP servers through cordon against the same servers run directly, same run,
//! same client (rmcp over stdio):
//! - p50/p90 latency of `tools/call` of server-everything's `echo` and server-filesystem's
//!   `read_text_file`, through `cordon mcp` -> cordond -> the sandboxed server, and direct; in ms
//!   and as a ratio;
//! - memory per running server: the instance's cgroup `memory.current` (as cordond reports it)
//!   and the server process's RSS, beside the RSS of the same server run directly;
//! - the first call's time (a cold start: cordond starts the sandboxed server on it) against the
//!   later calls' p50, and the direct server's spawn-to-first-answer time.
//!
//! Needs root and the servers tests/run installs under /opt/cordon-mcp-servers (it says so and
//! exits otherwise). Not run by the tests. Run with
//! `cargo build --workspace --bins && cargo bench -p cordon-tests --bench mcp_servers`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::{ConfigureCommandExt as _, TokioChildProcess};
use serde_json::{Value, json};

const ROOT: &str = "/opt/cordon-mcp-servers";
const NODE: &str = "/usr/bin/node";
const CALLS: usize = 200;

type Client = RunningService<RoleClient, ()>;

fn server(package: &str) -> String {
    format!("{ROOT}/node/node_modules/@modelcontextprotocol/server-{package}/dist/index.js")
}

fn percentile(samples: &mut [Duration], p: usize) -> Duration {
    samples.sort();
    samples[(samples.len() * p / 100).min(samples.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn object(v: Value) -> JsonObject {
    let Value::Object(o) = v else { panic!("arguments are an object") };
    o
}

async fn call(client: &Client, tool: &str, arguments: &Value) -> Duration {
    let t = Instant::now();
    let r = client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(object(arguments.clone())))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    let took = t.elapsed();
    assert_ne!(r.is_error, Some(true), "{tool}: {r:?}");
    took
}

fn rss_kib(pid: u32) -> Option<u64> {
    cordon_tests::proc_status_field(i32::try_from(pid).ok()?, "VmRSS")
}

async fn connect(command: tokio::process::Command) -> (Client, Option<u32>) {
    let (transport, _) = TokioChildProcess::builder(command).stderr(std::process::Stdio::null()).spawn().unwrap();
    let pid = transport.id();
    (().serve(transport).await.expect("the MCP session starts"), pid)
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        println!("mcp_servers: needs root (cordond's sandbox): not run");
        return;
    }
    if !Path::new(&server("everything")).exists() || !Path::new(&server("filesystem")).exists() {
        println!("mcp_servers: the servers are not installed under {ROOT} (tests/run installs them): not run");
        return;
    }
    let work = tempfile::Builder::new().prefix("cordon-bench-servers-").tempdir_in("/tmp").unwrap();
    let file = work.path().join("a.txt");
    std::fs::write(&file, "hello from a file\n".repeat(20)).unwrap();
    let q = |s: &str| serde_json::to_string(s).unwrap();
    let dir = work.path().to_str().unwrap();
    let node_root = format!("{ROOT}/node");
    let policy = format!(
        "version = 1\n\
         [servers.everything]\ndescription = \"the reference test server\"\ncommand = [{node}, {everything}]\n\
         read = [{root}]\ntools = [\"echo\"]\n\
         [servers.fs]\ndescription = \"the filesystem server\"\ncommand = [{node}, {fs}, {dir}]\n\
         read = [{root}, {dir}]\ntools = [\"read_text_file\"]\n",
        node = q(NODE),
        everything = q(&server("everything")),
        fs = q(&server("filesystem")),
        root = q(&node_root),
        dir = q(dir),
    );
    let daemon = cordon_tests::Daemon::start(&[("servers.toml", &policy)]);
    for name in ["everything", "fs"] {
        daemon.cordon(&["server", "show", name, "--start"]).assert_code(0);
        daemon.cordon(&["server", "approve", name, "--yes"]).assert_code(0);
        // Stopped again: the first call below starts it (the cold start measured).
        daemon.cordon(&["server", "stop", name]).assert_code(0);
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let cases = [
        ("everything", "echo", json!({ "message": "hello" }), vec![NODE.to_string(), server("everything")]),
        (
            "fs",
            "read_text_file",
            json!({ "path": file }),
            vec![NODE.to_string(), server("filesystem"), dir.to_string()],
        ),
    ];
    let mut rows = Vec::new();
    rt.block_on(async {
        let command = tokio::process::Command::new(cordon_tests::bin("cordon")).configure(|c| {
            c.arg("--socket").arg(&daemon.socket).arg("mcp");
        });
        let (through, _) = connect(command).await;
        for (server_name, tool, arguments, argv) in &cases {
            let exposed = format!("{server_name}__{tool}");
            // Direct: spawn to first answer, then CALLS calls.
            let t = Instant::now();
            let command = tokio::process::Command::new(&argv[0]).configure(|c| {
                c.args(&argv[1..]);
            });
            let (direct, direct_pid) = connect(command).await;
            let direct_first = t.elapsed() + call(&direct, tool, arguments).await;
            let mut plain: Vec<Duration> = Vec::with_capacity(CALLS);
            // Through cordon: the first call starts the sandboxed server.
            let cold = call(&through, &exposed, arguments).await;
            let mut via: Vec<Duration> = Vec::with_capacity(CALLS);
            // Interleaved, so both see the same machine load.
            for _ in 0..CALLS {
                plain.push(call(&direct, tool, arguments).await);
                via.push(call(&through, &exposed, arguments).await);
            }
            let direct_rss = direct_pid.and_then(rss_kib);
            direct.cancel().await.ok();
            let shown = daemon.cordon(&["server", "show", server_name, "--json"]).json();
            let instance = shown["server"]["instances"].get(0).cloned().unwrap_or(Value::Null);
            let memory = instance["memory_bytes"].as_u64();
            let pid = instance["pid"].as_u64().and_then(|p| u32::try_from(p).ok());
            let rss = pid.and_then(rss_kib);
            let (p50, p90) = (percentile(&mut via, 50), percentile(&mut via, 90));
            let (d50, d90) = (percentile(&mut plain, 50), percentile(&mut plain, 90));
            rows.push((
                exposed,
                (ms(p50), ms(p90), ms(d50), ms(d90)),
                (ms(cold), ms(direct_first)),
                (memory, rss, direct_rss),
            ));
        }
        through.cancel().await.ok();
    });
    println!("\nMCP servers through cordon vs direct ({CALLS} calls each, interleaved, same run)");
    println!(
        "{:<28} {:>9} {:>9} {:>9} {:>9} {:>7} {:>11} {:>12} {:>12} {:>10} {:>10}",
        "tools/call",
        "p50 ms",
        "p90 ms",
        "direct50",
        "direct90",
        "ratio",
        "cold 1st ms",
        "direct 1st",
        "cgroup MiB",
        "RSS MiB",
        "direct RSS"
    );
    for (name, (p50, p90, d50, d90), (cold, first), (memory, rss, direct_rss)) in rows {
        let mib = |v: Option<u64>, unit: f64| v.map_or_else(|| "-".to_string(), |b| format!("{:.1}", b as f64 / unit));
        println!(
            "{name:<28} {p50:>9.2} {p90:>9.2} {d50:>9.2} {d90:>9.2} {:>6.1}x {cold:>11.0} {first:>12.0} {:>12} {:>10} {:>10}",
            p50 / d50,
            mib(memory, 1024.0 * 1024.0),
            mib(rss, 1024.0),
            mib(direct_rss, 1024.0),
        );
    }
}
