//! THE performance command (issue 33): every row of the issue's table in one run, each against
//! baselines measured in the same run (machines here are noisy: compare ratios, not
//! milliseconds), then the goals table.
//!
//! Measured once per run, the baselines:
//! - `bare`: a C program's `vfork` + exec of `/bin/true` + wait (`benches/floor.c`);
//! - `bare 8-way`: 8 of those programs at once (8 concurrent bare spawners), calls per second:
//!   what the 8 clients row is read against;
//! - `floor`: the same C program doing only the kernel work cordon needs: join the invocation's
//!   cgroups, a landlock ruleset with the same rules as cordond's, `no_new_privs`, cordond's own
//!   seccomp program; then exec;
//! - `fdatasync`: a record-sized line appended and `fdatasync`ed, in the directory of a
//!   benchmarked daemon's audit log (every daemon here keeps its log under /var/tmp, a disk, not
//!   a tmpfs; the file system is printed): what one durable audit record costs on this disk.
//!
//! For each build (this one, `cordon`, and with `CORDON_BENCH_BASELINE=DIR` another build's
//! `cordond` and `cordon`, in the same rounds):
//! - a gRPC round trip that runs nothing (`GetTool`), the transport's own share;
//! - gRPC `Invoke` on one connection (p50, p99), its CPU per invocation (daemon and tool: the
//!   daemon's user+system time, its reaped children's included); the same with `--metrics`;
//! - an MCP `tools/call` through `cordon mcp`;
//! - 8 clients (limits raised), calls per second; 32 clients with the default limits calling a
//!   tool that runs 50 ms: how many were refused;
//! - private temp space: p50 of a tool with `temp = true` minus the same with `temp = false`,
//!   calls interleaved on one connection;
//! - a `hosts` tool (its own network namespace and the egress proxy, the allowed host a server
//!   on 127.0.0.1) minus the same tool without network, interleaved;
//! - the proxy: `curl` in the sandbox downloading `CORDON_BENCH_MIB` MiB (default 256) from
//!   127.0.0.1 through the proxy (`hosts`) against directly (`connect_tcp`), as a ratio;
//! - `cordon run` as a whole process, against `bwrap --ro-bind / / /bin/true`;
//! - `cordon mcp` at 10,000 tools (100 policy files as tests/bench/registry.py writes them): a
//!   new front-end lists them all following `nextCursor` (`--page-size`, default 500), its RSS
//!   after the listing, the slowest page and the whole first listing.
//!
//! Rounds are interleaved (`CORDON_BENCH_ROUNDS`, default 2) and each figure is the best
//! round's; the differences print their spread over the rounds. `CORDON_BENCH_N` calls per
//! figure (default 400); `CORDON_BENCH_ONLY=TEXT` measures only the figures whose name contains
//! TEXT (with the bare baselines), e.g. to profile one of them; `CORDON_BENCH_PAGE` the page size.
//! A row a build cannot measure (an older build without a flag or policy key) prints "-" and
//! why; a call that fails stops the bench (an error is not a fast call). Nothing about time is
//! asserted.
//!
//! `cargo build --release --workspace && cargo bench -p cordon-tests --bench invoke`
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use common::{Running, percentiles};
use cordon_core::policy::SandboxPolicy;
use cordon_proto::v1;
use cordon_sandbox::{HostSandbox, Profile, compile_seccomp};

const POLICY: &str = r#"version = 1
[tools.true]
description = "does nothing"
reason = "benchmark"
command = ["/bin/true"]

[tools.nap]
description = "runs 50 ms"
reason = "benchmark"
command = ["/bin/sleep", "0.05"]
"#;

/// The private temp space row's tools: the same tool with it (the default) and without.
const TEMP_POLICY: &str = r#"version = 1
[tools.true]
description = "does nothing, in its private temp space"
reason = "benchmark"
command = ["/bin/true"]
temp = true

[tools.notemp]
description = "does nothing, without temp space"
reason = "benchmark"
command = ["/bin/true"]
temp = false
"#;

/// The length of the line the `fdatasync` row appends: about an Invoke's `started` record.
const RECORD_BYTES: usize = 600;

#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    p50: f64,
    p99: f64,
    per_sec: f64,
    cpu_ms: f64,
    refused: f64,
}

/// A build to measure: a directory with `cordond` and `cordon`.
#[derive(Debug, Clone)]
struct Build {
    label: String,
    dir: PathBuf,
}

impl Build {
    fn cordond(&self) -> PathBuf {
        self.dir.join("cordond")
    }

    fn start(&self, policy: &str, extra: &[&str]) -> Running {
        common::start(&self.cordond(), policy, extra)
    }
}

/// The C floor program, built once.
struct Floor {
    exe: PathBuf,
    rules: PathBuf,
    bpf: PathBuf,
    procs: Vec<PathBuf>,
}

fn build_floor(work: &Path, host: &HostSandbox, keep: &mut Vec<cordon_sandbox::InvocationCgroup>) -> Option<Floor> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/floor.c");
    let exe = work.join("floor");
    let built = Command::new("cc").args(["-O2", "-o"]).arg(&exe).arg(&source).status();
    if !built.is_ok_and(|s| s.success()) {
        println!("(no C compiler: the bare and floor rows are skipped)");
        return None;
    }
    let policy = SandboxPolicy::default();
    let cordon_sandbox::RulesetDescription { handled, paths } =
        cordon_sandbox::describe_landlock_ruleset(host.landlock_abi, &policy).unwrap();
    let mut rules = format!("{:x} {:x} {:x}\n", handled[0], handled[1], handled[2]);
    for (access, path) in paths {
        rules.push_str(&format!("{access:x} {}\n", path.display()));
    }
    std::fs::write(work.join("rules"), rules).unwrap();
    let program = compile_seccomp(Profile { tcp: false, bind: false, unix: false }).unwrap();
    let mut bpf = Vec::new();
    for f in &program.program {
        bpf.extend_from_slice(&f.code.to_ne_bytes());
        bpf.push(f.jt);
        bpf.push(f.jf);
        bpf.extend_from_slice(&f.k.to_ne_bytes());
    }
    std::fs::write(work.join("bpf"), bpf).unwrap();
    println!("seccomp program: {} instructions", program.program.len());
    // The floor joins a cgroup in each hierarchy cordond uses for an invocation without a memory
    // limit (cordond's own leaves), made once: joining is per call, making is not.
    let mut procs = Vec::new();
    if host.cgroups.available() {
        let cg = host.cgroups.create("floor", &Default::default(), 512).unwrap();
        procs = cg.dirs().iter().map(|d| d.join("cgroup.procs")).collect();
        keep.push(cg);
    }
    Some(Floor { exe, rules: work.join("rules"), bpf: work.join("bpf"), procs })
}

/// Runs the floor program: p50, p99 (ms) and CPU per call (ms).
fn run_floor(floor: &Floor, mode: &str, n: usize) -> Figures {
    let mut c = Command::new(&floor.exe);
    c.arg(mode).arg(n.to_string());
    if mode == "floor" {
        c.arg(&floor.rules).arg(&floor.bpf).args(&floor.procs);
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "floor {mode}: {}", String::from_utf8_lossy(&out.stderr));
    let v: Vec<f64> = String::from_utf8_lossy(&out.stdout).split_whitespace().map(|x| x.parse().unwrap()).collect();
    Figures { p50: v[0] / 1e3, p99: v[2] / 1e3, per_sec: 0.0, cpu_ms: v[3] / 1e3, refused: 0.0 }
}

/// `spawners` bare spawn loops at once (the floor program's `bare` mode), `n` calls in all:
/// calls per second, the 8 clients row's baseline.
fn bare_many(floor: &Floor, spawners: usize, n: usize) -> Figures {
    let t = Instant::now();
    let children: Vec<_> = (0..spawners)
        .map(|_| {
            Command::new(&floor.exe).arg("bare").arg((n / spawners).to_string()).stdout(Stdio::null()).spawn().unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "floor bare failed");
    }
    Figures { per_sec: (n / spawners * spawners) as f64 / t.elapsed().as_secs_f64(), ..Figures::default() }
}

/// The file system holding `dir`, from /proc/self/mountinfo: "TYPE (SOURCE at MOUNTPOINT)".
fn file_system(dir: &Path) -> String {
    let dir = dir.canonicalize().unwrap();
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mut best: Option<(usize, String)> = None;
    for line in info.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else { continue };
        let (Some(point), Some(kind), Some(source)) = (fields.get(4), fields.get(dash + 1), fields.get(dash + 2))
        else {
            continue;
        };
        if dir.starts_with(point) && best.as_ref().is_none_or(|(len, _)| point.len() >= *len) {
            best = Some((point.len(), format!("{kind} ({source} at {point})")));
        }
    }
    best.map(|(_, s)| s).unwrap_or_else(|| "unknown".into())
}

/// A record-sized line appended and `fdatasync`ed, `n` times, in `dir` (beside a daemon's
/// audit log): p50 and p99 of one durable record.
fn fdatasync_latency(dir: &Path, n: usize) -> Figures {
    let path = dir.join("fdatasync-bench.jsonl");
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
    let mut line = vec![b'x'; RECORD_BYTES - 1];
    line.push(b'\n');
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 10 {
        let t = Instant::now();
        file.write_all(&line).unwrap();
        file.sync_data().unwrap();
        if i >= 10 {
            samples.push(t.elapsed());
        }
    }
    drop(file);
    std::fs::remove_file(&path).unwrap();
    let (p50, p99) = percentiles(samples);
    Figures { p50, p99, ..Figures::default() }
}

/// User + system time of `pid` and its reaped children, in ms.
fn cpu_ms(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap().split_whitespace().collect();
    // After the command: state is field 3; utime 14, stime 15, cutime 16, cstime 17.
    let ticks: f64 = fields[11..15].iter().map(|f| f.parse::<f64>().unwrap()).sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks * 1e3 / hz
}

/// One `Invoke` of `tool` to its end: true when it finished, false when refused BUSY.
async fn invoke(channel: tonic::transport::Channel, tool: &str) -> bool {
    common::try_invoke(channel, tool, "").await.is_some()
}

/// gRPC on one connection: p50, p99 and the daemon's CPU per call; `extra` flags on top of raised
/// limits (`--metrics` to compare the same call with counting on).
fn grpc_one(rt: &tokio::runtime::Runtime, build: &Build, n: usize, extra: &[&str]) -> Figures {
    let mut args = vec!["--max-concurrent", "64", "--max-per-caller", "64"];
    args.extend_from_slice(extra);
    let d = build.start(POLICY, &args);
    let pid = d.child.id() as i32;
    rt.block_on(async {
        let channel = cordon_proto::connect(&d.socket).await.unwrap();
        for _ in 0..20 {
            assert!(invoke(channel.clone(), "true").await, "refused BUSY");
        }
        let cpu0 = cpu_ms(pid);
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            assert!(invoke(channel.clone(), "true").await, "refused BUSY");
            samples.push(t.elapsed());
        }
        let cpu = (cpu_ms(pid) - cpu0) / n as f64;
        let (p50, p99) = percentiles(samples);
        Figures { p50, p99, cpu_ms: cpu, ..Figures::default() }
    })
}

/// A gRPC round trip that runs nothing (`GetTool` on one connection): what the transport alone
/// costs, for reading the Invoke figure against.
fn grpc_round_trip(rt: &tokio::runtime::Runtime, build: &Build, n: usize) -> Figures {
    let d = build.start(POLICY, &[]);
    rt.block_on(async {
        let channel = cordon_proto::connect(&d.socket).await.unwrap();
        let mut client = v1::cordon_client::CordonClient::new(channel);
        let mut samples = Vec::with_capacity(n);
        for i in 0..n + 20 {
            let t = Instant::now();
            client.get_tool(v1::GetToolRequest { name: "true".into() }).await.unwrap();
            if i >= 20 {
                samples.push(t.elapsed());
            }
        }
        let (p50, p99) = percentiles(samples);
        Figures { p50, p99, ..Figures::default() }
    })
}

/// `clients` connections calling `tool` `per_client` times each at once: calls per second and
/// the share refused BUSY.
fn grpc_many(
    rt: &tokio::runtime::Runtime,
    build: &Build,
    extra: &[&str],
    clients: usize,
    per_client: usize,
    tool: &'static str,
) -> Figures {
    let d = build.start(POLICY, extra);
    rt.block_on(async {
        let mut channels = Vec::new();
        for _ in 0..clients {
            channels.push(cordon_proto::connect(&d.socket).await.unwrap());
        }
        let t = Instant::now();
        let mut tasks = Vec::new();
        for channel in channels {
            tasks.push(tokio::spawn(async move {
                let mut refused = 0usize;
                for _ in 0..per_client {
                    if !invoke(channel.clone(), tool).await {
                        refused += 1;
                    }
                }
                refused
            }));
        }
        let mut refused = 0;
        for task in tasks {
            refused += task.await.unwrap();
        }
        let total = clients * per_client;
        Figures {
            per_sec: (total - refused) as f64 / t.elapsed().as_secs_f64(),
            refused: refused as f64 * 100.0 / total as f64,
            ..Figures::default()
        }
    })
}

/// Two tools of one daemon (`policy`), `n` calls each, interleaved one by one on one connection:
/// the p50 of each. Err: the build's cordond did not take the policy.
fn pair(
    rt: &tokio::runtime::Runtime,
    build: &Build,
    policy: &str,
    tools: [&str; 2],
    n: usize,
) -> Result<(Figures, Figures), String> {
    let d = common::try_start(&build.cordond(), &[("bench.toml".into(), policy.into())], &[])?;
    Ok(rt.block_on(async {
        let channel = cordon_proto::connect(&d.socket).await.unwrap();
        for _ in 0..20 {
            for tool in tools {
                common::invoke(channel.clone(), tool, "").await;
            }
        }
        let mut samples = [Vec::with_capacity(n), Vec::with_capacity(n)];
        for _ in 0..n {
            for (tool, samples) in tools.iter().zip(samples.iter_mut()) {
                let t = Instant::now();
                common::invoke(channel.clone(), tool, "").await;
                samples.push(t.elapsed());
            }
        }
        let [a, b] = samples.map(|s| {
            let (p50, p99) = percentiles(s);
            Figures { p50, p99, ..Figures::default() }
        });
        (a, b)
    }))
}

/// `curl` in the sandbox downloading `mib` MiB from 127.0.0.1:`port` directly and through the
/// proxy: MiB/s of each.
fn downloads(rt: &tokio::runtime::Runtime, build: &Build, port: u16, mib: usize) -> Result<(f64, f64), String> {
    let policy = common::network_tools(port);
    let d = common::try_start(&build.cordond(), &[("bench.toml".into(), policy)], &[])?;
    Ok(rt.block_on(async {
        let channel = cordon_proto::connect(&d.socket).await.unwrap();
        // Warm: the first download of each (page cache, the proxy's first tunnel).
        common::download(channel.clone(), "curl-direct", port, 1).await;
        common::download(channel.clone(), "curl-proxy", port, 1).await;
        let direct = common::download(channel.clone(), "curl-direct", port, mib).await;
        let proxy = common::download(channel.clone(), "curl-proxy", port, mib).await;
        (direct, proxy)
    }))
}

/// `cordon mcp` over its stdio, blocking reads: JSON-RPC lines.
struct McpClient {
    process: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    next_id: u64,
}

impl McpClient {
    /// `cordon mcp` of `build` on `socket` with `extra` arguments, initialized. Err: it closed its
    /// output before answering (e.g. an older build refusing a flag).
    fn start(build: &Build, socket: &Path, extra: &[&str]) -> Result<McpClient, String> {
        let mut process = Command::new(build.dir.join("cordon"))
            .arg("--socket")
            .arg(socket)
            .arg("mcp")
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = process.stdin.take().unwrap();
        let stdout = std::io::BufReader::new(process.stdout.take().unwrap());
        let mut client = McpClient { process, stdin, stdout, next_id: 0 };
        let init = serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}});
        client.try_rpc("initialize", init).map_err(|e| format!("`cordon mcp {}`: {e}", extra.join(" ")))?;
        writeln!(client.stdin, "{}", serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .unwrap();
        Ok(client)
    }

    fn try_rpc(&mut self, method: &str, params: serde_json::Value) -> Result<serde_json::Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let line = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{line}").map_err(|e| format!("writing to cordon mcp: {e}"))?;
        loop {
            let mut reply = String::new();
            if self.stdout.read_line(&mut reply).map_err(|e| e.to_string())? == 0 {
                return Err("cordon mcp closed its output".into());
            }
            let v: serde_json::Value = serde_json::from_str(&reply).unwrap();
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return Ok(v);
            }
        }
    }

    fn rpc(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.try_rpc(method, params).unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// A line of /proc/PID/status (`VmRSS`, `VmHWM`), in MB.
    fn status_mb(&self, field: &str) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.process.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with(&format!("{field}:"))).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<f64>().unwrap() / 1024.0
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// `tools/call` of `true` through `cordon mcp`, over its stdio with blocking reads.
fn mcp(build: &Build, n: usize) -> Figures {
    let d = build.start(POLICY, &[]);
    let mut client = McpClient::start(build, &d.socket, &[]).unwrap_or_else(|e| panic!("{e}"));
    let call = serde_json::json!({"name": "true", "arguments": {}});
    for _ in 0..20 {
        client.rpc("tools/call", call.clone());
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let v = client.rpc("tools/call", call.clone());
        samples.push(t.elapsed());
        assert_eq!(v["result"]["isError"], false, "{v}");
    }
    let (p50, p99) = percentiles(samples);
    Figures { p50, p99, ..Figures::default() }
}

/// One policy file of the registry at scale, as tests/bench/registry.py writes it: shared
/// defaults, `per_file` tools with four typed params each.
fn registry_file(index: usize, per_file: usize) -> String {
    const PROGRAMS: [&str; 5] = ["/bin/echo", "/usr/bin/git", "/bin/ls", "/usr/bin/grep", "/bin/cat"];
    let mut s = String::from(
        "version = 1\n\n[defaults]\ntimeout = \"1m\"\nmax_output = \"512KiB\"\ndanger = \"safe\"\n\
         allow = { groups = [\"cordon\"] }\nread = [\"/home\", \"/srv\"]\n\
         env = { GIT_PAGER = \"cat\", LC_ALL = \"C\" }\n\n",
    );
    for j in 0..per_file {
        let n = index * per_file + j;
        let program = PROGRAMS[n % PROGRAMS.len()];
        s.push_str(&format!(
            "[tools.tool-{n:05}]\n\
             description = \"Tool number {n} of file {index}: shows things about a repository\"\n\
             reason = \"benchmark: a realistic registry at scale\"\n\
             command = [\"{program}\", \"-C\", \"{{{{repo}}}}\", \"log\", \"-n\", \"{{{{count}}}}\", \"--grep\", \"{{{{pattern}}}}\", \"{{{{mode}}}}\"]\n\
             annotations = {{ title = \"Tool {n}\", read_only = true, idempotent = true }}\n"
        ));
        if n.is_multiple_of(4) {
            s.push_str("working_dir = \"/srv\"\n");
        }
        if n.is_multiple_of(10) {
            s.push_str("read = [\"/home\", \"/srv\", \"/usr/share\"]\n");
        }
        s.push_str(&format!(
            "\n[tools.tool-{n:05}.params.repo]\ntype = \"path\"\ndescription = \"the repository's directory\"\nrequired = true\n\
             \n[tools.tool-{n:05}.params.count]\ntype = \"integer\"\ndescription = \"how many commits\"\nmin = 1\nmax = 500\ndefault = 20\n\
             \n[tools.tool-{n:05}.params.pattern]\ntype = \"string\"\ndescription = \"what to look for in commit messages\"\npattern = \"[A-Za-z0-9_ -]{{1,64}}\"\nrequired = true\n\
             \n[tools.tool-{n:05}.params.mode]\ntype = \"enum\"\ndescription = \"which commits\"\nvalues = [\"--all\", \"--no-merges\", \"--first-parent\"]\n\n"
        ));
    }
    s
}

/// `cordon mcp` at a large registry, one cold listing.
#[derive(Debug, Clone, Copy, Default)]
struct McpScale {
    rss_mb: f64,
    hwm_mb: f64,
    pages: usize,
    slowest_page_ms: f64,
    first_listing_ms: f64,
    /// From starting the process to the last page (start-up and `initialize` included).
    from_start_ms: f64,
}

/// A cordond with `policies` (the registry), a new `cordon mcp` (`--page-size page` when the
/// build has it) listing every tool following `nextCursor`: at least `tools` tools.
fn mcp_scale(
    build: &Build,
    policies: &[(String, String)],
    tools: usize,
    page: usize,
) -> Result<(McpScale, Option<String>), String> {
    let d = common::try_start(&build.cordond(), policies, &[])?;
    let t0 = Instant::now();
    let page_arg = page.to_string();
    let (mut client, note) = match McpClient::start(build, &d.socket, &["--page-size", &page_arg]) {
        Ok(c) => (c, None),
        Err(why) => {
            let c = McpClient::start(build, &d.socket, &[])?;
            (c, Some(format!("one answer, no pages ({why})")))
        }
    };
    let mut scale = McpScale::default();
    let mut listed = 0;
    let mut cursor: Option<serde_json::Value> = None;
    let first = Instant::now();
    loop {
        let params = match &cursor {
            Some(c) => serde_json::json!({ "cursor": c }),
            None => serde_json::json!({}),
        };
        let t = Instant::now();
        let v = client.rpc("tools/list", params);
        let took = t.elapsed().as_secs_f64() * 1e3;
        scale.slowest_page_ms = scale.slowest_page_ms.max(took);
        scale.pages += 1;
        listed += v["result"]["tools"].as_array().map_or(0, Vec::len);
        match v["result"].get("nextCursor") {
            Some(c) if !c.is_null() => cursor = Some(c.clone()),
            _ => break,
        }
    }
    scale.first_listing_ms = first.elapsed().as_secs_f64() * 1e3;
    scale.from_start_ms = t0.elapsed().as_secs_f64() * 1e3;
    assert!(listed >= tools, "cordon mcp listed {listed} tools, expected at least {tools}");
    scale.rss_mb = client.status_mb("VmRSS");
    scale.hwm_mb = client.status_mb("VmHWM");
    Ok((scale, note))
}

/// A whole process, `n` times: p50 and p99.
fn whole(n: usize, mut command: impl FnMut() -> Command) -> Figures {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let status = command().stdout(Stdio::null()).stderr(Stdio::null()).status().unwrap();
        samples.push(t.elapsed());
        assert!(status.success());
    }
    let (p50, p99) = percentiles(samples);
    Figures { p50, p99, ..Figures::default() }
}

/// The measured figures, best round of each.
#[derive(Default)]
struct Table {
    /// name -> best figures over the rounds.
    best: Vec<(String, Figures)>,
    /// Derived figures (differences, ratios, sizes): name -> (unit, lower is better, one value
    /// per round).
    derived: Vec<(String, &'static str, bool, Vec<f64>)>,
    /// name -> why the figure could not be measured.
    missing: Vec<(String, String)>,
    /// Notes printed under the tables.
    notes: Vec<String>,
}

impl Table {
    fn keep_best(&mut self, name: String, f: Figures) {
        match self.best.iter_mut().find(|(n, _)| *n == name) {
            Some((_, b)) => {
                if f.p50 > 0.0 && (b.p50 == 0.0 || f.p50 < b.p50) {
                    b.p50 = f.p50;
                    b.p99 = f.p99;
                }
                if f.cpu_ms > 0.0 && (b.cpu_ms == 0.0 || f.cpu_ms < b.cpu_ms) {
                    b.cpu_ms = f.cpu_ms;
                }
                b.per_sec = b.per_sec.max(f.per_sec);
                b.refused = b.refused.min(f.refused);
            }
            None => self.best.push((name, f)),
        }
    }

    fn derive(&mut self, name: String, unit: &'static str, lower_is_better: bool, v: f64) {
        match self.derived.iter_mut().find(|(n, ..)| *n == name) {
            Some((.., values)) => values.push(v),
            None => self.derived.push((name, unit, lower_is_better, vec![v])),
        }
    }

    fn miss(&mut self, name: String, why: String) {
        if !self.missing.iter().any(|(n, _)| *n == name) {
            self.missing.push((name, why));
        }
    }

    fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    fn get(&self, name: &str) -> Option<Figures> {
        self.best.iter().find(|(n, _)| n == name).map(|(_, f)| *f)
    }

    /// A derived figure's best round.
    fn get_derived(&self, name: &str) -> Option<f64> {
        self.derived.iter().find(|(n, ..)| n == name).map(|(_, _, lower, values)| {
            if *lower {
                values.iter().copied().fold(f64::INFINITY, f64::min)
            } else {
                values.iter().copied().fold(f64::NEG_INFINITY, f64::max)
            }
        })
    }
}

fn main() {
    let env = |name: &str, default: usize| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let n = env("CORDON_BENCH_N", 400);
    let rounds = env("CORDON_BENCH_ROUNDS", 2).max(1);
    let mib = env("CORDON_BENCH_MIB", 256);
    let page = env("CORDON_BENCH_PAGE", 500);
    let registry_tools = 10_000;
    let rt = Arc::new(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap());
    let host = HostSandbox::probe();
    let work = tempfile::tempdir().unwrap();
    let mut builds =
        vec![Build { label: "cordon".into(), dir: cordon_tests::bin("cordond").parent().unwrap().to_path_buf() }];
    if let Some(dir) = std::env::var_os("CORDON_BENCH_BASELINE") {
        builds.push(Build { label: "baseline".into(), dir: PathBuf::from(dir) });
    }
    println!(
        "host: landlock ABI {}, cgroups {} ({}), {} CPUs; {n} calls per figure, best of {rounds} interleaved rounds",
        host.landlock_abi,
        host.cgroups.mode,
        if host.is_root { "root" } else { "not root" },
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    for b in &builds {
        println!("{}: {}", b.label, b.dir.display());
    }
    let mut keep = Vec::new();
    let floor = build_floor(work.path(), &host, &mut keep);
    let bwrap = Command::new("bwrap").args(["--ro-bind", "/", "/", "/bin/true"]).status().is_ok_and(|s| s.success());
    let curl = Path::new(common::CURL).exists();
    let port = common::upstream();
    let per_file = registry_tools / 100;
    let registry: Vec<(String, String)> =
        (0..100).map(|i| (format!("{i:03}.toml"), registry_file(i, per_file))).collect();
    let audit_fs = file_system(Path::new(common::AUDIT_PARENT));

    let mut table = Table::default();
    // CORDON_BENCH_ONLY=TEXT: only the figures whose name contains TEXT (and the bare baselines).
    let only = std::env::var("CORDON_BENCH_ONLY").ok();
    let wanted = |name: &str| {
        only.as_deref().is_none_or(|o| name.contains(o) || name.starts_with("bare") || name.starts_with("floor"))
    };
    macro_rules! figure {
        ($name:expr, $measure:expr $(,)?) => {{
            let name: String = $name;
            if wanted(&name) {
                let f = $measure;
                table.keep_best(name, f);
            }
        }};
    }
    for round in 0..rounds {
        eprintln!("round {}", round + 1);
        if let Some(floor) = &floor {
            figure!("bare: C vfork+exec".into(), run_floor(floor, "bare", n));
            figure!("bare 8-way: 8 C spawn loops at once".into(), bare_many(floor, 8, n));
            figure!("floor: C, same kernel work".into(), run_floor(floor, "floor", n));
        }
        figure!("fdatasync: a record appended, beside the audit log".into(), {
            let d = builds[0].start(POLICY, &[]);
            fdatasync_latency(d.audit().parent().unwrap(), n)
        });
        for b in &builds {
            let l = &b.label;
            figure!(format!("{l}: gRPC round trip alone (GetTool)"), grpc_round_trip(&rt, b, n));
            figure!(format!("{l}: gRPC Invoke, 1 connection"), grpc_one(&rt, b, n, &[]));
            figure!(
                format!("{l}: gRPC Invoke, 1 connection, --metrics"),
                grpc_one(&rt, b, n, &["--metrics", "127.0.0.1:0"]),
            );
            figure!(format!("{l}: MCP tools/call"), mcp(b, n));
            let raised = ["--max-concurrent", "64", "--max-per-caller", "64"];
            figure!(format!("{l}: 8 clients, limits raised"), grpc_many(&rt, b, &raised, 8, n / 8, "true"));
            figure!(format!("{l}: 32 clients, default limits, 50 ms tool"), grpc_many(&rt, b, &[], 32, 5, "nap"));

            let name = format!("{l}: private temp space (temp = true minus false)");
            if wanted(&name) {
                match pair(&rt, b, TEMP_POLICY, ["true", "notemp"], n) {
                    Ok((with, without)) => {
                        table.keep_best(format!("{l}: Invoke, temp = true"), with);
                        table.keep_best(format!("{l}: Invoke, temp = false"), without);
                        table.derive(name, "ms", true, with.p50 - without.p50);
                    }
                    Err(why) => table.miss(name, why),
                }
            }
            let name = format!("{l}: hosts tool (hosts minus no network)");
            if wanted(&name) {
                let policy = common::network_tools(port);
                match pair(&rt, b, &policy, ["hosts", "plain"], n) {
                    Ok((hosts, plain)) => {
                        table.keep_best(format!("{l}: Invoke, hosts (own netns + proxy)"), hosts);
                        table.keep_best(format!("{l}: Invoke, no network"), plain);
                        table.derive(name, "ms", true, hosts.p50 - plain.p50);
                    }
                    Err(why) => table.miss(name, why),
                }
            }
            let name = format!("{l}: proxy download {mib} MiB (proxy / direct)");
            if wanted(&name) {
                if !curl {
                    table.miss(name, "curl is not installed".into());
                } else {
                    match downloads(&rt, b, port, mib) {
                        Ok((direct, proxy)) => {
                            table.derive(format!("{l}: download direct (connect_tcp)"), "MiB/s", false, direct);
                            table.derive(format!("{l}: download through the proxy (hosts)"), "MiB/s", false, proxy);
                            table.derive(name, "x", false, proxy / direct);
                        }
                        Err(why) => table.miss(name, why),
                    }
                }
            }
            let d = b.start(POLICY, &[]);
            let cordon = b.dir.join("cordon");
            figure!(
                format!("{l}: `cordon run` whole process"),
                whole(n / 4, || {
                    let mut c = Command::new(&cordon);
                    c.arg("--socket").arg(&d.socket).args(["run", "true"]);
                    c
                }),
            );
            drop(d);
            let name = format!("{l}: cordon mcp, {registry_tools} tools: all pages, first listing");
            if wanted(&name) {
                match mcp_scale(b, &registry, registry_tools, page) {
                    Ok((scale, note)) => {
                        table.derive(name, "ms", true, scale.first_listing_ms);
                        table.derive(
                            format!("{l}: cordon mcp, {registry_tools} tools: slowest page"),
                            "ms",
                            true,
                            scale.slowest_page_ms,
                        );
                        table.derive(
                            format!("{l}: cordon mcp, {registry_tools} tools: pages"),
                            "",
                            true,
                            scale.pages as f64,
                        );
                        table.derive(
                            format!("{l}: cordon mcp, {registry_tools} tools: from process start"),
                            "ms",
                            true,
                            scale.from_start_ms,
                        );
                        table.derive(
                            format!("{l}: cordon mcp, {registry_tools} tools: RSS after listing"),
                            "MB",
                            true,
                            scale.rss_mb,
                        );
                        table.derive(
                            format!("{l}: cordon mcp, {registry_tools} tools: peak RSS"),
                            "MB",
                            true,
                            scale.hwm_mb,
                        );
                        if let Some(note) = note {
                            table.note(format!("{l}: cordon mcp, {registry_tools} tools: {note}"));
                        }
                    }
                    Err(why) => table.miss(name, why),
                }
            }
        }
        if bwrap {
            figure!(
                "bwrap --ro-bind / / (whole process)".into(),
                whole(n / 4, || {
                    let mut c = Command::new("bwrap");
                    c.args(["--ro-bind", "/", "/", "/bin/true"]);
                    c
                }),
            );
        }
    }
    print_tables(&table, &builds, &audit_fs, page, registry_tools, bwrap);
}

fn print_tables(table: &Table, builds: &[Build], audit_fs: &str, page: usize, registry_tools: usize, bwrap: bool) {
    let bare = table.get("bare: C vfork+exec");
    let floor = table.get("floor: C, same kernel work");
    let bare8 = table.get("bare 8-way: 8 C spawn loops at once");
    let sync = table.get("fdatasync: a record appended, beside the audit log");
    println!();
    println!(
        "{:<58} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8}",
        "figure", "p50 ms", "p99 ms", "vs bare", "vs floor", "CPU ms", "calls/s", "refused"
    );
    let opt = |v: f64, digits: usize| if v > 0.0 { format!("{v:.digits$}") } else { "-".into() };
    let ratio = |v: f64, base: Option<Figures>| match base {
        Some(b) if v > 0.0 && b.p50 > 0.0 => format!("{:.2}x", v / b.p50),
        _ => "-".into(),
    };
    for (name, f) in &table.best {
        println!(
            "{:<58} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>7.0}%",
            name,
            opt(f.p50, 3),
            opt(f.p99, 3),
            ratio(f.p50, bare),
            ratio(f.p50, floor),
            opt(f.cpu_ms, 3),
            opt(f.per_sec, 0),
            f.refused
        );
    }
    println!("(fdatasync: {audit_fs}, {RECORD_BYTES}-byte lines; the daemons' audit logs are in the same directory)");
    if !table.derived.is_empty() || !table.missing.is_empty() {
        println!();
        println!("{:<58} {:>10} {:>24}", "figure", "best", "over the rounds");
        for (name, unit, _, values) in &table.derived {
            let best = table.get_derived(name).unwrap_or_default();
            let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let digits = if *unit == "ms" || *unit == "x" { 3 } else { 1 };
            let digits = if unit.is_empty() { 0 } else { digits };
            println!(
                "{:<58} {:>10} {:>24}",
                name,
                format!("{best:.digits$} {unit}"),
                format!("{lo:.digits$} .. {hi:.digits$}")
            );
        }
        for (name, why) in &table.missing {
            println!("{name:<58} {:>10}   {why}", "-");
        }
    }
    for note in &table.notes {
        println!("({note})");
    }
    println!(
        "(cordon mcp at {registry_tools} tools: --page-size {page}; the first listing of a new front-end, every page)"
    );
    if !bwrap {
        println!("(bubblewrap is not installed: `apt-get install bubblewrap` adds the bwrap row)");
    }

    // The goals of issue 33, each a ratio or difference measured in this run.
    println!();
    let value = |s: Option<f64>| s.filter(|v| v.is_finite());
    let per_build =
        |f: &dyn Fn(&str) -> Option<f64>| -> Vec<Option<f64>> { builds.iter().map(|b| value(f(&b.label))).collect() };
    let p50 = |name: String| table.get(&name).map(|f| f.p50).filter(|v| *v > 0.0);
    let rt_of = |l: &str| p50(format!("{l}: gRPC round trip alone (GetTool)"));
    let bound = |l: &str, syncs: f64| -> Option<f64> { Some(floor?.p50 + rt_of(l)? + syncs * sync?.p50 + 0.1) };
    struct Goal {
        figure: String,
        values: Vec<Option<f64>>,
        unit: &'static str,
        goal: String,
        met: Box<dyn Fn(f64) -> bool>,
    }
    let mut goals = vec![
        Goal {
            figure: "gRPC Invoke p50, 1 connection / floor".into(),
            values: per_build(&|l| Some(p50(format!("{l}: gRPC Invoke, 1 connection"))? / floor?.p50)),
            unit: "x",
            goal: "<= 1.6x".into(),
            met: Box::new(|v| v <= 1.6),
        },
        Goal {
            figure: "MCP tools/call p50 / floor".into(),
            values: per_build(&|l| Some(p50(format!("{l}: MCP tools/call"))? / floor?.p50)),
            unit: "x",
            goal: "<= 1.8x".into(),
            met: Box::new(|v| v <= 1.8),
        },
        Goal {
            figure: "8 clients, limits raised / bare 8-way".into(),
            values: per_build(&|l| {
                Some(table.get(&format!("{l}: 8 clients, limits raised"))?.per_sec / bare8?.per_sec)
            }),
            unit: "x",
            goal: ">= 0.6x".into(),
            met: Box::new(|v| v >= 0.6),
        },
        Goal {
            figure: "private temp space, per call".into(),
            values: per_build(&|l| table.get_derived(&format!("{l}: private temp space (temp = true minus false)"))),
            unit: "ms",
            goal: "<= +0.05 ms".into(),
            met: Box::new(|v| v <= 0.05),
        },
        Goal {
            figure: "a hosts tool, per call".into(),
            values: per_build(&|l| table.get_derived(&format!("{l}: hosts tool (hosts minus no network)"))),
            unit: "ms",
            goal: "<= +0.15 ms".into(),
            met: Box::new(|v| v <= 0.15),
        },
        Goal {
            figure: "proxy download / direct".into(),
            values: per_build(&|l| {
                table
                    .derived
                    .iter()
                    .find(|(n, ..)| n.starts_with(&format!("{l}: proxy download")))
                    .and_then(|(n, ..)| table.get_derived(n))
            }),
            unit: "x",
            goal: ">= 0.8x".into(),
            met: Box::new(|v| v >= 0.8),
        },
        Goal {
            figure: "`cordon run` whole process / bwrap".into(),
            values: per_build(&|l| {
                Some(
                    p50(format!("{l}: `cordon run` whole process"))?
                        / p50("bwrap --ro-bind / / (whole process)".into())?,
                )
            }),
            unit: "x",
            goal: "<= 1x".into(),
            met: Box::new(|v| v <= 1.0),
        },
        Goal {
            figure: format!("cordon mcp, {registry_tools} tools: RSS"),
            values: per_build(&|l| {
                table.get_derived(&format!("{l}: cordon mcp, {registry_tools} tools: RSS after listing"))
            }),
            unit: "MB",
            goal: "<= 40 MB".into(),
            met: Box::new(|v| v <= 40.0),
        },
        Goal {
            figure: format!("cordon mcp, {registry_tools} tools: slowest page"),
            values: per_build(&|l| {
                table.get_derived(&format!("{l}: cordon mcp, {registry_tools} tools: slowest page"))
            }),
            unit: "ms",
            goal: "<= 50 ms".into(),
            met: Box::new(|v| v <= 50.0),
        },
        Goal {
            figure: format!("cordon mcp, {registry_tools} tools: all pages"),
            values: per_build(&|l| {
                table.get_derived(&format!("{l}: cordon mcp, {registry_tools} tools: all pages, first listing"))
            }),
            unit: "ms",
            goal: "<= 500 ms".into(),
            met: Box::new(|v| v <= 500.0),
        },
    ];
    // The Invoke bound: floor + one round trip + the durable records' fdatasyncs that are not
    // overlapped with other work + 0.1 ms of cordon's own. Both ways: neither record's sync
    // overlapped (as before issue 33), and the `started` record's overlapped with the child's
    // setup (only the terminal record's left on the critical path).
    for (syncs, what) in [(2.0, "2 syncs, neither overlapped"), (1.0, "1 sync, `started` overlapped")] {
        goals.push(Goal {
            figure: format!("gRPC Invoke p50 - bound ({what})"),
            values: per_build(&|l| Some(p50(format!("{l}: gRPC Invoke, 1 connection"))? - bound(l, syncs)?)),
            unit: "ms",
            goal: "<= 0".into(),
            met: Box::new(|v| v <= 0.0),
        });
    }
    for b in builds {
        let l = &b.label;
        if let (Some(f), Some(r), Some(s), Some(b2), Some(b1)) = (floor, rt_of(l), sync, bound(l, 2.0), bound(l, 1.0)) {
            println!(
                "{l}: Invoke bound = floor {:.3} + round trip {r:.3} + 2 x fdatasync {:.3} + 0.1 = {b2:.3} ms \
                 ({:.3} ms with the `started` sync overlapped)",
                f.p50, s.p50, b1
            );
        }
    }
    let labels: Vec<&str> = builds.iter().map(|b| b.label.as_str()).collect();
    print!("| {:<50} |", "GOALS: figure");
    for l in &labels {
        print!(" {l:>10} |");
    }
    println!(" {:>12} | met? |", "goal");
    print!("|{}|", "-".repeat(52));
    for _ in &labels {
        print!("{}|", "-".repeat(12));
    }
    println!("{}|------|", "-".repeat(14));
    for g in &goals {
        print!("| {:<50} |", g.figure);
        for v in &g.values {
            let digits = if g.unit == "MB" {
                1
            } else if g.unit == "x" {
                2
            } else {
                3
            };
            let shown = v.map_or("-".to_string(), |v| format!("{v:.digits$} {}", g.unit));
            print!(" {shown:>10} |");
        }
        let met = g.values.first().copied().flatten().map_or("-", |v| if (g.met)(v) { "yes" } else { "NO" });
        let also: Vec<String> = g
            .values
            .iter()
            .zip(&labels)
            .skip(1)
            .filter_map(|(v, l)| v.map(|v| format!("{l}: {}", if (g.met)(v) { "yes" } else { "no" })))
            .collect();
        print!(" {:>12} | {met:<4} |", g.goal);
        if !also.is_empty() {
            print!(" ({})", also.join(", "));
        }
        println!();
    }
    println!("(met? is the first build's, `{}`; \"-\": not measured, see above)", labels[0]);
}
