//! The invocation figures of issue 12, reproducible by anyone, every one against baselines
//! measured in the same run (machines here are noisy: compare ratios, not milliseconds):
//!
//! - `bare`: a C program's `vfork` + exec of `/bin/true` + wait (`benches/floor.c`);
//! - `floor`: the same C program doing only the kernel work cordon needs: join the invocation's
//!   cgroups, a landlock ruleset with the same rules as cordond's, `no_new_privs`, cordond's own
//!   seccomp program; then exec;
//! - a gRPC round trip that runs nothing (`GetTool`), the transport's own share;
//! - cordond over gRPC `Invoke` on one connection (p50, p99), and its CPU per invocation
//!   (daemon and tool: the daemon's user+system time, its reaped children's included); the same
//!   with `--metrics` (counting on), to read the metrics' cost as a ratio;
//! - an MCP `tools/call` through `cordon mcp`;
//! - throughput with 8 clients (limits raised);
//! - `cordon run` as a whole process, against `bwrap --ro-bind / / /bin/true` where bubblewrap is
//!   installed;
//! - 32 clients with the default limits, calling a tool that runs 50 ms: how many were refused.
//!
//! Rounds are interleaved and each figure is the best round's. `CORDON_BENCH_BASELINE=DIR`
//! (a directory with another build's `cordond` and `cordon`) measures that build too, in the
//! same rounds: before/after in one run. `CORDON_BENCH_N` calls per figure (default 400);
//! `CORDON_BENCH_ONLY=TEXT` measures only the figures whose name contains TEXT (with the bare
//! baseline), e.g. to profile one of them.
//!
//! `cargo build --release --workspace && cargo bench -p cordon-tests --bench invoke`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    p50: f64,
    p99: f64,
    per_sec: f64,
    cpu_ms: f64,
    refused: f64,
}

fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let at = |p: usize| samples[(samples.len() * p / 100).min(samples.len() - 1)].as_secs_f64() * 1e3;
    (at(50), at(99))
}

/// A build to measure: a directory with `cordond` and `cordon`.
#[derive(Debug, Clone)]
struct Build {
    label: String,
    dir: PathBuf,
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

fn start(build: &Build, extra: &[&str]) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("bench.toml"), POLICY).unwrap();
    let socket = dir.path().join("cordon.sock");
    let child = Command::new(build.dir.join("cordond"))
        .arg("--policies")
        .arg(&policies)
        .arg("--socket")
        .arg(&socket)
        .arg("--audit")
        .arg(dir.path().join("audit.jsonl"))
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "{} did not start", build.label);
        std::thread::sleep(Duration::from_millis(20));
    }
    Running { child, socket, _dir: dir }
}

/// One `Invoke` of `tool` to its end: true when it finished, false when refused BUSY.
async fn invoke(channel: tonic::transport::Channel, tool: &str) -> bool {
    let mut client = v1::cordon_client::CordonClient::new(channel);
    let request =
        v1::InvokeRequest { tool: tool.into(), arguments_json: String::new(), stream_output: false, learn: Vec::new() };
    let mut stream = match client.invoke(request).await {
        Ok(s) => s.into_inner(),
        Err(status) if status.code() == tonic::Code::ResourceExhausted => return false,
        Err(status) => panic!("invoke: {status}"),
    };
    let mut finished = false;
    loop {
        match stream.message().await {
            Ok(Some(ev)) => {
                if let Some(v1::invoke_event::Event::Finished(f)) = ev.event {
                    assert_eq!(f.exit_code, Some(0));
                    finished = true;
                }
            }
            Ok(None) => break,
            Err(status) if status.code() == tonic::Code::ResourceExhausted => return false,
            Err(status) => panic!("invoke: {status}"),
        }
    }
    assert!(finished);
    true
}

/// gRPC on one connection: p50, p99 and the daemon's CPU per call; `extra` flags on top of raised
/// limits (`--metrics` to compare the same call with counting on).
fn grpc_one(rt: &tokio::runtime::Runtime, build: &Build, n: usize, extra: &[&str]) -> Figures {
    let mut args = vec!["--max-concurrent", "64", "--max-per-caller", "64"];
    args.extend_from_slice(extra);
    let d = start(build, &args);
    let pid = d.child.id() as i32;
    rt.block_on(async {
        let channel = cordon_proto::connect(&d.socket).await.unwrap();
        for _ in 0..20 {
            invoke(channel.clone(), "true").await;
        }
        let cpu0 = cpu_ms(pid);
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            invoke(channel.clone(), "true").await;
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
    let d = start(build, &[]);
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
    let d = start(build, extra);
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

/// `tools/call` of `true` through `cordon mcp`, over its stdio with blocking reads.
fn mcp(build: &Build, n: usize) -> Figures {
    let d = start(build, &[]);
    let mut raw = Command::new(build.dir.join("cordon"))
        .arg("--socket")
        .arg(&d.socket)
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = raw.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(raw.stdout.take().unwrap());
    let rpc = |stdin: &mut std::process::ChildStdin,
               stdout: &mut std::io::BufReader<std::process::ChildStdout>,
               id: u64,
               method: &str,
               params: serde_json::Value| {
        let line = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{line}").unwrap();
        loop {
            let mut reply = String::new();
            assert!(stdout.read_line(&mut reply).unwrap() > 0, "cordon mcp closed its output");
            let v: serde_json::Value = serde_json::from_str(&reply).unwrap();
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{v}");
                return v;
            }
        }
    };
    let init = serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}});
    rpc(&mut stdin, &mut stdout, 0, "initialize", init);
    writeln!(stdin, "{}", serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).unwrap();
    let call = serde_json::json!({"name": "true", "arguments": {}});
    for i in 0..20 {
        rpc(&mut stdin, &mut stdout, 1 + i, "tools/call", call.clone());
    }
    let mut samples = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let t = Instant::now();
        let v = rpc(&mut stdin, &mut stdout, 100 + i, "tools/call", call.clone());
        samples.push(t.elapsed());
        assert_eq!(v["result"]["isError"], false, "{v}");
    }
    drop(stdin);
    let _ = raw.wait();
    let (p50, p99) = percentiles(samples);
    Figures { p50, p99, ..Figures::default() }
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

fn main() {
    let n: usize = std::env::var("CORDON_BENCH_N").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
    let rt = Arc::new(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap());
    let host = HostSandbox::probe();
    let work = tempfile::tempdir().unwrap();
    let mut builds =
        vec![Build { label: "cordon".into(), dir: cordon_tests::bin("cordond").parent().unwrap().to_path_buf() }];
    if let Some(dir) = std::env::var_os("CORDON_BENCH_BASELINE") {
        builds.push(Build { label: "baseline".into(), dir: PathBuf::from(dir) });
    }
    println!(
        "host: landlock ABI {}, cgroups {} ({}), {} CPUs; {n} calls per figure, best of 2 interleaved rounds",
        host.landlock_abi,
        host.cgroups.mode,
        if host.is_root { "root" } else { "not root" },
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    let mut keep = Vec::new();
    let floor = build_floor(work.path(), &host, &mut keep);
    let bwrap = Command::new("bwrap").args(["--ro-bind", "/", "/", "/bin/true"]).status().is_ok_and(|s| s.success());

    // name -> best figures over the rounds.
    let mut best: Vec<(String, Figures)> = Vec::new();
    let mut keep_best = |name: String, f: Figures| match best.iter_mut().find(|(n, _)| *n == name) {
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
        None => best.push((name, f)),
    };
    // CORDON_BENCH_ONLY=TEXT: only the figures whose name contains TEXT (and the bare baseline).
    let only = std::env::var("CORDON_BENCH_ONLY").ok();
    let wanted = |name: &str| only.as_deref().is_none_or(|o| name.contains(o) || name.starts_with("bare"));
    macro_rules! figure {
        ($name:expr, $measure:expr $(,)?) => {{
            let name: String = $name;
            if wanted(&name) {
                keep_best(name, $measure);
            }
        }};
    }
    for round in 0..2 {
        eprintln!("round {}", round + 1);
        if let Some(floor) = &floor {
            figure!("bare: C vfork+exec".into(), run_floor(floor, "bare", n));
            figure!("floor: C, same kernel work".into(), run_floor(floor, "floor", n));
        }
        for b in &builds {
            figure!(format!("{}: gRPC round trip alone (GetTool)", b.label), grpc_round_trip(&rt, b, n));
            figure!(format!("{}: gRPC Invoke, 1 connection", b.label), grpc_one(&rt, b, n, &[]));
            figure!(
                format!("{}: gRPC Invoke, 1 connection, --metrics", b.label),
                grpc_one(&rt, b, n, &["--metrics", "127.0.0.1:0"]),
            );
            figure!(format!("{}: MCP tools/call", b.label), mcp(b, n));
            let raised = ["--max-concurrent", "64", "--max-per-caller", "64"];
            figure!(format!("{}: 8 clients, limits raised", b.label), grpc_many(&rt, b, &raised, 8, n / 8, "true"));
            figure!(
                format!("{}: 32 clients, default limits, 50 ms tool", b.label),
                grpc_many(&rt, b, &[], 32, 5, "nap"),
            );
            let socket = start(b, &[]);
            let cordon = b.dir.join("cordon");
            figure!(
                format!("{}: `cordon run` whole process", b.label),
                whole(n / 4, || {
                    let mut c = Command::new(&cordon);
                    c.arg("--socket").arg(&socket.socket).args(["run", "true"]);
                    c
                }),
            );
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
    let bare = best.iter().find(|(n, _)| n.starts_with("bare")).map(|(_, f)| *f);
    println!(
        "{:<50} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}",
        "figure", "p50 ms", "p99 ms", "vs bare", "CPU ms", "calls/s", "refused"
    );
    for (name, f) in &best {
        let ratio = match bare {
            Some(b) if f.p50 > 0.0 => format!("{:.2}x", f.p50 / b.p50),
            _ => "-".into(),
        };
        let opt = |v: f64, digits: usize| if v > 0.0 { format!("{v:.digits$}") } else { "-".into() };
        println!(
            "{:<50} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7.0}%",
            name,
            opt(f.p50, 3),
            opt(f.p99, 3),
            ratio,
            opt(f.cpu_ms, 3),
            opt(f.per_sec, 0),
            f.refused
        );
    }
    if !bwrap {
        println!("(bubblewrap is not installed: `apt-get install bubblewrap` adds the bwrap row)");
    }
}
