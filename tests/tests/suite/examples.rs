//! The example policies: every tool gives the same result inside the sandbox as outside it
//! (no over-restriction), run through the real daemon.

use std::path::{Path, PathBuf};
use std::process::Command;

use cordon_core::argv::{Account, plan};
use cordon_core::policy::{Availability, Host, load_dir};
use cordon_core::validate::validate;
use cordon_tests::Daemon;
use serde_json::{Value, json};

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/examples")
}

/// A small project with files, a git history and a Makefile, under /tmp (a read root of the
/// examples).
fn project() -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("cordon-example-").tempdir_in("/tmp").unwrap();
    let p = dir.path();
    std::fs::create_dir_all(p.join("src/nested")).unwrap();
    std::fs::write(p.join("README.md"), "hello world\nsecond line\n").unwrap();
    std::fs::write(p.join("src/main.rs"), "fn main() {\n    println!(\"hello\");\n}\n").unwrap();
    std::fs::write(p.join("src/nested/deep.txt"), "deep hello\n").unwrap();
    std::fs::write(p.join("Makefile"), "test:\n\t@echo running tests\n\t@test -f README.md && echo ok\n").unwrap();
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .args(args)
            .current_dir(p)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
            .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?} failed");
    };
    git(&["init", "-q"]);
    git(&["-c", "user.name=t", "-c", "user.email=t@example.invalid", "add", "."]);
    git(&["-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "first commit"]);
    std::fs::write(p.join("untracked.txt"), "new\n").unwrap();
    dir
}

/// Runs the tool's exact plan (argv, environment, working dir) without any sandbox.
fn run_outside(tool_name: &str, args: &Value) -> (Option<i32>, String) {
    let set =
        load_dir(&examples_dir(), &Host::new(nix::unistd::geteuid().is_root(), cordon_sandbox::probe_landlock_abi()))
            .unwrap();
    let tool = set.tools.iter().find(|t| t.name == tool_name).unwrap();
    let Availability::Available { executable } = &tool.availability else { panic!("{tool_name} is unavailable") };
    let validated = validate(tool, args).unwrap();
    let uid = nix::unistd::geteuid().as_raw();
    let p = plan(tool, executable, &validated, &Account::for_uid(uid));
    let out = Command::new(&p.executable)
        .args(&p.argv[1..])
        .env_clear()
        .envs(p.env.iter().cloned())
        .current_dir(&p.cwd)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn every_example_tool_behaves_the_same_inside_the_sandbox() {
    let project = project();
    let p = project.path().to_str().unwrap();
    let d = Daemon::start_in(tempfile::tempdir().unwrap(), examples_dir(), &[]);
    let cases: Vec<(&str, Value)> = vec![
        ("list-files", json!({ "path": p, "depth": 3 })),
        ("search-text", json!({ "pattern": "hello", "path": p })),
        ("search-text", json!({ "pattern": "HELLO", "path": p, "ignore_case": "-i" })),
        ("disk-usage", json!({ "path": p })),
        ("show-file", json!({ "file": format!("{p}/README.md"), "lines": 1 })),
        ("git-log", json!({ "repo": p })),
        ("git-status", json!({ "repo": p })),
        ("run-tests", json!({ "project": p })),
    ];
    // crate-info is left out on purpose: it would reach crates.io.
    let mut covered: Vec<&str> = cases.iter().map(|(t, _)| *t).collect();
    covered.push("crate-info");
    let all = d.cordon(&["tools", "--all", "--json"]).json();
    for t in all["tools"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        assert!(covered.contains(&name), "example tool {name} has no differential case");
    }

    for (tool, args) in cases {
        let (out, inside) = d.run_json(tool, &args);
        assert!(inside.get("error").is_none(), "{tool}: {inside}");
        let (code, stdout) = run_outside(tool, &args);
        let sort = |s: &str| {
            // find and du list directory entries in readdir order, the same inside and out, but
            // sort anyway so the comparison is about content.
            let mut lines: Vec<String> = s.lines().map(str::to_string).collect();
            lines.sort();
            lines
        };
        assert_eq!(inside["exit_code"].as_i64().map(|c| c as i32), code, "{tool}: exit code differs; inside: {inside}");
        assert_eq!(
            sort(inside["stdout"].as_str().unwrap()),
            sort(&stdout),
            "{tool}: stdout differs; inside stderr: {}",
            inside["stderr"]
        );
        assert_eq!(out.code, code, "{tool}");
        assert!(!stdout.is_empty() || tool == "git-status", "{tool} printed nothing: the case proves little");
    }
}
