//! `cordon init`: fixture projects in temporary directories.
//!
//! `cordon init --scan`: the scaffolded policy names the expected tools and grants, passes
//! `cordon policy check` once its TODO reasons are filled (refused before), and a generated
//! `make` tool runs through a real daemon.
//!
//! Plain `cordon init` (issue 27 item 2): one synthetic layout per detection case (a rustup or
//! standalone cargo with and without clippy, Cargo workspaces and their members, a `.venv` not
//! activated, uv, poetry, npm with `node_modules/.bin` links, pnpm's `.pnpm` store, npm
//! workspaces, dependencies not installed, a mixed project, a Makefile's `check`), each asserting
//! the generated policy's grants and that `cordon policy check --deny-warnings` passes as written;
//! and a real devDependency runner (tape) through the real daemon, called by the project's owner
//! and by root, leaving nothing of root's in the tree.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cordon_tests::agent::{self, AGENT, SOCKET_GROUP};
use cordon_tests::{Daemon, Output, bin, require_root, toml_str as q};

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
    let out = init(tmp.path(), &["--scan", root.to_str().unwrap()]);
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
    let out = init(tmp.path(), &["--scan", root_s]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("--force"), "{out:?}");
    assert!(std::fs::read_to_string(&file).unwrap().contains("the team's build"), "kept as it was");
    init(tmp.path(), &["--scan", root_s, "--force"]).assert_code(0);
    assert!(std::fs::read_to_string(&file).unwrap().contains("TODO"), "replaced");
    let out = init(tmp.path(), &["--scan", root_s, "-o", "-", "--name", "other"]);
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
        cordon_tests::skip!(cordon_tests::Skip::MissingTool("make"), "make is not installed on this machine");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mk");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("Makefile"), "hello:\n\t@echo made-hello\nwrite:\n\t@touch out.txt\n").unwrap();
    let out = init(tmp.path(), &["--scan", "mk", "-o", "mk.toml"]);
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
    let out = init(tmp.path(), &["--scan", root.to_str().unwrap(), "-o", "-"]);
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

// ---------------------------------------------------------------------------------------------
// Plain `cordon init`: detection

/// `cordon init ARGS` in `cwd` with exactly `path` as PATH and `home` as HOME (no rustup, cargo,
/// virtualenv or toolchain from the test's own environment).
fn init_in(cwd: &Path, args: &[&str], path: &str, home: &Path) -> Output {
    Command::new(bin("cordon"))
        .current_dir(cwd)
        .arg("init")
        .args(args)
        .env("PATH", path)
        .env("HOME", home)
        .env_remove("RUSTUP_HOME")
        .env_remove("CARGO_HOME")
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("VIRTUAL_ENV")
        .output()
        .unwrap()
        .into()
}

/// `cordon policy check --deny-warnings FILE` passes; where the project belongs to `owner` (not
/// root), the only warnings allowed are the ones about paths that account can replace (the
/// owner's tree), which the tools' owner identity makes moot and the daemon's rule stops
/// reporting (issue 27 item 4); anything else fails.
#[track_caller]
pub(crate) fn assert_checks_clean(file: &Path, owner: u32) {
    // Checked where it is installed, a directory only root can write (a project is not one).
    let installed = tempfile::Builder::new().prefix("cordon-init-check-").tempdir().unwrap();
    let copy = installed.path().join(file.file_name().unwrap());
    std::fs::copy(file, &copy).unwrap();
    let file = copy.as_path();
    let out: Output =
        Command::new(bin("cordon")).args(["policy", "check", "--deny-warnings"]).arg(file).output().unwrap().into();
    if out.code == Some(0) {
        return;
    }
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let said = format!("{}{}", out.stdout, out.stderr);
    let warnings: Vec<&str> = said.lines().filter(|l| l.contains("warning:")).collect();
    let moot = |l: &&str| {
        owner != 0
            && l.contains("can be replaced by someone other than root")
            && l.contains(&format!("is owned by uid {owner}"))
    };
    assert!(
        !said.contains("error") && !warnings.is_empty() && warnings.iter().all(moot),
        "cordon policy check --deny-warnings {}:\n{said}\n{text}",
        file.display()
    );
    let out: Output = Command::new(bin("cordon")).args(["policy", "check"]).arg(file).output().unwrap().into();
    out.assert_code(0);
}

/// A temporary directory others may traverse.
fn open_tempdir() -> tempfile::TempDir {
    let t = tempfile::Builder::new().prefix("cordon-init-").tempdir().unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    t
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn exe(path: &Path, text: &str) {
    write(path, text);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn symlink(target: impl AsRef<Path>, link: &Path) {
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, link).unwrap();
}

/// Plain `cordon init` of `root` into `tmp/NAME.toml`: the policy, parsed and as text, after
/// checking that it passes `policy check --deny-warnings` as written.
fn detect(tmp: &Path, root: &Path, path: &str, home: &Path) -> (toml::Table, String, Output) {
    let file = tmp.join(format!("{}.toml", root.file_name().unwrap().to_string_lossy()));
    let out = init_in(tmp, &[root.to_str().unwrap(), "--name", "p", "-o", file.to_str().unwrap()], path, home);
    out.assert_code(0);
    let text = std::fs::read_to_string(&file).unwrap();
    assert_checks_clean(&file, std::fs::metadata(root).unwrap().uid());
    assert!(!text.contains("TODO"), "real reasons: {text}");
    (text.parse().unwrap(), text, out)
}

fn strs(v: &toml::Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
}

fn tool_names(doc: &toml::Table) -> Vec<String> {
    let mut names: Vec<String> = doc["tools"].as_table().unwrap().keys().cloned().collect();
    names.sort();
    names
}

/// A standalone cargo (Debian's, a toolchain directory): clippy and rustfmt only when their
/// programs are next to cargo; and the file says what was left out.
#[test]
fn rust_offers_clippy_and_fmt_only_where_installed_next_to_cargo() {
    let tmp = open_tempdir();
    let t = tmp.path();
    let root = t.join("crate");
    write(&root.join("Cargo.toml"), "[package]\nname = \"c\"\nversion = \"0.1.0\"\n");
    write(&root.join("Cargo.lock"), "version = 3\n");
    let bin_dir = t.join("rust/bin");
    exe(&bin_dir.join("cargo"), "#!/bin/sh\nexit 0\n");
    // A rustup in HOME that this cargo is not: not granted.
    std::fs::create_dir_all(t.join(".rustup/toolchains")).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin_dir.display());
    let (doc, text, out) = detect(t, &root, &path, t);
    assert_eq!(tool_names(&doc), ["p-cargo-test"], "{text}");
    assert!(!text.contains("RUSTUP_HOME") && !text.contains(".rustup"), "{text}");
    assert!(text.contains("cargo clippy was left out: cargo-clippy is not installed next to cargo"), "{text}");
    assert!(text.contains("cargo fmt --check was left out"), "{text}");
    assert!(out.stdout.contains("created") && root.join("target").is_dir(), "target/ is made: {out:?}");
    let d = doc["defaults"].as_table().unwrap();
    assert_eq!(strs(&d["write"]), [root.join("target").to_str().unwrap()]);
    assert_eq!(strs(&d["search_path"])[0], bin_dir.to_str().unwrap());
    assert!(d.get("run_as").is_none() && d.get("allow").is_none(), "a root-owned project: {text}");
    assert!(text.contains("The project belongs to root"), "{text}");
    // With the programs installed, the tools come with them.
    exe(&bin_dir.join("cargo-clippy"), "#!/bin/sh\nexit 0\n");
    exe(&bin_dir.join("cargo-fmt"), "#!/bin/sh\nexit 0\n");
    exe(&bin_dir.join("rustfmt"), "#!/bin/sh\nexit 0\n");
    std::fs::remove_file(t.join("crate.toml")).unwrap();
    let (doc, text, _) = detect(t, &root, &path, t);
    assert_eq!(tool_names(&doc), ["p-cargo-clippy", "p-cargo-fmt-check", "p-cargo-test"], "{text}");
    assert!(!text.contains("left out"), "{text}");
}

/// rustup: `~/.cargo/bin` has a proxy for every component, installed or not, so clippy is looked
/// for in the toolchain rustup runs (its default, or the project's rust-toolchain.toml).
#[test]
fn rust_with_rustup_looks_for_clippy_in_the_active_toolchain() {
    let tmp = open_tempdir();
    let t = tmp.path();
    let home = t.join("home");
    let root = t.join("crate");
    write(&root.join("Cargo.toml"), "[package]\nname = \"c\"\nversion = \"0.1.0\"\n");
    for proxy in ["cargo", "cargo-clippy", "cargo-fmt", "rustfmt", "rustc"] {
        exe(&home.join(".cargo/bin").join(proxy), "#!/bin/sh\nexit 0\n");
    }
    write(&home.join(".rustup/settings.toml"), "default_toolchain = \"stable-x86_64-unknown-linux-gnu\"\n");
    let stable = home.join(".rustup/toolchains/stable-x86_64-unknown-linux-gnu/bin");
    let nightly = home.join(".rustup/toolchains/nightly-x86_64-unknown-linux-gnu/bin");
    for prog in ["cargo", "rustc"] {
        exe(&stable.join(prog), "");
        exe(&nightly.join(prog), "");
    }
    exe(&nightly.join("cargo-clippy"), "");
    let path = format!("{}:/usr/bin:/bin", home.join(".cargo/bin").display());
    let (doc, text, out) = detect(t, &root, &path, &home);
    assert_eq!(tool_names(&doc), ["p-cargo-test"], "{text}");
    assert!(text.contains("cargo-clippy is not installed in the rustup toolchain"), "{text}");
    assert!(text.contains("no Cargo.lock"), "the missing lock file is named: {text}");
    assert!(out.stdout.contains("cargo generate-lockfile"), "{out:?}");
    let d = doc["defaults"].as_table().unwrap();
    assert_eq!(d["env"]["RUSTUP_HOME"].as_str(), Some(home.join(".rustup").to_str().unwrap()));
    assert!(strs(&d["exec"]).contains(&home.join(".rustup/toolchains").to_str().unwrap().to_string()));
    // The project pins nightly, which has clippy.
    write(&root.join("rust-toolchain.toml"), "[toolchain]\nchannel = \"nightly\"\n");
    std::fs::remove_file(t.join("crate.toml")).unwrap();
    let (doc, text, _) = detect(t, &root, &path, &home);
    assert_eq!(tool_names(&doc), ["p-cargo-clippy", "p-cargo-test"], "{text}");
    // A container image's layout: rustup's proxies beside `rustup` in CARGO_HOME/bin, not
    // ~/.cargo/bin; the stable toolchain (rustup's default) has no clippy.
    std::fs::remove_file(root.join("rust-toolchain.toml")).unwrap();
    let cargo_bin = t.join("usr-local-cargo/bin");
    for proxy in ["rustup", "cargo", "cargo-clippy"] {
        exe(&cargo_bin.join(proxy), "#!/bin/sh\nexit 0\n");
    }
    std::fs::remove_file(t.join("crate.toml")).unwrap();
    let (doc, text, _) = detect(t, &root, &format!("{}:/usr/bin:/bin", cargo_bin.display()), &home);
    assert_eq!(tool_names(&doc), ["p-cargo-test"], "{text}");
    assert_eq!(doc["defaults"]["env"]["CARGO_HOME"].as_str(), Some(t.join("usr-local-cargo").to_str().unwrap()));
}

/// A Cargo workspace tests every member; a member's own init builds in the workspace's target/.
#[test]
fn rust_workspaces_and_their_members() {
    let tmp = open_tempdir();
    let t = tmp.path();
    let ws = t.join("ws");
    write(&ws.join("Cargo.toml"), "[workspace]\nmembers = [\"a\"]\nresolver = \"2\"\n");
    write(&ws.join("Cargo.lock"), "version = 3\n");
    write(&ws.join("a/Cargo.toml"), "[package]\nname = \"a\"\nversion = \"0.1.0\"\n");
    let bin_dir = t.join("rust/bin");
    for prog in ["cargo", "cargo-clippy"] {
        exe(&bin_dir.join(prog), "#!/bin/sh\nexit 0\n");
    }
    let path = format!("{}:/usr/bin:/bin", bin_dir.display());
    let (doc, text, _) = detect(t, &ws, &path, t);
    assert!(text.contains("Detected: rust (Cargo workspace)"), "{text}");
    let tools = doc["tools"].as_table().unwrap();
    assert_eq!(strs(&tools["p-cargo-test"]["command"]), ["cargo", "test", "--workspace", "{{filter}}"]);
    assert_eq!(strs(&tools["p-cargo-clippy"]["command"]), ["cargo", "clippy", "--workspace", "--all-targets"]);
    // A member: the workspace's target/, Cargo.toml and Cargo.lock.
    let member = ws.join("a");
    let (doc, text, _) = detect(t, &member, &path, t);
    let d = doc["defaults"].as_table().unwrap();
    assert_eq!(strs(&d["write"]), [ws.join("target").to_str().unwrap()], "{text}");
    assert!(strs(&d["read"]).contains(&ws.to_str().unwrap().to_string()), "{text}");
    assert!(text.contains("member of the Cargo workspace"), "{text}");
    assert!(!member.join("target").exists(), "no target/ in the member");
}

/// A fake virtualenv at `venv`: pyvenv.cfg, python (a link to the system's), and pytest when
/// `with_pytest`.
fn venv(venv: &Path, with_pytest: bool) {
    write(&venv.join("pyvenv.cfg"), "home = /usr/bin\n");
    symlink("/usr/bin/python3", &venv.join("bin/python"));
    if with_pytest {
        exe(&venv.join("bin/pytest"), &format!("#!{}/bin/python\nimport sys\n", venv.display()));
    }
}

/// The project's `.venv`, not activated (no VIRTUAL_ENV, no pytest on PATH): its bin first in
/// `search_path`; uv's and poetry's lock files say which manager made it.
#[test]
fn python_uses_the_projects_venv_without_activation_uv_and_poetry() {
    let tmp = open_tempdir();
    let t = tmp.path();
    for (name, lock) in [("plain", None), ("uvp", Some("uv.lock")), ("po", Some("poetry.lock"))] {
        let root = t.join(name);
        write(&root.join("pyproject.toml"), "[project]\nname = \"x\"\n");
        if let Some(lock) = lock {
            write(&root.join(lock), "");
        }
        venv(&root.join(".venv"), true);
        let (doc, text, _) = detect(t, &root, "/usr/bin:/bin", t);
        assert_eq!(tool_names(&doc), ["p-pytest"], "{text}");
        let d = doc["defaults"].as_table().unwrap();
        assert_eq!(strs(&d["search_path"])[0], root.join(".venv/bin").to_str().unwrap(), "{text}");
        assert_eq!(d["env"]["PYTHONDONTWRITEBYTECODE"].as_str(), Some("1"));
        assert_eq!(strs(&d["read"]), [root.to_str().unwrap()], "the venv is in the project: {text}");
        let label = match lock {
            Some("uv.lock") => "python (uv, .venv)",
            Some(_) => "python (poetry, .venv)",
            None => "python (.venv)",
        };
        assert!(text.contains(&format!("Detected: {label}")), "{text}");
    }
}

/// What is not there is left out and said: a venv without pytest, poetry's virtualenv outside
/// the project, uv's .venv not made yet; pytest on PATH is used then.
#[test]
fn python_says_what_it_did_not_find() {
    let tmp = open_tempdir();
    let t = tmp.path();
    // A .venv without pytest: no tool, and the file says how to add it.
    let root = t.join("nopytest");
    write(&root.join("setup.py"), "");
    write(&root.join("Cargo.toml"), "[package]\nname = \"n\"\nversion = \"0.1.0\"\n");
    write(&root.join("Cargo.lock"), "");
    venv(&root.join("venv"), false);
    let bin_dir = t.join("rust/bin");
    exe(&bin_dir.join("cargo"), "#!/bin/sh\n");
    let (doc, text, _) = detect(t, &root, &format!("{}:/usr/bin:/bin", bin_dir.display()), t);
    assert_eq!(tool_names(&doc), ["p-cargo-test"], "{text}");
    assert!(text.contains("# Not generated: setup.py: pytest is not installed in the virtualenv"), "{text}");
    // poetry with its virtualenv elsewhere, and uv before `uv sync`: pytest from PATH, said.
    let elsewhere = t.join("elsewhere");
    venv(&elsewhere, true);
    for (name, lock, says) in [("po", "poetry.lock", "poetry's own virtualenvs"), ("uvp", "uv.lock", "uv sync")] {
        let root = t.join(name);
        write(&root.join("pyproject.toml"), "[project]\nname = \"x\"\n");
        write(&root.join(lock), "");
        let (doc, text, _) = detect(t, &root, &format!("{}:/usr/bin:/bin", elsewhere.join("bin").display()), t);
        assert_eq!(tool_names(&doc), ["p-pytest"], "{text}");
        assert!(text.contains(says) && text.contains("the pytest on PATH"), "{text}");
        let d = doc["defaults"].as_table().unwrap();
        assert!(strs(&d["read"]).contains(&elsewhere.to_str().unwrap().to_string()), "{text}");
    }
}

/// npm: exec on the packages `node_modules/.bin` links to, nothing broader; without
/// `node_modules`, `npm test` is left out with the install step named.
#[test]
fn node_grants_exec_on_the_packages_its_bins_link_to() {
    let tmp = open_tempdir();
    let t = tmp.path();
    let root = t.join("web");
    write(
        &root.join("package.json"),
        r#"{"name": "web", "scripts": {"test": "mocha"}, "devDependencies": {"mocha": "10.0.0"}}"#,
    );
    let out = {
        let file = t.join("missing.toml");
        let out =
            init_in(t, &[root.to_str().unwrap(), "--name", "p", "-o", file.to_str().unwrap()], "/usr/bin:/bin", t);
        assert_eq!(out.code, Some(1), "nothing to generate is an error: {out:?}");
        out
    };
    assert!(out.stderr.contains("npm ci"), "{out:?}");
    exe(&root.join("node_modules/mocha/bin/mocha.js"), "#!/usr/bin/env node\n");
    exe(&root.join("node_modules/@scope/tool/cli.js"), "#!/usr/bin/env node\n");
    write(&root.join("node_modules/left-pad/index.js"), "");
    symlink("../mocha/bin/mocha.js", &root.join("node_modules/.bin/mocha"));
    symlink("../@scope/tool/cli.js", &root.join("node_modules/.bin/tool"));
    // A link out of the project grants nothing.
    symlink("/usr/bin/env", &root.join("node_modules/.bin/outside"));
    let (doc, text, _) = detect(t, &root, "/usr/bin:/bin", t);
    assert_eq!(tool_names(&doc), ["p-npm-test"], "{text}");
    let d = doc["defaults"].as_table().unwrap();
    let mut exec = strs(&d["exec"]);
    exec.sort();
    let nm = root.join("node_modules");
    assert_eq!(exec, [nm.join("@scope/tool").to_str().unwrap(), nm.join("mocha").to_str().unwrap()], "{text}");
    assert_eq!(strs(&d["write"]), [root.join(".npm-cache").to_str().unwrap()]);
    assert_eq!(strs(&doc["tools"]["p-npm-test"]["command"]), ["npm", "test"]);
    assert!(root.join(".npm-cache").is_dir());
    // Runners that write in the project get (and find made) exactly their directory; nyc,
    // which remakes .nyc_output in the project root, is said not to be handled.
    write(&root.join("node_modules/c8/package.json"), "{}");
    write(&root.join("node_modules/vitest/package.json"), "{}");
    write(&root.join("node_modules/nyc/package.json"), "{}");
    std::fs::remove_file(t.join("web.toml")).unwrap();
    let (doc, text, _) = detect(t, &root, "/usr/bin:/bin", t);
    let mut w = strs(&doc["defaults"]["write"]);
    w.sort();
    assert_eq!(
        w,
        [".npm-cache", "coverage", "node_modules/.vite"].map(|d| root.join(d).to_str().unwrap().to_string()),
        "{text}"
    );
    assert!(root.join("coverage").is_dir() && root.join("node_modules/.vite").is_dir());
    // esbuild's native program, started by vite/vitest: its platform package is executable.
    exe(&root.join("node_modules/@esbuild/linux-x64/bin/esbuild"), "");
    std::fs::remove_file(t.join("web.toml")).unwrap();
    let (doc, text, _) = detect(t, &root, "/usr/bin:/bin", t);
    assert!(
        strs(&doc["defaults"]["exec"]).contains(&nm.join("@esbuild/linux-x64").to_str().unwrap().to_string()),
        "{text}"
    );
    assert!(text.contains("nyc is installed") && !text.contains(".nyc_output\""), "{text}");
}

/// pnpm: its `.bin` shims are scripts (exec on `.bin`), its links resolve into the
/// `node_modules/.pnpm` store (exec there); `pnpm test`, with the pnpm on PATH.
#[test]
fn node_pnpm_store_and_npm_workspaces() {
    let tmp = open_tempdir();
    let t = tmp.path();
    let root = t.join("pn");
    write(&root.join("package.json"), r#"{"scripts": {"test": "tape t.js"}, "devDependencies": {"tape": "5.7.5"}}"#);
    write(&root.join("pnpm-lock.yaml"), "lockfileVersion: '9.0'\n");
    let store = root.join("node_modules/.pnpm/tape@5.7.5/node_modules/tape");
    exe(&store.join("bin/tape"), "#!/usr/bin/env node\n");
    symlink(".pnpm/tape@5.7.5/node_modules/tape", &root.join("node_modules/tape"));
    symlink("../tape/bin/tape", &root.join("node_modules/.bin/tape"));
    // Without pnpm on PATH: said, nothing generated.
    let file = t.join("nopnpm.toml");
    let out = init_in(t, &[root.to_str().unwrap(), "-o", file.to_str().unwrap()], "/usr/bin:/bin", t);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("pnpm") && out.stderr.contains("not found on PATH"), "{out:?}");
    let pm = t.join("pm");
    exe(&pm.join("pnpm"), "#!/bin/sh\n");
    let path = format!("/usr/bin:/bin:{}", pm.display());
    let (doc, text, _) = detect(t, &root, &path, t);
    assert_eq!(tool_names(&doc), ["p-pnpm-test"], "{text}");
    let d = doc["defaults"].as_table().unwrap();
    assert_eq!(strs(&d["exec"]), [store.to_str().unwrap()], "{text}");
    assert!(d.get("write").is_none(), "pnpm test writes nothing: {text}");
    assert!(strs(&d["search_path"]).contains(&pm.to_str().unwrap().to_string()), "{text}");
    // pnpm's own shims: scripts in .bin.
    std::fs::remove_file(root.join("node_modules/.bin/tape")).unwrap();
    exe(&root.join("node_modules/.bin/tape"), "#!/bin/sh\nexec node \"$basedir/../tape/bin/tape\" \"$@\"\n");
    std::fs::remove_file(t.join("pn.toml")).unwrap();
    let (doc, text, _) = detect(t, &root, &path, t);
    assert_eq!(strs(&doc["defaults"]["exec"]), [root.join("node_modules/.bin").to_str().unwrap()], "{text}");

    // npm workspaces: no root test script: every workspace's, and each one's .bin.
    let ws = t.join("mono");
    write(&ws.join("package.json"), r#"{"private": true, "workspaces": ["packages/*"]}"#);
    write(&ws.join("packages/a/package.json"), r#"{"name": "a", "scripts": {"test": "jest"}}"#);
    exe(&ws.join("node_modules/jest/bin/jest.js"), "#!/usr/bin/env node\n");
    symlink("../jest/bin/jest.js", &ws.join("node_modules/.bin/jest"));
    exe(&ws.join("packages/a/node_modules/vitest/vitest.mjs"), "#!/usr/bin/env node\n");
    symlink("../vitest/vitest.mjs", &ws.join("packages/a/node_modules/.bin/vitest"));
    let (doc, text, _) = detect(t, &ws, "/usr/bin:/bin", t);
    assert!(text.contains("Detected: node (npm workspaces)"), "{text}");
    assert_eq!(strs(&doc["tools"]["p-npm-test"]["command"]), ["npm", "test", "--workspaces", "--if-present"]);
    let mut exec = strs(&doc["defaults"]["exec"]);
    exec.sort();
    assert_eq!(
        exec,
        [ws.join("node_modules/jest").to_str().unwrap(), ws.join("packages/a/node_modules/vitest").to_str().unwrap()],
        "{text}"
    );
}

/// A project of several toolchains gets each one's tools, each with its own grants; a Makefile's
/// `check` target is one; go.mod is said not to be handled.
#[test]
fn a_mixed_project_gets_each_toolchains_tools_with_their_own_grants() {
    if !Path::new("/usr/bin/make").exists() {
        cordon_tests::skip!(cordon_tests::Skip::MissingTool("make"), "make is not installed");
        return;
    }
    let tmp = open_tempdir();
    let t = tmp.path();
    let root = t.join("mixed");
    write(&root.join("Cargo.toml"), "[package]\nname = \"m\"\nversion = \"0.1.0\"\n");
    write(&root.join("Cargo.lock"), "");
    write(&root.join("package.json"), r#"{"scripts": {"test": "node --test"}}"#);
    write(&root.join("Makefile"), "all:\n\ttrue\ncheck:\n\ttrue\n");
    write(&root.join("go.mod"), "module example.com/m\n\ngo 1.22\n");
    let bin_dir = t.join("rust/bin");
    exe(&bin_dir.join("cargo"), "#!/bin/sh\n");
    let (doc, text, _) = detect(t, &root, &format!("{}:/usr/bin:/bin", bin_dir.display()), t);
    assert_eq!(tool_names(&doc), ["p-cargo-test", "p-npm-test"], "{text}");
    let tools = doc["tools"].as_table().unwrap();
    let d = doc["defaults"].as_table().unwrap();
    assert!(d.get("write").is_none() && d.get("search_path").is_none(), "per-tool grants: {text}");
    assert_eq!(strs(&tools["p-cargo-test"]["write"]), [root.join("target").to_str().unwrap()]);
    assert_eq!(tools["p-cargo-test"]["env"]["CARGO_NET_OFFLINE"].as_str(), Some("true"));
    assert_eq!(strs(&tools["p-npm-test"]["write"]), [root.join(".npm-cache").to_str().unwrap()]);
    assert!(tools["p-npm-test"]["env"].get("CARGO_NET_OFFLINE").is_none(), "{text}");
    // make's write root would be the whole project, above the others' grants: said, not made.
    assert!(text.contains("# Not generated: Makefile: `make check` would write the whole project"), "{text}");
    assert!(text.contains("# Not generated: go.mod:"), "{text}");
    // With a build/ directory, make builds there: a write root beside the others.
    std::fs::create_dir(root.join("build")).unwrap();
    std::fs::remove_file(t.join("mixed.toml")).unwrap();
    let (doc, text, _) = detect(t, &root, &format!("{}:/usr/bin:/bin", bin_dir.display()), t);
    assert_eq!(tool_names(&doc), ["p-cargo-test", "p-make-check", "p-npm-test"], "{text}");
    assert_eq!(strs(&doc["tools"]["p-make-check"]["write"]), [root.join("build").to_str().unwrap()]);
}

// ---------------------------------------------------------------------------------------------
// A real devDependency runner through the real daemon

/// A package whose test script runs tape, a devDependency.
pub(crate) fn tape_project(root: &Path) {
    write(
        &root.join("package.json"),
        r#"{ "name": "tiny", "version": "1.0.0", "private": true, "scripts": { "test": "tape test/*.js" }, "devDependencies": { "tape": "5.7.5" } }"#,
    );
    write(
        &root.join("test/add.test.js"),
        "const test = require('tape');\ntest('adds', (t) => { t.equal(1 + 1, 2); t.end(); });\n",
    );
}

/// The developer's `npm install` of tape 5.7.5 from the registry, run by `as_owner`; where the
/// registry cannot be reached (or `CORDON_TEST_NO_REGISTRY` is set), a stand-in package `tape`
/// with the same layout (a `bin` linked from `node_modules/.bin`) and the same report, owned by
/// the project's owner.
pub(crate) fn install_tape(root: &Path, as_owner: &dyn Fn(&str) -> Result<(), String>) {
    if std::env::var_os("CORDON_TEST_NO_REGISTRY").is_none() {
        match as_owner("npm install --no-audit --no-fund --fetch-retries=0 --fetch-timeout=30000") {
            Ok(()) if root.join("node_modules/.bin/tape").exists() => return,
            Ok(()) => eprintln!("npm install did not install tape: using a stand-in package"),
            Err(why) => eprintln!("npm install failed ({}): using a stand-in package", why.trim()),
        }
    }
    let pkg = root.join("node_modules/tape");
    write(
        &pkg.join("package.json"),
        r#"{"name": "tape", "version": "5.7.5", "main": "index.js", "bin": {"tape": "bin/tape"}}"#,
    );
    write(
        &pkg.join("index.js"),
        "let n = 0, pass = 0;\nconsole.log('TAP version 13');\n\
         module.exports = (name, fn) => { console.log('# ' + name); fn({ equal(a, b) { n++; \
         if (a === b) { pass++; console.log('ok ' + n + ' should be strictly equal'); } \
         else { console.log('not ok ' + n + ' should be strictly equal'); process.exitCode = 1; } }, end() {} }); };\n\
         process.on('exit', () => { console.log('\\n1..' + n + '\\n# tests ' + n + '\\n# pass  ' + pass + \
         '\\n\\n' + (pass === n ? '# ok' : '# fail  ' + (n - pass))); });\n",
    );
    exe(
        &pkg.join("bin/tape"),
        "#!/usr/bin/env node\nfor (const f of process.argv.slice(2)) require(require('path').resolve(f));\n",
    );
    symlink("../tape/bin/tape", &root.join("node_modules/.bin/tape"));
    let owner = std::fs::metadata(root).unwrap();
    let out = Command::new("chown")
        .args(["-R", "-h", &format!("{}:{}", owner.uid(), owner.gid())])
        .arg(root.join("node_modules"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// Every path under `dir` that root owns.
fn owned_by_root(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        if m.uid() == 0 {
            out.push(p.clone());
        }
        if m.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|x| x.unwrap().path()));
        }
    }
    out
}

/// The owner's `cordon init` on a package whose tests run tape (from node_modules/.bin): the
/// policy, unedited, runs `npm test` through the real daemon for the owner and for a root
/// caller (as the owner: nothing root-owned is left in the project), and without its exec grant
/// the same run is refused (tape cannot be executed): the grant is what makes it work.
#[test]
fn node_devdependency_runner_runs_through_the_daemon_as_the_owner_and_for_root() {
    require_root!("the owner identity needs a root daemon and a test user");
    if !Path::new("/usr/bin/node").exists() || !Path::new("/usr/bin/npm").exists() {
        cordon_tests::skip!(
            cordon_tests::Skip::MissingTool("node and npm"),
            "node and npm are not installed in /usr/bin"
        );
        return;
    }
    agent::ensure();
    let (uid, gid) = (agent::id("-u", AGENT), agent::id("-g", AGENT));
    let tmp = open_tempdir();
    let home = tmp.path().join("home");
    let root = home.join("tiny");
    tape_project(&root);
    let chown = |p: &Path| {
        let out = Command::new("chown").args(["-R", &format!("{uid}:{gid}")]).arg(p).output().unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    chown(&home);
    let as_owner = |script: &str| -> Result<(), String> {
        let out = Command::new("setpriv")
            .args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--", "sh", "-ec", script])
            .current_dir(&root)
            .env("HOME", &home)
            .env("PATH", format!("{}:/usr/bin:/bin", bin("cordon").parent().unwrap().display()))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if out.status.success() { Ok(()) } else { Err(said) }
    };
    install_tape(&root, &as_owner);
    // The owner's init, the policy on stdout.
    let out: Output = Command::new("setpriv")
        .args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--"])
        .arg(bin("cordon"))
        .args(["init", "--name", "tiny", "-o", "-", "."])
        .current_dir(&root)
        .env("HOME", &home)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap()
        .into();
    out.assert_code(0);
    let text = out.stdout.clone();
    let file = tmp.path().join("tiny.toml");
    std::fs::write(&file, &text).unwrap();
    assert_checks_clean(&file, uid);
    assert!(text.contains("run_as = { owner_of = \"working_dir\" }"), "{text}");
    assert!(text.contains(&format!("allow = {{ users = [{}] }}", q(AGENT))), "{text}");
    assert!(text.contains(&q(root.join("node_modules/tape"))), "exec on tape's package: {text}");
    assert!(!text.contains(&format!("exec = [{}]", q(root.join("node_modules")))), "not all of node_modules: {text}");
    assert_eq!(std::fs::metadata(root.join(".npm-cache")).unwrap().uid(), uid, "made as the owner");

    let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("tiny.toml"), &text).unwrap();
    let d = Daemon::start_in(dir, policies.clone(), &["--socket-group", SOCKET_GROUP]);
    let owner = agent::cordon(&d.socket, &["run", "tiny-npm-test"]);
    let root_call = d.cordon(&["run", "tiny-npm-test"]);
    for (who, out) in [("the owner", &owner), ("root", &root_call)] {
        assert_eq!(out.code, Some(0), "{who}: {out:?}\n{}", d.log_text());
        assert!(
            out.stdout.contains("ok 1 should be strictly equal") && out.stdout.contains("# pass  1"),
            "{who}: {out:?}"
        );
    }
    assert!(owned_by_root(&root).is_empty(), "root-owned: {:?}", owned_by_root(&root));
    let started: Vec<_> = d.audit_records().into_iter().filter(|r| r["decision"] == "started").collect();
    assert_eq!(started.len(), 2);
    assert!(started.iter().all(|r| r["run_as"]["uid"] == uid), "{started:?}");
    drop(d);

    // The same policy without its exec grant: tape cannot be executed.
    let without: String = text.lines().filter(|l| !l.starts_with("exec = ")).map(|l| format!("{l}\n")).collect();
    let d = Daemon::start(&[("tiny.toml", &without)]);
    let out = d.cordon(&["run", "tiny-npm-test"]);
    assert_eq!(out.code, Some(126), "{out:?}");
    assert!(out.stderr.contains("Permission denied") || out.stdout.contains("Permission denied"), "{out:?}");
}

/// A developer's own `.venv` inside the project, made with `python3 -m venv` and never activated,
/// with pytest 8.3.3 from PyPI (skipped where PyPI cannot be reached or
/// `CORDON_TEST_NO_REGISTRY` is set): plain `cordon init` as the owner finds it, and the policy,
/// unedited, runs pytest with multiprocessing for the owner and for a root caller, leaving
/// nothing of root's (no `__pycache__`, no `.pytest_cache`) in the tree.
#[test]
fn a_venv_in_the_project_not_activated_runs_pytest_through_the_daemon() {
    require_root!("the owner identity needs a root daemon and a test user");
    if std::env::var_os("CORDON_TEST_NO_REGISTRY").is_some() {
        cordon_tests::skip!(cordon_tests::Skip::NoRegistry, "CORDON_TEST_NO_REGISTRY is set: pytest comes from PyPI");
        return;
    }
    if !Path::new("/usr/bin/python3").exists() {
        cordon_tests::skip!(cordon_tests::Skip::MissingTool("/usr/bin/python3"), "the venv is made from it");
        return;
    }
    agent::ensure();
    let (uid, gid) = (agent::id("-u", AGENT), agent::id("-g", AGENT));
    let tmp = open_tempdir();
    let home = tmp.path().join("home");
    let root = home.join("py");
    write(
        &root.join("pyproject.toml"),
        "[project]\nname = \"py\"\nversion = \"0.1.0\"\n\n[tool.pytest.ini_options]\naddopts = \"-q\"\n",
    );
    write(
        &root.join("tests/test_py.py"),
        "import multiprocessing\n\n\ndef square(x):\n    return x * x\n\n\ndef test_pool():\n    \
         with multiprocessing.Pool(2) as pool:\n        assert pool.map(square, [1, 2]) == [1, 4]\n\n\n\
         def test_tmp_path(tmp_path):\n    (tmp_path / \"f\").write_text(\"x\")\n",
    );
    let out = Command::new("chown").args(["-R", &format!("{uid}:{gid}")]).arg(&home).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let owner = |args: &[&str]| -> Output {
        Command::new("setpriv")
            .args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--"])
            .args(args)
            .current_dir(&root)
            .env("HOME", &home)
            .env("PATH", "/usr/bin:/bin")
            .env_remove("VIRTUAL_ENV")
            .stdin(Stdio::null())
            .output()
            .unwrap()
            .into()
    };
    let made = owner(&["/usr/bin/python3", "-m", "venv", ".venv"]);
    if made.code != Some(0) {
        cordon_tests::skip!(cordon_tests::Skip::MissingTool("python3-venv"), "python3 -m venv failed: {made:?}");
        return;
    }
    let pip = owner(&[".venv/bin/pip", "install", "--quiet", "--disable-pip-version-check", "pytest==8.3.3"]);
    if pip.code != Some(0) {
        cordon_tests::skip!(cordon_tests::Skip::NoRegistry, "pytest could not be installed from PyPI: {pip:?}");
        return;
    }
    let out = owner(&[bin("cordon").to_str().unwrap(), "init", "--name", "py", "-o", "-", "."]);
    out.assert_code(0);
    let text = out.stdout.clone();
    let file = tmp.path().join("py.toml");
    std::fs::write(&file, &text).unwrap();
    assert_checks_clean(&file, uid);
    assert!(text.contains("Detected: python (.venv)"), "{text}");
    assert!(text.contains(&format!("search_path = [{}", q(root.join(".venv/bin")))), "{text}");
    assert!(text.contains("run_as = { owner_of = \"working_dir\" }"), "{text}");

    let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("py.toml"), &text).unwrap();
    let d = Daemon::start_in(dir, policies, &["--socket-group", SOCKET_GROUP]);
    let by_owner = agent::cordon(&d.socket, &["run", "py-pytest"]);
    let by_root = d.cordon(&["run", "py-pytest"]);
    for (who, out) in [("the owner", &by_owner), ("root", &by_root)] {
        assert_eq!(out.code, Some(0), "{who}: {out:?}\n{}", d.log_text());
        assert!(out.stdout.contains("2 passed"), "{who}: {out:?}");
    }
    assert!(owned_by_root(&root).is_empty(), "root-owned: {:?}", owned_by_root(&root));
    assert!(!root.join(".pytest_cache").exists(), "no cache written");
}

/// Root running `cordon init` in a developer's project: the policy is the owner's (run_as, allow
/// names the owner), and nothing is created in a tree another account controls (it says what to
/// make instead); the owner's own run creates it.
#[test]
fn root_running_init_in_a_developers_project_writes_nothing_there() {
    require_root!("the project must belong to another account");
    agent::ensure();
    let (uid, gid) = (agent::id("-u", AGENT), agent::id("-g", AGENT));
    let tmp = open_tempdir();
    let t = tmp.path();
    let root = t.join("dev");
    write(&root.join("Cargo.toml"), "[package]\nname = \"d\"\nversion = \"0.1.0\"\n");
    write(&root.join("Cargo.lock"), "");
    exe(&t.join("rust/bin/cargo"), "#!/bin/sh\n");
    let out = Command::new("chown").args(["-R", &format!("{uid}:{gid}")]).arg(&root).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let path = format!("{}:/usr/bin:/bin", t.join("rust/bin").display());
    let (doc, text, out) = detect(t, &root, &path, t);
    assert!(!root.join("target").exists(), "root made nothing in the owner's tree: {out:?}");
    assert!(
        out.stdout
            .contains(&format!("{} does not exist: create it as the project's owner", root.join("target").display())),
        "{out:?}"
    );
    let d = doc["defaults"].as_table().unwrap();
    assert_eq!(d["run_as"]["owner_of"].as_str(), Some("working_dir"), "{text}");
    assert_eq!(strs(&d["allow"]["users"]), [AGENT], "{text}");
}

/// A git repository: read-only git tools, run as the owner (git sees its owner: no "dubious
/// ownership" for a root caller), without the owner's ~/.gitconfig; a project of only a
/// repository is detected by it.
#[test]
fn a_git_repository_gets_read_only_git_tools_that_run_as_its_owner() {
    require_root!("the owner identity needs a root daemon and a test user");
    if !Path::new("/usr/bin/git").exists() {
        cordon_tests::skip!(cordon_tests::Skip::MissingTool("git"), "git is not installed in /usr/bin");
        return;
    }
    agent::ensure();
    let (uid, gid) = (agent::id("-u", AGENT), agent::id("-g", AGENT));
    let tmp = open_tempdir();
    let home = tmp.path().join("home");
    let root = home.join("repo");
    write(&root.join("lib.txt"), "one\n");
    // The owner's ~/.gitconfig names a pager and a hook path that must not apply.
    write(
        &home.join(".gitconfig"),
        "[core]\n\tpager = false\n\thooksPath = /nonexistent\n[log]\n\tshowSignature = true\n",
    );
    let out = Command::new("chown").args(["-R", &format!("{uid}:{gid}")]).arg(&home).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let owner = |args: &[&str]| -> Output {
        Command::new("setpriv")
            .args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--"])
            .args(args)
            .current_dir(&root)
            .env("HOME", &home)
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap()
            .into()
    };
    owner(&["git", "init", "-q", "-b", "main"]).assert_code(0);
    owner(&["git", "add", "lib.txt"]).assert_code(0);
    owner(&["git", "-c", "user.name=dev", "-c", "user.email=dev@example.com", "commit", "-q", "-m", "first commit"])
        .assert_code(0);
    write(&root.join("lib.txt"), "one\ntwo\n");
    let out = owner(&[bin("cordon").to_str().unwrap(), "init", "--name", "repo", "-o", "-", "."]);
    out.assert_code(0);
    let text = out.stdout.clone();
    let file = tmp.path().join("repo.toml");
    std::fs::write(&file, &text).unwrap();
    assert_checks_clean(&file, uid);
    let doc: toml::Table = text.parse().unwrap();
    assert_eq!(tool_names(&doc), ["repo-git-diff", "repo-git-log", "repo-git-status"], "{text}");
    assert!(doc["defaults"].get("write").is_none(), "read-only: {text}");
    let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("repo.toml"), &text).unwrap();
    let d = Daemon::start_in(dir, policies, &["--socket-group", SOCKET_GROUP]);
    for (tool, want) in [("repo-git-log", "first commit"), ("repo-git-status", " M lib.txt"), ("repo-git-diff", "+two")]
    {
        let by_owner = agent::cordon(&d.socket, &["run", tool]);
        let by_root = d.cordon(&["run", tool]);
        for (who, out) in [("the owner", &by_owner), ("root", &by_root)] {
            assert_eq!(out.code, Some(0), "{tool} by {who}: {out:?}\n{}", d.log_text());
            assert!(out.stdout.contains(want), "{tool} by {who}: {out:?}");
        }
    }
    assert!(owned_by_root(&root).is_empty(), "root-owned: {:?}", owned_by_root(&root));
    drop(d);
    // Without GIT_CONFIG_GLOBAL, git reads the owner's ~/.gitconfig, which the sandbox does not
    // grant: the setting is what makes the tools work for a developer who has one.
    let without: String =
        text.lines().filter(|l| !l.starts_with("GIT_CONFIG_GLOBAL")).map(|l| format!("{l}\n")).collect();
    let d = Daemon::start_with(&[("repo.toml", &without)], &["--socket-group", SOCKET_GROUP]);
    let out = agent::cordon(&d.socket, &["run", "repo-git-log"]);
    assert_eq!(out.code, Some(128), "{out:?}");
}

/// `--json` reports what was detected, the tools, what was left out and (with `-o -`) the policy;
/// yarn's lock file picks `yarn test` with the yarn on PATH.
#[test]
fn json_report_and_yarn() {
    let tmp = open_tempdir();
    let t = tmp.path();
    let root = t.join("y");
    write(&root.join("package.json"), r#"{"scripts": {"test": "mocha"}, "devDependencies": {"mocha": "10.7.3"}}"#);
    write(&root.join("yarn.lock"), "");
    exe(&root.join("node_modules/mocha/bin/mocha.js"), "#!/usr/bin/env node\n");
    symlink("../mocha/bin/mocha.js", &root.join("node_modules/.bin/mocha"));
    write(&root.join("go.mod"), "module m\n");
    exe(&t.join("pm/yarn"), "#!/bin/sh\n");
    let path = format!("/usr/bin:/bin:{}", t.join("pm").display());
    let out = init_in(t, &[root.to_str().unwrap(), "--name", "y", "--json", "-o", "-"], &path, t);
    out.assert_code(0);
    let j = out.json();
    assert_eq!(j["detected"], serde_json::json!(["node (yarn)"]), "{j}");
    assert_eq!(j["tools"], serde_json::json!(["y-yarn-test"]), "{j}");
    assert!(j["left_out"][0].as_str().unwrap().starts_with("go.mod:"), "{j}");
    let doc: toml::Table = j["policy"].as_str().unwrap().parse().unwrap();
    assert_eq!(strs(&doc["tools"]["y-yarn-test"]["command"]), ["yarn", "test"]);
    assert_eq!(strs(&doc["defaults"]["exec"]), [root.join("node_modules/mocha").to_str().unwrap()]);
    assert!(doc["defaults"].get("write").is_none(), "yarn test writes no npm cache: {j}");
}
