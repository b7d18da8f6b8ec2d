//! `cordon init`: fixture projects in temporary directories; the scaffolded policy names the
//! expected tools and grants, passes `cordon policy check` once its TODO reasons are filled (refused before; and
//! is warned about before), and a generated `make` tool runs through a real daemon.

use std::path::Path;
use std::process::Command;

use cordon_tests::{Daemon, Output, bin, require_root};

fn init(cwd: &Path, args: &[&str]) -> Output {
    Command::new(bin("cordon")).current_dir(cwd).arg("init").args(args).output().unwrap().into()
}

fn check(file: &Path) -> Output {
    Command::new(bin("cordon")).args(["policy", "check"]).arg(file).output().unwrap().into()
}

/// A project with every kind of build file init reads.
fn project(root: &Path) {
    std::fs::create_dir_all(root).unwrap();
    let w = |name: &str, text: &str| std::fs::write(root.join(name), text).unwrap();
    w("package.json", r#"{"name": "web", "scripts": {"test": "node t.js", "pretest": "true", "build:prod": "tsc"}}"#);
    w(
        "Makefile",
        "CC := cc\n.PHONY: hello check\nhello:\n\t@echo made-hello > out.txt; echo made-hello\ncheck: hello\n%.o: %.c\n\tcc -c $<\nmain.o: main.c\n",
    );
    w("Cargo.toml", "[package]\nname = \"demo\"\nversion = \"0.1.0\"\n");
    w("pyproject.toml", "[project]\nname = \"demo\"\n\n[tool.pytest.ini_options]\naddopts = \"-q\"\n");
    w("tox.ini", "[tox]\nenvlist = py311, lint\n");
    w("justfile", "build:\n    echo b\ndeploy env:\n    echo {{env}}\n_private:\n    true\n");
}

#[test]
fn scaffolds_every_kind_of_project_and_the_result_checks() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("Demo_Proj");
    project(&root);
    let out = init(tmp.path(), &[root.to_str().unwrap()]);
    out.assert_code(0);
    let file = tmp.path().join("cordon-demo-proj.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    // What it found and what to do next.
    for s in [
        "package.json",
        "Makefile: 2 target(s)",
        "Cargo.toml",
        "pytest",
        "tox.ini",
        "justfile",
        "next steps",
        "cordon policy check",
    ] {
        assert!(out.stdout.contains(s), "{s}: {out:?}");
    }
    assert!(out.stdout.contains("deploy"), "the recipe with parameters is named as left out: {out:?}");
    let doc: toml::Table = text.parse().unwrap();
    let tools = doc["tools"].as_table().unwrap();
    let names: Vec<&str> = tools.keys().map(String::as_str).collect();
    for name in [
        "demo-proj-npm-test",
        "demo-proj-npm-build-prod",
        "demo-proj-make-hello",
        "demo-proj-make-check",
        "demo-proj-cargo-build",
        "demo-proj-cargo-test",
        "demo-proj-cargo-clippy",
        "demo-proj-cargo-fmt-check",
        "demo-proj-pytest",
        "demo-proj-tox",
        "demo-proj-just-build",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    for absent in ["demo-proj-npm-pretest", "demo-proj-make-main-o", "demo-proj-just-deploy", "demo-proj-just-private"]
    {
        assert!(!names.contains(&absent), "{absent} should not be generated: {names:?}");
    }
    // Grants: the project is the working dir and readable; cargo writes only target/; no network.
    let root = std::fs::canonicalize(&root).unwrap();
    let root_s = root.to_str().unwrap();
    let defaults = doc["defaults"].as_table().unwrap();
    assert_eq!(defaults["working_dir"].as_str(), Some(root_s));
    assert_eq!(defaults["read"].as_array().unwrap()[0].as_str(), Some(root_s));
    assert_eq!(defaults["network"].as_str(), Some("none"));
    let cargo_test = tools["demo-proj-cargo-test"].as_table().unwrap();
    assert_eq!(cargo_test["write"].as_array().unwrap()[0].as_str(), Some(root.join("target").to_str().unwrap()));
    assert_eq!(cargo_test["arg_separator"].as_bool(), Some(true));
    let filter = cargo_test["params"]["filter"].as_table().unwrap();
    assert!(filter["pattern"].as_str().unwrap().starts_with("[A-Za-z0-9_]"), "no leading '-': {filter:?}");
    assert!(tools["demo-proj-make-hello"].get("write").is_none());
    assert_eq!(tools["demo-proj-tox"]["params"]["env"]["values"].as_array().unwrap().len(), 2);
    // command[0] is absolute where the program is on PATH, and every reason is the placeholder.
    let make = tools["demo-proj-make-hello"]["command"].as_array().unwrap();
    assert!(make[0].as_str().unwrap().starts_with('/') && make[0].as_str().unwrap().ends_with("/make"), "{make:?}");
    assert!(text.contains("resolved on PATH"), "{text}");
    assert!(tools.values().all(|t| t["reason"].as_str().unwrap().starts_with("TODO")));

    // The TODO reasons do not pass: each is an error until filled; then the file checks clean.
    let out = check(&file);
    out.assert_code(65);
    assert_eq!(out.stderr.matches("`reason` is still a placeholder").count(), tools.len(), "{out:?}");
    std::fs::write(&file, text.replace("TODO: why agents may run this", "the team's build")).unwrap();
    let out = check(&file);
    out.assert_code(0);
    assert!(!out.stderr.contains("error") && !out.stderr.contains("TODO"), "{out:?}");

    // No overwrite without --force; -o - prints the policy.
    let out = init(tmp.path(), &[root_s]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("--force"), "{out:?}");
    assert!(std::fs::read_to_string(&file).unwrap().contains("the team's build"), "kept as it was");
    init(tmp.path(), &[root_s, "--force"]).assert_code(0);
    assert!(std::fs::read_to_string(&file).unwrap().contains("TODO"), "replaced");
    let out = init(tmp.path(), &[root_s, "-o", "-", "--name", "other"]);
    out.assert_code(0);
    assert!(out.stdout.starts_with("# cordon policy") && out.stdout.contains("[tools.other-make-hello]"), "{out:?}");
    assert!(out.stderr.contains("next steps"), "the report goes to stderr: {out:?}");
    assert!(!tmp.path().join("-").exists(), "`-o -` is stdout, never a file named `-`");
}

#[test]
fn a_project_without_build_files_is_an_error_that_says_what_was_looked_for() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("README"), "nothing to build").unwrap();
    let out = init(tmp.path(), &["."]);
    assert_eq!(out.code, Some(1), "{out:?}");
    for s in ["package.json", "Makefile", "Cargo.toml", "pytest", "justfile"] {
        assert!(out.stderr.contains(s), "{s}: {out:?}");
    }
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1, "nothing was written");
}

#[test]
fn a_generated_make_tool_runs_through_the_daemon() {
    require_root!("the daemon runs tools as the caller and the policy directory is root's");
    let Some(_) =
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).find(|d| d.join("make").is_file())
    else {
        eprintln!("skipped: make is not installed on this machine");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mk");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("Makefile"), "hello:\n\t@echo made-hello\nwrite:\n\t@touch out.txt\n").unwrap();
    let out = init(tmp.path(), &["mk", "-o", "mk.toml"]);
    out.assert_code(0);
    let text = std::fs::read_to_string(tmp.path().join("mk.toml")).unwrap();
    let d = Daemon::start(&[("mk.toml", &text.replace("TODO: why agents may run this", "tests"))]);
    let (out, json) = d.run_json("mk-make-hello", &serde_json::json!({}));
    assert_eq!(json["exit_code"], 0, "{out:?}");
    assert_eq!(json["stdout"], "made-hello\n", "{out:?}");
    // Conservative: a make target gets no write grant, so one that writes fails.
    let (out, json) = d.run_json("mk-make-write", &serde_json::json!({}));
    assert_ne!(json["exit_code"], 0, "{out:?}");
    assert!(!root.join("out.txt").exists());
}

/// The project's files may be written by the agent the policy is for: a script name that would
/// be an option or a placeholder is left out (named in the report), a build file that is a
/// symlink out of the project, a FIFO or huge is not read, and the file says that the tools
/// run code the project defines.
#[test]
fn a_hostile_project_cannot_shape_the_policy() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("evil");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(
        root.join("package.json"),
        r#"{"scripts": {"test": "x", "--userconfig=/tmp/x": "y", "{{x}}": "z", "a\nb": "w", "-e": "v"}}"#,
    )
    .unwrap();
    // A Makefile that is a symlink out of the project (say, to a secret), and a FIFO justfile
    // that would block a read forever.
    let outside = tmp.path().join("secret");
    std::fs::write(&outside, "root:\nsecret-target:\n").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("Makefile")).unwrap();
    nix::unistd::mkfifo(&root.join("justfile"), nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let out = init(tmp.path(), &[root.to_str().unwrap(), "-o", "-"]);
    out.assert_code(0);
    let text = &out.stdout;
    assert!(text.contains("\"run\", \"test\"]"), "{out:?}");
    for bad in ["--userconfig", "{{x}}", "\"-e\"", "a\\nb", "secret-target"] {
        assert!(!text.contains(bad), "{bad} must not reach the policy:\n{text}");
    }
    assert!(out.stderr.contains("--userconfig"), "the skipped script is named: {out:?}");
    assert!(out.stderr.contains("Makefile"), "the unread Makefile is named: {out:?}");
    assert!(text.contains("whoever can change the project's files"), "the trust is said:\n{text}");
}
