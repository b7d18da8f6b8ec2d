//! Toolchains and identities (issue 15 items 2 and 3): `search_path` (the tool's PATH, pinned,
//! granted, refused when someone else could change it), `run_as = { owner_of = "working_dir" }`
//! (the project owner's identity for a root caller, never root, only for the owner or root), and
//! the `cordon init --template` policies, each checked with `cordon policy check` and run with
//! the real toolchain through the real daemon against a tiny project.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;

use cordon_tests::agent::{self, AGENT, SOCKET_GROUP};
use cordon_tests::{Daemon, Output, bin, require_root, toml_str as q};
use serde_json::{Value, json};

/// A temporary directory others may traverse (tools run as another account enter it by name).
fn open_tempdir() -> tempfile::TempDir {
    let t = tempfile::Builder::new().prefix("cordon-tc-").tempdir().unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    t
}

fn mkdir(path: &Path, mode: u32) -> PathBuf {
    std::fs::create_dir_all(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    path.to_path_buf()
}

fn script(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn check(file: &Path) -> Output {
    Command::new(bin("cordon")).args(["policy", "check"]).arg(file).output().unwrap().into()
}

fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
}

fn tool(name: &str, body: &str) -> String {
    format!("\n[tools.{name}]\ndescription = \"t\"\nreason = \"toolchain tests\"\n{body}\n")
}

// ---------------------------------------------------------------------------------------------
// search_path

#[test]
fn search_path_is_the_tools_path_finds_bare_names_and_grants_execute() {
    let tmp = open_tempdir();
    let bin_dir = mkdir(&tmp.path().join("toolchain/bin"), 0o755);
    script(&bin_dir.join("hello"), "#!/bin/sh\necho \"PATH=$PATH\"\n");
    // The same script, named by its absolute path, readable but without the execute grant
    // search_path brings: the sandbox refuses to execute it (so the run above works because of
    // search_path's grant). (The read grant also keeps the host's /tmp, where the script is.)
    let policy = format!(
        "version = 1\n{}{}",
        tool("hello", &format!("command = [\"hello\"]\nsearch_path = [{}, \"/usr/bin\"]", q(&bin_dir))),
        tool(
            "ungranted",
            &format!("command = [\"/usr/bin/env\", {}]\nread = [{}]", q(bin_dir.join("hello")), q(&bin_dir))
        ),
    );
    let d = Daemon::start(&[("t.toml", &policy)]);
    let (out, r) = d.run_json("hello", &json!({}));
    assert_eq!(r["exit_code"], 0, "{out:?}");
    assert_eq!(r["stdout"], format!("PATH={}:/usr/bin\n", bin_dir.display()), "{r}");
    let (out, r) = d.run_json("ungranted", &json!({}));
    assert_eq!(r["exit_code"], 126, "env cannot execute a file outside the grants: {out:?}");
    assert!(r["stderr"].as_str().unwrap().contains("Permission denied"), "{r}");
}

#[test]
fn search_path_that_someone_else_can_write_is_refused() {
    require_root!("a directory owned by another account");
    let tmp = open_tempdir();
    let everyone = mkdir(&tmp.path().join("everyone/bin"), 0o777);
    let group = mkdir(&tmp.path().join("group/bin"), 0o775);
    let agents = mkdir(&tmp.path().join("agents"), 0o755);
    let agents_bin = mkdir(&agents.join("bin"), 0o755);
    chown(&agents, agent::id("-u", AGENT), agent::id("-g", AGENT));
    for dir in [&everyone, &group, &agents_bin] {
        script(&dir.join("hello"), "#!/bin/sh\necho hello\n");
    }
    let mut policy = "version = 1\n".to_string();
    for (name, dir) in [("everyone", &everyone), ("group", &group), ("agents", &agents_bin)] {
        policy.push_str(&tool(name, &format!("command = [\"hello\"]\nsearch_path = [{}, \"/usr/bin\"]", q(dir))));
    }
    // The same account's toolchain for a tool that runs as that account: its own project.
    let project = mkdir(&agents.join("project"), 0o755);
    chown(&project, agent::id("-u", AGENT), agent::id("-g", AGENT));
    policy.push_str(&tool(
        "agents-own",
        &format!(
            "command = [\"hello\"]\nsearch_path = [{}, \"/usr/bin\"]\nworking_dir = {}\n\
             run_as = {{ owner_of = \"working_dir\" }}",
            q(&agents_bin),
            q(&project)
        ),
    ));
    // Another named account: refused when the registry loads.
    policy.push_str(&tool(
        "nobodys",
        &format!("command = [\"hello\"]\nsearch_path = [{}, \"/usr/bin\"]\nrun_as = \"nobody\"", q(&agents_bin)),
    ));
    let d = Daemon::start(&[("t.toml", &policy)]);
    let (out, r) = d.run_json("nobodys", &json!({}));
    assert_eq!(r["error"]["code"], "TOOL_UNAVAILABLE", "{out:?}");
    let message = r["error"]["message"].as_str().unwrap();
    let says = format!(
        "search_path {} is writable by uid {}, but the tool runs as uid 65534",
        agents_bin.display(),
        agent::id("-u", AGENT)
    );
    assert!(message.contains(&says), "{message}");
    let (out, r) = d.run_json("agents-own", &json!({}));
    assert_eq!((r["exit_code"].as_i64(), r["stdout"].as_str()), (Some(0), Some("hello\n")), "{out:?}");
    for (name, says) in [
        ("everyone", format!("search_path {} can be changed by someone other than root", everyone.display())),
        ("group", "is writable by group".to_string()),
    ] {
        let (out, r) = d.run_json(name, &json!({}));
        assert_eq!(r["error"]["code"], "TOOL_UNAVAILABLE", "{name}: {out:?}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.contains(&says), "{name}: {message}");
    }
    // Owned by one account: usable only by a call that runs as that account; a root caller
    // (who runs as root) is refused before anything runs.
    let (out, r) = d.run_json("agents", &json!({}));
    assert_eq!(r["error"]["code"], "TOOL_UNAVAILABLE", "{out:?}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("uid {} ({AGENT}) can change the programs it runs", agent::id("-u", AGENT)))
            && message.contains("runs only as that account"),
        "{message}"
    );
}

/// A daemon on `policy` whose socket the test agent may use.
fn agent_daemon(policy: &str) -> Daemon {
    let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    let policies = mkdir(&dir.path().join("policies"), 0o755);
    std::fs::write(policies.join("t.toml"), policy).unwrap();
    Daemon::start_in(dir, policies, &["--socket-group", SOCKET_GROUP])
}

/// `sp` runs a bare command[0] found in a search_path directory; `sp2` has a shell look the
/// name up in the same search_path; `sp3` names a file its owner can rewrite by absolute path.
fn program_tools(dir: &Path, program: &str) -> String {
    let sp = format!("search_path = [{}, \"/usr/bin\"]\nallow = {{ users = [\"{AGENT}\"] }}", q(dir));
    format!(
        "version = 1\n{}{}{}",
        tool("sp", &format!("command = [\"{program}\"]\n{sp}")),
        tool("sp2", &format!("command = [\"/bin/sh\", \"-c\", \"{program}\"]\n{sp}")),
        tool(
            "sp3",
            &format!("command = [{}]\nexec = [{}]\nallow = {{ users = [\"{AGENT}\"] }}", q(dir.join(program)), q(dir))
        ),
    )
}

fn unavailable_saying(out: &Output, says: &[&str]) {
    let r = out.json();
    assert_eq!(r["error"]["code"], "TOOL_UNAVAILABLE", "{out:?}");
    let message = r["error"]["message"].as_str().unwrap();
    for s in says {
        assert!(message.contains(s), "{s:?} not in: {message}");
    }
}

/// The reviewer's case: a root-owned search_path directory (mode 755) holding a program another
/// account owns. Its owner can rewrite the program, so it is the same as that account writing
/// the directory: the tool is only for calls that run as that account, whether command[0] is
/// the program (`sp`) or a shell finds it by name (`sp2`), or command[0] names it (`sp3`).
#[test]
fn a_program_another_account_owns_in_a_search_path_directory_is_only_for_that_account() {
    require_root!("files owned by other accounts, and an agent caller");
    let tmp = open_tempdir();
    let bin_dir = mkdir(&tmp.path().join("tb/bin"), 0o755);
    let helper = bin_dir.join("helper");
    script(&helper, "#!/bin/sh\necho \"helper as $(id -u)\"\n");
    chown(&helper, 65534, 65534);
    let d = agent_daemon(&program_tools(&bin_dir, "helper"));
    // What nobody puts there would run as the caller: never happens, for root or the agent.
    std::fs::write(&helper, "#!/bin/sh\necho \"PWNED as $(id -u)\"\n").unwrap();
    let said = format!("{} is theirs", helper.display());
    for name in ["sp", "sp2", "sp3"] {
        let out = d.cordon(&["run", name, "--json"]);
        unavailable_saying(&out, &["uid 65534 (nobody) can change the programs it runs", &said, "chown root"]);
        let out = agent::cordon(&d.socket, &["run", name, "--json"]);
        unavailable_saying(
            &out,
            &["uid 65534 (nobody)", &said, &format!("would run as uid {}", agent::id("-u", AGENT))],
        );
    }
    // Run as nobody: its own program, with its own rights.
    let mut policy = String::from("version = 1\n");
    let sp = format!("search_path = [{}, \"/usr/bin\"]\nrun_as = \"nobody\"", q(&bin_dir));
    policy.push_str(&tool("nobodys", &format!("command = [\"/bin/sh\", \"-c\", \"helper\"]\n{sp}")));
    // As another named account: refused when the registry loads, naming the file and the fix.
    policy.push_str(&tool(
        "agents",
        &format!(
            "command = [\"/bin/sh\", \"-c\", \"helper\"]\nsearch_path = [{}, \"/usr/bin\"]\nrun_as = \"{AGENT}\"",
            q(&bin_dir)
        ),
    ));
    let d = Daemon::start(&[("t.toml", &policy)]);
    let (out, r) = d.run_json("nobodys", &json!({}));
    assert_eq!((r["exit_code"].as_i64(), r["stdout"].as_str()), (Some(0), Some("PWNED as 65534\n")), "{out:?}");
    let (out, _) = d.run_json("agents", &json!({}));
    unavailable_saying(
        &out,
        &[
            &format!("{} is owned by uid 65534, but the tool runs as uid {}", helper.display(), agent::id("-u", AGENT)),
            "`chown root` it or remove it",
        ],
    );
    // The same verdict from `cordon policy check`, which an admin runs before deploying.
    let file = tmp.path().join("t.toml");
    std::fs::write(&file, &policy).unwrap();
    let out = check(&file);
    assert!(out.stdout.contains(&format!("{} is owned by uid 65534", helper.display())), "{out:?}");
}

/// A program the test agent owns in a root-owned directory: the tool is the agent's, usable by
/// the agent's own calls only (root is refused), whatever other programs the directory holds.
#[test]
fn a_program_the_agent_owns_makes_the_tool_the_agents() {
    require_root!("a file owned by the test agent, and an agent caller");
    let tmp = open_tempdir();
    let bin_dir = mkdir(&tmp.path().join("tb/bin"), 0o755);
    script(&bin_dir.join("hello"), "#!/bin/sh\necho \"hello as $(id -u)\"\n");
    let mine = bin_dir.join("mine");
    script(&mine, "#!/bin/sh\necho mine\n");
    chown(&mine, agent::id("-u", AGENT), agent::id("-g", AGENT));
    let d = agent_daemon(&program_tools(&bin_dir, "hello"));
    let agent_uid = agent::id("-u", AGENT);
    for name in ["sp", "sp2"] {
        let out = agent::cordon(&d.socket, &["run", name, "--json"]);
        let r = out.json();
        assert_eq!(r["stdout"], format!("hello as {agent_uid}\n"), "{name}: {out:?}");
        let out = d.cordon(&["run", name, "--json"]);
        unavailable_saying(
            &out,
            &[&format!("uid {agent_uid} ({AGENT})"), &format!("{} is theirs", mine.display()), "would run as uid 0"],
        );
    }
    // command[0] by absolute path names a root-owned file: the directory's other entries do
    // not matter to it (no search_path).
    let out = d.cordon(&["run", "sp3", "--json"]);
    assert_eq!(out.json()["stdout"], "hello as 0\n", "{out:?}");
}

/// A group-writable program in a search_path directory, or what a symlink entry leads to when
/// another account owns it (a root-owned link to /home/nobody/bin/x): the same as the directory.
#[test]
fn a_writable_program_or_a_link_to_another_accounts_file_in_a_search_path_directory() {
    require_root!("files owned by other accounts");
    let tmp = open_tempdir();
    let shared = mkdir(&tmp.path().join("shared/bin"), 0o755);
    script(&shared.join("hello"), "#!/bin/sh\necho hello\n");
    let writable = shared.join("other");
    script(&writable, "#!/bin/sh\necho other\n");
    std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o775)).unwrap();
    // A link in a root directory, to a root-owned file, in a directory nobody owns.
    let theirs = mkdir(&tmp.path().join("home/nobody/bin"), 0o755);
    chown(&theirs, 65534, 65534);
    script(&theirs.join("x"), "#!/bin/sh\necho x\n");
    let linked = mkdir(&tmp.path().join("linked/bin"), 0o755);
    script(&linked.join("hello"), "#!/bin/sh\necho hello\n");
    std::os::unix::fs::symlink(theirs.join("x"), linked.join("x")).unwrap();
    let policy = format!(
        "version = 1\n{}{}",
        tool("shared", &format!("command = [\"hello\"]\nsearch_path = [{}, \"/usr/bin\"]", q(&shared))),
        tool("linked", &format!("command = [\"hello\"]\nsearch_path = [{}, \"/usr/bin\"]", q(&linked))),
    );
    let d = Daemon::start(&[("t.toml", &policy)]);
    let out = d.cordon(&["run", "shared", "--json"]);
    let says = format!(
        "search_path {} holds {}, where {} (mode 775) is writable by group",
        shared.display(),
        writable.display(),
        writable.display()
    );
    unavailable_saying(
        &out,
        &[&says, "`chown root` it and make it writable only by root (`chmod go-w`), or remove it"],
    );
    let out = d.cordon(&["run", "linked", "--json"]);
    unavailable_saying(
        &out,
        &["uid 65534 (nobody) can change the programs it runs", &format!("{} is theirs", theirs.display())],
    );
}

/// command[0]'s real file is looked at again at each call, through its pin: made group-writable,
/// or given to another account, after the registry loaded, it no longer runs for anyone else.
#[test]
fn command0_given_away_after_the_load_is_refused_at_the_call() {
    require_root!("chown to another account");
    let tmp = open_tempdir();
    let dir = mkdir(&tmp.path().join("late/bin"), 0o755);
    let prog = dir.join("prog");
    script(&prog, "#!/bin/sh\necho prog\n");
    let policy = format!("version = 1\n{}", tool("late", &format!("command = [{}]\nexec = [{}]", q(&prog), q(&dir))));
    let d = Daemon::start(&[("t.toml", &policy)]);
    let (out, r) = d.run_json("late", &json!({}));
    assert_eq!(r["stdout"], "prog\n", "{out:?}");
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o775)).unwrap();
    let out = d.cordon(&["run", "late", "--json"]);
    unavailable_saying(
        &out,
        &[&format!("command[0] {}: {} (mode 775) is writable by group", prog.display(), prog.display())],
    );
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    chown(&prog, 65534, 65534);
    let out = d.cordon(&["run", "late", "--json"]);
    unavailable_saying(
        &out,
        &["uid 65534 (nobody) can change the programs it runs", &format!("{} is theirs", prog.display())],
    );
}

#[test]
fn search_path_and_owner_identity_mistakes_are_load_errors() {
    let tmp = open_tempdir();
    for (body, says) in [
        ("command = [\"ls\"]\nsearch_path = []", "search_path is empty"),
        ("command = [\"ls\"]\nsearch_path = [\"/usr/bin\", \"/usr/bin\"]", "lists \"/usr/bin\" twice"),
        ("command = [\"ls\"]\nsearch_path = [\"/opt/a:b\"]", "contains `:`"),
        ("command = [\"ls\"]\nsearch_path = [\"bin\"]", "is relative"),
        ("command = [\"ls\"]\nrun_as = { owner_of = \"working_dir\" }", "but no working_dir"),
        (
            "command = [\"ls\"]\nworking_dir = \"/tmp\"\nrun_as = { owner_of = \"home\" }",
            "the only one is \"working_dir\"",
        ),
    ] {
        let file = tmp.path().join("p.toml");
        std::fs::write(&file, format!("version = 1\n{}", tool("t", body))).unwrap();
        let out = check(&file);
        assert_ne!(out.code, Some(0), "{body}: {out:?}");
        assert!(out.stdout.contains(says) || out.stderr.contains(says), "{body}: {says}: {out:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// run_as = { owner_of = "working_dir" }

fn owner_tool(name: &str, project: &Path, command: &str) -> String {
    tool(
        name,
        &format!(
            "command = {command}\nworking_dir = {p}\nwrite = [{p}]\nrun_as = {{ owner_of = \"working_dir\" }}\n\
             allow = {{ users = [\"{AGENT}\"] }}",
            p = q(project)
        ),
    )
}

#[test]
fn a_root_callers_tool_runs_as_the_projects_owner_with_its_groups_and_writes_as_it() {
    require_root!("run_as = { owner_of = \"working_dir\" } needs a root daemon");
    let tmp = open_tempdir();
    let project = mkdir(&tmp.path().join("project"), 0o755);
    let (uid, gid) = (agent::id("-u", AGENT), agent::id("-g", AGENT));
    chown(&project, uid, gid);
    let command = "[\"sh\", \"-c\", \"id -u; id -g; id -G; mkdir -p out && echo built > out/file\"]";
    let d = Daemon::start(&[("t.toml", &format!("version = 1\n{}", owner_tool("build", &project, command)))]);
    let (out, r) = d.run_json("build", &json!({}));
    assert_eq!(r["exit_code"], 0, "{out:?}");
    let lines: Vec<&str> = r["stdout"].as_str().unwrap().lines().collect();
    assert_eq!(lines[0], uid.to_string(), "{r}");
    assert_eq!(lines[1], gid.to_string(), "{r}");
    let sock_gid = nix::unistd::Group::from_name(SOCKET_GROUP).unwrap().unwrap().gid.as_raw();
    let groups: Vec<u32> = lines[2].split_whitespace().map(|g| g.parse().unwrap()).collect();
    assert!(groups.contains(&sock_gid), "the owner's supplementary group {SOCKET_GROUP} is kept: {r}");
    for made in [project.join("out"), project.join("out/file")] {
        let m = std::fs::metadata(&made).unwrap();
        assert_eq!((m.uid(), m.gid()), (uid, gid), "{} belongs to the owner", made.display());
    }
    let started = d.audit_records().into_iter().find(|r| r["decision"] == "started").unwrap();
    assert_eq!(started["run_as"]["source"], "owner of working_dir", "{started}");
    assert_eq!(started["run_as"]["uid"], uid, "{started}");
}

#[test]
fn the_owner_identity_never_runs_as_root() {
    require_root!("run_as = { owner_of = \"working_dir\" } needs a root daemon");
    let tmp = open_tempdir();
    let project = mkdir(&tmp.path().join("project"), 0o755);
    let d = Daemon::start(&[("t.toml", &format!("version = 1\n{}", owner_tool("t", &project, "[\"touch\", \"x\"]")))]);
    let (out, r) = d.run_json("t", &json!({}));
    assert_eq!(r["error"]["code"], "TOOL_UNAVAILABLE", "{out:?}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("its working_dir {} is owned by root", project.display()))
            && message.contains("never runs a tool as root"),
        "{message}"
    );
    assert!(!project.join("x").exists());
}

#[test]
fn the_owner_identity_is_only_for_the_owner_or_root() {
    require_root!("an agent caller and a project owned by another account");
    let tmp = open_tempdir();
    let theirs = mkdir(&tmp.path().join("theirs"), 0o755);
    chown(&theirs, 65534, 65534);
    let mine = mkdir(&tmp.path().join("mine"), 0o755);
    chown(&mine, agent::id("-u", AGENT), agent::id("-g", AGENT));
    let policy = format!(
        "version = 1\n{}{}",
        owner_tool("theirs", &theirs, "[\"touch\", \"x\"]"),
        owner_tool("mine", &mine, "[\"touch\", \"x\"]")
    );
    let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    let policies = mkdir(&dir.path().join("policies"), 0o755);
    std::fs::write(policies.join("t.toml"), policy).unwrap();
    let d = Daemon::start_in(dir, policies, &["--socket-group", SOCKET_GROUP]);
    // The agent names a tool whose directory nobody owns: refused, nothing runs.
    let out = agent::cordon(&d.socket, &["run", "theirs", "--json"]);
    let r = out.json();
    assert_eq!(r["error"]["code"], "PERMISSION_DENIED", "{out:?}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(message.contains("only nobody (uid 65534) or root may call it"), "{message}");
    assert!(!theirs.join("x").exists());
    // Its own project: runs, as itself.
    let out = agent::cordon(&d.socket, &["run", "mine", "--json"]);
    assert_eq!(out.json()["exit_code"], 0, "{out:?}");
    assert_eq!(std::fs::metadata(mine.join("x")).unwrap().uid(), agent::id("-u", AGENT));
    let denied = d.audit_records().into_iter().find(|r| r["tool"] == "theirs").unwrap();
    assert_eq!(denied["decision"], "denied", "{denied}");
}

// ---------------------------------------------------------------------------------------------
// cordon init --template: the real toolchains through the real daemon

/// `cordon init --template KIND ROOT` with `path` first on PATH: the policy, which must pass
/// `cordon policy check` with no warning and every tool available; then a daemon on it.
fn template(kind: &str, root: &Path, path: Option<&Path>) -> (String, Daemon) {
    let mut c = Command::new(bin("cordon"));
    if let Some(p) = path {
        let old = std::env::var("PATH").unwrap_or_default();
        c.env("PATH", format!("{}:{old}", p.display()));
    }
    let file = root.parent().unwrap().join(format!("{kind}.toml"));
    let out: Output =
        c.args(["init", "--template", kind, "--name", "proj", "-o"]).arg(&file).arg(root).output().unwrap().into();
    out.assert_code(0);
    let text = std::fs::read_to_string(&file).unwrap();
    let checked = check(&file);
    checked.assert_code(0);
    let said = format!("{}{}", checked.stdout, checked.stderr);
    assert!(!said.contains("warning") && !said.contains("unavailable"), "{said}\n{text}");
    assert!(!text.contains("TMPDIR =") && !text.contains("/dev/shm"), "temp space is cordond's own: {text}");
    let d = Daemon::start(&[("t.toml", &text)]);
    (text, d)
}

/// A toolchain program on this machine's PATH, or a skip message.
fn have(program: &'static str) -> bool {
    let ok =
        Command::new("sh").args(["-c", &format!("command -v {program}")]).output().is_ok_and(|o| o.status.success());
    if !ok {
        cordon_tests::skip!(cordon_tests::Skip::MissingTool(program), "{program} is not on PATH");
    }
    ok
}

fn ok_run(d: &Daemon, tool: &str) -> Value {
    let (out, r) = d.run_json(tool, &json!({}));
    assert_eq!(r["exit_code"], 0, "{tool}: {out:?}");
    r
}

/// A tiny crate with a unit test and a doctest, its lock file and target/ (the template's notes).
fn rust_project(root: &Path) {
    mkdir(&root.join("src"), 0o755);
    std::fs::write(root.join("Cargo.toml"), "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n")
        .unwrap();
    std::fs::write(
        root.join("src/lib.rs"),
        "/// Adds one.\n///\n/// ```\n/// assert_eq!(tiny::add_one(1), 2);\n/// ```\npub fn add_one(x: i32) -> i32 {\n    x + 1\n}\n\n\
         #[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() {\n        assert_eq!(super::add_one(2), 3);\n    }\n}\n",
    )
    .unwrap();
    // What the template's notes ask for: the lock file, target/ and the temp dir.
    let lock = Command::new("cargo").args(["generate-lockfile", "--offline"]).current_dir(root).output().unwrap();
    assert!(lock.status.success(), "{lock:?}");
    mkdir(&root.join("target"), 0o755);
}

#[test]
fn rust_template_runs_cargo_test_with_doctests_and_clippy() {
    if !have("cargo") {
        return;
    }
    let tmp = open_tempdir();
    let root = tmp.path().join("proj");
    rust_project(&root);
    let (_, d) = template("rust", &root, None);
    let r = ok_run(&d, "proj-cargo-test");
    let all = format!("{}{}", r["stdout"], r["stderr"]);
    assert!(all.contains("test tests::adds ... ok"), "{all}");
    assert!(all.contains("Doc-tests tiny") && all.contains("src/lib.rs - add_one (line 3) ... ok"), "{all}");
    let r = ok_run(&d, "proj-cargo-clippy");
    assert!(r["stderr"].as_str().unwrap().contains("Checking tiny"), "{r}");
}

/// Where CI installs pytest (a virtualenv, see tests/run); `CORDON_TEST_PYTEST_VENV` overrides.
fn pytest_venv() -> Option<PathBuf> {
    let venv = std::env::var_os("CORDON_TEST_PYTEST_VENV")
        .map_or_else(|| PathBuf::from("/opt/cordon-pytest-venv"), PathBuf::from);
    let ok = venv.join("bin/pytest").is_file();
    if !ok {
        cordon_tests::skip!(
            cordon_tests::Skip::MissingTool("pytest"),
            "no pytest at {}/bin/pytest (tests/run installs it there)",
            venv.display()
        );
    }
    ok.then_some(venv)
}

#[test]
fn python_template_runs_pytest_with_multiprocessing_and_tmp_path() {
    let Some(venv) = pytest_venv() else { return };
    let tmp = open_tempdir();
    let root = tmp.path().join("proj");
    mkdir(&root.join("tests"), 0o755);
    std::fs::write(root.join("conftest.py"), "").unwrap();
    std::fs::write(
        root.join("tests/test_x.py"),
        "import multiprocessing\n\n\ndef square(x):\n    return x * x\n\n\ndef test_tmp_path(tmp_path):\n    \
         p = tmp_path / \"f.txt\"\n    p.write_text(\"hi\")\n    assert p.read_text() == \"hi\"\n\n\n\
         def test_multiprocessing():\n    with multiprocessing.Pool(2) as pool:\n        \
         assert pool.map(square, [1, 2, 3]) == [1, 4, 9]\n",
    )
    .unwrap();
    let (text, d) = template("python", &root, Some(&venv.join("bin")));
    assert!(text.contains(&format!("search_path = [{}", q(venv.join("bin")))), "{text}");
    let r = ok_run(&d, "proj-pytest");
    assert!(r["stdout"].as_str().unwrap().contains("2 passed"), "{r}");
}

#[test]
fn node_template_runs_npm_test_and_node_test() {
    if !have("node") || !have("npm") {
        return;
    }
    let tmp = open_tempdir();
    let root = tmp.path().join("proj");
    mkdir(&root.join("test"), 0o755);
    std::fs::write(
        root.join("package.json"),
        r#"{ "name": "tiny", "version": "1.0.0", "private": true, "scripts": { "test": "node --test" } }"#,
    )
    .unwrap();
    std::fs::write(
        root.join("test/add.test.js"),
        "const test = require('node:test');\nconst assert = require('node:assert');\n\
         test('adds', () => { assert.strictEqual(1 + 1, 2); });\n",
    )
    .unwrap();
    mkdir(&root.join(".npm-cache"), 0o755);
    let (_, d) = template("node", &root, None);
    for tool in ["proj-npm-test", "proj-node-test"] {
        let r = ok_run(&d, tool);
        assert!(r["stdout"].as_str().unwrap().contains("# pass 1"), "{tool}: {r}");
    }
}

#[test]
fn c_template_runs_make_test_with_gcc() {
    if !have("make") || !have("gcc") {
        return;
    }
    let tmp = open_tempdir();
    let root = mkdir(&tmp.path().join("proj"), 0o755);
    std::fs::write(
        root.join("t.c"),
        "#include <stdio.h>\nint add(int a, int b) { return a + b; }\n\
         int main(void) { if (add(1, 2) != 3) return 1; puts(\"tests ok\"); return 0; }\n",
    )
    .unwrap();
    std::fs::write(root.join("Makefile"), "test: t\n\t./t\n\nt: t.c\n\tgcc -o t t.c\n").unwrap();
    let (_, d) = template("c", &root, None);
    let r = ok_run(&d, "proj-make-test");
    assert!(r["stdout"].as_str().unwrap().contains("tests ok"), "{r}");
    assert!(root.join("t").is_file());
}

/// A toolchain directory on PATH instead of rustup's proxies (a standalone install, /opt/rust):
/// rustc needs its PREFIX/lib (librustc_driver, the standard library) readable and the rust-lld
/// it ships there executable, which the template grants; without them rustc cannot even start.
#[test]
fn rust_template_grants_a_standalone_toolchain_its_prefix() {
    if !have("rustc") {
        return;
    }
    let sysroot = Command::new("rustc").args(["--print", "sysroot"]).output().unwrap();
    let sysroot = PathBuf::from(String::from_utf8(sysroot.stdout).unwrap().trim());
    let tmp = open_tempdir();
    let root = tmp.path().join("proj");
    rust_project(&root);
    // No rustup where the template looks (HOME, RUSTUP_HOME): only the toolchain's bin on PATH.
    let file = tmp.path().join("rust.toml");
    let out: Output = Command::new(bin("cordon"))
        .env("PATH", format!("{}:/usr/bin:/bin", sysroot.join("bin").display()))
        .env("HOME", tmp.path())
        .env_remove("RUSTUP_HOME")
        .env_remove("CARGO_HOME")
        .args(["init", "--template", "rust", "--name", "proj", "-o"])
        .arg(&file)
        .arg(&root)
        .output()
        .unwrap()
        .into();
    out.assert_code(0);
    let text = std::fs::read_to_string(&file).unwrap();
    check(&file).assert_code(0);
    assert!(!text.contains("RUSTUP_HOME"), "{text}");
    assert!(text.contains(&format!("read = [{}, {}]", q(&root), q(&sysroot))), "{text}");
    assert!(text.contains(&format!("exec = [{}, {}]", q(root.join("target")), q(&sysroot))), "{text}");
    let d = Daemon::start(&[("t.toml", &text)]);
    let r = ok_run(&d, "proj-cargo-test");
    let all = format!("{}{}", r["stdout"], r["stderr"]);
    assert!(all.contains("test tests::adds ... ok") && all.contains("Doc-tests tiny"), "{all}");
}
