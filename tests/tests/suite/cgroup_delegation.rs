//! cordond in a cgroup delegated to it, as systemd runs a unit with `Delegate=`: the unit's
//! memory limit and its stop must cover every tool. Simulated without systemd: the test makes a
//! "unit" cgroup (`cordon-test-<pid>-<n>.service`) in every hierarchy cordon uses on this host
//! (pure v2: the one hierarchy; hybrid: the v2 hierarchy at `unified` plus the v1 `memory` and
//! `pids` ones), marks it delegated as systemd 251+ does (`trusted.delegate=1` on the cgroup of
//! the hierarchy systemd tracks units in), and starts the real cordond inside it. The attacks:
//! a tool that outlives the unit's stop, a tool that uses more memory than the unit allows.
//! Every cgroup a test made is removed by a drop guard, also when the test fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cordon_tests::{Daemon, bin, eventually, fixture, process_gone, require_root};
use serde_json::json;

const ROOT: &str = "/sys/fs/cgroup";
/// The attack binary (its `balloon` attack allocates and touches memory).
const ATTACK: &str = env!("CARGO_BIN_EXE_cordon-attack");

/// A tool that records its pid and the pid of a child that left its session (`setsid`), then
/// waits for that child: it runs until someone kills it.
const STAYER: &str = r#"
[tools.stayer]
description = "record pids, then wait on a sleeper in its own session"
reason = "tests"
command = ["/bin/sh", "-c", "echo $$ > \"$1\"; /usr/bin/setsid /bin/sleep 1000 & echo $! >> \"$1\"; wait", "sh", "{{pidfile}}"]
timeout = "60s"

[tools.stayer.params.pidfile]
type = "path"
required = true
"#;

/// One cgroup hierarchy cordon uses here: how `/proc/PID/cgroup` names it, and its mount.
#[derive(Debug, Clone)]
struct Hierarchy {
    /// `""` for the v2 hierarchy (the `0::` line), else the v1 controller.
    controller: &'static str,
    mount: PathBuf,
}

impl Hierarchy {
    fn is_v2(&self) -> bool {
        self.controller.is_empty()
    }

    /// The hierarchy systemd tracks units in and marks delegation on.
    fn tracks_units(&self) -> bool {
        self.is_v2()
    }

    /// This hierarchy's path in a `/proc/PID/cgroup` text.
    fn path_in(&self, cgroup: &str) -> Option<String> {
        cgroup.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let ours =
                if self.is_v2() { l.starts_with("0::") } else { controllers.split(',').any(|c| c == self.controller) };
            ours.then(|| path.to_string())
        })
    }
}

/// The hierarchies of this host, as cordond uses them (pure v2, or hybrid; a pure v1 host has
/// no `cgroup.kill` and its units are tracked in `name=systemd`: not simulated here).
fn hierarchies() -> Vec<Hierarchy> {
    let root = Path::new(ROOT);
    if root.join("cgroup.controllers").exists() {
        return vec![Hierarchy { controller: "", mount: root.to_path_buf() }];
    }
    let mut found = Vec::new();
    if root.join("unified/cgroup.controllers").exists() {
        found.push(Hierarchy { controller: "", mount: root.join("unified") });
    }
    for controller in ["memory", "pids"] {
        if root.join(controller).join("cgroup.procs").exists() {
            found.push(Hierarchy { controller, mount: root.join(controller) });
        }
    }
    found
}

/// A simulated systemd unit with `Delegate=`: a cgroup in every hierarchy, marked delegated.
/// Dropping it kills everything inside and removes every cgroup below it, then itself.
#[derive(Debug)]
struct Unit {
    name: String,
    hierarchies: Vec<Hierarchy>,
}

impl Unit {
    fn create() -> Unit {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!("cordon-test-{}-{}.service", std::process::id(), N.fetch_add(1, Ordering::SeqCst));
        let unit = Unit { name, hierarchies: hierarchies() };
        assert!(unit.hierarchies.iter().any(Hierarchy::tracks_units), "this host has no cgroup v2 hierarchy");
        for h in &unit.hierarchies {
            let dir = unit.dir(h);
            std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
            if h.tracks_units() {
                // systemd enables the controllers it delegates in the parent's subtree_control
                // (pure v2); the test does the same where the parent is the root.
                if h.mount == Path::new(ROOT) {
                    let _ = std::fs::write(h.mount.join("cgroup.subtree_control"), "+memory +pids");
                }
                set_xattr(&dir, "trusted.delegate", b"1");
            }
        }
        unit
    }

    fn dir(&self, h: &Hierarchy) -> PathBuf {
        h.mount.join(&self.name)
    }

    /// `sh -c '...' sh`: moves itself into the unit in every hierarchy, then runs cordond.
    fn wrapper(&self) -> Vec<String> {
        let mut script = String::new();
        for h in &self.hierarchies {
            script.push_str(&format!("echo $$ > '{}' && ", self.dir(h).join("cgroup.procs").display()));
        }
        script.push_str("exec \"$@\"");
        vec!["/bin/sh".into(), "-c".into(), script, "sh".into()]
    }

    /// Starts cordond inside the unit with `policies` and `extra_args`.
    fn start(&self, policies: &str, extra_args: &[&str]) -> Daemon {
        let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
        let policy_dir = dir.path().join("policies");
        std::fs::create_dir(&policy_dir).unwrap();
        std::fs::write(policy_dir.join("tools.toml"), policies).unwrap();
        let wrapper = self.wrapper();
        let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
        Daemon::start_under(&wrapper, dir, policy_dir, extra_args)
    }

    /// Every process anywhere in the unit, in any hierarchy.
    fn processes(&self) -> Vec<i32> {
        let mut pids = Vec::new();
        for h in &self.hierarchies {
            for dir in subtree(&self.dir(h)) {
                let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
                pids.extend(procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// What `systemctl stop` ends with (after KillMode=mixed's SIGTERM to the main process): every
    /// process in the unit's cgroup killed, by `cgroup.kill` on the v2 hierarchy.
    fn kill(&self) {
        for h in self.hierarchies.iter().filter(|h| h.tracks_units()) {
            std::fs::write(self.dir(h).join("cgroup.kill"), "1").unwrap();
        }
    }
}

impl Drop for Unit {
    fn drop(&mut self) {
        for _ in 0..200 {
            let pids = self.processes();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for h in &self.hierarchies {
            // Deepest first.
            let mut dirs = subtree(&self.dir(h));
            dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
            for dir in dirs {
                let removed = eventually(Duration::from_secs(5), || std::fs::remove_dir(&dir).is_ok() || !dir.exists());
                if !removed {
                    eprintln!("cannot remove {}", dir.display());
                }
            }
        }
    }
}

/// `dir` and every cgroup below it.
fn subtree(dir: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        if let Ok(entries) = std::fs::read_dir(&d) {
            todo.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
            all.push(d);
        }
    }
    all
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    use std::os::unix::ffi::OsStrExt as _;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let c_name = std::ffi::CString::new(name).unwrap();
    // SAFETY: both strings are NUL-terminated and outlive the call; `value` is valid for reads of
    // its length.
    let r = unsafe { libc::setxattr(c_path.as_ptr(), c_name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert_eq!(r, 0, "setxattr {name} on {}: {}", path.display(), std::io::Error::last_os_error());
}

fn proc_cgroup(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap()
}

/// Runs the `stayer` tool in the background and returns its two pids once both are recorded.
fn start_stayer(d: &Daemon) -> (std::process::Child, Vec<i32>) {
    let pidfile = d.dir.path().join("stayer.pids");
    let client = d.cordon_spawn(&["run", "stayer", "--args-json", &json!({ "pidfile": pidfile }).to_string()]);
    let read = || -> Vec<i32> {
        std::fs::read_to_string(&pidfile).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
    };
    assert!(
        eventually(Duration::from_secs(10), || read().len() == 2),
        "the tool never recorded its pids:\n{}",
        d.log_text()
    );
    (client, read())
}

fn policies() -> String {
    concat!(fixture!(header "20s")).to_string() + STAYER
}

/// The attack: a tool (and a child of it that left its session) outlives `systemctl stop`,
/// because cordond made its cgroup outside the unit. In a delegated unit cordond moves itself
/// (and the reaper it starts) into `<unit>/daemon`, leaves no process in the unit's own cgroup,
/// puts the tool below `<unit>/cordon/<instance>/` in every hierarchy, and killing the unit's
/// cgroup kills the tool and its child.
#[test]
fn a_tool_cannot_outlive_the_stop_of_a_delegated_unit() {
    require_root!("the test makes cgroups");
    let unit = Unit::create();
    let mut d = unit.start(&policies(), &[]);
    let pid = d.pid();
    let own = proc_cgroup(pid);
    for h in &unit.hierarchies {
        assert_eq!(h.path_in(&own), Some(format!("/{}/daemon", unit.name)), "cordond's cgroups:\n{own}");
        let inner = std::fs::read_to_string(unit.dir(h).join("cgroup.procs")).unwrap();
        assert_eq!(inner.trim(), "", "processes left in the unit's own cgroup {}", unit.dir(h).display());
    }
    let leaf = std::fs::read_to_string(unit.dir(&unit.hierarchies[0]).join("daemon/cgroup.procs")).unwrap();
    assert!(leaf.lines().count() >= 2, "cordond and its reaper should be in the leaf: {leaf:?}");

    // status, doctor and the audit say where the invocations go.
    let status = d.cordon(&["status", "--json"]);
    status.assert_code(0);
    let mechanisms = status.json()["cgroup_mechanisms"].to_string();
    assert!(mechanisms.contains(&format!("delegated cgroup /{}", unit.name)), "{mechanisms}");
    assert!(mechanisms.contains(&format!("{}/cordon/{}", unit.name, instance(pid))), "{mechanisms}");
    let started = d.audit_records().into_iter().find(|r| r["decision"] == "daemon_started").unwrap();
    assert_eq!(started["sandbox"]["cgroup_delegated"], format!("/{}", unit.name), "{started}");
    assert!(d.log_text().contains("cgroup_placement=delegated"), "{}", d.log_text());

    let (client, tool) = start_stayer(&d);
    for p in &tool {
        let cg = proc_cgroup(*p);
        for h in &unit.hierarchies {
            // The memory hierarchy has an invocation cgroup only for a tool with a memory limit;
            // this one stays in cordond's leaf there, inside the unit all the same.
            let path = h.path_in(&cg).unwrap();
            let inside = if h.controller == "memory" {
                format!("/{}/", unit.name)
            } else {
                format!("/{}/cordon/{}/", unit.name, instance(pid))
            };
            assert!(path.starts_with(&inside), "tool pid {p} is outside the unit: {cg}");
        }
    }

    unit.kill();
    for p in &tool {
        assert!(eventually(Duration::from_secs(10), || process_gone(*p)), "tool pid {p} survived the unit's stop");
    }
    assert!(d.wait_exit(Duration::from_secs(10)).is_some(), "cordond survived the unit's stop");
    drop(client);
    assert!(eventually(Duration::from_secs(10), || unit.processes().is_empty()), "left: {:?}", unit.processes());
}

/// The attack: a tool whose policy allows 1 GiB uses more than the unit's memory limit
/// (MemoryMax=; here 128 MiB) because its cgroup is outside the unit. Inside the unit the tool
/// (a balloon touching 16 MiB at a time up to 512 MiB) is OOM-killed before it touches 128 MiB,
/// cordon reports the SIGKILL, and the daemon keeps answering.
#[test]
fn the_units_memory_limit_bounds_a_tool_whose_policy_allows_more() {
    require_root!("the test makes cgroups");
    let unit = Unit::create();
    let limit: u64 = 128 << 20;
    for h in &unit.hierarchies {
        let dir = unit.dir(h);
        if h.mount == Path::new(ROOT) {
            std::fs::write(dir.join("memory.max"), limit.to_string()).unwrap();
            let _ = std::fs::write(dir.join("memory.swap.max"), "0");
        } else if h.controller == "memory" {
            std::fs::write(dir.join("memory.limit_in_bytes"), limit.to_string()).unwrap();
            let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), limit.to_string());
        }
    }
    let exec_dir = Path::new(ATTACK).parent().unwrap();
    let policy = format!(
        "version = 1\n\n[defaults]\nexec = [{}]\ntimeout = \"20s\"\n{}",
        cordon_tests::toml_str(exec_dir),
        cordon_tests::attack_tool("balloon", Path::new(ATTACK), "limits = { memory = \"1GiB\" }")
    );
    // The explicit choice, as the unit file makes it.
    let d = unit.start(&policy, &["--cgroups", "delegated"]);
    let (out, result) = d.run_json("balloon", &json!({ "attack": "balloon", "a": "512", "b": "16" }));
    let touched: u64 = result["stderr"]
        .as_str()
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("touched ")?.strip_suffix(" MiB")?.parse().ok())
        .max()
        .unwrap_or(0);
    eprintln!("balloon under a 128 MiB unit: {} after touching {touched} MiB", result["signal"]);
    assert_eq!(result["signal"], libc::SIGKILL, "the balloon was not OOM-killed: {out:?}");
    assert_eq!(result["timed_out"], false, "{result}");
    assert!(touched < 128, "touched {touched} MiB in a unit limited to 128 MiB");
    d.cordon(&["status"]).assert_code(0);
}

/// `--cgroups delegated` is an explicit choice: a cordond whose own cgroup is the root of the
/// hierarchy (no delegated cgroup) refuses to start (EX_CONFIG) and says what to do, rather than
/// make its invocation cgroups at the root, outside any unit.
#[test]
fn delegated_without_a_delegated_cgroup_refuses_to_start() {
    require_root!("cordond makes cgroups only as root");
    let tracking = hierarchies().into_iter().find(Hierarchy::tracks_units).expect("a cgroup v2 hierarchy");
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("tools.toml"), policies_text()).unwrap();
    // In the root cgroup, whatever cgroup the test runs in.
    let script = format!("echo $$ > '{}' && exec \"$@\"", tracking.mount.join("cgroup.procs").display());
    let out = Command::new("/bin/sh")
        .args(["-c", &script, "sh"])
        .arg(bin("cordond"))
        .arg("--policies")
        .arg(&policies)
        .arg("--socket")
        .arg(dir.path().join("cordon.sock"))
        .arg("--audit")
        .arg(dir.path().join("audit").join("audit.jsonl"))
        .args(["--cgroups", "delegated"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert!(stderr.contains("is the root of the hierarchy"), "{stderr}");
    assert!(stderr.contains("Delegate=") && stderr.contains("--cgroups root"), "{stderr}");
    assert!(!dir.path().join("cordon.sock").exists(), "it listened");
}

fn policies_text() -> &'static str {
    concat!(fixture!(header "20s"), fixture!(echo))
}

/// A cordond started by hand (its cgroup is not marked delegated) works as before: invocation
/// cgroups at the root of each hierarchy, `/cordon/<instance>/<id>`, and cordond stays where it was.
#[test]
fn a_hand_started_cordond_makes_invocation_cgroups_at_the_root() {
    require_root!("cordond makes cgroups only as root");
    let before = proc_cgroup(std::process::id() as i32);
    let d = Daemon::start(&[("tools.toml", &policies())]);
    let pid = d.pid();
    let (client, tool) = start_stayer(&d);
    let cg = proc_cgroup(tool[0]);
    for h in hierarchies().into_iter().filter(|h| h.controller != "memory") {
        let path = h.path_in(&cg).unwrap();
        assert!(
            path.starts_with(&format!("/cordon/{}/", instance(pid))),
            "tool cgroup {path} ({}):\n{cg}",
            h.mount.display()
        );
        assert_eq!(h.path_in(&proc_cgroup(pid)), h.path_in(&before), "cordond moved itself:\n{}", proc_cgroup(pid));
    }
    let started = d.audit_records().into_iter().find(|r| r["decision"] == "daemon_started").unwrap();
    assert_eq!(started["sandbox"]["cgroup_delegated"], serde_json::Value::Null, "{started}");
    drop(d);
    drop(client);
}

/// Tools for the recycled-leaf tests: `where` prints the tool's own cgroups; `leaver` leaves a
/// process behind in a session of its own and exits at once; `bounded` has a memory limit.
const POOL_TOOLS: &str = r#"
[tools.where]
description = "print my cgroups"
reason = "tests"
command = ["/bin/cat", "/proc/self/cgroup"]

[tools.leaver]
description = "leave a sleeper behind and exit"
reason = "tests"
command = ["/bin/sh", "-c", "/usr/bin/setsid /bin/sleep 1000 & echo $!"]

[tools.burn]
description = "spend CPU time, then print my cgroups"
reason = "tests"
command = ["/bin/sh", "-c", "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; exec cat /proc/self/cgroup"]

[tools.bounded]
description = "print my cgroups, under a memory limit"
reason = "tests"
command = ["/bin/cat", "/proc/self/cgroup"]
limits = { memory = "256MiB" }
"#;

/// The name of daemon `pid`'s own directory under `cordon/`: its pid namespace's inode, its pid
/// and its start time (`/proc/PID/stat` field 22), as cordond names it.
fn instance(pid: i32) -> String {
    use std::os::unix::fs::MetadataExt as _;
    let ns = std::fs::metadata(format!("/proc/{pid}/ns/pid")).unwrap().ino();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let start = stat[stat.rfind(')').unwrap() + 1..].split_whitespace().nth(19).unwrap().to_string();
    format!("{ns}-{pid}-{start}")
}

/// The invocation directories under this daemon's `cordon/<instance>` in every hierarchy.
fn leaves(pid: i32) -> Vec<(Hierarchy, Vec<String>)> {
    hierarchies()
        .into_iter()
        .filter_map(|h| {
            let dir = h.mount.join("cordon").join(instance(pid));
            let names = std::fs::read_dir(&dir).ok()?.flatten().filter(|e| e.path().is_dir());
            Some((h, names.map(|e| e.file_name().to_string_lossy().into_owned()).collect()))
        })
        .collect()
}

fn run_ok(d: &Daemon, tool: &str) -> String {
    let out = d.cordon(&["run", tool]);
    out.assert_code(0);
    out.stdout
}

/// Invocations without a memory limit reuse emptied leaf cgroups instead of making and removing
/// one each: after several calls one after another, each hierarchy holds one leaf, the same one
/// every call ran in, and it is empty.
#[test]
fn emptied_invocation_cgroups_are_reused() {
    require_root!("cordond makes cgroups only as root");
    let d = Daemon::start(&[("tools.toml", &(fixture!(header "20s").to_string() + POOL_TOOLS))]);
    let seen: std::collections::BTreeSet<String> = (0..6).map(|_| run_ok(&d, "where")).collect();
    assert_eq!(seen.len(), 1, "the calls ran in different cgroups: {seen:?}");
    for (h, names) in leaves(d.pid()) {
        // A v1 memory hierarchy holds only memory-limited invocations (none here).
        let expected = usize::from(h.controller != "memory");
        assert_eq!(names.len(), expected, "{}: {names:?}", h.mount.display());
        if expected == 0 {
            continue;
        }
        let leaf = h.mount.join("cordon").join(instance(d.pid())).join(&names[0]);
        let procs = std::fs::read_to_string(leaf.join("cgroup.procs")).unwrap();
        assert_eq!(procs, "", "a recycled leaf holds processes: {}", leaf.display());
    }
}

/// A recycled leaf's CPU counter keeps counting from where the last call left it; each call's
/// `cpu_ms` is its own: a call after a CPU-heavy one in the same leaf is charged only what it
/// used (the start of a call is not read from the leaf but taken from its release, when it was
/// verified empty).
#[test]
fn each_call_in_a_recycled_leaf_is_charged_only_its_own_cpu_time() {
    require_root!("cordond makes cgroups only as root");
    let d = Daemon::start(&[("tools.toml", &(fixture!(header "20s").to_string() + POOL_TOOLS))]);
    let first = run_ok(&d, "where");
    let burned = run_ok(&d, "burn");
    let after = run_ok(&d, "where");
    assert!(first == after && burned.trim_end() == first.trim_end(), "not one leaf: {first:?} {burned:?} {after:?}");
    let cpu: Vec<(String, u64)> = d
        .audit_records()
        .into_iter()
        .filter(|r| r["decision"] == "finished")
        .map(|r| (r["tool"].as_str().unwrap().to_string(), r["cpu_ms"].as_u64().unwrap_or_else(|| panic!("{r}"))))
        .collect();
    let tools: Vec<&str> = cpu.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(tools, ["where", "burn", "where"], "{cpu:?}");
    assert!(cpu[1].1 >= 100, "the CPU-heavy call was charged too little: {cpu:?}");
    assert!(cpu[2].1 * 4 < cpu[1].1, "the call after it was charged its CPU time too: {cpu:?}");
}

/// The attack: a tool leaves a process behind (a new session, so the group kill misses it),
/// hoping it lands in the next caller's cgroup. The cgroup kill ends it before the leaf is
/// reused, and a leaf is only reused once the kernel counts it empty: no later call shares a
/// cgroup with it, and no leaf of this daemon's holds a process between calls.
#[test]
fn a_process_left_behind_never_reaches_the_next_call_s_cgroup() {
    require_root!("cordond makes cgroups only as root");
    let d = Daemon::start(&[("tools.toml", &(fixture!(header "20s").to_string() + POOL_TOOLS))]);
    for _ in 0..4 {
        let pid: i32 = run_ok(&d, "leaver").trim().parse().unwrap();
        let dead = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |s| s.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
        };
        assert!(eventually(Duration::from_secs(5), dead), "the process {pid} the tool left behind survived");
        let next = run_ok(&d, "where");
        for (h, names) in leaves(d.pid()) {
            for name in names {
                let leaf = h.mount.join("cordon").join(instance(d.pid())).join(&name);
                let procs = std::fs::read_to_string(leaf.join("cgroup.procs")).unwrap_or_default();
                assert!(!procs.lines().any(|p| p.trim() == pid.to_string()), "{pid} is in {}", leaf.display());
                // Between calls nothing runs: a leaf holds no process at all.
                assert_eq!(procs, "", "{} holds {procs:?} between calls ({next})", leaf.display());
            }
        }
    }
}

/// A memory-limited invocation gets a cgroup of its own, named by its id, removed afterwards:
/// memory a previous invocation left charged to a cgroup must not count against its limit.
#[test]
fn a_memory_limited_invocation_never_runs_in_a_recycled_cgroup() {
    require_root!("cordond makes cgroups only as root");
    let d = Daemon::start(&[("tools.toml", &(fixture!(header "20s").to_string() + POOL_TOOLS))]);
    let recycled = run_ok(&d, "where");
    let own = run_ok(&d, "bounded");
    let memory = hierarchies().into_iter().find(|h| h.controller == "memory" || h.is_v2()).unwrap();
    let path = memory.path_in(&own).unwrap();
    let name = path.rsplit('/').next().unwrap().to_string();
    assert!(name.len() == 32 && name.bytes().all(|b| b.is_ascii_hexdigit()), "not an invocation id: {path}");
    assert_ne!(memory.path_in(&recycled), Some(path.clone()));
    let gone = || leaves(d.pid()).iter().all(|(_, names)| !names.contains(&name));
    assert!(eventually(Duration::from_secs(5), gone), "{path} was kept: {:?}", leaves(d.pid()));
}
