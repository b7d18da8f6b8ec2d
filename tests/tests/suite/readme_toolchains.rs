//! The "Running real toolchains" chapter (docs/toolchains.md), run as written: its code
//! blocks are read from docs/toolchains.md, not copied, so an example that changes is the example that
//! runs, and one that stops working (or is added without a test) fails here.
//!
//! Each `### ` example is, in order: an optional ```sh block the developer runs in their shell
//! (run here as one script by the project's owner, the test user, with `HOME` its own
//! directory), a ```toml block (a whole policy when it has `version = 1`, else lines that the
//! `[defaults]` of the file `cordon init` wrote hold already: the file is installed unedited), a ```sh block of commands run in the project
//! one by one (`sudo ...` as root, the rest as the owner; `/etc/cordon/policies.d/` is the test
//! daemon's policy directory), and a ```text block: the lines each `cordon run` prints (or, when
//! the block ends with another command, what that prints), `…` standing for anything within a
//! line. The README's `/home/alice/src/tiny` is the test's project and `"alice"` the test user.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cordon_tests::agent::{self, AGENT, SOCKET_GROUP};
use cordon_tests::{Daemon, bin, require_root};

const SECTION: &str = "## Running real toolchains";
/// The examples, by the first word of their heading, each run by a test below.
const EXAMPLES: [&str; 5] = ["Rust:", "Python:", "Node:", "C:", "git:"];

#[derive(Debug, Default)]
struct Example {
    heading: String,
    setup: Option<String>,
    toml: String,
    commands: Vec<String>,
    expected: Vec<String>,
}

fn readme() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/toolchains.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The section's examples, each with its blocks; panics on a block out of place.
fn examples() -> Vec<Example> {
    let text = readme();
    let start = text.find(&format!("\n{SECTION}\n")).expect("docs/toolchains.md has the section") + 1;
    let rest = &text[start + SECTION.len()..];
    let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    let mut out: Vec<Example> = Vec::new();
    let mut block: Option<(String, Vec<String>)> = None;
    for line in section.lines() {
        if let Some((lang, lines)) = &mut block {
            if line == "```" {
                let ex = out.last_mut().expect("a block under a ### heading");
                let body = lines.join("\n") + "\n";
                match lang.as_str() {
                    "sh" if ex.toml.is_empty() => {
                        assert!(ex.setup.is_none(), "{}: two sh blocks before the toml", ex.heading);
                        ex.setup = Some(body);
                    }
                    "sh" => ex.commands = lines.clone(),
                    "toml" => ex.toml = body,
                    "text" => ex.expected = lines.clone(),
                    other => panic!("{}: a ```{other} block", ex.heading),
                }
                block = None;
            } else {
                lines.push(line.to_string());
            }
        } else if let Some(heading) = line.strip_prefix("### ") {
            out.push(Example { heading: heading.to_string(), ..Example::default() });
        } else if let Some(lang) = line.strip_prefix("```")
            && !out.is_empty()
        {
            block = Some((lang.to_string(), Vec::new()));
        }
    }
    out
}

fn example(first_word: &str) -> Example {
    examples().into_iter().find(|e| e.heading.starts_with(first_word)).unwrap_or_else(|| {
        panic!("docs/toolchains.md's {SECTION:?} has no example whose heading starts with {first_word:?}")
    })
}

#[test]
fn every_readme_toolchain_example_is_complete_and_run_by_a_test() {
    let all = examples();
    let headings: Vec<&str> = all.iter().map(|e| e.heading.as_str()).collect();
    assert_eq!(
        headings.iter().map(|h| h.split_whitespace().next().unwrap()).collect::<Vec<_>>(),
        EXAMPLES,
        "the examples of docs/toolchains.md's {SECTION:?} and the tests of readme_toolchains.rs differ: {headings:?}"
    );
    for e in &all {
        assert!(!e.toml.is_empty() && !e.expected.is_empty(), "{}: a toml and a text block", e.heading);
        let owner = format!("cordon run {}", tool_of(e));
        assert!(
            e.commands.iter().any(|c| c.starts_with(&owner))
                && e.commands.iter().any(|c| c.starts_with(&format!("sudo {owner}"))),
            "{}: runs the tool as the owner and as root: {:?}",
            e.heading,
            e.commands
        );
        assert!(e.toml.contains("run_as = { owner_of = \"working_dir\" }"), "{}: the owner identity", e.heading);
        assert!(e.commands[0].starts_with("sudo install -m 0644 "), "{}: installs first: {:?}", e.heading, e.commands);
    }
}

/// The tool an example runs: the word after the first `cordon run`.
fn tool_of(e: &Example) -> String {
    let line = e.commands.iter().find_map(|c| c.strip_prefix("cordon run ")).expect("a cordon run line");
    line.split_whitespace().next().unwrap().to_string()
}

/// The README's `line` with `…` for anything: found in one line of `output`.
fn matches(line: &str, output: &str) -> bool {
    output.lines().any(|have| {
        let mut rest = have;
        line.split('…').all(|piece| match rest.find(piece) {
            Some(i) => {
                rest = &rest[i + piece.len()..];
                true
            }
            None => false,
        })
    })
}

struct Run {
    tmp: tempfile::TempDir,
    home: PathBuf,
    project: PathBuf,
    path: String,
}

impl Run {
    fn new() -> Run {
        agent::ensure();
        let tmp = tempfile::Builder::new().prefix("cordon-readme-tc-").tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let home = tmp.path().join("home");
        let project = home.join("src/tiny");
        std::fs::create_dir_all(&project).unwrap();
        // `cordon` is the one just built, for the owner's shell as for root's.
        let bin_dir = tmp.path().join("bin");
        std::fs::create_dir(&bin_dir).unwrap();
        std::os::unix::fs::symlink(bin("cordon"), bin_dir.join("cordon")).unwrap();
        let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
        Run { tmp, home, project, path }
    }

    /// Gives the owner its home and the project (after the test wrote the project's files).
    fn chown_to_owner(&self) {
        let out = Command::new("chown").args(["-R", &format!("{AGENT}:{AGENT}")]).arg(&self.home).output().unwrap();
        assert!(out.status.success(), "{out:?}");
    }

    /// `sh -ec SCRIPT` in `dir`, as the owner or as root, with the daemon's socket.
    fn sh(&self, as_root: bool, dir: &Path, script: &str, socket: Option<&Path>) -> (bool, String) {
        let mut c = if as_root {
            let mut c = Command::new("sh");
            c.env("HOME", "/root");
            c
        } else {
            let mut c = Command::new("setpriv");
            c.args(["--reuid", AGENT, "--regid", AGENT, "--init-groups", "--", "sh"]);
            c.env("HOME", &self.home).env("USER", AGENT).env("LOGNAME", AGENT);
            c
        };
        c.args(["-ec", script]).current_dir(dir).env("PATH", &self.path).stdin(Stdio::null());
        c.env_remove("VIRTUAL_ENV");
        match socket {
            Some(s) => c.env("CORDON_SOCKET", s),
            None => c.env_remove("CORDON_SOCKET"),
        };
        let out = c.output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    }

    /// The owner can run `script` (a toolchain it can read), or the reason it cannot.
    fn owner_can(&self, script: &str) -> Result<(), String> {
        let (ok, said) = self.sh(false, &self.home, script, None);
        if ok { Ok(()) } else { Err(said) }
    }

    /// Runs the example: the owner's setup, the policy, then each command; `before_run` is called
    /// before each `cordon run` (e.g. the change a commit records). Returns the daemon.
    fn example(&self, e: &Example, before_run: &dyn Fn(&Path)) -> Daemon {
        let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
        let policies = dir.path().join("policies");
        std::fs::create_dir(&policies).unwrap();
        let d = Daemon::start_in(dir, policies.clone(), &["--socket-group", SOCKET_GROUP]);
        if let Some(setup) = &e.setup {
            let (ok, said) = self.sh(false, &self.home, setup, None);
            assert!(ok, "{}: the owner's setup failed:\n{setup}\n{said}", e.heading);
        }
        // The policy file: the one the install line names, in the project.
        let file = e.commands[0]
            .strip_prefix("sudo install -m 0644 ")
            .and_then(|l| l.split_whitespace().next())
            .map(|f| self.project.join(f))
            .unwrap();
        let project = self.project.to_str().unwrap();
        let toml = e.toml.replace("/home/alice/src/tiny", project).replace("[\"alice\"]", &format!("[\"{AGENT}\"]"));
        if toml.contains("version = 1") {
            std::fs::write(&file, toml).unwrap();
            let (uid, gid) = (agent::id("-u", AGENT), agent::id("-g", AGENT));
            std::os::unix::fs::chown(&file, Some(uid), Some(gid)).unwrap();
        } else {
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|err| panic!("{}: the file cordon init wrote, {}: {err}", e.heading, file.display()));
            let at = text.find("\n[defaults]\n").expect("the policy has [defaults]") + "\n[defaults]\n".len();
            let defaults = &text[at..text[at..].find("\n[").map_or(text.len(), |i| at + i)];
            for want in toml.lines().filter(|l| !l.trim().is_empty()) {
                assert!(
                    defaults.lines().any(|l| l == want),
                    "{}: the [defaults] cordon init wrote lack {want:?}:\n{text}",
                    e.heading
                );
            }
            // Installed as written: no warning but those about paths only the owner can replace
            // (the owner's tree), which the owner identity makes moot.
            crate::init::assert_checks_clean(&file, agent::id("-u", AGENT));
        }
        let expected_of_last = !e.commands.last().unwrap().contains("cordon run ");
        let mut last = String::new();
        for line in &e.commands {
            let line = line.replace("/etc/cordon/policies.d/", &format!("{}/", policies.display()));
            let as_root = line.starts_with("sudo ");
            let command = line.replace("sudo ", "");
            let runs = command.starts_with("cordon run ");
            if runs {
                before_run(&self.project);
            }
            let (ok, said) = self.sh(as_root, &self.project, &command, Some(&d.socket));
            let who = if as_root { "root" } else { AGENT };
            assert!(ok, "{}: `{line}` as {who} failed:\n{said}\n{}", e.heading, d.log_text());
            if runs && !expected_of_last {
                for want in &e.expected {
                    assert!(matches(want, &said), "{}: `{line}` as {who} did not print {want:?}:\n{said}", e.heading);
                }
            }
            last = said;
        }
        if expected_of_last {
            for want in &e.expected {
                assert!(matches(want, &last), "{}: the last command did not print {want:?}:\n{last}", e.heading);
            }
        }
        // Both runs ran as the owner (the root caller's too), and all they made is the owner's.
        let uid = agent::id("-u", AGENT);
        let started: Vec<_> = d.audit_records().into_iter().filter(|r| r["decision"] == "started").collect();
        assert_eq!(started.len(), e.commands.iter().filter(|c| c.contains("cordon run ")).count(), "{started:?}");
        for r in &started {
            assert_eq!(
                (r["run_as"]["uid"].as_u64(), r["run_as"]["source"].as_str()),
                (Some(uid.into()), Some("owner of working_dir")),
                "{r}"
            );
        }
        let mut stack = vec![self.home.clone()];
        while let Some(p) = stack.pop() {
            let m = std::fs::symlink_metadata(&p).unwrap();
            assert_eq!(m.uid(), uid, "{}: {} belongs to the owner", e.heading, p.display());
            if m.is_dir() {
                stack.extend(std::fs::read_dir(&p).unwrap().map(|x| x.unwrap().path()));
            }
        }
        d
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn readme_rust_example_cargo_test_with_doctests() {
    require_root!("the owner identity needs a root daemon and a test user");
    let e = example("Rust:");
    let run = Run::new();
    write(&run.project.join("Cargo.toml"), "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n");
    write(
        &run.project.join("src/lib.rs"),
        "/// Adds one.\n///\n/// ```\n/// assert_eq!(tiny::add_one(1), 2);\n/// ```\npub fn add_one(x: i32) -> i32 {\n    x + 1\n}\n\n\
         #[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() {\n        assert_eq!(super::add_one(2), 3);\n    }\n}\n",
    );
    run.chown_to_owner();
    if let Err(why) = run.owner_can("cargo --version && rustc --version && rustdoc --version") {
        cordon_tests::skip!(
            cordon_tests::Skip::MissingTool("a Rust toolchain"),
            "the README's Rust example, as the owner and as root: no Rust toolchain that {AGENT} (the \
             project's owner) can run ({}); a rustup under /root is not readable by other accounts, Debian's cargo \
             package is (tests/run installs it)",
            why.trim()
        );
        return;
    }
    run.example(&e, &|_| {});
}

/// Where CI installs pytest (tests/run, from the system's Python); `CORDON_TEST_PYTEST_VENV` overrides.
fn pytest_venv() -> PathBuf {
    std::env::var_os("CORDON_TEST_PYTEST_VENV").map_or_else(|| PathBuf::from("/opt/cordon-pytest-venv"), PathBuf::from)
}

#[test]
fn readme_python_example_pytest_with_multiprocessing() {
    require_root!("the owner identity needs a root daemon and a test user");
    let e = example("Python:");
    let run = Run::new();
    write(&run.project.join("conftest.py"), "");
    write(
        &run.project.join("tests/test_tiny.py"),
        "import multiprocessing\n\n\ndef square(x):\n    return x * x\n\n\ndef test_tmp_path(tmp_path):\n    \
         p = tmp_path / \"f.txt\"\n    p.write_text(\"hi\")\n    assert p.read_text() == \"hi\"\n\n\n\
         def test_multiprocessing():\n    with multiprocessing.Pool(2) as pool:\n        \
         assert pool.map(square, [1, 2, 3]) == [1, 4, 9]\n",
    );
    // The developer's virtualenv: CI's, made from the system's Python.
    std::os::unix::fs::symlink(pytest_venv(), run.project.join(".venv")).unwrap();
    run.chown_to_owner();
    let venv = pytest_venv();
    if let Err(why) = run.owner_can(&format!("{}/bin/pytest --version", venv.display())) {
        cordon_tests::skip!(
            cordon_tests::Skip::MissingTool("pytest"),
            "the README's Python example, as the owner and as root: {AGENT} (the project's owner) cannot \
             run {}/bin/pytest ({}); tests/run makes it from /usr/bin/python3",
            venv.display(),
            why.trim()
        );
        return;
    }
    run.example(&e, &|_| {});
}

#[test]
fn readme_node_example_npm_test() {
    require_root!("the owner identity needs a root daemon and a test user");
    let e = example("Node:");
    let run = Run::new();
    crate::init::tape_project(&run.project);
    run.chown_to_owner();
    if let Err(why) = run.owner_can("node --version && npm --version") {
        cordon_tests::skip!(
            cordon_tests::Skip::MissingTool("node and npm"),
            "the README's Node example: {AGENT} cannot run node and npm ({})",
            why.trim()
        );
        return;
    }
    // The developer's `npm ci`, as the owner: tape from the registry, or a stand-in package.
    crate::init::install_tape(&run.project, &|script| {
        run.owner_can(&format!("cd {} && {script}", run.project.display()))
    });
    run.example(&e, &|_| {});
    assert!(run.project.join(".npm-cache").is_dir(), "cordon init made npm's cache");
}

#[test]
fn readme_c_example_make_test() {
    require_root!("the owner identity needs a root daemon and a test user");
    let e = example("C:");
    let run = Run::new();
    write(
        &run.project.join("t.c"),
        "#include <stdio.h>\nint add(int a, int b) { return a + b; }\n\
         int main(void) { if (add(1, 2) != 3) return 1; puts(\"tests ok\"); return 0; }\n",
    );
    write(&run.project.join("Makefile"), "test: t\n\t./t\n\nt: t.c\n\tgcc -o t t.c\n");
    run.chown_to_owner();
    if let Err(why) = run.owner_can("make --version && gcc --version") {
        cordon_tests::skip!(
            cordon_tests::Skip::MissingTool("make and gcc"),
            "the README's C example: {AGENT} cannot run make and gcc ({})",
            why.trim()
        );
        return;
    }
    run.example(&e, &|_| {});
    assert!(run.project.join("t").is_file());
}

#[test]
fn readme_git_example_commit() {
    require_root!("the owner identity needs a root daemon and a test user");
    let e = example("git:");
    let run = Run::new();
    write(&run.project.join("lib.txt"), "add_one\n");
    run.chown_to_owner();
    if let Err(why) = run.owner_can("git --version") {
        cordon_tests::skip!(
            cordon_tests::Skip::MissingTool("git"),
            "the README's git example: {AGENT} cannot run git ({})",
            why.trim()
        );
        return;
    }
    // The owner's repository, with one commit of its own.
    let (ok, said) = run.sh(
        false,
        &run.project,
        "export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1\ngit init -q -b main\ngit add lib.txt\n\
         git -c user.name=alice -c user.email=alice@example.com commit -q -m init",
        None,
    );
    assert!(ok, "{said}");
    let changes = std::cell::Cell::new(0);
    // The agent's change before each commit (as the owner's file, appended to by root).
    let d = run.example(&e, &|project| {
        changes.set(changes.get() + 1);
        let mut text = std::fs::read_to_string(project.join("lib.txt")).unwrap();
        text.push_str(&format!("change {}\n", changes.get()));
        std::fs::write(project.join("lib.txt"), text).unwrap();
    });
    let (ok, log) =
        run.sh(false, &run.project, "GIT_CONFIG_GLOBAL=/dev/null git log --format='%an <%ae>|%cn|%s'", None);
    assert!(ok, "{log}");
    let lines: Vec<&str> = log.lines().collect();
    let agent_commit = "tiny agent (cordon) <agent@tiny.invalid>|tiny agent (cordon)|Fix the off-by-one in add_one";
    assert_eq!(lines, [agent_commit, agent_commit, "alice <alice@example.com>|alice|init"], "{log}");
    // Nothing changed since: git's "nothing to commit", exit 1, as the README says.
    let out = agent::cordon(&d.socket, &["run", "tiny-git-commit", "--arg", "message=Nothing"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    drop(d);
    // The message can never be an option, nor two lines: refused before anything runs.
    let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::copy(run.project.join("cordon-tiny-git.toml"), policies.join("git.toml")).unwrap();
    let d = Daemon::start_in(dir, policies, &[]);
    for message in ["--amend", "-nfoo", "two\nlines"] {
        let out = d.cordon(&["run", "tiny-git-commit", "--arg", &format!("message={message}")]);
        assert_eq!(out.code, Some(65), "{message:?}: {out:?}");
        assert!(out.stderr.contains("does not match the pattern"), "{message:?}: {out:?}");
    }
    assert!(d.audit_records().iter().all(|r| r["decision"] != "started"));
    drop(run.tmp);
}
