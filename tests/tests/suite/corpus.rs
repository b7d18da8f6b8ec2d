//! The corpus of real projects (docs/corpus.md): small projects nobody on the team wrote, fetched
//! from the package registries at pinned versions by `.ci/corpus-fetch`, each run as a developer
//! would: set up by its owner (a venv, `cargo build`, `npm ci`, `make`), its test command run
//! directly, then `cordon init` (plain, no template) by the owner, `cordon policy check
//! --deny-warnings` on the file it wrote, the documented install step (the file copied unchanged
//! into cordond's policy directory, `cordon reload`), and the same test command through `cordon
//! run` and `cordon mcp`, called by the owner and by root. Each must give the direct run's exit
//! code and test count; any change the generated file would need fails the test. Prints the table
//! the closing note quotes (direct vs cordon exit code and test count, wall-clock ratio).
//!
//! The corpus lives in `$CORDON_CORPUS` (default /var/cache/cordon-corpus) and the Rust
//! toolchain the owner runs in `$CORDON_CORPUS_RUST` (default /opt/cordon-rust), both made by
//! `.ci/corpus-fetch`. Without them the test skips, except in CI (`CI` or `CORDON_CI` set), where
//! it fails: CI fails every test that would skip.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cordon_tests::agent::SOCKET_GROUP;
use cordon_tests::{Daemon, bin, require_root};
use serde_json::{Value, json};

/// The projects' owner: a developer account of its own (not the agent user of the other suites).
const OWNER: &str = "cordon-t-dev";

/// How a runner's summary counts tests.
#[derive(Debug, Clone, Copy)]
enum Runner {
    /// `test result: ok. N passed; M failed; K ignored` per test binary and for the doctests.
    Cargo,
    /// pytest's last line: `44 passed, 2 skipped in 5.56s`.
    Pytest,
    /// tape's TAP summary: `# tests N`, `# pass N`, `# fail N`.
    Tape,
    /// mocha's `N passing`, `N failing`, `N pending`.
    Mocha,
    /// bzip2's `make test`: each comparison it runs (`cmp A B`); make stops at the first failure.
    MakeCmp,
}

#[derive(Debug)]
struct Project {
    /// Directory under `$CORDON_CORPUS/src`.
    dir: &'static str,
    /// The project's directory in its owner's home (`~/src/NAME`): init names the tools after it.
    name: &'static str,
    ecosystem: &'static str,
    what: &'static str,
    runner: Runner,
    /// The owner's set-up, in the project, before anything of cordon (`sh -ec`; `$CORPUS` is the
    /// corpus directory).
    setup: &'static str,
    /// The test command the owner runs directly (`sh -ec`).
    direct: &'static str,
    /// The tool `cordon init` writes for it: `NAME-KIND`.
    kind: &'static str,
    /// Its arguments (the same selection the direct command makes).
    args: &'static [(&'static str, &'static str)],
}

const RUST_SETUP: &str = "cargo fetch --locked\ncargo test --locked --no-run -q";
const VENV: &str = "/usr/bin/python3 -m venv .venv\n\
     PIP_CONFIG_FILE=/dev/null .venv/bin/pip install -q --disable-pip-version-check --no-index \
     --find-links \"$CORPUS/wheels\" -r \"$CORPUS/python/$REQ.req\"\n\
     PIP_CONFIG_FILE=/dev/null .venv/bin/pip install -q --disable-pip-version-check --no-index \
     --find-links \"$CORPUS/wheels\" -e .";

const PROJECTS: &[Project] = &[
    Project {
        dir: "semver-1.0.23",
        name: "semver",
        ecosystem: "rust",
        what: "crate: build script, integration tests, doctests",
        runner: Runner::Cargo,
        setup: RUST_SETUP,
        direct: "cargo test --locked",
        kind: "cargo-test",
        args: &[],
    },
    Project {
        dir: "either-1.13.0",
        name: "either",
        ecosystem: "rust",
        what: "crate: dev-dependency serde_json, doctests",
        runner: Runner::Cargo,
        setup: RUST_SETUP,
        direct: "cargo test --locked -- either",
        kind: "cargo-test",
        args: &[("filter", "either")],
    },
    Project {
        dir: "byteorder-1.5.0",
        name: "byteorder",
        ecosystem: "rust",
        what: "crate: dev-dependencies quickcheck and rand, doctests",
        runner: Runner::Cargo,
        setup: RUST_SETUP,
        direct: "cargo test --locked -- u24",
        kind: "cargo-test",
        args: &[("filter", "u24")],
    },
    Project {
        dir: "num-traits-0.2.19",
        name: "num-traits",
        ecosystem: "rust",
        what: "crate: build script with a build-dependency (autocfg), doctests",
        runner: Runner::Cargo,
        setup: RUST_SETUP,
        direct: "cargo test --locked -- checked",
        kind: "cargo-test",
        args: &[("filter", "checked")],
    },
    Project {
        dir: "bzip2-1.0.8",
        name: "bzip2",
        ecosystem: "c",
        what: "bzip2's own Makefile (shipped in the bzip2-sys crate): make, make test",
        runner: Runner::MakeCmp,
        setup: "make -s",
        direct: "make test",
        kind: "make-test",
        args: &[],
    },
    Project {
        dir: "fasteners-0.19",
        name: "fasteners",
        ecosystem: "python",
        what: "sdist with its tests (setup.cfg); multiprocessing; pytest-timeout, pytest-xdist",
        runner: Runner::Pytest,
        setup: VENV,
        direct: ".venv/bin/pytest -p no:cacheprovider tests/test_process_lock.py",
        kind: "pytest",
        args: &[("test", "tests/test_process_lock.py")],
    },
    Project {
        dir: "portalocker-2.10.1",
        name: "portalocker",
        ecosystem: "python",
        what: "sdist with its tests; pytest.ini: pytest-cov (turned off by the tool), pytest-timeout",
        runner: Runner::Pytest,
        setup: VENV,
        // One test file, not the doctests its pytest.ini also collects from the package (the
        // doctest of `open_atomic` writes `test_file.txt` into the project root, which the tools
        // `cordon init` writes may not write: docs/corpus.md, "What needs a grant"), nor
        // tests.py, whose process tests race a one-second timeout and fail directly too on a
        // loaded two-core machine. `--no-cov` as the tool has it: coverage of one file is short
        // of the 100 % its .coveragerc demands.
        direct: ".venv/bin/pytest -p no:cacheprovider --no-cov portalocker_tests/test_semaphore.py",
        kind: "pytest",
        args: &[("test", "portalocker_tests/test_semaphore.py")],
    },
    Project {
        dir: "platformdirs-4.2.2",
        name: "platformdirs",
        ecosystem: "python",
        what: "pyproject-only (hatchling); pytest-mock",
        runner: Runner::Pytest,
        setup: VENV,
        direct: ".venv/bin/pytest -p no:cacheprovider",
        kind: "pytest",
        args: &[],
    },
    Project {
        dir: "exceptiongroup-git",
        name: "exceptiongroup",
        ecosystem: "git+python",
        what: "a git history of three PyPI releases; pyproject-only (flit)",
        runner: Runner::Pytest,
        setup: VENV,
        direct: ".venv/bin/pytest -p no:cacheprovider",
        kind: "pytest",
        args: &[],
    },
    Project {
        dir: "concat-map-0.0.1",
        name: "concat-map",
        ecosystem: "npm",
        what: "tarball ships test/; `tape test/*.js`",
        runner: Runner::Tape,
        setup: "",
        direct: "npm test",
        kind: "npm-test",
        args: &[],
    },
    Project {
        dir: "deep-equal-1.0.1",
        name: "deep-equal",
        ecosystem: "npm",
        what: "tarball ships test/; `tape test/*.js`",
        runner: Runner::Tape,
        setup: "",
        direct: "npm test",
        kind: "npm-test",
        args: &[],
    },
    Project {
        dir: "bplist-parser-0.2.0",
        name: "bplist-parser",
        ecosystem: "npm",
        what: "tarball ships test/ and its fixtures; `mocha test`",
        runner: Runner::Mocha,
        setup: "",
        direct: "npm test",
        kind: "npm-test",
        args: &[],
    },
    Project {
        dir: "url-join-4.0.1",
        name: "url-join",
        ecosystem: "npm",
        what: "tarball ships test/; `mocha --require should`",
        runner: Runner::Mocha,
        setup: "",
        direct: "npm test",
        kind: "npm-test",
        args: &[],
    },
];

fn corpus_dir() -> PathBuf {
    std::env::var_os("CORDON_CORPUS").map_or_else(|| PathBuf::from("/var/cache/cordon-corpus"), PathBuf::from)
}

fn rust_dir() -> PathBuf {
    std::env::var_os("CORDON_CORPUS_RUST").map_or_else(|| PathBuf::from("/opt/cordon-rust"), PathBuf::from)
}

fn in_ci() -> bool {
    ["CI", "CORDON_CI"].iter().any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty() && x != "0" && x != "false"))
}

/// Skips (outside CI) or fails (in CI) with `why`.
fn missing(why: &str) {
    assert!(!in_ci(), "the corpus is missing in CI ({why}): tests/run runs .ci/corpus-fetch first");
    cordon_tests::skip!(
        cordon_tests::Skip::NoCorpus,
        "the corpus of real projects: {why}; run .ci/corpus-fetch (as root) first, see docs/corpus.md"
    );
}

/// Creates the owner account once (idempotent across runs), in the daemon's socket group.
fn ensure_owner() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for _ in 0..50 {
            let _ = Command::new("groupadd").args(["-f", SOCKET_GROUP]).output();
            let _ = Command::new("useradd")
                .args(["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OWNER])
                .output();
            let _ = Command::new("usermod").args(["-aG", SOCKET_GROUP, OWNER]).output();
            let ok = Command::new("id").arg("-nG").arg(OWNER).output().unwrap();
            if ok.status.success() && String::from_utf8_lossy(&ok.stdout).split_whitespace().any(|g| g == SOCKET_GROUP)
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("could not create {OWNER} in {SOCKET_GROUP}");
    });
}

fn uid_of(name: &str) -> u32 {
    let out = Command::new("id").arg("-u").arg(name).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// What a run gave.
#[derive(Debug, Clone)]
struct Ran {
    code: Option<i32>,
    counts: BTreeMap<String, u64>,
    secs: f64,
    text: String,
}

impl Ran {
    fn total(&self) -> u64 {
        self.counts.iter().filter(|(k, _)| !matches!(k.as_str(), "warnings" | "tests")).map(|(_, v)| v).sum()
    }
    fn short(&self) -> String {
        format!("{} / {}", self.code.map_or_else(|| "-".into(), |c| c.to_string()), self.total())
    }
}

/// `N word` pairs of a line (`44 passed, 2 skipped`), words as given.
fn pairs(line: &str) -> Vec<(String, u64)> {
    let words: Vec<&str> = line.split(|c: char| c.is_whitespace() || c == ',' || c == ';' || c == '=').collect();
    let words: Vec<&str> = words.into_iter().filter(|w| !w.is_empty()).collect();
    words
        .windows(2)
        .filter_map(|w| w[0].parse::<u64>().ok().map(|n| (w[1].trim_end_matches('.').to_string(), n)))
        .collect()
}

fn count(runner: Runner, text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let mut add = |k: &str, n: u64| *out.entry(k.to_string()).or_insert(0) += n;
    match runner {
        Runner::Cargo => {
            for line in text.lines().filter(|l| l.contains("test result:")) {
                for (word, n) in pairs(line) {
                    if matches!(word.as_str(), "passed" | "failed" | "ignored") {
                        add(&word, n);
                    }
                }
            }
        }
        Runner::Pytest => {
            let last = text.lines().rev().find(|l| {
                l.contains(" in ")
                    && ["passed", "failed", "error", "skipped", "no tests ran"].iter().any(|w| l.contains(w))
            });
            for (word, n) in last.map(pairs).unwrap_or_default() {
                let word = match word.as_str() {
                    "warning" | "warnings" => "warnings".to_string(),
                    "error" | "errors" => "errors".to_string(),
                    _ => word,
                };
                add(&word, n);
            }
        }
        Runner::Tape => {
            for line in text.lines() {
                for key in ["tests", "pass", "fail"] {
                    if let Some(n) = line.strip_prefix(&format!("# {key}")).and_then(|r| r.trim().parse().ok()) {
                        add(key, n);
                    }
                }
            }
        }
        Runner::Mocha => {
            for line in text.lines() {
                for (word, n) in pairs(line) {
                    if matches!(word.as_str(), "passing" | "failing" | "pending") {
                        add(&word, n);
                    }
                }
            }
        }
        Runner::MakeCmp => add("cmp", text.lines().filter(|l| l.starts_with("cmp ")).count() as u64),
    }
    out
}

struct Env {
    tmp: tempfile::TempDir,
    home: PathBuf,
    path: String,
    corpus: PathBuf,
}

impl Env {
    fn new(corpus: &Path) -> Env {
        let tmp = tempfile::Builder::new().prefix("cordon-corpus-").tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir_all(home.join("src")).unwrap();
        let bin_dir = tmp.path().join("bin");
        std::fs::create_dir(&bin_dir).unwrap();
        std::os::unix::fs::symlink(bin("cordon"), bin_dir.join("cordon")).unwrap();
        let path = format!("{}:{}/bin:/usr/local/bin:/usr/bin:/bin", bin_dir.display(), rust_dir().display());
        let env = Env { tmp, home, path, corpus: corpus.to_path_buf() };
        // The owner's home is this one (cordond gives a tool its identity's HOME from the account).
        let out = Command::new("usermod").arg("-d").arg(&env.home).arg(OWNER).output().unwrap();
        assert!(out.status.success(), "usermod -d: {out:?}");
        // The developer fetched their crates before (`cargo fetch`): the corpus's registry.
        let cargo_home = env.home.join(".cargo");
        std::fs::create_dir_all(&cargo_home).unwrap();
        let out =
            Command::new("cp").arg("-a").arg(corpus.join("cargo-home/registry")).arg(&cargo_home).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        env.chown(&env.home);
        env
    }

    fn chown(&self, path: &Path) {
        let out = Command::new("chown").args(["-R", &format!("{OWNER}:{OWNER}")]).arg(path).output().unwrap();
        assert!(out.status.success(), "{out:?}");
    }

    /// A command as the owner (`setpriv`, its groups) or as root, with a clean environment.
    fn command(&self, as_root: bool, dir: &Path, program: &str) -> Command {
        let mut c = if as_root {
            let mut c = Command::new(program);
            c.env_clear().env("HOME", "/root").env("USER", "root").env("LOGNAME", "root");
            c
        } else {
            let mut c = Command::new("setpriv");
            c.args(["--reuid", OWNER, "--regid", OWNER, "--init-groups", "--", program]);
            c.env_clear().env("HOME", &self.home).env("USER", OWNER).env("LOGNAME", OWNER);
            c
        };
        // No network here: cargo stays offline (its crates are fetched), pip uses the corpus's wheels.
        c.current_dir(dir).env("PATH", &self.path).env("LANG", "C.UTF-8").env("CARGO_NET_OFFLINE", "true");
        c.env("CORPUS", &self.corpus).stdin(Stdio::null());
        c
    }

    /// `sh -ec SCRIPT` in `dir`; exit code, stdout+stderr, seconds.
    fn sh(&self, as_root: bool, dir: &Path, script: &str, extra: &[(&str, &str)]) -> (Option<i32>, String, f64) {
        let mut c = self.command(as_root, dir, "sh");
        c.args(["-ec", script]);
        for (k, v) in extra {
            c.env(k, v);
        }
        let start = Instant::now();
        let out = c.output().unwrap();
        let secs = start.elapsed().as_secs_f64();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.code(), text, secs)
    }
}

/// `cordon mcp` (stdio) as the owner or as root: `tools/call` of `tool`; exit code and text.
fn mcp_call(env: &Env, as_root: bool, dir: &Path, socket: &Path, tool: &str, args: &Value) -> (Option<i32>, String) {
    let mut c = env.command(as_root, dir, bin("cordon").to_str().unwrap());
    c.arg("--socket").arg(socket).arg("mcp").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let Ok(v) = serde_json::from_str::<Value>(&line) else { continue };
            if tx.send(v).is_err() {
                return;
            }
        }
    });
    let mut send = |v: Value| writeln!(stdin, "{v}").and_then(|()| stdin.flush());
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "corpus", "version": "1" } } });
    let answer = |rx: &std::sync::mpsc::Receiver<Value>, id: u64| -> Option<Value> {
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let m = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).ok()?;
            if m.get("method").is_none() && m["id"] == json!(id) {
                return Some(m);
            }
        }
    };
    let mut result = (None, String::from("no answer from cordon mcp"));
    if send(init).is_ok() && answer(&rx, 1).is_some() {
        let _ = send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        let call =
            json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": { "name": tool, "arguments": args } });
        if send(call).is_ok()
            && let Some(m) = answer(&rx, 2)
        {
            let r = &m["result"];
            let text: String = r["content"]
                .as_array()
                .map(|c| c.iter().filter_map(|x| x["text"].as_str()).collect::<Vec<_>>().join("\n"))
                .unwrap_or_else(|| m.to_string());
            let code = r["_meta"]["cordon/result"]["exit_code"].as_i64().and_then(|c| i32::try_from(c).ok());
            result = (code, if code.is_none() { format!("{m}") } else { text });
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// One project's row of the table, and what went wrong.
#[derive(Debug)]
struct Row {
    project: &'static Project,
    direct: Option<Ran>,
    through: Vec<(&'static str, Ran)>,
    problems: Vec<String>,
    /// What removing each grant of the tool did (one line per grant).
    grants: Vec<String>,
    /// Removed grants whose failure's first denial did not name the key (the denials work, issue 27
    /// item 5, decides these).
    denial_problems: Vec<String>,
}

/// The generated tool `NAME-KIND` in `text`, or the tools there are.
fn find_tool(text: &str, want: &str) -> Result<(), String> {
    let doc: toml::Table = text.parse().map_err(|e| format!("the generated file is not TOML: {e}"))?;
    let tools =
        doc.get("tools").and_then(|t| t.as_table()).map(|t| t.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
    if tools.iter().any(|t| t == want) {
        Ok(())
    } else {
        Err(format!("no tool {want} in the generated file (it has {tools:?})"))
    }
}

/// Paths under `root` not owned by `uid` (a root caller's run must leave none).
fn not_owned(root: &Path, uid: u32) -> Vec<PathBuf> {
    let mut bad = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(m) = std::fs::symlink_metadata(&p) else { continue };
        if m.uid() != uid {
            bad.push(p.clone());
        }
        if m.is_dir() {
            stack.extend(std::fs::read_dir(&p).into_iter().flatten().flatten().map(|e| e.path()));
        }
    }
    bad
}

fn run_project(env: &Env, p: &'static Project) -> Row {
    let mut row = Row {
        project: p,
        direct: None,
        through: Vec::new(),
        problems: Vec::new(),
        grants: Vec::new(),
        denial_problems: Vec::new(),
    };
    let dir = env.home.join("src").join(p.name);
    let out = Command::new("cp").arg("-a").arg(env.corpus.join("src").join(p.dir)).arg(&dir).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    std::fs::remove_file(dir.join(".corpus-stamp")).unwrap();
    env.chown(&dir);
    let req = [("REQ", p.name)];
    // The developer's own steps, before cordon.
    if !p.setup.is_empty() {
        let (code, text, _) = env.sh(false, &dir, p.setup, &req);
        if code != Some(0) {
            row.problems.push(format!("the owner's set-up failed ({code:?}):\n{text}"));
            return row;
        }
    }
    let git_before = if p.ecosystem.starts_with("git") { Some(git_state(env, &dir)) } else { None };
    // The direct run.
    // A first run warms what a developer's earlier runs warmed (bytecode, the build's fresh
    // check); the second is the one measured.
    let _ = env.sh(false, &dir, p.direct, &[]);
    let mut direct = {
        let (code, text, secs) = env.sh(false, &dir, p.direct, &[]);
        Ran { code, counts: count(p.runner, &text), secs, text }
    };
    // Up to twice more: some suites have timing-bound tests (portalocker's lock tests wait about
    // a second for a process pool), which a loaded two-core machine can miss.
    for _ in 0..2 {
        if direct.code == Some(0) && direct.total() > 0 {
            break;
        }
        let (code, text, secs) = env.sh(false, &dir, p.direct, &[]);
        direct = Ran { code, counts: count(p.runner, &text), secs, text };
    }
    if direct.code != Some(0) || direct.total() == 0 {
        row.problems
            .push(format!("the direct run did not pass with tests counted: {:?}\n{}", direct.counts, direct.text));
    }
    row.direct = Some(direct.clone());
    if let Some(before) = &git_before {
        let after = git_state(env, &dir);
        assert_eq!(&after.0, &before.0, "{}: the direct run changed the history", p.name);
    }

    // `cordon init`, plain, as the owner, in the project: it writes cordon-NAME.toml there.
    let (code, text, _) = if preview() {
        let template = match p.ecosystem {
            "rust" => "rust",
            "c" => "c",
            "npm" => "node",
            _ => "python",
        };
        let script =
            format!("[ -d .venv ] && . .venv/bin/activate\ncordon init --template {template} --name {} .", p.name);
        env.sh(false, &dir, &script, &[])
    } else {
        env.sh(false, &dir, "cordon init", &[])
    };
    let file = dir.join(format!("cordon-{}.toml", p.name));
    if code != Some(0) || !file.is_file() {
        row.problems.push(format!("`cordon init` failed ({code:?}) or wrote no {}:\n{text}", file.display()));
        return row;
    }
    if preview() {
        // The README's hand edit of a template's file: what the test must never need.
        let text = std::fs::read_to_string(&file).unwrap();
        let edit = format!("run_as = {{ owner_of = \"working_dir\" }}\nallow = {{ users = [\"{OWNER}\"] }}\n");
        std::fs::write(&file, text.replacen("\n[defaults]\n", &format!("\n[defaults]\n{edit}"), 1)).unwrap();
    }
    let generated = std::fs::read_to_string(&file).unwrap();
    let tool = format!("{}-{}", p.name, p.kind);
    if let Err(e) = find_tool(&generated, &tool) {
        row.problems.push(format!("{e}\n{generated}"));
        return row;
    }
    // The check init's next steps name (by the developer, in the project), then the documented
    // install step (by root): the file copied unchanged.
    let (code, text, _) = env.sh(false, &dir, &format!("cordon policy check --deny-warnings {}", file.display()), &[]);
    if code != Some(0) {
        row.problems.push(format!(
            "`cordon policy check --deny-warnings` refused the generated file ({code:?}):\n{text}\n{generated}"
        ));
    }
    let policies = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    let policy_dir = policies.path().join("policies");
    std::fs::create_dir(&policy_dir).unwrap();
    let d = Daemon::start_in(policies, policy_dir.clone(), &["--socket-group", SOCKET_GROUP]);
    let socket = d.socket.to_str().unwrap().to_string();
    let sock = [("CORDON_SOCKET", socket.as_str())];
    let (code, text, _) = env.sh(
        true,
        &dir,
        &format!("install -m 0644 {} {}/ && cordon reload", file.display(), policy_dir.display()),
        &sock,
    );
    if code != Some(0) {
        row.problems
            .push(format!("the install step (install, cordon reload) failed ({code:?}):\n{text}\n{}", d.log_text()));
        return row;
    }
    let installed = std::fs::read_to_string(policy_dir.join(file.file_name().unwrap())).unwrap();
    assert_eq!(installed, generated, "{}: the installed file is the generated one", p.name);

    let same = |ran: &Ran| ran.code == direct.code && strip(&ran.counts) == strip(&direct.counts);
    // The test command through cordon: `cordon run` and `cordon mcp`, by the owner and by root.
    let run_args: String = p.args.iter().map(|(k, v)| format!(" --arg {k}={v}")).collect();
    let mcp_args: Value =
        p.args.iter().map(|(k, v)| ((*k).to_string(), json!(v))).collect::<serde_json::Map<_, _>>().into();
    for (label, as_root, via_mcp) in [
        ("run, owner", false, false),
        ("run, root", true, false),
        ("mcp, owner", false, true),
        ("mcp, root", true, true),
    ] {
        let call = || {
            let start = Instant::now();
            let (code, text) = if via_mcp {
                mcp_call(env, as_root, &dir, &d.socket, &tool, &mcp_args)
            } else {
                let (code, text, _) = env.sh(as_root, &dir, &format!("cordon run {tool}{run_args}"), &sock);
                (code, text)
            };
            Ran { code, counts: count(p.runner, &text), secs: start.elapsed().as_secs_f64(), text }
        };
        let mut ran = call();
        // Up to twice more, as for the direct run: a difference every time is a failure.
        for _ in 0..2 {
            if same(&ran) {
                break;
            }
            ran = call();
        }
        if !same(&ran) {
            row.problems.push(format!(
                "{label}: exit code {:?} and counts {:?}, the direct run {:?} and {:?}:\n{}",
                ran.code, ran.counts, direct.code, direct.counts, ran.text
            ));
        }
        row.through.push((label, ran));
    }
    // Whoever called, the tool ran as the owner: nothing in the tree belongs to anyone else.
    let bad = not_owned(&dir, uid_of(OWNER));
    if !bad.is_empty() {
        row.problems.push(format!("files not owned by {OWNER} after the runs: {bad:?}"));
    }
    if let Some(before) = git_before {
        let after = git_state(env, &dir);
        if after.0 != before.0 {
            row.problems.push(format!("the runs through cordon changed the history: {before:?} -> {after:?}"));
        }
    }
    if p.ecosystem.starts_with("git") {
        git_tools(env, &mut row, &dir, &generated, &sock);
    }
    // The driver needs a baseline that passes through cordon (a warning of the check aside).
    let baseline = row.through.len() == 4 && row.through.iter().all(|(_, r)| same(r));
    if baseline && grants_on() {
        let installed = policy_dir.join(file.file_name().unwrap());
        remove_one_grant_at_a_time(env, &mut row, &dir, &d, &installed, &generated, &tool, &direct);
    }
    row
}

/// Git on the real history: every `NAME-git-*` tool init wrote (without parameters) through
/// `cordon run`, by the owner and by root, prints what its command prints when the owner runs it
/// directly with the same environment.
fn git_tools(env: &Env, row: &mut Row, dir: &Path, generated: &str, sock: &[(&str, &str)]) {
    let p = row.project;
    let Ok(doc) = generated.parse::<toml::Table>() else { return };
    let env_of = |t: Option<&toml::Value>| -> Vec<(String, String)> {
        t.and_then(|t| t.get("env"))
            .and_then(toml::Value::as_table)
            .map(|e| e.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
            .unwrap_or_default()
    };
    let defaults_env = env_of(doc.get("defaults"));
    let tools = doc.get("tools").and_then(toml::Value::as_table).cloned().unwrap_or_default();
    let prefix = format!("{}-git-", p.name);
    let git: Vec<(&String, &toml::Value)> = tools.iter().filter(|(n, _)| n.starts_with(&prefix)).collect();
    if git.is_empty() {
        row.problems.push(format!("a project with a .git directory got no {prefix}* tools from init"));
        return;
    }
    for (name, t) in git {
        let argv: Vec<String> = t
            .get("command")
            .and_then(toml::Value::as_array)
            .map(|c| c.iter().filter_map(|a| a.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        if argv.is_empty() || argv.iter().any(|a| a.contains("{{")) {
            continue;
        }
        let mut vars = defaults_env.clone();
        vars.extend(env_of(Some(t)));
        let mut c = env.command(false, dir, &argv[0]);
        c.args(&argv[1..]);
        for (k, v) in &vars {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        let direct = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if !out.status.success() {
            row.problems.push(format!("{name}: its command {argv:?} fails when the owner runs it directly:\n{direct}"));
            continue;
        }
        for as_root in [false, true] {
            let (code, text, _) = env.sh(as_root, dir, &format!("cordon run {name}"), sock);
            if code != Some(0) || text.trim() != direct.trim() {
                let who = if as_root { "root" } else { OWNER };
                row.problems.push(format!(
                    "{name} called by {who}: exit code {code:?} and\n{text}\nthe owner's direct run of {argv:?} printed:\n{direct}"
                ));
            }
        }
    }
}

/// `CORDON_CORPUS_PREVIEW=1`: a local diagnostic, never a pass: `cordon init --template` (the
/// venv activated) and the README's hand edit (`run_as`, `allow`) instead of plain `cordon init`,
/// to see what else the corpus meets; the test fails at its end whatever happened.
fn preview() -> bool {
    std::env::var_os("CORDON_CORPUS_PREVIEW").is_some_and(|v| v == "1")
}

/// Whether to run the "remove one grant at a time" driver (`CORDON_CORPUS_GRANTS=0` turns it off).
fn grants_on() -> bool {
    std::env::var_os("CORDON_CORPUS_GRANTS").is_none_or(|v| v != "0")
}

/// Every `read`, `write` and `exec` entry that applies to `tool` (its own, and `[defaults]`'s):
/// (table path, key, index, value).
fn grant_entries(doc: &toml::Table, tool: &str) -> Vec<(Vec<String>, &'static str, usize, String)> {
    let mut out = Vec::new();
    let scopes = [vec!["tools".to_string(), tool.to_string()], vec!["defaults".to_string()]];
    for scope in scopes {
        let mut t = Some(doc);
        for part in &scope {
            t = t.and_then(|t| t.get(part)).and_then(toml::Value::as_table);
        }
        let Some(t) = t else { continue };
        for key in ["read", "write", "exec"] {
            for (i, v) in t.get(key).and_then(toml::Value::as_array).into_iter().flatten().enumerate() {
                out.push((scope.clone(), key, i, v.as_str().unwrap_or_default().to_string()));
            }
        }
    }
    out
}

/// The "remove one grant at a time" driver: for each grant of the tool, the generated policy
/// without it is installed and the tool run by the owner (`cordon run --json`). A run that then
/// fails must name the removed key in its first denial (the first `denied:` line of `cordon run`);
/// a run that still passes shows a grant the tool did not need (reported, not a failure); a call
/// refused before anything ran (e.g. a working directory no longer granted) is reported as such.
#[allow(clippy::too_many_arguments)]
fn remove_one_grant_at_a_time(
    env: &Env,
    row: &mut Row,
    dir: &Path,
    d: &Daemon,
    installed: &Path,
    generated: &str,
    tool: &str,
    direct: &Ran,
) {
    let p = row.project;
    let Ok(doc) = generated.parse::<toml::Table>() else { return };
    let socket = d.socket.to_str().unwrap().to_string();
    let sock = [("CORDON_SOCKET", socket.as_str())];
    let run_args: String = p.args.iter().map(|(k, v)| format!(" --arg {k}={v}")).collect();
    for (scope, key, index, value) in grant_entries(&doc, tool) {
        let mut less = doc.clone();
        let mut t = &mut less;
        for part in &scope {
            t = t.get_mut(part).and_then(toml::Value::as_table_mut).unwrap();
        }
        t.get_mut(key).and_then(toml::Value::as_array_mut).unwrap().remove(index);
        let what = format!("{}.{key} {value:?}", scope.join("."));
        std::fs::write(installed, toml::to_string(&less).unwrap()).unwrap();
        let (code, text, _) = env.sh(true, dir, "cordon reload", &sock);
        if code != Some(0) {
            row.grants.push(format!("without {what}: the policy is refused ({code:?}): {}", text.trim()));
            continue;
        }
        let (_, out, _) = env.sh(false, dir, &format!("cordon run {tool}{run_args} --json 2>/dev/null"), &sock);
        let Ok(json) = serde_json::from_str::<Value>(&out) else {
            row.grants.push(format!("without {what}: no JSON from cordon run: {out}"));
            continue;
        };
        if let Some(err) = json.get("error") {
            row.grants
                .push(format!("without {what}: refused before running: {}", err["message"].as_str().unwrap_or("")));
            continue;
        }
        let code = json["exit_code"].as_i64().and_then(|c| i32::try_from(c).ok());
        let text = format!("{}{}", json["stdout"].as_str().unwrap_or(""), json["stderr"].as_str().unwrap_or(""));
        if code == direct.code && strip(&count(p.runner, &text)) == strip(&direct.counts) {
            row.grants.push(format!("without {what}: still passes (not needed by this run)"));
            continue;
        }
        let first = json["denials"].as_array().and_then(|l| l.first()).cloned().unwrap_or(Value::Null);
        let named = first["grant_key"].as_str().unwrap_or("");
        // The denial names a path beneath the removed grant (what that grant allowed).
        let target = first["target"].as_str().unwrap_or("");
        if named == key && !Path::new(target).starts_with(&value) {
            row.denial_problems.push(format!(
                "without {what} the run fails ({code:?}); its first denial names `{key}` but the path {target:?}, \
                 not one beneath {value:?}: {first}"
            ));
        }
        row.grants.push(format!(
            "without {what}: fails ({code:?}); first denial: {}",
            first["message"].as_str().unwrap_or("none")
        ));
        if named != key {
            row.denial_problems.push(format!(
                "without {what} the run fails ({code:?}) but its first denial names {named:?}, not `{key}`: {first}\ndenials: {}",
                json["denials"]
            ));
        }
    }
    std::fs::write(installed, generated).unwrap();
    let _ = env.sh(true, dir, "cordon reload", &sock);
}

/// The counts that must agree (pytest's warning count depends on the environment, e.g. a
/// deprecation seen or not; every other count must match).
fn strip(c: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    c.iter().filter(|(k, _)| k.as_str() != "warnings").map(|(k, v)| (k.clone(), *v)).collect()
}

/// `git log` and `git status` of the owner's repository, as the owner sees them.
fn git_state(env: &Env, dir: &Path) -> (String, String) {
    let (code, log, _) = env.sh(false, dir, "git log --format='%H %an %s'", &[]);
    assert_eq!(code, Some(0), "git log: {log}");
    let (_, status, _) = env.sh(false, dir, "git status --porcelain --ignored=no", &[]);
    (log, status)
}

#[test]
fn every_corpus_project_passes_its_own_tests_through_cordon_from_the_file_init_wrote() {
    require_root!("the projects' owner is a test account; cordond runs as root");
    let corpus = corpus_dir();
    let stamped: Vec<&str> = PROJECTS
        .iter()
        .filter(|p| !corpus.join("src").join(p.dir).join(".corpus-stamp").is_file())
        .map(|p| p.dir)
        .collect();
    if !stamped.is_empty() {
        return missing(&format!("{} lacks {stamped:?}", corpus.display()));
    }
    if !rust_dir().join("bin/cargo").is_file() {
        return missing(&format!("no Rust toolchain the owner can run at {}", rust_dir().display()));
    }
    ensure_owner();
    let env = Env::new(&corpus);
    // Two at a time (CI has two cores); each project has its own daemon.
    // `CORDON_CORPUS_ONLY=NAME,NAME`: only these (a local convenience; CI runs them all).
    let only = std::env::var("CORDON_CORPUS_ONLY").unwrap_or_default();
    assert!(only.is_empty() || !in_ci(), "CORDON_CORPUS_ONLY is for local runs; CI runs the whole corpus");
    let chosen: Vec<&'static Project> =
        PROJECTS.iter().filter(|p| only.is_empty() || only.split(',').any(|n| n == p.name)).collect();
    assert!(!chosen.is_empty(), "CORDON_CORPUS_ONLY={only:?} names no project of the corpus");
    let queue = Mutex::new(chosen.into_iter());
    let rows = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let next = queue.lock().unwrap().next();
                    let Some(p) = next else { return };
                    let row = run_project(&env, p);
                    rows.lock().unwrap().push(row);
                }
            });
        }
    });
    let mut rows = rows.into_inner().unwrap();
    rows.sort_by_key(|r| PROJECTS.iter().position(|p| std::ptr::eq(p, r.project)));
    // The table: exit code / tests counted, directly and through cordon; wall-clock ratio.
    let mut table = format!(
        "\n{:<16} {:<11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>7}\n",
        "project", "ecosystem", "direct", "run owner", "run root", "mcp owner", "mcp root", "direct s", "ratio"
    );
    for r in &rows {
        let direct = r.direct.as_ref();
        let cell = |i: usize| r.through.get(i).map_or_else(|| "-".to_string(), |(_, ran)| ran.short());
        let ratio = match (direct, r.through.first()) {
            (Some(d), Some((_, t))) if d.secs > 0.0 => format!("{:.2}", t.secs / d.secs),
            _ => "-".into(),
        };
        table += &format!(
            "{:<16} {:<11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>7}{}\n",
            r.project.name,
            r.project.ecosystem,
            direct.map_or_else(|| "-".into(), Ran::short),
            cell(0),
            cell(1),
            cell(2),
            cell(3),
            direct.map_or_else(|| "-".into(), |d| format!("{:.1}", d.secs)),
            ratio,
            if r.problems.is_empty() { "" } else { "  FAILED" }
        );
    }
    let failed: Vec<&Row> = rows.iter().filter(|r| !r.problems.is_empty()).collect();
    let mut grants = String::new();
    for r in rows.iter().filter(|r| !r.grants.is_empty()) {
        grants += &format!("{}:\n", r.project.name);
        for g in &r.grants {
            grants += &format!("  {g}\n");
        }
    }
    if !grants.is_empty() {
        eprintln!("\nremoving one grant at a time:\n{grants}");
    }
    table += &format!(
        "{} projects, {} need an edit or fail through cordon (ratio: `cordon run` by the owner / direct)\n",
        rows.len(),
        failed.len()
    );
    eprintln!("{table}");
    let _ = std::fs::write(env.tmp.path().join("table.txt"), &table);
    if let Some(out) = std::env::var_os("CORDON_CORPUS_TABLE") {
        let _ = std::fs::write(out, &table);
    }
    let mut report = String::new();
    for r in &failed {
        for problem in &r.problems {
            report += &format!("\n=== {} ({}, {}): {}\n", r.project.name, r.project.ecosystem, r.project.what, problem);
        }
    }
    assert!(failed.is_empty(), "{table}{report}");
    // These assertions depend on the denial ranking (issue 27 item 5): the first denial of a run
    // that fails for want of a grant names that grant's key.
    let mut denials = String::new();
    for r in &rows {
        for problem in &r.denial_problems {
            denials += &format!("\n=== {} ({}): {}\n", r.project.name, r.project.ecosystem, problem);
        }
    }
    assert!(denials.is_empty(), "removing one grant at a time:\n{grants}{denials}");
    assert!(!preview(), "CORDON_CORPUS_PREVIEW=1 used templates and a hand edit: a diagnostic, never a pass");
}

#[test]
fn the_corpus_parsers_count_each_runners_summary() {
    let cargo = "test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.1s\n\
                 test result: ok. 4 passed; 0 failed; 0 ignored; 0 measured; 118 filtered out; finished in 1.15s\n";
    assert_eq!(
        count(Runner::Cargo, cargo),
        BTreeMap::from([("passed".into(), 7), ("failed".into(), 0), ("ignored".into(), 1)])
    );
    let pytest = "....\n=== 44 passed, 2 skipped, 1 warning in 5.56s ===\n";
    assert_eq!(
        count(Runner::Pytest, pytest),
        BTreeMap::from([("passed".into(), 44), ("skipped".into(), 2), ("warnings".into(), 1)])
    );
    assert_eq!(
        count(Runner::Pytest, "1 failed, 3 passed, 1 error in 0.2s"),
        BTreeMap::from([("failed".into(), 1), ("passed".into(), 3), ("errors".into(), 1)])
    );
    let tape = "TAP version 13\nok 1 x\n\n1..5\n# tests 5\n# pass  5\n\n# ok\n";
    assert_eq!(count(Runner::Tape, tape), BTreeMap::from([("tests".into(), 5), ("pass".into(), 5)]));
    let mocha = "\n  8 passing (84ms)\n  1 pending\n";
    assert_eq!(count(Runner::Mocha, mocha), BTreeMap::from([("passing".into(), 8), ("pending".into(), 1)]));
    let make = "./bzip2 -1  < sample1.ref > sample1.rb2\ncmp sample1.bz2 sample1.rb2\ncmp sample2.bz2 sample2.rb2\n";
    assert_eq!(count(Runner::MakeCmp, make), BTreeMap::from([("cmp".into(), 2)]));
}
