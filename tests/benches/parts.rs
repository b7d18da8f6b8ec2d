//! Where an invocation's setup time goes: landlock ruleset, cgroups, seccomp compilation (which
//! happens once per registry load, not per call), and fork versus posix_spawn.
//! Run with `cargo bench -p cordon-tests --bench parts`.
#![allow(clippy::unwrap_used)]

use std::os::unix::process::CommandExt;
use std::time::Instant;

use cordon_daemon::policy::SandboxPolicy;
use cordon_daemon::sandbox::HostSandbox;
use cordon_daemon::sandbox::seccomp::{Profile, compile};

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
        cordon_daemon::sandbox::landlock::build(host.landlock_abi, &policy).unwrap();
    });
    if host.cgroups.available() {
        time("cgroup create + remove (per call)", |i| {
            let mut cg = host.cgroups.create(&format!("parts-{i}"), &policy.limits, 512).unwrap();
            let _files = cg.procs_files().unwrap();
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
    println!(
        "seccomp program: {} instructions",
        compile(Profile { tcp: true, bind: true, unix: true }).unwrap().program.len()
    );
}
