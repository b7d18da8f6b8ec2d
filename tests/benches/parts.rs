//! Where an invocation's time goes, phase by phase: validation, the pinned-path check, landlock
//! ruleset, cgroups (a recycled leaf, or a new one for memory-limited runs), a durable audit
//! record, seccomp compilation (once per registry load, not per call), and fork versus
//! posix_spawn; each against a bare spawn where it says so.
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
    if host.cgroups.available() {
        time("cgroup: recycled leaf (no memory limit)", |i| {
            let cg = host.cgroups.create(&format!("leaf-{i}"), &tool.sandbox.limits, 512).unwrap();
            let _fds = cg.procs_fds();
            assert!(cg.release().1.is_none(), "an empty leaf was not recycled");
        });
    }
    // Validation of a call's arguments (two params), as cordond does per call.
    let text = r#"version = 1
[tools.v]
description = "validate"
reason = "bench"
command = ["/bin/echo", "{{text}}", "{{count}}"]
[tools.v.params.text]
type = "string"
pattern = "[a-z ]+"
required = true
[tools.v.params.count]
type = "integer"
min = 1
max = 100
"#;
    let set = cordon_core::policy::load_sources(&[("v.toml".into(), text.to_string())], &host.policy_host()).unwrap();
    let v = &set.tools[0];
    let reps = N * 20;
    let t = Instant::now();
    for _ in 0..reps {
        let json = cordon_core::validate::parse_arguments(r#"{"text": "hello world", "count": 7}"#).unwrap();
        cordon_core::validate::validate(v, &json).unwrap();
    }
    println!("{:<40} {:>8.3} ms", "validate a call (2 params)", t.elapsed().as_secs_f64() * 1e3 / f64::from(reps));
    // The audit log's durable write (one record, write + fdatasync by the writer thread), on a
    // disk-backed directory as a real log would be.
    let dir = tempfile::Builder::new().prefix("cordon-parts-").tempdir_in("/var/tmp").unwrap();
    let options = cordon_audit::Options {
        path: dir.path().join("audit.jsonl"),
        max_size: cordon_audit::DEFAULT_MAX_SIZE,
        keep: cordon_audit::DEFAULT_KEEP,
    };
    let (audit, _) = cordon_audit::Audit::open(options).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    time("audit: one durable record (fdatasync)", |i| {
        let record =
            cordon_audit::Record::new(cordon_audit::Decision::Started).invocation(&format!("{i:032x}")).tool("bench");
        rt.block_on(audit.durable(record)).unwrap();
    });
    println!(
        "seccomp program: {} instructions",
        compile(Profile { tcp: true, bind: true, unix: true }).unwrap().program.len()
    );
}
