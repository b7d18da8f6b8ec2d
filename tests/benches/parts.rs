//! Where an invocation's setup time goes: landlock ruleset, cgroups, seccomp compilation (which
//! happens once per registry load, not per call), and fork versus posix_spawn.
//! Run with `cargo bench -p cordon-tests --bench parts`.
#![allow(clippy::unwrap_used)]

use std::os::unix::process::CommandExt;
use std::time::Instant;

use cordon_core::policy::SandboxPolicy;
use cordon_sandbox::HostSandbox;
use cordon_sandbox::{Profile, compile_seccomp as compile};

const N: u32 = 300;

fn time(label: &str, mut f: impl FnMut(u32)) {
    let t = Instant::now();
    for i in 0..N {
        f(i);
    }
    println!("{label:<40} {:>8.3} ms", t.elapsed().as_secs_f64() * 1e3 / f64::from(N));
}

fn main() {
    let host = HostSandbox::probe();
    let policy = SandboxPolicy::default();
    println!("host: landlock ABI {}, cgroups {}", host.landlock_abi, host.cgroups.mode);
    time("landlock ruleset (per call)", |_| {
        cordon_sandbox::landlock_ruleset(host.landlock_abi, &policy).unwrap();
    });
    if host.cgroups.available() {
        time("cgroup create + remove (per call)", |i| {
            let mut cg = host.cgroups.create(&format!("parts-{i}"), &policy.limits, 512).unwrap();
            let _files = cg.procs_fds();
            cg.remove();
        });
    }
    time("seccomp compile (per registry load)", |_| {
        compile(Profile { tcp: true, bind: false, unix: false }).unwrap();
    });
    time("spawn /bin/true (posix_spawn)", |_| {
        std::process::Command::new("/bin/true").status().unwrap();
    });
    time("spawn /bin/true (fork, as with pre_exec)", |_| {
        let mut c = std::process::Command::new("/bin/true");
        // SAFETY: the closure does nothing; it only forces std's fork path.
        unsafe { c.pre_exec(|| Ok(())) };
        c.status().unwrap();
    });
    // The per-invocation check of pinned paths (grants, working_dir, command[0]): a tool with
    // the example policies' five read roots, two write roots and a working dir, against a bare
    // spawn in the same run; and the landlock ruleset built from the held descriptors.
    let text = r#"version = 1
[tools.t]
description = "pins"
reason = "bench"
command = ["/bin/true"]
working_dir = "/tmp"
read = ["/home", "/srv", "/opt", "/tmp", "/var/tmp"]
write = ["/tmp", "/var/tmp"]
"#;
    let set =
        cordon_core::policy::load_sources(&[("bench.toml".into(), text.to_string())], &host.policy_host()).unwrap();
    let tool = &set.tools[0];
    assert!(tool.is_available(), "{:?}", tool.availability);
    let t = Instant::now();
    for _ in 0..N {
        std::process::Command::new("/bin/true").status().unwrap();
    }
    let bare = t.elapsed().as_secs_f64() / f64::from(N);
    let reps = N * 20;
    let t = Instant::now();
    for _ in 0..reps {
        assert!(matches!(tool.availability_now(), cordon_core::policy::Availability::Available { .. }));
    }
    let check = t.elapsed().as_secs_f64() / f64::from(reps);
    println!(
        "{:<40} {:>8.3} ms ({} pinned paths; {:.3}x a bare spawn of {:.3} ms)",
        "pinned-path check (per call)",
        check * 1e3,
        tool.sandbox.pins.all().count(),
        check / bare,
        bare * 1e3
    );
    time("landlock ruleset with 7 pinned grants", |_| {
        cordon_sandbox::landlock_ruleset(host.landlock_abi, &tool.sandbox).unwrap();
    });
    println!(
        "seccomp program: {} instructions",
        compile(Profile { tcp: true, bind: true, unix: true }).unwrap().program.len()
    );
}
