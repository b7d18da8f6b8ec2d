//! Issue 26, class 6: a cached result never gives a caller what a fresh call would refuse. The
//! cache key holds the caller's groups and the state of every node a path-typed argument, the
//! working directory and the executable resolve through; authorization (with its reload) comes
//! before the cache. Each attack caches an answer, changes the world (chmod the file or a
//! directory above it, retarget a link, edit the executable in place, take the caller out of a
//! group, reload the policy), calls again and asserts the fresh refusal and that no `cache_hit`
//! was written for it; an unchanged world still hits (the `cache_hit` record says so).

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use cordon_tests::agent::{self, AGENT, SOCKET_GROUP};
use cordon_tests::{Daemon, Output, require_root, toml_str};
use serde_json::{Value, json};

/// A group of this module's own, for the membership attacks.
const GROUP: &str = "cordon-t-cachegrp";

struct World {
    d: Daemon,
    /// Root-owned, 0755: the files the tools read.
    data: PathBuf,
}

fn policy(data: &Path, extra: &str) -> String {
    let dd = toml_str(data);
    let bin = toml_str(data.join("bin"));
    let script = toml_str(data.join("bin").join("show"));
    format!(
        r#"version = 1

[defaults]
allow = {{ users = ["{AGENT}"] }}

[tools.show]
description = "prints a file"
reason = "tests"
command = ["/bin/cat", "--", "{{{{file}}}}"]
read = [{dd}]
annotations = {{ read_only = true, idempotent = true }}
cache = {{ ttl = "10m" }}
accept_warnings = ["cache-inputs"]

[tools.show.params.file]
type = "path"
required = true

[tools.script]
description = "prints a file through a script cordond runs as command[0]"
reason = "tests"
command = [{script}, "{{{{file}}}}"]
read = [{dd}]
exec = [{bin}]
annotations = {{ read_only = true, idempotent = true }}
cache = {{ ttl = "10m" }}
accept_warnings = ["cache-inputs"]

[tools.script.params.file]
type = "path"
required = true

[tools.grouped]
description = "prints a file; only for members of a group"
reason = "tests"
command = ["/bin/cat", "--", "{{{{file}}}}"]
read = [{dd}]
annotations = {{ read_only = true, idempotent = true }}
cache = {{ ttl = "10m" }}
accept_warnings = ["cache-inputs"]
allow = {{ groups = ["{GROUP}"] }}

[tools.grouped.params.file]
type = "path"
required = true
{extra}"#
    )
}

fn start() -> World {
    agent::ensure();
    let _ = Command::new("groupadd").args(["-f", GROUP]).output();
    let dir = tempfile::Builder::new().prefix("cordon-cache-").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("bin")).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let show = data.join("bin").join("show");
    std::fs::write(&show, "#!/bin/sh\nexec /bin/cat -- \"$1\"\n").unwrap();
    std::fs::set_permissions(&show, std::fs::Permissions::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), policy(&data, "")).unwrap();
    let d = Daemon::start_in(dir, policies, &["--socket-group", SOCKET_GROUP]);
    World { d, data }
}

/// Who calls: root (an admin; its tool runs as uid 0 with no capabilities) or the agent user.
#[derive(Clone, Copy, Debug)]
enum Who {
    Root,
    Agent,
}

impl World {
    fn call(&self, who: Who, tool: &str, file: &Path) -> (Output, Value) {
        let args = json!({ "file": file }).to_string();
        let argv = ["run", tool, "--args-json", &args, "--json"];
        let out = match who {
            Who::Root => self.d.cordon(&argv),
            Who::Agent => agent::cordon(&self.d.socket, &argv),
        };
        let j = out.json();
        (out, j)
    }

    fn hits(&self) -> usize {
        self.d.audit_records().iter().filter(|r| r["decision"] == "cache_hit").count()
    }

    /// A file in `data` with `content`, owned by the other party (so that a chmod can take
    /// the caller's access away: the tool has no capability to override it).
    fn file(&self, who: Who, name: &str, content: &str) -> PathBuf {
        let path = self.data.join(name);
        std::fs::write(&path, content).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        if let Who::Root = who {
            let uid = agent::id("-u", AGENT);
            std::os::unix::fs::chown(&path, Some(uid), None).unwrap();
        }
        path
    }

    /// Runs once (a miss that runs), then again (a hit, with its `cache_hit` record).
    #[track_caller]
    fn cached(&self, who: Who, tool: &str, file: &Path, content: &str) {
        let (out, first) = self.call(who, tool, file);
        assert_eq!((first["ok"].clone(), first["cached"].clone()), (json!(true), json!(false)), "{out:?}");
        assert_eq!(first["stdout"], content, "{first}");
        let before = self.hits();
        let (_, second) = self.call(who, tool, file);
        assert_eq!(second["cached"], true, "an unchanged world hits: {second}");
        assert_eq!(second["cached_from"], first["invocation_id"], "{second}");
        assert_eq!(self.hits(), before + 1, "the hit has its cache_hit record");
    }

    /// The call after the change ran afresh and the tool was refused reading `file`.
    #[track_caller]
    fn refused_fresh(&self, who: Who, tool: &str, file: &Path) {
        let before = self.hits();
        let (out, j) = self.call(who, tool, file);
        assert_eq!(j["cached"], false, "{who:?}: a changed world must not be served from the cache: {j}");
        assert_eq!((j["ok"].clone(), j["exit_code"].clone()), (json!(false), json!(1)), "{out:?}");
        let stderr = j["stderr"].as_str().unwrap_or_default();
        assert!(stderr.contains(&format!("{}: Permission denied", file.display())), "{who:?}: {j}");
        assert_eq!(self.hits(), before, "no cache_hit record for the refused call");
    }
}

#[test]
fn a_file_made_unreadable_is_refused_fresh_not_served_from_the_cache() {
    require_root!("the agent user, chown, group membership");
    let w = start();
    for who in [Who::Agent, Who::Root] {
        let f = w.file(who, &format!("mode-{who:?}"), "v1");
        w.cached(who, "show", &f, "v1");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        w.refused_fresh(who, "show", &f);
        // Readable again: a fresh run (the state changed again), then hits anew.
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        w.cached(who, "show", &f, "v1");
    }
}

#[test]
fn a_directory_above_the_file_made_untraversable_is_refused_fresh() {
    require_root!("the agent user, chown, group membership");
    let w = start();
    for who in [Who::Agent, Who::Root] {
        let sub = w.data.join(format!("sub-{who:?}"));
        std::fs::create_dir(&sub).unwrap();
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o755)).unwrap();
        if let Who::Root = who {
            std::os::unix::fs::chown(&sub, Some(agent::id("-u", AGENT)), None).unwrap();
        }
        let f = sub.join("f");
        std::fs::write(&f, "inner").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        w.cached(who, "show", &f, "inner");
        // The file itself is untouched: only its directory's mode changed.
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o700)).unwrap();
        w.refused_fresh(who, "show", &f);
    }
}

#[test]
fn a_retargeted_link_or_rewritten_file_is_read_afresh() {
    require_root!("the agent user, chown, group membership");
    let w = start();
    for who in [Who::Agent, Who::Root] {
        let a = w.file(who, &format!("a-{who:?}"), "from a");
        let b = w.file(who, &format!("b-{who:?}"), "from b");
        let link = w.data.join(format!("link-{who:?}"));
        std::os::unix::fs::symlink(&a, &link).unwrap();
        w.cached(who, "show", &link, "from a");
        // The link now leads to another file: the argument is the same string.
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(&b, &link).unwrap();
        let (_, j) = w.call(who, "show", &link);
        assert_eq!((j["cached"].clone(), j["stdout"].clone()), (json!(false), json!("from b")), "{j}");
        // The same size, with its old mtime put back: the change time still tells.
        let before = std::fs::metadata(&b).unwrap();
        std::fs::write(&b, "from B").unwrap();
        let mtime = filetime(&before);
        set_mtime(&b, mtime);
        let (_, j) = w.call(who, "show", &link);
        assert_eq!((j["cached"].clone(), j["stdout"].clone()), (json!(false), json!("from B")), "{j}");
    }
}

#[test]
fn an_executable_changed_in_place_runs_afresh() {
    require_root!("the agent user, chown, group membership");
    let w = start();
    let f = w.file(Who::Agent, "for-script", "script input");
    w.cached(Who::Agent, "script", &f, "script input");
    // The same inode, new content (the pin still matches: dev and inode are unchanged).
    let show = w.data.join("bin").join("show");
    std::fs::write(&show, "#!/bin/sh\nprintf 'changed'\n").unwrap();
    let (out, j) = w.call(Who::Agent, "script", &f);
    assert_eq!((j["cached"].clone(), j["stdout"].clone()), (json!(false), json!("changed")), "{out:?}");
}

#[test]
fn a_caller_taken_out_of_the_allowing_group_is_refused_before_the_cache() {
    require_root!("the agent user, chown, group membership");
    let w = start();
    let run = |args: &[&str]| assert!(Command::new(args[0]).args(&args[1..]).status().unwrap().success(), "{args:?}");
    run(&["gpasswd", "-a", AGENT, GROUP]);
    let f = w.file(Who::Agent, "grouped", "members only");
    w.cached(Who::Agent, "grouped", &f, "members only");
    run(&["gpasswd", "-d", AGENT, GROUP]);
    let before = w.hits();
    let (out, j) = w.call(Who::Agent, "grouped", &f);
    run(&["gpasswd", "-a", AGENT, GROUP]);
    assert_eq!(j["error"]["code"], "PERMISSION_DENIED", "{out:?}");
    let uid = agent::id("-u", AGENT);
    assert!(j["error"]["message"].as_str().unwrap_or_default().contains(&format!("does not admit uid {uid}")), "{j}");
    assert_eq!(w.hits(), before, "no cache_hit for a caller the tool no longer admits");
    let _ = Command::new("gpasswd").args(["-d", AGENT, GROUP]).status();
}

#[test]
fn a_reload_that_removes_the_caller_refuses_it_before_the_cache() {
    require_root!("the agent user, chown, group membership");
    let w = start();
    let f = w.file(Who::Agent, "reloaded", "before the reload");
    w.cached(Who::Agent, "show", &f, "before the reload");
    // The same tool, now only for root's group: the agent is no longer admitted.
    let narrowed =
        policy(&w.data, "").replace(&format!("allow = {{ users = [\"{AGENT}\"] }}"), "allow = { users = [\"root\"] }");
    w.d.write_policy("t.toml", &narrowed);
    w.d.cordon(&["reload"]).assert_code(0);
    let before = w.hits();
    let (out, j) = w.call(Who::Agent, "show", &f);
    assert_eq!(j["error"]["code"], "PERMISSION_DENIED", "{out:?}");
    let uid = agent::id("-u", AGENT);
    assert!(j["error"]["message"].as_str().unwrap_or_default().contains(&format!("does not admit uid {uid}")), "{j}");
    assert_eq!(w.hits(), before, "no cache_hit after the reload took the caller's access");
    // Root is still admitted and runs afresh (a reload starts a new generation).
    let (_, j) = w.call(Who::Root, "show", &f);
    assert_eq!((j["ok"].clone(), j["cached"].clone()), (json!(true), json!(false)), "{j}");
}

fn filetime(m: &std::fs::Metadata) -> (i64, i64) {
    use std::os::unix::fs::MetadataExt as _;
    (m.mtime(), m.mtime_nsec())
}

/// `touch -m -d @SECS.NANOS`: puts a file's mtime back.
fn set_mtime(path: &Path, (secs, nanos): (i64, i64)) {
    let stamp = format!("@{secs}.{nanos:09}");
    let ok = Command::new("touch").args(["-m", "-d", &stamp]).arg(path).status().unwrap().success();
    assert!(ok, "touch -d {stamp}");
}
