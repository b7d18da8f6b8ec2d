//! Invocation overhead, as ratios against a bare spawn measured in the same run:
//! 1. bare: `/bin/true` spawned and awaited from tokio;
//! 2. spawner: the same through cordon's sandbox spawner (landlock, seccomp, rlimits, cgroups
//!    when root), without the daemon;
//! 3. cordond: the same through the real daemon over gRPC `Invoke` on its Unix socket;
//!    and `no-view`: the spawner without the read-only filesystem view (`sandbox/mntns.rs`).
//!
//! Each at 1 and 8 concurrent clients. Run with
//! `cargo build --release --workspace && cargo bench -p cordon-tests --bench spawn`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_core::argv::Plan;
use cordon_core::policy::SandboxPolicy;
use cordon_proto::v1;
use cordon_sandbox::{Confinement, HostSandbox, RunSpec, run};
use cordon_sandbox::{MountViews, Profile, compile_seccomp as compile};
use tokio_util::sync::CancellationToken;

const PER_CLIENT: usize = 200;

#[derive(Debug)]
struct Stats {
    p50: Duration,
    p99: Duration,
    per_sec: f64,
}

async fn measure<F, Fut>(clients: usize, f: F) -> Stats
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let f = Arc::new(f);
    // Warm up.
    for i in 0..10 {
        f(i).await;
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::with_capacity(PER_CLIENT);
            for i in 0..PER_CLIENT {
                let t = Instant::now();
                f(c * PER_CLIENT + i).await;
                samples.push(t.elapsed());
            }
            samples
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let total = started.elapsed();
    all.sort();
    Stats { p50: all[all.len() / 2], p99: all[all.len() * 99 / 100], per_sec: all.len() as f64 / total.as_secs_f64() }
}

fn plan() -> Plan {
    Plan {
        executable: "/bin/true".into(),
        argv: vec!["/bin/true".into()],
        display_argv: vec!["/bin/true".into()],
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cwd: "/".into(),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let host = Arc::new(HostSandbox::probe());
    // The spawner without the read-only filesystem view, for its cost (see sandbox/mntns.rs).
    let no_views = Arc::new(MountViews::disabled("benchmark"));
    let programs = Arc::new(compile(Profile { tcp: false, bind: false, unix: false }).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(
        policies.join("bench.toml"),
        "version = 1\n[tools.true]\ndescription = \"does nothing\"\nreason = \"benchmark\"\ncommand = [\"/bin/true\"]\n",
    )
    .unwrap();
    let daemon = cordon_tests::Daemon::start_in(
        tempfile::tempdir().unwrap(),
        policies,
        &["--max-concurrent", "64", "--max-per-caller", "64"],
    );
    let socket: PathBuf = daemon.socket.clone();

    println!(
        "host: landlock ABI {}, cgroups {} ({}), filesystem view {}, {} CPUs",
        host.landlock_abi,
        host.cgroups.mode,
        if host.is_root { "root" } else { "not root" },
        host.views.mode().as_str(),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    println!("{:<10} {:>7} {:>10} {:>10} {:>10} {:>12}", "path", "clients", "p50", "p99", "inv/s", "p50 vs bare");
    for clients in [1usize, 8] {
        let bare = rt.block_on(measure(clients, |_| async {
            let status = tokio::process::Command::new("/bin/true").status().await.unwrap();
            assert!(status.success());
        }));
        let spawner_with = |views: Arc<MountViews>| {
            let h = host.clone();
            let p = programs.clone();
            rt.block_on(measure(clients, move |i| {
                let h = h.clone();
                let p = p.clone();
                let views = views.clone();
                async move {
                    let plan = plan();
                    let policy = SandboxPolicy::default();
                    let id = format!("bench-{i}");
                    let confine = Confinement {
                        id: &id,
                        policy: &policy,
                        landlock_abi: h.landlock_abi,
                        seccomp: p,
                        identity: None,
                        dedicated_uid: false,
                        cgroups: &h.cgroups,
                        views: &views,
                        generation: 1,
                        cgroup_dirs: None,
                        denials: None,
                    };
                    let spec = RunSpec {
                        plan: &plan,
                        timeout: Duration::from_secs(10),
                        max_output: 1024,
                        grace: Duration::from_secs(1),
                        output: None,
                        proxy: None,
                        temp_files: Vec::new(),
                        stdio: cordon_sandbox::Stdio::Captured,
                        pid: None,
                        learn: Vec::new(),
                    };
                    let out = run(spec, &confine, &CancellationToken::new()).await.unwrap();
                    assert_eq!(out.exit_code, Some(0));
                }
            }))
        };
        let spawner = spawner_with(host.views.clone());
        let no_view = spawner_with(no_views.clone());
        let s = socket.clone();
        let channels: Vec<tonic::transport::Channel> = rt.block_on(async { futures_channels(&s, clients).await });
        let channels = Arc::new(channels);
        let grpc = rt.block_on(measure(clients, move |i| {
            let channel = channels[i / PER_CLIENT % channels.len()].clone();
            async move {
                let mut client = v1::cordon_client::CordonClient::new(channel);
                let mut stream = client
                    .invoke(v1::InvokeRequest {
                        tool: "true".into(),
                        arguments_json: String::new(),
                        stream_output: false,
                        learn: Vec::new(),
                    })
                    .await
                    .unwrap()
                    .into_inner();
                let mut finished = false;
                while let Some(ev) = stream.message().await.unwrap() {
                    if let Some(v1::invoke_event::Event::Finished(f)) = ev.event {
                        assert_eq!(f.exit_code, Some(0));
                        finished = true;
                    }
                }
                assert!(finished);
            }
        }));
        for (name, s) in [("bare", &bare), ("no-view", &no_view), ("spawner", &spawner), ("cordond", &grpc)] {
            println!(
                "{:<10} {:>7} {:>8.2}ms {:>8.2}ms {:>10.0} {:>11.2}x",
                name,
                clients,
                s.p50.as_secs_f64() * 1e3,
                s.p99.as_secs_f64() * 1e3,
                s.per_sec,
                s.p50.as_secs_f64() / bare.p50.as_secs_f64()
            );
        }
    }
}

async fn futures_channels(socket: &std::path::Path, n: usize) -> Vec<tonic::transport::Channel> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(cordon_proto::connect(socket).await.unwrap());
    }
    out
}
