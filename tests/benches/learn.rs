//! The cost of a learn run (docs/learn.md): cordond over gRPC `Invoke` on one connection, p50 of a
//! tool that opens K files under a tree (`cat TREE/f*`), called with `learn = [TREE]` (fanotify
//! group, the private read-only bind and its mark, one event read back per open) against the same
//! tool with the tree granted `read` normally, for K = 1, 100 and 1,000. Both tools live in one
//! daemon and are measured in interleaved rounds; compare the ratios, not milliseconds (machines
//! here are noisy).
//!
//! `cargo bench -p cordon-tests --bench learn` (root: learning needs a root cordond);
//! `CORDON_BENCH_N` calls per figure and round (default 50).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cordon_proto::v1;

const COUNTS: [usize; 3] = [1, 100, 1000];

fn q(p: &Path) -> String {
    format!("{:?}", p.to_str().unwrap())
}

/// Invokes `tool` (with `learn` when given) and returns how many paths it learnt.
async fn invoke(channel: tonic::transport::Channel, tool: &str, learn: Option<&Path>) -> usize {
    let mut client = v1::cordon_client::CordonClient::new(channel);
    let learn = learn.map(|p| vec![p.to_str().unwrap().to_string()]).unwrap_or_default();
    let request = v1::InvokeRequest { tool: tool.into(), arguments_json: String::new(), stream_output: false, learn };
    let mut stream = client.invoke(request).await.unwrap().into_inner();
    let mut learnt = None;
    while let Some(ev) = stream.message().await.unwrap() {
        if let Some(v1::invoke_event::Event::Finished(f)) = ev.event {
            assert_eq!(f.exit_code, Some(0), "{tool}: {f:?}");
            assert!(!f.learn_incomplete, "{tool}: incomplete");
            learnt = Some(f.learned.len());
        }
    }
    learnt.expect("no result")
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("learn bench: needs root (a root cordond learns); nothing measured");
        return;
    }
    let n: usize = std::env::var("CORDON_BENCH_N").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut policy = String::from("version = 1\n");
    for k in COUNTS {
        let tree = d.join(format!("tree{k}"));
        std::fs::create_dir_all(&tree).unwrap();
        for i in 0..k {
            std::fs::write(tree.join(format!("f{i}")), "x").unwrap();
        }
        let command = format!("[\"sh\", \"-c\", \"cat {}/f* > /dev/null\"]", tree.to_str().unwrap());
        policy.push_str(&format!(
            "[tools.granted{k}]\ndescription = \"reads {k} files\"\nreason = \"benchmark\"\ncommand = {command}\n\
             read = [{}]\n[tools.learn{k}]\ndescription = \"reads {k} files\"\nreason = \"benchmark\"\n\
             command = {command}\n",
            q(&tree)
        ));
    }
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
    // (granted, learn) p50 per K.
    let mut best = [[f64::MAX; 2]; COUNTS.len()];
    rt.block_on(async {
        let channel = cordon_proto::connect(&socket).await.unwrap();
        for k in COUNTS {
            let tree = d.join(format!("tree{k}"));
            for _ in 0..3 {
                invoke(channel.clone(), &format!("granted{k}"), None).await;
                // Every file, and the directory the glob listed.
                assert_eq!(invoke(channel.clone(), &format!("learn{k}"), Some(&tree)).await, k + 1);
            }
        }
        for round in 0..3 {
            eprintln!("round {}", round + 1);
            for (i, k) in COUNTS.iter().enumerate() {
                let tree = d.join(format!("tree{k}"));
                for (j, learn) in [None, Some(tree.as_path())].into_iter().enumerate() {
                    let tool = if learn.is_some() { format!("learn{k}") } else { format!("granted{k}") };
                    let mut samples = Vec::with_capacity(n);
                    for _ in 0..n {
                        let start = Instant::now();
                        invoke(channel.clone(), &tool, learn).await;
                        samples.push(start.elapsed());
                    }
                    samples.sort();
                    best[i][j] = best[i][j].min(samples[n / 2].as_secs_f64() * 1e3);
                }
            }
        }
    });
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::SIGTERM);
    let _ = child.wait();
    println!("gRPC Invoke of `cat TREE/f*` (K files), p50 (best of 3 interleaved rounds of {n}):");
    println!("  {:>6}  {:>12}  {:>12}  ratio", "K", "granted read", "--learn");
    for (k, [granted, learn]) in COUNTS.iter().zip(best) {
        println!("  {k:>6}  {granted:>9.3} ms  {learn:>9.3} ms  x{:.2}", learn / granted);
    }
}
