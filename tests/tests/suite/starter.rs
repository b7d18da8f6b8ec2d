//! The starter policy set the packages install in /etc/cordon/policies.d (packaging/policies.d):
//! it passes `cordon policy check` as shipped, admits exactly the agent group `cordon`, and every
//! tool works through the daemon for an unprivileged member of that group, on a real git project
//! under a granted tree (and nothing outside it).
//!
//! The real group `cordon` is not created here: a host where it exists changes the default socket
//! group of every daemon the suite starts. The run test gives the starter set the suite's agent
//! group instead (the one substitution it makes, checked); packaging/test-deb.sh runs the same
//! tools through the installed package with the real group.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use cordon_core::policy::{Host, Principal, load_dir};
use cordon_tests::agent::{self, AGENT, SOCKET_GROUP};
use cordon_tests::{Daemon, Output, require_root};
use serde_json::{Value, json};

const SHIPPED_ALLOW: &str = r#"allow = { groups = ["cordon"] }"#;

fn starter_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/policies.d")
}

fn starter_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(starter_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no starter policies in {}", starter_dir().display());
    files
}

/// Every starter tool: the ones the run test covers.
const TOOLS: &[&str] =
    &["git-changes", "git-diff", "git-history", "list", "make-test", "read-file", "search", "search-rg"];

#[test]
fn the_starter_set_passes_policy_check_and_admits_only_group_cordon() {
    let out = cordon_tests::cordon_at(
        Path::new("/nonexistent/cordon.sock"),
        &["policy", "check", "--json", starter_dir().to_str().unwrap()],
    );
    out.assert_code(0);
    let report = out.json();
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["diagnostics"], json!([]), "the starter set has warnings: {report}");
    // ripgrep is optional: its tool is the only one that may be unavailable.
    for u in report["unavailable"].as_array().unwrap() {
        assert_eq!(u["tool"], "search-rg", "{report}");
    }

    // The loader does not resolve groups: the set loads whether or not the group exists yet.
    let set = load_dir(&starter_dir(), &Host::new(true, cordon_sandbox::probe_landlock_abi())).unwrap();
    let mut names: Vec<&str> = set.tools.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, TOOLS);
    for tool in &set.tools {
        let allow = tool.allow.as_ref().unwrap_or_else(|| panic!("{} has no allow", tool.name));
        assert!(allow.users.is_empty(), "{}", tool.name);
        assert_eq!(allow.groups, [Principal::Name("cordon".into())], "{}", tool.name);
        assert!(tool.reason.is_some(), "{} has no reason", tool.name);
    }
}

/// A project owned by the agent user under /srv (a read root of the starter set): files, a git
/// history, an uncommitted change, an untracked file and a Makefile whose test writes a file.
fn project() -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("cordon-starter-").tempdir_in("/srv").unwrap();
    let p = dir.path();
    std::fs::create_dir_all(p.join("src")).unwrap();
    std::fs::write(p.join("README.md"), "hello starter\nsecond line\n").unwrap();
    std::fs::write(p.join("src/main.rs"), "fn main() {\n    println!(\"hello\");\n}\n").unwrap();
    std::fs::write(p.join("Makefile"), "test:\n\t@echo running tests\n\t@echo built > test-output.txt\n\t@echo ok\n")
        .unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(p)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-qm", "first commit"]);
    std::fs::write(p.join("README.md"), "hello starter\nchanged line\n").unwrap();
    std::fs::write(p.join("untracked.txt"), "new\n").unwrap();
    let ok = Command::new("chown").arg("-R").arg(format!("{AGENT}:{AGENT}")).arg(p).status().unwrap().success();
    assert!(ok, "chown");
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// The daemon on the starter files as shipped, except that they admit the suite's agent group.
fn daemon() -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    for file in starter_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text.matches(SHIPPED_ALLOW).count(), 1, "{}: one allow line in [defaults]", file.display());
        let text = text.replace(SHIPPED_ALLOW, &format!("allow = {{ groups = [\"{SOCKET_GROUP}\"] }}"));
        std::fs::write(policies.join(file.file_name().unwrap()), text).unwrap();
    }
    Daemon::start_in(dir, policies, &["--socket-group", SOCKET_GROUP])
}

fn run(d: &Daemon, tool: &str, args: &Value) -> Value {
    let out: Output = agent::cordon(&d.socket, &["run", tool, "--args-json", &args.to_string(), "--json"]);
    let v = out.json();
    assert!(v.get("error").is_none(), "{tool}: {v}");
    v
}

#[test]
fn every_starter_tool_works_for_a_member_of_the_agent_group() {
    require_root!("to run the tools as an unprivileged member of the agent group");
    let project = project();
    let p = project.path().to_str().unwrap();
    let d = daemon();

    // The agent sees the starter tools (ripgrep's only where it is installed), and nothing else.
    let rg = cordon_tests::cordon_at(&d.socket, &["tool", "search-rg", "--json"]).json();
    let rg_available = rg["available"] == true;
    let listed = agent::cordon(&d.socket, &["tools", "--json"]).json();
    let mut names: Vec<&str> =
        listed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    let expected: Vec<&str> = TOOLS.iter().copied().filter(|t| rg_available || *t != "search-rg").collect();
    assert_eq!(names, expected, "{listed}");

    let v = run(&d, "search", &json!({ "pattern": "hel+o", "path": p }));
    assert_eq!(v["exit_code"], 0, "{v}");
    let stdout = v["stdout"].as_str().unwrap();
    assert!(stdout.contains(&format!("{p}/src/main.rs:2:")), "{v}");
    assert!(stdout.contains(&format!("{p}/README.md:1:hello starter")), "{v}");
    assert!(!stdout.contains("/.git/"), "search looked into .git: {v}");
    let v = run(&d, "search", &json!({ "pattern": "HELLO STARTER", "path": p, "ignore_case": "-i" }));
    assert!(v["stdout"].as_str().unwrap().contains("README.md:1:"), "{v}");
    if rg_available {
        let v = run(&d, "search-rg", &json!({ "pattern": "println", "path": p }));
        assert!(v["stdout"].as_str().unwrap().contains("src/main.rs:2:"), "{v}");
    }

    // Directories and files, each with its type; .git skipped (issue 28: a source tree's first
    // levels are mostly directories, and a files-only list showed an agent next to nothing).
    let v = run(&d, "list", &json!({ "path": p }));
    let mut entries: Vec<&str> = v["stdout"].as_str().unwrap().lines().collect();
    entries.sort_unstable();
    let want: Vec<String> = ["d src", "f Makefile", "f README.md", "f src/main.rs", "f untracked.txt"]
        .iter()
        .map(|e| format!("{} {p}/{}", &e[..1], &e[2..]))
        .collect();
    assert_eq!(entries, want, "{v}");
    let v = run(&d, "list", &json!({ "path": p, "depth": 1 }));
    assert!(v["stdout"].as_str().unwrap().lines().any(|l| l == format!("d {p}/src")), "{v}");

    let v = run(&d, "read-file", &json!({ "file": format!("{p}/README.md"), "lines": 1 }));
    assert_eq!(v["stdout"], "hello starter\n", "{v}");

    let v = run(&d, "git-changes", &json!({ "repo": p }));
    assert_eq!(v["exit_code"], 0, "{v}");
    let stdout = v["stdout"].as_str().unwrap();
    assert!(stdout.contains(" M README.md") && stdout.contains("?? untracked.txt"), "{v}");
    let v = run(&d, "git-history", &json!({ "repo": p }));
    assert!(v["stdout"].as_str().unwrap().ends_with(" first commit\n"), "{v}");
    let v = run(&d, "git-diff", &json!({ "repo": p }));
    let stdout = v["stdout"].as_str().unwrap();
    assert!(stdout.contains("-second line") && stdout.contains("+changed line"), "{v}");
    let v = run(&d, "git-diff", &json!({ "repo": p, "staged": "--cached" }));
    assert_eq!(v["stdout"], "", "nothing is staged: {v}");
    // The read-only git tools left the repository as it was (no index refresh written as root or
    // as the agent).
    assert!(!project.path().join(".git/index.lock").exists());

    let v = run(&d, "make-test", &json!({ "project": p }));
    assert_eq!(v["exit_code"], 0, "{v}");
    assert!(v["stdout"].as_str().unwrap().contains("running tests\nok"), "{v}");
    let out = project.path().join("test-output.txt");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "built\n");
    // The test ran as the caller.
    use std::os::unix::fs::MetadataExt as _;
    assert_eq!(std::fs::metadata(&out).unwrap().uid(), agent::id("-u", AGENT));

    // Outside the granted trees the sandbox refuses, even where the file mode would let the
    // agent read (/etc/hostname is world-readable).
    let hostname = Path::new("/etc/hostname");
    if hostname.exists() {
        let v = run(&d, "read-file", &json!({ "file": "/etc/hostname" }));
        assert_ne!(v["exit_code"], 0, "read-file read /etc/hostname: {v}");
        assert_eq!(v["stdout"], "", "{v}");
    }
}
