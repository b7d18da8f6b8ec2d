//! The per-call cost of carve-outs inside grants (issue 30, item 2; docs/carve-outs.md): cordond
//! over gRPC `Invoke` on one connection, p50 of `/bin/true` with one write root carrying 0, 2 and
//! 10 carve-outs, and a write root that is a git work tree (its protected set: 4 read-only entries
//! and their anchors). All four tools live in one daemon and are measured in interleaved rounds;
//! compare the ratios to the 0 figure, not milliseconds (machines here are noisy).
//!
//! `cargo bench -p cordon-tests --bench carve` (root: the daemon makes mount views);
//! `CORDON_BENCH_N` calls per figure and round (default 200).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cordon_proto::v1;

fn tool(name: &str, write: &str) -> String {
    format!(
        "[tools.{name}]\ndescription = \"does nothing\"\nreason = \"benchmark\"\ncommand = [\"/bin/true\"]\n\
         write = {write}\n"
    )
}

fn q(p: &Path) -> String {
    format!("{:?}", p.to_str().unwrap())
}

async fn invoke(channel: tonic::transport::Channel, tool: &str) {
    let mut client = v1::cordon_client::CordonClient::new(channel);
    let request =
        v1::InvokeRequest { tool: tool.into(), arguments_json: String::new(), stream_output: false, learn: Vec::new() };
    let mut stream = client.invoke(request).await.unwrap().into_inner();
    let mut finished = false;
    while let Some(ev) = stream.message().await.unwrap() {
        if let Some(v1::invoke_event::Event::Finished(f)) = ev.event {
            assert_eq!(f.exit_code, Some(0), "{tool}: {f:?}");
            finished = true;
        }
    }
    assert!(finished, "{tool} did not finish");
}

fn main() {
    let n: usize = std::env::var("CORDON_BENCH_N").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mk = |name: &str| {
        let p = d.join(name);
        std::fs::create_dir_all(&p).unwrap();
        p
    };
    let (p0, p2, p10, pgit) = (mk("p0"), mk("p2"), mk("p10"), mk("pgit"));
    for i in 0..5 {
        std::fs::write(p2.join(format!("s{i}")), "x").unwrap();
        std::fs::create_dir_all(p10.join(format!("ro{i}"))).unwrap();
        std::fs::write(p10.join(format!("s{i}")), "x").unwrap();
    }
    let git = Command::new("git").args(["init", "-q"]).arg(&pgit).status().unwrap();
    assert!(git.success());
    let deny = |n: usize| (0..n).map(|i| format!("\"s{i}\"")).collect::<Vec<_>>().join(", ");
    let ro = |n: usize| (0..n).map(|i| format!("\"ro{i}/\"")).collect::<Vec<_>>().join(", ");
    let policy = format!(
        "version = 1\n{}{}{}{}",
        tool("c0", &format!("[{}]", q(&p0))),
        tool("c2", &format!("[{{ path = {}, deny = [{}] }}]", q(&p2), deny(2))),
        tool("c10", &format!("[{{ path = {}, deny = [{}], read_only = [{}] }}]", q(&p10), deny(5), ro(5))),
        tool("git", &format!("[{}]", q(&pgit))),
    );
    let policies = d.join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("bench.toml"), policy).unwrap();
    let socket = d.join("cordon.sock");
    let mut child = Command::new(cordon_tests::bin("cordond"))
        .arg("--policies")
        .arg(&policies)
        .arg("--socket")
        .arg(&socket)
        .arg("--audit")
        .arg(d.join("audit.jsonl"))
        .args(["--max-concurrent", "64", "--max-per-caller", "64"])
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
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let tools = ["c0", "c2", "c10", "git"];
    let mut best = [f64::MAX; 4];
    rt.block_on(async {
        let channel = cordon_proto::connect(&socket).await.unwrap();
        for t in tools {
            for _ in 0..10 {
                invoke(channel.clone(), t).await;
            }
        }
        for round in 0..3 {
            eprintln!("round {}", round + 1);
            for (i, t) in tools.iter().enumerate() {
                let mut samples = Vec::with_capacity(n);
                for _ in 0..n {
                    let start = Instant::now();
                    invoke(channel.clone(), t).await;
                    samples.push(start.elapsed());
                }
                samples.sort();
                best[i] = best[i].min(samples[n / 2].as_secs_f64() * 1e3);
            }
        }
    });
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::SIGTERM);
    let _ = child.wait();
    println!("gRPC Invoke of /bin/true, p50 (best of 3 interleaved rounds of {n}):");
    let labels =
        ["0 carve-outs", "2 carve-outs (deny)", "10 carve-outs (5 deny, 5 read_only)", "git work tree (protected set)"];
    for (label, p50) in labels.iter().zip(best) {
        println!("  {label:<40} {p50:>7.3} ms  x{:.2}", p50 / best[0]);
    }
}
